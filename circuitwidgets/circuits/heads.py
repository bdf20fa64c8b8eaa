"""Head detectors on repeated random tokens: previous-token, duplicate-token and induction scores.

Each sequence is ``[BOS] r_1 … r_n r_1 … r_n`` (no BOS when the model has
none) with ``r_i`` drawn uniformly from the non-BOS token ids by a seeded
``torch.Generator``, so scores are deterministic. With ``b`` the BOS offset (1
or 0), ``r_j`` sits at positions ``b + j - 1`` and ``b + n + j - 1``. A head's
score is its mean attention, over sequences and the destination positions
``i`` below, to one source position:

- ``"previous_token"``: ``i → i − 1`` for every ``i ≥ 1``;
- ``"duplicate_token"``: ``i → i − n`` over the repeated half ``i ∈ [b + n, b + 2n − 1]``
  (the earlier copy of the same token);
- ``"induction"``: ``i → i − n + 1`` over the repeated half (the token that
  followed the earlier copy).

TransformerLens's ``detect_head`` (error measure ``"mul"``) divides the same
sums by the sequence length instead of the number of destination positions;
the two agree up to that factor (tested).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from circuitwidgets.circuits._checks import check_choice, check_int, check_model
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel

KINDS = ("previous_token", "duplicate_token", "induction")


def _bos(model: CircuitModel) -> int | None:
    bos = model.tokenizer.bos_token_id
    return model.cfg.bos_token_id if bos is None else bos


def default_seq_len(model: CircuitModel) -> int:
    """``min(50, (n_ctx - 1) // 2)``: the half length used when ``seq_len`` is not given."""
    offset = 0 if _bos(model) is None else 1
    return max(1, min(50, (model.cfg.n_ctx - offset) // 2))


def repeated_random_tokens(model: CircuitModel, seq_len: int | None = None, n_seqs: int = 8, seed: int = 0) -> torch.Tensor:
    """``[n_seqs, b + 2 seq_len]`` token ids ``[BOS] r_1..r_n r_1..r_n`` (module docstring).

    The ``r_i`` are uniform over the non-BOS ids, from ``torch.Generator().manual_seed(seed)``.
    """
    model = check_model(model)
    seq_len = default_seq_len(model) if seq_len is None else check_int("seq_len", seq_len, 1)
    n_seqs = check_int("n_seqs", n_seqs, 1)
    seed = check_int("seed", seed, 0)
    bos = _bos(model)
    offset = 0 if bos is None else 1
    if offset + 2 * seq_len > model.cfg.n_ctx:
        raise ArgumentError(
            f"seq_len: expected at most {(model.cfg.n_ctx - offset) // 2} so that {offset} + 2 × seq_len fits "
            f"n_ctx={model.cfg.n_ctx}, got {seq_len}"
        )
    n_ids = model.cfg.d_vocab - (0 if bos is None else 1)
    if n_ids < 1:
        raise ArgumentError(f"model: expected at least one non-BOS token id, got d_vocab={model.cfg.d_vocab}")
    generator = torch.Generator().manual_seed(seed)
    half = torch.randint(0, n_ids, (n_seqs, seq_len), generator=generator)
    if bos is not None:
        half = half + (half >= bos).long()
        prefix = torch.full((n_seqs, 1), bos, dtype=torch.long)
        return torch.cat([prefix, half, half], dim=1).to(model.device)
    return torch.cat([half, half], dim=1).to(model.device)


def detection_targets(kind: str, seq_len: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(destinations, sources)`` position pairs scored by a detector (module docstring)."""
    check_choice("kind", kind, KINDS)
    total = offset + 2 * seq_len
    if kind == "previous_token":
        dest = torch.arange(1, total)
        return dest, dest - 1
    dest = torch.arange(offset + seq_len, total)
    return dest, dest - seq_len + (1 if kind == "induction" else 0)


def head_scores(
    model: CircuitModel,
    kind: Literal["previous_token", "duplicate_token", "induction"] = "induction",
    seq_len: int | None = None,
    n_seqs: int = 8,
    seed: int = 0,
) -> np.ndarray:
    """Mean attention of every head to the detector's source position, float64 ``[n_layers, n_heads]``.

    Parameters
    ----------
    model
        The model.
    kind
        ``"previous_token"``, ``"duplicate_token"`` or ``"induction"``.
    seq_len
        Length ``n`` of the random half (default :func:`default_seq_len`).
    n_seqs
        Number of random sequences (run as one batch).
    seed
        Seed of the random tokens.

    Notes
    -----
    Cost one forward pass of ``n_seqs`` sequences of ``1 + 2 n`` tokens.
    """
    model = check_model(model)
    check_choice("kind", kind, KINDS)
    tokens = repeated_random_tokens(model, seq_len, n_seqs, seed)
    offset = 0 if _bos(model) is None else 1
    half = (tokens.shape[1] - offset) // 2
    dest, src = detection_targets(kind, half, offset)
    _, cache = model.run_with_cache(tokens, names=["pattern"])
    scores = np.empty((model.cfg.n_layers, model.cfg.n_heads))
    for layer in range(model.cfg.n_layers):
        pattern = cache["pattern", layer]  # [batch, head, dest, src]
        picked = pattern[:, :, dest.to(pattern.device), src.to(pattern.device)]  # [batch, head, n]
        scores[layer] = picked.double().mean(dim=(0, 2)).cpu().numpy()
    return scores
