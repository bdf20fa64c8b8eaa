"""Training and evaluation batches: windows of the token stream drawn from a generator seeded by ``(seed, step)``,
so a resumed run sees the same batches as an unbroken one."""

from __future__ import annotations

import numpy as np
import torch


def batch_at(tokens: np.ndarray, n_ctx: int, batch_size: int, seed: int, step: int) -> torch.Tensor:
    """``[batch_size, n_ctx]`` windows of ``tokens`` at starts drawn from ``default_rng([seed, step])``."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, tokens.size - n_ctx, size=batch_size)
    return torch.from_numpy(np.stack([tokens[s : s + n_ctx] for s in starts]).astype(np.int64))
