"""Compute precision: half-precision weights are multiplied in float32, one block at a time.

A bfloat16 or float16 model is analysed in float32 (float64 models in float64):
products of half-precision numbers accumulated in half precision lose the
digits the analyses compare (eigenvalue sums, norms of products). Lifting
``W_E`` or ``W_U`` of a 128K–256K vocabulary whole would double the model's
memory, so :func:`matmul` lifts one block of the large operand at a time and
accumulates in the compute dtype. Float32 and float64 operands are used as
they are (no copy).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

#: Bytes of lifted (float32) operand blocks one :func:`matmul` holds at once. ``W_U · W_E`` at Llama-3-8B's
#: shape took 0.95-0.97× a float32 product of its shape in 256 MB blocks, 1.08-1.24× in 64 MB ones.
BLOCK_BYTES = 256 * 2**20

_EXACT = (torch.float32, torch.float64)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 weights, float32 for everything else (float32, bfloat16, float16)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def lift(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in its compute dtype (the tensor itself when it already is)."""
    target = compute_dtype(tensor.dtype)
    return tensor if tensor.dtype == target else tensor.to(target)


def matmul(left: torch.Tensor, right: torch.Tensor, block_bytes: int = BLOCK_BYTES) -> torch.Tensor:
    """``left @ right`` (``[m, k] @ [k, n]``) in the compute dtype, half-precision operands lifted by blocks.

    The largest of ``m``, ``k``, ``n`` is split so that the lifted blocks of the
    operands fit in ``block_bytes``: along ``k`` the partial products are
    accumulated (``W_U W_E`` over the vocabulary), along ``m`` or ``n`` the rows
    or columns of the result are written block by block (``W_E W_V``). Cost
    ``O(m k n)``; memory the result plus ``block_bytes``.
    """
    dtype = compute_dtype(torch.promote_types(left.dtype, right.dtype))
    if left.dtype == dtype and right.dtype == dtype:
        return left @ right
    m, k = left.shape
    n = right.shape[1]
    size = torch.empty((), dtype=dtype).element_size()
    if (m * k + k * n) * size <= block_bytes:
        return left.to(dtype) @ right.to(dtype)
    out = torch.zeros(m, n, dtype=dtype, device=left.device)
    # Blocks are lifted into two buffers allocated once: a fresh tensor per block is new memory the
    # operating system maps and zeroes page by page, which made lifting 3.5× slower.
    if k >= max(m, n):
        step = max(1, block_bytes // ((m + n) * size))
        left_block = torch.empty(m, min(step, k), dtype=dtype, device=left.device)
        right_block = torch.empty(min(step, k), n, dtype=dtype, device=left.device)
        for start in range(0, k, step):
            width = min(step, k - start)
            out.addmm_(
                left_block[:, :width].copy_(left[:, start : start + width]),
                right_block[:width].copy_(right[start : start + width]),
            )
    elif m >= n:
        lifted = right.to(dtype)
        step = max(1, block_bytes // (k * size))
        block = torch.empty(min(step, m), k, dtype=dtype, device=left.device)
        for start in range(0, m, step):
            rows = min(step, m - start)
            torch.matmul(block[:rows].copy_(left[start : start + rows]), lifted, out=out[start : start + rows])
    else:
        lifted = left.to(dtype)
        step = max(1, block_bytes // (k * size))
        block = torch.empty(k, min(step, n), dtype=dtype, device=left.device)
        for start in range(0, n, step):
            cols = min(step, n - start)
            out[:, start : start + cols] = lifted @ block[:, :cols].copy_(right[:, start : start + cols])
    return out


def left_multiply(outer: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """``outer @ factors[i]`` for every matrix of ``factors [*batch, m, r]`` as one product, ``[*batch, p, r]``.

    The factors side by side (``[m, batch · r]``, one copy) make one wide matrix
    product instead of one narrow ``[p, m] · [m, r]`` product per matrix (on two
    cores about 1.5× faster at ``r = 128``). ``outer [p, m]`` is lifted to the
    compute dtype of ``factors``.
    """
    if factors.ndim == 2:
        return lift(outer).to(factors.dtype) @ factors
    side_by_side = factors.movedim(-2, 0).reshape(factors.shape[-2], -1)
    product = lift(outer).to(factors.dtype) @ side_by_side
    return product.reshape(product.shape[0], *factors.shape[:-2], factors.shape[-1]).movedim(0, -2)


@contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """Run small dense linear algebra (``d_head × d_head`` eigenproblems) on one CPU thread.

    LAPACK's threaded BLAS on many small matrices spends its time waiting: a
    batch of 64 float64 ``128 × 128`` eigenproblems took 30 s on two busy cores
    and 1 s on one. The thread count is restored afterwards.
    """
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def small_eigvals(matrices: torch.Tensor) -> torch.Tensor:
    """Eigenvalues (complex128) of a batch of small square matrices, solved in float64.

    Each problem runs on one thread (:func:`one_thread`); on a CPU the batch is split
    among as many threads as torch may use, each solving its share (LAPACK runs in
    the calling thread, outside the interpreter lock). Identical results; 1,024
    ``128 × 128`` problems took 6.6 s on one thread and 3.4 s on two cores.
    """
    workers = torch.get_num_threads() if matrices.device.type == "cpu" and matrices.ndim > 2 else 1
    with one_thread(matrices.device):
        batch = matrices.double()
        count = math.prod(batch.shape[:-2])
        if workers <= 1 or count < 2 * workers:
            eigs: torch.Tensor = torch.linalg.eigvals(batch)
            return eigs
        flat = batch.reshape(count, *batch.shape[-2:])
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(torch.linalg.eigvals, flat.chunk(workers)))
    return torch.cat(parts).reshape(*batch.shape[:-1])
