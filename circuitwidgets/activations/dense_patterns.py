"""Long-context patterns from a dense array: the engine :class:`~circuitwidgets.activations.qk_patterns.QKPatterns`
is for queries and keys, for weights computed elsewhere (a TransformerLens or Hugging Face cache).

:class:`DensePatterns` holds the user's ``[n_heads, N, N]`` arrays per layer (numpy or torch,
not copied) and serves what a long-context widget reads of its engine
(:class:`~circuitwidgets.activations.summary.PatternEngine`): a summary per head computed
chunk of rows by chunk of rows (block max and mean over ``block × block`` cells, each row's
top-``k`` sources, ``O(chunk · N)`` memory beyond the array), and exact tiles on demand.

Entries are the array's own (float32), never renormalised: a tile at level 0 is the array's
weights. When ``causal`` the cells above the diagonal count as 0, as the dense view sends
patterns (only the lower triangle; what lies above it is below quantisation by then).
With value norms ``n_j`` the value-weighted pattern is ``A_ij n_j / Σ_k A_ik n_k`` (a row
whose products are all zero stays zero), as
:func:`~circuitwidgets.activations.value_paths.value_weighted` computes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.activations.qk_patterns import CHUNK_BYTES, KINDS, TILE
from circuitwidgets.activations.summary import (
    HeadSummary,
    RowPass,
    block_counts_rect,
    rows_for,
    top_k_cells,
)
from circuitwidgets.activations.tile_pass import TilePass, tile_bounds
from circuitwidgets.errors import ArgumentError, ShapeError

__all__ = ["DensePatterns", "DenseSummariser"]


def _layers(attention: Any) -> list[Any]:
    """``[n_layers, n_heads, N, N]`` (or a list of ``[n_heads, N, N]``) as one array per layer, not copied."""
    if isinstance(attention, (list, tuple)):
        return list(attention)
    if isinstance(attention, torch.Tensor):
        attention = attention.detach()
    return [attention[l] for l in range(int(attention.shape[0]))]


class DensePatterns:
    """Exact long-context summaries and tiles of dense attention weights (see the module docs).

    Parameters
    ----------
    attention
        Weights ``[n_layers, n_heads, N, N]`` (``[..., dest, src]``) or one ``[n_heads, N, N]``
        per layer, numpy or torch on any device; read a chunk of rows at a time, as float32.
        Checked by the caller (:meth:`AttentionPatterns.from_arrays` checks ranges and rows).
    causal
        Whether the cells above the diagonal count as 0.
    value_norms
        ``‖v_j W_O‖`` ``[n_layers, n_heads, N]`` (``≥ 0``): enables the value-weighted pattern.
    """

    def __init__(self, attention: Any, *, causal: bool, value_norms: Any = None) -> None:
        self.layers = _layers(attention)
        if not self.layers:
            raise ShapeError("attention: expected at least one layer, got none")
        shape = tuple(int(s) for s in self.layers[0].shape)
        if len(shape) != 3 or shape[1] != shape[2] or any(tuple(a.shape) != shape for a in self.layers):
            raise ShapeError(f"attention: expected [n_layers, n_heads, N, N], got layers of shape {shape}")
        self.n_layers, self.n_heads, self.n_tokens = len(self.layers), shape[0], shape[1]
        self.causal = bool(causal)
        self.norms: torch.Tensor | None = None
        if value_norms is not None:
            norms = torch.as_tensor(np.asarray(value_norms, dtype=np.float32))
            if tuple(norms.shape) != (self.n_layers, self.n_heads, self.n_tokens):
                raise ShapeError(f"value_norms: expected [n_layers, n_heads, N], got {list(norms.shape)}")
            self.norms = norms
        self.kinds: tuple[str, ...] = KINDS if self.norms is not None else KINDS[:1]
        self._totals: dict[tuple[int, int], torch.Tensor] = {}

    def _check(self, layer: int, head: int, kind: str) -> None:
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise ArgumentError(
                f"head: expected layer < {self.n_layers} and head < {self.n_heads}, got [{layer}, {head}]"
            )
        if kind not in self.kinds:
            why = " (value-weighted patterns need value_norms)" if kind in KINDS else ""
            raise ArgumentError(f"kind: expected one of {self.kinds}{why}, got {kind!r}")

    def raw(self, layer: int, head: int, r0: int, r1: int, c0: int, c1: int) -> torch.Tensor:
        """The array's ``A[r0:r1, c0:c1]`` as a float32 CPU copy, zero above the diagonal when causal."""
        a = self.layers[layer][head]
        if isinstance(a, torch.Tensor):
            out = a[r0:r1, c0:c1].to("cpu", torch.float32, copy=True)
        else:
            out = torch.from_numpy(np.array(a[r0:r1, c0:c1], dtype=np.float32))
        lo = max(c0, r0 + 1)
        if self.causal and lo < c1:  # the columns the diagonal crosses: src > dest is masked
            dest = torch.arange(r0, r1)[:, None]
            src = torch.arange(lo, c1)[None, :]
            out[:, lo - c0 :].masked_fill_(src > dest, 0.0)
        return out

    def columns(self, r1: int) -> int:
        """End of the columns rows before ``r1`` can hold weight (``r1`` when causal)."""
        return r1 if self.causal else self.n_tokens

    def row_totals(self, layer: int, head: int) -> torch.Tensor:
        """``Σ_k A_ik n_k`` per row ``[N]`` (value-weighted patterns; computed once, chunked, then kept)."""
        self._check(layer, head, "value")
        kept = self._totals.get((layer, head))
        if kept is None:
            n, step = self.n_tokens, self.chunk_rows(1)
            kept = torch.empty(n, dtype=torch.float32)
            for r0 in range(0, n, step):
                r1 = min(n, r0 + step)
                kept[r0:r1] = self.totals_rows(layer, head, r0, r1)
            self._totals[layer, head] = kept
        return kept

    def totals_rows(self, layer: int, head: int, r0: int, r1: int) -> torch.Tensor:
        """``Σ_k A_ik n_k`` of rows ``r0..r1-1`` ``[r1 − r0]``, in one chunk. Cost: ``4 · rows · N`` bytes."""
        c1 = self.columns(r1)
        return self.raw(layer, head, r0, r1, 0, c1).mul_(self._value_norms(layer, head)[:c1]).sum(-1)

    def keep_totals(self, layer: int, head: int, totals: torch.Tensor) -> None:
        """Keep a head's value-weighted row totals computed by its summary, so tiles need not recompute them."""
        self._totals[layer, head] = totals

    def _value_norms(self, layer: int, head: int) -> torch.Tensor:
        if self.norms is None:
            raise ArgumentError("kind: value-weighted patterns need value_norms")
        return self.norms[layer, head]

    def weights(
        self,
        layer: int,
        head: int,
        r0: int,
        r1: int,
        c0: int,
        c1: int,
        kind: str = "raw",
        totals: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Weights ``[r1 - r0, c1 - c0]`` of ``kind`` (float32): the array's, or value-weighted from them.

        ``totals``: the value-weighted totals of these rows when known (else the head's, computed once).
        """
        self._check(layer, head, kind)
        a = self.raw(layer, head, r0, r1, c0, c1)
        if kind == "value":
            totals = (self.row_totals(layer, head)[r0:r1] if totals is None else totals)[:, None]
            inv = torch.where(totals > 0, totals.reciprocal(), torch.zeros_like(totals))
            a.mul_(self._value_norms(layer, head)[c0:c1]).mul_(inv)
        return a

    def dense(self, layer: int, head: int, kind: str = "raw") -> torch.Tensor:
        """The whole pattern ``[N, N]`` of ``kind`` (float32; causal: zero above the diagonal). Cost: ``4 N²`` bytes."""
        return self.weights(layer, head, 0, self.n_tokens, 0, self.n_tokens, kind)

    def tile(
        self, layer: int, head: int, level: int, row: int, col: int, kind: str = "raw"
    ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """Tile ``(row, col)`` at ``level``: block max and mean ``[rows, cols]`` (≤ ``TILE``), blocks of ``2^level``.

        As :meth:`QKPatterns.tile <circuitwidgets.activations.qk_patterns.QKPatterns.tile>`, read
        from the array, all at once (blocking): :meth:`tile_pass` does it chunk by chunk.
        """
        return self.tile_pass(layer, head, level, row, col, kind).run()

    def tile_pass(self, layer: int, head: int, level: int, row: int, col: int, kind: str = "raw") -> TilePass:
        """Tile ``(row, col)`` at ``level`` to compute one chunk of rows (at most :data:`CHUNK_BYTES`) per step.

        A value-weighted tile first sums its rows' totals, chunk by chunk, unless the head's are kept.
        Cost: ``O((TILE · 2^level)²)`` (plus ``O(TILE · 2^level · N)`` for those totals); nothing above the diagonal.
        """
        self._check(layer, head, kind)
        bounds = tile_bounds(self.n_tokens, TILE, level, row, col)
        need_totals = kind == "value" and (layer, head) not in self._totals

        def weights(a: int, b: int, lo: int, hi: int, totals: torch.Tensor | None) -> torch.Tensor:
            return self.weights(layer, head, a, b, lo, hi, kind, totals)

        def norm(a: int, b: int) -> torch.Tensor:
            return self.totals_rows(layer, head, a, b)

        return TilePass(
            bounds,
            2**level,
            lambda a, b: (0, self.columns(b)),
            weights,
            norm if need_totals else None,
            CHUNK_BYTES // 4,
        )

    def chunk_rows(self, block: int) -> int:
        """Rows per summary step: about :data:`CHUNK_BYTES` of float32 (one row at least), whole blocks when one fits."""
        return rows_for(CHUNK_BYTES, self.n_tokens, block)

    def summariser(self, layer: int, head: int, block: int, top_k: int) -> DenseSummariser:
        """A summary of ``[layer, head]`` to compute chunk by chunk (see :class:`DenseSummariser`)."""
        self._check(layer, head, "raw")
        return DenseSummariser(self, layer, head, block, top_k, self.chunk_rows(block))


class DenseSummariser(RowPass):
    """One head of a :class:`DensePatterns` summarised one chunk of rows per :meth:`step`.

    The interface of :class:`~circuitwidgets.activations.summary.HeadSummariser`; ``lse`` in the
    result is the log of each row's total (about 0 for rows summing to 1).
    """

    def __init__(self, engine: DensePatterns, layer: int, head: int, block: int, top_k: int, chunk: int) -> None:
        self.engine = engine
        n = engine.n_tokens
        self._start(n, layer, head, block, top_k, chunk, torch.device("cpu"), engine.norms is not None)
        self.totals = torch.zeros(n, dtype=torch.float32)

    def step(self) -> tuple[int, int]:
        """Summarise the next chunk of rows; returns the overview rows ``[i0, i1)`` it made final. Cost: ``O(chunk · N)``."""
        if self.done:
            return self.rows_done, self.rows_done
        r0, i0 = self.next_row, self.rows_done
        r1 = min(self.engine.n_tokens, r0 + self.chunk)
        c1 = self.engine.columns(r1)
        a = self.engine.raw(self.layer, self.head, r0, r1, 0, c1)
        self.raw.lse[r0:r1] = a.sum(-1).log()
        row_max = self.raw.add(a, torch.ones(r1 - r0, 1), r0, 0, self.block)
        if self.k:
            w, idx = top_k_cells(a, row_max, self.block, self.k)
            kk = w.shape[1]
            weights = w.clamp_(min=0).numpy()
            self.top_weights[r0:r1, :kk] = weights
            self.top_sources[r0:r1, :kk] = np.where(weights > 0, idx.to(torch.int32).numpy(), -1)
        if self.value is not None:
            a.mul_(self.engine._value_norms(self.layer, self.head)[:c1])  # (a is not needed after this)
            total = a.sum(-1, keepdim=True)
            self.totals[r0:r1] = total.squeeze(-1)
            empty = total <= 0
            self.value.lse[r0:r1] = total.log().masked_fill_(empty, float("inf")).squeeze(-1)
            self.value.add(a, total.reciprocal().masked_fill_(empty, 0.0), r0, 0, self.block)
        self.next_row = r1
        return i0, self.rows_done

    def band(self, i0: int, i1: int, kind: str = "raw") -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """Block max and mean of ``kind``'s overview rows ``[i0, i1)``, ``[i1 − i0, G]`` each."""
        if self._counts is None:
            self._counts = block_counts_rect(self.engine.n_tokens, self.engine.n_tokens, self.block)
        aggregates = self.value if kind == "value" else self.raw
        if aggregates is None:
            raise ValueError("kind: value-weighted patterns need value_norms")
        return aggregates.band(i0, i1, self._counts)

    def result(self) -> HeadSummary:
        """The finished summary (and, with value norms, the row totals kept by the engine for tiles)."""
        if not self.done:
            raise RuntimeError(f"head [{self.layer}, {self.head}]: summary taken before its last chunk")
        bmax, mean = self.band(0, self.grid)
        value = None
        if self.value is not None:
            self.engine.keep_totals(self.layer, self.head, self.totals)
            value = (self.value.lse, *self.band(0, self.grid, "value"))
        return HeadSummary(self.raw.lse, bmax, mean, self.top_sources, self.top_weights, value)
