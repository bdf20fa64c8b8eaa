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
- one layer's gradient at a time, handed to a callback (the caller contracts it
  with the node writes) before the next layer's is computed.

Everything is a sum of the same terms autograd would add; the tests check the
edges against finite differences of the model's own frozen forward pass and
against circuit-tracer 0.5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from circuitwidgets.graphs.replacement import FrozenRun, final_input, normalised
from circuitwidgets.graphs.transcoders import TranscoderLike, transcoder_input
from circuitwidgets.model import CircuitModel

#: ``visit(layer, grad)``: the gradient ``[B, n, d_model]`` at layer ``layer``'s MLP output (``-1``: the embeddings).
Visit = Callable[[int, torch.Tensor], None]


class TransposedReplacement:
    """The transposed linear map of one prompt's replacement model (module docstring); weights in the model's dtype."""

    def __init__(self, model: CircuitModel, transcoders: Sequence[TranscoderLike], run: FrozenRun) -> None:
        cfg = model.cfg
        dtype = model.dtype
        self.model, self.cfg, self.n_pos = model, cfg, run.n_pos
        W_V, W_O = model.weight("W_V"), model.weight("W_O")
        assert W_V is not None and W_O is not None
        with torch.no_grad():  # frozen copies: no autograd through the model's or a transcoder module's parameters
            self.W_V = W_V.detach().to(dtype)  # [L, groups, d, dh]
            self.W_O = W_O.detach().to(dtype)  # [L, H, dh, d]
            # per head (a key/value group's matrix repeated for each of its heads), for the single-position hop
            self.W_V_heads = self.W_V.repeat_interleave(cfg.group_size, dim=1) if cfg.group_size > 1 else self.W_V
            L = cfg.n_layers
            self.patterns = [run.cache["pattern", layer][0].detach().to(dtype) for layer in range(L)]  # [H, P, P]
            self.scale = [run.cache["scale", layer][0].detach().to(dtype) for layer in range(L)]  # [P, 1]
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
            visit(top, _at(g_out, pos, n))
        cot = read if read is not None else torch.zeros_like(g_out)
        W_skip = self.W_skip[top]
        if W_skip is not None:
            cot = cot + g_out @ W_skip.T
        g_mid = g_out + transcoder_input(self.cfg, self.sites[top], cot, self.scale_mlp[top][pos])
        grad = self._attention_at(top, g_mid, pos, n)
        for layer in range(top - 1, -1, -1):
            visit(layer, grad)
            W_skip = self.W_skip[layer]
            if W_skip is not None:
                grad = grad + transcoder_input(self.cfg, self.sites[layer], grad @ W_skip.T, self.scale_mlp[layer][:n])
            grad = grad + self._attention(layer, grad)
        visit(-1, grad)

    def _attention_at(self, layer: int, g_mid: torch.Tensor, pos: torch.Tensor, n: int) -> torch.Tensor:
        """``[B, n, d]``: the gradient before attention ``layer`` of cotangents ``g_mid`` ``[B, d]`` after it at one
        position each: ``Σ_h P_h[pos, k] · (g W_O,hᵀ W_V,hᵀ)`` through the norm, plus ``g_mid`` itself at ``pos``."""
        gz = torch.einsum("bd,hed->bhe", g_mid, self.W_O[layer])
        per_head = torch.einsum("bhe,hde->bhd", gz, self.W_V_heads[layer])  # [B, H, d]
        rows = self.patterns[layer][:, pos, :n]  # [H, B, n]
        grad = normalised(self.model, torch.einsum("hbk,bhd->bkd", rows, per_head), self.scale[layer][:n])
        grad[torch.arange(len(pos), device=pos.device), pos] += g_mid
        return grad

    def _attention(self, layer: int, grad: torch.Tensor) -> torch.Tensor:
        """``[B, n, d]``: the transposed value path of attention ``layer`` (through its norm) applied to ``grad``."""
        cfg = self.cfg
        B, n, d = grad.shape
        H, dh = cfg.n_heads, cfg.d_head
        gz = (grad.reshape(B * n, d) @ self.W_O[layer].reshape(H * dh, d).T).view(B, n, H, dh)
        # P_hᵀ applied per head: one (n × n) by (n × B·dh) product per head
        by_head = gz.permute(2, 1, 0, 3).reshape(H, n, B * dh)
        gv = torch.bmm(self.patterns[layer][:, :n, :n].transpose(1, 2), by_head).view(H, n, B, dh)
        if cfg.group_size > 1:  # heads sharing a key/value group add up
            gv = gv.view(H // cfg.group_size, cfg.group_size, n, B, dh).sum(1)
        gx = torch.einsum("gkbe,gde->bkd", gv, self.W_V[layer])
        return normalised(self.model, gx, self.scale[layer][:n])


def _at(values: torch.Tensor, pos: torch.Tensor, n: int) -> torch.Tensor:
    """``[B, n, d]``: zeros with ``values[b]`` at position ``pos[b]``."""
    out = values.new_zeros(values.shape[0], n, values.shape[1])
    out[torch.arange(len(pos), device=pos.device), pos] = values
    return out
