"""Data of a skip-trigram view: what is precomputed, how it is laid out, what the kernel computes on demand.

The widget (:mod:`circuitwidgets.widgets.skip_trigrams.widget`) shows it; this module builds it.
See that module's docstring for the layout of the arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from circuitwidgets._checks import check_budget, check_model
from circuitwidgets.circuits import SkipTrigram
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.offset import engine_offset, resolve_offset
from circuitwidgets.widgets.core.spec import NONE
from circuitwidgets.widgets.skip_trigrams.source import ORIGIN_OV, ORIGIN_QK, TrigramSource, profile_order

__all__ = [
    "HEAD_KEYS",
    "MAX_QUERY_CHARS",
    "MAX_STATE_BYTES",
    "ORIGIN_OV",
    "ORIGIN_QK",
    "PER_HEAD",
    "TrigramSource",
    "build_skip_trigrams",
    "listing",
    "profile_order",
    "skip_trigram_data",
    "trigram_entries",
]


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


def skip_trigram_data(
    model: CircuitModel,
    *,
    k: int = 20,
    profile_k: int = 8,
    heads: Iterable[tuple[int, int]] | None = None,
    sources: Sequence[int | str] = (),
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress_bar: bool | None = None,
    offset: int | None = None,
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
    offset
        Rotary models: the destination-minus-source offset at which QK circuits
        are read (default 0, shown in the view; :mod:`circuitwidgets.widgets.core.offset`).
    """
    model = check_model(model, "skip_trigram_data")
    return build_skip_trigrams(
        model,
        k=k,
        profile_k=profile_k,
        heads=heads,
        sources=sources,
        memory_budget=memory_budget,
        progress_bar=progress_bar,
        offset=offset,
    )


def build_skip_trigrams(
    model: CircuitModel,
    *,
    k: int = 20,
    profile_k: int = 8,
    heads: Iterable[tuple[int, int]] | None = None,
    sources: Sequence[int | str] = (),
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress_bar: bool | None = None,
    offset: int | None = None,
) -> dict[str, Any]:
    """:func:`skip_trigram_data` of a model already checked (the widget's builder: no warning, no re-check)."""
    for name, value in (("k", k), ("profile_k", profile_k)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= model.cfg.d_vocab:
            raise ArgumentError(f"{name}: expected an int in [1, {model.cfg.d_vocab}], got {value!r}")
    check_budget("memory_budget", memory_budget, model.device)
    qk_offset = resolve_offset(model, offset)
    store = TrigramSource(model, k, profile_k, memory_budget, engine_offset(qk_offset))
    if isinstance(sources, (str, bytes)) or not isinstance(sources, Iterable):
        raise ArgumentTypeError(
            f"sources: expected a list of token ids or one-token strings, got {type(sources).__name__}"
        )
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
    chosen = (
        [(lay, hd) for lay in range(cfg.n_layers) for hd in range(cfg.n_heads)]
        if heads is None
        else _check_heads(model, heads)
    )
    _check_state_size(model, k, profile_k, len(set(extra)))
    return {
        **store.compute_heads(store.empty(list(dict.fromkeys(extra))), chosen, progress_bar),
        "qk_offset": qk_offset,
    }


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
        if (
            not isinstance(pair, (tuple, list))
            or len(pair) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in pair)
        ):
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
