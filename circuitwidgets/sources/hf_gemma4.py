"""Gemma 4 (text, ``Gemma4ForCausalLM``) as a :class:`~circuitwidgets.CircuitModel`.

Gemma 4 is Gemma 3's decoder (sandwich norms, per-head QK-norm, ``√d_model``
embedding scale, local and global layers with their own rotary) with these
additions, each represented exactly (DESIGN.md §3a):

- **Norms multiply by** ``w`` (not Gemma 1–3's ``1 + w``); they are folded as
  for the other families.
- **Per-layer head widths** (``per_layer_config``: global layers have wider
  heads, and may have other key/value heads). Every layer is stored at the
  widest ``d_head``: a layer of width ``w`` keeps its rotate-half halves at
  columns ``[0, w/2)`` and ``[d_head/2, d_head/2 + w/2)``, the columns between
  zero, and the padded rotary pairs get frequency 0. So ``W_Q W_Kᵀ``, ``W_V W_O``
  and the rotation at any offset are the layer's own; QK-norm and value-norm
  RMS are taken over ``w`` (``cfg.head_dims``). Layers with fewer key/value
  heads than the most any layer has repeat each of theirs, so that one
  query-to-key/value-head map serves all layers.
- **Proportional rotary** (global layers rotate a fraction of their pairs):
  the model's own inverse frequencies are read, zeros included.
- **Value norm** (``v_norm``, a parameter-free RMS norm of each value head):
  computed in the forward pass; weight-space analyses leave out its per-token
  scalar, as every norm's.
- **Keys as values** (``attention_k_eq_v``, global layers without ``v_proj``):
  ``W_V`` is ``W_K`` before its QK-norm, as the source computes.
- **Shared keys and values** (the last ``num_kv_shared_layers`` layers attend
  with the keys and values of the last earlier layer of their type,
  ``cfg.kv_sources``): the forward pass reuses them; the sharing layer holds a
  copy of its source's ``W_K``, ``W_V``, so direct-path QK and OV circuits are
  its own. Its keys and values read the residual stream at the source layer,
  so K-/V-composition from the layers in between does not exist
  (``CircuitModel.weight_space_exclusions`` says so).
- **Per-layer input embeddings** (``hidden_size_per_layer_input``): a second
  input stream, ``rms(W_E x · W_proj) · w + E_layer[token]``, gated by
  ``act(resid · W_gate)`` and written back after each MLP through an RMS
  norm. Computed in the forward pass; weight-space analyses leave it out,
  as they leave out MLPs.
- **Layer scalars** (``layer_scalar``: the whole residual stream is multiplied
  after each layer): kept for the forward pass; weight-space analyses see
  each layer's ``W_O`` divided by the product of the scalars before it, so a
  head's output and the embedding keep their relative weight.
- **Double-wide MLPs** on shared-KV layers: narrower MLPs are padded with zero
  units (``act(0) · 0 = 0``).

Refused with :class:`~circuitwidgets.errors.UnsupportedArchitectureError`:
the mixture-of-experts block (``enable_moe_block``: a router picks experts per
token) and fully bidirectional attention (``use_bidirectional_attention="all"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from circuitwidgets.errors import UnsupportedArchitectureError
from circuitwidgets.model.weights import head_columns
from circuitwidgets.sources._convert import check_shape
from circuitwidgets.sources.hf_canonical import Stack, embedding, equalise_scales, unembedding
from circuitwidgets.sources.hf_layers import (
    Family,
    activation_name,
    fold_input_norm,
    gated_mlp,
    norm_multiplier,
    refuse_unsupported,
    rotary,
    split_heads,
)
from circuitwidgets.sources.hf_modules import at, linear_bias, unwrap

GEMMA4 = Family("Gemma 4 (text)", embed_scale=True, placement="sandwich", qk_norm="head")
"""Gemma 4's row of the family table (its norms multiply by ``w``, not ``1 + w``)."""

#: Tensors a layer that shares another layer's keys and values copies from it.
_SHARED = ("W_K", "W_V", "b_K", "b_V", "k_norm")


def pad_heads(W: torch.Tensor, width: int, d_head: int, axis: int = -1) -> torch.Tensor:
    """``W`` with its head axis of ``width`` spread over ``d_head``: halves at ``0`` and ``d_head/2``, zeros between."""
    if width == d_head:
        return W
    axis %= W.ndim
    shape = list(W.shape)
    shape[axis] = d_head
    return W.new_zeros(shape).index_copy_(axis, head_columns(width, d_head).to(W.device), W)


def _repeat_kv(W: torch.Tensor, groups: int) -> torch.Tensor:
    """Key/value heads ``[G_l, ...]`` repeated to ``[groups, ...]`` (query head ``h`` then reads the same one)."""
    return W if W.shape[0] == groups else W.repeat_interleave(groups // W.shape[0], dim=0)


def _refuse(hf: Any, arch: str) -> None:
    """Refuse what the canonical model cannot represent, naming the config field."""
    if getattr(hf, "enable_moe_block", False):
        raise UnsupportedArchitectureError(
            f"model.config: {arch} with enable_moe_block=True is not supported: its MLP is joined by a router that "
            "picks experts per token, which the canonical model does not represent; dense Gemma 4 models load"
        )
    if getattr(hf, "use_bidirectional_attention", None) == "all":
        raise UnsupportedArchitectureError(
            f"model.config: {arch} with use_bidirectional_attention='all' is not supported: circuitwidgets models are causal"
        )
    refuse_unsupported(hf, arch)


def kv_sources(hf: Any, attns: list[Any]) -> tuple[int, ...]:
    """The layer whose keys and values each layer attends with (Gemma 4's ``num_kv_shared_layers``).

    A sharing layer reads the last non-sharing layer of its own type, which
    the source marks as storing its keys and values.
    """
    types = list(hf.layer_types)
    first_shared = len(attns) - int(getattr(hf, "num_kv_shared_layers", 0) or 0)
    out = []
    for layer, attn in enumerate(attns):
        if not getattr(attn, "is_kv_shared_layer", False):
            out.append(layer)
            continue
        earlier = [j for j in range(first_shared) if types[j] == types[layer]]
        if not earlier or not getattr(attns[earlier[-1]], "store_full_length_kv", False):
            raise UnsupportedArchitectureError(
                f"model.model.layers.{layer}: shares keys and values, but no earlier {types[layer]} layer stores them"
            )
        out.append(earlier[-1])
    return tuple(out)


def _attention_parts(
    attn: Any, H: int, G: int, width: int, d_head: int, d: int, work: torch.dtype, prefix: str
) -> dict[str, torch.Tensor | None]:
    """One attention module's ``W_Q, b_Q, q_norm`` (and, when it computes its own, keys and values), padded to ``d_head``."""
    parts: dict[str, torch.Tensor | None] = {}
    names = [("Q", "q_proj", H)]
    own_kv = not getattr(attn, "is_kv_shared_layer", False)
    if own_kv:
        G_l = unwrap(at(attn, "k_proj")).weight.shape[0] // width
        value_proj = "v_proj" if getattr(attn, "v_proj", None) is not None else "k_proj"  # attention_k_eq_v
        names += [("K", "k_proj", G_l), ("V", value_proj, G_l)]
    for letter, attr, n in names:
        proj = unwrap(at(attn, attr))
        W = proj.weight.detach().to(work, copy=True)
        check_shape(f"{prefix}.{attr}.weight", W, (n * width, d))
        b = linear_bias(proj, work)
        parts[f"W_{letter}"] = pad_heads(split_heads(W, n, width, d), width, d_head)
        parts[f"b_{letter}"] = pad_heads(b.reshape(n, width), width, d_head) if b is not None else None
    for letter, n in (("q", H), *((("k", names[1][2]),) if own_kv else ())):
        w, _ = norm_multiplier(at(attn, f"{letter}_norm"), f"{prefix}.{letter}_norm", GEMMA4, work)
        parts[f"{letter}_norm"] = pad_heads(w.expand(n, width), width, d_head)
    for name in ("W_K", "W_V", "b_K", "b_V", "k_norm"):
        if parts.get(name) is not None:
            parts[name] = _repeat_kv(parts[name], G)  # type: ignore[arg-type]
    o = unwrap(at(attn, "o_proj"))
    W_O = o.weight.detach().to(work, copy=True)
    check_shape(f"{prefix}.o_proj.weight", W_O, (d, H * width))
    parts["W_O"] = pad_heads(W_O.T.reshape(H, width, d), width, d_head, axis=1)
    parts["b_O"] = linear_bias(o, work)
    return parts


def _mlp_parts(block: Any, d: int, d_mlp: int, work: torch.dtype, prefix: str) -> dict[str, torch.Tensor | None]:
    """One gated MLP padded with zero units to ``d_mlp`` (Gemma 4 doubles it on shared-KV layers)."""
    parts = dict(gated_mlp(block, GEMMA4, d, work, prefix))
    for name, axis in (("W_gate", 1), ("W_in", 1), ("W_out", 0), ("b_gate", 0), ("b_in", 0)):
        value = parts.get(name)
        if value is not None and value.shape[axis] < d_mlp:
            pad = [0, 0] * (value.ndim - 1 - axis) + [0, d_mlp - value.shape[axis]]
            parts[name] = torch.nn.functional.pad(value, pad)
    return parts


def _per_layer_parts(block: Any, d: int, work: torch.dtype, prefix: str) -> dict[str, torch.Tensor | None]:
    """One layer's per-layer-input gate, output projection and output norm (empty without per-layer inputs)."""
    if not getattr(block, "hidden_size_per_layer_input", 0):
        return {}
    gate = unwrap(at(block, "per_layer_input_gate")).weight.detach().to(work, copy=True)
    out = unwrap(at(block, "per_layer_projection")).weight.detach().to(work, copy=True)
    check_shape(f"{prefix}.per_layer_input_gate.weight", gate, (gate.shape[0], d))
    norm, _ = norm_multiplier(
        at(block, "post_per_layer_input_norm"), f"{prefix}.post_per_layer_input_norm", GEMMA4, work
    )
    return {"W_per_layer_gate": gate.T, "W_per_layer_out": out.T, "post_per_layer_norm": norm}


def _per_layer_inputs(
    core: Any, L: int, V: int, d: int, work: torch.dtype, target: torch.dtype, device: torch.device, in_place: bool
) -> dict[str, torch.Tensor]:
    """``W_E_per_layer [V, L, P]``, ``W_per_layer_proj [d, L, P]``, ``per_layer_proj_norm [P]`` with the source's scales folded.

    The source computes ``(rms(W_E x · W · d^-½) · w + E[token] · √P) · 2^-½``;
    ``d^-½`` goes into ``W``, ``√P · 2^-½`` into ``E`` and ``2^-½`` into ``w``.
    """
    table = unwrap(at(core, "embed_tokens_per_layer")).weight.detach()
    if table.shape[0] < V:
        raise UnsupportedArchitectureError(
            f"model.model.embed_tokens_per_layer: expected at least d_vocab={V} rows, got {table.shape[0]}"
        )
    P = table.shape[1] // L
    scale = float(unwrap(at(core, "embed_tokens_per_layer")).scalar_embed_scale)
    E = embedding(table[:V], scale, target, device, in_place).mul_(2**-0.5).view(V, L, P)
    proj = unwrap(at(core, "per_layer_model_projection")).weight.detach()
    check_shape("model.model.per_layer_model_projection.weight", proj, (L * P, d))
    W = (proj.to(work).T * float(core.per_layer_model_projection_scale)).reshape(d, L, P)
    norm, _ = norm_multiplier(
        at(core, "per_layer_projection_norm"), "model.model.per_layer_projection_norm", GEMMA4, work
    )
    return {
        "W_E_per_layer": E,
        "W_per_layer_proj": W.to(device=device, dtype=target).contiguous(),
        "per_layer_proj_norm": (norm * float(core.per_layer_input_scale)).to(device=device, dtype=target),
    }


def read_gemma4(
    model: Any,
    work: torch.dtype,
    target: torch.dtype,
    device: torch.device,
    release: Callable[[Any], None] | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor], float]:
    """``(shape, canonical weights in ``target`` dtype, shared score divisor)`` of a ``Gemma4ForCausalLM``.

    As :func:`~circuitwidgets.sources.hf_decoders.read_decoder`: each layer is
    read in ``work`` dtype, folded, padded to the widest head and written into
    preallocated tensors; ``release(block)`` is called after each layer.
    """
    hf = model.config
    arch = type(unwrap(model)).__name__
    _refuse(hf, arch)
    core = at(model, "model")
    blocks = list(core.layers)
    attns = [unwrap(at(block, "self_attn")) for block in blocks]
    L, d, H = len(blocks), int(hf.hidden_size), int(hf.num_attention_heads)
    widths = [int(attn.head_dim) for attn in attns]
    dh = max(widths)
    sources = kv_sources(hf, attns)
    kv_heads = [H // int(attn.num_key_value_groups) for attn in attns]
    G = math.lcm(*kv_heads)
    d_mlp = max(int(unwrap(at(block, "mlp.up_proj")).weight.shape[0]) for block in blocks)
    W_E = unwrap(at(core, "embed_tokens")).weight.detach()
    V = W_E.shape[0]
    stack = Stack(L, target, device)
    eps: set[float] = set()
    scales: list[float] = []
    windows: list[int | None] = []
    for layer, (block, attn) in enumerate(zip(blocks, attns, strict=True)):
        prefix = f"model.layers.{layer}"
        norms = {}
        for name, attr in (
            ("pre_attn", "input_layernorm"),
            ("pre_mlp", "pre_feedforward_layernorm"),
            ("post_attn_norm", "post_attention_layernorm"),
            ("post_mlp_norm", "post_feedforward_layernorm"),
        ):
            norms[name], e = norm_multiplier(at(block, attr), f"{prefix}.{attr}", GEMMA4, work)
            eps.add(e)
        parts = _attention_parts(attn, H, G, widths[layer], dh, d, work, f"{prefix}.self_attn")
        parts |= _mlp_parts(block, d, d_mlp, work, prefix)
        parts |= _per_layer_parts(block, d, work, prefix)
        parts |= {"post_attn_norm": norms["post_attn_norm"], "post_mlp_norm": norms["post_mlp_norm"]}
        parts["layer_scalar"] = at(block, "layer_scalar").detach().to(work).reshape(())
        for name, value in parts.items():
            stack.put(name, layer, fold_input_norm(name, value, norms["pre_attn"], norms["pre_mlp"]))
        if sources[layer] != layer:
            for name in _SHARED:
                if name in stack.out:
                    stack.out[name][layer] = stack.out[name][sources[layer]]
                else:
                    stack.put(name, layer, None)
        freq, rope_scaling = rotary(model, attn, hf, layer)
        padded = torch.zeros(dh // 2) if freq is None else torch.nn.functional.pad(freq, (0, dh // 2 - freq.numel()))
        stack.put("rotary_freq", layer, padded)
        scaling = float(attn.scaling) if attn.scaling else 1.0 / math.sqrt(widths[layer])
        scales.append(1.0 / scaling / rope_scaling**2)
        windows.append(int(attn.sliding_window) if getattr(attn, "sliding_window", None) else None)
        if release is not None:
            release(block)
    if len(eps) > 1:
        raise UnsupportedArchitectureError(f"model: {arch} with norms of different eps {sorted(eps)} is not supported")
    weights = stack.result(arch)
    rotates = bool((weights["rotary_freq"] != 0).any())
    if not rotates:
        del weights["rotary_freq"]
    final, _ = norm_multiplier(at(core, "norm"), "model.norm", GEMMA4, work)
    head = unwrap(model.get_output_embeddings())
    check_shape("lm_head.weight", head.weight, (V, d))
    weights["W_U"] = unembedding(head.weight.detach(), final, work, target, device)  # before W_E may be scaled in place
    weights["W_E"] = embedding(W_E, math.sqrt(d), target, device, in_place=release is not None)
    P = int(getattr(hf, "hidden_size_per_layer_input", 0) or 0)
    if P:
        weights |= _per_layer_inputs(core, L, V, d, work, target, device, in_place=release is not None)
    attn_scale = equalise_scales(weights, scales)
    shape = {
        "n_layers": L,
        "n_heads": H,
        "d_model": d,
        "d_head": dh,
        "d_vocab": V,
        "n_ctx": int(getattr(hf, "max_position_embeddings", 4096)),
        "positional_embedding_type": "rotary" if rotates else "none",
        "rotary_dim": dh if rotates else None,
        "normalization": "rms_pre",
        "post_norm": True,
        "qk_norm": "head",
        "v_norm": True,
        "has_mlp": True,
        "d_mlp": d_mlp,
        "act_fn": activation_name(hf, arch),
        "gated_mlp": True,
        "parallel_attn_mlp": False,
        "ln_eps": next(iter(eps)),
        "architecture": arch,
        "n_kv_heads": G if G != H else None,
        "final_softcap": float(getattr(hf, "final_logit_softcapping", None) or 0) or None,
        "sliding_windows": tuple(windows) if any(w is not None for w in windows) else None,
        "head_dims": tuple(widths) if len(set(widths)) > 1 else None,
        "kv_sources": sources if any(s != layer for layer, s in enumerate(sources)) else None,
        "d_per_layer": P or None,
    }
    return shape, weights, attn_scale
