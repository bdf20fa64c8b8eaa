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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import traitlets
from numpy.typing import NDArray

from circuitwidgets._text import from_visible
from circuitwidgets.circuits import SkipTrigram, full_ov, full_qk, skip_trigrams
from circuitwidgets.circuits._checks import check_budget, check_model
from circuitwidgets.circuits._records import RecordList
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET, LowRankMatrix
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._arrays import NDArrayTrait
from circuitwidgets.widgets._base import NONE, CircuitWidget, SelectionIndex, check_selection

__all__ = ["ORIGIN_OV", "ORIGIN_QK", "SkipTrigramTable", "TrigramSource", "skip_trigram_data"]

#: Origin bit of a row among the head's largest OV entries.
ORIGIN_OV = 1
#: Origin bit of a row among the head's largest QK entries.
ORIGIN_QK = 2

#: Longest search text accepted from the view.
MAX_QUERY_CHARS = 1000

class _Vocab:
    """The local vocabulary: token ids in order of first use, with their display strings."""

    def __init__(self, model: CircuitModel, ids: Sequence[int] = (), strs: Sequence[str] = ()) -> None:
        self.model = model
        self.ids = [int(i) for i in ids]
        self.strs = list(strs)
        self._index = {t: i for i, t in enumerate(self.ids)}

    def local(self, token_id: int) -> int:
        token_id = int(token_id)
        if token_id not in self._index:
            self._index[token_id] = len(self.ids)
            self.ids.append(token_id)
            self.strs.append(self.model.tokenizer.token_str(token_id))
        return self._index[token_id]

    def find(self, token_id: int) -> int:
        return self._index.get(int(token_id), NONE)

    def traits(self) -> dict[str, Any]:
        return {"token_ids": np.asarray(self.ids, dtype=np.int32), "token_strs": list(self.strs)}


def _merge_rows(ov_rows: Iterable[SkipTrigram], qk_rows: Iterable[SkipTrigram]) -> list[tuple[SkipTrigram, int]]:
    merged: dict[tuple[int, int, int], tuple[SkipTrigram, int]] = {}
    for rows, bit in ((ov_rows, ORIGIN_OV), (qk_rows, ORIGIN_QK)):
        for r in rows:
            key = (r.source, r.destination, r.out)
            record, bits = merged.get(key, (r, 0))
            merged[key] = (record, bits | bit)
    return list(merged.values())


@dataclass
class _Profiles:
    sources: list[int]
    dest: NDArray[np.int64]  # [S, P] global ids
    qk: NDArray[np.float32]  # [S, P]
    out: NDArray[np.int64]
    ov: NDArray[np.float32]


def _profiles(model: CircuitModel, layer: int, head: int, sources: list[int], k: int, memory_budget: int) -> _Profiles:
    """``source_profile`` of many sources at once (one QK column block and one OV row block)."""
    if not sources:
        empty_i = np.zeros((0, k), dtype=np.int64)
        empty_f = np.zeros((0, k), dtype=np.float32)
        return _Profiles([], empty_i, empty_f, empty_i, empty_f)
    ids = torch.as_tensor(sources, dtype=torch.long, device=model.device)
    qk_cols = full_qk(model, layer, head)[:, ids]
    ov_rows = full_ov(model, layer, head)[ids, :]
    assert isinstance(qk_cols, LowRankMatrix) and isinstance(ov_rows, LowRankMatrix)
    dest = qk_cols.topk_cols(k, memory_budget=memory_budget, progress_bar=False)
    outs = ov_rows.topk_rows(k, memory_budget=memory_budget, progress_bar=False)
    return _Profiles(
        list(sources),
        dest.indices.cpu().numpy(),
        (dest.values / model.cfg.scale).float().cpu().numpy(),
        outs.indices.cpu().numpy(),
        outs.values.float().cpu().numpy(),
    )


class TrigramSource:
    """Kernel-side computations of a skip-trigram view: heads on demand, token lookup, live source profiles.

    Shared by :class:`SkipTrigramTable` and the explorer.
    """

    def __init__(self, model: CircuitModel, k: int, profile_k: int, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> None:
        self.model = model
        self.k = k
        self.profile_k = profile_k
        self.memory_budget = memory_budget
        self._by_string: dict[str, int] | None = None

    # -------------------------------------------------------------- data
    def empty(self, extra_sources: Sequence[int] = ()) -> dict[str, Any]:
        """Data traits with no head computed yet."""
        cfg = self.model.cfg
        L, H, R, P = cfg.n_layers, cfg.n_heads, 2 * self.k, self.profile_k
        S = 2 * self.k + len(extra_sources)
        vocab = _Vocab(self.model)
        return {
            **vocab.traits(),
            "rows": np.full((L, H, R, 4), NONE, dtype=np.int32),
            "row_values": np.zeros((L, H, R, 2), dtype=np.float32),
            "profile_sources": np.full((L, H, S), NONE, dtype=np.int32),
            "profile_tokens": np.full((L, H, S, 2, P), NONE, dtype=np.int32),
            "profile_values": np.zeros((L, H, S, 2, P), dtype=np.float32),
            "ready": np.zeros((L, H), dtype=np.uint8),
            "k": self.k,
            "profile_k": self.profile_k,
            "d_vocab": cfg.d_vocab,
            "model_name": self.model.name,
            "extra_sources": [int(s) for s in extra_sources],
        }

    def compute_heads(
        self, data: dict[str, Any], heads: Iterable[tuple[int, int]], progress_bar: bool | None = None
    ) -> dict[str, Any]:
        """A copy of ``data`` with ``heads`` computed (rows and source profiles)."""
        out = {key: (value.copy() if isinstance(value, np.ndarray) else value) for key, value in data.items()}
        vocab = _Vocab(self.model, out["token_ids"].tolist(), out["token_strs"])
        extra = [int(s) for s in out.get("extra_sources", [])]
        heads = list(heads)
        if progress_bar:
            from tqdm.auto import tqdm

            heads = list(tqdm(heads, desc="skip-trigrams", leave=False))
        for layer, head in heads:
            ov_rows = skip_trigrams(
                self.model, layer, head, self.k, by="ov", memory_budget=self.memory_budget, progress_bar=False
            )
            qk_rows = skip_trigrams(
                self.model, layer, head, self.k, by="qk", memory_budget=self.memory_budget, progress_bar=False
            )
            merged = _merge_rows(ov_rows, qk_rows)
            rows = out["rows"][layer, head]
            values = out["row_values"][layer, head]
            rows[:] = NONE
            values[:] = 0.0
            for i, (r, bits) in enumerate(merged):
                rows[i] = (vocab.local(r.source), vocab.local(r.destination), vocab.local(r.out), bits)
                values[i] = (r.qk, r.ov)
            sources = list(dict.fromkeys([r.source for r, _ in merged] + extra))
            prof = _profiles(self.model, layer, head, sources, self.profile_k, self.memory_budget)
            out["profile_sources"][layer, head] = NONE
            out["profile_tokens"][layer, head] = NONE
            out["profile_values"][layer, head] = 0.0
            for s, source in enumerate(prof.sources):
                out["profile_sources"][layer, head, s] = vocab.local(source)
                out["profile_tokens"][layer, head, s, 0] = [vocab.local(t) for t in prof.dest[s]]
                out["profile_tokens"][layer, head, s, 1] = [vocab.local(t) for t in prof.out[s]]
                out["profile_values"][layer, head, s, 0] = prof.qk[s]
                out["profile_values"][layer, head, s, 1] = prof.ov[s]
            out["ready"][layer, head] = 1
        out.update(vocab.traits())
        return out

    def live_profile(
        self, data: dict[str, Any], layer: int, head: int, source: int
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(vocabulary traits, live)`` for ``source`` at head ``(layer, head)`` computed in the kernel."""
        vocab = _Vocab(self.model, data["token_ids"].tolist(), data["token_strs"])
        prof = _profiles(self.model, layer, head, [int(source)], self.profile_k, self.memory_budget)
        live = {
            "layer": int(layer),
            "head": int(head),
            "source": vocab.local(source),
            "dest": [vocab.local(t) for t in prof.dest[0]],
            "qk": [float(v) for v in prof.qk[0]],
            "out": [vocab.local(t) for t in prof.out[0]],
            "ov": [float(v) for v in prof.ov[0]],
        }
        return vocab.traits(), live

    # ------------------------------------------------------------ lookup
    def resolve(self, query: str) -> tuple[int | None, str]:
        """Token id of a search text (``(None, reason)`` when it is not one token).

        Tried in order: a token whose display string is exactly ``query``; the
        same with the view's visible whitespace (``·``, ``⏎``, ``→``) and escapes
        (``\\x00``, ``\\u202e``) turned back into the characters they show; the
        tokenizer's encoding when it is one token.
        """
        if not query:
            return None, ""
        if self._by_string is None:
            name = self.model.tokenizer.token_str
            by_string: dict[str, int] = {}
            for i in range(self.model.cfg.d_vocab):
                by_string.setdefault(name(i), i)
            self._by_string = by_string
        plain = from_visible(query)
        for text in (query, plain):
            if text in self._by_string:
                return self._by_string[text], ""
        try:
            ids = self.model.tokenizer.encode(plain)
        except (ValueError, KeyError):
            ids = []
        if len(ids) == 1:
            return int(ids[0]), ""
        shown = query if len(query) <= 40 else query[:39] + "…"
        if not ids:
            return None, f"“{shown}” is not a token of this model"
        return None, f"“{shown}” is not a single token of this model (it encodes to {len(ids)} tokens)"


def skip_trigram_data(
    model: CircuitModel,
    *,
    k: int = 20,
    profile_k: int = 8,
    heads: Iterable[tuple[int, int]] | None = None,
    sources: Sequence[int | str] = (),
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress_bar: bool | None = None,
) -> dict[str, Any]:
    """Trait values of a :class:`SkipTrigramTable` (module docstring for the layout).

    Parameters
    ----------
    model
        The model.
    k
        Largest OV entries and largest QK entries kept per head (up to ``2k`` rows).
    profile_k
        Destinations and outs kept per precomputed source.
    heads
        ``(layer, head)`` pairs to precompute (default all). Global top-k costs
        ``O(d_vocab² d_head)`` per head; others are computed when selected in a live kernel.
    sources
        Extra source tokens (ids or one-token strings) to precompute for every head.
    memory_budget, progress_bar
        As in :func:`circuitwidgets.circuits.skip_trigrams`.
    """
    model = check_model(model, "skip_trigram_data")
    for name, value in (("k", k), ("profile_k", profile_k)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= model.cfg.d_vocab:
            raise ArgumentError(f"{name}: expected an int in [1, {model.cfg.d_vocab}], got {value!r}")
    check_budget("memory_budget", memory_budget)
    store = TrigramSource(model, k, profile_k, memory_budget)
    if isinstance(sources, (str, bytes)) or not isinstance(sources, Iterable):
        raise ArgumentTypeError(f"sources: expected a list of token ids or one-token strings, got {type(sources).__name__}")
    extra: list[int] = []
    for s in sources:
        token, reason = store.resolve(s) if isinstance(s, str) else (s, "")
        if isinstance(token, torch.Tensor) and token.ndim == 0 and not token.dtype.is_floating_point:
            token = int(token)
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < model.cfg.d_vocab:
            raise ArgumentError(
                f"sources: expected token ids in [0, {model.cfg.d_vocab}) or one-token strings, got {s!r:.80} {reason}".rstrip()
            )
        extra.append(token)
    cfg = model.cfg
    chosen = [(lay, hd) for lay in range(cfg.n_layers) for hd in range(cfg.n_heads)] if heads is None else _check_heads(model, heads)
    _check_state_size(model, k, profile_k, len(set(extra)))
    return store.compute_heads(store.empty(list(dict.fromkeys(extra))), chosen, progress_bar)


#: Largest widget state (bytes of the arrays) :func:`skip_trigram_data` builds; beyond it, a :class:`MemoryBudgetError`.
MAX_STATE_BYTES = 256 * 2**20


def _check_state_size(model: CircuitModel, k: int, profile_k: int, n_extra: int) -> None:
    """Refuse arrays (``rows``, ``profile_*``) that would exceed :data:`MAX_STATE_BYTES`."""
    cfg = model.cfg
    heads = cfg.n_layers * cfg.n_heads
    n_rows, n_sources = 2 * k, 2 * k + n_extra
    needed = heads * (n_rows * (4 * 4 + 2 * 4) + n_sources * 4 + n_sources * 2 * profile_k * (4 + 4) + 1)
    if needed > MAX_STATE_BYTES:
        raise MemoryBudgetError(
            f"k, profile_k: a skip-trigram table with k={k}, profile_k={profile_k} and {n_extra} extra sources over "
            f"{heads} heads needs about {needed:,} bytes of widget state, more than {MAX_STATE_BYTES:,}; "
            "use smaller k / profile_k (the view pages through rows; other sources are computed live)"
        )


def _check_heads(model: CircuitModel, heads: object) -> list[tuple[int, int]]:
    """``heads`` as a list of in-range ``(layer, head)`` int pairs, or a typed error."""
    cfg = model.cfg
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Iterable):
        raise ArgumentTypeError(f"heads: expected (layer, head) pairs, got {type(heads).__name__}")
    chosen = []
    for pair in heads:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in pair):
            raise ArgumentTypeError(f"heads: expected (layer, head) pairs of ints, got {pair!r:.80}")
        lay, hd = int(pair[0]), int(pair[1])
        if not (0 <= lay < cfg.n_layers and 0 <= hd < cfg.n_heads):
            raise ArgumentError(
                f"heads: expected (layer, head) pairs within {cfg.n_layers} × {cfg.n_heads}, got {(lay, hd)}"
            )
        chosen.append((lay, hd))
    return chosen


def listing(
    data: dict[str, Any], layer: int, head: int, source: int, live: dict[str, Any] | None
) -> list[tuple[int, int, int, float, float, int]] | None:
    """Rows the view lists for ``(layer, head)`` and ``source`` (a global id or -1), as
    ``(source, destination, out, qk, ov, origin)`` with local token indices, in the view's
    canonical order; ``None`` when the data is not available (head not computed, source not precomputed).
    """
    if source == NONE:
        if not data["ready"][layer, head]:
            return None
        rows, values = data["rows"][layer, head], data["row_values"][layer, head]
        return [
            (int(r[0]), int(r[1]), int(r[2]), float(v[0]), float(v[1]), int(r[3]))
            for r, v in zip(rows, values, strict=True)
            if r[0] != NONE
        ]
    ids = data["token_ids"]
    local = np.flatnonzero(ids == source)
    dest: list[int] | None = None
    if local.size and data["ready"][layer, head]:
        where = np.flatnonzero(data["profile_sources"][layer, head] == local[0])
        if where.size:
            s = int(where[0])
            tokens, values = data["profile_tokens"][layer, head, s], data["profile_values"][layer, head, s]
            dest, qk, out, ov = tokens[0].tolist(), values[0].tolist(), tokens[1].tolist(), values[1].tolist()
    if (
        dest is None
        and live
        and local.size
        and (live["layer"], live["head"], live["source"]) == (layer, head, int(local[0]))
    ):
        dest, qk, out, ov = live["dest"], live["qk"], live["out"], live["ov"]
    if dest is None:
        return None
    pairs = sorted(((i, j) for i in range(len(dest)) for j in range(len(out))), key=lambda ij: (ij[0] + ij[1], ij[0]))
    src = int(local[0])
    return [(src, int(dest[i]), int(out[j]), float(qk[i]), float(ov[j]), 0) for i, j in pairs]


class SkipTrigramTable(CircuitWidget):
    """A head's largest skip-trigrams ``[source] … [destination] → [out]``, sortable and paged.

    Parameters
    ----------
    model
        The model (omit it to build from trait values, e.g. :func:`skip_trigram_data`).
    layer, head
        The head shown first.
    k, profile_k, heads, sources, memory_budget, progress_bar
        See :func:`skip_trigram_data`.
    **kwargs
        Initial traits.
    """

    _view = traitlets.Unicode("skiptrigrams").tag(sync=True)
    _from_view = frozenset({"layer", "head", "source_token", "source_query", "selected_row"})

    model_name = traitlets.Unicode("").tag(sync=True)
    """Name of the model (caption)."""

    token_ids = NDArrayTrait(dtype="int32", ndim=1).tag(sync=True)
    """int32 ``[T]``: global ids of every token the state refers to."""

    token_strs = traitlets.List(traitlets.Unicode()).tag(sync=True)
    """Display strings of ``token_ids`` (untrusted text; shown as text)."""

    rows = NDArrayTrait(dtype="int32", ndim=4).tag(sync=True)
    """int32 ``[L, H, R, 4]``: source, destination, out (indices into ``token_strs``), origin bits; -1 padded."""

    row_values = NDArrayTrait(dtype="float32", ndim=4).tag(sync=True)
    """float32 ``[L, H, R, 2]``: qk (attention score / scale) and ov (direct logit effect) of each row."""

    profile_sources = NDArrayTrait(dtype="int32", ndim=3).tag(sync=True)
    """int32 ``[L, H, S]``: precomputed source tokens per head (indices into ``token_strs``), -1 padded."""

    profile_tokens = NDArrayTrait(dtype="int32", ndim=5).tag(sync=True)
    """int32 ``[L, H, S, 2, P]``: each source's top destinations and top outs."""

    profile_values = NDArrayTrait(dtype="float32", ndim=5).tag(sync=True)
    """float32 ``[L, H, S, 2, P]``: qk of those destinations, ov of those outs."""

    ready = NDArrayTrait(dtype="uint8", ndim=2).tag(sync=True)
    """uint8 ``[L, H]``: 1 where the head is precomputed."""

    k = traitlets.Int(0).tag(sync=True)
    """Largest OV and QK entries kept per head."""

    profile_k = traitlets.Int(0).tag(sync=True)
    """Destinations and outs kept per source."""

    d_vocab = traitlets.Int(0).tag(sync=True)
    """Vocabulary size of the model."""

    extra_sources = traitlets.List(traitlets.Int()).tag(sync=True)
    """Token ids precomputed as sources for every head besides those of the rows."""

    live = traitlets.Dict().tag(sync=True)
    """Kernel → view: the profile of a source computed on demand (``{}`` for none):
    ``layer``, ``head``, ``source`` (local index), ``dest``, ``qk``, ``out``, ``ov``."""

    source_message = traitlets.Unicode("").tag(sync=True)
    """Kernel → view: why the last search found no token ("" when it did)."""

    layer = SelectionIndex("n_layers").tag(sync=True)
    """Layer of the head shown."""

    head = SelectionIndex("n_heads").tag(sync=True)
    """Head shown, within its layer."""

    source_token = SelectionIndex("d_vocab", optional=True).tag(sync=True)
    """Global id of the source token whose skip-trigrams are listed, or -1 for the head's largest."""

    source_query = traitlets.Unicode("").tag(sync=True)
    """View → kernel: a search text; the kernel resolves it to ``source_token`` (or sets ``source_message``)."""

    selected_row = SelectionIndex("n_rows", optional=True).tag(sync=True)
    """Selected row of the current listing (its canonical order, not the sorted one), or -1."""

    def __init__(
        self,
        model: CircuitModel | None = None,
        *,
        layer: int = 0,
        head: int = 0,
        k: int = 20,
        profile_k: int = 8,
        heads: Iterable[tuple[int, int]] | None = None,
        sources: Sequence[int | str] = (),
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        progress_bar: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self._source: TrigramSource | None = None
        if model is not None:
            model = check_model(model, "SkipTrigramTable")
            data = skip_trigram_data(
                model,
                k=k,
                profile_k=profile_k,
                heads=heads,
                sources=sources,
                memory_budget=memory_budget,
                progress_bar=progress_bar,
            )
            self._source = TrigramSource(model, k, profile_k, memory_budget)
            kwargs = {**data, "layer": layer, "head": head, **kwargs}
        super().__init__(**kwargs)
        self._fill()

    # ------------------------------------------------------------ defaults
    @traitlets.default("token_ids")
    def _default_token_ids(self) -> NDArray[np.int32]:
        return np.zeros(0, dtype=np.int32)

    @traitlets.default("rows")
    def _default_rows(self) -> NDArray[np.int32]:
        return np.zeros((0, 0, 0, 4), dtype=np.int32)

    @traitlets.default("row_values")
    def _default_row_values(self) -> NDArray[np.float32]:
        return np.zeros((0, 0, 0, 2), dtype=np.float32)

    @traitlets.default("profile_sources")
    def _default_profile_sources(self) -> NDArray[np.int32]:
        return np.zeros((0, 0, 0), dtype=np.int32)

    @traitlets.default("profile_tokens")
    def _default_profile_tokens(self) -> NDArray[np.int32]:
        return np.zeros((0, 0, 0, 2, 0), dtype=np.int32)

    @traitlets.default("profile_values")
    def _default_profile_values(self) -> NDArray[np.float32]:
        return np.zeros((0, 0, 0, 2, 0), dtype=np.float32)

    @traitlets.default("ready")
    def _default_ready(self) -> NDArray[np.uint8]:
        return np.zeros((0, 0), dtype=np.uint8)

    # ---------------------------------------------------------- validation
    @traitlets.validate("layer", "head", "source_token", "selected_row")
    def _validate_selection(self, proposal: traitlets.Bunch) -> int:
        return check_selection(self, proposal)

    @traitlets.validate("source_query")
    def _validate_query(self, proposal: traitlets.Bunch) -> str:
        value = str(proposal["value"])
        if len(value) > MAX_QUERY_CHARS:
            raise traitlets.TraitError(
                f"The 'source_query' trait of SkipTrigramTable expected at most {MAX_QUERY_CHARS} characters, got {len(value)}"
            )
        return value

    # --------------------------------------------------------------- sizes
    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return int(self.rows.shape[0])

    @property
    def n_heads(self) -> int:
        """Heads per layer."""
        return int(self.rows.shape[1])

    def _data(self) -> dict[str, Any]:
        return {
            name: getattr(self, name)
            for name in (
                "token_ids",
                "token_strs",
                "rows",
                "row_values",
                "profile_sources",
                "profile_tokens",
                "profile_values",
                "ready",
            )
        }

    def _listing(self) -> list[tuple[int, int, int, float, float, int]] | None:
        if not (0 <= self.layer < self.n_layers and 0 <= self.head < self.n_heads):
            return None
        return listing(self._data(), self.layer, self.head, self.source_token, self.live)

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
    @traitlets.observe("layer", "head", "source_token")
    def _on_head_or_source(self, change: traitlets.Bunch) -> None:
        if change["old"] != change["new"] and self.selected_row != NONE:
            self.selected_row = NONE
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
        """Compute what the current selection needs and the state lacks (live kernel only)."""
        if self._source is None or not (0 <= self.layer < self.n_layers and 0 <= self.head < self.n_heads):
            return
        if not self.ready[self.layer, self.head]:
            data = self._source.compute_heads(
                self._data() | {"extra_sources": self.extra_sources}, [(self.layer, self.head)]
            )
            with self.hold_trait_notifications():
                for name in (
                    "token_ids",
                    "token_strs",
                    "rows",
                    "row_values",
                    "profile_sources",
                    "profile_tokens",
                    "profile_values",
                    "ready",
                ):
                    setattr(self, name, data[name])
        if self.source_token != NONE and self._listing() is None:
            vocab, live = self._source.live_profile(self._data(), self.layer, self.head, self.source_token)
            with self.hold_trait_notifications():
                self.token_ids, self.token_strs = vocab["token_ids"], vocab["token_strs"]
                self.live = live
