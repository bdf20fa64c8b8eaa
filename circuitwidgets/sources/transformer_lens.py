"""TransformerLens models as a :class:`~circuitwidgets.CircuitModel`.

Accepted objects:

- ``TransformerBridge`` (TransformerLens 4). A bridge over a Hugging Face
  model (``boot_transformers``, or ``build_bridge_from_module`` offline) is
  read through that model, so it must be a supported Hugging Face
  architecture. Bridges over the RMS-norm decoder families (Llama, Mistral,
  Qwen, Gemma, Phi-3, OLMo, SmolLM 3) are read wholly through the Hugging Face
  modules they run (:mod:`circuitwidgets.sources.hf_decoders`); its weights are read as they are now, processed
  (``enable_compatibility_mode()``) or not. A bridge over a TL-native model
  (``boot_native``) is read through the bridge's ``W_Q``, ``W_K``, ... accessors.
- ``HookedTransformer`` (TransformerLens 3 and earlier), when that version is
  installed.

Read through the accessors (TL-native bridges and ``HookedTransformer``),
folded exactly as :mod:`circuitwidgets.sources._convert` describes:

- ``blocks[l].ln1`` weight and bias into ``W_Q, W_K, W_V`` and ``b_Q, b_K, b_V``;
- ``blocks[l].ln2`` into ``W_in, b_in``;
- ``ln_final`` into ``W_U, b_U``.

``LNPre`` norms (no parameters, TransformerLens's folded form) need no folding;
models without normalisation keep ``normalization="none"``. RMS norms are
refused (our forward pass subtracts the mean). Nothing is centred.

Positions: ``standard`` and ``rotary`` (native bridges and HookedTransformer),
``shortformer`` (HookedTransformer). Adjacent-pair (GPT-J style) rotary, which
native bridges use, is reordered to rotate-half (see
:func:`~circuitwidgets.sources._convert.adjacent_pairs_to_rotate_half`).
Shortformer positions are added after ``ln1`` and so cannot absorb its weight:
such a model loads only when ``ln1``'s weight is all ones (``LNPre`` or folded).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from circuitwidgets.errors import ArgumentTypeError, ShapeError, UnsupportedArchitectureError
from circuitwidgets.model import ACTIVATIONS, CircuitModel, ModelConfig
from circuitwidgets.sources._convert import (
    Norm,
    RawModel,
    adjacent_pairs_to_rotate_half,
    check_finite,
    check_finite_parameters,
    class_names,
    fold_attention_scales,
    fold_layer_norms,
    refuse_names,
    require_ln_pre_compatible,
    take,
    verify_logits,
    work_dtype,
)
from circuitwidgets.sources.hf_decoders import Family, read_decoder
from circuitwidgets.tokenizer import HFTokenizer, TokenizerLike

_ACTIVATION_ALIASES = {"gelu_pytorch_tanh": "gelu_new", "swish": "silu"}


def _flag(cfg: Any, name: str, default: Any = None) -> Any:
    return getattr(cfg, name, default)


def _refuse_features(cfg: Any, kind: str) -> None:
    """Refuse TransformerLens features that the canonical model does not represent."""
    checks: list[tuple[bool, str]] = [
        (str(_flag(cfg, "attention_dir", "causal")) != "causal", "bidirectional attention"),
        (bool(_flag(cfg, "gated_mlp", False)), "gated MLPs"),
        (bool(_flag(cfg, "final_rms", False)), "a final RMS norm"),
        (bool(_flag(cfg, "num_experts", None)), "mixture-of-experts MLPs"),
        (bool(_flag(cfg, "use_local_attn", False)), "local attention"),
        (bool(_flag(cfg, "use_qk_norm", False)), "query/key norms"),
        (bool(_flag(cfg, "use_normalization_before_and_after", False)), "norms after sublayers"),
        (float(_flag(cfg, "attn_scores_soft_cap", -1.0) or -1.0) > 0, "attention soft-capping"),
        (float(_flag(cfg, "output_logits_soft_cap", -1.0) or -1.0) > 0, "logit soft-capping"),
        (bool(_flag(cfg, "rope_scaling", None)), "scaled rotary"),
        (bool(_flag(cfg, "use_NTK_by_parts_rope", False)), "NTK-by-parts rotary"),
        (bool(_flag(cfg, "use_dynamic_ntk_rope", False)), "dynamic-NTK rotary"),
        (bool(_flag(cfg, "use_yarn_rope", False)), "YaRN rotary"),
        (float(_flag(cfg, "rotary_scaling_factor", 1.0) or 1.0) != 1.0, "scaled rotary"),
    ]
    kv = _flag(cfg, "n_key_value_heads", None)
    checks.append((kv is not None and int(kv) != int(cfg.n_heads), "grouped-query attention"))
    d_vocab_out = int(_flag(cfg, "d_vocab_out", -1) or -1)
    checks.append((d_vocab_out > 0 and d_vocab_out != int(cfg.d_vocab), "an output vocabulary unlike the input one"))
    for bad, feature in checks:
        if bad:
            raise UnsupportedArchitectureError(f"model: a {kind} with {feature} is not supported by circuitwidgets")


def _norm(module: Any, name: str, dtype: torch.dtype) -> tuple[str, Norm, float | None]:
    """Classify one norm module: ``("ln", (w, b), eps)``, ``("lnpre", (None, None), eps)`` or ``("none", ...)``."""
    if module is None:  # HookedTransformer without normalisation has no norm modules
        return "none", (None, None), None
    names = class_names(module)
    inner = getattr(module, "original_component", None)
    if any("RMS" in n for n in names) or bool(getattr(module, "uses_rms_norm", False)):
        raise UnsupportedArchitectureError(
            f"{name}: RMS norm ({type(module).__name__}) is not supported; circuitwidgets represents layer norm "
            "(mean subtracted), parameter-free layer norm (LNPre) or no norm"
        )
    eps = getattr(module, "eps", None)
    if "LayerNormPre" in names or "LayerNormPreBridge" in names:
        return "lnpre", (None, None), float(eps) if isinstance(eps, (int, float)) else None
    if "LayerNorm" in names and hasattr(module, "w"):  # HookedTransformer's LayerNorm(w, b)
        return (
            "ln",
            (take(module.w, dtype), take(module.b, dtype)),
            float(eps) if isinstance(eps, (int, float)) else None,
        )
    if "NormalizationBridge" in names and isinstance(inner, torch.nn.LayerNorm):
        w = take(inner.weight, dtype) if inner.weight is not None else None
        b = take(inner.bias, dtype) if inner.bias is not None else None
        return "ln", (w, b), float(inner.eps)
    if isinstance(module, torch.nn.LayerNorm):
        w = take(module.weight, dtype) if module.weight is not None else None
        b = take(module.bias, dtype) if module.bias is not None else None
        return "ln", (w, b), float(module.eps)
    if isinstance(module, torch.nn.Identity) or isinstance(inner, torch.nn.Identity):
        return "none", (None, None), None
    inner_name = type(inner).__name__ if inner is not None else None
    if inner_name is not None and "LayerNormPre" in inner_name:
        return "lnpre", (None, None), float(getattr(inner, "eps", 1e-5))
    raise UnsupportedArchitectureError(
        f"{name}: normalisation {type(module).__name__}{f' over {inner_name}' if inner_name else ''} is not supported; "
        "expected LayerNorm, LayerNormPre or none"
    )


def _optional(model: Any, attr: str) -> torch.Tensor | None:
    try:
        value = getattr(model, attr)
    except (AttributeError, ValueError, KeyError):
        return None
    return value if isinstance(value, torch.Tensor) else None


def _attn_scales(model: Any, cfg: Any) -> list[float]:
    """Per-layer divisor of attention scores, read from the attention modules where they say it."""
    n_layers, d_head = int(cfg.n_layers), int(cfg.d_head)
    scales: list[float] = []
    for layer in range(n_layers):
        attn = model.blocks[layer].attn
        inner = getattr(attn, "original_component", None)
        scale: Any = None
        for obj in (inner, attn):
            if obj is None:
                continue
            if isinstance(getattr(obj, "attn_scale", None), (int, float, torch.Tensor)):  # HookedTransformer
                scale = float(obj.attn_scale)
            elif isinstance(getattr(obj, "scale", None), (int, float)):  # TL-native attention
                scale = float(obj.scale)
            elif isinstance(getattr(obj, "scaling", None), (int, float)) and obj.scaling:  # Hugging Face
                scale = 1.0 / float(obj.scaling)
            if scale is not None:
                break
        if scale is None:
            use = bool(_flag(cfg, "use_attn_scale", True))
            scale = float(_flag(cfg, "attn_scale", math.sqrt(d_head))) if use else 1.0
            scale = scale if scale > 0 else math.sqrt(d_head)
            if _flag(cfg, "scale_attn_by_inverse_layer_idx", False):
                scale *= layer + 1
        scales.append(float(scale))
    return scales


def _solu_norms(model: Any, n_layers: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """SoLU's LayerNorm over the neurons (``blocks[l].mlp.ln``), kept unfolded as ``ln_mlp_w, ln_mlp_b``."""
    ws, bs = [], []
    for layer in range(n_layers):
        ln = getattr(model.blocks[layer].mlp, "ln", None)
        if ln is None or not hasattr(ln, "w") or not hasattr(ln, "b"):
            raise UnsupportedArchitectureError(
                f"model.blocks[{layer}].mlp.ln: a solu_ln MLP needs its LayerNorm's w and b, and they cannot be read"
            )
        ws.append(take(ln.w, dtype))
        bs.append(take(ln.b, dtype))
    return {"ln_mlp_w": torch.stack(ws), "ln_mlp_b": torch.stack(bs)}


def _read_tl(model: Any, dtype: torch.dtype, is_bridge: bool, native: bool) -> tuple[dict[str, Any], RawModel, bool]:
    """Read weights through TransformerLens's accessors; returns ``(shape, raw, adjacent_pairs)``."""
    cfg = model.cfg
    kind = "TransformerBridge" if is_bridge else "HookedTransformer"
    _refuse_features(cfg, kind)
    L, H, d, dh, V = int(cfg.n_layers), int(cfg.n_heads), int(cfg.d_model), int(cfg.d_head), int(cfg.d_vocab)
    positions = str(_flag(cfg, "positional_embedding_type", "standard")).lower()
    if positions not in ("standard", "rotary", "shortformer"):
        raise UnsupportedArchitectureError(
            f"model.cfg.positional_embedding_type: {positions!r} is not supported; expected standard, shortformer or rotary"
        )
    attn_only = bool(_flag(cfg, "attn_only", False))
    weights: dict[str, torch.Tensor] = {}
    for name in ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_U"):
        weights[name] = take(getattr(model, name), dtype)
    if positions != "rotary":
        weights["W_pos"] = take(model.W_pos, dtype)
    for name in ("b_Q", "b_K", "b_V", "b_O", "b_U"):
        value = _optional(model, name)
        if value is not None:
            weights[name] = take(value, dtype)
    if not attn_only:
        for name in ("W_in", "W_out", "b_in", "b_out"):
            value = _optional(model, name)
            if value is not None:
                weights[name] = take(value, dtype)
        if "W_in" not in weights or "W_out" not in weights:
            raise UnsupportedArchitectureError(
                f"model: a {kind} whose MLP weights W_in/W_out cannot be read is not supported"
            )
    # Layer norms.
    norms: list[tuple[str, Norm, float | None]] = []
    for layer in range(L):
        block = model.blocks[layer]
        norms.append(_norm(getattr(block, "ln1", None), f"model.blocks[{layer}].ln1", dtype))
        if not attn_only:
            norms.append(_norm(getattr(block, "ln2", None), f"model.blocks[{layer}].ln2", dtype))
    norms.append(_norm(getattr(model, "ln_final", None), "model.ln_final", dtype))
    require_ln_pre_compatible([None if k == "none" else n for k, n, _ in norms], "model")
    normalized = norms[0][0] != "none"
    per_layer = 1 if attn_only else 2
    ln1 = [norms[layer * per_layer][1] for layer in range(L)] if normalized else None
    ln2 = [norms[layer * 2 + 1][1] for layer in range(L)] if normalized and not attn_only else None
    ln_final = norms[-1][1] if normalized else None
    eps_values = {e for _, _, e in norms if e is not None}
    eps = float(_flag(cfg, "eps", 1e-5))
    if len(eps_values) > 1:
        raise UnsupportedArchitectureError(
            f"model: layer norms with different eps {sorted(eps_values)} are not supported"
        )
    if eps_values:
        eps = eps_values.pop()
    if positions == "shortformer" and ln1 is not None:
        for layer, (scale, _) in enumerate(ln1):
            if scale is not None and not torch.all(scale == 1):
                raise UnsupportedArchitectureError(
                    f"model.blocks[{layer}].ln1: a shortformer model adds positions after ln1, so an ln1 weight "
                    "other than all ones cannot be folded into W_Q/W_K exactly; circuitwidgets represents "
                    "shortformer models whose ln1 is parameter-free (LNPre) or has unit weight"
                )
    act = _flag(cfg, "act_fn", None)
    act = _ACTIVATION_ALIASES.get(str(act), act)
    if not attn_only and act not in ACTIVATIONS:
        raise UnsupportedArchitectureError(f"model.cfg.act_fn: {act!r} is not supported; expected one of {ACTIVATIONS}")
    if not attn_only and act == "solu_ln":
        weights |= _solu_norms(model, L, dtype)
    if native:
        # The TL-native model rotates adjacent pairs (x0, x1), (x2, x3), ... and
        # runs its blocks sequentially whatever cfg.parallel_attn_mlp says.
        adjacent, parallel = True, False
    else:
        adjacent = bool(_flag(cfg, "rotary_adjacent_pairs", False))
        parallel = bool(_flag(cfg, "parallel_attn_mlp", False))
    rotary_dim = int(_flag(cfg, "rotary_dim", None) or dh) if positions == "rotary" else None
    d_mlp = None if attn_only else int(weights["W_in"].shape[-1])
    shape: dict[str, Any] = {
        "n_layers": L,
        "n_heads": H,
        "d_model": d,
        "d_head": dh,
        "d_vocab": V,
        "n_ctx": int(cfg.n_ctx),
        "positional_embedding_type": positions,
        "normalization": "ln_pre" if normalized else "none",
        "has_mlp": not attn_only,
        "d_mlp": d_mlp,
        "act_fn": None if attn_only else act,
        "parallel_attn_mlp": parallel and not attn_only,
        "rotary_dim": rotary_dim,
        "rotary_base": float(_flag(cfg, "rotary_base", 10_000)),
        "ln_eps": eps,
        "architecture": "transformer_lens",
    }
    raw = RawModel(weights, ln1, ln2, ln_final, _attn_scales(model, cfg))
    return shape, raw, adjacent


def _hf_conventions(
    inner: Any, shape: dict[str, Any], raw: RawModel, dtype: torch.dtype
) -> tuple[dict[str, Any], RawModel, bool]:
    """For a bridge over a Hugging Face model: architecture from that model, weights from the bridge.

    The bridge's accessors hold the weights its forward pass uses (processed by
    ``enable_compatibility_mode()`` or not); positions, rotary width, residual
    layout and score scales come from the Hugging Face model, which the bridge's
    config does not always carry (``rotary_dim`` of GPT-NeoX, for one).
    """
    from circuitwidgets.sources.huggingface import SUPPORTED_ARCHITECTURES, read_hf

    if not class_names(inner) & set(SUPPORTED_ARCHITECTURES):
        raise UnsupportedArchitectureError(
            f"model: a TransformerBridge over {type(inner).__name__} is not supported; supported are bridges over "
            f"TL-native models (boot_native) and over {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    hf_shape, hf_raw = read_hf(inner, dtype)
    for key in ("n_layers", "n_heads", "d_model", "d_head", "d_vocab", "has_mlp", "d_mlp"):
        if hf_shape[key] != shape[key]:
            raise ShapeError(
                f"model.cfg.{key}: the bridge says {shape[key]!r}, its Hugging Face model {hf_shape[key]!r}"
            )
    return hf_shape, RawModel(raw.weights, raw.ln1, raw.ln2, raw.ln_final, hf_raw.attn_scales), False


def _decoder_family(inner: Any) -> Family | None:
    """The decoder family of a bridge's Hugging Face model (Llama, Gemma, Qwen, ...), or ``None``."""
    from circuitwidgets.sources.hf_decoders import FAMILIES

    for arch in class_names(inner) & set(FAMILIES):
        return FAMILIES[arch]
    return None


def _tokenizer(model: Any) -> TokenizerLike | None:
    tok = getattr(model, "tokenizer", None)
    return HFTokenizer(tok) if tok is not None else None


def _logits(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise ArgumentTypeError(f"model(tokens): expected logits, got {type(output).__name__}")


def from_transformer_lens(
    model: Any,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = None,
    verify: bool = True,
    name: str | None = None,
) -> CircuitModel:
    """Convert a TransformerLens model (already in memory) to a :class:`CircuitModel`.

    Parameters
    ----------
    model
        A ``TransformerBridge`` (TransformerLens 4) or a ``HookedTransformer``
        (older TransformerLens). Strings are refused: build or load the model
        yourself, offline.
    dtype, device
        Dtype of the canonical weights (default float32) and their device
        (default: the source model's).
    verify
        Run the source and the converted model on one short random sequence and
        raise :class:`~circuitwidgets.errors.UnsupportedArchitectureError` if
        their logits disagree (costs one short forward pass of each).
    name
        Display name (default: ``model.cfg.model_name``).

    Cost: one copy of the weights; folding is ``O(n_layers · d_model²)``.
    """
    refuse_names(model, "model", "from_transformer_lens")
    names = class_names(model)
    is_bridge = "TransformerBridge" in names
    if not is_bridge and "HookedTransformer" not in names:
        raise ArgumentTypeError(
            f"model: expected a TransformerLens TransformerBridge or HookedTransformer, got {type(model).__name__}"
        )
    check_finite_parameters(model, f"model ({type(model).__name__})")
    params = list(model.parameters())
    source_dtype = params[0].dtype if params else torch.float32
    source_device = params[0].device if params else torch.device("cpu")
    display = name or str(getattr(model.cfg, "model_name", "") or type(model).__name__)
    inner = getattr(model, "original_model", None) if is_bridge else None
    native = is_bridge and "NativeModel" in class_names(inner)
    target_device = torch.device(device) if device is not None else source_device
    decoder = _decoder_family(inner) if is_bridge and not native else None
    attn_scale: float | None
    if decoder is not None:
        # Bridges over RMS-norm families run the Hugging Face model's own modules: read those.
        shape, weights, attn_scale = read_decoder(inner, decoder, work_dtype(dtype), work_dtype(dtype), target_device)
    else:
        shape, raw, adjacent = _read_tl(model, work_dtype(dtype), is_bridge, native)
        if is_bridge and not native:
            shape, raw, adjacent = _hf_conventions(inner, shape, raw, work_dtype(dtype))
        check_finite(raw.weights, f"model ({type(model).__name__})")
        weights = fold_layer_norms(raw)
        attn_scale = fold_attention_scales(weights, raw.attn_scales)
        if shape["positional_embedding_type"] == "rotary" and adjacent:
            adjacent_pairs_to_rotate_half(weights, int(shape["rotary_dim"]))
    tokenizer = _tokenizer(model)
    bos = tokenizer.bos_token_id if tokenizer is not None else None
    cfg = ModelConfig(
        **shape, attn_scale=attn_scale, bos_token_id=bos if bos is not None and bos < shape["d_vocab"] else None
    )
    if tokenizer is not None and tokenizer.vocab_size > cfg.d_vocab:
        raise ShapeError(
            f"model.tokenizer: vocabulary of {tokenizer.vocab_size} tokens does not fit d_vocab={cfg.d_vocab}"
        )
    weights = {k: v.to(device=target_device, dtype=dtype).contiguous() for k, v in weights.items()}
    ours = CircuitModel(cfg, weights, tokenizer=tokenizer, name=display)
    if verify:
        was_training = bool(model.training)
        model.eval()
        try:
            verify_logits(
                ours, lambda t: _logits(model(t)), source_dtype, source_device, f"model ({type(model).__name__})"
            )
        finally:
            model.train(was_training)
    return ours
