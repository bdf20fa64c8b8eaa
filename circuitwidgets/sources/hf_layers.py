"""Reading the modules of one Hugging Face decoder layer: norms, rotary frequencies, projections, gated MLPs.

Shared by the decoder families of :mod:`circuitwidgets.sources.hf_decoders`
and Gemma 4 (:mod:`circuitwidgets.sources.hf_gemma4`). Each reader hands over
fresh copies in the work dtype, per head where heads matter, one tensor at a
time so that a conversion holds one layer at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from circuitwidgets.errors import UnsupportedArchitectureError
from circuitwidgets.model.config import ACTIVATIONS
from circuitwidgets.sources._convert import check_shape
from circuitwidgets.sources.hf_modules import at, linear_bias, unwrap


@dataclass(frozen=True)
class Family:
    """What distinguishes one decoder family's layout from Llama's."""

    label: str
    norm_offset: bool = False  # Gemma's RMSNorm multiplies by (1 + w)
    embed_scale: bool = False  # Gemma scales embeddings by √d_model
    placement: str = "pre"  # "pre" (Llama), "sandwich" (Gemma 2/3: before and after), "post" (OLMo 2/3: after only)
    qk_norm: str | None = None  # "head" (Qwen 3, Gemma 3) or "all" (OLMo 2/3)
    fused: bool = False  # Phi-3: qkv_proj and gate_up_proj


#: Rotary types whose frequencies are fixed once the model is built.
STATIC_ROPE = ("default", "linear", "llama3", "yarn", "longrope", "proportional")
_ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "gelu_new": "gelu_new",
    "relu": "relu",
}


def norm_multiplier(module: Any, name: str, family: Family, work: torch.dtype) -> tuple[torch.Tensor, float]:
    """The multiplier an RMS norm applies after ``x / rms(x)`` (``w``, or ``1 + w`` for Gemma) and its eps."""
    module = unwrap(module)
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise UnsupportedArchitectureError(f"{name}: expected an RMS norm with a weight, got {type(module).__name__}")
    if isinstance(getattr(module, "bias", None), torch.Tensor):
        raise UnsupportedArchitectureError(f"{name}: an RMS norm with a bias is not supported")
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if not isinstance(eps, (int, float)):
        raise UnsupportedArchitectureError(f"{name}: expected an RMS norm with an eps, got {type(module).__name__}")
    w = weight.detach().to(work)
    return (1.0 + w if family.norm_offset else w), float(eps)


def rope_types(hf: Any) -> set[str]:
    """The rotary types a config names (``rope_type`` of each layer type's parameters, or of the one block)."""
    params = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
    if not isinstance(params, dict):
        return {"default"}
    nested = [v for v in params.values() if isinstance(v, dict)]
    blocks = nested if nested else [params]
    return {str(b.get("rope_type", b.get("type", "default"))) for b in blocks}


def layer_type(hf: Any, attn: Any, layer: int) -> str | None:
    """``"sliding_attention"``, ``"full_attention"``, ... of ``layer`` (from its module, else ``config.layer_types``), or ``None``."""
    kind = getattr(attn, "layer_type", None) or getattr(attn, "attention_type", None)
    if kind is None and isinstance(getattr(hf, "layer_types", None), (list, tuple)):
        kind = hf.layer_types[layer]
    return str(kind) if kind is not None else None


def rotary(model: Any, attn: Any, hf: Any, layer: int) -> tuple[torch.Tensor | None, float]:
    """``(inverse frequencies [r/2] or None for a NoPE layer, attention scaling)`` of one layer."""
    if getattr(attn, "use_rope", True) in (0, False):
        return None, 1.0
    emb = unwrap(at(model, "model.rotary_emb"))
    freq = getattr(emb, "inv_freq", None)
    scaling = getattr(emb, "attention_scaling", 1.0)
    if not isinstance(freq, torch.Tensor):
        kind = layer_type(hf, attn, layer)
        freq = getattr(emb, f"{kind}_inv_freq", None)
        scaling = getattr(emb, f"{kind}_attention_scaling", 1.0)
        if not isinstance(freq, torch.Tensor):
            raise UnsupportedArchitectureError(
                f"model.model.rotary_emb: found no inverse frequencies for layer {layer} ({kind})"
            )
    return freq.detach().to("cpu", torch.float32), float(scaling)


def split_heads(weight: torch.Tensor, heads: int, d_head: int, d_model: int) -> torch.Tensor:
    """An ``nn.Linear`` weight ``[heads · d_head, d_model]`` as ``[heads, d_model, d_head]``."""
    return weight.T.reshape(d_model, heads, d_head).permute(1, 0, 2)


Part = tuple[str, "torch.Tensor | None"]


def projections(
    attn: Any, family: Family, H: int, G: int, dh: int, d: int, work: torch.dtype, prefix: str
) -> Iterator[Part]:
    """``W_Q, W_K, W_V, W_O`` and biases of one attention module, per head, one at a time (bounded memory)."""
    if family.fused:
        qkv = unwrap(at(attn, "qkv_proj"))
        W = qkv.weight.detach().to(work, copy=True)
        check_shape(f"{prefix}.qkv_proj.weight", W, ((H + 2 * G) * dh, d))
        parts = torch.split(W, [H * dh, G * dh, G * dh])
        bias = linear_bias(qkv, work)
        biases = torch.split(bias, [H * dh, G * dh, G * dh]) if bias is not None else (None, None, None)
        for letter, part, b, n in zip("QKV", parts, biases, (H, G, G), strict=True):
            yield f"W_{letter}", split_heads(part, n, dh, d)
            yield f"b_{letter}", b.reshape(n, dh) if b is not None else None
    else:
        for letter, n in zip("QKV", (H, G, G), strict=True):
            proj = unwrap(at(attn, f"{letter.lower()}_proj"))
            W = proj.weight.detach().to(work, copy=True)
            check_shape(f"{prefix}.{letter.lower()}_proj.weight", W, (n * dh, d))
            yield f"W_{letter}", split_heads(W, n, dh, d)
            b = linear_bias(proj, work)
            yield f"b_{letter}", b.reshape(n, dh) if b is not None else None
    o = unwrap(at(attn, "o_proj"))
    W_O = o.weight.detach().to(work, copy=True)
    check_shape(f"{prefix}.o_proj.weight", W_O, (d, H * dh))
    yield "W_O", W_O.T.reshape(H, dh, d)
    yield "b_O", linear_bias(o, work)


def gated_mlp(block: Any, family: Family, d: int, work: torch.dtype, prefix: str) -> Iterator[Part]:
    """``W_gate, W_in [d_model, d_mlp]``, ``W_out [d_mlp, d_model]`` and biases of one gated MLP, one at a time."""
    mlp = unwrap(at(block, "mlp"))
    if family.fused:
        gate_up = unwrap(at(mlp, "gate_up_proj"))
        W = gate_up.weight.detach()
        check_shape(f"{prefix}.mlp.gate_up_proj.weight", W, (W.shape[0], d))
        gate, up = W.chunk(2, dim=0)
        yield "W_gate", gate.to(work, copy=True).T
        yield "W_in", up.to(work, copy=True).T
        b = linear_bias(gate_up, work)
        yield "b_gate", b.chunk(2)[0] if b is not None else None
        yield "b_in", b.chunk(2)[1] if b is not None else None
    else:
        for name, attr in (("W_gate", "gate_proj"), ("W_in", "up_proj")):
            proj = unwrap(at(mlp, attr))
            W = proj.weight.detach()
            check_shape(f"{prefix}.mlp.{attr}.weight", W, (W.shape[0], d))
            yield name, W.to(work, copy=True).T
            yield "b_" + name[2:], linear_bias(proj, work)
    down = unwrap(at(mlp, "down_proj"))
    W_out = down.weight.detach()
    check_shape(f"{prefix}.mlp.down_proj.weight", W_out, (d, W_out.shape[1]))
    yield "W_out", W_out.to(work, copy=True).T
    yield "b_out", linear_bias(down, work)


def fold_input_norm(
    name: str, value: torch.Tensor | None, pre_attn: torch.Tensor | None, pre_mlp: torch.Tensor | None
) -> torch.Tensor | None:
    """A weight with the RMS norm before its sublayer folded into its rows (``w[:, None] · W``), in place.

    The readers hand over fresh copies in the work dtype, so scaling in place
    never touches the source model and needs no second copy.
    """
    if value is None:
        return None
    if pre_attn is not None and name in ("W_Q", "W_K", "W_V"):
        return value.mul_(pre_attn[None, :, None])
    if pre_mlp is not None and name in ("W_gate", "W_in"):
        return value.mul_(pre_mlp[:, None])
    return value


def activation_name(hf: Any, arch: str) -> str:
    """Our name (:data:`~circuitwidgets.model.ACTIVATIONS`) of the config's MLP activation, or a typed error."""
    name = getattr(hf, "hidden_activation", None) or getattr(hf, "hidden_act", None)
    mapped = _ACTIVATIONS.get(str(name))
    if mapped is None or mapped not in ACTIVATIONS:
        raise UnsupportedArchitectureError(
            f"model.config: {arch} with activation {name!r} is not supported; supported are {sorted(_ACTIVATIONS)}"
        )
    return mapped


def refuse_unsupported(hf: Any, arch: str) -> None:
    """Refuse rotary types whose frequencies change with the sequence length, and mixtures of experts."""
    rope = rope_types(hf) - set(STATIC_ROPE)
    if rope:
        raise UnsupportedArchitectureError(
            f"model.config: {arch} with rotary scaling {sorted(rope)} is not supported: its frequencies change with the "
            f"sequence length; supported rotary types are {list(STATIC_ROPE)}"
        )
    for flag in ("num_experts", "num_local_experts"):
        if getattr(hf, flag, None):
            raise UnsupportedArchitectureError(
                f"model.config: {arch} with a mixture of experts ({flag}) is not supported"
            )
