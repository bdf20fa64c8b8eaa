"""The sublayers of the canonical forward pass: input norms, attention, MLP, output norms, per-layer inputs.

A mixin of :class:`~circuitwidgets.CircuitModel`, apart so that the model's
file holds its weights and its public API, and this one the computation of
one layer (DESIGN.md §3, §3a). It reads the stored tensors through
``self._buffers`` / ``self.weight``: the forward pass applies norm multipliers
after the per-token scalars, as the source models do.

Gemma 4's additions run here too: a layer that shares an earlier layer's keys
and values (``cfg.kv_sources``) attends with the keys and values that layer
computed in the same pass; values may be RMS-normalised (``cfg.v_norm``); a
per-layer input is gated into the residual stream after the MLP
(``cfg.d_per_layer``); and the whole residual stream may be multiplied by a
per-layer ``layer_scalar`` at the end of the layer.
"""

from __future__ import annotations

import torch
from torch import nn

from circuitwidgets.model.cache import Recorder
from circuitwidgets.model.config import ModelConfig
from circuitwidgets.model.forward import (
    activation,
    affine,
    attention_mask,
    chunked_attention,
    rms_norm,
    rms_scale,
    soft_cap,
    solu,
)
from circuitwidgets.model.fused import FusedProjections
from circuitwidgets.model.rotary import rotate


class Sublayers:
    """One layer's computations (mixed into :class:`~circuitwidgets.CircuitModel`)."""

    cfg: ModelConfig
    _buffers: dict[str, torch.Tensor | None]

    def weight(self, name: str) -> torch.Tensor | None:
        """The stored tensor ``name`` or ``None`` (defined by the model)."""
        raise NotImplementedError

    def rotary_freq(self, layer: int) -> torch.Tensor | None:
        """Rotary inverse frequencies of ``layer`` (defined by the model)."""
        raise NotImplementedError

    def _normalize(self, x: torch.Tensor, record: Recorder, name: str, layer: int | None) -> torch.Tensor:
        """The per-token part of the norm before a sublayer (``name``: ``scale``, ``scale_mlp``) or the unembedding
        (``scale_final``): ``x`` centred (LayerNorm) and divided by its per-token scale.

        The scale is a hook point: a hook that returns a run's scales freezes the
        norm (the stream-to-output map becomes linear). Without a norm the scale is 1.
        """
        kind = self.cfg.normalization
        if kind == "none" or (kind == "rms_post" and name != "scale_final"):
            record(name, layer, torch.ones_like(x[..., :1]))
            return x
        if kind == "ln_pre":
            if record.quiet(name, layer):  # one fused kernel (equal to the steps below to rounding)
                return nn.functional.layer_norm(x, x.shape[-1:], eps=self.cfg.ln_eps)
            centred = x - x.mean(-1, keepdim=True)
            scale = (centred.pow(2).mean(-1, keepdim=True) + self.cfg.ln_eps).sqrt()
            return centred / record(name, layer, scale)
        work = x if x.dtype == torch.float64 else x.float()
        rms = (work.pow(2).mean(-1, keepdim=True) + self.cfg.ln_eps).sqrt()
        seen = rms.to(x.dtype)
        used = record(name, layer, seen)
        if used is not seen:  # a hook replaced it: divide by that (Hugging Face divides in float32, so do we)
            rms = used.to(work.dtype)
        return (work / rms).to(x.dtype)

    def _output_norm(self, out: torch.Tensor, layer: int, multiplier: str, record: Recorder, name: str) -> torch.Tensor:
        """A sublayer's output norm (Gemma 2/3, OLMo 2/3), or ``out`` unchanged.

        Its per-token scale is the hook point ``name`` (``scale_attn_post``, ``scale_mlp_post``), as the input norms'
        are: a hook that returns a run's scales freezes it (an attribution graph's linear map needs that).
        """
        weight = self.weight(multiplier)
        if weight is None:
            return out
        if record.quiet(name, layer):
            return rms_norm(out, self.cfg.ln_eps, weight[layer])
        work = out if out.dtype == torch.float64 else out.float()
        rms = (work.pow(2).mean(-1, keepdim=True) + self.cfg.ln_eps).sqrt()
        seen = rms.to(out.dtype)
        used = record(name, layer, seen)
        if used is not seen:  # a hook replaced it: divide by that, in float32 at least as rms_norm does
            rms = used.to(work.dtype)
        return (work / rms * weight[layer].to(work.dtype)).to(out.dtype)

    def _qk_norm(self, x: torch.Tensor, layer: int, multiplier: str) -> torch.Tensor:
        """QK-norm of queries or keys ``[batch, pos, heads, d_head]`` (per head, or over all heads at once)."""
        weight = self.weight(multiplier)
        if weight is None:
            return x
        width = self.cfg.head_width(layer)
        if self.cfg.qk_norm == "all":
            return rms_norm(x.flatten(-2), self.cfg.ln_eps, weight[layer].flatten(), width * x.shape[-2]).view_as(x)
        return rms_norm(x, self.cfg.ln_eps, weight[layer], width)

    def _project(self, x: torch.Tensor, layer: int, letter: str) -> torch.Tensor:
        """``x W_{letter} + b_{letter}`` per head: ``[batch, pos, d_model]`` → ``[batch, pos, heads, d_head]``."""
        out = torch.einsum("bpd,hde->bphe", x, self._buffers[f"W_{letter}"][layer])  # type: ignore[index]
        bias = self.weight(f"b_{letter}")
        return out + bias[layer] if bias is not None else out

    def _fused_weight(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None, tuple[int, int, int]] | None:
        """``layer``'s ``[W_Q | W_K | W_V]`` as one ``[d_model, n]`` matrix, its bias and the three widths (cached:
        :mod:`circuitwidgets.model.fused`), or ``None`` where the model projects per head."""
        cache = self.__dict__.get("_fused_cache")
        if cache is None:
            cache = self.__dict__["_fused_cache"] = FusedProjections()
        return cache.get(self._buffers, layer)

    def _fused_projections(
        self, x: torch.Tensor, layer: int, queries: list[int] | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """Raw ``q`` (at rows ``queries`` of ``x``, all when ``None``), ``k`` and ``v`` of ``layer`` from one product
        over the layer's fused weight (:mod:`circuitwidgets.model.fused`), or ``None`` to project per head."""
        fused = self._fused_weight(layer)
        if fused is None:
            return None
        weight, bias, (n_q, n_k, n_v) = fused
        if queries is None:
            q, k, v = torch.split(affine(x, weight, bias), [n_q, n_k, n_v], dim=-1)
        else:  # the last layer asks at a few rows: their queries, every row's keys and values (column slices, no copy)
            q = affine(x[:, queries], weight[:, :n_q], None if bias is None else bias[:n_q])
            k, v = torch.split(affine(x, weight[:, n_q:], None if bias is None else bias[n_q:]), [n_k, n_v], dim=-1)
        kv_heads = self.cfg.kv_heads
        return (
            q.view(*q.shape[:-1], self.cfg.n_heads, -1),
            k.view(*k.shape[:-1], kv_heads, -1),
            v.view(*v.shape[:-1], kv_heads, -1),
        )

    def _keys_and_values(
        self,
        layer: int,
        x: torch.Tensor,
        qk_in: torch.Tensor,
        positions: torch.Tensor,
        shared: dict[int, tuple[torch.Tensor, torch.Tensor]],
        raw: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (normed and rotated) and values (normed) ``[batch, pos, kv_heads, d_head]`` of ``layer``.

        A layer sharing an earlier layer's keys and values takes them from
        ``shared``, where that layer left them in this pass. ``raw``: the keys and
        values already projected (:meth:`_fused_projections`).
        """
        cfg = self.cfg
        source = cfg.kv_source(layer)
        if source != layer:
            return shared[source]
        k = self._qk_norm(raw[0] if raw is not None else self._project(qk_in, layer, "K"), layer, "k_norm")
        v = raw[1] if raw is not None else self._project(x, layer, "V")
        if cfg.v_norm:
            v = rms_scale(v, cfg.ln_eps, cfg.head_width(layer))[0]
        freq = self.rotary_freq(layer)
        if freq is not None:
            k = rotate(k, freq, positions, pos_dim=1)
        if cfg.kv_sources is not None and layer in cfg.kv_sources[layer + 1 :]:
            shared[layer] = (k, v)
        return k, v

    def _attention(
        self,
        layer: int,
        resid: torch.Tensor,
        pos: torch.Tensor | None,
        frozen: torch.Tensor | None,
        replaced: torch.Tensor | None,
        shared: dict[int, tuple[torch.Tensor, torch.Tensor]],
        record: Recorder,
        queries: list[int] | None = None,
    ) -> torch.Tensor:
        """The attention sublayer's output; ``queries``: only those rows of ``resid`` ask (keys and values from all)."""
        cfg = self.cfg
        if record.resume is not None and record.resume[0] == layer:  # known up to z or attn_out (Recorder.resume)
            _, name, value = record.resume
            value = value if queries is None else value[:, queries]
            if name == "attn_out":
                return record("attn_out", layer, value)
            return self._head_outputs(layer, record("z", layer, value), replaced, record)
        x = self._normalize(resid, record, "scale", layer)
        qk_in = x + pos if cfg.positional_embedding_type == "shortformer" and pos is not None else x
        offset = record.offset
        positions = torch.arange(offset, offset + resid.shape[1], device=resid.device)
        own_kv = cfg.kv_source(layer) == layer
        raw = self._fused_projections(x, layer, queries) if qk_in is x and own_kv else None
        asking = qk_in if queries is None else qk_in[:, queries]
        q = self._qk_norm(raw[0] if raw is not None else self._project(asking, layer, "Q"), layer, "q_norm")
        freq = self.rotary_freq(layer)
        if freq is not None:
            q = rotate(q, freq, positions if queries is None else positions[queries], pos_dim=1)
        k, v = self._keys_and_values(layer, x, qk_in, positions, shared, None if raw is None else (raw[1], raw[2]))
        if cfg.group_size > 1:
            k, v = k.repeat_interleave(cfg.group_size, dim=2), v.repeat_interleave(cfg.group_size, dim=2)
        q = record("q", layer, q)
        k = record("k", layer, k)
        v = record("v", layer, v)
        if record.prefix is not None and offset:  # a suffix-only pass: the earlier keys and values, unchanged
            k, v = _with_prefix(record.prefix(layer), k, v)
        if frozen is None and record.quiet("attn_scores", layer) and record.quiet("pattern", layer):
            dest = None if queries is None else [offset + i for i in queries]
            z = chunked_attention(q, k, v, cfg.scale, cfg.attn_softcap, cfg.window(layer), offset, dest)
            z = record("z", layer, z)
            return self._head_outputs(layer, z, replaced, record)
        if frozen is None:
            scores = soft_cap(torch.einsum("bqhe,bkhe->bhqk", q, k) / cfg.scale, cfg.attn_softcap)
            mask = attention_mask(resid.shape[1], cfg.window(layer), resid.device, offset)
            if queries is not None:  # (a hooked last layer narrowed to the logits' rows: Recorder.narrow_hooks)
                mask = mask[queries]
            scores = record("attn_scores", layer, scores.masked_fill(~mask, float("-inf")))
            pattern = scores.softmax(dim=-1)
        else:
            pattern = frozen.to(v.dtype)
        pattern = record("pattern", layer, pattern)
        z = record("z", layer, torch.einsum("bhqk,bkhe->bqhe", pattern, v))
        return self._head_outputs(layer, z, replaced, record)

    def _head_outputs(
        self, layer: int, z: torch.Tensor, replaced: torch.Tensor | None, record: Recorder
    ) -> torch.Tensor:
        """Each head's output ``z W_O`` (or its replacement), summed, with ``b_O`` and the output norm."""
        b_O = self.weight("b_O")
        if replaced is None and record.quiet("result", layer):  # the heads' sum as one product: no [.., H, d] tensor
            W_O = self._buffers["W_O"][layer]  # type: ignore[index]
            out = affine(z.flatten(-2), W_O.flatten(0, 1), None if b_O is None else b_O[layer])
            return record("attn_out", layer, self._output_norm(out, layer, "post_attn_norm", record, "scale_attn_post"))
        result = record("result", layer, torch.einsum("bqhe,hed->bqhd", z, self._buffers["W_O"][layer]))  # type: ignore[index]
        written = replaced.to(result.dtype) if replaced is not None else result
        out = written.sum(dim=2)
        if b_O is not None:
            out = out + b_O[layer]
        return record("attn_out", layer, self._output_norm(out, layer, "post_attn_norm", record, "scale_attn_post"))

    def _mlp(self, layer: int, resid: torch.Tensor, record: Recorder) -> torch.Tensor:
        cfg = self.cfg
        assert cfg.act_fn is not None
        x = self._normalize(resid, record, "scale_mlp", layer)

        def project(h: torch.Tensor, name: str, bias: str) -> torch.Tensor:
            b = self.weight(bias)
            return affine(h, self._buffers[name][layer], None if b is None else b[layer])  # type: ignore[index]

        pre = record("mlp_pre", layer, project(x, "W_gate", "b_gate") if cfg.gated_mlp else project(x, "W_in", "b_in"))
        if cfg.act_fn == "solu_ln":
            hidden = self._solu_ln(layer, record("mlp_mid", layer, solu(pre)))
        else:
            hidden = activation(cfg.act_fn, pre)
        if cfg.gated_mlp:
            hidden = hidden * project(x, "W_in", "b_in")
        out = project(record("mlp_post", layer, hidden), "W_out", "b_out")
        return record("mlp_out", layer, self._output_norm(out, layer, "post_mlp_norm", record, "scale_mlp_post"))

    def _solu_ln(self, layer: int, mid: torch.Tensor) -> torch.Tensor:
        """SoLU's LayerNorm over the neurons, with its gain and bias (``post`` as TransformerLens names it)."""
        w, b = self._buffers["ln_mlp_w"][layer], self._buffers["ln_mlp_b"][layer]  # type: ignore[index]
        return nn.functional.layer_norm(mid, (mid.shape[-1],), w.to(mid.dtype), b.to(mid.dtype), self.cfg.ln_eps)

    def _per_layer_inputs(self, tokens: torch.Tensor, embed: torch.Tensor) -> torch.Tensor | None:
        """Gemma 4's per-layer inputs ``[batch, pos, n_layers, d_per_layer]``, or ``None`` without them.

        ``rms(embed W_per_layer_proj) · per_layer_proj_norm + W_E_per_layer[tokens]``
        (the source's scales, ``1/√d_model``, ``√d_per_layer`` and the final
        ``1/√2``, are folded into those weights).
        """
        if self.cfg.d_per_layer is None:
            return None
        projected = torch.einsum("bpd,dlk->bplk", embed, self._buffers["W_per_layer_proj"])
        normed = rms_norm(projected, self.cfg.ln_eps, self._buffers["per_layer_proj_norm"])  # type: ignore[arg-type]
        return normed + self._buffers["W_E_per_layer"][tokens]  # type: ignore[index]

    def _per_layer_block(self, layer: int, resid: torch.Tensor, inputs: torch.Tensor, record: Recorder) -> torch.Tensor:
        """What layer ``layer``'s per-layer input writes into the residual stream ``[batch, pos, d_model]``.

        ``rms(act(resid W_per_layer_gate) · input · W_per_layer_out) · post_per_layer_norm``:
        the gate reads the residual stream itself, not a normalised copy.
        """
        assert self.cfg.act_fn is not None
        inputs = record("per_layer_input", layer, inputs)
        gate = activation(self.cfg.act_fn, resid @ self._buffers["W_per_layer_gate"][layer])  # type: ignore[index]
        out = (gate * inputs) @ self._buffers["W_per_layer_out"][layer]  # type: ignore[index]
        out = rms_norm(out, self.cfg.ln_eps, self._buffers["post_per_layer_norm"][layer])  # type: ignore[index]
        return record("per_layer_out", layer, out)

    def _layer(
        self,
        layer: int,
        resid: torch.Tensor,
        pos: torch.Tensor | None,
        frozen: torch.Tensor | None,
        replaced: torch.Tensor | None,
        shared: dict[int, tuple[torch.Tensor, torch.Tensor]],
        per_layer: torch.Tensor | None,
        record: Recorder,
        queries: list[int] | None = None,
    ) -> torch.Tensor:
        """The residual stream after ``layer``: attention, MLP (after or beside it), per-layer input, layer scalar.

        ``queries``: only these positions (indices into ``resid``'s) are asked for, so everything after the keys and
        values runs on them alone (a last layer whose logits are read at a few positions; nothing there kept, nor
        hooked but by hooks that take those rows: ``Recorder.narrow_hooks``).
        """
        cfg = self.cfg
        resid = record("resid_pre", layer, resid)
        attn_out = self._attention(layer, resid, pos, frozen, replaced, shared, record, queries)
        if queries is not None:
            resid = resid[:, queries]
            per_layer = None if per_layer is None else per_layer[:, queries]
        if cfg.has_mlp and cfg.parallel_attn_mlp:
            resid = resid + attn_out + self._mlp(layer, resid, record)
        else:
            resid = resid + attn_out
            if cfg.has_mlp:
                resid = record("resid_mid", layer, resid)
                resid = resid + self._mlp(layer, resid, record)
        if per_layer is not None:
            resid = resid + self._per_layer_block(layer, resid, per_layer[:, :, layer], record)
        scalar = self.weight("layer_scalar")
        if scalar is not None:
            resid = resid * scalar[layer]
        return record("resid_post", layer, resid)


def _with_prefix(
    prefix: tuple[torch.Tensor, torch.Tensor], k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A suffix-only pass's keys and values: the earlier positions' (``prefix``, one copy per base prompt, repeated
    for the variants stacked on the batch axis) before this pass's own."""
    pk, pv = prefix
    copies = k.shape[0] // pk.shape[0]
    return torch.cat([pk.repeat(copies, 1, 1, 1), k], dim=1), torch.cat([pv.repeat(copies, 1, 1, 1), v], dim=1)
