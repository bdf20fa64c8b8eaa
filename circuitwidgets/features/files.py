"""circuitwidgets's own dictionary file: one safetensors file, its config as JSON in the file's metadata.

Written atomically (a temporary file renamed into place), read as
untrusted (:mod:`~circuitwidgets.features._safetensors_read`: header first, never a pickle). A damaged file is a
:class:`~circuitwidgets.errors.FileFormatError` naming it and the field; a config or tensor that does not make a
dictionary is the :class:`~circuitwidgets.features.dictionary.Dictionary`'s typed error, naming the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from circuitwidgets.errors import FileFormatError
from circuitwidgets.features._args import check_dictionary, check_float_dtype
from circuitwidgets.features._safetensors_read import Header, expect_floating, expect_shape, read_header, read_tensors
from circuitwidgets.features._untrusted import int_field, parse_json
from circuitwidgets.features.dictionary import Dictionary

#: The metadata key holding the config.
META_KEY = "circuitwidgets_dictionary"


def write_safetensors(path: Path, tensors: Mapping[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` to ``path`` atomically (temporary file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    tmp.replace(path)


def read_safetensors(
    path: str | Path,
    what: str = "dictionary file",
    dtype: torch.dtype | None = None,
    memory_budget: int | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file read as untrusted (:mod:`~circuitwidgets.features._untrusted`):
    a regular file, its header checked against its size, its tensors against ``memory_budget``, finite."""
    header = read_header(path, what)
    return read_tensors(header, list(header.entries), dtype, memory_budget), header.metadata


def save(dictionary: Dictionary, path: str | Path, dtype: torch.dtype | None = None) -> Path:
    """Write ``dictionary`` to ``path`` (``.safetensors``), optionally cast to ``dtype`` (e.g. float16 to ship)."""
    check_dictionary("dictionary", dictionary)
    if dtype is not None:
        check_float_dtype("dtype", dtype)
    p = Path(path)
    tensors = {k: v.to(dtype) if dtype is not None else v for k, v in dictionary.tensors().items()}
    write_safetensors(p, tensors, {META_KEY: json.dumps(dictionary.config())})
    return p


def load(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    memory_budget: int | None = None,
) -> Dictionary:
    """Read a dictionary written by :func:`save`, computed in ``dtype`` on ``device``.

    The file is checked before its tensors are read: its config (in the metadata) for types and ranges, each
    tensor's header shape against the config's widths, the total in ``dtype`` against ``memory_budget`` (bytes;
    ``None``: this machine's memory). Errors are :class:`~circuitwidgets.errors.FileFormatError` naming the file
    and the field.
    """
    check_float_dtype("dtype", dtype)
    header = read_header(path, "dictionary file")
    where = f"dictionary file {str(path)!r}"
    if META_KEY not in header.metadata:
        raise FileFormatError(
            f"{where}: metadata: expected a {META_KEY!r} entry, got none; is it a SAELens or circuit-tracer file?"
        )
    config = parse_json(header.metadata[META_KEY], f"{where}: metadata {META_KEY}")
    if not isinstance(config, dict):
        raise FileFormatError(f"{where}: metadata {META_KEY}: expected a JSON object, got {type(config).__name__}")
    d_in = int_field(config, "d_in", where, 1)
    d_sae = int_field(config, "d_sae", where, 1)
    d_out = int_field(config, "d_out", where, 1)
    expect_dictionary_tensors(header, d_in, d_sae, d_out)
    tensors = read_tensors(header, list(header.entries), dtype, memory_budget, device)
    return Dictionary.from_tensors(config, tensors, source=str(path))


def expect_dictionary_tensors(
    header: Header,
    d_in: int,
    d_sae: int,
    d_out: int,
    names: Mapping[str, str] | None = None,
    transposed: frozenset[str] = frozenset(),
    extra: tuple[str, ...] = (),
) -> None:
    """Refuse a file whose tensors are not a dictionary's of widths ``d_in``, ``d_sae``, ``d_out`` (from its header).

    ``names`` maps our tensor names to the file's; ``transposed`` names the tensors the file holds the other way
    round (circuit-tracer's ``W_enc [d_sae, d_in]``, a ``W_skip [d_out, d_in]``); ``extra`` names other tensors the
    format holds (checked by its reader). Missing, unexpected and non-floating tensors are refused by name.
    """
    file_name = {n: (names or {}).get(n, n) for n in ("W_enc", "b_enc", "W_dec", "b_dec", "W_skip", "threshold")}
    shapes = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_out), "b_dec": (d_out,),
              "W_skip": (d_in, d_out), "threshold": (d_sae,)}  # fmt: skip
    missing = [file_name[n] for n in ("W_enc", "b_enc", "W_dec", "b_dec") if file_name[n] not in header.entries]
    if missing:
        raise FileFormatError(f"{str(header.path)!r}: tensors: expected W_enc, b_enc, W_dec, b_dec, missing {missing}")
    known = set(file_name.values()) | set(extra)
    unexpected = sorted(set(header.entries) - known)
    if unexpected:
        raise FileFormatError(
            f"{str(header.path)!r}: tensors: expected only {sorted(known)}, got also {[u[:40] for u in unexpected[:5]]}"
        )
    for ours, theirs in file_name.items():
        if theirs in header.entries:
            expect_floating(header, [theirs])
            shape = shapes[ours][::-1] if ours in transposed else shapes[ours]
            expect_shape(header, theirs, shape, "d_in, d_sae, d_out")
