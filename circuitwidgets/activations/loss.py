"""The model's loss at each position, from the logits of a run: ``−log p(t_{i+1} | t_{≤i})`` in nats.

One definition, shared by :func:`circuitwidgets.causal.per_token_loss` (its own forward
pass) and :class:`~circuitwidgets.widgets.AttentionPatterns` (the logits of the pass that
records the patterns, so the view's loss strip costs no second run).
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.errors import ShapeError

__all__ = ["next_token_loss", "target_losses", "token_losses"]


def target_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``−log softmax(logits)[target]`` per row: logits ``[..., d_vocab]``, targets ``[...]`` → ``[...]``.

    Computed in float32 (float64 logits keep their precision), as
    :func:`circuitwidgets.causal.per_token_loss` does.
    """
    work = logits if logits.dtype == torch.float64 else logits.float()
    log_probs = work.log_softmax(-1)
    return -log_probs.gather(-1, targets[..., None].to(log_probs.device))[..., 0]


def token_losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Each position's loss predicting the next token: logits ``[..., pos, d_vocab]``, tokens ``[..., pos]`` → ``[..., pos − 1]``."""
    return target_losses(logits[..., :-1, :], tokens[..., 1:])


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> NDArray[np.float32]:
    """One sequence's losses, float32 ``[pos]`` (NaN at the last position, which has no next token).

    ``logits`` ``[pos, d_vocab]`` (or ``[1, pos, d_vocab]``) of a run on ``ids`` ``[pos]``.
    """
    if logits.ndim == 3 and logits.shape[0] == 1:
        logits = logits[0]
    n = int(ids.shape[-1])
    if logits.ndim != 2 or int(logits.shape[0]) != n:
        raise ShapeError(f"logits: expected [pos={n}, d_vocab] for {n} token ids, got shape {tuple(logits.shape)}")
    out = np.full(n, np.nan, dtype=np.float32)
    if n > 1:
        with torch.no_grad():
            out[:-1] = token_losses(logits, ids.reshape(-1)).to("cpu", torch.float32).numpy()
    return out
