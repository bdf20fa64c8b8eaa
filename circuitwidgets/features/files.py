"""circuitwidgets's own dictionary file: one safetensors file, its config as JSON in the file's metadata.

Written atomically (a temporary file renamed into place), read with
``safetensors`` only (never a pickle). A damaged file is an :class:`ArgumentError`
naming it; a config or tensor that does not make a dictionary is the
:class:`~circuitwidgets.features.dictionary.Dictionary`'s typed error, naming the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary

#: The metadata key holding the config.
META_KEY = "circuitwidgets_dictionary"


def write_safetensors(path: Path, tensors: Mapping[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    tmp.replace(path)


def read_safetensors(path: str | Path, what: str = "dictionary file") -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file; a missing or damaged file is an :class:`ArgumentError` naming it."""
    p = Path(path)
    if not p.is_file():
        raise ArgumentError(f"{what}: expected a safetensors file, got {str(p)!r}, which does not exist")
    try:
        with safe_open(str(p), framework="pt") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no __iter__
    except Exception as exc:  # safetensors raises its own error types (and OSError) for truncated files
        raise ArgumentError(
            f"{what}: {str(p)!r} is not a readable safetensors file ({type(exc).__name__}: {exc})"
        ) from None
    return tensors, meta


def save(dictionary: Dictionary, path: str | Path, dtype: torch.dtype | None = None) -> Path:
    """Write ``dictionary`` to ``path`` (``.safetensors``), optionally cast to ``dtype`` (e.g. float16 to ship)."""
    p = Path(path)
    tensors = {k: v.to(dtype) if dtype is not None else v for k, v in dictionary.tensors().items()}
    write_safetensors(p, tensors, {META_KEY: json.dumps(dictionary.config())})
    return p


def load(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> Dictionary:
    """Read a dictionary written by :func:`save`, computed in ``dtype`` on ``device``."""
    tensors, meta = read_safetensors(path)
    if META_KEY not in meta:
        raise ArgumentError(
            f"dictionary file: {str(path)!r} has no {META_KEY!r} metadata; is it a SAELens or circuit-tracer file?"
        )
    try:
        config: dict[str, Any] = json.loads(meta[META_KEY])
    except json.JSONDecodeError as exc:
        raise ArgumentError(f"dictionary file: {str(path)!r}: its config is not JSON ({exc})") from None
    cast = {k: v.to(device=device, dtype=dtype) for k, v in tensors.items()}
    return Dictionary.from_tensors(config, cast, source=str(path))
