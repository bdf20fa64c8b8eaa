"""The largest skip-trigrams ``[source] … [destination] → [out]`` of a head, as a sortable, paged table.

A head attends from a destination token to an earlier source token (full QK
circuit) and raises the logits of out tokens (full OV circuit): each row is one
skip-trigram with both numbers (see :mod:`circuitwidgets.circuits.skip_trigrams`).

What is precomputed (so that switching heads works in exported HTML)
---------------------------------------------------------------------
For every head in ``heads`` (all by default):

- its ``k`` largest OV entries and ``k`` largest QK entries as skip-trigrams
  (:func:`circuitwidgets.circuits.skip_trigrams` with ``by="ov"`` and ``by="qk"``),
  merged (a triple found by both keeps one row);
- for every source token of those rows (and any ``sources`` you pass), the
  ``profile_k`` destinations that attend to it most and the ``profile_k`` outs it
  raises most (:func:`circuitwidgets.circuits.source_profile`); the view lists a
  source's ``profile_k²`` triples ordered by the sum of the two ranks.

Any other source token needs the kernel: the view's search box sets
``source_query`` (text) or ``source_token`` (an id), an observer computes that
source's profile for the selected head into ``live``. With no kernel the view
says so. Tokens appear in the state once, in ``token_strs``; arrays hold indices
into it, so the state grows with the rows, never with the vocabulary.

Data traits (kernel → view)
---------------------------
``token_ids`` int32 ``[T]`` and ``token_strs`` (``T`` strings): the local
vocabulary. ``rows`` int32 ``[L, H, R, 4]``: source, destination, out (local
indices) and origin bits (1: among the OV top-k, 2: among the QK top-k), -1
padded. ``row_values`` float32 ``[L, H, R, 2]``: qk, ov. ``profile_sources``
int32 ``[L, H, S]`` (local, -1 padded), ``profile_tokens`` int32 ``[L, H, S, 2,
P]`` (destinations, outs), ``profile_values`` float32 ``[L, H, S, 2, P]`` (qk of
each destination, ov of each out). ``ready`` uint8 ``[L, H]``: which heads are
precomputed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import traitlets
from numpy.typing import NDArray

from circuitwidgets._checks import check_model
from circuitwidgets.circuits import SkipTrigram
from circuitwidgets.circuits._records import RecordList
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import NDArrayTrait
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.coalesce import coalesced, latest_wins
from circuitwidgets.widgets.core.offset import engine_offset, offset_setting, validate_offset
from circuitwidgets.widgets.core.spec import NONE, Size, head_selection, kernel_reply, view_data, view_setting
from circuitwidgets.widgets.core.traits import Integer, SelectionIndex, Text
from circuitwidgets.widgets.skip_trigrams.data import (
    HEAD_KEYS,
    MAX_QUERY_CHARS,
    ORIGIN_OV,
    ORIGIN_QK,
    PER_HEAD,
    TrigramSource,
    build_skip_trigrams,
    listing,
    profile_order,
    skip_trigram_data,
    trigram_entries,
)

__all__ = [
    "MAX_QUERY_CHARS",
    "ORIGIN_OV",
    "ORIGIN_QK",
    "SkipTrigramTable",
    "TrigramSource",
    "listing",
    "skip_trigram_data",
]


class SkipTrigramTable(CircuitWidget):
    """A head's largest skip-trigrams ``[source] … [destination] → [out]``, sortable and paged.

    Parameters
    ----------
    model
        The model (omit it to build from trait values, or use :meth:`from_trigrams`).
    selected_layer, selected_head
        The head shown first (``layer=`` / ``head=``, their former names, are still accepted).
    k, profile_k, heads, sources, memory_budget, progress_bar
        See :func:`skip_trigram_data`.
    **kwargs
        Initial traits.
    """

    _view = traitlets.Unicode("skiptrigrams").tag(sync=True)
    _prefix = "trigram"

    model_name = view_data(traitlets.Unicode(""))
    """Name of the model (caption)."""

    token_ids = view_data(NDArrayTrait(dtype="int32", dims=("n_local",)))
    """int32 ``[T]``: global ids of every token the state refers to."""

    token_strs = view_data(traitlets.List(traitlets.Unicode()))
    """Display strings of ``token_ids`` (untrusted text; shown as text)."""

    rows = view_data(NDArrayTrait(dtype="int32", dims=("n_layers", "n_heads", "n_row_slots", 4)))
    """int32 ``[L, H, R, 4]``: source, destination, out (indices into ``token_strs``), origin bits; -1 padded."""

    row_values = view_data(NDArrayTrait(dtype="float32", dims=("n_layers", "n_heads", "n_row_slots", 2)))
    """float32 ``[L, H, R, 2]``: qk (attention score / scale) and ov (direct logit effect) of each row."""

    profile_sources = view_data(NDArrayTrait(dtype="int32", dims=("n_layers", "n_heads", "n_sources")))
    """int32 ``[L, H, S]``: precomputed source tokens per head (indices into ``token_strs``), -1 padded."""

    profile_tokens = view_data(
        NDArrayTrait(dtype="int32", dims=("n_layers", "n_heads", "n_sources", 2, "profile_size"))
    )
    """int32 ``[L, H, S, 2, P]``: each source's top destinations and top outs."""

    profile_values = view_data(
        NDArrayTrait(dtype="float32", dims=("n_layers", "n_heads", "n_sources", 2, "profile_size"))
    )
    """float32 ``[L, H, S, 2, P]``: qk of those destinations, ov of those outs."""

    ready = view_data(NDArrayTrait(dtype="uint8", dims=("n_layers", "n_heads")))
    """uint8 ``[L, H]``: 1 where the head is precomputed."""

    profile_order = view_data(NDArrayTrait(dtype="int32", dims=("n_pairs", 2)))
    """int32 ``[P², 2]``: the canonical order of a source's triples, (destination rank, out rank)
    pairs (:func:`~circuitwidgets.widgets.skip_trigrams.data.profile_order`; the view reads it, so the order is defined once)."""

    k = view_data(Integer(0))
    """Largest OV and QK entries kept per head."""

    profile_k = view_data(Integer(0))
    """Destinations and outs kept per source."""

    d_vocab = view_data(Integer(0))
    """Vocabulary size of the model."""

    extra_sources = view_data(traitlets.List(Integer()))
    """Token ids precomputed as sources for every head besides those of the rows."""

    live = kernel_reply(traitlets.Dict())
    """Kernel → view: the profile of a source computed on demand (``{}`` for none):
    ``layer``, ``head``, ``source`` (local index), ``dest``, ``qk``, ``out``, ``ov``."""

    source_message = kernel_reply(traitlets.Unicode(""))
    """Kernel → view: why the last search found no token ("" when it did)."""

    qk_offset = offset_setting()
    """Rotary models: the destination-minus-source offset ``Δ`` the QK circuits are read at (0 unless given;
    a live kernel recomputes the table when the view's control changes it); -1 for models without rotary layers."""

    source_token = view_setting(SelectionIndex("d_vocab", optional=True))
    """Global id of the source token whose skip-trigrams are listed, or -1 for the head's largest."""

    source_query = view_setting(Text(MAX_QUERY_CHARS))
    """View → kernel: a search text; the kernel resolves it to ``source_token`` (or sets ``source_message``)."""

    selected_row = view_setting(SelectionIndex("n_rows", optional=True))
    """Selected row of the current listing (its canonical order, not the sorted one), or -1."""

    selected_layer = head_selection(SelectionIndex("n_layers"))
    """Layer of the head shown."""

    selected_head = head_selection(SelectionIndex("n_heads"))
    """Head shown, within its layer."""

    n_layers = Size("n_layers")
    n_heads = Size("n_heads")

    def __init__(
        self,
        model: CircuitModel | None = None,
        *,
        k: int = 20,
        profile_k: int = 8,
        heads: Iterable[tuple[int, int]] | None = None,
        sources: Sequence[int | str] = (),
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        progress_bar: bool | None = None,
        offset: int | None = None,
        layer: int | None = None,
        head: int | None = None,
        **kwargs: Any,
    ) -> None:
        # (layer= / head= are the names of the head selection before it was selected_*)
        if layer is not None:
            kwargs.setdefault("selected_layer", layer)
        if head is not None:
            kwargs.setdefault("selected_head", head)
        self._source: TrigramSource | None = None
        # what the kernel added since the view's starting state: {"tokens": count before, "heads": [...]}
        self._added: dict[str, Any] | None = None
        self._options: dict[str, Any] = {
            # (a one-shot iterator is kept as a list, so a recomputation at another offset sees the same heads;
            # anything else is left for skip_trigram_data to check and name)
            "k": k,
            "profile_k": profile_k,
            "heads": list(heads) if isinstance(heads, Iterator) else heads,
            "sources": sources,
            "memory_budget": memory_budget,
        }
        if model is not None:
            model = check_model(model, type(self).__name__)
            state = self.initial(model, progress_bar=progress_bar, offset=offset, **self._options)
            self._source = TrigramSource(model, k, profile_k, memory_budget, engine_offset(state["qk_offset"]))
            kwargs = {**state, **kwargs}
        super().__init__(**kwargs)
        self.on_msg(self._on_custom)
        self._fill()

    @classmethod
    def initial(cls, model: CircuitModel, **options: Any) -> dict[str, Any]:
        """Initial traits for ``model`` (:func:`skip_trigram_data` with ``options``)."""
        return build_skip_trigrams(check_model(model), **options)

    @classmethod
    def from_model(cls, model: CircuitModel, **kwargs: Any) -> SkipTrigramTable:
        """Same as ``SkipTrigramTable(model, ...)``: skip-trigrams read off the model's QK and OV circuits."""
        check_model(model, cls.__name__)
        return cls(model, **kwargs)

    @classmethod
    def from_trigrams(
        cls,
        trigrams: Mapping[tuple[int, int], Iterable[SkipTrigram | Sequence[Any]]],
        *,
        model_name: str = "",
        **kwargs: Any,
    ) -> SkipTrigramTable:
        """A table of skip-trigrams found anywhere, per head.

        Parameters
        ----------
        trigrams
            ``{(layer, head): rows}``, each row a :class:`~circuitwidgets.circuits.SkipTrigram`
            or ``(source, destination, out, qk, ov)`` with the three tokens as strings.
            Heads not given show as not computed.
        model_name
            Caption.
        **kwargs
            Initial traits (for example ``selected_layer=1``).

        Raises
        ------
        ArgumentTypeError, ArgumentError
            Naming the argument, what was expected and what was received.
        """
        return cls(**{**trigram_entries(trigrams), "model_name": model_name, **kwargs})

    @traitlets.default("profile_order")
    def _default_profile_order(self) -> NDArray[np.int32]:
        return profile_order(self.profile_k)

    # --------------------------------------------------------------- aliases
    @property
    def layer(self) -> int:
        """Former name of :attr:`selected_layer`."""
        return int(self.selected_layer)

    @layer.setter
    def layer(self, value: int) -> None:
        self.selected_layer = value

    @property
    def head(self) -> int:
        """Former name of :attr:`selected_head`."""
        return int(self.selected_head)

    @head.setter
    def head(self, value: int) -> None:
        self.selected_head = value

    # --------------------------------------------------------------- sizes
    def _data(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in (*HEAD_KEYS, "profile_order")}

    def _listing(self) -> list[tuple[int, int, int, float, float, int]] | None:
        layer, head = self.selected_layer, self.selected_head
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            return None
        return listing(self._data(), layer, head, self.source_token, self.live)

    @property
    def n_rows(self) -> int:
        """Rows in the current listing (0 when it needs the kernel)."""
        rows = self._listing()
        return 0 if rows is None else len(rows)

    @property
    def trigrams(self) -> RecordList[SkipTrigram]:
        """The current listing as records, in canonical order (``.to_pandas()`` gives a DataFrame)."""
        ids, strs = self.token_ids.tolist(), self.token_strs
        return RecordList(
            SkipTrigram(ids[s], ids[d], ids[o], strs[s], strs[d], strs[o], qk, ov, s == o)
            for s, d, o, qk, ov, _ in (self._listing() or [])
        )

    @property
    def selected_trigram(self) -> SkipTrigram | None:
        """The record of ``selected_row``, or ``None``."""
        if self.selected_row == NONE:
            return None
        rows = self.trigrams
        return rows[self.selected_row] if self.selected_row < len(rows) else None

    # ------------------------------------------------------------ observers
    # (written against the view's own names only, so the explorer runs them on its state too)
    @traitlets.observe("selected_layer", "selected_head", "source_token")
    def _on_head_or_source(self, change: traitlets.Bunch) -> None:
        if change["old"] != change["new"] and self.selected_row != NONE:
            self.selected_row = NONE
        latest_wins(self, "fill", self._fill)  # the view's newest selection wins (core/coalesce.py)

    @traitlets.validate("qk_offset")
    def _validate_offset(self, proposal: traitlets.Bunch) -> int:
        source = getattr(self, "_source", None)
        return validate_offset(self, source.model if source is not None else None, int(proposal["value"]))

    @traitlets.observe("qk_offset")
    @coalesced("qk_offset")
    def _on_offset(self, change: traitlets.Bunch) -> None:
        """Recompute every precomputed head at the new offset (a table built from a model, in a live kernel)."""
        source = getattr(self, "_source", None)
        if source is None or change["new"] == change["old"] or source.offset == engine_offset(change["new"]):
            return
        state = skip_trigram_data(source.model, offset=engine_offset(change["new"]), **self._options)
        source.offset = engine_offset(change["new"])
        self._added = None
        with self.hold_trait_notifications():
            self.live = {}
            for name in (*HEAD_KEYS, "token_ids", "token_strs", "extra_sources"):
                if name in state:
                    setattr(self, name, state[name])
        self._fill()

    @traitlets.observe("source_query")
    def _on_query(self, change: traitlets.Bunch) -> None:
        query = change["new"]
        if not query or self._source is None:
            return
        token, reason = self._source.resolve(query)
        with self.hold_trait_notifications():
            self.source_message = reason
            if token is not None:
                self.source_token = token
            self.source_query = ""

    def _fill(self) -> None:
        """Compute what the current selection needs and the state lacks (live kernel only).

        A computed head is written into the arrays in place and sent to the
        view alone, in a custom message (see :meth:`_send_update`): the arrays
        of the other heads do not cross the wire again.
        """
        layer, head = self.selected_layer, self.selected_head
        if self._source is None or not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            return
        if not self.ready[layer, head]:
            vocab = self._source.fill_heads(self._data() | {"extra_sources": self.extra_sources}, [(layer, head)])
            self._grow(vocab.ids, vocab.strs, [(layer, head)])
        if self.source_token != NONE and self._listing() is None:
            vocab, live = self._source.live_profile(self._data(), layer, head, self.source_token)
            self._grow(vocab.ids, vocab.strs, [])
            self.live = live

    def _grow(self, ids: list[int], strs: list[str], heads: list[tuple[int, int]]) -> None:
        """Take the vocabulary ``ids``/``strs`` (the old one and tokens after it) and ``heads`` just computed."""
        if self._added is None:
            self._added = {"tokens": len(self.token_strs), "heads": []}
        old = len(self.token_strs)
        if len(ids) > old:
            self._store_quietly("token_ids", np.asarray(ids, dtype=np.int32))
            self._store_quietly("token_strs", list(strs))
        self._added["heads"].extend(heads)
        if heads or len(ids) > old:
            self._send_update(old, heads)

    def _send_update(self, tokens_from: int, heads: list[tuple[int, int]]) -> None:
        """Send the view the tokens from index ``tokens_from`` on and the slices of ``heads``, as one message."""
        buffers = [
            np.ascontiguousarray(getattr(self, name)[layer, head]).tobytes()
            for layer, head in heads
            for name in PER_HEAD
        ]
        content = {
            "type": "trigram_update",
            "tokens_from": tokens_from,
            "token_ids": [int(t) for t in self.token_ids[tokens_from:]],
            "token_strs": list(self.token_strs[tokens_from:]),
            "heads": [[int(layer), int(head)] for layer, head in heads],
        }
        self.send(content, buffers)

    def _on_custom(self, widget: Any, content: Any, buffers: Any) -> None:
        """A view that renders (again) asks for what was computed since the state it started from."""
        if isinstance(content, dict) and content.get("type") == "want_trigram_update" and self._added is not None:
            self._send_update(int(self._added["tokens"]), list(self._added["heads"]))
