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
from numpy.typing import ArrayLike, NDArray

from circuitwidgets.circuits import composition_scores, copying_scores, eigenvalues, head_scores, kcomp_eigenvalues
from circuitwidgets.circuits._checks import check_int, check_model
from circuitwidgets.circuits.copying import eigen_score
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._arrays import NDArrayTrait, user_array
from circuitwidgets.widgets._base import CircuitWidget
from circuitwidgets.widgets._offset import ReadsQKAtOffset, engine_offset, offset_setting, resolve_offset
from circuitwidgets.widgets._spec import Size, head_selection, trait_error, view_data, view_setting
from circuitwidgets.widgets._traits import Choice, SelectionIndex

__all__ = ["CIRCUITS", "DETECTORS", "METHODS", "EigenScatter", "eigen_scatter_data"]

#: Score definitions, in the order of ``scores``' first axis.
METHODS = ("eigen", "diagonal", "topk")
#: Circuits, in the order of ``scores``' second axis.
CIRCUITS: tuple[Literal["ov", "qk", "qk_kcomp"], ...] = ("ov", "qk", "qk_kcomp")
#: What a score definition measures, where it does not depend on options.
METHOD_NOTES = {"eigen": "Σλ / Σ|λ| over the eigenvalues of the full circuit (+1 copying, −1 anti-copying)"}
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


def _best_kcomp_sources(model: CircuitModel, offset: int | None) -> NDArray[np.int32]:
    """``[L, H, 2]``: for each head of layer >= 1 the earlier head with the largest raw K-composition into it."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = np.full((L, H, 2), -1, dtype=np.int32)
    if L < 2:
        return out
    scores = composition_scores(model, "K", offset=offset)
    for l2 in range(1, L):
        for h2 in range(H):
            column = np.nan_to_num(scores[:l2, :, l2, h2], nan=-np.inf)
            l1, h1 = np.unravel_index(int(np.argmax(column)), column.shape)
            out[l2, h2] = (int(l1), int(h1))
    return out


def _pack_complex(values: NDArray[np.complex128]) -> NDArray[np.float32]:
    return np.stack([values.real, values.imag], axis=-1).astype(np.float32)


#: Below this induction score no head counts as an induction head (random heads score ~1/n).
INDUCTION_MIN = 0.2


def _strongest_induction(detectors: NDArray[np.float32], ov_scores: NDArray[Any] | None = None) -> dict[str, int]:
    """``selected_layer`` / ``selected_head`` to open on: the strongest induction head, else the strongest copying head.

    A head counts as an induction head from :data:`INDUCTION_MIN`; without one (a
    one-layer model) the head with the largest OV copying score ``ov_scores``
    ``[n_layers, n_heads]`` is chosen, never an anti-copying head picked by noise.
    Returns {} when neither is known.
    """
    induction = detectors[DETECTORS.index("induction")]
    if induction.size and not np.isnan(induction).all() and np.nanmax(induction) >= INDUCTION_MIN:
        layer, head = np.unravel_index(int(np.nanargmax(induction)), induction.shape)
        return {"selected_layer": int(layer), "selected_head": int(head)}
    if ov_scores is not None and ov_scores.size and not np.isnan(ov_scores).all():
        layer, head = np.unravel_index(int(np.nanargmax(ov_scores)), ov_scores.shape)
        return {"selected_layer": int(layer), "selected_head": int(head)}
    if induction.size and not np.isnan(induction).all():
        layer, head = np.unravel_index(int(np.nanargmax(induction)), induction.shape)
        return {"selected_layer": int(layer), "selected_head": int(head)}
    return {}


def _complex_heads(name: str, values: ArrayLike, like: tuple[int, ...] | None = None) -> NDArray[np.complex128]:
    """``values`` as complex ``[n_layers, n_heads, d]`` (numpy or torch), or a typed error naming ``name``."""
    arr = user_array(name, values, "complex128", "eigenvalues [n_layers, n_heads, d]")
    if arr.ndim != 3 or 0 in arr.shape[:2]:
        raise ShapeError(f"{name}: expected eigenvalues [n_layers, n_heads, d], got shape {tuple(arr.shape)}")
    if like is not None and arr.shape[:2] != like[:2]:
        raise ShapeError(f"{name}: expected [{like[0]}, {like[1]}, d] like ov, got shape {tuple(arr.shape)}")
    return arr


def _detector_arrays(detectors: dict[str, ArrayLike] | None, shape: tuple[int, int]) -> NDArray[np.float32]:
    """``[3, n_layers, n_heads]`` in the order of :data:`DETECTORS` (NaN where not given)."""
    out = np.full((len(DETECTORS), *shape), np.nan, dtype=np.float32)
    if detectors is None:
        return out
    if not isinstance(detectors, dict):
        raise ArgumentTypeError(f"detectors: expected a dict of {DETECTORS} → [n_layers, n_heads], got {type(detectors).__name__}")
    for kind, values in detectors.items():
        if kind not in DETECTORS:
            raise ArgumentError(f"detectors: expected keys from {DETECTORS}, got {kind!r:.80}")
        arr = user_array(f"detectors[{kind!r}]", values, "float32", "head scores [n_layers, n_heads]")
        if arr.shape != shape:
            raise ShapeError(f"detectors[{kind!r}]: expected shape {list(shape)} [n_layers, n_heads], got {list(arr.shape)}")
        out[DETECTORS.index(kind)] = arr
    return out


def eigen_scatter_data(
    model: CircuitModel,
    *,
    methods: Sequence[str] = METHODS,
    k: int = 5,
    max_tokens: int = 1024,
    seed: int = 0,
    offset: int | None = None,
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
    offset
        Rotary models: the offset ``Δ = i − j`` at which QK circuits are read
        (default 0, shown in the view; :mod:`circuitwidgets.widgets._offset`).

    Returns
    -------
    dict
        ``methods``, ``method_notes``, ``scores``, ``eigenvalues``, ``kcomp_source``,
        ``detectors``, ``model_name``, ``qk_offset`` (module docstring for shapes).
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
    qk_offset = resolve_offset(model, offset)
    at = engine_offset(qk_offset)
    cfg = model.cfg
    L, H = cfg.n_layers, cfg.n_heads
    sample = _sample_tokens(model, max_tokens, seed)
    n_eval = cfg.d_vocab if sample is None else int(sample.numel())
    scores = np.full((len(methods), len(CIRCUITS), L, H), np.nan, dtype=np.float64)

    eig_ov = eigenvalues(model, "ov")
    eig_qk = eigenvalues(model, "qk", offset=at)
    sources = _best_kcomp_sources(model, at)
    eig_kcomp = np.full(eig_ov.shape, np.nan, dtype=np.complex128)
    if L >= 2:
        all_kcomp = kcomp_eigenvalues(model, offset=at)
        for l2 in range(1, L):
            for h2 in range(H):
                l1, h1 = sources[l2, h2]
                eig_kcomp[l2, h2] = all_kcomp[l1, h1, l2, h2]

    notes: list[str] = []
    for i, method in enumerate(methods):
        if method == "eigen":
            scores[i, 0], scores[i, 1], scores[i, 2] = eigen_score(eig_ov), eigen_score(eig_qk), eigen_score(eig_kcomp)
            notes.append(METHOD_NOTES["eigen"])
            continue
        for j, circuit in enumerate(CIRCUITS):
            if circuit == "qk_kcomp" and L < 2:
                continue
            scores[i, j] = copying_scores(
                model, circuit, cast(Any, method), k=k, tokens=sample if method == "topk" else None, progress_bar=False,
                offset=at,
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
        "qk_offset": qk_offset,
    }


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
            kwargs = {**self.initial(model, k=k, max_tokens=max_tokens, seed=seed, offset=offset), **kwargs}
        super().__init__(**kwargs)
        self._model = model  # (after the initial traits: setting qk_offset there must not recompute)

    @classmethod
    def initial(
        cls, model: CircuitModel, *, k: int = 5, max_tokens: int = 1024, seed: int = 0, offset: int | None = None
    ) -> dict[str, Any]:
        """Initial traits for ``model``: :func:`eigen_scatter_data` and the strongest induction head selected."""
        model = check_model(model, cls.__name__)
        state = eigen_scatter_data(model, k=k, max_tokens=max_tokens, seed=seed, offset=offset)
        if model.cfg.n_layers < 2:
            state["qk_circuit"] = "qk"
        state["method"] = state["methods"][0]
        return {**state, **_strongest_induction(state["detectors"], np.asarray(state["scores"])[0, 0])}

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
        state = eigen_scatter_data(model, k=options["k"], max_tokens=options["max_tokens"], seed=options["seed"], offset=offset)
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
        eig_ov = _complex_heads("ov", ov)
        eig_qk = _complex_heads("qk", qk, like=eig_ov.shape)
        eig_kcomp = (
            np.full(eig_qk.shape, np.nan, dtype=np.complex128)
            if qk_kcomp is None
            else _complex_heads("qk_kcomp", qk_kcomp, like=eig_qk.shape)
        )
        L, H = eig_ov.shape[:2]
        found = _detector_arrays(detectors, (L, H))
        state: dict[str, Any] = {
            "methods": ["eigen"],
            "method_notes": [METHOD_NOTES["eigen"]],
            "scores": np.stack([eigen_score(eig_ov), eigen_score(eig_qk), eigen_score(eig_kcomp)])[None].astype(np.float32),
            "eigenvalues": np.stack([_pack_complex(e) for e in (eig_ov, eig_qk, eig_kcomp)]),
            "kcomp_source": np.full((L, H, 2), -1, dtype=np.int32),
            "detectors": found,
            "method": "eigen",
            "qk_circuit": "qk" if qk_kcomp is None else "qk_kcomp",
            "model_name": model_name,
            **_strongest_induction(found, eigen_score(eig_ov)),
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
