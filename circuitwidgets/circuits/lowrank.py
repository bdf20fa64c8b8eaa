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

Dtypes: factors, slices and the SVD's ``U`` and ``Vh`` are in the factors'
dtype; dense blocks, tiles, diagonals and top-k values in the compute dtype
(float32 for bfloat16 or float16 factors, :mod:`._precision`); small ``r × r``
problems (eigenvalues, singular values, norms, traces) are solved in float64
and returned as float64 or complex128 (or a Python float).

Modules: this one (factored algebra and small problems), :mod:`.topk_tiles` and
:mod:`.topk_methods` (tiled reductions), :mod:`._index` (row selection).
"""

from __future__ import annotations

import math

import torch

from circuitwidgets._checks import check_int, count_non_finite
from circuitwidgets.circuits._index import Index, index_rows
from circuitwidgets.circuits._precision import lift, one_thread, small_eigvals
from circuitwidgets.circuits.topk_methods import TiledReductions
from circuitwidgets.circuits.topk_tiles import DEFAULT_MEMORY_BUDGET, MAX_RESULT_BYTES, TILE_BYTES, TopEntries, TopK
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, NonFiniteError, ShapeError

__all__ = [
    "DEFAULT_DENSE_LIMIT",
    "DEFAULT_MEMORY_BUDGET",
    "MAX_RESULT_BYTES",
    "TILE_BYTES",
    "LowRankMatrix",
    "TopEntries",
    "TopK",
]

#: Largest number of entries :meth:`LowRankMatrix.dense` forms without ``max_entries``.
DEFAULT_DENSE_LIMIT = 2**26


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


def _check_factors(A: object, B: object) -> None:
    """Typed errors naming ``A`` or ``B`` for anything but two finite 2-D float factors on one device."""
    for name, factor in (("A", A), ("B", B)):
        if not isinstance(factor, torch.Tensor):
            raise ArgumentTypeError(f"{name}: expected a torch.Tensor, got {type(factor).__name__}")
        if factor.ndim != 2:
            raise ShapeError(f"{name}: expected a 2-D factor, got shape {tuple(factor.shape)}")
        if not factor.dtype.is_floating_point:
            raise ArgumentTypeError(f"{name}: expected a floating-point tensor, got dtype {factor.dtype}")
    assert isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor)
    if A.shape[1] != B.shape[0]:
        raise ShapeError(f"B: expected {A.shape[1]} rows to match A {tuple(A.shape)}, got shape {tuple(B.shape)}")
    if A.dtype != B.dtype or A.device != B.device:
        raise ArgumentTypeError(f"B: expected dtype {A.dtype} on {A.device} like A, got {B.dtype} on {B.device}")
    for name, factor in (("A", A), ("B", B)):
        bad = count_non_finite(factor)
        if bad:
            raise NonFiniteError(f"{name}: expected finite values, got {bad} NaN/Inf entries")


class LowRankMatrix(TiledReductions):
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
    The factors are checked (type, shape, dtype, device, finiteness) here, once;
    matrices the engine derives from checked weights skip the scan.
    """

    A: torch.Tensor
    B: torch.Tensor

    def __init__(self, A: torch.Tensor, B: torch.Tensor) -> None:
        _check_factors(A, B)
        self.A, self.B = _narrow(A, B)

    @classmethod
    def _trusted(cls, A: torch.Tensor, B: torch.Tensor) -> LowRankMatrix:
        """A matrix of factors derived from checked ones (no scan; the engine's constructor)."""
        matrix = cls.__new__(cls)
        matrix.A, matrix.B = _narrow(A, B)
        return matrix

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
        return LowRankMatrix._trusted(self.B.T, self.A.T)

    def _check_operand(self, other: torch.Tensor, shape: str) -> None:
        if other.device != self.device or other.dtype != self.dtype:
            raise ArgumentTypeError(
                f"other: expected a {shape} matrix of dtype {self.dtype} on {self.device}, got {other.dtype} on {other.device}"
            )

    def __matmul__(self, other: LowRankMatrix | torch.Tensor) -> LowRankMatrix:
        """``self @ other``; cost ``O(r r' k)`` for low-rank ``other``, ``O(r n p)`` for dense ``[n, p]``."""
        if isinstance(other, LowRankMatrix):
            if self.shape[1] != other.shape[0]:
                raise ShapeError(f"other: expected {self.shape[1]} rows to multiply {self!r}, got shape {other.shape}")
            self._check_operand(other.A, f"[{self.shape[1]}, p]")
            middle = self.B @ other.A
            if self.inner_dim <= other.inner_dim:
                return LowRankMatrix._trusted(self.A, middle @ other.B)
            return LowRankMatrix._trusted(self.A @ middle, other.B)
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
        if not math.isfinite(scalar):
            raise ArgumentError(f"scalar: expected a finite number, got {scalar!r}")
        return LowRankMatrix._trusted(self.A * scalar, self.B)

    __rmul__ = __mul__

    def __neg__(self) -> LowRankMatrix:
        return LowRankMatrix._trusted(-self.A, self.B)

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
        return LowRankMatrix._trusted(torch.cat([self.A, other.A], dim=1), torch.cat([self.B, other.B], dim=0))

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
        return small_eigvals(lift(self.B) @ lift(self.A))

    def svd(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Thin SVD ``U [m, r]``, ``S [r]`` (float64, descending), ``Vh [r, n]`` with ``U diag(S) Vh = AB``.

        From ``A = Qa Ra`` and ``Bᵀ = Qb Rb``: ``AB = Qa (Ra Rbᵀ) Qbᵀ``, and the SVD
        of the ``r × r`` middle. Cost ``O((m + n) r²)``.
        """
        Qa, Ra = torch.linalg.qr(lift(self.A))
        Qb, Rb = torch.linalg.qr(lift(self.B).T)
        with one_thread(self.device):
            U_mid, S, Vh_mid = torch.linalg.svd(Ra.double() @ Rb.double().T)
        return (Qa @ U_mid.to(Qa.dtype)).to(self.dtype), S, (Vh_mid.to(Qb.dtype) @ Qb.T).to(self.dtype)

    def singular_values(self) -> torch.Tensor:
        """The ``r`` largest singular values (float64, descending); cost ``O((m + n) r²)``."""
        Ra = torch.linalg.qr(lift(self.A), mode="r")[1]
        Rb = torch.linalg.qr(lift(self.B).T, mode="r")[1]
        with one_thread(self.device):
            values: torch.Tensor = torch.linalg.svdvals(Ra.double() @ Rb.double().T)
        return values

    def frobenius_norm(self) -> float:
        """``‖AB‖_F = sqrt(tr((AᵀA)(BBᵀ)))``; cost ``O((m + n) r²)``.

        Not ``‖BA‖_F``: transposing the product preserves trace and eigenvalues,
        not singular values.
        """
        A, B = lift(self.A), lift(self.B)
        gram_a = (A.T @ A).double()
        gram_b = (B @ B.T).double()
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
        A = index_rows(self.A, rows, m, "rows")
        B = index_rows(self.B.T, cols, n, "cols").T
        row_int = isinstance(rows, int)
        col_int = isinstance(cols, int)
        if row_int and col_int:
            return (A @ B)[0, 0]
        if row_int:
            return (A @ B)[0]
        if col_int:
            return (A @ B)[:, 0]
        return LowRankMatrix._trusted(A.contiguous(), B.contiguous())
