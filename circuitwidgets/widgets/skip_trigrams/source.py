"""Kernel-side computations of a skip-trigram view: heads, source profiles, token lookup.

:class:`TrigramSource` fills the arrays laid out in
:mod:`circuitwidgets.widgets.skip_trigrams.widget` (at build time and on demand) and
resolves the view's search text to a token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets._text import from_visible
from circuitwidgets.circuits import SkipTrigram
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET, LowRankMatrix
from circuitwidgets.circuits.ov_qk import _full_ov, _full_qk
from circuitwidgets.circuits.skip_trigrams import _skip_trigrams
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.spec import NONE

__all__ = ["ORIGIN_OV", "ORIGIN_QK", "TrigramSource", "profile_order"]

#: Origin bit of a row among the head's largest OV entries.
ORIGIN_OV = 1
#: Origin bit of a row among the head's largest QK entries.
ORIGIN_QK = 2


def profile_order(profile_k: int) -> NDArray[np.int32]:
    """The canonical order of a source's ``profile_k²`` triples: pairs ``(destination rank, out rank)``
    ordered by the sum of the two ranks, then the destination rank, ``[profile_k², 2]``.

    Defined here only: the view lists a source's triples in this order (``profile_order`` in its data).
    """
    pairs = sorted(((i, j) for i in range(profile_k) for j in range(profile_k)), key=lambda ij: (ij[0] + ij[1], ij[0]))
    return np.asarray(pairs, dtype=np.int32).reshape(-1, 2)


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


def _profiles(
    model: CircuitModel,
    layer: int,
    head: int,
    sources: list[int],
    k: int,
    memory_budget: int,
    offset: int | None = None,
) -> _Profiles:
    """``source_profile`` of many sources at once (one QK column block and one OV row block)."""
    if not sources:
        empty_i = np.zeros((0, k), dtype=np.int64)
        empty_f = np.zeros((0, k), dtype=np.float32)
        return _Profiles([], empty_i, empty_f, empty_i, empty_f)
    ids = torch.as_tensor(sources, dtype=torch.long, device=model.device)
    qk_cols = _full_qk(model, layer, head, offset)[:, ids]
    ov_rows = _full_ov(model, layer, head)[ids, :]
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

    def __init__(
        self,
        model: CircuitModel,
        k: int,
        profile_k: int,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        offset: int | None = None,
    ) -> None:
        self.model = model
        self.k = k
        self.profile_k = profile_k
        self.memory_budget = memory_budget
        self.offset = offset  # rotary models: QK circuits at this offset (see widgets.core.offset)
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
            from tqdm import tqdm

            heads = list(tqdm(heads, desc="skip-trigrams", leave=False))
        for layer, head in heads:
            # the engine's private entry points: the model was checked where this view was built
            model, k, budget, offset = self.model, self.k, self.memory_budget, self.offset
            ov_rows = _skip_trigrams(model, layer, head, k, None, "ov", budget, False, offset)
            qk_rows = _skip_trigrams(model, layer, head, k, None, "qk", budget, False, offset)
            merged = _merge_rows(ov_rows, qk_rows)
            rows = out["rows"][layer, head]
            values = out["row_values"][layer, head]
            rows[:] = NONE
            values[:] = 0.0
            for i, (r, bits) in enumerate(merged):
                rows[i] = (vocab.local(r.source), vocab.local(r.destination), vocab.local(r.out), bits)
                values[i] = (r.qk, r.ov)
            sources = list(dict.fromkeys([r.source for r, _ in merged] + extra))
            prof = _profiles(self.model, layer, head, sources, self.profile_k, self.memory_budget, self.offset)
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
        prof = _profiles(self.model, layer, head, [int(source)], self.profile_k, self.memory_budget, self.offset)
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
