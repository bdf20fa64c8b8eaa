"""Data of a skip-trigram view: what is precomputed, how it is laid out, what the kernel computes on demand.

The widget (:mod:`circuitwidgets.widgets.skip_trigrams`) shows it; this module builds it.
See that module's docstring for the layout of the arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets._text import from_visible
from circuitwidgets.circuits import SkipTrigram, full_ov, full_qk, skip_trigrams
from circuitwidgets.circuits._checks import check_budget, check_model
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET, LowRankMatrix
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets._spec import NONE

__all__ = [
    "HEAD_KEYS",
    "MAX_QUERY_CHARS",
    "MAX_STATE_BYTES",
    "ORIGIN_OV",
    "ORIGIN_QK",
    "PER_HEAD",
    "TrigramSource",
    "listing",
    "profile_order",
    "skip_trigram_data",
    "trigram_entries",
]

#: Origin bit of a row among the head's largest OV entries.
ORIGIN_OV = 1
#: Origin bit of a row among the head's largest QK entries.
ORIGIN_QK = 2

#: Longest search text accepted from the view.
MAX_QUERY_CHARS = 1000

#: The arrays that hold one slice per head, ``[L, H, ...]`` (what crosses the wire when one head is computed).
PER_HEAD = ("rows", "row_values", "profile_sources", "profile_tokens", "profile_values")

#: The data that changes when a head is computed (the local vocabulary and the per-head arrays).
HEAD_KEYS = (
    "token_ids",
    "token_strs",
    "rows",
    "row_values",
    "profile_sources",
    "profile_tokens",
    "profile_values",
    "ready",
)

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
            "profile_order": profile_order(self.profile_k),
            "d_vocab": cfg.d_vocab,
            "model_name": self.model.name,
            "extra_sources": [int(s) for s in extra_sources],
        }

    def compute_heads(
        self, data: dict[str, Any], heads: Iterable[tuple[int, int]], progress_bar: bool | None = None
    ) -> dict[str, Any]:
        """A copy of ``data`` with ``heads`` computed (rows and source profiles)."""
        out = {key: (value.copy() if isinstance(value, np.ndarray) else value) for key, value in data.items()}
        out.update(self.fill_heads(out, heads, progress_bar).traits())
        return out

    def fill_heads(
        self, data: dict[str, Any], heads: Iterable[tuple[int, int]], progress_bar: bool | None = None
    ) -> _Vocab:
        """Compute ``heads`` into ``data``'s arrays, in place; return the vocabulary grown by their tokens.

        ``data["token_ids"]`` / ``["token_strs"]`` are left as they were: the
        returned vocabulary holds them and the tokens added after them.
        """
        out = data
        vocab = _Vocab(self.model, out["token_ids"].tolist(), list(out["token_strs"]))
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
        return vocab

    def live_profile(self, data: dict[str, Any], layer: int, head: int, source: int) -> tuple[_Vocab, dict[str, Any]]:
        """``(vocabulary, live)`` for ``source`` at head ``(layer, head)`` computed in the kernel (the vocabulary
        grown by its tokens, as :meth:`fill_heads`)."""
        vocab = _Vocab(self.model, data["token_ids"].tolist(), list(data["token_strs"]))
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
        return vocab, live

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


def profile_order(profile_k: int) -> NDArray[np.int32]:
    """The canonical order of a source's ``profile_k²`` triples: pairs ``(destination rank, out rank)``
    ordered by the sum of the two ranks, then the destination rank, ``[profile_k², 2]``.

    Defined here only: the view lists a source's triples in this order (``profile_order`` in its data).
    """
    pairs = sorted(((i, j) for i in range(profile_k) for j in range(profile_k)), key=lambda ij: (ij[0] + ij[1], ij[0]))
    return np.asarray(pairs, dtype=np.int32).reshape(-1, 2)


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
    pairs = [(int(i), int(j)) for i, j in data["profile_order"] if i < len(dest) and j < len(out)]
    src = int(local[0])
    return [(src, int(dest[i]), int(out[j]), float(qk[i]), float(ov[j]), 0) for i, j in pairs]


def trigram_entries(trigrams: Any) -> dict[str, Any]:
    """Data traits of a table of skip-trigrams found elsewhere: ``{(layer, head): rows}``.

    Each row is a :class:`~circuitwidgets.circuits.SkipTrigram` (its token ids
    are kept) or ``(source, destination, out, qk, ov)`` with token strings (their
    ids are then their order of first appearance). No source profiles: the
    table lists each head's rows as given, in the given order.
    """
    if not isinstance(trigrams, Mapping) or not trigrams:
        raise ArgumentTypeError(
            f"trigrams: expected a non-empty dict {{(layer, head): rows}}, got {type(trigrams).__name__}"
        )
    ids: dict[str, int] = {}
    strs: list[str] = []
    parsed: dict[tuple[int, int], list[tuple[int, int, int, float, float]]] = {}

    def local(text: Any, token_id: int | None) -> int:
        if not isinstance(text, str):
            raise ArgumentTypeError(f"trigrams: expected token strings, got {text!r:.80}")
        if text not in ids:
            ids[text] = len(strs) if token_id is None else token_id
            strs.append(text)
        return strs.index(text)

    for key, rows in trigrams.items():
        if (
            not isinstance(key, tuple)
            or len(key) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in key)
        ):
            raise ArgumentTypeError(f"trigrams: expected (layer, head) keys of ints ≥ 0, got {key!r:.80}")
        out = []
        for row in rows:
            if isinstance(row, SkipTrigram):
                s = local(row.source_str, row.source)
                d = local(row.destination_str, row.destination)
                o = local(row.out_str, row.out)
                qk, ov = row.qk, row.ov
            else:
                if not isinstance(row, Sequence) or isinstance(row, str) or len(row) != 5:
                    raise ArgumentTypeError(
                        f"trigrams[{key}]: expected SkipTrigram records or (source, destination, out, qk, ov), got {row!r:.80}"
                    )
                s, d, o = (local(t, None) for t in row[:3])
                qk, ov = row[3], row[4]
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) for v in (qk, ov)):
                raise ArgumentError(f"trigrams[{key}]: expected finite qk and ov numbers, got {(qk, ov)!r:.80}")
            out.append((s, d, o, float(qk), float(ov)))
        parsed[(int(key[0]), int(key[1]))] = out
    L = 1 + max(k[0] for k in parsed)
    H = 1 + max(k[1] for k in parsed)
    R = max(1, max(len(r) for r in parsed.values()))
    rows_arr = np.full((L, H, R, 4), NONE, dtype=np.int32)
    values = np.zeros((L, H, R, 2), dtype=np.float32)
    ready = np.zeros((L, H), dtype=np.uint8)
    for (layer, head), entries in parsed.items():
        ready[layer, head] = 1
        for i, (s, d, o, qk, ov) in enumerate(entries):
            rows_arr[layer, head, i] = (s, d, o, 0)
            values[layer, head, i] = (qk, ov)
    token_ids = np.asarray([ids[t] for t in strs], dtype=np.int32)
    return {
        "token_ids": token_ids,
        "token_strs": strs,
        "rows": rows_arr,
        "row_values": values,
        "profile_sources": np.zeros((L, H, 0), dtype=np.int32),
        "profile_tokens": np.zeros((L, H, 0, 2, 0), dtype=np.int32),
        "profile_values": np.zeros((L, H, 0, 2, 0), dtype=np.float32),
        "ready": ready,
        "k": R,
        "profile_k": 0,
        "profile_order": profile_order(0),
        "d_vocab": int(token_ids.max()) + 1 if token_ids.size else 0,
        "extra_sources": [],
    }
