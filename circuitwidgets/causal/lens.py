"""The logit lens and per-token loss: what the residual stream predicts along the way, and how well the model predicts.

The logit lens reads the stream before each layer and after the last
(``n_layers + 1`` rows) through the final norm, recomputed on that stream (its
own scale, as the lens is usually drawn), and the unembedding. It keeps the
top-k tokens and their log-probabilities per (layer, position) and the
normalised streams, so a chosen answer's log-prob is exact on demand; it never
holds ``[layers, pos, d_vocab]`` unless :meth:`LogitLens.dense` is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets.activations.loss import token_losses
from circuitwidgets.causal import nnsight_backend
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NotCoveredError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Recorder
from circuitwidgets.model.forward import soft_cap
from circuitwidgets.sources.nnsight_handle import NNsightModel


@dataclass
class LogitLens:
    """Top-k predictions of the stream at every layer: ``top_ids``, ``top_log_probs`` ``[L + 1, batch, pos, k]``.

    Row ``l < L`` reads the stream before layer ``l`` (``resid_pre``), row ``L``
    after the last layer. ``layer_labels`` names the rows, ``tokens`` the
    prompts' token strings (untrusted text).
    """

    top_ids: NDArray[np.int64]
    top_log_probs: NDArray[np.float32]
    layer_labels: list[str]
    tokens: list[list[str]]
    model: str
    _normed: torch.Tensor  # [L + 1, batch, pos, d_model], after the final norm
    _lse: torch.Tensor  # [L + 1, batch, pos]
    _model: CircuitModel
    _ids: torch.Tensor  # [batch, pos], the prompts' token ids

    def _logits(self, ids: torch.Tensor | None) -> torch.Tensor:
        W_U = self._model.W_U if ids is None else self._model.W_U[:, ids]
        out = self._normed @ W_U
        b_U = self._model.weight("b_U")
        if b_U is not None:
            out = out + (b_U if ids is None else b_U[ids])
        return soft_cap(out, self._model.cfg.final_softcap)

    def _vocab(self) -> int:
        return self._model.cfg.d_vocab

    def _next_logits(self) -> torch.Tensor:
        """Each position's logit of the prompt's next token ``[L + 1, batch, pos − 1]``: one column per position."""
        if type(self)._logits is not LogitLens._logits:  # another unembedding (nnsight): the few ids those are
            unique, where = torch.unique(self._ids[:, 1:].to(self._normed.device), return_inverse=True)
            logits = self._logits(unique)[:, :, :-1]
            return logits.gather(-1, where[None, ..., None].expand(logits.shape[0], -1, -1, 1))[..., 0]
        nxt = self._ids[:, 1:].to(self._normed.device)
        columns = self._model.W_U[:, nxt]  # [d_model, batch, pos − 1]
        out = torch.einsum("lbpd,dbp->lbp", self._normed[:, :, :-1], columns.to(self._normed.dtype))
        b_U = self._model.weight("b_U")
        if b_U is not None:
            out = out + b_U[nxt]
        return soft_cap(out, self._model.cfg.final_softcap)

    def log_prob(
        self, ids: int | Sequence[int] | torch.Tensor | None = None, *, next_tokens: bool = False
    ) -> NDArray[np.float64]:
        """Log-probability of token ``ids`` at every (layer, prompt, position): ``[L + 1, batch, pos]`` for one id,
        ``[L + 1, batch, pos, len(ids)]`` for several; exact (from the kept streams, not the top-k).

        ``next_tokens=True`` (no ``ids``): the log-probability of each position's actual next token,
        ``[L + 1, batch, pos − 1]`` (the lens's usual question), one unembedding column per position.
        """
        if next_tokens is not False and next_tokens is not True:
            raise ArgumentTypeError(f"next_tokens: expected a bool, got {next_tokens!r}")
        if next_tokens:
            if ids is not None:
                raise ArgumentError(f"ids: pass either ids or next_tokens=True, got ids={ids!r:.40} as well")
            if self._ids.shape[1] < 2:
                raise ShapeError("next_tokens: the prompts have one position, so no next token")
            with torch.no_grad():
                return cast(NDArray[np.float64], (self._next_logits() - self._lse[:, :, :-1]).double().cpu().numpy())
        if ids is None:
            raise ArgumentError("ids: expected token ids (or next_tokens=True), got None")
        if isinstance(ids, (str, bytes)):  # a token string: its id is the tokenizer's to give, not ours to guess
            raise ArgumentTypeError(
                f"ids: expected token ids (ints), got {type(ids).__name__} {ids!r:.40}; a token string's ids are "
                "model.tokenizer.encode(...)"
            )
        try:
            t = torch.as_tensor(ids, device=self._normed.device)
        except (TypeError, ValueError, RuntimeError):
            raise ArgumentTypeError(f"ids: expected token ids (ints), got {type(ids).__name__}") from None
        if t.dtype.is_floating_point or t.dtype == torch.bool or t.dtype.is_complex:
            raise ArgumentTypeError(f"ids: expected token ids, got dtype {t.dtype}")
        flat = t.flatten().long()
        V = self._vocab()
        if flat.numel() == 0 or int(flat.min()) < 0 or int(flat.max()) >= V:
            raise ArgumentError(f"ids: expected ids in [0, {V}), got {flat.tolist()!r:.80}")
        with torch.no_grad():
            out = (self._logits(flat) - self._lse[..., None]).double().cpu().numpy()
        return out[..., 0] if t.ndim == 0 else out

    def along(self, direction: torch.Tensor | NDArray[np.floating] | Sequence[float]) -> NDArray[np.float64]:
        """The stream read along ``direction`` at every (layer, prompt, position): ``[L + 1, batch, pos]``.

        Read where the lens reads a token (after the final norm, recomputed on each row's stream), as direct logit
        attribution reads an answer direction: a token's unembedding column gives its logit less any bias, and a
        probe's ``direction`` (:func:`circuitwidgets.probe`) shows at which layer the stream points its way.
        """
        d = self._normed.shape[-1]
        try:
            v = torch.as_tensor(direction)
        except (TypeError, ValueError, RuntimeError):
            raise ArgumentTypeError(
                f"direction: expected a vector of {d} floats, got {type(direction).__name__}"
            ) from None
        if not v.dtype.is_floating_point:
            raise ArgumentTypeError(f"direction: expected floats, got dtype {v.dtype}")
        if tuple(v.shape) != (d,):
            raise ShapeError(f"direction: expected shape ({d},) (d_model), got {tuple(v.shape)}")
        if not bool(torch.isfinite(v).all()):
            raise ArgumentError("direction: expected finite values, got NaN or infinity")
        with torch.no_grad():
            out = self._normed @ v.to(self._normed.device, self._normed.dtype)
        return cast(NDArray[np.float64], out.double().cpu().numpy())

    def rank(self, ids: int) -> NDArray[np.int64]:
        """Rank of token ``ids`` (0 = top prediction) at every (layer, prompt, position) ``[L + 1, batch, pos]``."""
        V = self._vocab()
        if isinstance(ids, bool) or not isinstance(ids, (int, np.integer)):
            raise ArgumentTypeError(f"ids: expected one token id (an int), got {type(ids).__name__}")
        if not 0 <= int(ids) < V:  # a negative id would silently read from the end of the vocabulary
            raise ArgumentError(f"ids: expected a token id in [0, {V}), got {int(ids)}")
        with torch.no_grad():
            logits = self._logits(None)
            at = logits[..., int(ids)]
            return (logits > at[..., None]).sum(-1).cpu().numpy()

    def dense(self) -> torch.Tensor:
        """Every log-probability ``[L + 1, batch, pos, d_vocab]`` (large: asked for, never kept)."""
        with torch.no_grad():
            return self._logits(None) - self._lse[..., None]


def logit_lens(model: CircuitModel, tokens: torch.Tensor | Sequence[int] | str, k: int = 5) -> LogitLens:
    """The logit lens of ``tokens``: the top ``k`` predictions of the stream before each layer and after the last.

    Cost: one forward pass, then ``(L + 1) · batch · pos · d_model · d_vocab``
    multiply-adds for the unembedding, one layer at a time.
    """
    if nnsight_backend.dispatch(model):
        return _traced_logit_lens(model, tokens, k)
    t = model._check_tokens(tokens)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= model.cfg.d_vocab:
        raise ArgumentError(f"k: expected an int in [1, {model.cfg.d_vocab}], got {k!r}")
    L = model.cfg.n_layers
    _, cache = model.run_with_cache(t, names=["resid_pre", "resid_final"])
    streams = [cache["resid_pre", layer] for layer in range(L)] + [cache["resid_final"]]
    normed, lse, top_ids, top_lp = [], [], [], []
    with torch.no_grad():
        for stream in streams:
            x = model._normalize(stream, Recorder({}, set()), "scale_final", None)
            logits = soft_cap(
                x @ model.W_U + (b if (b := model.weight("b_U")) is not None else 0), model.cfg.final_softcap
            )
            work = logits if logits.dtype == torch.float64 else logits.float()
            s = torch.logsumexp(work, dim=-1)
            values, ids = work.topk(k, dim=-1)
            normed.append(x)
            lse.append(s)
            top_ids.append(ids)
            top_lp.append(values - s[..., None])
    return LogitLens(
        torch.stack(top_ids).cpu().numpy().astype(np.int64),
        torch.stack(top_lp).cpu().numpy().astype(np.float32),
        [f"before L{i}" for i in range(L)] + ["final"],
        [model.to_str_tokens(row) for row in t],
        model.name,
        torch.stack(normed),
        torch.stack(lse).to(model.dtype),
        model,
        t,
    )


def per_token_loss(model: CircuitModel, tokens: torch.Tensor | Sequence[int] | str) -> NDArray[np.float64]:
    """``−log p(token_{i+1} | tokens_{≤i})`` at each position ``i``: ``[batch, pos − 1]`` (TransformerLens's
    ``loss_per_token``)."""
    if nnsight_backend.dispatch(model):
        return nnsight_backend.per_token_loss(model, tokens)
    t = model._check_tokens(tokens)
    if t.shape[1] < 2:
        raise ShapeError(f"tokens: per-token loss needs at least 2 positions, got {t.shape[1]}")
    with torch.no_grad():
        loss: NDArray[np.float64] = token_losses(model(t), t).double().cpu().numpy()
        return loss


@dataclass
class TracedLogitLens(LogitLens):
    """A :class:`~circuitwidgets.causal.LogitLens` computed in an nnsight trace: top-k and log-sum-exp came back;
    ``log_prob``/``rank``/``dense`` need the normalised streams and the unembedding, kept only for a local run."""

    _unembed: Callable[[torch.Tensor], torch.Tensor] | None = None
    _n_vocab: int = 0

    def _vocab(self) -> int:
        return self._n_vocab

    def _logits(self, ids: torch.Tensor | None) -> torch.Tensor:
        if self._unembed is None:
            raise NotCoveredError(
                "log_prob/rank/dense of a logit lens run remotely: the streams and the unembedding stay on the "
                "server; read the top-k (top_ids, top_log_probs), or run the lens with remote=False"
            )
        out = self._unembed(self._normed)
        return out if ids is None else out[..., ids]


def _traced_logit_lens(h: NNsightModel, tokens: object, k: int) -> LogitLens:
    """:func:`circuitwidgets.causal.logit_lens` through nnsight: the final norm and unembedding applied in the trace to
    each layer's input stream and the last output; top-``k`` ids, their log-probs and the log-sum-exp come back."""
    import nnsight

    t = h.check_tokens(tokens)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= h.d_vocab:
        raise ArgumentError(f"k: expected an int in [1, {h.d_vocab}], got {k!r}")
    cap = getattr(h.lm._module.config, "final_logit_softcapping", None)
    keep = not h.remote
    with h.remote_errors("logit_lens"), h.trace(t):
        streams = [h.block(layer).input for layer in range(h.n_layers)] + [h.final_norm().input]
        ids, lps, lses, normed = [], [], [], []
        for stream in streams:
            x = h.final_norm()(stream)
            logits = h.lm.lm_head(x).float()
            if cap:
                logits = cap * torch.tanh(logits / cap)
            s = torch.logsumexp(logits, dim=-1)
            top, at = logits.topk(k, dim=-1)
            ids.append(at)
            lps.append(top - s[..., None])
            lses.append(s)
            if keep:
                normed.append(x)
        top_ids = nnsight.save(torch.stack(ids))
        top_lp = nnsight.save(torch.stack(lps))
        lse = nnsight.save(torch.stack(lses))
        kept = nnsight.save(torch.stack(normed) if keep else torch.zeros(0))
    unembed = None
    if keep:
        module = h.lm._module

        def unembed(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                out = module.lm_head(x).float()
            return cast(torch.Tensor, cap * torch.tanh(out / cap) if cap else out)

    return TracedLogitLens(
        top_ids.detach().cpu().numpy().astype(np.int64), top_lp.detach().cpu().numpy().astype(np.float32),
        [f"before L{i}" for i in range(h.n_layers)] + ["final"], [h.to_str_tokens(row) for row in t], h.name,
        kept.detach(), lse.detach(), cast(CircuitModel, None), t, unembed, h.d_vocab,
    )  # fmt: skip
