"""Every head as a point at (OV copying score, QK copying score), and one head's eigenvalues.

The paper's weight-space summary of a model: a head whose full OV circuit
``W_E W_OV W_U`` has mostly positive eigenvalues copies the tokens it attends
to; a head whose QK circuit matches a token with itself (or, for an induction
head, with the token after the previous copy: the K-composition term through
a previous-token head) scores high on the other axis. Induction heads sit in
the corner where both are near +1.

All score definitions of :mod:`circuitwidgets.circuits.copying` (``"eigen"``,
``"diagonal"``, ``"topk"``) are computed in Python up front, so switching
between them is front-end only and works in exported HTML. The detector
scores of :func:`circuitwidgets.circuits.head_scores` (previous-token,
induction, duplicate-token) come with them.

Data traits (kernel → view)
---------------------------
``scores`` float32 ``[n_methods, 3, n_layers, n_heads]``: axis 1 is the circuit,
``0 = "ov"``, ``1 = "qk"`` (full QK circuit, token with token), ``2 = "qk_kcomp"``
(the QK K-composition term through the earlier head with the largest raw
K-composition score; NaN in layer 0). ``eigenvalues`` float32 ``[3, n_layers,
n_heads, d_head, 2]`` (real, imaginary; sorted by magnitude). ``kcomp_source``
int32 ``[n_layers, n_heads, 2]`` (the earlier head of the K-composition term;
-1 in layer 0). ``detectors`` float32 ``[3, n_layers, n_heads]`` in the order of
:data:`DETECTORS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, cast

import numpy as np
import torch
import traitlets
from numpy.typing import NDArray

from circuitwidgets.circuits import composition_scores, copying_scores, eigenvalues, head_scores, kcomp_eigenvalues
from circuitwidgets.circuits._checks import check_int, check_model
from circuitwidgets.circuits.copying import eigen_score
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._arrays import NDArrayTrait
from circuitwidgets.widgets._base import CircuitWidget, SelectionIndex, check_selection

__all__ = ["CIRCUITS", "DETECTORS", "METHODS", "EigenScatter", "eigen_scatter_data"]

#: Score definitions, in the order of ``scores``' first axis.
METHODS = ("eigen", "diagonal", "topk")
#: Circuits, in the order of ``scores``' second axis.
CIRCUITS: tuple[Literal["ov", "qk", "qk_kcomp"], ...] = ("ov", "qk", "qk_kcomp")
#: Head detectors, in the order of ``detectors``' first axis.
DETECTORS: tuple[Literal["previous_token", "induction", "duplicate_token"], ...] = (
    "previous_token",
    "induction",
    "duplicate_token",
)


def _sample_tokens(model: CircuitModel, max_tokens: int, seed: int) -> torch.Tensor | None:
    """All tokens (``None``) when the vocabulary is small, else ``max_tokens`` ids drawn without replacement."""
    V = model.cfg.d_vocab
    if V <= max_tokens:
        return None
    generator = torch.Generator().manual_seed(seed)
    ids: torch.Tensor = torch.randperm(V, generator=generator)[:max_tokens].sort().values
    return ids.to(model.device)


def _best_kcomp_sources(model: CircuitModel) -> NDArray[np.int32]:
    """``[L, H, 2]``: for each head of layer >= 1 the earlier head with the largest raw K-composition into it."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = np.full((L, H, 2), -1, dtype=np.int32)
    if L < 2:
        return out
    scores = composition_scores(model, "K")
    for l2 in range(1, L):
        for h2 in range(H):
            column = np.nan_to_num(scores[:l2, :, l2, h2], nan=-np.inf)
            l1, h1 = np.unravel_index(int(np.argmax(column)), column.shape)
            out[l2, h2] = (int(l1), int(h1))
    return out


def _pack_complex(values: NDArray[np.complex128]) -> NDArray[np.float32]:
    return np.stack([values.real, values.imag], axis=-1).astype(np.float32)


def eigen_scatter_data(
    model: CircuitModel,
    *,
    methods: Sequence[str] = METHODS,
    k: int = 5,
    max_tokens: int = 1024,
    seed: int = 0,
) -> dict[str, Any]:
    """Trait values of an :class:`EigenScatter` for ``model``.

    Parameters
    ----------
    model
        The model.
    methods
        Score definitions to precompute (a subset of :data:`METHODS`, in any order).
    k
        ``k`` of the ``"topk"`` rate.
    max_tokens
        ``"topk"`` averages over all tokens when ``d_vocab <= max_tokens``, else over
        ``max_tokens`` tokens drawn without replacement (seeded); its cost is
        ``O(L H n d_vocab d_head)`` for ``n`` evaluated tokens, three circuits.
    seed
        Seed of the token sample and of the detectors' random sequences.

    Returns
    -------
    dict
        ``methods``, ``method_notes``, ``scores``, ``eigenvalues``, ``kcomp_source``,
        ``detectors``, ``model_name`` (module docstring for shapes).
    """
    model = check_model(model, "eigen_scatter_data")
    if isinstance(methods, str) or not isinstance(methods, Sequence):
        raise ArgumentTypeError(f"methods: expected a list of names from {METHODS}, got {type(methods).__name__}")
    methods = list(methods)
    if not methods or any(not isinstance(m, str) or m not in METHODS for m in methods) or len(set(methods)) != len(methods):
        raise ArgumentError(f"methods: expected distinct names from {METHODS}, got {methods!r:.200}")
    k = check_int("k", k, 1, model.cfg.d_vocab + 1)
    max_tokens = check_int("max_tokens", max_tokens, 1)
    seed = check_int("seed", seed, 0, 2**63)
    cfg = model.cfg
    L, H = cfg.n_layers, cfg.n_heads
    sample = _sample_tokens(model, max_tokens, seed)
    n_eval = cfg.d_vocab if sample is None else int(sample.numel())
    scores = np.full((len(methods), len(CIRCUITS), L, H), np.nan, dtype=np.float64)

    eig_ov = eigenvalues(model, "ov")
    eig_qk = eigenvalues(model, "qk")
    sources = _best_kcomp_sources(model)
    eig_kcomp = np.full(eig_ov.shape, np.nan, dtype=np.complex128)
    if L >= 2:
        all_kcomp = kcomp_eigenvalues(model)
        for l2 in range(1, L):
            for h2 in range(H):
                l1, h1 = sources[l2, h2]
                eig_kcomp[l2, h2] = all_kcomp[l1, h1, l2, h2]

    notes: list[str] = []
    for i, method in enumerate(methods):
        if method == "eigen":
            scores[i, 0], scores[i, 1], scores[i, 2] = eigen_score(eig_ov), eigen_score(eig_qk), eigen_score(eig_kcomp)
            notes.append("Σλ / Σ|λ| over the eigenvalues of the full circuit (+1 copying, −1 anti-copying)")
            continue
        for j, circuit in enumerate(CIRCUITS):
            if circuit == "qk_kcomp" and L < 2:
                continue
            scores[i, j] = copying_scores(
                model, circuit, cast(Any, method), k=k, tokens=sample if method == "topk" else None, progress_bar=False
            )
        if method == "diagonal":
            notes.append("fraction of tokens t whose own entry M[t, t] is positive")
        else:
            over = f"all {n_eval:,} tokens" if sample is None else f"{n_eval:,} sampled tokens of {cfg.d_vocab:,}"
            notes.append(f"fraction of tokens t with M[t, t] among the {k} largest of row t, over {over}")

    detectors = np.stack([head_scores(model, kind, seed=seed) for kind in DETECTORS])
    return {
        "methods": methods,
        "method_notes": notes,
        "scores": scores.astype(np.float32),
        "eigenvalues": np.stack([_pack_complex(eig_ov), _pack_complex(eig_qk), _pack_complex(eig_kcomp)]),
        "kcomp_source": sources,
        "detectors": detectors.astype(np.float32),
        "model_name": model.name,
    }


class EigenScatter(CircuitWidget):
    """Every head at (OV copying score, QK copying score); click one for its eigenvalues and detector scores.

    Parameters
    ----------
    model
        The model (omit it to build from trait values, e.g. :func:`eigen_scatter_data`).
    k, max_tokens, seed
        See :func:`eigen_scatter_data`.
    **kwargs
        Initial traits, for example ``method="diagonal"`` or ``selected_layer=1``
        (by default the head with the highest induction score is selected).

    Examples
    --------
    >>> w = EigenScatter(circuitwidgets.load_pretrained("attn-only-2l"))  # doctest: +SKIP
    >>> w.selected_layer, w.selected_head = 1, 2  # doctest: +SKIP
    """

    _view = traitlets.Unicode("eigen").tag(sync=True)
    _from_view = frozenset({"method", "qk_circuit", "selected_layer", "selected_head"})

    model_name = traitlets.Unicode("").tag(sync=True)
    """Name of the model (caption)."""

    methods = traitlets.List(traitlets.Unicode(), default_value=list(METHODS)).tag(sync=True)
    """Score definitions present in ``scores``, in order (a subset of :data:`METHODS`)."""

    method_notes = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """One sentence per method saying what it measures (shown under the plot)."""

    scores = NDArrayTrait(dtype="float32", ndim=4).tag(sync=True)
    """float32 ``[n_methods, 3, n_layers, n_heads]``: copying scores per method and circuit (``ov``, ``qk``, ``qk_kcomp``)."""

    eigenvalues = NDArrayTrait(dtype="float32", ndim=5).tag(sync=True)
    """float32 ``[3, n_layers, n_heads, d_head, 2]``: eigenvalues (real, imaginary) per circuit, by magnitude."""

    kcomp_source = NDArrayTrait(dtype="int32", ndim=3).tag(sync=True)
    """int32 ``[n_layers, n_heads, 2]``: the earlier head of each head's K-composition term (-1 in layer 0)."""

    detectors = NDArrayTrait(dtype="float32", ndim=3).tag(sync=True)
    """float32 ``[3, n_layers, n_heads]``: previous-token, induction and duplicate-token scores."""

    method = traitlets.Unicode("eigen").tag(sync=True)
    """Score definition on the axes, one of ``methods``."""

    qk_circuit = traitlets.Unicode("qk_kcomp").tag(sync=True)
    """Vertical axis: ``"qk"`` (token matches token) or ``"qk_kcomp"`` (through the strongest earlier head)."""

    selected_layer = SelectionIndex("n_layers").tag(sync=True)
    """Layer of the selected head."""

    selected_head = SelectionIndex("n_heads").tag(sync=True)
    """Selected head within its layer."""

    def __init__(
        self, model: CircuitModel | None = None, *, k: int = 5, max_tokens: int = 1024, seed: int = 0, **kwargs: Any
    ) -> None:
        if model is not None:
            model = check_model(model, "EigenScatter")
            data = eigen_scatter_data(model, k=k, max_tokens=max_tokens, seed=seed)
            if model.cfg.n_layers < 2:
                data["qk_circuit"] = "qk"
            data["method"] = data["methods"][0]
            induction = data["detectors"][DETECTORS.index("induction")]
            if induction.size:
                layer, head = np.unravel_index(int(np.nanargmax(induction)), induction.shape)
                data["selected_layer"], data["selected_head"] = int(layer), int(head)
            kwargs = {**data, **kwargs}
        super().__init__(**kwargs)

    @traitlets.default("scores")
    def _default_scores(self) -> NDArray[np.float32]:
        return np.zeros((len(METHODS), 3, 0, 0), dtype=np.float32)

    @traitlets.default("eigenvalues")
    def _default_eigenvalues(self) -> NDArray[np.float32]:
        return np.zeros((3, 0, 0, 0, 2), dtype=np.float32)

    @traitlets.default("kcomp_source")
    def _default_kcomp_source(self) -> NDArray[np.int32]:
        return np.zeros((0, 0, 2), dtype=np.int32)

    @traitlets.default("detectors")
    def _default_detectors(self) -> NDArray[np.float32]:
        return np.zeros((3, 0, 0), dtype=np.float32)

    @traitlets.validate("selected_layer", "selected_head")
    def _validate_selection(self, proposal: traitlets.Bunch) -> int:
        return check_selection(self, proposal)

    @traitlets.validate("method")
    def _validate_method(self, proposal: traitlets.Bunch) -> str:
        value = proposal["value"]
        if value not in self.methods:
            raise traitlets.TraitError(
                f"The 'method' trait of EigenScatter expected one of {self.methods}, got {value!r}"
            )
        return str(value)

    @traitlets.validate("qk_circuit")
    def _validate_qk_circuit(self, proposal: traitlets.Bunch) -> str:
        value = proposal["value"]
        if value not in ("qk", "qk_kcomp"):
            raise traitlets.TraitError(
                f"The 'qk_circuit' trait of EigenScatter expected 'qk' or 'qk_kcomp', got {value!r}"
            )
        return str(value)

    @traitlets.validate("scores")
    def _validate_scores(self, proposal: traitlets.Bunch) -> NDArray[np.float32]:
        s: NDArray[np.float32] = proposal["value"]
        if s.shape[0] != len(self.methods) or s.shape[1] != len(CIRCUITS):
            raise traitlets.TraitError(
                f"The 'scores' trait of EigenScatter expected shape [{len(self.methods)}, {len(CIRCUITS)}, n_layers, n_heads], "
                f"got {list(s.shape)}"
            )
        return s

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return int(self.scores.shape[2])

    @property
    def n_heads(self) -> int:
        """Heads per layer."""
        return int(self.scores.shape[3])

    def score(self, circuit: str = "ov", method: str | None = None) -> NDArray[np.float32]:
        """Scores ``[n_layers, n_heads]`` of ``circuit`` (``"ov"``, ``"qk"``, ``"qk_kcomp"``) under ``method`` (default: shown one)."""
        method = self.method if method is None else method
        if method not in self.methods:
            raise ArgumentError(f"method: expected one of {self.methods}, got {method!r}")
        if circuit not in CIRCUITS:
            raise ArgumentError(f"circuit: expected one of {CIRCUITS}, got {circuit!r}")
        out: NDArray[np.float32] = self.scores[self.methods.index(method), CIRCUITS.index(circuit)]
        return out

    def detector(self, kind: str) -> NDArray[np.float32]:
        """Detector scores ``[n_layers, n_heads]`` of ``kind`` (one of :data:`DETECTORS`)."""
        if kind not in DETECTORS:
            raise ArgumentError(f"kind: expected one of {DETECTORS}, got {kind!r}")
        out: NDArray[np.float32] = self.detectors[DETECTORS.index(kind)]
        return out

    @property
    def selected_eigenvalues(self) -> dict[str, NDArray[np.complex64]]:
        """Eigenvalues of the selected head per circuit (complex, by magnitude; NaN where undefined)."""
        e = self.eigenvalues[:, self.selected_layer, self.selected_head]
        return {c: (e[i, :, 0] + 1j * e[i, :, 1]).astype(np.complex64) for i, c in enumerate(CIRCUITS)}
