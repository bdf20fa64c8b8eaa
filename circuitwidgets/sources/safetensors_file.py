"""Checkpoint directories on disk, read from safetensors only (never a pickle).

:func:`load_safetensors` reads either

- a directory written by :meth:`CircuitModel.save <circuitwidgets.CircuitModel.save>`
  (``model.safetensors`` + our ``config.json``), or
- a Hugging Face checkpoint directory of a supported architecture
  (``config.json`` with ``model_type`` ``"gpt2"`` or ``"gpt_neox"`` and one or
  more ``*.safetensors`` files, as ``save_pretrained`` writes them): the model
  is built from its config, offline, its weights loaded from safetensors, and
  converted with :func:`~circuitwidgets.from_hf` (same folding);
- a ``save_pretrained`` directory of a decoder family (Llama, Mistral, Qwen,
  Gemma, Phi-3, OLMo, SmolLM 3): read by :func:`~circuitwidgets.from_hf`, which
  frees the source layer by layer as it converts.

``pytorch_model.bin`` and other pickles are refused with a clear error, never
opened: unpickling can run arbitrary code. So is a directory whose
``config.json`` or ``tokenizer_config.json`` names its own Python code
(``auto_map``): see :mod:`circuitwidgets.sources._local`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, UnsupportedArchitectureError
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources._local import refuse_custom_code

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
# Checkpoint names older than this transformers' module names (Pythia's output embeddings).
_LEGACY_NAMES = {"embed_out.weight": "lm_head.weight", "embed_out.bias": "lm_head.bias"}
_HF_CLASSES = {"gpt2": ("GPT2Config", "GPT2LMHeadModel"), "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM")}


def _read_config(root: Path) -> dict[str, Any]:
    path = root / "config.json"
    if not path.is_file():
        raise ArgumentError(f"path: expected a directory with config.json, got {root}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"path: {path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ArgumentError(f"path: {path} must hold a JSON object, got {type(data).__name__}")
    return data


def _safetensors_files(root: Path) -> list[Path]:
    files = sorted(root.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in root.iterdir() if p.suffix in _PICKLE_SUFFIXES)
        if pickles:
            raise ArgumentError(
                f"path: {root} holds pickled weights {pickles} and no .safetensors file; circuitwidgets never "
                "unpickles files (a pickle can run code). Convert the checkpoint to safetensors first"
            )
        raise ArgumentError(f"path: expected *.safetensors weights in {root}, found none")
    return files


def _load_state(files: list[Path]) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(str(file)))
        except Exception as exc:  # safetensors raises its own SafetensorError (and OSError)
            raise ArgumentError(f"path: {file} is not a valid safetensors file ({exc})") from None
    return state


def _decoder_classes() -> set[str]:
    from circuitwidgets.sources.hf_decoders import FAMILIES

    return set(FAMILIES)


def _check_model_type(config: dict[str, Any], root: Path) -> str:
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in _HF_CLASSES:
        raise UnsupportedArchitectureError(
            f"path: {root / 'config.json'} describes model_type {model_type!r} "
            f"(architectures {config.get('architectures')}); supported are model types {sorted(_HF_CLASSES)} "
            f"and the architectures {sorted(_decoder_classes())}"
        )
    return model_type


def _model_names(stored: list[str], expected: set[str], prefix: str) -> dict[str, str]:
    """Each stored tensor's name in the model (base-model prefix added, legacy names mapped)."""
    # Base-model checkpoints (GPT-2's original files) store "h.0..." where the LM has "transformer.h.0...".
    names = {k: (k if k in expected or prefix + k not in expected else prefix + k) for k in stored}
    for old_name, new_name in _LEGACY_NAMES.items():
        if old_name in names and old_name not in expected and new_name in expected:
            names[old_name] = new_name
    return names


def _hf_model(config: dict[str, Any], files: list[Path], root: Path) -> Any:
    """The GPT-2 or GPT-NeoX model of ``config`` with the weights of ``files``, checked before it is built.

    The model is first built on the ``meta`` device (no memory) and its tensors
    compared with the safetensors headers: a config declaring a model the
    files do not hold (other shapes, more or fewer layers, a tensor missing)
    is refused before anything of its size is allocated.
    """
    import transformers

    from circuitwidgets.sources.hf_stream import check_checkpoint, header_shapes

    config_cls, model_cls = (getattr(transformers, n) for n in _HF_CLASSES[_check_model_type(config, root)])
    hf_config = config_cls.from_dict(config)
    with torch.device("meta"):
        skeleton = model_cls(hf_config)
    expected = set(skeleton.state_dict()) | {name for name, _ in skeleton.named_parameters(remove_duplicate=False)}
    shapes = header_shapes(files, arg="path")
    names = _model_names(list(shapes), expected, skeleton.base_model_prefix + ".")
    check_checkpoint(root, skeleton, {names[k]: shape for k, shape in shapes.items()}, "path")
    state = _load_state(files)
    model = model_cls(hf_config)
    model.load_state_dict({names[k]: v for k, v in state.items() if names[k] in expected}, strict=False)
    model.tie_weights()
    return model.eval()


def load_safetensors(
    path: str | os.PathLike[str],
    tokenizer: Any = None,
    *,
    dtype: torch.dtype | None = torch.float32,
    device: str | torch.device = "cpu",
) -> CircuitModel:
    """Load a local checkpoint directory (ours or a Hugging Face one) from safetensors.

    Parameters
    ----------
    path
        A local directory. Nothing is downloaded: a path that does not exist is an error.
    tokenizer
        For Hugging Face checkpoints, an optional tokenizer object (see
        :func:`~circuitwidgets.from_hf`); a ``tokenizer.json`` beside the weights
        is used when none is given.
    dtype, device
        Of the canonical weights; ``dtype=None`` keeps a Hugging Face
        decoder checkpoint's stored dtype (bfloat16 stays bfloat16) and reads
        everything else in float32.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"path: expected a directory path, got {type(path).__name__}")
    root = Path(path)
    if not root.is_dir():
        raise ArgumentError(f"path: expected an existing local directory, got {str(root)!r} (nothing is downloaded)")
    refuse_custom_code(root, "path")
    config = _read_config(root)
    if "n_layers" in config and "d_model" in config:  # written by CircuitModel.save
        return CircuitModel.load(root, dtype=dtype or torch.float32, device=device)
    if config.get("model_type") not in _HF_CLASSES and set(config.get("architectures") or []) & _decoder_classes():
        from circuitwidgets.sources.huggingface import from_hf

        return from_hf(root, tokenizer, dtype=dtype, device=device)
    _check_model_type(config, root)
    model = _hf_model(config, _safetensors_files(root), root)
    if tokenizer is None and (root / "tokenizer.json").is_file():
        import transformers

        tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(root / "tokenizer.json"))  # type: ignore[no-untyped-call]
    from circuitwidgets.sources.huggingface import from_hf

    return from_hf(model, tokenizer, dtype=dtype or torch.float32, device=device, name=root.name)
