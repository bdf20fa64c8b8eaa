"""Low-rank matrices kept as the product of two factors, never formed unless asked.

A :class:`LowRankMatrix` ``M = A @ B`` stores ``A [m, r]`` and ``B [r, n]`` with the
inner dimension ``r`` no larger than ``min(m, n)`` (the product is split at its
narrowest dimension). Everything the paper needs is computed from the factors:

- eigenvalues from ``λ(AB) = λ(BA)`` (an ``r × r`` problem);
- the SVD from QR factorisations of ``A`` and ``Bᵀ`` and the SVD of the small
  ``r × r`` middle matrix;
- the Frobenius norm from ``‖AB‖_F² = tr((AᵀA)(BBᵀ))``. The tempting shortcut
  ``‖BA‖_F`` (the "permuted product", which is right for the trace and the
  eigenvalues but wrong for the norm) is the bug that corrupted the paper's first
  composition diagram; it is never used here;
- sums from concatenated factors, ``A1 B1 + A2 B2 = [A1 A2] [B1; B2]`` (inner
  dimension ``r1 + r2``, re-split if that exceeds ``min(m, n)``);
- the diagonal from row-wise dot products; slices by slicing the factors;
- top-k entries (global, per row, per column) and in-row ranks from dense tiles
  of the product formed one at a time, each at most ``memory_budget`` bytes
  (and :data:`TILE_BYTES`), reduced before the next is formed.

For TransformerLens ``FactoredMatrix`` users, :attr:`LowRankMatrix.AB` (the dense
product) and :meth:`LowRankMatrix.norm` (the Frobenius norm) are aliases of
:meth:`LowRankMatrix.dense` and :meth:`LowRankMatrix.frobenius_norm`.

Dtypes: large outputs (factors, slices, blocks, top-k values, the SVD's ``U`` and
``Vh``) are in the factors' dtype; small ``r × r`` problems (eigenvalues,
singular values, norms, traces) are solved in float64 and returned as float64
or complex128 (or a Python float).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch

from circuitwidgets.circuits._checks import check_bool, check_budget, check_int, progress
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, NonFiniteError, ShapeError

#: Bytes one block or tile of the dense product may take in chunked computations.
DEFAULT_MEMORY_BUDGET = 64 * 2**20
#: Largest bytes of one dense tile in the chunked reductions. Smaller tiles stay in
#: cache, larger ones pay fewer thread synchronisations; 32 MiB measured best on a
#: busy 2-core machine (GPT-2-sized full circuits).
TILE_BYTES = 32 * 2**20
#: Largest number of entries :meth:`LowRankMatrix.dense` forms without ``max_entries``.
DEFAULT_DENSE_LIMIT = 2**26

Index = int | slice | Sequence[int] | torch.Tensor


class TopEntries(NamedTuple):
    """Largest (or smallest) entries of a matrix, best first: ``values [k]``, ``rows [k]``, ``cols [k]``."""

    values: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor


class TopK(NamedTuple):
    """Top-k along one dimension: ``values [n, k]`` and their ``indices [n, k]``, best first."""

    values: torch.Tensor
    indices: torch.Tensor


#: Largest result (values and indices) the top-k methods return; beyond it, a :class:`MemoryBudgetError`.
MAX_RESULT_BYTES = 2**30


def _check_result(name: str, entries: int, bytes_per_entry: int, what: str) -> None:
    """Refuse a result of ``entries`` entries beyond :data:`MAX_RESULT_BYTES`."""
    needed = entries * bytes_per_entry
    if needed > MAX_RESULT_BYTES:
        raise MemoryBudgetError(
            f"{name}: returning {what} needs {needed:,} bytes, more than MAX_RESULT_BYTES={MAX_RESULT_BYTES:,}; ask for fewer"
        )


def _narrow(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-split ``A @ B`` so the inner dimension is at most ``min(m, n)``.

    Cost ``O(m r n)`` only when ``r > min(m, n)``, where the product is no larger
    than the factors.
    """
    m, r = A.shape
    n = B.shape[1]
    if r <= min(m, n):
        return A, B
    product = A @ B
    if m <= n:
        return torch.eye(m, dtype=A.dtype, device=A.device), product
    return product, torch.eye(n, dtype=A.dtype, device=A.device)


def _as_index_tensor(name: str, index: object, device: torch.device) -> torch.Tensor:
    if isinstance(index, (str, bytes)) or index is None:
        raise ArgumentTypeError(f"{name}: expected an int, slice or sequence of ints, got {type(index).__name__}")
    try:
        return torch.as_tensor(index, device=device)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ArgumentTypeError(f"{name}: expected an int, slice or sequence of ints, got {type(index).__name__} ({exc})") from None


def _index_rows(x: torch.Tensor, index: Index, size: int, name: str) -> torch.Tensor:
    """Rows of ``x`` selected by an int, slice, sequence of ints or index tensor (ints keep the dim)."""
    if isinstance(index, bool):
        raise ArgumentTypeError(f"{name}: expected an int, slice or sequence of ints, got bool")
    if isinstance(index, int):
        if not -size <= index < size:
            raise ArgumentError(f"{name}: expected an index in [{-size}, {size}), got {index}")
        return x[index % size][None]
    if isinstance(index, slice):
        try:
            return x[index]
        except (TypeError, ValueError) as exc:
            raise ArgumentTypeError(f"{name}: expected a slice of ints, got {index!r} ({exc})") from None
    idx = _as_index_tensor(name, index, x.device)
    if idx.dtype == torch.bool:
        if idx.shape != (size,):
            raise ShapeError(f"{name}: expected a boolean mask of shape ({size},), got {tuple(idx.shape)}")
        return x[idx]
    if idx.dtype.is_floating_point or idx.ndim != 1:
        raise ArgumentError(f"{name}: expected a 1-D sequence of int indices, got shape {tuple(idx.shape)} dtype {idx.dtype}")
    if idx.numel() and (int(idx.min()) < -size or int(idx.max()) >= size):
        raise ArgumentError(f"{name}: expected indices in [{-size}, {size}), got range [{int(idx.min())}, {int(idx.max())}]")
    return x[idx.long()]


class LowRankMatrix:
    """``M = A @ B`` with ``A [m, r]``, ``B [r, n]``, kept factored.

    Parameters
    ----------
    A
        Left factor ``[m, r]``.
    B
        Right factor ``[r, n]`` (same dtype and device as ``A``).

    Notes
    -----
    If ``r > min(m, n)`` the factors are re-split at the narrowest dimension (one
    of them becomes an identity), so ``r <= min(m, n)`` always holds. Products
    with other low-rank or dense matrices keep the narrowest inner dimension.
    """

    def __init__(self, A: torch.Tensor, B: torch.Tensor) -> None:
        for name, factor in (("A", A), ("B", B)):
            if not isinstance(factor, torch.Tensor):
                raise ArgumentTypeError(f"{name}: expected a torch.Tensor, got {type(factor).__name__}")
            if factor.ndim != 2:
                raise ShapeError(f"{name}: expected a 2-D factor, got shape {tuple(factor.shape)}")
            if not factor.dtype.is_floating_point:
                raise ArgumentTypeError(f"{name}: expected a floating-point tensor, got dtype {factor.dtype}")
        if A.shape[1] != B.shape[0]:
            raise ShapeError(f"B: expected {A.shape[1]} rows to match A {tuple(A.shape)}, got shape {tuple(B.shape)}")
        if A.dtype != B.dtype or A.device != B.device:
            raise ArgumentTypeError(f"B: expected dtype {A.dtype} on {A.device} like A, got {B.dtype} on {B.device}")
        for name, factor in (("A", A), ("B", B)):
            if not bool(torch.isfinite(factor).all()):
                raise NonFiniteError(f"{name}: expected finite values, got {int((~torch.isfinite(factor)).sum())} NaN/Inf entries")
        self.A, self.B = _narrow(A, B)

    # ------------------------------------------------------------------ shape
    @property
    def shape(self) -> tuple[int, int]:
        """``(m, n)``."""
        return (int(self.A.shape[0]), int(self.B.shape[1]))

    @property
    def inner_dim(self) -> int:
        """The inner dimension ``r`` (an upper bound on the rank)."""
        return int(self.A.shape[1])

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the factors."""
        return self.A.dtype

    @property
    def device(self) -> torch.device:
        """Device of the factors."""
        return self.A.device

    def __repr__(self) -> str:
        m, n = self.shape
        return f"LowRankMatrix(shape=({m}, {n}), inner_dim={self.inner_dim}, dtype={self.dtype})"

    # ----------------------------------------------------------------- algebra
    @property
    def T(self) -> LowRankMatrix:  # noqa: N802 — the conventional name
        """Transpose ``Bᵀ Aᵀ`` (no copy of data beyond views)."""
        return LowRankMatrix(self.B.T, self.A.T)

    def __matmul__(self, other: LowRankMatrix | torch.Tensor) -> LowRankMatrix:
        """``self @ other``; cost ``O(r r' k)`` for low-rank ``other``, ``O(r n p)`` for dense ``[n, p]``."""
        if isinstance(other, LowRankMatrix):
            if self.shape[1] != other.shape[0]:
                raise ShapeError(f"other: expected {self.shape[1]} rows to multiply {self!r}, got shape {other.shape}")
            middle = self.B @ other.A
            if self.inner_dim <= other.inner_dim:
                return LowRankMatrix(self.A, middle @ other.B)
            return LowRankMatrix(self.A @ middle, other.B)
        if isinstance(other, torch.Tensor):
            if other.ndim != 2 or other.shape[0] != self.shape[1]:
                raise ShapeError(f"other: expected a [{self.shape[1]}, p] matrix, got shape {tuple(other.shape)}")
            return LowRankMatrix(self.A, self.B @ other)
        return NotImplemented

    def __rmatmul__(self, other: torch.Tensor) -> LowRankMatrix:
        """``other @ self`` for dense ``other [p, m]``; cost ``O(p m r)``."""
        if isinstance(other, torch.Tensor):
            if other.ndim != 2 or other.shape[1] != self.shape[0]:
                raise ShapeError(f"other: expected a [p, {self.shape[0]}] matrix, got shape {tuple(other.shape)}")
            return LowRankMatrix(other @ self.A, self.B)
        return NotImplemented

    def __mul__(self, scalar: float) -> LowRankMatrix:
        """Scale by a number."""
        if isinstance(scalar, bool) or not isinstance(scalar, (int, float)):
            return NotImplemented
        return LowRankMatrix(self.A * scalar, self.B)

    __rmul__ = __mul__

    def __neg__(self) -> LowRankMatrix:
        return LowRankMatrix(-self.A, self.B)

    def _check_addend(self, other: object) -> LowRankMatrix:
        """``other`` if it is a :class:`LowRankMatrix` of the same shape, dtype and device, else a typed error."""
        if not isinstance(other, LowRankMatrix):
            dense = isinstance(other, torch.Tensor)
            hint = " (a dense matrix plus a low-rank one is not low-rank: add it to M.dense())" if dense else ""
            raise ArgumentTypeError(f"other: expected a LowRankMatrix to add{hint}, got {type(other).__name__}")
        if other.shape != self.shape:
            raise ShapeError(f"other: expected shape {self.shape} to add to {self!r}, got shape {other.shape}")
        if other.dtype != self.dtype or other.device != self.device:
            raise ArgumentTypeError(
                f"other: expected dtype {self.dtype} on {self.device} like the left operand, got {other.dtype} on {other.device}"
            )
        return other

    def __add__(self, other: LowRankMatrix) -> LowRankMatrix:
        """``self + other`` kept factored: ``A1 B1 + A2 B2 = [A1 A2] [B1; B2]``.

        ``other`` must be a :class:`LowRankMatrix` of the same shape ``[m, n]``,
        dtype and device (a typed error naming ``other`` otherwise). The result
        has inner dimension ``r1 + r2`` (an upper bound on its rank), re-split at
        ``min(m, n)`` when larger. Cost ``O((m + n)(r1 + r2))`` for the
        concatenation; ``O(m (r1 + r2) n)`` only when re-split, where the
        product is no larger than the factors.
        """
        other = self._check_addend(other)
        return LowRankMatrix(torch.cat([self.A, other.A], dim=1), torch.cat([self.B, other.B], dim=0))

    def __radd__(self, other: object) -> LowRankMatrix:
        """``0 + self`` is ``self``, so ``sum(matrices)`` works; any other left operand is refused as in :meth:`__add__`."""
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return self._check_addend(other) + self

    def __sub__(self, other: LowRankMatrix) -> LowRankMatrix:
        """``self - other`` as ``self + (-other)`` (see :meth:`__add__`)."""
        return self + -self._check_addend(other)

    def _dense(self, max_entries: int, name: str, hint: str) -> torch.Tensor:
        m, n = self.shape
        if m * n > max_entries:
            raise MemoryBudgetError(
                f"{name}: forming a [{m}, {n}] matrix needs {m * n:,} entries ({m * n * self.A.element_size():,} bytes "
                f"in {self.dtype}), more than the allowed {max_entries:,} entries; slice it first, use topk / diagonal / "
                f"row_blocks, or {hint}"
            )
        return self.A @ self.B

    def dense(self, max_entries: int = DEFAULT_DENSE_LIMIT) -> torch.Tensor:
        """The product ``[m, n]``; refuses (``MemoryBudgetError``) beyond ``max_entries`` entries."""
        max_entries = check_int("max_entries", max_entries, 0)
        return self._dense(max_entries, "max_entries", "raise max_entries")

    @property
    def AB(self) -> torch.Tensor:  # noqa: N802 — TransformerLens's name
        """The dense product ``[m, n]``: TransformerLens ``FactoredMatrix.AB``, an alias of :meth:`dense`.

        Refuses (``MemoryBudgetError``) beyond :data:`DEFAULT_DENSE_LIMIT` entries,
        as :meth:`dense` does by default; ``dense(max_entries=...)`` allows more.
        Cost ``O(m r n)`` time, ``m n`` entries of memory.
        """
        return self._dense(DEFAULT_DENSE_LIMIT, "AB", "call dense(max_entries=...) to allow more")

    # --------------------------------------------------------- small problems
    def _require_square(self, what: str) -> None:
        m, n = self.shape
        if m != n:
            raise ShapeError(f"{what}: expected a square matrix, got shape ({m}, {n})")

    def trace(self) -> float:
        """``tr(AB) = tr(BA)``; cost ``O(r n)``."""
        self._require_square("trace")
        return float((self.A.double() * self.B.T.double()).sum())

    def eigenvalues(self) -> torch.Tensor:
        """The ``r`` eigenvalues of ``BA`` (complex128), which are the non-trivial eigenvalues of ``AB``.

        ``AB`` is ``[n, n]``; its remaining ``n - r`` eigenvalues are zero. Cost
        ``O(r² n + r³)``.
        """
        self._require_square("eigenvalues")
        eigs: torch.Tensor = torch.linalg.eigvals((self.B @ self.A).double())
        return eigs

    def svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Thin SVD ``U [m, r]``, ``S [r]`` (float64, descending), ``Vh [r, n]`` with ``U diag(S) Vh = AB``.

        From ``A = Qa Ra`` and ``Bᵀ = Qb Rb``: ``AB = Qa (Ra Rbᵀ) Qbᵀ``, and the SVD
        of the ``r × r`` middle. Cost ``O((m + n) r²)``.
        """
        Qa, Ra = torch.linalg.qr(self.A)
        Qb, Rb = torch.linalg.qr(self.B.T)
        U_mid, S, Vh_mid = torch.linalg.svd(Ra.double() @ Rb.double().T)
        return Qa @ U_mid.to(self.dtype), S, Vh_mid.to(self.dtype) @ Qb.T

    def singular_values(self) -> torch.Tensor:
        """The ``r`` largest singular values (float64, descending); cost ``O((m + n) r²)``."""
        Ra = torch.linalg.qr(self.A, mode="r")[1]
        Rb = torch.linalg.qr(self.B.T, mode="r")[1]
        values: torch.Tensor = torch.linalg.svdvals(Ra.double() @ Rb.double().T)
        return values

    def frobenius_norm(self) -> float:
        """``‖AB‖_F = sqrt(tr((AᵀA)(BBᵀ)))``; cost ``O((m + n) r²)``.

        Not ``‖BA‖_F``: transposing the product preserves trace and eigenvalues,
        not singular values.
        """
        gram_a = (self.A.T @ self.A).double()
        gram_b = (self.B @ self.B.T).double()
        return math.sqrt(max(float((gram_a * gram_b).sum()), 0.0))

    def norm(self) -> float:
        """The Frobenius norm ``‖AB‖_F``: TransformerLens ``FactoredMatrix.norm()``, an alias of :meth:`frobenius_norm`.

        Returns a Python float (TransformerLens returns a tensor). Cost ``O((m + n) r²)``.
        """
        return self.frobenius_norm()

    # ---------------------------------------------------------------- slicing
    def __getitem__(self, key: Index | tuple[Index, Index]) -> LowRankMatrix | torch.Tensor:
        """``M[rows, cols]``; a low-rank matrix unless an int is given.

        An int row (or column) gives a dense vector ``[n]`` (or ``[m]``); two ints a
        0-d tensor. Rows and columns may be ints, slices, sequences of ints or
        boolean masks. Cost ``O(r · size of the result)`` for dense results.
        """
        rows, cols = key if isinstance(key, tuple) else (key, slice(None))
        m, n = self.shape
        A = _index_rows(self.A, rows, m, "rows")
        B = _index_rows(self.B.T, cols, n, "cols").T
        row_int = isinstance(rows, int)
        col_int = isinstance(cols, int)
        if row_int and col_int:
            return (A @ B)[0, 0]
        if row_int:
            return (A @ B)[0]
        if col_int:
            return (A @ B)[:, 0]
        return LowRankMatrix(A.contiguous(), B.contiguous())

    # --------------------------------------------------------------- chunking
    def block_rows(self, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> int:
        """Rows per block so one dense ``[rows, n]`` block fits in ``memory_budget`` bytes."""
        budget = check_budget("memory_budget", memory_budget)
        bytes_per_row = max(self.shape[1], 1) * self.A.element_size()
        return max(1, min(self.shape[0], budget // bytes_per_row))

    def row_blocks(
        self, memory_budget: int = DEFAULT_MEMORY_BUDGET, progress_bar: bool | None = False
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield ``(first_row, block [rows, n])`` dense row blocks of the product.

        The blocks are views of one reused buffer (no page faults per block):
        use each before asking for the next, or copy it.
        """
        step = self.block_rows(memory_budget)
        starts = range(0, self.shape[0], step)
        buffer = self.A.new_empty(min(step, self.shape[0]), self.shape[1])
        for start in progress(starts, len(starts), "row blocks", progress_bar):
            rows = self.A[start : start + step]
            block = buffer[: rows.shape[0]]
            torch.matmul(rows, self.B, out=block)
            yield start, block

    def tile_shape(self, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> tuple[int, int]:
        """``(rows, cols)`` of the dense tiles used by the chunked reductions.

        Tiles are about ``min(memory_budget, TILE_BYTES)`` bytes and roughly square.
        """
        budget = check_budget("memory_budget", memory_budget)
        m, n = self.shape
        entries = max(1, min(budget, TILE_BYTES) // self.A.element_size())
        cols = max(1, min(n, math.isqrt(entries)))
        rows = max(1, min(m, entries // cols))
        return rows, cols

    def tiles(
        self, memory_budget: int = DEFAULT_MEMORY_BUDGET, progress_bar: bool | None = False
    ) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Yield ``(first_row, first_col, tile [rows, cols])`` dense tiles, row block by row block.

        Within a row block the tiles go left to right. Each tile is a view of one
        reused buffer: use it before asking for the next. Cost ``O(m r n)`` in all.
        """
        m, n = self.shape
        step_rows, step_cols = self.tile_shape(memory_budget)
        panels = [(start, self.B[:, start : start + step_cols].contiguous()) for start in range(0, n, step_cols)]
        buffer = self.A.new_empty(min(step_rows, m), min(step_cols, n))
        starts = range(0, m, step_rows)
        for row_start in progress(starts, len(starts), "row blocks", progress_bar):
            rows = self.A[row_start : row_start + step_rows]
            for col_start, panel in panels:
                tile = buffer[: rows.shape[0], : panel.shape[1]]
                torch.matmul(rows, panel, out=tile)
                yield row_start, col_start, tile

    def diagonal(self, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> torch.Tensor:
        """``diag(AB)`` ``[min(m, n)]`` as row-wise dot products of ``A`` and ``Bᵀ``; cost ``O(min(m, n) r)``."""
        size = min(self.shape)
        step = max(1, check_budget("memory_budget", memory_budget) // max(1, self.inner_dim * self.A.element_size()))
        parts = []
        for start in range(0, size, step):
            stop = min(start + step, size)
            parts.append(torch.einsum("ir,ri->i", self.A[start:stop], self.B[:, start:stop]))
        return torch.cat(parts) if parts else self.A.new_zeros(0)

    def topk(
        self,
        k: int,
        largest: bool = True,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        progress_bar: bool | None = None,
    ) -> TopEntries:
        """The ``k`` largest (or smallest) entries of the whole matrix, best first.

        Tiles of the product are formed one at a time (:meth:`tiles`); a tile row
        is examined further only when its maximum reaches the running k-th best
        value (or the k-th largest row maximum of the tile), so the work beyond
        the products is one reduction per tile. Cost ``O(m r n)`` time, at most
        ``memory_budget`` bytes of product at once.
        """
        m, n = self.shape
        k = check_int("k", k, 1, m * n + 1)
        check_bool("largest", largest)
        _check_result("k", k, self.A.element_size() + 16, f"the {k:,} best entries with their rows and columns")
        if not largest:
            top = (-self).topk(k, True, memory_budget, progress_bar)
            return TopEntries(-top.values, top.rows, top.cols)
        values = self.A.new_empty(0)
        rows = torch.empty(0, dtype=torch.long, device=self.device)
        cols = torch.empty(0, dtype=torch.long, device=self.device)
        for row_start, col_start, tile in self.tiles(memory_budget, progress_bar):
            row_max = tile.amax(dim=1)
            threshold = values[-1] if values.numel() == k else row_max.new_tensor(-math.inf)
            if row_max.numel() >= k:
                threshold = torch.maximum(threshold, torch.topk(row_max, k).values[-1])
            candidates = torch.nonzero(row_max >= threshold).squeeze(1)
            if candidates.numel() == 0:
                continue
            best = torch.topk(tile[candidates], min(k, tile.shape[1]), dim=1)
            values = torch.cat([values, best.values.flatten()])
            rows = torch.cat([rows, (row_start + candidates)[:, None].expand_as(best.indices).flatten()])
            cols = torch.cat([cols, (col_start + best.indices).flatten()])
            keep = torch.topk(values, min(k, values.numel())).indices
            values, rows, cols = values[keep], rows[keep], cols[keep]
        return TopEntries(values, rows, cols)

    def topk_rows(
        self,
        k: int,
        largest: bool = True,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        progress_bar: bool | None = None,
    ) -> TopK:
        """Per row, the ``k`` largest (or smallest) entries: ``values [m, k]``, column ``indices [m, k]``.

        A running top-k per row is merged with each tile's. Cost ``O(m r n)`` time,
        at most ``memory_budget`` bytes of product at once.
        """
        m, n = self.shape
        k = check_int("k", k, 1, n + 1)
        check_bool("largest", largest)
        _check_result("k", m * k, self.A.element_size() + 8, f"{k:,} entries for each of {m:,} rows")
        values = self.A.new_empty(m, 0)
        indices = torch.empty(m, 0, dtype=torch.long, device=self.device)
        for row_start, col_start, tile in self.tiles(memory_budget, progress_bar):
            stop = row_start + tile.shape[0]
            best = torch.topk(tile, min(k, tile.shape[1]), dim=1, largest=largest)
            if col_start == 0:
                if row_start == 0:
                    values = self.A.new_empty(m, k)
                    indices = torch.empty(m, k, dtype=torch.long, device=self.device)
                run_values, run_indices = best.values, best.indices
            else:
                run_values = torch.cat([run_values, best.values], dim=1)
                run_indices = torch.cat([run_indices, col_start + best.indices], dim=1)
                merged = torch.topk(run_values, min(k, run_values.shape[1]), dim=1, largest=largest)
                run_values, run_indices = merged.values, run_indices.gather(1, merged.indices)
            if col_start + tile.shape[1] == n:
                values[row_start:stop], indices[row_start:stop] = run_values, run_indices
        return TopK(values, indices)

    def topk_cols(
        self,
        k: int,
        largest: bool = True,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        progress_bar: bool | None = None,
    ) -> TopK:
        """Per column, the ``k`` largest (or smallest) entries: ``values [n, k]``, row ``indices [n, k]``.

        Computed as :meth:`topk_rows` of the transpose. Cost ``O(m r n)``.
        """
        return self.T.topk_rows(k, largest, memory_budget, progress_bar)

    def rank_in_rows(
        self, cols: torch.Tensor, memory_budget: int = DEFAULT_MEMORY_BUDGET, progress_bar: bool | None = None
    ) -> torch.Tensor:
        """For each row ``i``, how many entries of row ``i`` are strictly greater than ``M[i, cols[i]]``.

        ``cols`` is ``[m]``; the result ``[m]`` (long) is 0 when the entry is the row's
        maximum, so "``cols[i]`` is among row ``i``'s top k" is ``rank < k`` (ties count
        in its favour). Cost ``O(m r n)``.
        """
        m, n = self.shape
        cols = _as_index_tensor("cols", cols, self.device)
        if cols.shape != (m,) or cols.dtype.is_floating_point:
            raise ShapeError(f"cols: expected [{m}] integer column indices, got shape {tuple(cols.shape)} dtype {cols.dtype}")
        if m and (int(cols.min()) < 0 or int(cols.max()) >= n):
            raise ArgumentError(f"cols: expected indices in [0, {n}), got range [{int(cols.min())}, {int(cols.max())}]")
        cols = cols.long()
        own = torch.einsum("ir,ri->i", self.A, self.B[:, cols])[:, None]
        counts = torch.zeros(m, dtype=torch.long, device=self.device)
        for row_start, col_start, tile in self.tiles(memory_budget, progress_bar):
            stop = row_start + tile.shape[0]
            # The entry itself is recomputed in the tile; compare against the tile's own copy
            # where it lies in this tile, so rounding cannot count it as larger than itself.
            reference = own[row_start:stop]
            inside = (cols[row_start:stop] >= col_start) & (cols[row_start:stop] < col_start + tile.shape[1])
            if bool(inside.any()):
                local = (cols[row_start:stop] - col_start).clamp(0, tile.shape[1] - 1)[:, None]
                reference = torch.where(inside[:, None], tile.gather(1, local), reference)
            counts[row_start:stop] += (tile > reference).sum(dim=1)
        return counts
