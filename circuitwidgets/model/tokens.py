"""Token-id checks and the tokenizer saved beside a model directory."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model.config import ModelConfig
from circuitwidgets.tokenizer import FastTokenizer, TokenizerLike, VocabTokenizer


def as_ids(name: str, tokens: object, device: torch.device | None) -> torch.Tensor:
    """``tokens`` as an integer tensor, or a typed error naming ``name``."""
    if isinstance(tokens, (bytes, bytearray)) or tokens is None:
        raise ArgumentTypeError(f"{name}: expected token ids or a text, got {type(tokens).__name__}")
    try:
        t = torch.as_tensor(tokens, device=device)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ArgumentTypeError(
            f"{name}: expected token ids (ints) or a text, got {type(tokens).__name__} ({exc})"
        ) from None
    if t.numel() == 0 and not isinstance(tokens, torch.Tensor):
        t = t.long()  # an empty list has no dtype of its own
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ArgumentTypeError(f"{name}: expected integer token ids, got dtype {t.dtype}")
    if t.dtype in (torch.uint16, torch.uint32, torch.uint64):
        # torch has few kernels for wide unsigned ints (no min/max); as int64 a uint64 id ≥ 2**63 turns negative
        # and the caller's range check refuses it
        t = t.to(torch.int64)
    return t


def load_tokenizer(root: Path, cfg: ModelConfig) -> TokenizerLike | None:
    """The tokenizer saved beside a model (``tokenizer.json`` or ``vocab.json``), or ``None``."""
    if (root / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            raw = Tokenizer.from_file(str(root / "tokenizer.json"))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed files
            raise ArgumentError(f"path: {root / 'tokenizer.json'} is not a valid tokenizers file ({exc})") from None
        bos = raw.id_to_token(cfg.bos_token_id) if cfg.bos_token_id is not None else None
        return FastTokenizer(raw, bos_token=bos)
    if (root / "vocab.json").is_file():
        try:
            vocab = json.loads((root / "vocab.json").read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ArgumentError(f"path: {root / 'vocab.json'} is not valid JSON ({exc})") from None
        if not isinstance(vocab, list) or not all(isinstance(v, str) for v in vocab):
            raise ArgumentError(
                f"path: {root / 'vocab.json'} must hold a JSON list of token strings, got {type(vocab).__name__}"
            )
        return VocabTokenizer(vocab, bos_token_id=cfg.bos_token_id)
    return None
