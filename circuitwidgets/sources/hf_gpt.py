"""GPT-2 and GPT-NeoX (Pythia) checkpoints: layer norms, learned or rotate-half rotary positions.

- ``GPT2LMHeadModel``: ``Conv1D`` weights (``x @ W + b``), fused ``c_attn``
  split into queries, keys and values, learned absolute positions
  (``"standard"``), tied or untied unembedding, ``scale_attn_weights`` and
  ``scale_attn_by_inverse_layer_idx`` (the per-layer factor is folded into
  ``W_Q``/``b_Q``).
- ``GPTNeoXForCausalLM``: fused ``query_key_value`` laid out per head as
  ``[q | k | v]``, rotate-half rotary on the first ``rotary_dim = head_dim *
  partial_rotary_factor`` dimensions, parallel or sequential residual.

Layer norms are folded by :func:`circuitwidgets.sources._convert.fold_layer_norms`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from circuitwidgets.errors import UnsupportedArchitectureError
from circuitwidgets.sources._convert import Norm, RawModel, check_shape, take
from circuitwidgets.sources.hf_modules import at, bias_or_zeros, linear_bias, unwrap

# Hugging Face activation names -> ours (same function; gelu_pytorch_tanh differs by rounding only).
_ACTIVATIONS = {
    "gelu_new": "gelu_new",
    "gelu_fast": "gelu_fast",
    "gelu_pytorch_tanh": "gelu_new",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


def _activation(name: object, arch: str) -> str:
    if not isinstance(name, str) or name not in _ACTIVATIONS:
        raise UnsupportedArchitectureError(
            f"model.config: {arch} with activation {name!r} is not supported; supported activations are {sorted(_ACTIVATIONS)}"
        )
    return _ACTIVATIONS[name]


def _layer_norm(module: Any, name: str, dtype: torch.dtype) -> tuple[Norm, float]:
    """``(weight, bias)`` of an ``nn.LayerNorm`` and its eps."""
    if not isinstance(module, torch.nn.LayerNorm):
        raise UnsupportedArchitectureError(f"{name}: expected an nn.LayerNorm, got {type(module).__name__}")
    if len(module.normalized_shape) != 1:
        raise UnsupportedArchitectureError(
            f"{name}: expected a layer norm over the last dimension only, got {tuple(module.normalized_shape)}"
        )
    weight = take(module.weight, dtype) if module.weight is not None else None
    bias = take(module.bias, dtype) if module.bias is not None else None
    return (weight, bias), float(module.eps)


def _single_eps(eps: list[float], arch: str) -> float:
    if any(not math.isclose(e, eps[0]) for e in eps):
        raise UnsupportedArchitectureError(
            f"model: {arch} layer norms with different eps {sorted(set(eps))} are not supported"
        )
    return eps[0]


def _scales(modules: list[Any], default: float) -> list[float]:
    """Divisor of attention scores per layer, read from each attention module's ``scaling``."""
    out = []
    for module in modules:
        scaling = getattr(module, "scaling", None)
        out.append(1.0 / float(scaling) if isinstance(scaling, (int, float)) and scaling else default)
    return out


def read_gpt2(model: Any, dtype: torch.dtype) -> tuple[dict[str, Any], RawModel]:
    hf = model.config
    arch = "GPT2LMHeadModel"
    if getattr(hf, "add_cross_attention", False):
        raise UnsupportedArchitectureError(
            f"model: {arch} with cross-attention (add_cross_attention=True) is not supported"
        )
    d, H = int(hf.n_embd), int(hf.n_head)
    if d % H:
        raise UnsupportedArchitectureError(f"model.config: n_embd={d} is not a multiple of n_head={H}")
    dh = d // H
    blocks = list(at(model, "transformer.h"))
    L = len(blocks)
    W_E = take(at(model, "transformer.wte").weight, dtype)
    V = W_E.shape[0]
    W_pos = take(at(model, "transformer.wpe").weight, dtype)
    n_ctx = W_pos.shape[0]
    has_mlp = True
    d_mlp = int(hf.n_inner) if getattr(hf, "n_inner", None) else 4 * d
    Ws: dict[str, list[torch.Tensor]] = {
        k: [] for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_in", "b_in", "W_out", "b_out")
    }
    ln1: list[Norm] = []
    ln2: list[Norm] = []
    eps: list[float] = []
    for layer, block in enumerate(blocks):
        attn = at(block, "attn")
        W = take(at(attn, "c_attn").weight, dtype)  # Conv1D: [d_model, 3 * d_model]
        check_shape(f"transformer.h.{layer}.attn.c_attn.weight", W, (d, 3 * d))
        b = bias_or_zeros(at(attn, "c_attn"), 3 * d, dtype, W)
        for i, letter in enumerate("QKV"):
            Ws[f"W_{letter}"].append(W[:, i * d : (i + 1) * d].reshape(d, H, dh).permute(1, 0, 2))
            Ws[f"b_{letter}"].append(b[i * d : (i + 1) * d].reshape(H, dh))
        W_O = take(at(attn, "c_proj").weight, dtype)  # [H * dh, d_model]
        check_shape(f"transformer.h.{layer}.attn.c_proj.weight", W_O, (d, d))
        Ws["W_O"].append(W_O.reshape(H, dh, d))
        Ws["b_O"].append(bias_or_zeros(at(attn, "c_proj"), d, dtype, W))
        W_in = take(at(block, "mlp.c_fc").weight, dtype)  # [d_model, d_mlp]
        check_shape(f"transformer.h.{layer}.mlp.c_fc.weight", W_in, (d, d_mlp))
        Ws["W_in"].append(W_in)
        Ws["b_in"].append(bias_or_zeros(at(block, "mlp.c_fc"), d_mlp, dtype, W))
        W_out = take(at(block, "mlp.c_proj").weight, dtype)  # [d_mlp, d_model]
        check_shape(f"transformer.h.{layer}.mlp.c_proj.weight", W_out, (d_mlp, d))
        Ws["W_out"].append(W_out)
        Ws["b_out"].append(bias_or_zeros(at(block, "mlp.c_proj"), d, dtype, W))
        n1, e1 = _layer_norm(at(block, "ln_1"), f"transformer.h.{layer}.ln_1", dtype)
        n2, e2 = _layer_norm(at(block, "ln_2"), f"transformer.h.{layer}.ln_2", dtype)
        ln1.append(n1)
        ln2.append(n2)
        eps += [e1, e2]
    ln_f, e_f = _layer_norm(at(model, "transformer.ln_f"), "transformer.ln_f", dtype)
    eps.append(e_f)
    head = unwrap(model.get_output_embeddings())  # lm_head: [d_vocab, d_model], tied to wte by default
    W_U = take(head.weight, dtype).T.contiguous()
    check_shape("lm_head.weight (transposed)", W_U, (d, V))
    weights: dict[str, torch.Tensor] = {"W_E": W_E, "W_pos": W_pos, "W_U": W_U}
    b_U = linear_bias(head, dtype)
    if b_U is not None:
        weights["b_U"] = b_U
    weights |= {k: torch.stack(v) for k, v in Ws.items()}
    default_scale = math.sqrt(dh) if getattr(hf, "scale_attn_weights", True) else 1.0
    scales = _scales([at(block, "attn") for block in blocks], default_scale)
    if not any(hasattr(at(block, "attn"), "scaling") for block in blocks) and getattr(
        hf, "scale_attn_by_inverse_layer_idx", False
    ):
        scales = [s * (layer + 1) for layer, s in enumerate(scales)]
    shape = {
        "n_layers": L,
        "n_heads": H,
        "d_model": d,
        "d_head": dh,
        "d_vocab": V,
        "n_ctx": n_ctx,
        "positional_embedding_type": "standard",
        "normalization": "ln_pre",
        "has_mlp": has_mlp,
        "d_mlp": d_mlp,
        "act_fn": _activation(getattr(hf, "activation_function", "gelu_new"), arch),
        "parallel_attn_mlp": False,
        "ln_eps": _single_eps(eps, arch),
        "architecture": "gpt2",
    }
    return shape, RawModel(weights, ln1, ln2, ln_f, scales)


def _neox_rotary(model: Any, d_head: int) -> tuple[int, float]:
    """``(rotary_dim, base)`` of a GPT-NeoX model, refusing scaled or non-default rotary."""
    hf = model.config
    params = getattr(hf, "rope_parameters", None)
    if isinstance(params, dict):
        rope_type = params.get("rope_type", params.get("type", "default"))
        base = float(params.get("rope_theta", getattr(hf, "rotary_emb_base", 10_000.0)))
        fraction = float(params.get("partial_rotary_factor", getattr(hf, "rotary_pct", 1.0)))
    else:
        scaling = getattr(hf, "rope_scaling", None)
        rope_type = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else "default"
        base = float(getattr(hf, "rotary_emb_base", 10_000.0))
        fraction = float(getattr(hf, "rotary_pct", 1.0))
    if rope_type != "default":
        raise UnsupportedArchitectureError(
            f"model.config: GPTNeoXForCausalLM with rotary scaling {rope_type!r} is not supported; only default rotary is"
        )
    rotary_dim = int(d_head * fraction)
    emb = unwrap(getattr(unwrap(getattr(model, "gpt_neox", None)), "rotary_emb", None))
    inv_freq = getattr(emb, "inv_freq", None)
    if isinstance(inv_freq, torch.Tensor):
        # What the model actually uses wins over what the config says.
        rotary_dim = 2 * int(inv_freq.numel())
        if float(getattr(emb, "attention_scaling", 1.0)) != 1.0:
            raise UnsupportedArchitectureError(
                "model.gpt_neox.rotary_emb: rotary with attention scaling is not supported"
            )
        expected = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
        if not torch.allclose(inv_freq.detach().cpu().double(), expected, rtol=1e-5, atol=0.0):
            raise UnsupportedArchitectureError(
                "model.gpt_neox.rotary_emb.inv_freq: expected the default rotary frequencies base^(-2i/rotary_dim) "
                f"with base={base}, rotary_dim={rotary_dim}; got other frequencies"
            )
    if rotary_dim % 2 or rotary_dim > d_head:
        raise UnsupportedArchitectureError(
            f"model.config: rotary_dim={rotary_dim} must be even and at most d_head={d_head}"
        )
    return rotary_dim, base


def read_neox(model: Any, dtype: torch.dtype) -> tuple[dict[str, Any], RawModel]:
    hf = model.config
    arch = "GPTNeoXForCausalLM"
    d, H = int(hf.hidden_size), int(hf.num_attention_heads)
    if d % H:
        raise UnsupportedArchitectureError(
            f"model.config: hidden_size={d} is not a multiple of num_attention_heads={H}"
        )
    dh = d // H
    head_dim = getattr(hf, "head_dim", None)
    if head_dim is not None and int(head_dim) != dh:
        raise UnsupportedArchitectureError(
            f"model.config: head_dim={head_dim} differs from hidden_size / num_attention_heads = {dh}"
        )
    rotary_dim, base = _neox_rotary(model, dh)
    core = at(model, "gpt_neox")
    layers = list(core.layers)
    L = len(layers)
    W_E = take(at(core, "embed_in").weight, dtype)
    V = W_E.shape[0]
    d_mlp = int(hf.intermediate_size)
    Ws: dict[str, list[torch.Tensor]] = {k: [] for k in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_out")}
    bs: dict[str, list[torch.Tensor | None]] = {k: [] for k in ("b_Q", "b_K", "b_V", "b_O", "b_in", "b_out")}
    ln1: list[Norm] = []
    ln2: list[Norm] = []
    eps: list[float] = []
    for layer, block in enumerate(layers):
        attn = at(block, "attention")
        prefix = f"gpt_neox.layers.{layer}"
        W = take(at(attn, "query_key_value").weight, dtype)  # nn.Linear: [3 * d_model, d_model], per head [q | k | v]
        check_shape(f"{prefix}.attention.query_key_value.weight", W, (3 * d, d))
        W = W.T.reshape(d, H, 3, dh)
        b = linear_bias(at(attn, "query_key_value"), dtype)
        b3 = b.reshape(H, 3, dh) if b is not None else None
        for i, letter in enumerate("QKV"):
            Ws[f"W_{letter}"].append(W[:, :, i, :].permute(1, 0, 2))
            bs[f"b_{letter}"].append(b3[:, i, :] if b3 is not None else None)
        W_O = take(at(attn, "dense").weight, dtype)  # [d_model, H * dh]
        check_shape(f"{prefix}.attention.dense.weight", W_O, (d, d))
        Ws["W_O"].append(W_O.T.reshape(H, dh, d))
        bs["b_O"].append(linear_bias(at(attn, "dense"), dtype))
        W_in = take(at(block, "mlp.dense_h_to_4h").weight, dtype)
        check_shape(f"{prefix}.mlp.dense_h_to_4h.weight", W_in, (d_mlp, d))
        Ws["W_in"].append(W_in.T)
        bs["b_in"].append(linear_bias(at(block, "mlp.dense_h_to_4h"), dtype))
        W_out = take(at(block, "mlp.dense_4h_to_h").weight, dtype)
        check_shape(f"{prefix}.mlp.dense_4h_to_h.weight", W_out, (d, d_mlp))
        Ws["W_out"].append(W_out.T)
        bs["b_out"].append(linear_bias(at(block, "mlp.dense_4h_to_h"), dtype))
        n1, e1 = _layer_norm(at(block, "input_layernorm"), f"{prefix}.input_layernorm", dtype)
        n2, e2 = _layer_norm(at(block, "post_attention_layernorm"), f"{prefix}.post_attention_layernorm", dtype)
        ln1.append(n1)
        ln2.append(n2)
        eps += [e1, e2]
    ln_f, e_f = _layer_norm(at(core, "final_layer_norm"), "gpt_neox.final_layer_norm", dtype)
    eps.append(e_f)
    head = unwrap(model.get_output_embeddings())  # ``embed_out`` before transformers 5, ``lm_head`` since
    W_U = take(head.weight, dtype).T.contiguous()
    check_shape("output embeddings (embed_out / lm_head) weight, transposed", W_U, (d, V))
    weights: dict[str, torch.Tensor] = {"W_E": W_E, "W_U": W_U}
    b_U = linear_bias(head, dtype)
    if b_U is not None:
        weights["b_U"] = b_U
    weights |= {k: torch.stack(v).contiguous() for k, v in Ws.items()}
    for name, values in bs.items():
        present = [v for v in values if v is not None]
        if len(present) == len(values) and values:
            weights[name] = torch.stack(present).contiguous()
        elif present:
            raise UnsupportedArchitectureError(f"model: {arch} with {name} in some layers only is not supported")
    scales = _scales([at(block, "attention") for block in layers], math.sqrt(dh))
    shape = {
        "n_layers": L,
        "n_heads": H,
        "d_model": d,
        "d_head": dh,
        "d_vocab": V,
        "n_ctx": int(getattr(hf, "max_position_embeddings", 2048)),
        "positional_embedding_type": "rotary" if rotary_dim > 0 else "none",
        "rotary_dim": rotary_dim or None,
        "rotary_base": base,
        "normalization": "ln_pre",
        "has_mlp": True,
        "d_mlp": d_mlp,
        "act_fn": _activation(getattr(hf, "hidden_act", "gelu"), arch),
        "parallel_attn_mlp": bool(getattr(hf, "use_parallel_residual", True)),
        "ln_eps": _single_eps(eps, arch),
        "architecture": "gpt_neox",
    }
    return shape, RawModel(weights, ln1, ln2, ln_f, scales)
