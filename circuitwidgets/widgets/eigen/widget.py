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
induction, duplicate-token) come with them. The data are built, all heads at
once, by :mod:`circuitwidgets.widgets.eigen.data`.

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

from typing import Any

import numpy as np
import traitlets
from numpy.typing import ArrayLike, NDArray

from circuitwidgets._checks import check_model
from circuitwidgets.circuits._spectra import eigen_score
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.offset import ReadsQKAtOffset, offset_setting
from circuitwidgets.widgets.core.spec import Size, head_selection, trait_error, view_data, view_setting
from circuitwidgets.widgets.core.traits import Choice, SelectionIndex
from circuitwidgets.widgets.eigen.data import (
    CIRCUITS,
    DETECTORS,
    INDUCTION_MIN,
    METHOD_NOTES,
    METHODS,
    build_eigen_scatter,
    complex_heads,
    detector_arrays,
    eigen_scatter_data,
    pack_complex,
    strongest_induction,
)

__all__ = ["CIRCUITS", "DETECTORS", "INDUCTION_MIN", "METHODS", "EigenScatter", "eigen_scatter_data"]


class EigenScatter(ReadsQKAtOffset, CircuitWidget):
    """Every head at (OV copying score, QK copying score); click one for its eigenvalues and detector scores.

    Parameters
    ----------
    model
        The model (omit it to build from trait values, or use :meth:`from_eigenvalues`).
    k, max_tokens, seed
        See :func:`eigen_scatter_data`.
    **kwargs
        Initial traits, for example ``method="diagonal"`` or ``selected_layer=1``
        (by default the head with the highest induction score is selected).

    Examples
    --------
    >>> w = EigenScatter.from_model(circuitwidgets.load_pretrained("attn-only-2l"))  # doctest: +SKIP
    >>> w.selected_layer, w.selected_head = 1, 2  # doctest: +SKIP
    """

    _view = traitlets.Unicode("eigen").tag(sync=True)
    _prefix = "eigen"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    methods = view_data(traitlets.List(traitlets.Unicode(), default_value=list(METHODS)))
    """Score definitions present in ``scores``, in order (a subset of :data:`METHODS`, or your own)."""

    method_notes = view_data(traitlets.List(traitlets.Unicode()))
    """One sentence per method saying what it measures (shown under the plot)."""

    scores = view_data(NDArrayTrait(dtype="float32", dims=("n_methods", 3, "n_layers", "n_heads")))
    """float32 ``[n_methods, 3, n_layers, n_heads]``: copying scores per method and circuit (``ov``, ``qk``, ``qk_kcomp``)."""

    eigenvalues = view_data(NDArrayTrait(dtype="float32", dims=(3, "n_layers", "n_heads", "d_head", 2)))
    """float32 ``[3, n_layers, n_heads, d_head, 2]``: eigenvalues (real, imaginary) per circuit, by magnitude."""

    kcomp_source = view_data(NDArrayTrait(dtype="int32", dims=("n_layers", "n_heads", 2)))
    """int32 ``[n_layers, n_heads, 2]``: the earlier head of each head's K-composition term (-1 in layer 0)."""

    detectors = view_data(NDArrayTrait(dtype="float32", dims=(3, "n_layers", "n_heads")))
    """float32 ``[3, n_layers, n_heads]``: previous-token, induction and duplicate-token scores."""

    method = view_setting(Choice(choices_from="methods", default_value="eigen"))
    """Score definition on the axes, one of ``methods``."""

    qk_circuit = view_setting(Choice(("qk", "qk_kcomp"), default_value="qk_kcomp"))
    """Vertical axis: ``"qk"`` (token matches token) or ``"qk_kcomp"`` (through the strongest earlier head)."""

    qk_offset = offset_setting()
    """Rotary models: the offset ``Δ = i − j`` the QK circuits are read at (0 unless given; a live kernel
    recomputes when the view's control changes it); -1 for models without rotary layers."""

    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the selected head."""

    selected_head = head_selection(SelectionIndex("n_heads"))
    """Selected head within its layer."""

    n_layers = Size("n_layers")
    n_heads = Size("n_heads")

    def __init__(
        self,
        model: CircuitModel | None = None,
        *,
        k: int = 5,
        max_tokens: int = 1024,
        seed: int = 0,
        offset: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._model: CircuitModel | None = None
        self._options = {"k": k, "max_tokens": max_tokens, "seed": seed}
        if model is not None:
            # (checked here, one frame below the caller, so a model with MLPs warns in this widget's name)
            model = check_model(model, type(self).__name__)
            kwargs = {**self._initial(model, k, max_tokens, seed, offset), **kwargs}
        super().__init__(**kwargs)
        self._model = model  # (after the initial traits: setting qk_offset there must not recompute)

    @classmethod
    def initial(
        cls, model: CircuitModel, *, k: int = 5, max_tokens: int = 1024, seed: int = 0, offset: int | None = None
    ) -> dict[str, Any]:
        """Initial traits for ``model``: :func:`eigen_scatter_data` and the strongest induction head selected."""
        return cls._initial(check_model(model), k, max_tokens, seed, offset)

    @classmethod
    def _initial(cls, model: CircuitModel, k: int, max_tokens: int, seed: int, offset: int | None) -> dict[str, Any]:
        state = build_eigen_scatter(model, k=k, max_tokens=max_tokens, seed=seed, offset=offset)
        if model.cfg.n_layers < 2:
            state["qk_circuit"] = "qk"
        state["method"] = state["methods"][0]
        return {**state, **strongest_induction(state["detectors"], np.asarray(state["scores"])[0, 0])}

    @classmethod
    def from_model(
        cls,
        model: CircuitModel,
        *,
        k: int = 5,
        max_tokens: int = 1024,
        seed: int = 0,
        offset: int | None = None,
        **kwargs: Any,
    ) -> EigenScatter:
        """Same as ``EigenScatter(model, ...)``: every score computed from the model's weights."""
        check_model(model, cls.__name__)
        return cls(model, k=k, max_tokens=max_tokens, seed=seed, offset=offset, **kwargs)

    def _recompute_at_offset(self, model: CircuitModel, offset: int | None) -> None:
        options = self._options
        state = build_eigen_scatter(
            model, k=options["k"], max_tokens=options["max_tokens"], seed=options["seed"], offset=offset
        )
        with self.hold_trait_notifications():
            for name in ("scores", "eigenvalues", "kcomp_source"):
                setattr(self, name, state[name])

    @classmethod
    def from_eigenvalues(
        cls,
        ov: ArrayLike,
        qk: ArrayLike,
        *,
        qk_kcomp: ArrayLike | None = None,
        detectors: dict[str, ArrayLike] | None = None,
        model_name: str = "",
        **kwargs: Any,
    ) -> EigenScatter:
        """A scatter of eigenvalues computed anywhere (TransformerLens' ``FactoredMatrix.eigenvalues``, your own code).

        Parameters
        ----------
        ov, qk
            Complex eigenvalues ``[n_layers, n_heads, d]`` of each head's full OV and
            full QK circuit (for example ``(W_E @ model.OV @ W_U).eigenvalues`` in
            TransformerLens). Scores are the paper's ``Σλ / Σ|λ|``.
        qk_kcomp
            Optional eigenvalues of a K-composition term, shaped like ``qk`` (NaN where undefined).
        detectors
            Optional head scores ``[n_layers, n_heads]`` by name (:data:`DETECTORS`); missing ones are NaN.
        model_name
            Caption.
        **kwargs
            Initial traits.

        Raises
        ------
        ArgumentTypeError, ShapeError
            Naming the argument, what was expected and what was received.
        """
        eig_ov = complex_heads("ov", ov)
        eig_qk = complex_heads("qk", qk, like=eig_ov.shape)
        eig_kcomp = (
            np.full(eig_qk.shape, np.nan, dtype=np.complex128)
            if qk_kcomp is None
            else complex_heads("qk_kcomp", qk_kcomp, like=eig_qk.shape)
        )
        L, H = eig_ov.shape[:2]
        found = detector_arrays(detectors, (L, H))
        state: dict[str, Any] = {
            "methods": ["eigen"],
            "method_notes": [METHOD_NOTES["eigen"]],
            "scores": np.stack([eigen_score(eig_ov), eigen_score(eig_qk), eigen_score(eig_kcomp)])[None].astype(
                np.float32
            ),
            "eigenvalues": np.stack([pack_complex(e) for e in (eig_ov, eig_qk, eig_kcomp)]),
            "kcomp_source": np.full((L, H, 2), -1, dtype=np.int32),
            "detectors": found,
            "method": "eigen",
            "qk_circuit": "qk" if qk_kcomp is None else "qk_kcomp",
            "model_name": model_name,
            **strongest_induction(found, eigen_score(eig_ov)),
        }
        return cls(**{**state, **kwargs})

    @traitlets.validate("scores")
    def _validate_scores(self, proposal: traitlets.Bunch) -> NDArray[np.float32]:
        s: NDArray[np.float32] = proposal["value"]
        if s.shape[0] != len(self.methods):
            raise trait_error(
                self, "scores", f"shape [{len(self.methods)}, {len(CIRCUITS)}, n_layers, n_heads]", str(list(s.shape))
            )
        return s

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
