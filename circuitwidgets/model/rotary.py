"""Rotary position embeddings in the canonical (rotate-half) layout, and their rotation matrices.

A rotary layer rotates each pair of dimensions ``(k, k + r/2)`` of a query or
key at position ``p`` by the angle ``p · θ_k``, for ``k < r/2`` (``r =
rotary_dim``); the other ``d_head − r`` dimensions pass through. Sources that
rotate adjacent pairs ``(2k, 2k + 1)`` are converted on load by permuting the
columns of ``W_Q`` and ``W_K`` (scores are unchanged).

In the row convention the rotation at position ``p`` is a matrix ``R(p)`` with
``q_rot = q R(p)``; rotations compose, ``R(i) R(j)ᵀ = R(i − j)``, so the score
``q_i R(i) (k_j R(j))ᵀ = q_i R(i − j) k_jᵀ`` depends on the offset only
(DESIGN.md §3a).
"""

from __future__ import annotations

import torch


def default_frequencies(rotary_dim: int, base: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``θ_k = base^(−2k / rotary_dim)`` ``[rotary_dim / 2]`` (the unscaled rotary of GPT-NeoX and Llama)."""
    return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)).to(dtype)


def _angle_dtype(x: torch.Tensor) -> torch.dtype:
    # float32 angles, as Hugging Face and TransformerLens compute them; float64 for float64 work.
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def rotate(x: torch.Tensor, freq: torch.Tensor, positions: torch.Tensor, pos_dim: int) -> torch.Tensor:
    """Rotate the first ``2 · len(freq)`` dimensions of ``x``'s last axis by ``position · freq``.

    ``positions`` ``[n]`` holds the position of each index along axis ``pos_dim``
    of ``x`` (for example axis 1 of ``[batch, pos, head, d_head]``).
    """
    half = freq.numel()
    rotary_dim = 2 * half
    angles = positions.to(_angle_dtype(x))[:, None] * freq.to(device=x.device, dtype=_angle_dtype(x))[None, :]
    angles = torch.cat([angles, angles], dim=-1)  # [n, rotary_dim]
    shape = [1] * x.ndim
    shape[pos_dim] = angles.shape[0]
    shape[-1] = rotary_dim
    cos, sin = angles.cos().to(x.dtype).view(shape), angles.sin().to(x.dtype).view(shape)
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    rotated = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    return torch.cat([rot * cos + rotated * sin, rest], dim=-1)


def rotate_columns(W: torch.Tensor, freq: torch.Tensor, offset: int) -> torch.Tensor:
    """``W R(offset)`` for ``W [..., d_head]``: every row rotated as a query at position ``offset``.

    Cost ``O(W.numel())``; no ``d_head × d_head`` matrix is formed.
    """
    flat = W.reshape(-1, 1, W.shape[-1])
    positions = torch.full((1,), float(offset), device=W.device)
    return rotate(flat, freq, positions, pos_dim=1).reshape(W.shape)


def rotation_matrix(freq: torch.Tensor, offset: int, d_head: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The dense ``R(offset)`` ``[d_head, d_head]`` (row convention), for tests and small checks."""
    return rotate_columns(torch.eye(d_head, dtype=dtype), freq, offset)
