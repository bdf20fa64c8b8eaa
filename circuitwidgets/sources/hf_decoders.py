"""Hugging Face decoder families with RMS norms, rotary positions and grouped-query attention.

Llama (2, 3, 3.1, 3.2; also TinyLlama and SmolLM 1/2), Mistral, Qwen 2/2.5,
Qwen 3, Gemma, Gemma 2, Gemma 3 (text), Phi-3, OLMo 2, OLMo 3 and SmolLM 3 share
one layout (``model.embed_tokens``, ``model.layers[i].self_attn.{q,k,v,o}_proj``,
``model.norm``, ``lm_head``) and differ in a handful of features, each described
by a :class:`Family`. Gemma 4 (``Gemma4ForCausalLM``) shares the layout and adds
per-layer features; it is read by :mod:`circuitwidgets.sources.hf_gemma4`.
How each feature becomes the canonical model (DESIGN.md §3a):

- **RMS norms** before a sublayer are folded into the rows of the weights that
  read them (``W_Q, W_K, W_V``; ``W_in, W_gate``; ``W_U`` for the final norm).
  Gemma's ``(1 + w)`` offset is applied before folding. Norms after a sublayer
  (Gemma 2/3's sandwich, OLMo 2/3) keep their multiplier as ``post_attn_norm`` /
  ``post_mlp_norm``: the forward pass applies it after the per-token ``1/rms``,
  and weight-space analyses see it folded into ``W_O``.
- **QK-norm** (Qwen 3 and Gemma 3 per head; OLMo 2/3 over all heads) keeps its
  multiplier as ``q_norm``/``k_norm``, folded into ``W_Q``/``W_K`` for analyses.
- **Embedding multipliers** (Gemma's ``√d_model``) are folded into ``W_E``.
- **Grouped-query attention**: keys and values stay per key/value head.
- **Rotary**: the inverse frequencies are read from the model's own rotary
  module (so Llama 3's, linear, YaRN and LongRoPE scaling are what the model
  uses), per layer (Gemma 3 and OLMo 3 use other frequencies on local layers;
  SmolLM 3's NoPE layers get zero frequencies). A rotary ``attention_scaling``
  (YaRN, LongRoPE) multiplies both ``cos`` and ``sin``, so scores by its square:
  that is folded into the queries (into ``q_norm`` when there is QK-norm).
  Dynamic-NTK rotary, whose frequencies change with the sequence length, is refused.
- **Score scales** other than ``1/√d_head`` (Gemma's ``query_pre_attn_scalar``)
  are read from each attention module's ``scaling``; soft-caps and sliding
  windows from the modules and the config.
- **Gated MLPs** (``act(x W_gate) · (x W_in) W_out``) run exactly in the forward
  pass; weight-space analyses leave MLP paths out, as for any MLP.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from circuitwidgets.errors import UnsupportedArchitectureError
from circuitwidgets.sources._convert import check_shape
from circuitwidgets.sources.hf_canonical import Stack, embedding, equalise_scales, unembedding
from circuitwidgets.sources.hf_gemma4 import GEMMA4, read_gemma4
from circuitwidgets.sources.hf_layers import (
    Family,
    activation_name,
    fold_input_norm,
    gated_mlp,
    norm_multiplier,
    projections,
    refuse_unsupported,
    rope_types,
    rotary,
)
from circuitwidgets.sources.hf_modules import at, linear_bias, unwrap

__all__ = ["FAMILIES", "Family", "read_decoder"]


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("Llama 2/3/3.1/3.2, TinyLlama, SmolLM"),
    "MistralForCausalLM": Family("Mistral"),
    "Qwen2ForCausalLM": Family("Qwen 2 / 2.5"),
    "Qwen3ForCausalLM": Family("Qwen 3", qk_norm="head"),
    "GemmaForCausalLM": Family("Gemma", norm_offset=True, embed_scale=True),
    "Gemma2ForCausalLM": Family("Gemma 2", norm_offset=True, embed_scale=True, placement="sandwich"),
    "Gemma3ForCausalLM": Family(
        "Gemma 3 (text)", norm_offset=True, embed_scale=True, placement="sandwich", qk_norm="head"
    ),
    "Phi3ForCausalLM": Family("Phi-3", fused=True),
    "Olmo2ForCausalLM": Family("OLMo 2", placement="post", qk_norm="all"),
    "Olmo3ForCausalLM": Family("OLMo 3", placement="post", qk_norm="all"),
    "SmolLM3ForCausalLM": Family("SmolLM 3"),
    "Gemma4ForCausalLM": GEMMA4,
}
"""The decoder classes :func:`~circuitwidgets.from_hf` reads through :func:`read_decoder`."""


def read_decoder(
    model: Any,
    family: Family,
    work: torch.dtype,
    target: torch.dtype,
    device: torch.device,
    release: Callable[[Any], None] | None = None,
    acquire: Callable[[Any, int], None] | None = None,
    mlp: bool = True,
) -> tuple[dict[str, Any], dict[str, torch.Tensor], float]:
    """``(shape, canonical weights in ``target`` dtype, shared score divisor)`` of one decoder model.

    Each layer is read in ``work`` dtype, folded, and written into preallocated
    tensors; ``release(block)``, when given, is called after a layer is read
    (the directory loader frees the source's layer there, so a conversion
    never holds two copies of the model). ``acquire(block, layer)``, when
    given, is called before a layer is read (the streaming loader of
    :mod:`circuitwidgets.sources.hf_stream` gives the layer its weights there).
    With ``mlp=False`` the MLPs are not read: the shape says their weights are
    absent (``mlp_weights_absent``), ``d_mlp`` comes from the config.
    """
    if family is GEMMA4:  # per-layer head widths, shared keys and values, per-layer inputs
        if acquire is not None or not mlp:
            raise UnsupportedArchitectureError(
                "model: Gemma 4 cannot be read layer by layer without its MLPs yet; load it whole with from_hf(path)"
            )
        return read_gemma4(model, work, target, device, release)
    hf = model.config
    arch = type(unwrap(model)).__name__
    refuse_unsupported(hf, arch)
    core = at(model, "model")
    blocks = list(core.layers)
    L = len(blocks)
    d, H = int(hf.hidden_size), int(hf.num_attention_heads)
    G = int(getattr(hf, "num_key_value_heads", None) or H)
    dh = int(getattr(hf, "head_dim", None) or d // H)
    W_E = unwrap(at(core, "embed_tokens")).weight.detach()
    V = W_E.shape[0]
    # The unembedding first, its source released at once: the largest matrix after W_E is not held
    # next to every layer (the streaming loader maps it from disk).
    final, final_eps = norm_multiplier(at(core, "norm"), "model.norm", family, work)
    head = unwrap(model.get_output_embeddings())
    check_shape("lm_head.weight", head.weight, (V, d))
    W_U = unembedding(head.weight.detach(), final, work, target, device)  # before W_E may be scaled in place
    b_U = linear_bias(head, target)
    if release is not None:
        release(head)
    stack = Stack(L, target, device)
    eps: set[float] = {final_eps}
    scales: list[float] = []
    windows: list[int | None] = []
    caps: set[float | None] = set()
    rotary_dims: set[int] = set()
    for layer, block in enumerate(blocks):
        if acquire is not None:
            acquire(block, layer)
        prefix = f"model.layers.{layer}"
        attn = unwrap(at(block, "self_attn"))
        parts: dict[str, torch.Tensor | None] = {}
        pre_attn = pre_mlp = None
        if family.placement in ("pre", "sandwich"):
            pre_attn, e = norm_multiplier(at(block, "input_layernorm"), f"{prefix}.input_layernorm", family, work)
            eps.add(e)
            mlp_norm = "pre_feedforward_layernorm" if family.placement == "sandwich" else "post_attention_layernorm"
            pre_mlp, e = norm_multiplier(at(block, mlp_norm), f"{prefix}.{mlp_norm}", family, work)
            eps.add(e)
        if family.placement in ("sandwich", "post"):
            for name, attr in (
                ("post_attn_norm", "post_attention_layernorm"),
                ("post_mlp_norm", "post_feedforward_layernorm"),
            ):
                w, e = norm_multiplier(at(block, attr), f"{prefix}.{attr}", family, work)
                eps.add(e)
                parts[name] = w
        if family.qk_norm is not None:
            qn, e = norm_multiplier(at(attn, "q_norm"), f"{prefix}.self_attn.q_norm", family, work)
            kn, e2 = norm_multiplier(at(attn, "k_norm"), f"{prefix}.self_attn.k_norm", family, work)
            eps |= {e, e2}
            parts["q_norm"] = qn.expand(H, dh) if family.qk_norm == "head" else qn.reshape(H, dh)
            parts["k_norm"] = kn.expand(G, dh) if family.qk_norm == "head" else kn.reshape(G, dh)
        freq, rope_scaling = rotary(model, attn, hf, layer)
        if freq is not None:
            rotary_dims.add(2 * freq.numel())
        scaling = getattr(attn, "scaling", None)
        divisor = 1.0 / float(scaling) if isinstance(scaling, (int, float)) and scaling else math.sqrt(dh)
        scales.append(divisor / rope_scaling**2)
        window = (
            getattr(attn, "sliding_window", None)
            if hasattr(attn, "sliding_window")
            else getattr(hf, "sliding_window", None)
        )
        windows.append(int(window) if window else None)
        caps.add(getattr(attn, "attn_logit_softcapping", None) or None)
        for name, value in parts.items():
            stack.put(name, layer, value)
        stack.put("rotary_freq", layer, freq)
        for name, value in projections(attn, family, H, G, dh, d, work, f"{prefix}.self_attn"):
            stack.put(name, layer, fold_input_norm(name, value, pre_attn, pre_mlp))
        for name, value in gated_mlp(block, family, d, work, prefix) if mlp else ():
            stack.put(name, layer, fold_input_norm(name, value, pre_attn, pre_mlp))
        if release is not None:
            release(block)
    if len(rotary_dims) > 1:
        raise UnsupportedArchitectureError(
            f"model: {arch} with rotary widths {sorted(rotary_dims)} differing by layer is not supported"
        )
    if len(eps) > 1:
        raise UnsupportedArchitectureError(f"model: {arch} with norms of different eps {sorted(eps)} is not supported")
    if len(caps) > 1:
        raise UnsupportedArchitectureError(
            f"model: {arch} with attention soft-caps {sorted(map(str, caps))} differing by layer is not supported"
        )
    weights = stack.result(arch)
    if "rotary_freq" in weights and not bool((weights["rotary_freq"] != 0).any()):
        del weights["rotary_freq"]
    weights["W_U"] = W_U
    embed_scale = math.sqrt(d) if family.embed_scale else None
    weights["W_E"] = embedding(W_E, embed_scale, target, device, in_place=release is not None)
    if b_U is not None:
        weights["b_U"] = b_U.to(device)
    attn_scale = equalise_scales(weights, scales)
    longrope = "longrope" in rope_types(hf)
    n_ctx = (
        int(getattr(hf, "original_max_position_embeddings", None) or hf.max_position_embeddings)
        if longrope
        else int(getattr(hf, "max_position_embeddings", 4096))
    )
    cap = next(iter(caps)) if caps else None
    shape = {
        "n_layers": L,
        "n_heads": H,
        "d_model": d,
        "d_head": dh,
        "d_vocab": V,
        "n_ctx": n_ctx,
        "positional_embedding_type": "rotary" if rotary_dims else "none",
        "rotary_dim": next(iter(rotary_dims)) if rotary_dims else None,
        "rotary_base": float(getattr(hf, "rope_theta", None) or 10_000.0),
        "normalization": "rms_post" if family.placement == "post" else "rms_pre",
        "post_norm": family.placement == "sandwich",
        "has_mlp": True,
        "d_mlp": int(weights["W_in"].shape[-1]) if mlp else int(hf.intermediate_size),
        "mlp_weights_absent": not mlp,
        "act_fn": activation_name(hf, arch),
        "gated_mlp": True,
        "parallel_attn_mlp": False,
        "ln_eps": next(iter(eps)),
        "architecture": arch,
        "n_kv_heads": G if G != H else None,
        "qk_norm": family.qk_norm,
        "attn_softcap": float(cap) if cap else None,
        "final_softcap": float(getattr(hf, "final_logit_softcapping", None) or 0) or None,
        "sliding_windows": tuple(windows) if any(w is not None for w in windows) else None,
    }
    return shape, weights, attn_scale
