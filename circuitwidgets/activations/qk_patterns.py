"""Attention patterns over long contexts, computed exactly on demand from queries and keys.

``H · N²`` weights are never held (DESIGN.md §3b). :class:`QKPatterns` keeps
the post-rotary queries ``q [n_layers, n_heads, N, d_head]`` and keys ``k
[n_layers, n_kv_heads, N, d_head]`` (``O(N · d_head)`` per head) and computes,
chunk of rows by chunk of rows (``O(chunk · N)`` memory, like flash attention):

- each row's log-sum-exp ``lse_i = log Σ_j exp(s_ij)`` once per head, so that any
  weight is ``A_ij = exp(s_ij − lse_i)`` exactly;
- in the same pass, an *overview*: the max and the mean of ``A`` over blocks
  of ``block × block`` cells (exact aggregates of the dense pattern, whose
  masked cells are 0), and each row's top-``k`` sources with their weights;
- then any *tile* on demand: ``TILE × TILE`` cells of block size ``2^level``
  (level 0: single weights), again as exact block max and mean.

Given each source's value norm ``n_j = ‖v_j W_O‖`` (``value_norms``), the same
holds for the value-weighted pattern ``A_ij n_j / Σ_k A_ik n_k`` (kind
``"value"``): it is the softmax of the scores plus ``log n_j``, so it has its own
log-sum-exp and is tiled exactly like the raw pattern (a row whose norms are all
zero stays zero, as in :func:`circuitwidgets.activations.value_paths.value_weighted`).

Scores are ``s_ij = softcap(q_i · k_j / scale)`` with ``softcap(x) = c ·
tanh(x / c)``, masked to ``j ≤ i`` when causal and to ``i − w < j`` (and ``j <
i + w`` when not causal) with a sliding window ``w``, as in the model's forward
pass (:func:`circuitwidgets.model.forward.attention_mask`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.activations.summary import HeadSummariser, HeadSummary, rows_for
from circuitwidgets.activations.tile_pass import TilePass, tile_bounds
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError

__all__ = [
    "CHUNK_BYTES",
    "KEPT_BANDS",
    "KINDS",
    "TILE",
    "HeadSummariser",
    "HeadSummary",
    "QKPatterns",
    "overview_block",
]

#: Cells along a tile's side (at any level).
TILE = 64

#: Scores held at once while summarising a head or computing a tile (float32 bytes of one chunk of
#: rows; one row at least, ``4 N`` bytes). Small chunks skip more of a causal head's masked triangle
#: and stay in cache: at 4,096 tokens one head took 0.37 s in one 64 MiB chunk and 0.14 s in 4 MiB
#: chunks of 256 rows (identical results). A chunk may be fewer rows than an overview block (at
#: 10⁶ tokens a block is 4,096 rows, 16 GB of scores): blocks then fold across chunks.
CHUNK_BYTES = 4 * 2**20

#: Bands of tile rows whose log-sum-exps a :class:`QKPatterns` keeps for the next tiles of the same rows (at 262K
#: tokens a coarsest band is 32,768 floats, 128 KiB).
KEPT_BANDS = 32

#: Cells along the overview's side at most.
OVERVIEW_CELLS = 256

#: Patterns a :class:`QKPatterns` can tile: raw weights, and value-weighted when it has value norms.
KINDS = ("raw", "value")


def overview_block(n_tokens: int, cells: int = OVERVIEW_CELLS) -> int:
    """Block size of the overview: the smallest power of two with ``ceil(n / block) ≤ cells``."""
    block = 1
    while -(-n_tokens // block) > cells:
        block *= 2
    return block


def _as_tensor(x: Any, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        try:
            t = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ArgumentTypeError(f"{name}: expected an array of numbers, got {type(x).__name__} ({exc})") from None
    if t.is_complex() or t.dtype == torch.bool or not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
        raise ArgumentTypeError(f"{name}: expected real floating-point values, got dtype {t.dtype}")
    if t.ndim != 4:
        raise ShapeError(f"{name}: expected [n_layers, n_heads, n_tokens, d_head], got shape {tuple(t.shape)}")
    return t


def _windows(sliding_window: int | Sequence[int | None] | None, n_layers: int) -> list[int | None]:
    if sliding_window is None or isinstance(sliding_window, int):
        windows: list[int | None] = [sliding_window] * n_layers
    elif isinstance(sliding_window, Sequence) and not isinstance(sliding_window, str):
        windows = list(sliding_window)
        if len(windows) != n_layers:
            raise ArgumentError(f"sliding_window: expected one window per layer ({n_layers}), got {len(windows)}")
    else:
        raise ArgumentTypeError(
            f"sliding_window: expected None, an int or one per layer, got {type(sliding_window).__name__}"
        )
    for layer, w in enumerate(windows):
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w <= 0):
            raise ArgumentError(f"sliding_window: expected positive ints (or None), got {w!r} for layer {layer}")
    return windows


def _norms(value_norms: Any, shape: tuple[int, int, int]) -> torch.Tensor | None:
    """``value_norms`` as float32 ``[n_layers, n_heads, N]``, finite and ``≥ 0`` (or ``None``)."""
    if value_norms is None:
        return None
    t = value_norms.detach() if isinstance(value_norms, torch.Tensor) else None
    if t is None:
        try:
            t = torch.as_tensor(np.asarray(value_norms, dtype=np.float32))
        except (TypeError, ValueError) as exc:
            raise ArgumentTypeError(
                f"value_norms: expected an array of numbers, got {type(value_norms).__name__} ({exc})"
            ) from None
    if not t.is_floating_point():
        raise ArgumentTypeError(f"value_norms: expected real floating-point values, got dtype {t.dtype}")
    if tuple(t.shape) != shape:
        raise ShapeError(f"value_norms: expected [n_layers, n_heads, n_tokens] = {list(shape)}, got {list(t.shape)}")
    t = t.to(torch.float32)
    if not bool(torch.isfinite(t).all()):
        raise NonFiniteError("value_norms: expected finite values, got NaN or infinite entries")
    if bool((t < 0).any()):
        raise ArgumentError(f"value_norms: expected norms ≥ 0, got minimum {float(t.min()):.4g}")
    return t


def _empty_rows_to_inf_(lse: torch.Tensor) -> torch.Tensor:
    """Rows with no weight at all (value norms all zero) get ``lse = +inf``, so their weights are 0, not NaN."""
    return lse.masked_fill_(lse == float("-inf"), float("inf"))


def _positive(value: float | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ArgumentError(f"{name}: expected a positive finite number (or None), got {value!r}")
    return float(value)


class QKPatterns:
    """Exact attention patterns from post-rotary queries and keys, without holding any ``N × N`` array.

    Parameters
    ----------
    q
        Queries ``[n_layers, n_heads, N, d_head]`` (numpy or torch, any float dtype, any device).
    k
        Keys ``[n_layers, n_kv_heads, N, d_head]``; ``n_heads`` must be a multiple of
        ``n_kv_heads`` (grouped-query attention: query head ``h`` reads key head
        ``h // (n_heads / n_kv_heads)``).
    causal
        Mask sources after the destination.
    scale
        Scores are ``q · k / scale``; default ``sqrt(d_head)``.
    sliding_window
        ``w`` (or one per layer, ``None`` for none): a destination ``i`` sees sources ``j > i − w``
        (and ``j < i + w`` when not causal).
    softcap
        ``c``: scores become ``c · tanh(s / c)`` (Gemma 2).
    value_norms
        ``‖v_j W_O‖`` per layer, head and source ``[n_layers, n_heads, N]`` (``≥ 0``): enables
        the value-weighted pattern (``kind="value"`` in :meth:`weights` and :meth:`tile`).

    Cost: holds ``q`` and ``k`` as float32 (``4 · (n_heads + n_kv_heads) · N · d_head`` bytes
    per layer) and ``4 N`` bytes of log-sum-exp per summarised head.
    """

    def __init__(
        self,
        q: Any,
        k: Any,
        *,
        causal: bool = True,
        scale: float | None = None,
        sliding_window: int | Sequence[int | None] | None = None,
        softcap: float | None = None,
        value_norms: Any = None,
    ) -> None:
        qt, kt = _as_tensor(q, "q"), _as_tensor(k, "k")
        n_layers, n_heads, n, d = (int(s) for s in qt.shape)
        if kt.shape[0] != n_layers or kt.shape[2] != n or kt.shape[3] != d:
            raise ShapeError(
                f"k: expected [n_layers={n_layers}, n_kv_heads, n_tokens={n}, d_head={d}] like q, got shape {tuple(kt.shape)}"
            )
        n_kv = int(kt.shape[1])
        if min(n_layers, n_heads, n, d, n_kv) == 0:
            raise ShapeError(f"q, k: expected non-empty arrays, got shapes {tuple(qt.shape)} and {tuple(kt.shape)}")
        if n_heads % n_kv:
            raise ArgumentError(f"k: n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv})")
        if qt.dtype != kt.dtype:
            raise ArgumentTypeError(f"k: expected the dtype of q ({qt.dtype}), got {kt.dtype}")
        if not isinstance(causal, bool):
            raise ArgumentTypeError(f"causal: expected a bool, got {type(causal).__name__}")
        for name, t in (("q", qt), ("k", kt)):
            if not bool(torch.isfinite(t).all()):
                raise NonFiniteError(f"{name}: expected finite values, got NaN or infinite entries")
        self.causal = causal
        self.scale = _positive(scale, "scale") or math.sqrt(d)
        self.q = qt.to(torch.float32) / self.scale  # divided once here, not in every score
        self.k = kt.to(torch.float32)
        self.softcap = _positive(softcap, "softcap")
        self.windows = _windows(sliding_window, n_layers)
        self.n_layers, self.n_heads, self.n_kv_heads, self.n_tokens, self.d_head = n_layers, n_heads, n_kv, n, d
        norms = _norms(value_norms, (n_layers, n_heads, n))
        self.norms = None if norms is None else norms.to(self.q.device)
        self.kinds: tuple[str, ...] = KINDS if norms is not None else KINDS[:1]
        self._lse: dict[tuple[int, int, str], torch.Tensor] = {}
        self._bands: dict[
            tuple[int, int, str, int, int], torch.Tensor
        ] = {}  # (layer, head, kind, r0, r1), oldest first

    # ------------------------------------------------------------ scores

    def _check_head(self, layer: int, head: int) -> None:
        if not (0 <= layer < self.n_layers and 0 <= head < self.n_heads):
            raise ArgumentError(
                f"head: expected layer < {self.n_layers} and head < {self.n_heads}, got [{layer}, {head}]"
            )

    def _check_kind(self, kind: str) -> None:
        if kind not in self.kinds:
            why = " (value-weighted patterns need value_norms)" if kind in KINDS else ""
            raise ArgumentError(f"kind: expected one of {self.kinds}{why}, got {kind!r}")

    def _mask_(self, s: torch.Tensor, layer: int, r0: int, r1: int, c0: int, c1: int) -> None:
        """Set the masked cells of scores ``s [r1 - r0, c1 - c0]`` to ``-inf`` in place.

        Only the columns a mask can reach are touched (the diagonal band of a causal chunk,
        the window's edges), so the cost is ``O(rows · chunk)``, not ``O(rows · N)``.
        """
        w = self.windows[layer]

        def apply(lo: int, hi: int, bad: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
            lo, hi = max(lo, c0), min(hi, c1)
            if lo >= hi:
                return
            dest = torch.arange(r0, r1, device=s.device)[:, None]
            src = torch.arange(lo, hi, device=s.device)[None, :]
            s[:, lo - c0 : hi - c0].masked_fill_(bad(dest, src), float("-inf"))

        if self.causal:
            apply(r0 + 1, c1, lambda d, j: j > d)
        if w is not None:
            apply(c0, r1 - w, lambda d, j: j <= d - w)
            if not self.causal:
                apply(r0 + w, c1, lambda d, j: j >= d + w)

    def columns(self, layer: int, r0: int, r1: int) -> tuple[int, int]:
        """The columns rows ``r0..r1-1`` may attend to at all, ``[c0, c1)``."""
        w = self.windows[layer]
        c0 = 0 if w is None else max(0, r0 - w + 1)
        c1 = r1 if self.causal else (self.n_tokens if w is None else min(self.n_tokens, r1 - 1 + w))
        return c0, c1

    def scores(self, layer: int, head: int, r0: int, r1: int, c0: int, c1: int, kind: str = "raw") -> torch.Tensor:
        """Scores ``[r1 - r0, c1 - c0]`` float32, ``-inf`` where masked; for ``kind="value"`` plus ``log n_j``.

        Cost: ``O(rows · cols · d_head)``.
        """
        kv = head // (self.n_heads // self.n_kv_heads)
        s = self.q[layer, head, r0:r1] @ self.k[layer, kv, c0:c1].T  # q is stored divided by the scale
        if self.softcap is not None:
            s.div_(self.softcap).tanh_().mul_(self.softcap)
        if kind == "value":
            s.add_(self._value_norms(layer, head)[c0:c1].log())
        self._mask_(s, layer, r0, r1, c0, c1)
        return s

    def _value_norms(self, layer: int, head: int) -> torch.Tensor:
        if self.norms is None:
            raise ArgumentError("kind: value-weighted patterns need value_norms")
        return self.norms[layer, head]

    def _chunk_rows(self, block: int) -> int:
        return rows_for(CHUNK_BYTES, self.n_tokens, block)

    # ------------------------------------------------------------ one pass per head

    def summariser(self, layer: int, head: int, block: int, top_k: int) -> HeadSummariser:
        """A summary of ``[layer, head]`` to compute chunk by chunk (see :class:`HeadSummariser`)."""
        self._check_head(layer, head)
        return HeadSummariser(self, layer, head, block, top_k, self._chunk_rows(block))

    def summarise(self, layer: int, head: int, block: int, top_k: int) -> HeadSummary:
        """Log-sum-exp, overview (block max and mean) and each row's top-``k`` sources, in one chunked pass.

        With value norms the value-weighted pattern's log-sum-exp and overview come in the same pass.

        Cost: ``O(N² · d_head)`` time (half when causal), ``O(chunk · N)`` memory.
        """
        summariser = self.summariser(layer, head, block, top_k)
        while not summariser.done:
            summariser.step()
        return summariser.result()

    def keep_lse(self, layer: int, head: int, lse: torch.Tensor, kind: str = "raw") -> None:
        """Keep a head's log-sum-exp computed elsewhere (a finished summary), so tiles need not recompute it."""
        self._lse[layer, head, kind] = lse

    def lse(self, layer: int, head: int, kind: str = "raw") -> torch.Tensor:
        """Each row's log-sum-exp ``[N]`` of ``kind``'s scores (computed once, chunked, then kept; ``+inf`` for an empty row)."""
        self._check_head(layer, head)
        self._check_kind(kind)
        cached = self._lse.get((layer, head, kind))
        if cached is not None:
            return cached
        n = self.n_tokens
        lse = torch.empty(n, dtype=torch.float32, device=self.q.device)
        step = self._chunk_rows(1)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            lse[r0:r1] = self.lse_rows(layer, head, r0, r1, kind)
        self._lse[layer, head, kind] = lse
        return lse

    def lse_rows(self, layer: int, head: int, r0: int, r1: int, kind: str = "raw") -> torch.Tensor:
        """The log-sum-exp ``[r1 − r0]`` of rows ``r0..r1-1`` (``+inf`` for an empty row), in one chunk.

        Cost: ``O(rows · N · d_head)`` time, ``4 · rows · N`` bytes.
        """
        c0, c1 = self.columns(layer, r0, r1)
        s = self.scores(layer, head, r0, r1, c0, c1, kind)
        top = s.amax(-1, keepdim=True)
        top.masked_fill_(top == float("-inf"), 0.0)  # a row of zero norms: its sum is 0, its lse -inf
        return _empty_rows_to_inf_((top + s.sub_(top).exp_().sum(-1, keepdim=True).log()).squeeze(-1))

    # ------------------------------------------------------------ on demand

    def weights(self, layer: int, head: int, r0: int, r1: int, c0: int, c1: int, kind: str = "raw") -> torch.Tensor:
        """Exact weights ``A[r0:r1, c0:c1]`` (or value-weighted) float32. Cost: ``O(rows · cols · d_head)`` (after the log-sum-exp)."""
        lse = self.lse(layer, head, kind)
        return self.scores(layer, head, r0, r1, c0, c1, kind).sub_(lse[r0:r1, None]).exp_()

    def tile(
        self, layer: int, head: int, level: int, row: int, col: int, kind: str = "raw"
    ) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """Tile ``(row, col)`` at ``level``: block max and mean ``[rows, cols]`` (≤ ``TILE``), block ``2^level``.

        Covers destinations ``row · TILE · 2^level ...`` and sources likewise; cut at the matrix's edge.
        All at once (blocking): :meth:`tile_pass` does the same work chunk by chunk.
        """
        return self.tile_pass(layer, head, level, row, col, kind).run()

    def tile_pass(self, layer: int, head: int, level: int, row: int, col: int, kind: str = "raw") -> TilePass:
        """Tile ``(row, col)`` at ``level`` to compute one chunk of rows per step (see :class:`TilePass`).

        Each chunk holds at most :data:`CHUNK_BYTES` of scores (one row at least) over the columns
        its rows can see; the rows' log-sum-exps, unless the head's are kept (:meth:`keep_lse`),
        are computed first, chunk by chunk, for the tile's rows only.
        Cost: ``O((TILE · 2^level)² · d_head)`` time (about half on the diagonal), plus
        ``O(TILE · 2^level · N · d_head)`` without kept log-sum-exps; nothing when wholly masked.
        """
        self._check_head(layer, head)
        self._check_kind(kind)
        bounds = tile_bounds(self.n_tokens, TILE, level, row, col)
        r0, r1 = bounds[0], bounds[1]
        kept = self._lse.get((layer, head, kind))
        band_key = (layer, head, kind, r0, r1)
        band = None if kept is not None else self._bands.get(band_key)

        def weights(a: int, b: int, lo: int, hi: int, lse: torch.Tensor | None) -> torch.Tensor:
            if lse is not None:
                rows = lse
            elif kept is not None:
                rows = kept[a:b]
            else:
                rows = band[a - r0 : b - r0] if band is not None else self.lse_rows(layer, head, a, b, kind)
            return self.scores(layer, head, a, b, lo, hi, kind).sub_(rows[:, None]).exp_()

        def norm(a: int, b: int) -> torch.Tensor:
            rows = self.lse_rows(layer, head, a, b, kind)
            if b >= r1 and work.norms is not None:  # the band's last rows: the next tile of these rows reuses it
                whole = work.norms.clone()
                whole[a - r0 :] = rows
                self._keep_band(band_key, whole)
            return rows

        work = TilePass(
            bounds,
            2**level,
            lambda a, b: self.columns(layer, a, b),
            weights,
            None if kept is not None or band is not None else norm,
            CHUNK_BYTES // 4,
        )
        return work

    def _keep_band(self, key: tuple[int, int, str, int, int], lse: torch.Tensor) -> None:
        """Keep a tile's rows' log-sum-exps (the newest :data:`KEPT_BANDS`): the view asks for the tiles of a
        viewport row by row, and every tile of one band of rows needs the same normalisers, the bulk of a coarse
        tile's work (its rows against every column they see, the tile only against its own)."""
        self._bands.pop(key, None)
        self._bands[key] = lse
        while len(self._bands) > KEPT_BANDS:
            del self._bands[next(iter(self._bands))]

    def dense(self, layer: int, head: int, kind: str = "raw") -> torch.Tensor:
        """The whole pattern ``[N, N]`` of ``kind`` (for tests and small inputs). Cost: ``4 N²`` bytes."""
        return self.weights(layer, head, 0, self.n_tokens, 0, self.n_tokens, kind)
