"""Saving and loading a :class:`~circuitwidgets.CircuitModel` directory (safetensors only; nothing is unpickled)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model.config import ModelConfig
from circuitwidgets.model.tokens import load_tokenizer
from circuitwidgets.model.weights import FREQUENCY_WEIGHTS
from circuitwidgets.tokenizer import FastTokenizer, HFTokenizer, TokenizerLike, VocabTokenizer


class SavableModel(Protocol):
    """What :func:`save_model` reads of a model (a :class:`~circuitwidgets.CircuitModel`)."""

    cfg: ModelConfig
    name: str
    tokenizer: TokenizerLike

    def weights(self) -> dict[str, torch.Tensor]:
        """All stored tensors by name."""
        ...


_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def save_model(model: SavableModel, path: str | Path) -> None:
    """Write ``model.safetensors``, ``config.json`` and (when it has one) ``tokenizer.json`` into a directory."""
    from safetensors.torch import save_file

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.weights().items()}, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps({**model.cfg.to_dict(), "name": model.name}, indent=2))
    if isinstance(model.tokenizer, FastTokenizer):
        model.tokenizer.save(out / "tokenizer.json")
    elif isinstance(model.tokenizer, HFTokenizer) and getattr(model.tokenizer.tokenizer, "backend_tokenizer", None):
        # A fast Hugging Face tokenizer is a ``tokenizers.Tokenizer`` underneath; keep that (JSON).
        model.tokenizer.tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    elif isinstance(model.tokenizer, VocabTokenizer):
        (out / "vocab.json").write_text(json.dumps(model.tokenizer.vocab))


def load_model(
    path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> tuple[ModelConfig, dict[str, torch.Tensor], TokenizerLike | None, str]:
    """Read a directory written by :meth:`CircuitModel.save` (safetensors only; nothing is unpickled).

    Returns ``(cfg, weights, tokenizer, name)``, from which ``CircuitModel.load`` builds the model.
    """
    from safetensors.torch import load_file

    if not isinstance(path, (str, Path)) or (isinstance(path, str) and "\x00" in path):
        raise ArgumentTypeError(f"path: expected a directory path (str or Path), got {path!r:.80}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ArgumentTypeError(f"dtype: expected a floating-point torch.dtype, got {dtype!r}")
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError, ValueError) as exc:
        raise ArgumentError(
            f"device: expected a torch device such as 'cpu' or 'cuda:0', got {device!r} ({exc})"
        ) from None
    root = Path(path)
    if not (root / "model.safetensors").is_file():
        pickles = sorted(p.name for p in root.glob("*") if p.suffix in _PICKLE_SUFFIXES) if root.is_dir() else []
        if pickles:
            raise ArgumentError(
                f"path: {root} holds pickled weights {pickles} and no model.safetensors; circuitwidgets never "
                "unpickles files (a pickle can run code). Convert the weights to safetensors, or load the model "
                "with its own library and pass it to circuitwidgets.from_hf / from_transformer_lens"
            )
        raise ArgumentError(f"path: expected a model directory containing model.safetensors, got {root}")
    if not (root / "config.json").is_file():
        raise ArgumentError(f"path: expected a model directory containing config.json, got {root}")
    try:
        config = json.loads((root / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"path: {root / 'config.json'} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ArgumentError(f"path: {root / 'config.json'} must hold a JSON object, got {type(config).__name__}")
    try:
        cfg = ModelConfig.from_dict(config)
    except (ArgumentError, ArgumentTypeError) as exc:
        raise type(exc)(f"path: {root / 'config.json'} does not describe a model: {exc}") from None
    try:
        stored = load_file(str(root / "model.safetensors"))
    except Exception as exc:  # safetensors raises its own SafetensorError (and OSError)
        raise ArgumentError(f"path: {root / 'model.safetensors'} is not a valid safetensors file ({exc})") from None
    try:
        weights = {
            k: v.to(dtype=v.dtype if k in FREQUENCY_WEIGHTS else dtype, device=device) for k, v in stored.items()
        }
    except (RuntimeError, AssertionError) as exc:  # an unavailable device (no CUDA build, no such GPU)
        raise ArgumentError(f"device: cannot place the weights on {device} ({exc})") from None
    tokenizer = load_tokenizer(root, cfg)
    return cfg, weights, tokenizer, str(config.get("name", root.name))
