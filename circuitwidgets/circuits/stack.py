"""Stacks of low-rank matrices with leading dimensions, kept factored (TransformerLens's ``FactoredMatrix``, batched).

A :class:`LowRankStack` holds one low-rank matrix per index of its batch shape
(``[n_layers, n_heads]`` for every head of a model), each

``M[i] = left · A[i] · C[i] · B[i] · right``

with per-matrix factors ``A [m₀, r₁]``, an optional core ``C [r₁, r₂]`` (the
rotation ``R(Δ)`` of a rotary head's QK circuit) and ``B [r₂, n₀]``, and
optional dense outer factors shared by every matrix (``left [m, m₀]``, ``right
[n₀, n]``: ``W_E`` and ``W_U`` of a full circuit). ``W_E @ OV(model) @ W_U`` is
therefore a ``[L, H, V, V]`` stack that costs nothing to form: the outer factors
are multiplied in only where a computation needs them, and through the
``[d_model, d_model]`` products ``right · left``, ``leftᵀ left`` and ``right rightᵀ``
(computed once, :mod:`._cache`).

Factors are stored with batch dimensions that broadcast: under grouped-query
attention a key or value factor is ``[L, G, 1, ...]`` against the query heads'
``[L, G, H/G, ...]`` (a view of the model's tensors, never expanded), and the
stack presents the last two inner dimensions merged as ``[L, H]``.

Batched results (eigenvalues, traces, norms, singular values, diagonals, ranks)
are computed block by block along the first batch dimension, each block lifted
to the compute dtype (float32 for bfloat16/float16 factors, :mod:`._precision`),
and equal, matrix by matrix, what :class:`~circuitwidgets.circuits.LowRankMatrix`
gives for ``stack[i]``. Small problems are solved in float64.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from circuitwidgets._checks import check_budget, check_int, count_non_finite
from circuitwidgets.circuits._precision import compute_dtype, lift, matmul
from circuitwidgets.circuits._rows import left_rows
from circuitwidgets.circuits._stack_factors import StackFactors, broadcast, numel
from circuitwidgets.circuits.lowrank import DEFAULT_DENSE_LIMIT, LowRankMatrix
from circuitwidgets.circuits.topk_tiles import DEFAULT_MEMORY_BUDGET, TopEntries, batched_topk, check_result
from circuitwidgets.errors import ArgumentTypeError, MemoryBudgetError, NonFiniteError, ShapeError

BatchKey = int | slice | tuple[int | slice, ...]
_Block = tuple[slice, torch.Tensor, torch.Tensor | None, torch.Tensor]


def _check_tensor(name: str, value: object, reference: torch.Tensor | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ArgumentTypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if not value.dtype.is_floating_point:
        raise ArgumentTypeError(f"{name}: expected a floating-point tensor, got dtype {value.dtype}")
    if reference is not None and (value.dtype != reference.dtype or value.device != reference.device):
        raise ArgumentTypeError(
            f"{name}: expected dtype {reference.dtype} on {reference.device} like A, got {value.dtype} on {value.device}"
        )
    bad = count_non_finite(value)
    if bad:
        raise NonFiniteError(f"{name}: expected finite values, got {bad:,} NaN/Inf entries")
    return value


class LowRankStack(StackFactors):
    """A stack of low-rank matrices ``M[i] = A[i] @ B[i]`` with leading (batch) dimensions, kept factored.

    Parameters
    ----------
    A
        Left factors ``[..., m, r]``.
    B
        Right factors ``[..., r, n]`` (same dtype and device); the batch
        dimensions of ``A`` and ``B`` broadcast.

    Notes
    -----
    The engine builds stacks with a core and outer factors
    (:func:`~circuitwidgets.circuits.OV`, :func:`~circuitwidgets.circuits.QK`);
    ``dense @ stack @ dense`` adds outer factors to any stack without
    multiplying them in. Indexing the batch dimensions (``stack[layer]``,
    ``stack[layer, head]``) gives a stack or, with every batch index an int,
    a :class:`LowRankMatrix`.
    """

    _A: torch.Tensor
    _B: torch.Tensor
    _C: torch.Tensor | None
    _left: torch.Tensor | None
    _right: torch.Tensor | None
    _merge: bool
    _inner: tuple[int, ...]

    def __init__(self, A: torch.Tensor, B: torch.Tensor) -> None:
        A = _check_tensor("A", A)
        B = _check_tensor("B", B, A)
        for name, factor in (("A", A), ("B", B)):
            if factor.ndim < 2:
                raise ShapeError(f"{name}: expected a factor [..., rows, cols], got shape {tuple(factor.shape)}")
        if max(A.ndim, B.ndim) < 3:
            raise ShapeError(
                f"A, B: expected at least one batch dimension ([batch, m, r]), got shapes {tuple(A.shape)} and "
                f"{tuple(B.shape)}; one matrix is a LowRankMatrix"
            )
        if A.shape[-1] != B.shape[-2]:
            raise ShapeError(
                f"B: expected [..., {A.shape[-1]}, n] to match A {tuple(A.shape)}, got shape {tuple(B.shape)}"
            )
        try:
            broadcast(A.shape[:-2], B.shape[:-2])
        except RuntimeError:
            raise ShapeError(
                f"B: expected batch dimensions that broadcast with A's {tuple(A.shape[:-2])}, got {tuple(B.shape[:-2])}"
            ) from None
        self._setup(A, None, B, None, None, merge=False)

    @classmethod
    def _trusted(
        cls,
        A: torch.Tensor,
        B: torch.Tensor,
        *,
        core: torch.Tensor | None = None,
        left: torch.Tensor | None = None,
        right: torch.Tensor | None = None,
        merge: bool = False,
    ) -> LowRankStack:
        """A stack of factors derived from checked tensors (no scan): the engine's constructor.

        ``merge``: the last two batch dimensions (``[G, H/G]``) are shown as one (``[H]``).
        """
        stack = cls.__new__(cls)
        stack._setup(A, core, B, left, right, merge)
        return stack

    def __len__(self) -> int:
        return self.batch_shape[0] if self.batch_shape else 1

    def __repr__(self) -> str:
        return (
            f"LowRankStack(batch_shape={self.batch_shape}, matrix_shape={self.matrix_shape}, "
            f"inner_dim={self.inner_dim}, dtype={self.dtype}, device={self.device})"
        )

    # ------------------------------------------------------------- factors
    @property
    def A(self) -> torch.Tensor:  # noqa: N802 — TransformerLens's name
        """Every matrix's left factor ``left · A · C`` ``[*batch_shape, m, r₂]`` (formed: a copy)."""
        plain = self._plain()
        return plain._left_factor(plain._A, plain._C)

    @property
    def B(self) -> torch.Tensor:  # noqa: N802 — TransformerLens's name
        """Every matrix's right factor ``B · right`` ``[*batch_shape, r₂, n]`` (formed: a copy)."""
        plain = self._plain()
        right = plain._right_factor(plain._B)
        return right.expand(*plain._inner, *right.shape[-2:])

    def _left_factor(self, A: torch.Tensor, C: torch.Tensor | None) -> torch.Tensor:
        out = A
        if self._left is not None:
            out = torch.stack([matmul(self._left, a) for a in out.reshape(-1, *out.shape[-2:])]).reshape(
                *out.shape[:-2], self._left.shape[0], out.shape[-1]
            )
        if C is not None:
            out = lift(out) @ lift(C)
        return out.expand(*self._inner, *out.shape[-2:])

    def _right_factor(self, B: torch.Tensor) -> torch.Tensor:
        if self._right is None:
            return B
        flat = B.reshape(-1, *B.shape[-2:])
        return torch.stack([matmul(b, self._right) for b in flat]).reshape(
            *B.shape[:-2], B.shape[-2], self._right.shape[1]
        )

    def _plain(self) -> LowRankStack:
        """The same stack with every batch dimension its own (the merged ones expanded: a copy of those factors)."""
        if not self._merge:
            return self

        def unmerge(f: torch.Tensor | None) -> torch.Tensor | None:
            if f is None:
                return None
            full = f.expand(*self._inner, *f.shape[-2:])
            return full.reshape(*self.batch_shape, *f.shape[-2:])

        A, B = unmerge(self._A), unmerge(self._B)
        assert A is not None and B is not None
        return LowRankStack._trusted(A, B, core=unmerge(self._C), left=self._left, right=self._right)

    # ------------------------------------------------------------ indexing
    def __getitem__(self, key: BatchKey) -> LowRankStack | LowRankMatrix:
        """``stack[i, ...]`` over the batch dimensions: a stack, or a :class:`LowRankMatrix` when every index is an int.

        Ints and slices only; indices beyond the batch dimensions are refused
        (select the matrix first, then slice it). Cost ``O(1)`` for stacks;
        a matrix costs its outer products (``O(V d r)`` for a full circuit).
        """
        keys = key if isinstance(key, tuple) else (key,)
        batch = self.batch_shape
        if len(keys) > len(batch):
            raise ShapeError(f"key: expected at most {len(batch)} indices (batch shape {batch}), got {len(keys)}")
        keys = tuple(keys) + (slice(None),) * (len(batch) - len(keys))
        checked = tuple(
            k if isinstance(k, slice) else check_int(f"key[{i}]", k, -size, size) % size
            for i, (k, size) in enumerate(zip(keys, batch, strict=True))
        )
        for i, k in enumerate(checked):
            if isinstance(k, slice) and not all(
                v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (k.start, k.stop, k.step)
            ):
                raise ArgumentTypeError(f"key[{i}]: expected an int or a slice of ints, got {k!r}")
        if self._merge and isinstance(checked[-1], slice) and checked[-1] != slice(None):
            return self._plain()[checked]
        inner: list[int | slice] = list(checked)
        if self._merge:
            last = checked[-1]
            per_group = self._inner[-1]
            inner[-1:] = [last // per_group, last % per_group] if isinstance(last, int) else [slice(None), slice(None)]
        A = self._index(self._A, inner)
        B = self._index(self._B, inner)
        C = None if self._C is None else self._index(self._C, inner)
        if all(isinstance(k, int) for k in checked):
            return self._matrix(A, C, B)
        return LowRankStack._trusted(A, B, core=C, left=self._left, right=self._right, merge=self._merge)

    def _index(self, factor: torch.Tensor, keys: list[int | slice]) -> torch.Tensor:
        index = tuple(
            k if size == full else (0 if isinstance(k, int) else slice(None))
            for k, size, full in zip(keys, factor.shape[:-2], self._inner, strict=True)
        )
        return factor[index]

    def _matrix(self, A: torch.Tensor, C: torch.Tensor | None, B: torch.Tensor) -> LowRankMatrix:
        left = A if self._left is None else matmul(self._left, A)
        if C is not None:
            left = lift(left) @ lift(C)
        right = B if self._right is None else matmul(B, self._right)
        if left.dtype != right.dtype:
            left, right = lift(left), lift(right)
        return LowRankMatrix._trusted(left, right)

    def matrices(self) -> Iterator[LowRankMatrix]:
        """Every matrix of the stack in row-major batch order (``stack[i]`` for each batch index)."""
        for flat in range(numel(self.batch_shape)):
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), self.batch_shape))
            matrix = self[index]
            assert isinstance(matrix, LowRankMatrix)
            yield matrix

    # -------------------------------------------------------------- algebra
    @property
    def T(self) -> LowRankStack:  # noqa: N802 — the conventional name
        """Every matrix transposed (views only)."""
        return LowRankStack._trusted(
            self._B.mT,
            self._A.mT,
            core=None if self._C is None else self._C.mT,
            left=None if self._right is None else self._right.T,
            right=None if self._left is None else self._left.T,
            merge=self._merge,
        )

    def _with_outer(self, left: torch.Tensor | None, right: torch.Tensor | None) -> LowRankStack:
        """This stack between checked outer factors ``left [m, m₀]`` and ``right [n₀, n]`` (not multiplied in)."""
        return LowRankStack._trusted(self._A, self._B, core=self._C, left=left, right=right, merge=self._merge)

    def _check_dense(self, other: torch.Tensor, rows: int | None, cols: int | None) -> torch.Tensor:
        if (
            other.ndim != 2
            or (rows is not None and other.shape[0] != rows)
            or (cols is not None and other.shape[1] != cols)
        ):
            want = f"[{rows if rows is not None else 'p'}, {cols if cols is not None else 'p'}]"
            raise ShapeError(f"other: expected a {want} matrix, got shape {tuple(other.shape)}")
        if other.device != self.device:
            raise ArgumentTypeError(
                f"other: expected a tensor on {self.device} like the stack, got one on {other.device}"
            )
        return _check_tensor("other", other)

    def __matmul__(self, other: torch.Tensor | LowRankStack) -> LowRankStack:
        """``stack @ dense`` (an outer factor, not multiplied in) or ``stack @ stack`` (matrix by matrix, factored)."""
        if isinstance(other, LowRankStack):
            return self._compose(other)
        if not isinstance(other, torch.Tensor):
            return NotImplemented
        other = self._check_dense(other, self.matrix_shape[1], None)
        right = other if self._right is None else matmul(self._right, other)
        return LowRankStack._trusted(self._A, self._B, core=self._C, left=self._left, right=right, merge=self._merge)

    def __rmatmul__(self, other: torch.Tensor) -> LowRankStack:
        """``dense @ stack``: an outer factor, not multiplied in."""
        if not isinstance(other, torch.Tensor):
            return NotImplemented
        other = self._check_dense(other, None, self.matrix_shape[0])
        left = other if self._left is None else matmul(other, self._left)
        return LowRankStack._trusted(self._A, self._B, core=self._C, left=left, right=self._right, merge=self._merge)

    def _compose(self, other: LowRankStack) -> LowRankStack:
        """``M₁[i] M₂[i]`` with the middle ``B₁ right₁ left₂ A₂`` folded into the core (batch shapes broadcast)."""
        if self.matrix_shape[1] != other.matrix_shape[0]:
            raise ShapeError(f"other: expected matrices with {self.matrix_shape[1]} rows, got {other.matrix_shape}")
        if other.device != self.device:
            raise ArgumentTypeError(f"other: expected a stack on {self.device}, got one on {other.device}")
        first, second = (self, other) if self._merge == other._merge else (self._plain(), other._plain())
        B1, A2 = lift(first._B), lift(second._A)
        if first._right is not None:
            B1 = B1 @ lift(first._right)
        if second._left is not None:
            A2 = lift(second._left) @ A2
        try:
            broadcast(first._inner, second._inner)
        except RuntimeError:
            raise ShapeError(
                f"other: expected a batch shape that broadcasts with {self.batch_shape}, got {other.batch_shape}"
            ) from None
        middle = B1 @ A2
        core = middle if first._C is None else lift(first._C) @ middle
        if second._C is not None:
            core = core @ lift(second._C)
        return LowRankStack._trusted(
            lift(first._A), lift(second._B), core=core, left=first._left, right=second._right, merge=first._merge
        )

    # ------------------------------------------------------------ dense work
    def dense(self, max_entries: int = DEFAULT_DENSE_LIMIT) -> torch.Tensor:
        """Every matrix formed, ``[*batch_shape, m, n]``; refused (``MemoryBudgetError``) beyond ``max_entries`` entries."""
        max_entries = check_int("max_entries", max_entries, 0)
        m, n = self.matrix_shape
        total = numel(self.batch_shape) * m * n
        if total > max_entries:
            raise MemoryBudgetError(
                f"max_entries: forming a {list(self.shape)} stack needs {total:,} entries, more than the allowed "
                f"{max_entries:,}; select matrices first (stack[layer, head]) or raise max_entries"
            )
        return torch.stack([matrix.A @ matrix.B for matrix in self.matrices()]).reshape(*self.shape)

    def topk(self, k: int, memory_budget: int = DEFAULT_MEMORY_BUDGET) -> TopEntries:
        """The ``k`` largest entries of every matrix: ``values``, ``rows``, ``cols`` each ``[*batch_shape, k]``, best first.

        Tiles of a block of matrices at once (one batched product per tile of about
        ``min(memory_budget, TILE_BYTES)`` bytes), a running top-k per matrix. Cost
        ``O(N m n r)``; memory the block's factors plus the tile. ``k`` beyond ``m n``,
        a result beyond ``circuitwidgets.circuits.lowrank.MAX_RESULT_BYTES`` and
        a budget beyond the device's memory are refused.
        """
        m, n = self.matrix_shape
        k = check_int("k", k, 1, m * n + 1)
        budget = check_budget("memory_budget", memory_budget, self.device)
        check_result(
            "k", numel(self.batch_shape) * k, 24, f"the {k:,} best entries of {numel(self.batch_shape):,} matrices"
        )
        r2 = int(self._B.shape[-2])
        values = torch.empty(*self._inner, k, dtype=compute_dtype(self.dtype), device=self.device)
        rows = torch.empty(*self._inner, k, dtype=torch.long, device=self.device)
        cols = torch.empty_like(rows)
        for index, A, C, B in self._blocks(self._item_bytes((m + n) * r2), budget):
            left = left_rows(self._left, A, C, slice(None))
            right = B if self._right is None else B @ lift(self._right)
            batch = broadcast(left.shape[:-2], right.shape[:-2])
            left, right = left.expand(*batch, m, r2).reshape(-1, m, r2), right.expand(*batch, r2, n).reshape(-1, r2, n)
            top = batched_topk(left, right, k, budget)
            values[index], rows[index], cols[index] = (part.reshape(*batch, k) for part in top)
        return TopEntries(self._public(values), self._public(rows), self._public(cols))


__all__ = ["LowRankStack"]
