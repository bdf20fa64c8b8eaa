"""Head detectors: previous-token, duplicate-token, induction, current-token and first-token scores.

A head's score is its mean attention, over destination positions ``i``, to
the detector's *targets* ``T(i)`` (a set of source positions), summed over the
set. It is computed on one of three inputs.

**Repeated random tokens** (neither ``tokens`` nor ``cache`` given; DESIGN.md §3).
Each sequence is ``[BOS] r_1 … r_n r_1 … r_n`` (no BOS when the model has
none) with ``r_i`` drawn uniformly from the non-BOS token ids by a seeded
``torch.Generator``, so scores are deterministic. With ``b`` the BOS offset (1
or 0), ``r_j`` sits at positions ``b + j - 1`` and ``b + n + j - 1``. The
targets are single positions, averaged over sequences and these destinations:

- ``"previous_token"``: ``i → i − 1`` for every ``i ≥ 1``;
- ``"duplicate_token"``: ``i → i − n`` over the repeated half ``i ∈ [b + n, b + 2n − 1]``
  (the earlier copy of the same token);
- ``"induction"``: ``i → i − n + 1`` over the repeated half (the token that
  followed the earlier copy);
- ``"current_token"``: ``i → i`` for every ``i ≥ 1``;
- ``"first_token"``: ``i → 0`` (the BOS, where there is one) for every ``i ≥ 1``.

**The user's own tokens** (``tokens``: a text, a list of equal-length texts, or
ids ``[pos]`` / ``[batch, pos]``), run through the model, or **the user's cache**
(an :class:`~circuitwidgets.model.ActivationCache` from ``model.run_with_cache``
holding ``"pattern"`` for every layer), with the tokens it was run on where
the kind needs them. With ``t`` the token ids of one sequence:

- ``"previous_token"``: ``T(i) = {i − 1}`` for ``i ≥ 1``;
- ``"current_token"``: ``T(i) = {i}`` for ``i ≥ 1``;
- ``"first_token"``: ``T(i) = {0}`` for ``i ≥ 1``;
- ``"duplicate_token"``: ``T(i) = {j < i : t_j = t_i}``, every earlier
  occurrence of the same token;
- ``"induction"``: ``T(i) = {j + 1 : j < i, t_j = t_i}``, the position right
  after every earlier occurrence (``i`` itself when ``t_{i−1} = t_i``).

Position 0 attends only to itself (its pattern row is ``[1]`` for every head),
so it is never a destination. The score averages over the ``(sequence, i)``
pairs whose ``T(i)`` is not empty; a batch pools them. These are exactly the
detection patterns of TransformerLens's ``detect_head`` (its three kinds;
``current_token`` and ``first_token`` are ours), whose ``"mul"`` score is the
same sum divided by the sequence length (every destination, with or without a
target) instead of the number of destinations with a target, and averaged per
prompt; for one sequence, ``ours × n_destinations / seq_len`` is its score
(tested). On repeated random tokens without accidental repeats the two sets of
definitions coincide; accidental repeats within a half add targets here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

import numpy as np
import torch

from circuitwidgets._checks import check_choice, check_int, check_model
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import ActivationCache, CircuitModel

#: The detector kinds, in the order widgets list them.
KINDS = ("previous_token", "duplicate_token", "induction", "current_token", "first_token")
#: A detector kind (see :data:`KINDS`).
HeadKind: TypeAlias = Literal["previous_token", "duplicate_token", "induction", "current_token", "first_token"]
#: Token input of :func:`head_scores`: a text, equal-length texts, or ids ``[pos]`` / ``[batch, pos]``.
TokensLike: TypeAlias = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]] | torch.Tensor | np.ndarray
#: Kinds whose targets depend on the token ids, not only on positions.
TOKEN_KINDS = ("duplicate_token", "induction")


def _bos(model: CircuitModel) -> int | None:
    bos = model.tokenizer.bos_token_id
    return model.cfg.bos_token_id if bos is None else bos


def default_seq_len(model: CircuitModel) -> int:
    """``min(50, (n_ctx - 1) // 2)``: the half length used when ``seq_len`` is not given."""
    offset = 0 if _bos(model) is None else 1
    return max(1, min(50, (model.cfg.n_ctx - offset) // 2))


def repeated_random_tokens(
    model: CircuitModel, seq_len: int | None = None, n_seqs: int = 8, seed: int = 0
) -> torch.Tensor:
    """``[n_seqs, b + 2 seq_len]`` token ids ``[BOS] r_1..r_n r_1..r_n`` (module docstring).

    The ``r_i`` are uniform over the non-BOS ids, from ``torch.Generator().manual_seed(seed)``.
    """
    return _repeated_random_tokens(check_model(model), seq_len, n_seqs, seed)


def _repeated_random_tokens(model: CircuitModel, seq_len: int | None, n_seqs: int, seed: int) -> torch.Tensor:
    """:func:`repeated_random_tokens` of a checked model (its other arguments checked here)."""
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
    """``(destinations, sources)`` position pairs scored on repeated random tokens (module docstring)."""
    check_choice("kind", kind, KINDS)
    total = offset + 2 * seq_len
    if kind in ("previous_token", "current_token", "first_token"):
        dest = torch.arange(1, total)
        if kind == "previous_token":
            return dest, dest - 1
        return dest, dest if kind == "current_token" else torch.zeros_like(dest)
    dest = torch.arange(offset + seq_len, total)
    return dest, dest - seq_len + (1 if kind == "induction" else 0)


def target_mask(kind: str, tokens: torch.Tensor | None, n_pos: int) -> torch.Tensor:
    """Boolean ``[batch, pos, pos]`` (or ``[1, pos, pos]`` without tokens): ``mask[s, i, j]`` iff ``j ∈ T(i)``.

    ``T(i)`` is the detector's target set on arbitrary tokens (module docstring);
    ``tokens [batch, pos]`` is needed for ``"duplicate_token"`` and ``"induction"``.
    Cost ``O(batch · pos²)`` booleans.
    """
    check_choice("kind", kind, KINDS)
    if kind in TOKEN_KINDS:
        if tokens is None:
            raise ArgumentError(f"tokens: {kind!r} needs the token ids the patterns were computed on, got None")
        later = torch.ones(n_pos, n_pos, dtype=torch.bool, device=tokens.device).tril(-1)  # j < i
        duplicate = (tokens[:, :, None] == tokens[:, None, :]) & later
        if kind == "duplicate_token":
            return duplicate
        induction = torch.zeros_like(duplicate)
        induction[:, :, 1:] = duplicate[:, :, :-1]  # j + 1 for each earlier occurrence j
        return induction
    device = None if tokens is None else tokens.device
    dest = torch.arange(1, n_pos, device=device)
    src = {"previous_token": dest - 1, "current_token": dest, "first_token": torch.zeros_like(dest)}[kind]
    mask = torch.zeros(1, n_pos, n_pos, dtype=torch.bool, device=device)
    mask[0, dest, src] = True
    return mask if tokens is None else mask.expand(tokens.shape[0], -1, -1)


def _token_batch(model: CircuitModel, tokens: object) -> torch.Tensor:
    """``tokens`` as ``[batch, pos]`` long ids on the model's device (texts through ``model.to_tokens``)."""
    if isinstance(tokens, str) or (
        isinstance(tokens, (list, tuple)) and len(tokens) > 0 and all(isinstance(t, str) for t in tokens)
    ):
        return model.to_tokens(tokens)
    if isinstance(tokens, (bytes, bytearray)):
        raise ArgumentTypeError(f"tokens: expected a text, texts or token ids, got {type(tokens).__name__}")
    try:
        ids = torch.as_tensor(tokens, device=model.device)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ArgumentTypeError(
            f"tokens: expected a text, texts or token ids, got {type(tokens).__name__} ({exc})"
        ) from None
    if ids.ndim == 1:
        ids = ids[None]
    if (
        ids.ndim != 2
        or ids.shape[1] == 0
        or ids.dtype.is_floating_point
        or ids.dtype.is_complex
        or ids.dtype == torch.bool
    ):
        raise ShapeError(
            f"tokens: expected integer token ids [pos] or [batch, pos], got shape {tuple(ids.shape)} dtype {ids.dtype}"
        )
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= model.cfg.d_vocab):
        raise ArgumentError(
            f"tokens: expected ids in [0, {model.cfg.d_vocab}), got range [{int(ids.min())}, {int(ids.max())}]"
        )
    return ids.long()


def _cache_patterns(model: CircuitModel, cache: object) -> list[torch.Tensor]:
    """The ``[batch, n_heads, pos, pos]`` pattern of every layer in ``cache``, checked against ``model``."""
    if not isinstance(cache, ActivationCache):
        raise ArgumentTypeError(
            f"cache: expected a circuitwidgets ActivationCache from model.run_with_cache(tokens), got {type(cache).__name__}"
        )
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    missing = [layer for layer in range(n_layers) if ("pattern", layer) not in cache]
    if missing:
        raise ArgumentError(
            f"cache: expected 'pattern' for each of the model's {n_layers} layers, missing layers {missing} "
            "(run model.run_with_cache(tokens, names=['pattern']) with this model)"
        )
    if ("pattern", n_layers) in cache:
        raise ShapeError(
            f"cache: holds patterns for more layers than the model's n_layers={n_layers}; a cache from another model?"
        )
    patterns = [cache["pattern", layer] for layer in range(n_layers)]
    first = tuple(patterns[0].shape) if patterns else ()
    for layer, pattern in enumerate(patterns):
        shape = tuple(pattern.shape)
        if len(shape) != 4 or shape[1] != n_heads or shape[2] != shape[3] or shape != first:
            raise ShapeError(
                f"cache['pattern', {layer}]: expected [batch, n_heads={n_heads}, pos, pos] like layer 0's {first}, "
                f"got shape {shape}; a cache from another model?"
            )
        if not pattern.dtype.is_floating_point:
            raise ArgumentTypeError(
                f"cache['pattern', {layer}]: expected floating-point weights, got dtype {pattern.dtype}"
            )
        if not bool(torch.isfinite(pattern).all()):
            raise NonFiniteError(f"cache['pattern', {layer}]: expected finite values, got NaN/Inf entries")
    return patterns


def _scores_from_patterns(patterns: Sequence[torch.Tensor], mask: torch.Tensor, kind: str, source: str) -> np.ndarray:
    """Mean over destinations with a target of the attention to the targets ``mask`` (``[batch, pos, pos]``)."""
    where = mask.nonzero(as_tuple=True)  # (seq, dest, src) triples
    n_dest = int(mask.any(dim=-1).sum())
    if n_dest == 0:
        why = "no token repeats an earlier token" if kind in TOKEN_KINDS else "there is only one position"
        raise ArgumentError(
            f"{source}: expected at least one destination with a {kind!r} target, got none ({why}); pass a longer "
            "text" + (" with repeated tokens" if kind in TOKEN_KINDS else "")
        )
    scores = np.empty((len(patterns), patterns[0].shape[1] if patterns else 0))
    for layer, pattern in enumerate(patterns):
        seq, dest, src = (index.to(pattern.device) for index in where)
        picked = pattern[seq, :, dest, src]  # [n_pairs, head]
        scores[layer] = (picked.double().sum(dim=0) / n_dest).cpu().numpy()
    return scores


def head_scores(
    model: CircuitModel,
    kind: HeadKind = "induction",
    tokens: TokensLike | None = None,
    cache: ActivationCache | None = None,
    seq_len: int | None = None,
    n_seqs: int | None = None,
    seed: int | None = None,
) -> np.ndarray:
    """Mean attention of every head to the detector's targets, float64 ``[n_layers, n_heads]``.

    Parameters
    ----------
    model
        The model.
    kind
        One of :data:`KINDS`: ``"previous_token"``, ``"duplicate_token"``,
        ``"induction"``, ``"current_token"`` or ``"first_token"`` (module docstring
        for each definition).
    tokens
        The user's tokens: a text or a list of equal-length texts (tokenised by
        ``model.to_tokens``, which prepends the BOS when the tokenizer has one),
        or ids ``[pos]`` / ``[batch, pos]``. Without ``cache`` they are run
        through the model; with ``cache`` they are the tokens it was run on
        (needed for ``"duplicate_token"`` and ``"induction"``).
    cache
        An :class:`~circuitwidgets.model.ActivationCache` from
        ``model.run_with_cache(tokens)`` (``names=["pattern"]`` suffices) of this
        model: a cache with another number of layers or heads, without every
        layer's pattern, or whose ``[batch, pos]`` differs from ``tokens``'s is
        refused with a typed error naming it.
    seq_len
        Without ``tokens`` and ``cache`` only: length ``n`` of the random half
        (default :func:`default_seq_len`).
    n_seqs
        Without ``tokens`` and ``cache`` only: number of random sequences, run as
        one batch (default 8).
    seed
        Without ``tokens`` and ``cache`` only: seed of the random tokens (default 0).

    Notes
    -----
    Cost: one forward pass (keeping only the patterns) of ``n_seqs`` sequences
    of ``b + 2 n`` tokens, or of ``tokens`` when no ``cache`` is given; none with
    a cache. On tokens or a cache, also ``O(batch · pos²)`` booleans for the
    targets and ``O(n_targets · n_heads)`` per layer for the sums.
    """
    model = check_model(model)
    check_choice("kind", kind, KINDS)
    if tokens is None and cache is None:
        return _random_token_scores(model, kind, seq_len, 8 if n_seqs is None else n_seqs, 0 if seed is None else seed)
    for name, value in (("seq_len", seq_len), ("n_seqs", n_seqs), ("seed", seed)):
        if value is not None:
            raise ArgumentError(
                f"{name}: only used for repeated random tokens (no tokens and no cache), got {value!r} with "
                f"{'tokens' if tokens is not None else 'cache'}"
            )
    return _user_token_scores(model, kind, tokens, cache)


def _user_token_scores(model: CircuitModel, kind: str, tokens: object, cache: object) -> np.ndarray:
    """Scores on the user's tokens and/or cache (at least one of them given)."""
    ids = None if tokens is None else _token_batch(model, tokens)
    if cache is None:
        assert ids is not None
        _, cache = model.run_with_cache(ids, names=["pattern"])
    patterns = _cache_patterns(model, cache)
    if not patterns:  # a model without layers
        return np.empty((0, model.cfg.n_heads))
    batch, _, n_pos, _ = patterns[0].shape
    if ids is not None and tuple(ids.shape) != (batch, n_pos):
        raise ShapeError(
            f"cache: its patterns cover [batch={batch}, pos={n_pos}], but tokens are {list(ids.shape)}; "
            "pass the tokens the cache was run on"
        )
    mask = target_mask(kind, ids, n_pos)
    if ids is None:
        mask = mask.expand(batch, -1, -1)
    return _scores_from_patterns(patterns, mask, kind, "cache" if ids is None else "tokens")


def _random_token_scores(model: CircuitModel, kind: str, seq_len: int | None, n_seqs: int, seed: int) -> np.ndarray:
    """Scores on repeated random tokens (the behaviour without ``tokens`` or ``cache``)."""
    scores: np.ndarray = random_token_scores(model, (kind,), seq_len, n_seqs, seed)[0]
    return scores


def random_token_scores(
    model: CircuitModel, kinds: Sequence[str], seq_len: int | None, n_seqs: int, seed: int
) -> np.ndarray:
    """Scores of several detector kinds on the same repeated random tokens, from one forward pass, ``[kinds, L, H]``.

    Each kind's scores equal :func:`head_scores` of that kind with the same
    ``seq_len``, ``n_seqs`` and ``seed`` (the model and arguments already checked).
    """
    tokens = _repeated_random_tokens(model, seq_len, n_seqs, seed)
    offset = 0 if _bos(model) is None else 1
    half = (tokens.shape[1] - offset) // 2
    _, cache = model.run_with_cache(tokens, names=["pattern"])
    scores = np.empty((len(kinds), model.cfg.n_layers, model.cfg.n_heads))
    for k, kind in enumerate(kinds):
        dest, src = detection_targets(kind, half, offset)
        for layer in range(model.cfg.n_layers):
            pattern = cache["pattern", layer]  # [batch, head, dest, src]
            picked = pattern[:, :, dest.to(pattern.device), src.to(pattern.device)]  # [batch, head, n]
            scores[k, layer] = picked.double().mean(dim=(0, 2)).cpu().numpy()
    return scores
