"""The local replacement model of one prompt: transcoders in place of MLPs, attention and norms frozen.

One run of the model records what the replacement model freezes (attention
patterns, every norm's per-token scale) and what it is made of (each
transcoder's input and active features, and the error node: the MLP's output
minus the transcoder's prediction). With those frozen, everything between the
nodes (features, errors, token embeddings) and the targets (feature
pre-activations, centred logits) is linear, and :class:`LinearReplacement`
records that linear map once, so that a backward pass from a target gives its
direct effect from every node at once (circuit-tracer's definition; Ameisen et
al., 2025). The run itself is the model's forward pass; the linear map is
checked against the model's forward pass with freezing hooks in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from circuitwidgets.graphs.transcoders import TranscoderLike, transcoder_input
from circuitwidgets.model import ActivationCache, CircuitModel

#: What the base run keeps.
FROZEN_NAMES = ("pattern", "scale", "scale_mlp", "scale_final", "resid_mid", "mlp_out")


@dataclass
class FrozenRun:
    """One prompt's run: what the replacement model freezes, and its nodes.

    ``active`` ``[n, 3]`` (layer, pos, feature) sorted, with ``values`` ``[n]``
    their activations; ``errors`` ``[n_layers, pos, d_model]``; ``skip_free``
    ``[n_layers, pos, d_model]``: each MLP output minus its skip path (what the
    replacement model holds constant: the decoded features, the decoder bias and
    the error). The first position's features and error are not nodes
    (circuit-tracer 0.5 zeroes them: that position is the attention sink, usually
    BOS); their writes stay as constants.
    """

    tokens: torch.Tensor
    last_logits: torch.Tensor
    cache: ActivationCache
    inputs: list[torch.Tensor]
    active: torch.Tensor
    values: torch.Tensor
    errors: torch.Tensor
    skip_free: torch.Tensor

    @property
    def n_pos(self) -> int:
        """Positions of the prompt."""
        return int(self.tokens.shape[1])


def _skip(tc: TranscoderLike, x: torch.Tensor) -> torch.Tensor:
    """The transcoder's linear skip path ``x W_skip`` (zeros without one)."""
    if tc.W_skip is None:
        return torch.zeros(*x.shape[:-1], tc.W_dec.shape[-1], dtype=x.dtype, device=x.device)
    return x @ tc.W_skip.to(x.dtype)


def run_frozen(model: CircuitModel, transcoders: Sequence[TranscoderLike], tokens: torch.Tensor) -> FrozenRun:
    """Run ``tokens`` ``[1, pos]`` and collect the replacement model's frozen values and nodes."""
    logits, cache = model.run_with_cache(tokens, names=list(FROZEN_NAMES))
    cfg = model.cfg
    inputs, active, values, errors, skip_free = [], [], [], [], []
    with torch.no_grad():
        for layer, tc in enumerate(transcoders):
            x = transcoder_input(cfg, tc.in_site, cache["resid_mid", layer], cache["scale_mlp", layer])[0]
            x = x.to(tc.W_enc.dtype)
            f = tc.encode(x)
            recon = f @ tc.W_dec + tc.b_dec + _skip(tc, x)
            mlp_out = cache["mlp_out", layer][0].to(recon.dtype)
            error = mlp_out - recon
            f = f.clone()
            f[0] = 0
            error[0] = 0
            where = torch.nonzero(f)
            active.append(torch.cat([torch.full_like(where[:, :1], layer), where], dim=1))
            values.append(f[where[:, 0], where[:, 1]])
            inputs.append(x)
            errors.append(error)
            skip_free.append(mlp_out - _skip(tc, x))
    return FrozenRun(
        tokens, logits[0, -1], cache, inputs, torch.cat(active), torch.cat(values), torch.stack(errors),
        torch.stack(skip_free),
    )  # fmt: skip


def final_input(model: CircuitModel, resid_final: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The unembedding's input (the final norm with its scale ``scale`` frozen; its weight is folded into ``W_U``)."""
    if model.cfg.normalization == "ln_pre":
        return (resid_final - resid_final.mean(-1, keepdim=True)) / scale
    if model.cfg.normalization == "none":
        return resid_final
    return resid_final / scale


def normalised(model: CircuitModel, resid: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A sublayer's input with its norm's per-token ``scale`` frozen (LayerNorm's centring kept: it is linear)."""
    kind = model.cfg.normalization
    if kind == "ln_pre":
        return (resid - resid.mean(-1, keepdim=True)) / scale
    if kind == "rms_pre":
        return resid / scale
    return resid


class LinearReplacement:
    """The linear part of the replacement model, recorded once on ``batch`` copies for batched backward passes.

    Between the nodes and the targets the replacement model is affine; its
    constants (position embeddings, biases, decoder biases, the first position's
    MLP output) do not change any gradient, so the pass runs the linear part
    only, on zeros: a leaf where the nodes write (the token embeddings, each
    MLP's output), then layer by layer the residual stream, each attention
    output as its value path through the run's frozen pattern
    (``Σ_h P_h (x W_V,h) W_O,h``, with ``x`` the layer's input under its frozen
    norm scale; one pattern for all copies, so no copy holds a ``pos²`` tensor),
    and each MLP's output as its transcoder's skip path. It keeps each
    transcoder's input and the unembedding's input at the last position.
    :meth:`backward` then gives, for one target per copy, the gradient at every
    node site. The architectures it covers are those
    :func:`~circuitwidgets.graphs.transcoders.check_architecture` admits (pre-norm,
    attention then MLP); ``tests/test_graphs_attribution.py`` checks the result
    against the model's own forward pass with hooks.
    """

    def __init__(self, model: CircuitModel, transcoders: Sequence[TranscoderLike], run: FrozenRun, batch: int) -> None:
        cfg = model.cfg
        dtype, device = model.dtype, model.device
        self.batch = batch
        shape = (batch, run.n_pos, cfg.d_model)
        self.embed_delta = torch.zeros(shape, dtype=dtype, device=device, requires_grad=True)
        self.deltas = [torch.zeros(shape, dtype=dtype, device=device, requires_grad=True) for _ in transcoders]
        self.reads: list[torch.Tensor] = []
        W_V, W_O = model.weight("W_V"), model.weight("W_O")
        assert W_V is not None and W_O is not None
        with torch.enable_grad():
            resid = self.embed_delta
            for layer, tc in enumerate(transcoders):
                x = normalised(model, resid, run.cache["scale", layer].detach().to(dtype))
                v = torch.einsum("bpd,gde->bpge", x, W_V[layer].detach().to(dtype))
                if cfg.group_size > 1:
                    v = v.repeat_interleave(cfg.group_size, dim=2)
                z = torch.einsum("hqk,bkhe->bqhe", run.cache["pattern", layer][0].detach().to(dtype), v)
                resid = resid + z.flatten(-2) @ W_O[layer].detach().reshape(-1, cfg.d_model).to(dtype)
                read = transcoder_input(cfg, tc.in_site, resid, run.cache["scale_mlp", layer].detach().to(dtype))
                self.reads.append(read.to(tc.W_enc.dtype))
                with torch.no_grad():
                    W_skip = tc.W_skip.detach() if tc.W_skip is not None else None
                skip = (self.reads[-1] @ W_skip).to(dtype) if W_skip is not None else 0
                resid = resid + skip + self.deltas[layer]
            self.final = final_input(model, resid[:, -1], run.cache["scale_final"][:, -1].detach().to(dtype))

    def backward(
        self, layer_cotangents: list[torch.Tensor], final_cotangent: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Gradients ``([B, pos, d_model] at the embeddings, per layer [B, pos, d_model] at the MLP outputs)``.

        ``layer_cotangents[l]`` ``[B, pos, d_in]`` weights layer ``l``'s transcoder
        input, ``final_cotangent`` ``[B, d_model]`` the unembedding's input at the
        last position; row ``b`` of every output is the gradient of target ``b``
        (``B`` at most the pass's ``batch``; the other copies get zero cotangents).
        """
        n = final_cotangent.shape[0]
        pad = self.batch - n

        def padded(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([t, t.new_zeros(pad, *t.shape[1:])]) if pad else t

        grads = torch.autograd.grad(
            [*self.reads, self.final], [self.embed_delta, *self.deltas],
            [padded(c) for c in [*layer_cotangents, final_cotangent]],
            retain_graph=True, allow_unused=True, materialize_grads=True,
        )  # fmt: skip
        return grads[0][:n], [g[:n] for g in grads[1:]]
