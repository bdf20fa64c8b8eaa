"""The local replacement model of one prompt: transcoders in place of MLPs, attention and norms frozen.

One run of the model records what the replacement model freezes (attention
patterns, every norm's per-token scale) and what it is made of (each
transcoder's input and active features, and the error node: the MLP's output
minus the transcoder's prediction). With those frozen, everything between the
nodes (features, errors, token embeddings) and the targets (feature
pre-activations, centred logits) is linear, and :class:`LinearReplacement`
runs it as the model's own forward pass with hooks, so that a backward pass
from a target gives its direct effect from every node at once (circuit-tracer's
definition; Ameisen et al., 2025).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from circuitwidgets.graphs.transcoders import TranscoderLike, transcoder_input
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Hook, Recorder

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


def frozen_hooks(model: CircuitModel, run: FrozenRun, last_only: bool = False) -> dict[tuple[str, int | None], Hook]:
    """Hooks replaying the run's attention patterns and norm scales (the parts of the replacement model held fixed).

    ``last_only``: the pass computes the logits of the last position only (its final norm's scale is that one's).
    """
    hooks: dict[tuple[str, int | None], Hook] = {}
    keys: list[tuple[str, int | None]] = [("scale_final", None)]
    for layer in range(model.cfg.n_layers):
        keys += [("scale", layer), ("scale_mlp", layer), ("pattern", layer)]
    for key in keys:
        frozen = run.cache[key[0]] if key[1] is None else run.cache[key[0], key[1]]
        if key == ("scale_final", None) and last_only:
            frozen = frozen[:, -1:]

        def replay(value: torch.Tensor, frozen: torch.Tensor = frozen) -> torch.Tensor:
            return frozen.detach().to(value.dtype)

        hooks[key] = replay
    return hooks


def _replay(frozen: torch.Tensor) -> Hook:
    """A hook giving ``frozen`` (one copy's norm scales) for every copy of the pass."""

    def replay(value: torch.Tensor) -> torch.Tensor:
        return frozen.to(value.dtype).expand_as(value)

    return replay


def normalised(model: CircuitModel, resid: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A sublayer's input with its norm's per-token ``scale`` frozen (LayerNorm's centring kept: it is linear)."""
    kind = model.cfg.normalization
    if kind == "ln_pre":
        return (resid - resid.mean(-1, keepdim=True)) / scale
    if kind == "rms_pre":
        return resid / scale
    return resid


class LinearReplacement:
    """The replacement model's linear map from nodes to targets, as one recorded forward pass of ``batch`` copies.

    The model's forward pass on ``batch`` copies of the prompt, with hooks: a zero
    leaf added at the token embeddings and at each MLP's output (where feature and
    error nodes write), each MLP's output replaced by its transcoder's skip path
    plus the run's constant remainder, norm scales replayed, and each attention
    output replaced by its value path through the run's frozen pattern
    (``Σ_h P_h (x W_V,h + b_V,h) W_O,h + b_O``, computed from the layer's input
    with one pattern for all copies, so no copy holds a ``pos²`` tensor). Each
    transcoder's input and the unembedding's input at the last position are kept.
    :meth:`backward` then gives, for one target per copy (cotangents at those
    inputs), the gradient at every node site: a node's direct effect is its
    vector dotted with the gradient there. One pass serves every batch of targets.
    """

    def __init__(self, model: CircuitModel, transcoders: Sequence[TranscoderLike], run: FrozenRun, batch: int) -> None:
        cfg = model.cfg
        dtype, device = model.dtype, model.device
        self.batch = batch
        shape = (batch, run.n_pos, cfg.d_model)
        self.embed_delta = torch.zeros(shape, dtype=dtype, device=device, requires_grad=True)
        self.deltas = [torch.zeros(shape, dtype=dtype, device=device, requires_grad=True) for _ in transcoders]
        self.reads: list[torch.Tensor] = []
        self._attn_out: dict[int, torch.Tensor] = {}
        hooks: dict[tuple[str, int | None], Hook] = {}
        for key in [
            ("scale_final", None),
            *[(n, layer) for layer in range(cfg.n_layers) for n in ("scale", "scale_mlp")],
        ]:
            frozen = run.cache[key[0]] if key[1] is None else run.cache[key[0], key[1]]
            if key[0] == "scale_final":
                frozen = frozen[:, -1:]
            hooks[key] = _replay(frozen.detach())
        hooks[("embed", None)] = lambda v: v + self.embed_delta
        for layer, tc in enumerate(transcoders):
            hooks[("resid_pre", layer)] = self._value_path(model, run, layer)
            hooks[("attn_out", layer)] = self._attention_output(layer)
            hooks[("resid_mid", layer)] = self._reader(model, tc, run.cache["scale_mlp", layer])
            hooks[("mlp_out", layer)] = self._writer(tc, run.skip_free[layer], layer)
        finals: list[torch.Tensor] = []
        hooks[("resid_final", None)] = lambda v: finals.append(v) or None  # type: ignore[func-returns-value]
        tokens = run.tokens.expand(batch, -1)
        with torch.enable_grad():
            model.run_from(
                tokens, 0, None, Recorder({}, set(), hooks), positions=[run.n_pos - 1], columns=run.tokens[0, :1]
            )
            self.final = final_input(model, finals[0][:, -1], run.cache["scale_final"][:, -1].detach())

    def _value_path(self, model: CircuitModel, run: FrozenRun, layer: int) -> Hook:
        cfg = model.cfg
        pattern = run.cache["pattern", layer][0].detach()  # [heads, dest, src]
        scale = run.cache["scale", layer].detach()
        W_V, W_O = model.weight("W_V"), model.weight("W_O")
        b_V, b_O = model.weight("b_V"), model.weight("b_O")
        assert W_V is not None and W_O is not None

        def compute(resid: torch.Tensor) -> None:
            x = normalised(model, resid, scale.to(resid.dtype))
            v = torch.einsum("bpd,gde->bpge", x, W_V[layer].to(x.dtype))
            if b_V is not None:
                v = v + b_V[layer].to(x.dtype)
            if cfg.group_size > 1:
                v = v.repeat_interleave(cfg.group_size, dim=2)
            z = torch.einsum("hqk,bkhe->bqhe", pattern.to(v.dtype), v)
            out = z.flatten(-2) @ W_O[layer].reshape(-1, cfg.d_model).to(z.dtype)
            self._attn_out[layer] = out + b_O[layer].to(out.dtype) if b_O is not None else out

        return compute

    def _attention_output(self, layer: int) -> Hook:
        def take(value: torch.Tensor) -> torch.Tensor:
            return self._attn_out.pop(layer).to(value.dtype)

        return take

    def _reader(self, model: CircuitModel, tc: TranscoderLike, scale: torch.Tensor) -> Hook:
        def read(value: torch.Tensor) -> None:
            self.reads.append(transcoder_input(model.cfg, tc.in_site, value, scale.detach()).to(tc.W_enc.dtype))

        return read

    def _writer(self, tc: TranscoderLike, rest: torch.Tensor, layer: int) -> Hook:
        def write(value: torch.Tensor) -> torch.Tensor:
            x = self.reads[layer]
            return (_skip(tc, x) + rest.detach()).to(value.dtype) + self.deltas[layer]

        return write

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
