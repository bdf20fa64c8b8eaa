"""The path expansion of the logits: direct path, single heads, virtual heads, and term importance.

For an attention-only transformer with attention patterns held fixed, the
logits are a sum of path terms (the paper's "path expansion"):

- order 0, the direct path ``W_E W_U`` (bigram statistics, :func:`bigrams`);
- order 1, one term per head ``A^h ⊗ W_E W_OV^h W_U``;
- order 2, one term per pair of heads in different layers, the "virtual head"
  ``(A^{h2} A^{h1}) ⊗ W_E W_OV^{h1} W_OV^{h2} W_U``;
- and so on, one order per extra head.

:func:`path_expansion` evaluates orders 0–2 on a text; :func:`term_importance`
runs the paper's algorithm for the marginal loss effect of each order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from circuitwidgets._checks import check_int, check_model, check_token, progress
from circuitwidgets.circuits._records import RecordList
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET
from circuitwidgets.circuits.ov_qk import _direct_path
from circuitwidgets.errors import ArgumentTypeError, ShapeError, UnsupportedArchitectureError
from circuitwidgets.model import CircuitModel

TokensLike = str | Sequence[int] | torch.Tensor


@dataclass(frozen=True)
class Bigram:
    """A direct-path entry: the logit of ``next`` given the current token ``current``."""

    current: int
    next: int
    current_str: str
    next_str: str
    logit: float


def bigrams(
    model: CircuitModel,
    k: int = 10,
    token: int | str | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress_bar: bool | None = None,
) -> RecordList[Bigram]:
    """Largest direct-path entries ``(W_E W_U + b_U)[current, next]``, best first.

    With ``token=None`` the ``k`` largest entries of the whole ``[d_vocab, d_vocab]``
    matrix (chunked, cost ``O(V² d_model)``); with a token (id or one-token string)
    the ``k`` next tokens it raises most (cost ``O(V d_model)``). Only the token
    embedding enters (positional embeddings and layer-norm scale are left out).
    """
    model = check_model(model, "bigrams")
    k = check_int("k", k, 1, model.cfg.d_vocab + 1)
    matrix = _direct_path(model)
    name = model.tokenizer.token_str
    if token is not None:
        current = check_token(model, "token", token)
        row = matrix[current, :]
        assert isinstance(row, torch.Tensor)
        top = torch.topk(row, k)
        return RecordList(
            Bigram(current, int(j), name(current), name(int(j)), float(v))
            for v, j in zip(top.values.tolist(), top.indices.tolist(), strict=True)
        )
    entries = matrix.topk(k, memory_budget=memory_budget, progress_bar=progress_bar)
    return RecordList(
        Bigram(int(i), int(j), name(int(i)), name(int(j)), float(v))
        for v, i, j in zip(entries.values.tolist(), entries.rows.tolist(), entries.cols.tolist(), strict=True)
    )


def _token_ids(model: CircuitModel, tokens: TokensLike, batched: bool) -> torch.Tensor:
    if isinstance(tokens, str):
        ids = model.to_tokens(tokens)
    else:
        try:
            ids = torch.as_tensor(tokens, device=model.device)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ArgumentTypeError(f"tokens: expected a text or token ids, got {type(tokens).__name__}") from exc
        if ids.ndim == 1:
            ids = ids[None]
    if ids.ndim != 2 or (not batched and ids.shape[0] != 1):
        expected = "[batch, pos]" if batched else "[pos] or [1, pos]"
        raise ShapeError(f"tokens: expected {expected} token ids, got shape {tuple(ids.shape)}")
    if ids.shape[1] < 2:
        raise ShapeError(f"tokens: expected at least 2 positions (one prediction), got {ids.shape[1]}")
    return ids


@dataclass(frozen=True)
class PathExpansion:
    """Path terms of the logit of each next token on one text (patterns from the model's own run).

    Position ``p`` predicts ``targets[p] = tokens[p + 1]``; every array's last
    axis is ``[pos - 1]``.
    """

    tokens: np.ndarray
    """``[pos]`` token ids."""
    targets: np.ndarray
    """``[pos - 1]`` next-token ids."""
    logits: np.ndarray
    """``[pos - 1]`` the model's logit of each next token."""
    direct: np.ndarray
    """``[pos - 1]`` direct path (token embedding, and positions when they enter the residual stream)."""
    heads: np.ndarray
    """``[n_layers, n_heads, pos - 1]`` one term per head, reading the embedding."""
    virtual_heads: np.ndarray
    """``[n_layers, n_heads, n_layers, n_heads, pos - 1]``; entry ``[l1, h1, l2, h2]`` is the
    virtual head ``h1 → h2`` (pattern ``A^{h2} A^{h1}``, OV ``W_OV^{h1} W_OV^{h2}``); NaN where ``l1 >= l2``."""
    remainder: np.ndarray
    """``[pos - 1]`` logit minus all terms above: biases, paths through three or more heads, MLPs."""


class _Readout:
    """Linear maps of a frozen run: each layer's normalised input and the final logit readout."""

    def __init__(
        self, model: CircuitModel, cache_scales: list[torch.Tensor], final_scale: torch.Tensor, targets: torch.Tensor
    ) -> None:
        self.model = model
        self.normalized = model.cfg.normalization in ("ln_pre", "rms_pre")
        self.centred = model.cfg.normalization == "ln_pre"
        self.scales = cache_scales  # per layer [pos, 1]
        unembed = model.W_U[:, targets].T  # [pos - 1, d]
        if self.centred:
            unembed = unembed - unembed.mean(-1, keepdim=True)
        if self.normalized:
            unembed = unembed / final_scale[:-1]
        self.unembed = unembed

    def read(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Layer ``layer``'s attention input for a residual component ``x [..., pos, d]``."""
        if not self.normalized:
            return x
        return ((x - x.mean(-1, keepdim=True)) if self.centred else x) / self.scales[layer]

    def logit(self, x: torch.Tensor) -> torch.Tensor:
        """Next-token logit contribution ``[..., pos - 1]`` of a residual component ``x [..., pos, d]``."""
        return (x[..., :-1, :] * self.unembed).sum(-1)


def path_expansion(model: CircuitModel, tokens: TokensLike) -> PathExpansion:
    """Direct, per-head and virtual-head contributions to each next-token logit of one text.

    Attention patterns (and, for ``ln_pre`` models, the per-token normalisation
    scalars) are taken from the model's own run and held fixed, which makes
    every term linear. Value and output biases, ``b_U``, paths through three or
    more heads and MLPs fall in :attr:`PathExpansion.remainder`; for a two-layer
    attention-only model without biases the remainder is zero.

    Parameters
    ----------
    model
        The model.
    tokens
        A text (BOS prepended), or ``[pos]`` / ``[1, pos]`` token ids; at least two
        positions (one next token to predict): a single token raises :class:`ShapeError`.

    Notes
    -----
    Cost ``O(L² H² pos² d_head + L H pos d_model d_head)`` time,
    ``O(H² pos d_head)`` memory per layer pair.
    """
    model = check_model(model, "path_expansion")
    ids = _token_ids(model, tokens, batched=False)
    cfg = model.cfg
    if cfg.normalization == "rms_post" or cfg.post_norm or cfg.final_softcap is not None:
        raise UnsupportedArchitectureError(
            f"model: path_expansion needs logits linear in each head's output once patterns and input norms are "
            f"frozen; {model.name!r} has {'sublayer-output norms' if cfg.final_softcap is None else 'a final-logit soft-cap'}, "
            "which mix the heads' outputs (use term_importance, which runs the model's own forward pass)"
        )
    L, H, n_pos = cfg.n_layers, cfg.n_heads, ids.shape[1]
    logits, cache = model.run_with_cache(ids, names=["pattern", "scale", "embed", "pos_embed", "resid_final"])
    targets = ids[0, 1:]
    x0 = cache["embed"][0]
    if cfg.positional_embedding_type == "standard":
        x0 = x0 + cache["pos_embed"][0]
    final = cache["resid_final"][0]
    if cfg.normalization == "ln_pre":
        final = final - final.mean(-1, keepdim=True)
    final_scale = (final.pow(2).mean(-1, keepdim=True) + cfg.ln_eps).sqrt()
    scales = [cache["scale", layer][0] for layer in range(L)] if cfg.normalization in ("ln_pre", "rms_pre") else []
    W_V = model.per_query_head(model.W_V)
    readout = _Readout(model, scales, final_scale, targets)
    patterns = [cache["pattern", layer][0] for layer in range(L)]  # [H, dest, src]

    heads = np.full((L, H, n_pos - 1), np.nan)
    virtual = np.full((L, H, L, H, n_pos - 1), np.nan)
    outputs = []  # per layer, each head's order-1 output [H, pos, d]
    for layer in range(L):
        values = readout.read(layer, x0) @ W_V[layer]  # [H, pos, dh]
        out = (patterns[layer] @ values) @ model.W_O[layer]  # [H, pos, d]
        outputs.append(out)
        heads[layer] = readout.logit(out).double().cpu().numpy()
    for l2 in range(1, L):
        # W_O^{h2} applied to the readout: [H2, pos - 1, dh]
        readout_o = torch.einsum("ged,qd->gqe", model.W_O[l2], readout.unembed)
        for l1 in range(l2):
            values = readout.read(l2, outputs[l1])[:, None] @ W_V[l2][None]  # [H1, H2, pos, dh]
            mixed = patterns[l2][None] @ values  # [H1, H2, pos, dh]
            virtual[l1, :, l2] = torch.einsum("hgqe,gqe->hgq", mixed[:, :, :-1], readout_o).double().cpu().numpy()
    direct = readout.logit(x0).double().cpu().numpy()
    target_logits = logits[0, :-1].gather(1, targets[:, None])[:, 0].double().cpu().numpy()
    total = direct + heads.sum(axis=(0, 1)) + np.nansum(virtual, axis=(0, 1, 2, 3))
    return PathExpansion(
        tokens=ids[0].cpu().numpy(),
        targets=targets.cpu().numpy(),
        logits=target_logits,
        direct=direct,
        heads=heads,
        virtual_heads=virtual,
        remainder=target_logits - total,
    )


@dataclass(frozen=True)
class TermImportanceResult:
    """Marginal loss effect of path terms by order (paper's term-importance algorithm). Losses in nats."""

    losses: np.ndarray
    """``[max_order + 1]``: mean next-token loss keeping path terms of order ≤ n (patterns frozen)."""
    marginal: np.ndarray
    """``[max_order + 1]``: loss reduction from adding the order-n terms; ``marginal[0]`` is
    ``loss_no_terms - losses[0]``, ``marginal[n] = losses[n - 1] - losses[n]``."""
    layer_order1: np.ndarray
    """``[n_layers]``: loss reduction from adding only layer ``l``'s order-1 terms to the direct path."""
    loss_no_terms: float
    """Loss with no path terms at all (logits ``b_U``, or uniform without it)."""
    full_loss: float
    """Loss of the ordinary forward pass."""


def _loss(logits: torch.Tensor, ids: torch.Tensor) -> float:
    """Mean next-token cross-entropy (nats) of ``logits [batch, pos, V]`` on ``ids [batch, pos]``."""
    log_probs = logits[:, :-1].double().log_softmax(-1)
    return float(-log_probs.gather(-1, ids[:, 1:, None]).mean())


def term_importance(
    model: CircuitModel,
    tokens: TokensLike,
    max_order: int | None = None,
    progress_bar: bool | None = None,
) -> TermImportanceResult:
    """Marginal loss reduction of the order-0, 1, …, ``max_order`` path terms.

    The paper's algorithm: (1) run the model and record every attention
    pattern; (2) run with patterns frozen and every head's output replaced by
    zeros, recording the loss (only the direct path, order 0) and each head's
    computed output (order ≤ 1 terms); (n + 2) run with patterns frozen and head
    outputs replaced by the outputs computed in the previous run, recording the
    loss (terms of order ≤ n) and the new outputs. For an attention-only model
    with ``n_layers`` layers, ``losses[n_layers]`` equals the full loss. ``b_O`` is
    added in every run (a constant, counted with order 0).

    Parameters
    ----------
    model
        The model (for models with MLPs the MLPs run normally in every pass).
    tokens
        A text or ``[batch, pos]`` token ids, at least two positions (a single
        token has no next token: :class:`ShapeError`).
    max_order
        Highest order, ``0..n_layers`` (default ``n_layers``; a path has at most one head per layer).
    progress_bar
        Show a tqdm bar (``None``: only when interactive).

    Notes
    -----
    Cost ``max_order + n_layers + 2`` forward passes.
    """
    model = check_model(model)
    ids = _token_ids(model, tokens, batched=True)
    cfg = model.cfg
    # A path passes through at most one head per layer: orders above n_layers are empty.
    max_order = cfg.n_layers if max_order is None else check_int("max_order", max_order, 0, cfg.n_layers + 1)
    logits, cache = model.run_with_cache(ids, names=["pattern"])
    full_loss = _loss(logits, ids)
    frozen: list[torch.Tensor | None] = [cache["pattern", layer] for layer in range(cfg.n_layers)]
    batch, n_pos = ids.shape
    zeros = torch.zeros(batch, n_pos, cfg.n_heads, cfg.d_model, dtype=model.dtype, device=model.device)
    b_U = model.weight("b_U")
    no_terms = b_U if b_U is not None else torch.zeros(cfg.d_vocab, dtype=model.dtype, device=model.device)
    loss_no_terms = _loss(no_terms.expand(batch, n_pos, cfg.d_vocab), ids)

    previous: list[torch.Tensor | None] = [zeros] * cfg.n_layers
    losses: list[float] = []
    order1: list[torch.Tensor | None] = previous
    for order in progress(range(max_order + 1), max_order + 1, "term importance", progress_bar):
        run_logits, run_cache = model.run_with_cache(ids, patterns=frozen, head_results=previous, names=["result"])
        losses.append(_loss(run_logits, ids))
        previous = [run_cache["result", layer] for layer in range(cfg.n_layers)]
        if order == 0:
            order1 = previous
    layer_order1 = np.empty(cfg.n_layers)
    for layer in range(cfg.n_layers):
        only = [order1[j] if j == layer else zeros for j in range(cfg.n_layers)]
        run_logits, _ = model.run_with_cache(ids, patterns=frozen, head_results=only, cache=False)
        layer_order1[layer] = losses[0] - _loss(run_logits, ids)
    loss_array = np.asarray(losses)
    marginal = np.concatenate([[loss_no_terms - loss_array[0]], loss_array[:-1] - loss_array[1:]])
    return TermImportanceResult(loss_array, marginal, layer_order1, loss_no_terms, full_loss)
