"""Hugging Face ``transformers`` causal LMs as a :class:`~circuitwidgets.CircuitModel`.

Supported architectures (:data:`SUPPORTED_ARCHITECTURES`):

- GPT-2 and GPT-NeoX/Pythia (layer norms, learned or rotate-half rotary
  positions): :mod:`circuitwidgets.sources.hf_gpt`;
- Llama, Mistral, Qwen 2/3, Gemma 1/2/3, Phi-3, OLMo 2/3 and SmolLM 3 (RMS
  norms, grouped-query attention, rotary with scaling, QK-norm, soft-caps,
  sliding windows, gated MLPs): :mod:`circuitwidgets.sources.hf_decoders`,
  whose docstring says what is folded and what is left out;
- Gemma 4 text (per-layer head widths, shared keys and values, value norm,
  per-layer input embeddings, layer scalars):
  :mod:`circuitwidgets.sources.hf_gemma4`.

A model is given in memory, or as a local directory written by
``save_pretrained`` (weights read from safetensors only; a directory holding
only pickled weights is refused without opening them; one naming its own
Python code in an ``auto_map`` is refused before transformers reads it, and
transformers is always told ``trust_remote_code=False``). Any other string is
taken for a hub name and refused with
:class:`~circuitwidgets.errors.NetworkRefusedError`: circuitwidgets never
downloads. Our forward pass does not depend on the model's attention
implementation; ``verify=True`` checks the converted logits against the source's.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import torch

from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    ShapeError,
    UnsupportedArchitectureError,
)
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.sources._convert import (
    RawModel,
    check_finite,
    check_finite_parameters,
    check_folded,
    class_names,
    fold_attention_scales,
    fold_layer_norms,
    refuse_names,
    verification_tokens,
    verify_logits,
    work_dtype,
)
from circuitwidgets.sources._local import is_circuit_model_dir, refuse_custom_code, refuse_incomplete
from circuitwidgets.sources.hf_decoders import FAMILIES, read_decoder
from circuitwidgets.sources.hf_gpt import read_gpt2, read_neox
from circuitwidgets.sources.hf_stream import (
    StreamingSource,
    check_checkpoint,
    header_shapes,
    meta_model,
    weight_map,
)
from circuitwidgets.tokenizer import HFTokenizer, TokenizerLike

SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "GPT2LMHeadModel": "GPT-2 family",
    "GPTNeoXForCausalLM": "GPT-NeoX / Pythia",
    **{arch: family.label for arch, family in FAMILIES.items()},
}
"""Hugging Face classes :func:`from_hf` reads, with the families they cover."""

_PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.pkl", "*.ckpt")


def _supported_list() -> str:
    return ", ".join(f"{k} ({v})" for k, v in SUPPORTED_ARCHITECTURES.items())


def _architecture(model: Any) -> str:
    """The supported class ``model`` is (or derives from), or a typed error naming it."""
    names = class_names(model)
    arch = type(model).__name__
    if not hasattr(model, "config") or "PreTrainedModel" not in names:
        raise ArgumentTypeError(f"model: expected a Hugging Face transformers model ({_supported_list()}), got {arch}")
    for supported in SUPPORTED_ARCHITECTURES:
        if supported in names:
            return supported
    model_type = getattr(model.config, "model_type", None)
    raise UnsupportedArchitectureError(
        f"model: architecture {arch} (model_type {model_type!r}) is not supported; "
        f"supported architectures are {_supported_list()}"
    )


def read_hf(model: Any, dtype: torch.dtype) -> tuple[dict[str, Any], RawModel]:
    """Shape (``ModelConfig`` fields) and unfolded weights of a GPT-2 or GPT-NeoX model."""
    arch = _architecture(model)
    if arch == "GPT2LMHeadModel":
        return read_gpt2(model, dtype)
    if arch == "GPTNeoXForCausalLM":
        return read_neox(model, dtype)
    raise UnsupportedArchitectureError(f"model: read_hf reads GPT-2 and GPT-NeoX layer-norm models, got {arch}")


def _is_directory(value: object) -> bool:
    return isinstance(value, (str, os.PathLike)) and "\x00" not in str(value) and Path(value).is_dir()


def _weight_files(root: Path) -> list[Path]:
    """The safetensors files of a ``save_pretrained`` directory; pickles are refused unopened."""
    files = sorted(root.glob("*.safetensors"))
    if files:
        return files
    pickles = sorted(p.name for pattern in _PICKLED_WEIGHTS for p in root.glob(pattern))
    if pickles:
        raise ArgumentError(
            f"model: {root} holds pickled weights {pickles} and no *.safetensors; circuitwidgets never unpickles "
            "files (a pickle can run code). Save the model with save_pretrained(..., safe_serialization=True)"
        )
    raise ArgumentError(
        f"model: expected a directory written by save_pretrained (config.json and *.safetensors), got {root}"
    )


def _directory_config(root: Path) -> Any:
    """The config of a local ``save_pretrained`` directory holding safetensors of a supported architecture."""
    from transformers import AutoConfig

    if not (root / "config.json").is_file():
        raise ArgumentError(f"model: expected a directory written by save_pretrained (with config.json), got {root}")
    if is_circuit_model_dir(root):
        raise ArgumentError(
            f"model: expected a Hugging Face save_pretrained directory, got {root}, written by CircuitModel.save; "
            "load it with circuitwidgets.CircuitModel.load(path)"
        )
    refuse_custom_code(root)
    _weight_files(root)
    config = AutoConfig.from_pretrained(root, local_files_only=True, trust_remote_code=False)
    declared = [str(a) for a in (getattr(config, "architectures", None) or [])]
    if declared and not set(declared) & set(SUPPORTED_ARCHITECTURES):
        raise UnsupportedArchitectureError(
            f"model: {root} holds a {', '.join(declared)}, which is not supported; supported architectures are {_supported_list()}"
        )
    return config


def _directory_tokenizer(root: Path) -> Any:
    """The tokenizer saved in ``root``, or ``None``."""
    if (root / "tokenizer.json").is_file() or (root / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        refuse_custom_code(root)
        return AutoTokenizer.from_pretrained(root, local_files_only=True, trust_remote_code=False)
    return None


def _load_directory(root: Path) -> tuple[Any, Any]:
    """``(model, tokenizer or None)`` of a local ``save_pretrained`` directory, in the stored dtype, offline."""
    from transformers import AutoModelForCausalLM

    config = _directory_config(root)
    # Before transformers allocates anything: a config declaring more than is stored is refused here.
    try:
        shapes = header_shapes(weight_map(root))
    except ArgumentError as exc:
        raise ArgumentError(f"model: {root} is not a readable save_pretrained checkpoint ({exc})") from None
    check_checkpoint(root, meta_model(root, config), shapes, exact=False)
    try:
        loaded: tuple[Any, dict[str, Any]] = AutoModelForCausalLM.from_pretrained(  # type: ignore[assignment]
            root,
            local_files_only=True,
            use_safetensors=True,
            dtype="auto",
            attn_implementation="eager",
            trust_remote_code=False,
            output_loading_info=True,
        )
    except Exception as exc:  # safetensors, JSON and transformers' own errors all mean a bad checkpoint
        raise ArgumentError(
            f"model: {root} is not a readable save_pretrained checkpoint ({type(exc).__name__}: {exc})"
        ) from None
    model, info = loaded
    refuse_incomplete(root, info.get("missing_keys") or (), info.get("unexpected_keys") or ())
    return model, _directory_tokenizer(root)


def _release_layer(block: Any) -> None:
    """Free a source layer's tensors once read (the directory loader owns that model)."""
    for param in block.parameters():
        param.data = torch.empty(0, dtype=param.dtype, device=param.device)
    gc.collect()


def _gpt_weights(
    model: Any, arch: str, dtype: torch.dtype, device: torch.device
) -> tuple[dict[str, Any], dict[str, torch.Tensor], float | None]:
    """Shape, folded weights and score divisor of a GPT-2 or GPT-NeoX model."""
    shape, raw = read_hf(model, work_dtype(dtype))
    check_finite(raw.weights, f"model ({arch})")
    weights = fold_layer_norms(raw)
    attn_scale = fold_attention_scales(weights, raw.attn_scales)
    return shape, {k: v.to(device=device, dtype=dtype).contiguous() for k, v in weights.items()}, attn_scale


def from_hf(
    model: Any,
    tokenizer: Any = None,
    *,
    dtype: torch.dtype | None = None,
    device: str | torch.device | None = None,
    verify: bool = True,
    name: str | None = None,
    mlp: bool = True,
) -> CircuitModel:
    """Convert a Hugging Face causal LM to a :class:`CircuitModel`.

    Parameters
    ----------
    model
        A supported model in memory (:data:`SUPPORTED_ARCHITECTURES`; any size,
        random or trained), or the path of a local directory written by
        ``save_pretrained`` (safetensors weights; its tokenizer is loaded when
        the directory has one). Any other string is refused: circuitwidgets
        never downloads.
    tokenizer
        Optional Hugging Face tokenizer; wrapped in
        :class:`~circuitwidgets.tokenizer.HFTokenizer`.
    dtype, device
        Dtype of the canonical weights (default: the source's, so a bfloat16
        checkpoint stays bfloat16) and their device (default: the source's).
    verify
        Run the source and the converted model on one short random sequence and
        raise :class:`~circuitwidgets.errors.UnsupportedArchitectureError` if
        their logits disagree (costs one short forward pass of each).
    name
        Display name (default: the model's ``name_or_path`` or class name).
    mlp
        ``False`` reads a directory without its MLP weights, one layer at a
        time from the memory-mapped safetensors shards
        (``circuitwidgets.sources.hf_stream``): for a model larger than
        memory (an 8B model's attention, norms and embeddings are 4.6 GB of its
        16 GB in bfloat16). Weight-space analyses and their widgets work, as
        they leave MLP paths out; the forward pass (attention patterns, term
        importance, anything run on tokens) raises
        :class:`~circuitwidgets.errors.WeightsAbsentError`. ``verify`` cannot
        compare logits then (the source's forward pass needs the MLPs): it
        checks that each tensor read is finite; shapes are always checked
        against ``config.json``. For the decoder families of
        ``circuitwidgets.sources.hf_decoders`` except Gemma 4; needs the
        directory's path (in memory, the MLPs are loaded already).

    Raises
    ------
    IncompleteCheckpointError
        A directory whose stored tensors are not the ones its ``config.json``
        declares (a tensor missing, more or fewer layers than declared),
        named; checked against the safetensors headers before the model is
        allocated, so a config declaring a huge model over tiny weights costs nothing.
    CustomCodeError
        A directory whose ``config.json`` or ``tokenizer_config.json`` names
        custom code (``auto_map``); it is never run, nor asked about.

    Notes
    -----
    Cost: one copy of the weights (from a directory, the source's layers are
    freed as they are converted, so the peak stays near one copy); folding is
    ``O(n_layers · d_model²)``.
    """
    if not isinstance(mlp, bool):
        raise ArgumentTypeError(f"mlp: expected a bool, got {mlp!r:.80}")
    if not mlp:
        return _without_mlps(model, tokenizer, dtype, device, verify, name)
    from_directory = _is_directory(model)
    if from_directory:
        root = Path(model)
        model, found = _load_directory(root)
        tokenizer = tokenizer if tokenizer is not None else found
        name = name or root.name
    refuse_names(model, "model", "from_hf")
    refuse_names(tokenizer, "tokenizer", "from_hf")
    arch = _architecture(model)
    params = list(model.parameters())
    source_dtype = params[0].dtype if params else torch.float32
    source_device = params[0].device if params else torch.device("cpu")
    target_dtype, target_device = _target(dtype, device, source_dtype, source_device)
    check_finite_parameters(model, f"model ({arch})")
    was_training = bool(model.training)
    model.eval()
    reference = None
    if verify and from_directory:  # the source is consumed by the conversion: take its logits first
        tokens = verification_tokens(
            int(model.get_input_embeddings().weight.shape[0]),
            min(8, int(getattr(model.config, "max_position_embeddings", 8))),
        )
        with torch.no_grad():
            reference = model(input_ids=tokens.to(source_device)).logits.detach()
    attn_scale: float | None
    try:
        if arch in FAMILIES:
            shape, weights, attn_scale = read_decoder(
                model,
                FAMILIES[arch],
                work_dtype(target_dtype),
                target_dtype,
                target_device,
                release=_release_layer if from_directory else None,
            )
        else:
            shape, weights, attn_scale = _gpt_weights(model, arch, target_dtype, target_device)
        ours = _assemble(model, shape, weights, attn_scale, tokenizer, name or _display_name(model, arch))
        if verify:
            source = (lambda t: reference) if reference is not None else (lambda t: model(input_ids=t).logits)
            verify_logits(ours, source, source_dtype, source_device, f"model ({arch})")
    finally:
        model.train(was_training)
    return ours


def _target(
    dtype: Any, device: Any, source_dtype: torch.dtype, source_device: torch.device
) -> tuple[torch.dtype, torch.device]:
    """The dtype and device of the canonical weights (the source's unless given)."""
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise ArgumentTypeError(f"dtype: expected a floating-point torch.dtype or None, got {dtype!r}")
    return dtype or source_dtype, torch.device(device) if device is not None else source_device


def _without_mlps(path: Any, tokenizer: Any, dtype: Any, device: Any, verify: bool, name: str | None) -> CircuitModel:
    """:func:`from_hf` of a directory read layer by layer without its MLPs (``mlp=False``)."""
    if not _is_directory(path):
        raise ArgumentError(
            f"model: mlp=False reads a save_pretrained directory layer by layer, expected its path, got "
            f"{type(path).__name__}; a model in memory has its MLPs loaded already: pass mlp=True"
        )
    root = Path(path)
    config = _directory_config(root)
    refuse_names(tokenizer, "tokenizer", "from_hf")
    source = StreamingSource(meta_model(root, config), weight_map(root), verify=bool(verify))
    model = source.model
    arch = _architecture(model)
    if arch not in FAMILIES:
        raise UnsupportedArchitectureError(
            f"model: mlp=False reads the decoder families {sorted(FAMILIES)} layer by layer, got {arch}; "
            "load it whole with from_hf(path)"
        )
    check_checkpoint(root, model, header_shapes(source.files), files=source.files)
    try:
        source.load_outside_layers()
        target_dtype, target_device = _target(
            dtype, device, model.get_input_embeddings().weight.dtype, torch.device("cpu")
        )
        shape, weights, attn_scale = read_decoder(
            model,
            FAMILIES[arch],
            work_dtype(target_dtype),
            target_dtype,
            target_device,
            release=source.release,
            acquire=source.acquire,
            mlp=False,
        )
    finally:
        source.close()
    if tokenizer is None:
        tokenizer = _directory_tokenizer(root)
    return _assemble(model, shape, weights, attn_scale, tokenizer, name or root.name)


def _display_name(model: Any, arch: str) -> str:
    return str(getattr(model.config, "_name_or_path", "") or getattr(model, "name_or_path", "") or arch)


def _assemble(
    model: Any,
    shape: dict[str, Any],
    weights: dict[str, torch.Tensor],
    attn_scale: float | None,
    tokenizer: Any,
    name: str,
) -> CircuitModel:
    """The :class:`CircuitModel` of converted weights, with the tokenizer checked against the vocabulary."""
    check_folded(weights, f"model ({type(model).__name__})")
    wrapped: TokenizerLike | None = HFTokenizer(tokenizer) if tokenizer is not None else None
    bos = wrapped.bos_token_id if wrapped is not None else getattr(model.config, "bos_token_id", None)
    bos = bos if isinstance(bos, int) and 0 <= bos < int(shape["d_vocab"]) else None
    cfg = ModelConfig(**shape, attn_scale=attn_scale, bos_token_id=bos)
    if wrapped is not None and wrapped.vocab_size > cfg.d_vocab:
        raise ShapeError(
            f"tokenizer: vocabulary of {wrapped.vocab_size} tokens does not fit the model's d_vocab={cfg.d_vocab}"
        )
    return CircuitModel(cfg, weights, tokenizer=wrapped, name=name)
