"""One training step's loss for a TopK or BatchTopK dictionary, computed sparsely.

The encoder's pre-activations are computed densely without gradients only to
choose the active ``(row, feature)`` pairs; the chosen values are then recomputed
with gradients from the gathered encoder columns, and the output is the sum of
the gathered decoder rows. Gradients therefore touch only active features: the
cost is one dense ``[batch, d_in] × [d_in, d_sae]`` product plus ``O(batch · k · d)``.
The gradients equal the dense formulation's (a feature that is not selected has
activation 0 and zero gradient through the TopK either way); tests check this.

Losses are normalised by the batch's target variance (so ``loss`` is the
fraction of variance unexplained, comparable across sites):

- reconstruction: ``Σ‖y − ŷ‖² / Σ‖y − ȳ‖²``;
- dead features (the auxiliary loss of Gao et al., "Scaling and evaluating sparse
  autoencoders"): the residual ``e = y − ŷ`` (no gradient) is predicted by the
  ``k_aux`` largest pre-activations among dead features, taken **before** the ReLU
  (after it, a dead feature's value is 0 and nothing flows back), decoded without
  ``b_dec``; its error normalised by the residual's own variance (as their code does),
  times ``aux_coefficient``, is added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from circuitwidgets.features.dictionary import Dictionary


class TrainingDictionary(nn.Module):
    """A dictionary's parameters laid out for sparse training: the encoder as rows ``W_enc_t [d_sae, d_in]``.

    Gathering and scattering whole rows is what makes the sparse step cheap (columns of
    ``W_enc [d_in, d_sae]`` are strided). :meth:`export` gives the :class:`Dictionary`.
    """

    def __init__(self, d: Dictionary) -> None:
        super().__init__()
        self.template = d
        self.W_enc_t = nn.Parameter(d.W_enc.detach().t().contiguous())
        self.b_enc = nn.Parameter(d.b_enc.detach().clone())
        self.W_dec = nn.Parameter(d.W_dec.detach().clone())
        self.b_dec = nn.Parameter(d.b_dec.detach().clone())
        self.W_skip = nn.Parameter(d.W_skip.detach().clone()) if d.W_skip is not None else None

    def export(self, threshold: float | None = None) -> Dictionary:
        """The :class:`Dictionary` with these weights (a BatchTopK one with ``threshold`` for every feature)."""
        d = self.template
        t = None if threshold is None else torch.full_like(self.b_enc.detach(), threshold)
        return Dictionary(
            d.kind, d.activation, W_enc=self.W_enc_t.detach().t().contiguous(), b_enc=self.b_enc.detach().clone(),
            W_dec=self.W_dec.detach().clone(), b_dec=self.b_dec.detach().clone(),
            W_skip=None if self.W_skip is None else self.W_skip.detach().clone(), layer=d.layer, in_site=d.in_site,
            out_site=d.out_site, k=d.k, threshold=t, model_name=d.model_name,
        )  # fmt: skip


class _Selected(torch.autograd.Function):
    """Pre-activations of chosen ``(row, feature)`` pairs, already computed; backward scatters into the encoder rows."""

    @staticmethod
    def forward(
        ctx: Any, values: torch.Tensor, w_enc_t: torch.Tensor, b_enc: torch.Tensor, x: torch.Tensor,
        rows: torch.Tensor, feats: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        ctx.save_for_backward(x, rows, feats)
        ctx.d_sae = w_enc_t.shape[0]
        return values

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor, torch.Tensor, None, None, None]:
        x, rows, feats = ctx.saved_tensors
        order = torch.argsort(feats)
        counts = torch.bincount(feats, minlength=ctx.d_sae)
        offsets = torch.cumsum(counts, 0) - counts
        g_w = F.embedding_bag(rows[order], x, offsets, mode="sum", per_sample_weights=grad[order])
        g_b = torch.zeros(ctx.d_sae, dtype=grad.dtype, device=grad.device).index_add_(0, feats, grad)
        return None, g_w, g_b, None, None, None


def _pairs(pre: torch.Tensor, activation: str, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rows, feats, values)`` of the active pairs, grouped by row in row order."""
    batch, d_sae = pre.shape
    if activation == "topk":
        top = torch.topk(pre, k, dim=-1)
        rows = torch.arange(batch, device=pre.device).repeat_interleave(k)
        return rows, top.indices.reshape(-1), top.values.reshape(-1)
    flat = pre.relu().reshape(-1)
    idx = torch.sort(torch.topk(flat, k * batch).indices).values
    return idx // d_sae, idx % d_sae, flat[idx]


def _decode(w: torch.Tensor, rows: torch.Tensor, feats: torch.Tensor, values: torch.Tensor, batch: int) -> torch.Tensor:
    """``Σ values · w[feats]`` per row ``[batch, d_out]`` (pairs grouped by row)."""
    counts = torch.bincount(rows, minlength=batch)
    offsets = torch.cumsum(counts, 0) - counts
    return F.embedding_bag(feats, w, offsets, mode="sum", per_sample_weights=values)


@dataclass
class StepResult:
    """What one step measured (floats, for the log) and which features fired."""

    loss: torch.Tensor
    fvu: float
    aux: float
    l0: float
    fired: torch.Tensor  # [d_sae] bool
    min_active: float  # the smallest selected activation > 0 (BatchTopK's inference threshold is its running mean)


def sparse_step(
    d: TrainingDictionary, x: torch.Tensor, y: torch.Tensor, dead: torch.Tensor | None, k_aux: int,
    aux_coefficient: float, aux_rows: int | None = None,
) -> StepResult:  # fmt: skip
    """Loss (with its graph) and measurements of ``d`` on inputs ``x`` and targets ``y`` ``[batch, ·]``.

    The auxiliary loss uses the batch's first ``aux_rows`` rows (default all; rows are shuffled, so a few
    are a random sample).
    """
    spec = d.template
    assert spec.k is not None
    batch = x.shape[0]
    with torch.no_grad():
        pre = x @ d.W_enc_t.t() + d.b_enc
    rows, feats, chosen = _pairs(pre, spec.activation, spec.k)
    values = _Selected.apply(chosen, d.W_enc_t, d.b_enc, x, rows, feats).relu()  # type: ignore[no-untyped-call]
    recon = _decode(d.W_dec, rows, feats, values, batch) + d.b_dec
    if d.W_skip is not None:
        recon = recon + x @ d.W_skip
    variance = (y - y.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)
    fvu = (recon - y).pow(2).sum(-1).mean() / variance
    loss = fvu
    aux = torch.zeros(())
    if dead is not None and bool(dead.any()) and aux_coefficient > 0:
        n = batch if aux_rows is None else min(aux_rows, batch)
        kk = min(k_aux, int(dead.sum()))
        top = torch.topk(pre[:n].masked_fill(~dead, float("-inf")), kk, dim=-1)
        arow = torch.arange(n, device=x.device).repeat_interleave(kk)
        afeat = top.indices.reshape(-1)
        guess_values = _Selected.apply(top.values.reshape(-1), d.W_enc_t, d.b_enc, x, arow, afeat)  # type: ignore[no-untyped-call]
        residual = (y[:n] - recon[:n]).detach()
        scale = (residual - residual.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)
        aux = (_decode(d.W_dec, arow, afeat, guess_values, n) - residual).pow(2).sum(-1).mean() / scale
        loss = loss + aux_coefficient * aux
    active = values.detach() > 0
    fired = torch.zeros(spec.d_sae, dtype=torch.bool, device=x.device)
    fired[feats[active]] = True
    positive = values.detach()[active]
    return StepResult(
        loss=loss,
        fvu=float(fvu.detach()),
        aux=float(aux.detach()),
        l0=float(active.sum()) / batch,
        fired=fired,
        min_active=float(positive.min()) if positive.numel() else 0.0,
    )


def project_decoder_grad(d: TrainingDictionary) -> None:
    """Remove from each decoder row's gradient its component along the row (rows stay unit-norm to first order)."""
    g = d.W_dec.grad
    if g is not None:
        w = d.W_dec.detach()
        g -= (g * w).sum(-1, keepdim=True) * w


@torch.no_grad()
def normalise_decoder(d: TrainingDictionary) -> None:
    """Scale every decoder row to unit norm (so a feature's activation carries its size)."""
    d.W_dec.div_(d.W_dec.norm(dim=-1, keepdim=True).clamp_min(1e-12))
