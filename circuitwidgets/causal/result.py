"""``Sweep``: one result type for every causal technique, carrying how it was made.

``np.asarray(result)`` is the values, dims in the order of ``result.dims``;
``labels`` names each index (layers ``L0``, heads ``L0H3``, positions with their
token text, neurons); the metric, its clean and corrupted values, the site,
the model, the prompts and the convention say what the numbers mean, so a
view draws any result in one line and a reader can check how it was made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass
class Sweep:
    """The values of a causal technique over its cells, and how they were made.

    Attributes
    ----------
    values
        float array, one axis per entry of ``dims``; NaN where a cell does not exist
        (a path-patching receiver that cannot read its sender).
    dims
        axis names: ``layer``, ``pos``, ``head``, ``neuron``, ``component``,
        ``batch``, or a receiver's ``receiver_layer``/``receiver_head``.
    labels
        per dim, a display string for each index (token strings are untrusted text).
    technique
        ``"activation patching"``, ``"path patching"``, ``"ablation"``,
        ``"attribution patching"``, ``"direct logit attribution"``.
    metric
        the metric's name (``"normalised logit_diff(pos=-1)"``, ``"logit of ' the'"``…).
    clean_value, corrupted_value
        the metric on the clean and the corrupted (or ablated-from) runs.
    site
        the patched activation (``"z"``, ``"resid_pre"`` …), or ``None``.
    convention
        how norms and centring were treated (``"norms recomputed"``,
        ``"final norm's scale frozen from the run, centred"`` …).
    model, prompts
        the model's name; ``{"clean": [...tokens...], "corrupted": [...]}`` per prompt.
    extra
        technique-specific: a logit attribution's ``rest`` (the components outside
        ``values``, so that everything sums to the logit), ``logit``, ``kind`` …
    """

    values: NDArray[np.float64]
    dims: tuple[str, ...]
    labels: dict[str, list[str]]
    technique: str
    metric: str
    clean_value: float | None = None
    corrupted_value: float | None = None
    site: str | None = None
    convention: str = ""
    model: str = ""
    prompts: dict[str, list[list[str]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __array__(self, dtype: Any = None, copy: Any = None) -> NDArray[Any]:
        return self.values if dtype is None else self.values.astype(dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of :attr:`values`."""
        return tuple(self.values.shape)

    def top(self, k: int = 5, absolute: bool = True) -> list[tuple[tuple[str, ...], float]]:
        """The ``k`` strongest cells as ``(labels, value)``, strongest first (by ``|value|`` unless ``absolute=False``)."""
        flat = np.nan_to_num(np.abs(self.values) if absolute else self.values, nan=-np.inf).ravel()
        order = np.argsort(-flat, kind="stable")[:k]
        out = []
        for i in order:
            index = np.unravel_index(int(i), self.values.shape)
            out.append(
                (tuple(self.labels[d][j] for d, j in zip(self.dims, index, strict=True)), float(self.values[index]))
            )
        return out

    def describe(self) -> str:
        """One paragraph a sceptical reader needs: technique, site, metric and its reference values, convention."""
        parts = [f"{self.technique} on {self.model!r}"]
        if self.site:
            parts.append(f"site {self.site!r}")
        parts.append("by " + " × ".join(self.dims))  # names, not a tuple's repr
        parts.append(f"metric {self.metric}")
        if self.clean_value is not None:  # one precision for both, so they read alike
            parts.append(f"clean {self.clean_value:.3f}")
        if self.corrupted_value is not None:
            parts.append(f"corrupted {self.corrupted_value:.3f}")
        if self.convention:
            parts.append(self.convention)
        return "; ".join(parts)

    def __repr__(self) -> str:
        return f"Sweep({self.describe()}, shape={self.shape})"
