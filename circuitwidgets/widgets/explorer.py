"""CircuitExplorer: every view of a model in one widget, linked in the front end.

One widget holds the data of the eigenvalue scatter, the skip-trigram table,
the composition map, term importance and the attention patterns of a text.
Selecting a head in any view updates the others in the browser (so linking
also works in exported HTML, with no kernel) and the kernel traits
``selected_layer`` / ``selected_head``.

State layout
------------
Each view's data (kernel → view) is one dictionary trait, ``<view>_data``,
whose arrays travel as binary buffers. What a view can change is a flat trait
named ``<view>_<name>`` (``trigram_source_token``, ``composition_selected_edge``,
…), except the head selection, which all views share. In the front end each
view gets a model adapter that maps its own trait names onto these, so the
views run unchanged inside the explorer (``js/src/lib/scoped.ts``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import traitlets

from circuitwidgets.circuits._checks import check_model
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._arrays import array_to_json
from circuitwidgets.widgets._base import NONE, CircuitWidget, SelectionIndex, check_selection
from circuitwidgets.widgets.attention import AttentionPatterns
from circuitwidgets.widgets.composition import KINDS, composition_map_data, edge_error
from circuitwidgets.widgets.eigen import DETECTORS, eigen_scatter_data
from circuitwidgets.widgets.skip_trigrams import MAX_QUERY_CHARS, TrigramSource, listing, skip_trigram_data
from circuitwidgets.widgets.term_importance import term_importance_data

__all__ = ["CircuitExplorer", "attention_state"]

#: Most distinct tokens of the text precomputed as skip-trigram sources.
MAX_TEXT_SOURCES = 48

_TRIGRAM_DATA_KEYS = (
    "token_ids",
    "token_strs",
    "rows",
    "row_values",
    "profile_sources",
    "profile_tokens",
    "profile_values",
    "ready",
    "extra_sources",
)


def _data_to_json(value: dict[str, Any] | None, widget: object = None) -> dict[str, Any] | None:
    """Serialise a view's data dictionary: numpy arrays become binary buffers."""
    if value is None:
        return None
    return {key: (array_to_json(v) if isinstance(v, np.ndarray) else v) for key, v in value.items()}


def _read_only(value: Any, widget: object = None) -> Any:
    raise TypeError("view data is sent by the kernel only; the view cannot change it")


_data_serialization = {"to_json": _data_to_json, "from_json": _read_only}


#: Attention-view traits the explorer keeps as its own ``attention_<name>`` traits (not data).
_ATTENTION_OWN = ("pattern_kind", "show_diagonals")


def attention_state(model: CircuitModel, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(data, own)`` of an :class:`AttentionPatterns` for ``model`` on ``text``.

    Built by the attention widget's own constructor (not streamed); ``data``
    holds its data traits serialised for the view, ``own`` the view settings the
    explorer keeps as ``attention_<name>`` traits. Its selection traits
    (``selected_*``) are left out: the explorer shares or prefixes them.
    """
    widget = AttentionPatterns.from_model(model, text, stream=False)
    base = set(CircuitWidget.class_trait_names(sync=True))
    keys = [
        name
        for name in widget.trait_names(sync=True)
        if name not in base
        and not name.startswith("_")
        and not name.startswith("selected_")
        and name not in _ATTENTION_OWN
    ]
    data: dict[str, Any] = widget.get_state(keys)
    own = {name: getattr(widget, name) for name in _ATTENTION_OWN if widget.has_trait(name)}
    widget.close()
    return data, own


class CircuitExplorer(CircuitWidget):
    """All views of a model on a text, linked: choose a head anywhere and the others follow.

    Parameters
    ----------
    model
        The model.
    text
        Text for the attention patterns and term importance (its tokens are also
        precomputed as skip-trigram sources).
    k, profile_k
        Skip-trigram rows per circuit and per source (:func:`~circuitwidgets.widgets.skip_trigrams.skip_trigram_data`).
    trigram_heads
        Heads whose skip-trigrams are precomputed (default all; others are computed
        when selected in a live kernel).
    max_tokens, seed
        Token sample of the top-k copying rate, seed of the detectors
        (:func:`~circuitwidgets.widgets.eigen.eigen_scatter_data`).
    **kwargs
        Initial traits (for example ``selected_layer=1, selected_head=2``; the
        default selection is the head with the highest induction score).
    """

    _view = traitlets.Unicode("explorer").tag(sync=True)
    _from_view = frozenset(
        {
            "selected_layer",
            "selected_head",
            "eigen_method",
            "eigen_qk_circuit",
            "trigram_source_token",
            "trigram_source_query",
            "trigram_selected_row",
            "composition_subtract_baseline",
            "composition_kind",
            "composition_n_edges",
            "composition_selected_edge",
            "composition_edge_kind",
            "terms_selected_order",
            "attention_selected_dest",
            "attention_selected_src",
            "attention_pattern_kind",
            "attention_show_diagonals",
        }
    )

    model_name = traitlets.Unicode("").tag(sync=True)
    """Name of the model."""

    eigen_data = traitlets.Dict().tag(sync=True, **_data_serialization)
    """Data of the eigenvalue scatter (:func:`~circuitwidgets.widgets.eigen.eigen_scatter_data`)."""

    trigram_data = traitlets.Dict().tag(sync=True, **_data_serialization)
    """Data of the skip-trigram table (:func:`~circuitwidgets.widgets.skip_trigrams.skip_trigram_data`)."""

    composition_data = traitlets.Dict().tag(sync=True, **_data_serialization)
    """Data of the composition map (:func:`~circuitwidgets.widgets.composition.composition_map_data`)."""

    terms_data = traitlets.Dict().tag(sync=True, **_data_serialization)
    """Data of term importance (:func:`~circuitwidgets.widgets.term_importance.term_importance_data`)."""

    attention_data = traitlets.Dict().tag(sync=True, **_data_serialization)
    """Data of the attention view (:func:`attention_state`), already in wire form."""

    # -- the shared selection
    selected_layer = SelectionIndex("n_layers").tag(sync=True)
    """Layer of the selected head, shared by every view."""

    selected_head = SelectionIndex("n_heads").tag(sync=True)
    """Selected head within its layer, shared by every view."""

    # -- eigenvalue scatter
    eigen_method = traitlets.Unicode("eigen").tag(sync=True)
    """Score definition of the scatter (one of ``eigen_data["methods"]``)."""

    eigen_qk_circuit = traitlets.Unicode("qk_kcomp").tag(sync=True)
    """Vertical axis of the scatter: ``"qk"`` or ``"qk_kcomp"``."""

    # -- skip-trigram table (its head is the shared selection)
    trigram_source_token = SelectionIndex("d_vocab", optional=True).tag(sync=True)
    """Source token id listed in the skip-trigram table, or -1 for the head's largest."""

    trigram_source_query = traitlets.Unicode("").tag(sync=True)
    """View → kernel: search text resolved to ``trigram_source_token``."""

    trigram_source_message = traitlets.Unicode("").tag(sync=True)
    """Kernel → view: why the last search found no token."""

    trigram_live = traitlets.Dict().tag(sync=True)
    """Kernel → view: a source profile computed on demand (see ``SkipTrigramTable.live``)."""

    trigram_selected_row = SelectionIndex("trigram_n_rows", optional=True).tag(sync=True)
    """Selected row of the skip-trigram listing, or -1."""

    # -- composition map
    composition_subtract_baseline = traitlets.Bool(True).tag(sync=True)
    """Composition scores minus the random-matrix baseline."""

    composition_kind = traitlets.Unicode("all").tag(sync=True)
    """Edges drawn: ``"Q"``, ``"K"``, ``"V"`` or ``"all"``."""

    composition_n_edges = traitlets.Int(12).tag(sync=True)
    """Strongest edges drawn (1..200)."""

    composition_selected_edge = traitlets.List(traitlets.Int(), default_value=[]).tag(sync=True)
    """``[]`` or ``[l1, h1, l2, h2]``: the selected composition edge."""

    composition_edge_kind = traitlets.Unicode("").tag(sync=True)
    """Kind of the selected edge, or ``""``."""

    # -- term importance
    terms_selected_order = SelectionIndex("n_orders", optional=True).tag(sync=True)
    """Highlighted path order, or -1."""

    # -- attention
    attention_selected_dest = SelectionIndex("n_tokens", optional=True).tag(sync=True)
    """Selected destination position in the attention view, or -1."""

    attention_selected_src = SelectionIndex("n_tokens", optional=True).tag(sync=True)
    """Selected source position in the attention view, or -1."""

    attention_pattern_kind = traitlets.Unicode("raw").tag(sync=True)
    """Pattern drawn by the attention view: ``"raw"`` or ``"value"`` (value-weighted)."""

    attention_show_diagonals = traitlets.Bool(False).tag(sync=True)
    """Whether the attention view marks the previous-token and induction diagonals."""

    def __init__(
        self,
        model: CircuitModel,
        text: str,
        *,
        k: int = 20,
        profile_k: int = 8,
        trigram_heads: Iterable[tuple[int, int]] | None = None,
        max_tokens: int = 1024,
        seed: int = 0,
        progress_bar: bool | None = None,
        **kwargs: Any,
    ) -> None:
        model = check_model(model, "CircuitExplorer")
        if not isinstance(text, str) or not text:
            raise ArgumentError(f"text: expected a non-empty str, got {text!r:.80}")
        ids = model.to_tokens(text)[0].tolist()
        bos = model.tokenizer.bos_token_id
        text_sources = [t for t in dict.fromkeys(ids) if t != bos][:MAX_TEXT_SOURCES]
        eigen = eigen_scatter_data(model, max_tokens=max_tokens, seed=seed)
        trigram = skip_trigram_data(
            model, k=k, profile_k=profile_k, heads=trigram_heads, sources=text_sources, progress_bar=progress_bar
        )
        induction = eigen["detectors"][DETECTORS.index("induction")]
        layer, head = (int(i) for i in np.unravel_index(int(np.nanargmax(induction)), induction.shape))
        self._trigram_source = TrigramSource(model, k, profile_k)
        attention, attention_own = attention_state(model, text)
        defaults: dict[str, Any] = {
            "model_name": model.name,
            "eigen_data": eigen,
            "trigram_data": {
                key: trigram[key] for key in (*_TRIGRAM_DATA_KEYS, "k", "profile_k", "d_vocab", "model_name")
            },
            "composition_data": composition_map_data(model, seed=seed),
            "terms_data": term_importance_data(model, text),
            "attention_data": attention,
            **{f"attention_{name}": value for name, value in attention_own.items()},
            "selected_layer": layer,
            "selected_head": head,
            "eigen_qk_circuit": "qk_kcomp" if model.cfg.n_layers >= 2 else "qk",
        }
        super().__init__(**{**defaults, **kwargs})
        self._fill_trigrams()

    # ---------------------------------------------------------------- sizes
    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return int(self.eigen_data["scores"].shape[2]) if self.eigen_data else 0

    @property
    def n_heads(self) -> int:
        """Heads per layer."""
        return int(self.eigen_data["scores"].shape[3]) if self.eigen_data else 0

    @property
    def d_vocab(self) -> int:
        """Vocabulary size."""
        return int(self.trigram_data.get("d_vocab", 0))

    @property
    def n_orders(self) -> int:
        """Path orders measured by term importance."""
        return len(self.terms_data["marginal"]) if self.terms_data else 0

    @property
    def n_tokens(self) -> int:
        """Tokens of the text."""
        return len(self.attention_data.get("tokens", []))

    def _trigram_listing(self) -> list[tuple[int, int, int, float, float, int]] | None:
        if not self.trigram_data or not (
            0 <= self.selected_layer < self.n_layers and 0 <= self.selected_head < self.n_heads
        ):
            return None
        return listing(
            self.trigram_data, self.selected_layer, self.selected_head, self.trigram_source_token, self.trigram_live
        )

    @property
    def trigram_n_rows(self) -> int:
        """Rows of the current skip-trigram listing."""
        rows = self._trigram_listing()
        return 0 if rows is None else len(rows)

    @property
    def selected(self) -> tuple[int, int]:
        """``(layer, head)`` of the selected head."""
        return self.selected_layer, self.selected_head

    # ----------------------------------------------------------- validation
    @traitlets.validate(
        "selected_layer",
        "selected_head",
        "trigram_source_token",
        "trigram_selected_row",
        "terms_selected_order",
        "attention_selected_dest",
        "attention_selected_src",
    )
    def _validate_selection(self, proposal: traitlets.Bunch) -> int:
        return check_selection(self, proposal)

    @traitlets.validate("eigen_method")
    def _validate_method(self, proposal: traitlets.Bunch) -> str:
        methods = self.eigen_data.get("methods", [])
        if proposal["value"] not in methods:
            raise traitlets.TraitError(
                f"The 'eigen_method' trait of CircuitExplorer expected one of {methods}, got {proposal['value']!r}"
            )
        return str(proposal["value"])

    @traitlets.validate("eigen_qk_circuit")
    def _validate_qk_circuit(self, proposal: traitlets.Bunch) -> str:
        if proposal["value"] not in ("qk", "qk_kcomp"):
            raise traitlets.TraitError(
                f"The 'eigen_qk_circuit' trait of CircuitExplorer expected 'qk' or 'qk_kcomp', got {proposal['value']!r}"
            )
        return str(proposal["value"])

    @traitlets.validate("trigram_source_query")
    def _validate_query(self, proposal: traitlets.Bunch) -> str:
        value = str(proposal["value"])
        if len(value) > MAX_QUERY_CHARS:
            raise traitlets.TraitError(
                f"The 'trigram_source_query' trait of CircuitExplorer expected at most {MAX_QUERY_CHARS} characters, got {len(value)}"
            )
        return value

    @traitlets.validate("composition_selected_edge")
    def _validate_edge(self, proposal: traitlets.Bunch) -> list[int]:
        reason = edge_error(proposal["value"], self.n_layers, self.n_heads)
        if reason is not None:
            raise traitlets.TraitError(f"The 'composition_selected_edge' trait of CircuitExplorer {reason}")
        return [int(v) for v in proposal["value"]]

    @traitlets.validate("composition_kind", "composition_edge_kind")
    def _validate_kind(self, proposal: traitlets.Bunch) -> str:
        allowed = (*KINDS, "all") if proposal["trait"].name == "composition_kind" else (*KINDS, "")
        if proposal["value"] not in allowed:
            raise traitlets.TraitError(
                f"The '{proposal['trait'].name}' trait of CircuitExplorer expected one of {allowed}, got {proposal['value']!r}"
            )
        return str(proposal["value"])

    @traitlets.validate("attention_pattern_kind")
    def _validate_pattern_kind(self, proposal: traitlets.Bunch) -> str:
        if proposal["value"] not in ("raw", "value"):
            raise traitlets.TraitError(
                f"The 'attention_pattern_kind' trait of CircuitExplorer expected 'raw' or 'value', got {proposal['value']!r}"
            )
        return str(proposal["value"])

    @traitlets.validate("composition_n_edges")
    def _validate_n_edges(self, proposal: traitlets.Bunch) -> int:
        if isinstance(proposal["value"], bool) or not 1 <= proposal["value"] <= 200:
            raise traitlets.TraitError(
                f"The 'composition_n_edges' trait of CircuitExplorer expected 1..200, got {proposal['value']}"
            )
        return int(proposal["value"])

    # ------------------------------------------------------------ observers
    @traitlets.observe("selected_layer", "selected_head", "trigram_source_token")
    def _on_trigram_selection(self, change: traitlets.Bunch) -> None:
        if change["old"] != change["new"] and self.trigram_selected_row != NONE:
            self.trigram_selected_row = NONE
        self._fill_trigrams()

    @traitlets.observe("trigram_source_query")
    def _on_query(self, change: traitlets.Bunch) -> None:
        if not change["new"]:
            return
        token, reason = self._trigram_source.resolve(change["new"])
        with self.hold_trait_notifications():
            self.trigram_source_message = reason
            if token is not None:
                self.trigram_source_token = token
            self.trigram_source_query = ""

    def _fill_trigrams(self) -> None:
        """Compute the selected head's skip-trigrams or the chosen source's profile when the state lacks them."""
        layer, head = self.selected_layer, self.selected_head
        data = self.trigram_data
        if not data or not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            return
        if not data["ready"][layer, head]:
            computed = self._trigram_source.compute_heads(data, [(layer, head)])
            self.trigram_data = {**data, **{key: computed[key] for key in _TRIGRAM_DATA_KEYS}}
            data = self.trigram_data
        if self.trigram_source_token != NONE and self._trigram_listing() is None:
            vocab, live = self._trigram_source.live_profile(data, layer, head, self.trigram_source_token)
            with self.hold_trait_notifications():
                self.trigram_data = {**data, **vocab}
                self.trigram_live = live

    def state_sizes(self) -> dict[str, int]:
        """Bytes of each data trait as sent to the view (binary buffers plus JSON)."""
        return {
            name: _wire_bytes(_data_to_json(getattr(self, name)))
            for name in ("eigen_data", "trigram_data", "composition_data", "terms_data", "attention_data")
        }


def _wire_bytes(value: Any) -> int:
    """Bytes of a serialised value: buffers counted raw, everything else as compact JSON."""
    import json

    buffers = 0

    def strip(v: Any) -> Any:
        nonlocal buffers
        if isinstance(v, (bytes, bytearray, memoryview)):
            buffers += memoryview(v).nbytes
            return None
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [strip(x) for x in v]
        return v

    text = json.dumps(strip(value), separators=(",", ":"), ensure_ascii=False)
    return buffers + len(text.encode("utf-8"))
