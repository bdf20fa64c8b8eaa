"""The factored storage of a :class:`~circuitwidgets.circuits.LowRankStack` and its batched reductions.

``M[i] = left · A[i] · C[i] · B[i] · right`` (see :mod:`.stack`). This base class
holds the factors, their broadcast (inner) batch shape and its public view, and
computes every per-matrix quantity block by block along the first batch
dimension, each block lifted to the compute dtype: eigenvalues, traces,
Frobenius norms, singular values, diagonals and in-row ranks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from circuitwidgets._checks import check_budget
from circuitwidgets.circuits._cache import cached_matmul
from circuitwidgets.circuits._precision import compute_dtype, left_multiply, lift, one_thread, small_eigvals
from circuitwidgets.circuits._rows import Rows, count_above, left_rows, within_top
from circuitwidgets.errors import ArgumentError, ShapeError

#: Default bytes one block of a stack's matrices may take (their factors lifted to float32, and products):
#: blocks of whole layers at Llama-3-8B's shape, so products against ``W_U W_E`` are wide.
STACK_MEMORY_BUDGET = 256 * 2**20

_Block = tuple[tuple[slice, ...], torch.Tensor, torch.Tensor | None, torch.Tensor]


def _psd_sqrt(gram: torch.Tensor) -> torch.Tensor:
    """The symmetric square root of positive semi-definite ``gram`` (negative rounding clipped)."""
    values, vectors = torch.linalg.eigh(gram)
    root: torch.Tensor = (vectors * values.clamp_min(0).sqrt()[..., None, :]) @ vectors.mT
    return root


def broadcast(*shapes: torch.Size | tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of batch shapes (a :class:`RuntimeError` when they do not broadcast)."""
    return tuple(torch.broadcast_shapes(*shapes))  # type: ignore[no-untyped-call]


def numel(shape: torch.Size | tuple[int, ...]) -> int:
    """Number of entries of ``shape``."""
    return math.prod(shape)


class StackFactors:
    """Factors of a stack of low-rank matrices and the reductions computed from them (base of ``LowRankStack``)."""

    _A: torch.Tensor
    _B: torch.Tensor
    _C: torch.Tensor | None
    _left: torch.Tensor | None
    _right: torch.Tensor | None
    _merge: bool
    _inner: tuple[int, ...]

    def _setup(
        self,
        A: torch.Tensor,
        C: torch.Tensor | None,
        B: torch.Tensor,
        left: torch.Tensor | None,
        right: torch.Tensor | None,
        merge: bool,
    ) -> None:
        factors = [A, B] + ([C] if C is not None else [])
        ndim = max(f.ndim for f in factors) - 2

        def pad(f: torch.Tensor) -> torch.Tensor:
            return f.reshape((1,) * (ndim + 2 - f.ndim) + tuple(f.shape))

        self._A, self._B = pad(A), pad(B)
        self._C = None if C is None else pad(C)
        self._left, self._right = left, right
        self._inner = broadcast(*(f.shape[:-2] for f in factors))
        self._merge = merge and ndim >= 2

    # ------------------------------------------------------------------ shape
    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading dimensions (``(n_layers, n_heads)`` for a model's heads)."""
        if self._merge:
            return (*self._inner[:-2], self._inner[-2] * self._inner[-1])
        return self._inner

    @property
    def matrix_shape(self) -> tuple[int, int]:
        """``(m, n)`` of each matrix."""
        m = self._A.shape[-2] if self._left is None else self._left.shape[0]
        n = self._B.shape[-1] if self._right is None else self._right.shape[1]
        return int(m), int(n)

    @property
    def shape(self) -> tuple[int, ...]:
        """``(*batch_shape, m, n)``."""
        return (*self.batch_shape, *self.matrix_shape)

    @property
    def inner_dim(self) -> int:
        """Bound on each matrix's rank: the narrowest of ``r₁``, ``r₂``."""
        r1 = int(self._A.shape[-1])
        return r1 if self._C is None else min(r1, int(self._B.shape[-2]))

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the stored factors (computations use :func:`._precision.compute_dtype` of it)."""
        return self._A.dtype

    @property
    def device(self) -> torch.device:
        """Device of the factors: every computation runs there."""
        return self._A.device

    # ------------------------------------------------------------- batching
    def _blocks(self, per_item_bytes: int, memory_budget: int) -> Iterator[_Block]:
        """``(index, A, C, B)`` blocks of matrices, lifted to the compute dtype; ``out[index]`` is the block's place.

        Blocks run along the first batch dimension (layers), ``per_item_bytes``
        each, as many as fit ``memory_budget``; when one layer alone does not fit,
        along the second (key/value groups) within it.
        """
        if not self._inner:
            yield (), lift(self._A), None if self._C is None else lift(self._C), lift(self._B)
            return
        first = self._inner[0]
        if per_item_bytes <= memory_budget or len(self._inner) < 2:
            step = max(1, min(first, memory_budget // max(1, per_item_bytes)))
            for start in range(0, first, step):
                yield self._block((slice(start, min(start + step, first)),))
            return
        second = self._inner[1]
        step = max(1, min(second, memory_budget * second // per_item_bytes))
        for layer in range(first):
            for start in range(0, second, step):
                yield self._block((slice(layer, layer + 1), slice(start, min(start + step, second))))

    def _block(self, index: tuple[slice, ...]) -> _Block:
        def take(f: torch.Tensor) -> torch.Tensor:
            return lift(f[tuple(part if size > 1 else slice(None) for part, size in zip(index, f.shape, strict=False))])

        return index, take(self._A), None if self._C is None else take(self._C), take(self._B)

    def _block_items(self, index: tuple[slice, ...]) -> int:
        """Matrices in the block at ``index``."""
        sizes = [len(range(*part.indices(size))) for part, size in zip(index, self._inner, strict=False)]
        return numel(tuple(sizes)) * numel(self._inner[len(index) :])

    def _item_bytes(self, per_matrix: int = 0, per_index: int = 0) -> int:
        """Compute-dtype bytes per index of the first batch dimension: the factors (each at its own, unbroadcast
        size), ``per_matrix`` entries for every matrix and ``per_index`` more entries."""
        size = torch.empty((), dtype=compute_dtype(self.dtype)).element_size()
        rest = numel(self._inner[1:]) if self._inner else 1
        factors = sum(
            numel(f.shape[1:]) if self._inner else f.numel() for f in (self._A, self._B, self._C) if f is not None
        )
        return (factors + rest * per_matrix + per_index) * size

    def _public(self, inner_result: torch.Tensor) -> torch.Tensor:
        """A result ``[*inner, ...]`` reshaped to ``[*batch_shape, ...]``."""
        return inner_result.reshape(*self.batch_shape, *inner_result.shape[len(self._inner) :])

    def _small(self, A: torch.Tensor, C: torch.Tensor | None, B: torch.Tensor) -> torch.Tensor:
        """``C B (right left) A`` ``[..., r₁, r₁]``: the matrix whose eigenvalues are the non-trivial ones of ``M``.

        The shared ``right · left`` is multiplied into whichever factor has fewer
        matrices in the batch (the key or value head under grouped-query attention).
        """
        if self._right is not None and self._left is not None:
            outer = cached_matmul(self._right, self._left)
            fewer_b = numel(B.shape[:-2]) <= numel(A.shape[:-2])
            small = (B @ outer) @ A if fewer_b else B @ left_multiply(outer, A)
        elif self._right is not None:
            small = (B @ lift(self._right)) @ A
        elif self._left is not None:
            small = B @ left_multiply(self._left, A)
        else:
            small = B @ A
        return small if C is None else C @ small

    def _require_square(self, what: str) -> None:
        m, n = self.matrix_shape
        if m != n:
            raise ShapeError(f"{what}: expected square matrices, got matrix shape ({m}, {n})")

    # -------------------------------------------------------- small problems
    def eigenvalues(self, memory_budget: int = STACK_MEMORY_BUDGET) -> torch.Tensor:
        """The ``r₁`` non-trivial eigenvalues of every matrix, complex128 ``[*batch_shape, r₁]`` (unsorted).

        From ``λ(left A C B right) = λ(C B (right left) A)``: one ``r₁ × r₁`` problem per
        matrix after the ``[n₀, m₀]`` product ``right left`` (cached). Cost ``O(V d²)``
        once for a full circuit, then ``O(N d² r)`` for the ``N`` distinct
        factors plus ``O(L H (d r² + r³))``.
        """
        self._require_square("eigenvalues")
        budget = check_budget("memory_budget", memory_budget, self.device)
        r1 = int(self._A.shape[-1])
        out = torch.empty(*self._inner, r1, r1, dtype=compute_dtype(self.dtype), device=self.device)
        smaller = min(numel(self._A.shape[1:]), numel(self._B.shape[1:])) if self._inner else self._A.numel()
        for index, A, C, B in self._blocks(self._item_bytes(r1 * r1, smaller), budget):
            out[index] = self._small(A, C, B)
        return self._public(small_eigvals(out))

    def trace(self, memory_budget: int = STACK_MEMORY_BUDGET) -> torch.Tensor:
        """``tr(M)`` of every matrix, float64 ``[*batch_shape]``; cost as :meth:`eigenvalues` without the eigenproblems."""
        self._require_square("trace")
        budget = check_budget("memory_budget", memory_budget, self.device)
        out = torch.empty(self._inner, dtype=torch.float64, device=self.device)
        smaller = min(numel(self._A.shape[1:]), numel(self._B.shape[1:])) if self._inner else self._A.numel()
        for index, A, C, B in self._blocks(self._item_bytes(0, smaller), budget):
            out[index] = self._small(A, C, B).double().diagonal(dim1=-2, dim2=-1).sum(-1)
        return self._public(out)

    def _grams(self, A: torch.Tensor, C: torch.Tensor | None, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``((left A)ᵀ (left A), C (B right)(B right)ᵀ Cᵀ)``: the two ``r₁ × r₁`` Gram matrices of ``M``."""
        gram_a = A.mT @ (A if self._left is None else cached_matmul(self._left.T, self._left) @ A)
        gram_b = (B if self._right is None else B @ cached_matmul(self._right, self._right.T)) @ B.mT
        if C is not None:
            gram_b = C @ gram_b @ C.mT
        return gram_a, gram_b

    def frobenius_norm(self, memory_budget: int = STACK_MEMORY_BUDGET) -> torch.Tensor:
        """``‖M‖_F = sqrt(tr((left A)ᵀ(left A) · C (B right)(B right)ᵀ Cᵀ))`` of every matrix, float64 ``[*batch_shape]``.

        Never the permuted product ``‖B A‖_F`` (see :mod:`.lowrank`). Cost
        ``O(V d²)`` once per outer factor, then ``O(N d² r)``.
        """
        budget = check_budget("memory_budget", memory_budget, self.device)
        out = torch.empty(self._inner, dtype=torch.float64, device=self.device)
        for index, A, C, B in self._blocks(self._item_bytes(), budget):
            gram_a, gram_b = self._grams(A, C, B)
            out[index] = (gram_a.double() * gram_b.double()).sum((-1, -2)).clamp_min(0).sqrt()
        return self._public(out)

    def norm(self, memory_budget: int = STACK_MEMORY_BUDGET) -> torch.Tensor:
        """TransformerLens ``FactoredMatrix.norm()``: an alias of :meth:`frobenius_norm`."""
        return self.frobenius_norm(memory_budget)

    def singular_values(self, memory_budget: int = STACK_MEMORY_BUDGET) -> torch.Tensor:
        """The ``r₁`` largest singular values of every matrix, float64 ``[*batch_shape, r₁]``, descending.

        The singular values of ``G_a^{1/2} G_b^{1/2}`` for the Gram matrices of
        :meth:`frobenius_norm` (both factors' ``QR`` would need the outer products
        per matrix). Accurate to about ``1e-8`` of the largest in float64.
        """
        budget = check_budget("memory_budget", memory_budget, self.device)
        r1 = int(self._A.shape[-1])
        out = torch.empty(*self._inner, r1, dtype=torch.float64, device=self.device)
        for index, A, C, B in self._blocks(self._item_bytes(), budget):
            gram_a, gram_b = self._grams(A, C, B)
            with one_thread(self.device):
                out[index] = torch.linalg.svdvals(_psd_sqrt(gram_a.double()) @ _psd_sqrt(gram_b.double()))
        return self._public(out)

    def diagonal(self, memory_budget: int = STACK_MEMORY_BUDGET) -> torch.Tensor:
        """``diag(M)`` of every matrix, ``[*batch_shape, min(m, n)]`` in the compute dtype.

        Row blocks of ``left A C`` against columns of ``B right``, row-wise dot
        products; cost ``O(N min(m, n) d r)``, memory about ``memory_budget`` bytes.
        """
        budget = check_budget("memory_budget", memory_budget, self.device)
        diagonal, _ = row_reductions(self, slice(None), None, None, budget)
        assert diagonal is not None
        return diagonal

    def rank_in_rows(self, cols: torch.Tensor, memory_budget: int = STACK_MEMORY_BUDGET) -> torch.Tensor:
        """For each matrix and row ``i``, how many entries of row ``i`` are strictly greater than ``M[i, cols[i]]``.

        ``cols`` ``[m]``; the result is long ``[*batch_shape, m]`` (0 for the row's
        maximum: "``cols[i]`` among row ``i``'s top k" is ``rank < k``). Column tiles
        of all the block's matrices at once (one batched product per tile); cost
        ``O(N m n r)``, memory about ``memory_budget`` bytes of tiles.
        """
        m, n = self.matrix_shape
        if not isinstance(cols, torch.Tensor) or cols.shape != (m,) or cols.dtype.is_floating_point:
            raise ShapeError(
                f"cols: expected [{m}] integer column indices, got {getattr(cols, 'shape', type(cols).__name__)}"
            )
        if m and (int(cols.min()) < 0 or int(cols.max()) >= n):
            raise ArgumentError(f"cols: expected indices in [0, {n}), got range [{int(cols.min())}, {int(cols.max())}]")
        budget = check_budget("memory_budget", memory_budget, self.device)
        rows = torch.arange(m, device=self.device)
        _, ranks = row_reductions(self, None, (rows, cols.to(self.device).long()), None, budget)
        assert ranks is not None
        return ranks


def row_reductions(
    stack: StackFactors,
    diagonal: Rows | None,
    ranked: tuple[torch.Tensor, torch.Tensor] | None,
    top_k: int | None,
    memory_budget: int,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Diagonal entries ``M[t, t]`` for ``t`` in ``diagonal``, and in-row ranks of ``M[rows[i], cols[i]]`` for ``ranked = (rows, cols)``.

    The rank result is long ``[*batch, |rows|]`` (entries of row ``rows[i]`` strictly
    above ``M[rows[i], cols[i]]``), or with ``top_k`` bool (whether fewer than ``top_k`` are).
    One pass over the stack: each block's ``B · right`` serves both. Returns public
    ``([*batch_shape, |diagonal|] or None, [*batch_shape, |ranked|] or None)``.
    """
    n = stack.matrix_shape[1]
    r2 = int(stack._B.shape[-2])
    dtype = compute_dtype(stack.dtype)
    size = torch.empty((), dtype=dtype).element_size()
    every = range(*diagonal.indices(min(stack.matrix_shape))) if isinstance(diagonal, slice) else None
    n_diag = 0 if diagonal is None else (len(every) if every is not None else int(diagonal.numel()))  # type: ignore[union-attr]
    n_rank = 0 if ranked is None else int(ranked[0].numel())
    diag_out = None if diagonal is None else torch.empty(*stack._inner, n_diag, dtype=dtype, device=stack.device)
    rank_out = None
    if ranked is not None:
        rank_dtype = torch.bool if top_k is not None else torch.long
        rank_out = torch.zeros(*stack._inner, n_rank, dtype=rank_dtype, device=stack.device)
    for index, A, C, B in stack._blocks(stack._item_bytes(r2 * n + 2 * r2 * n_rank), memory_budget):
        items = stack._block_items(index)
        right = B if stack._right is None else B @ lift(stack._right)  # [..., r2, n]
        if diagonal is not None and diag_out is not None:
            step = max(1, memory_budget // max(1, 2 * items * r2 * size))
            for start in range(0, n_diag, step):
                stop = min(start + step, n_diag)
                rows: Rows = slice(every[start], every[stop - 1] + 1) if every is not None else diagonal[start:stop]  # type: ignore[index]
                part = left_rows(stack._left, A, C, rows)
                diag_out[index][..., start:stop] = (part * right[..., rows].mT).sum(-1)
        if ranked is not None and rank_out is not None:
            rows_, cols = ranked
            part = left_rows(stack._left, A, C, rows_)
            step = max(1, min(n, memory_budget // max(1, items * n_rank * size)))
            found = (
                count_above(part, right, cols, step) if top_k is None else within_top(part, right, cols, top_k, step)
            )
            rank_out[index] = found
    return (
        None if diag_out is None else stack._public(diag_out),
        None if rank_out is None else stack._public(rank_out),
    )
