"""Hugging Face decoder families with RMS norms, rotary positions and grouped-query attention.

Llama (2, 3, 3.1, 3.2; also TinyLlama and SmolLM 1/2), Mistral, Qwen 2/2.5,
Qwen 3, Gemma, Gemma 2, Gemma 3 (text), Phi-3, OLMo 2, OLMo 3 and SmolLM 3 share
one layout (``model.embed_tokens``, ``model.layers[i].self_attn.{q,k,v,o}_proj``,
``model.norm``, ``lm_head``) and differ in a handful of features, each described
by a :class:`Family`. How each feature becomes the canonical model (DESIGN.md §3a):

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
from collections.abc import Callable, Iterator
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


FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("Llama 2/3/3.1/3.2, TinyLlama, SmolLM"),
    "MistralForCausalLM": Family("Mistral"),
    "Qwen2ForCausalLM": Family("Qwen 2 / 2.5"),
    "Qwen3ForCausalLM": Family("Qwen 3", qk_norm="head"),
    "GemmaForCausalLM": Family("Gemma", norm_offset=True, embed_scale=True),
    "Gemma2ForCausalLM": Family("Gemma 2", norm_offset=True, embed_scale=True, placement="sandwich"),
    "Gemma3ForCausalLM": Family("Gemma 3 (text)", norm_offset=True, embed_scale=True, placement="sandwich", qk_norm="head"),
    "Phi3ForCausalLM": Family("Phi-3", fused=True),
    "Olmo2ForCausalLM": Family("OLMo 2", placement="post", qk_norm="all"),
    "Olmo3ForCausalLM": Family("OLMo 3", placement="post", qk_norm="all"),
    "SmolLM3ForCausalLM": Family("SmolLM 3"),
}
"""The decoder classes :func:`~circuitwidgets.from_hf` reads through :func:`read_decoder`."""

#: Rotary types whose frequencies are fixed once the model is built.
_STATIC_ROPE = ("default", "linear", "llama3", "yarn", "longrope", "proportional")
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "gelu_new": "gelu_new", "relu": "relu"}


def _norm_multiplier(module: Any, name: str, family: Family, work: torch.dtype) -> tuple[torch.Tensor, float]:
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


def _rope_types(hf: Any) -> set[str]:
    params = getattr(hf, "rope_parameters", None) or getattr(hf, "rope_scaling", None) or {}
    if not isinstance(params, dict):
        return {"default"}
    nested = [v for v in params.values() if isinstance(v, dict)]
    blocks = nested if nested else [params]
    return {str(b.get("rope_type", b.get("type", "default"))) for b in blocks}


def _layer_type(hf: Any, attn: Any, layer: int) -> str | None:
    kind = getattr(attn, "layer_type", None) or getattr(attn, "attention_type", None)
    if kind is None and isinstance(getattr(hf, "layer_types", None), (list, tuple)):
        kind = hf.layer_types[layer]
    return str(kind) if kind is not None else None


def _rotary(model: Any, attn: Any, hf: Any, layer: int) -> tuple[torch.Tensor | None, float]:
    """``(inverse frequencies [r/2] or None for a NoPE layer, attention scaling)`` of one layer."""
    if getattr(attn, "use_rope", True) in (0, False):
        return None, 1.0
    emb = unwrap(at(model, "model.rotary_emb"))
    freq = getattr(emb, "inv_freq", None)
    scaling = getattr(emb, "attention_scaling", 1.0)
    if not isinstance(freq, torch.Tensor):
        kind = _layer_type(hf, attn, layer)
        freq = getattr(emb, f"{kind}_inv_freq", None)
        scaling = getattr(emb, f"{kind}_attention_scaling", 1.0)
        if not isinstance(freq, torch.Tensor):
            raise UnsupportedArchitectureError(f"model.model.rotary_emb: found no inverse frequencies for layer {layer} ({kind})")
    return freq.detach().to("cpu", torch.float32), float(scaling)


def _split_heads(weight: torch.Tensor, heads: int, d_head: int, d_model: int) -> torch.Tensor:
    """An ``nn.Linear`` weight ``[heads · d_head, d_model]`` as ``[heads, d_model, d_head]``."""
    return weight.T.reshape(d_model, heads, d_head).permute(1, 0, 2)


Part = tuple[str, "torch.Tensor | None"]


def _projections(attn: Any, family: Family, H: int, G: int, dh: int, d: int, work: torch.dtype, prefix: str) -> Iterator[Part]:
    """``W_Q, W_K, W_V, W_O`` and biases of one attention module, per head, one at a time (bounded memory)."""
    if family.fused:
        qkv = unwrap(at(attn, "qkv_proj"))
        W = qkv.weight.detach().to(work, copy=True)
        check_shape(f"{prefix}.qkv_proj.weight", W, ((H + 2 * G) * dh, d))
        parts = torch.split(W, [H * dh, G * dh, G * dh])
        bias = linear_bias(qkv, work)
        biases = torch.split(bias, [H * dh, G * dh, G * dh]) if bias is not None else (None, None, None)
        for letter, part, b, n in zip("QKV", parts, biases, (H, G, G), strict=True):
            yield f"W_{letter}", _split_heads(part, n, dh, d)
            yield f"b_{letter}", b.reshape(n, dh) if b is not None else None
    else:
        for letter, n in zip("QKV", (H, G, G), strict=True):
            proj = unwrap(at(attn, f"{letter.lower()}_proj"))
            W = proj.weight.detach().to(work, copy=True)
            check_shape(f"{prefix}.{letter.lower()}_proj.weight", W, (n * dh, d))
            yield f"W_{letter}", _split_heads(W, n, dh, d)
            b = linear_bias(proj, work)
            yield f"b_{letter}", b.reshape(n, dh) if b is not None else None
    o = unwrap(at(attn, "o_proj"))
    W_O = o.weight.detach().to(work, copy=True)
    check_shape(f"{prefix}.o_proj.weight", W_O, (d, H * dh))
    yield "W_O", W_O.T.reshape(H, dh, d)
    yield "b_O", linear_bias(o, work)


def _mlp(block: Any, family: Family, d: int, work: torch.dtype, prefix: str) -> Iterator[Part]:
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


def _fold_input_norm(
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


class _Stack:
    """Per-layer tensors written into preallocated ``[n_layers, ...]`` tensors of the target dtype.

    Stacking lists would hold every layer twice; this holds each once.
    """

    def __init__(self, n_layers: int, dtype: torch.dtype, device: torch.device) -> None:
        self.n_layers, self.dtype, self.device = n_layers, dtype, device
        self.out: dict[str, torch.Tensor] = {}
        self.missing: dict[str, list[int]] = {}

    def put(self, name: str, layer: int, value: torch.Tensor | None) -> None:
        if value is None:
            self.missing.setdefault(name, []).append(layer)
            return
        dtype = torch.float32 if name == "rotary_freq" else self.dtype
        if name not in self.out:
            self.out[name] = torch.zeros((self.n_layers, *value.shape), dtype=dtype, device=self.device)
        self.out[name][layer] = value.to(device=self.device, dtype=dtype)

    def result(self, arch: str) -> dict[str, torch.Tensor]:
        for name, layers in self.missing.items():
            if name in self.out and name != "rotary_freq":
                raise UnsupportedArchitectureError(f"model: {arch} with {name} in some layers only (not {layers}) is not supported")
        return self.out


def _activation(hf: Any, arch: str) -> str:
    name = getattr(hf, "hidden_activation", None) or getattr(hf, "hidden_act", None)
    mapped = _ACTIVATIONS.get(str(name))
    if mapped is None or mapped not in ACTIVATIONS:
        raise UnsupportedArchitectureError(f"model.config: {arch} with activation {name!r} is not supported; supported are {sorted(_ACTIVATIONS)}")
    return mapped


def _refuse_unsupported(hf: Any, arch: str) -> None:
    rope = _rope_types(hf) - set(_STATIC_ROPE)
    if rope:
        raise UnsupportedArchitectureError(
            f"model.config: {arch} with rotary scaling {sorted(rope)} is not supported: its frequencies change with the "
            f"sequence length; supported rotary types are {list(_STATIC_ROPE)}"
        )
    for flag in ("num_experts", "num_local_experts"):
        if getattr(hf, flag, None):
            raise UnsupportedArchitectureError(f"model.config: {arch} with a mixture of experts ({flag}) is not supported")


def read_decoder(
    model: Any, family: Family, work: torch.dtype, target: torch.dtype, device: torch.device,
    release: Callable[[Any], None] | None = None,
) -> tuple[dict[str, Any], dict[str, torch.Tensor], float]:
    """``(shape, canonical weights in ``target`` dtype, shared score divisor)`` of one decoder model.

    Each layer is read in ``work`` dtype, folded, and written into preallocated
    tensors; ``release(block)``, when given, is called after a layer is read
    (the directory loader frees the source's layer there, so a conversion
    never holds two copies of the model).
    """
    hf = model.config
    arch = type(unwrap(model)).__name__
    _refuse_unsupported(hf, arch)
    core = at(model, "model")
    blocks = list(core.layers)
    L = len(blocks)
    d, H = int(hf.hidden_size), int(hf.num_attention_heads)
    G = int(getattr(hf, "num_key_value_heads", None) or H)
    dh = int(getattr(hf, "head_dim", None) or d // H)
    W_E = unwrap(at(core, "embed_tokens")).weight.detach()
    V = W_E.shape[0]
    stack = _Stack(L, target, device)
    eps: set[float] = set()
    scales: list[float] = []
    windows: list[int | None] = []
    caps: set[float | None] = set()
    rotary_dims: set[int] = set()
    for layer, block in enumerate(blocks):
        prefix = f"model.layers.{layer}"
        attn = unwrap(at(block, "self_attn"))
        parts: dict[str, torch.Tensor | None] = {}
        pre_attn = pre_mlp = None
        if family.placement in ("pre", "sandwich"):
            pre_attn, e = _norm_multiplier(at(block, "input_layernorm"), f"{prefix}.input_layernorm", family, work)
            eps.add(e)
            mlp_norm = "pre_feedforward_layernorm" if family.placement == "sandwich" else "post_attention_layernorm"
            pre_mlp, e = _norm_multiplier(at(block, mlp_norm), f"{prefix}.{mlp_norm}", family, work)
            eps.add(e)
        if family.placement in ("sandwich", "post"):
            for name, attr in (("post_attn_norm", "post_attention_layernorm"), ("post_mlp_norm", "post_feedforward_layernorm")):
                w, e = _norm_multiplier(at(block, attr), f"{prefix}.{attr}", family, work)
                eps.add(e)
                parts[name] = w
        if family.qk_norm is not None:
            qn, e = _norm_multiplier(at(attn, "q_norm"), f"{prefix}.self_attn.q_norm", family, work)
            kn, e2 = _norm_multiplier(at(attn, "k_norm"), f"{prefix}.self_attn.k_norm", family, work)
            eps |= {e, e2}
            parts["q_norm"] = qn.expand(H, dh) if family.qk_norm == "head" else qn.reshape(H, dh)
            parts["k_norm"] = kn.expand(G, dh) if family.qk_norm == "head" else kn.reshape(G, dh)
        freq, rope_scaling = _rotary(model, attn, hf, layer)
        if freq is not None:
            rotary_dims.add(2 * freq.numel())
        scaling = getattr(attn, "scaling", None)
        divisor = 1.0 / float(scaling) if isinstance(scaling, (int, float)) and scaling else math.sqrt(dh)
        scales.append(divisor / rope_scaling**2)
        window = getattr(attn, "sliding_window", None) if hasattr(attn, "sliding_window") else getattr(hf, "sliding_window", None)
        windows.append(int(window) if window else None)
        caps.add(getattr(attn, "attn_logit_softcapping", None) or None)
        for name, value in parts.items():
            stack.put(name, layer, value)
        stack.put("rotary_freq", layer, freq)
        for name, value in _projections(attn, family, H, G, dh, d, work, f"{prefix}.self_attn"):
            stack.put(name, layer, _fold_input_norm(name, value, pre_attn, pre_mlp))
        for name, value in _mlp(block, family, d, work, prefix):
            stack.put(name, layer, _fold_input_norm(name, value, pre_attn, pre_mlp))
        if release is not None:
            release(block)
    if len(rotary_dims) > 1:
        raise UnsupportedArchitectureError(f"model: {arch} with rotary widths {sorted(rotary_dims)} differing by layer is not supported")
    if len(eps) > 1:
        raise UnsupportedArchitectureError(f"model: {arch} with norms of different eps {sorted(eps)} is not supported")
    if len(caps) > 1:
        raise UnsupportedArchitectureError(f"model: {arch} with attention soft-caps {sorted(map(str, caps))} differing by layer is not supported")
    weights = stack.result(arch)
    if "rotary_freq" in weights and not bool((weights["rotary_freq"] != 0).any()):
        del weights["rotary_freq"]
    final, e = _norm_multiplier(at(core, "norm"), "model.norm", family, work)
    eps.add(e)
    head = unwrap(model.get_output_embeddings())
    check_shape("lm_head.weight", head.weight, (V, d))
    weights["W_U"] = _unembedding(head.weight.detach(), final, work, target, device)  # before W_E may be scaled in place
    embed_scale = math.sqrt(d) if family.embed_scale else None
    weights["W_E"] = _embedding(W_E, embed_scale, target, device, in_place=release is not None)
    b_U = linear_bias(head, target)
    if b_U is not None:
        weights["b_U"] = b_U.to(device)
    attn_scale = _equalise_scales(weights, scales)
    longrope = "longrope" in _rope_types(hf)
    n_ctx = int(getattr(hf, "original_max_position_embeddings", None) or hf.max_position_embeddings) if longrope else int(getattr(hf, "max_position_embeddings", 4096))
    cap = next(iter(caps)) if caps else None
    shape = {
        "n_layers": L, "n_heads": H, "d_model": d, "d_head": dh, "d_vocab": V, "n_ctx": n_ctx,
        "positional_embedding_type": "rotary" if rotary_dims else "none",
        "rotary_dim": next(iter(rotary_dims)) if rotary_dims else None,
        "rotary_base": float(getattr(hf, "rope_theta", None) or 10_000.0),
        "normalization": "rms_post" if family.placement == "post" else "rms_pre",
        "post_norm": family.placement == "sandwich",
        "has_mlp": True, "d_mlp": int(weights["W_in"].shape[-1]), "act_fn": _activation(hf, arch), "gated_mlp": True,
        "parallel_attn_mlp": False, "ln_eps": next(iter(eps)),
        "architecture": arch, "n_kv_heads": G if G != H else None, "qk_norm": family.qk_norm,
        "attn_softcap": float(cap) if cap else None,
        "final_softcap": float(getattr(hf, "final_logit_softcapping", None) or 0) or None,
        "sliding_windows": tuple(windows) if any(w is not None for w in windows) else None,
    }
    return shape, weights, attn_scale


#: Bytes of float32 scratch per block when folding the final norm into the unembedding.
_BLOCK_BYTES = 2**26


def _unembedding(head: torch.Tensor, final: torch.Tensor, work: torch.dtype, target: torch.dtype, device: torch.device) -> torch.Tensor:
    """``W_U = diag(final) headᵀ`` ``[d_model, d_vocab]``, built in blocks of vocabulary rows.

    A 128K–256K vocabulary in float32 would be gigabytes; blocks keep the
    scratch at :data:`_BLOCK_BYTES`.
    """
    V, d = head.shape
    out = torch.empty(d, V, dtype=target, device=device)
    block = max(1, _BLOCK_BYTES // (d * 4))
    for start in range(0, V, block):
        rows = head[start : start + block].to(work)
        out[:, start : start + block] = (final[:, None] * rows.T).to(device=device, dtype=target)
    return out


def _embedding(W_E: torch.Tensor, scale: float | None, target: torch.dtype, device: torch.device, in_place: bool) -> torch.Tensor:
    """``W_E`` (times Gemma's ``√d_model``, rounded to the weights' dtype as the source does) in ``target``.

    With ``in_place`` (the directory loader, which owns the source model) the
    source's own tensor is used when dtype and device allow, so the largest
    matrix of a 128K–256K-vocabulary model is never held twice.
    """
    reuse = in_place and W_E.dtype == target and W_E.device == device
    out = W_E if reuse else W_E.to(device=device, dtype=target, copy=True)
    if scale is not None:
        out.mul_(torch.tensor(scale, dtype=W_E.dtype).to(target))
    return out


def _equalise_scales(weights: dict[str, torch.Tensor], divisors: list[float]) -> float:
    """Give every layer layer 0's score divisor by rescaling its queries; return that divisor.

    ``(q / s_l) · k = (q · s_0 / s_l) · k / s_0``. With QK-norm the queries are
    scaled after their norm, so the factor goes into ``q_norm`` instead of ``W_Q``.
    """
    base = divisors[0] if divisors else 1.0
    for layer, s in enumerate(divisors):
        if math.isclose(s, base, rel_tol=1e-12):
            continue
        ratio = base / s
        for name in (("q_norm",) if "q_norm" in weights else ("W_Q", "b_Q")):
            if name in weights:
                weights[name][layer] *= ratio
    return base
