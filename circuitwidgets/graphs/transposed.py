"""The local replacement model's linear map, transposed by hand: a batch of targets' gradients at every node site.

With the attention patterns and norm scales frozen the replacement model is
linear from its nodes' writes to its targets (:mod:`circuitwidgets.graphs.replacement`),
so a target's gradient at every node site is its cotangent pushed back through
the transposed layers; each of them is self-adjoint or a product with a frozen
matrix, written out here rather than recorded for autograd so that each batch
of targets runs only what its targets depend on:

- the layers below the targets' own (a layer-``l`` feature reads the residual
  stream before MLP ``l``: nothing above it matters);
- the positions up to the batch's last target (attention is causal);
- the targets' own attention layer as pattern rows times per-head vectors: the
  cotangent sits at one position there, so the layer costs ``B · n · H · d``
  instead of the ``B · n · d²`` of a full transposed pass;
- the attention input's norm (frozen) folded into ``W_V`` (LayerNorm's centring)
  and the patterns' key columns (1/scale), so no pass is spent on it;
- one layer's gradient at a time, handed to a callback (the caller contracts it
  with the node writes) before the next layer's is computed; below a layer-0
  target only the embeddings' dot products are needed, taken from the per-head
  vectors without writing the ``[B, n, d]`` gradient out (:class:`Gradient`).

Everything is a sum of the same terms autograd would add; the tests check the
edges against finite differences of the model's own frozen forward pass and
against circuit-tracer 0.5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from circuitwidgets.graphs.replacement import POST_ATTN_SCALE, FrozenRun, final_input
from circuitwidgets.graphs.transcoders import TranscoderLike, transcoder_input
from circuitwidgets.model import CircuitModel


@dataclass
class Gradient:
    """A batch's gradient ``[B, n, d_model]`` at one site: ``dense``, or (the layer below a target's own attention
    when nothing more is pushed through it) ``Σ_h rows[h, b, k] · per_head[b, h]`` plus ``at[b]`` at ``pos[b]``."""

    dense: torch.Tensor | None = None
    rows: torch.Tensor | None = None  # [H, B, n]
    per_head: torch.Tensor | None = None  # [B, H, d]
    at: torch.Tensor | None = None  # [B, d]
    pos: torch.Tensor | None = None  # [B]

    @property
    def n(self) -> int:
        """Positions covered (the batch's last target's position + 1)."""
        if self.dense is not None:
            return int(self.dense.shape[1])
        assert self.rows is not None
        return int(self.rows.shape[-1])

    def full(self) -> torch.Tensor:
        """The gradient ``[B, n, d]`` written out."""
        if self.dense is not None:
            return self.dense
        assert self.rows is not None and self.per_head is not None and self.at is not None and self.pos is not None
        grad = torch.einsum("hbk,bhd->bkd", self.rows, self.per_head)
        grad[torch.arange(len(self.pos), device=self.pos.device), self.pos] += self.at
        return grad

    def dots(self, values: torch.Tensor) -> torch.Tensor:
        """``[B, n]``: ``grad[b, k] · values[k]`` for ``values`` ``[≥ n, d]`` (one per position); unwritten, a single
        ``(B·H × d) @ (d × n)`` product instead of a pass over ``[B, n, d]``."""
        values = values[: self.n]
        if self.dense is not None:
            return torch.einsum("bpd,pd->bp", self.dense, values)
        assert self.rows is not None and self.per_head is not None and self.at is not None and self.pos is not None
        out = torch.einsum("hbk,bhk->bk", self.rows, self.per_head @ values.T)
        out[torch.arange(len(self.pos), device=self.pos.device), self.pos] += (self.at * values[self.pos]).sum(-1)
        return out


#: ``visit(layer, grad)``: the gradient at layer ``layer``'s MLP output (``-1``: the embeddings).
Visit = Callable[[int, Gradient], None]


class TransposedReplacement:
    """The transposed linear map of one prompt's replacement model (module docstring); weights in the model's dtype.

    It takes the run's attention patterns as its own (scaled in place): ``run.cache``'s patterns are not the
    model's after this.
    """

    def __init__(self, model: CircuitModel, transcoders: Sequence[TranscoderLike], run: FrozenRun) -> None:
        cfg = model.cfg
        dtype = model.dtype
        self.model, self.cfg, self.n_pos = model, cfg, run.n_pos
        # W_O with the attention output norm's multiplier folded in (model.W_O; the stored one without a norm)
        W_V, W_O = model.weight("W_V"), model.W_O
        assert W_V is not None
        with torch.no_grad():  # frozen copies: no autograd through the model's or a transcoder module's parameters
            # The attention input's norm, transposed, is folded into the weights: LayerNorm's centring into W_V
            # (C W_V, C symmetric), the frozen per-position 1/scale into each pattern's key columns, so that no
            # pass over a [B, n, d] gradient is spent on it.
            W_V = W_V.detach().to(dtype)
            self.W_V = W_V - W_V.mean(dim=-2, keepdim=True) if cfg.normalization == "ln_pre" else W_V  # [L, G, d, dh]
            self.W_O = W_O.detach().to(dtype)  # [L, H, dh, d]
            # per head (a key/value group's matrix repeated for each of its heads), for the single-position hop
            self.W_V_heads = self.W_V.repeat_interleave(cfg.group_size, dim=1) if cfg.group_size > 1 else self.W_V
            L = cfg.n_layers
            self.patterns = [_scaled_pattern(model, run, layer) for layer in range(L)]  # [H, P, P]
            self.scale_mlp = [run.cache["scale_mlp", layer][0].detach().to(dtype) for layer in range(L)]
            self.scale_final = run.cache["scale_final"][0].detach().to(dtype)
            self.W_enc = [tc.W_enc.detach().to(dtype) for tc in transcoders]
            self.W_skip = [None if tc.W_skip is None else tc.W_skip.detach().to(dtype) for tc in transcoders]
        self.sites = [tc.in_site for tc in transcoders]

    def features(self, layer: int, pos: torch.Tensor, feature: torch.Tensor, visit: Visit) -> None:
        """Gradients of the features ``feature`` ``[B]`` of transcoder ``layer`` at positions ``pos`` ``[B]``
        (each one's encoder column at its position), layer by layer down to the embeddings."""
        read = self.W_enc[layer][:, feature].T
        self._from(layer, pos, None, read, visit)

    def logits(self, vectors: torch.Tensor, visit: Visit) -> None:
        """Gradients of the targets ``vectors · unembedding input`` at the last position (``vectors`` ``[B, d]``)."""
        last = self.n_pos - 1
        pos = torch.full((vectors.shape[0],), last, dtype=torch.long, device=vectors.device)
        out = final_input(self.model, vectors.to(self.model.dtype), self.scale_final[last])
        self._from(self.cfg.n_layers - 1, pos, out, None, visit)

    def _from(
        self, top: int, pos: torch.Tensor, out: torch.Tensor | None, read: torch.Tensor | None, visit: Visit
    ) -> None:
        """Push cotangents at one position per target down from layer ``top``: ``out`` ``[B, d]`` at its MLP's output
        (the residual stream after it), ``read`` ``[B, d]`` at its transcoder's input."""
        n = int(pos.max()) + 1
        B, d = len(pos), self.cfg.d_model
        g_out = out if out is not None else torch.zeros(B, d, dtype=self.model.dtype, device=pos.device)
        if out is not None:
            visit(top, Gradient(_at(g_out, pos, n)))
        cot = read if read is not None else torch.zeros_like(g_out)
        W_skip = self.W_skip[top]
        if W_skip is not None:
            cot = cot + g_out @ W_skip.T
        g_mid = g_out + transcoder_input(self.cfg, self.sites[top], cot, self.scale_mlp[top][pos])
        below = self._attention_at(top, g_mid, pos, n)
        if top == 0:  # only the embeddings' dot products are needed: no [B, n, d] tensor
            visit(-1, below)
            return
        grad = below.full()
        for layer in range(top - 1, -1, -1):
            visit(layer, Gradient(grad))
            W_skip = self.W_skip[layer]
            if W_skip is not None:
                grad = grad + transcoder_input(self.cfg, self.sites[layer], grad @ W_skip.T, self.scale_mlp[layer][:n])
            grad = grad + self._attention(layer, grad)
        visit(-1, Gradient(grad))

    def _attention_at(self, layer: int, g_mid: torch.Tensor, pos: torch.Tensor, n: int) -> Gradient:
        """The gradient before attention ``layer`` of cotangents ``g_mid`` ``[B, d]`` after it at one position each:
        ``Σ_h P_h[pos, k] · (g W_O,hᵀ W_V,hᵀ)`` through the norm (folded into the pattern and ``W_V``), plus
        ``g_mid`` itself at ``pos``; kept as those terms."""
        gz = torch.einsum("bd,hed->bhe", g_mid, self.W_O[layer])
        per_head = torch.einsum("bhe,hde->bhd", gz, self.W_V_heads[layer])  # [B, H, d]
        return Gradient(None, self.patterns[layer][:, pos, :n], per_head, g_mid, pos)

    def _attention(self, layer: int, grad: torch.Tensor) -> torch.Tensor:
        """``[B, n, d]``: the transposed value path of attention ``layer`` (through its norm, folded into the pattern
        and ``W_V``) applied to ``grad``."""
        cfg = self.cfg
        B, n, d = grad.shape
        H, dh = cfg.n_heads, cfg.d_head
        gz = (grad.reshape(B * n, d) @ self.W_O[layer].reshape(H * dh, d).T).view(B, n, H, dh)
        # P_hᵀ applied per head: one (n × n) by (n × B·dh) product per head
        by_head = gz.permute(2, 1, 0, 3).reshape(H, n, B * dh)
        gv = torch.bmm(self.patterns[layer][:, :n, :n].transpose(1, 2), by_head).view(H, n, B, dh)
        if cfg.group_size > 1:  # heads sharing a key/value group add up
            gv = gv.view(H // cfg.group_size, cfg.group_size, n, B, dh).sum(1)
        return torch.einsum("gkbe,gde->bkd", gv, self.W_V[layer])


def _scaled_pattern(model: CircuitModel, run: FrozenRun, layer: int) -> torch.Tensor:
    """Attention ``layer``'s pattern ``[H, P, P]`` with each key column divided by the input norm's frozen scale
    there and, with an output norm (Gemma 2), each query row by that norm's frozen scale there: a row ``q`` of the
    output is ``Σ_k P[q, k] v_k W_O / s_q`` (its multiplier is in ``W_O``; ``b_O / s_q`` is a constant).

    Scaled in place when the run's pattern is already in the model's dtype: the run's patterns are this map's
    (the caller drops the run's cache), and on a long prompt a second copy of them all would be the largest
    thing held."""
    pattern = run.cache["pattern", layer][0].detach().to(model.dtype)
    if model.cfg.normalization in ("ln_pre", "rms_pre"):
        pattern.div_(run.cache["scale", layer][0, :, 0].detach().to(model.dtype))
    post = run.cache.get((POST_ATTN_SCALE, layer))
    if post is not None:
        pattern.div_(post[0].detach().to(model.dtype))  # [P, 1]: rows
    return pattern


def _at(values: torch.Tensor, pos: torch.Tensor, n: int) -> torch.Tensor:
    """``[B, n, d]``: zeros with ``values[b]`` at position ``pos[b]``."""
    out = values.new_zeros(values.shape[0], n, values.shape[1])
    out[torch.arange(len(pos), device=pos.device), pos] = values
    return out
