"""A safetensors file read as untrusted: its header checked first, then each tensor read straight into its buffer.

The header (an 8-byte length, then JSON) is parsed and checked against the file before any tensor is allocated:
every entry has a known dtype, a shape of non-negative ints and offsets that span exactly ``prod(shape) × itemsize``
bytes inside the file, the entries do not overlap, and nothing past the last one is left unread. A reader then
checks the names and shapes against its own config (:class:`Header` holds them) and the total against its memory
budget, and only then reads.

Reading copies each tensor from the file into one ``torch.empty`` buffer with ``readinto`` (no memory map, so the
file's pages are never counted in this process's memory, and no second copy): loading holds the tensors once, plus
one tensor's conversion when the requested dtype differs. Each tensor is checked finite as it is read, and a NaN or
infinity is a :class:`~circuitwidgets.errors.NonFiniteError` naming the file and the tensor.
"""

from __future__ import annotations

import io
import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from circuitwidgets._checks import count_non_finite
from circuitwidgets.errors import FileFormatError, NonFiniteError
from circuitwidgets.features._untrusted import check_budget, open_regular, parse_json, size_of

#: safetensors' dtype names.
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}  # fmt: skip
#: Largest header read (bytes): safetensors itself refuses headers past 100 MB.
MAX_HEADER = 100 * 2**20
#: Bytes copied per read call (bounds nothing but the size of one system call).
_CHUNK = 64 * 2**20


@dataclass(frozen=True)
class Entry:
    """One tensor of the header: its dtype, shape and byte range in the data section."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int

    def bytes_as(self, dtype: torch.dtype | None) -> int:
        """Bytes the tensor takes held in ``dtype`` (its own when ``None`` or not floating)."""
        held = dtype if dtype is not None and self.dtype.is_floating_point else self.dtype
        return math.prod(self.shape) * torch.empty((), dtype=held).element_size()


@dataclass(frozen=True)
class Header:
    """A checked safetensors header: the file, where its data starts, its entries and its string metadata."""

    path: Path
    folder: Path | None
    data_start: int
    entries: dict[str, Entry]
    metadata: dict[str, str]

    def where(self, name: str) -> str:
        return f"{str(self.path)!r}: {name}"


def _entry(where: str, name: str, raw: object, data_size: int) -> Entry:
    if not isinstance(raw, dict):
        raise FileFormatError(f"{where}: header {name!r}: expected an object, got {type(raw).__name__}")
    dtype = raw.get("dtype")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise FileFormatError(f"{where}: header {name!r}: dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    shape, offsets = raw.get("shape"), raw.get("data_offsets")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape) or len(shape) > 8:
        raise FileFormatError(f"{where}: header {name!r}: shape: expected a list of ints >= 0, got {str(shape)[:60]}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        raise FileFormatError(f"{where}: header {name!r}: data_offsets: expected [start, end], got {str(offsets)[:60]}")
    start, end = offsets
    need = math.prod(shape) * torch.empty((), dtype=DTYPES[dtype]).element_size()
    if not 0 <= start <= end <= data_size or end - start != need:
        raise FileFormatError(
            f"{where}: header {name!r}: expected {need:,} bytes for {dtype} {tuple(shape)} inside the file's "
            f"{data_size:,} data bytes, got offsets [{start:,}, {end:,}]"
        )
    return Entry(DTYPES[dtype], tuple(shape), start, end)


def read_header(path: str | os.PathLike[str], what: str, folder: Path | None = None) -> Header:
    """The checked header of the safetensors file ``path`` (nothing else is read)."""
    p = Path(path)
    where = f"{what} {str(p)!r}"
    with open_regular(p, what, folder) as handle:
        size = size_of(handle)
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise FileFormatError(f"{where}: expected a safetensors file (8-byte header length), got {size} bytes")
        length = int.from_bytes(prefix, "little")
        if not 2 <= length <= min(MAX_HEADER, size - 8):
            raise FileFormatError(
                f"{where}: header length: expected 2 .. {min(MAX_HEADER, max(size - 8, 0)):,} bytes, got {length:,}"
            )
        raw = parse_json(handle.read(length), f"{where}: header")
    if not isinstance(raw, dict):
        raise FileFormatError(f"{where}: header: expected a JSON object, got {type(raw).__name__}")
    meta = raw.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise FileFormatError(f"{where}: header __metadata__: expected an object of strings")
    data_size = size - 8 - length
    entries = {str(k): _entry(where, str(k), v, data_size) for k, v in raw.items()}
    spans = sorted((e.start, e.end) for e in entries.values() if e.end > e.start)
    if any(b[0] < a[1] for a, b in itertools.pairwise(spans)):
        raise FileFormatError(f"{where}: header: expected tensors that do not overlap, got overlapping offsets")
    return Header(p, folder, 8 + length, entries, {str(k): v for k, v in meta.items()})


def read_entry(handle: io.BufferedReader, header: Header, name: str) -> torch.Tensor:
    """Tensor ``name`` copied from ``handle`` into a fresh buffer of its own dtype."""
    entry = header.entries[name]
    out = torch.empty(entry.shape, dtype=entry.dtype)
    if out.numel() == 0:
        return out
    view = out.view(-1).view(torch.uint8).numpy().data
    handle.seek(header.data_start + entry.start)
    done = 0
    while done < len(view):
        got = handle.readinto(view[done : done + _CHUNK])
        if not got:
            raise FileFormatError(f"{header.where(name)}: expected {len(view):,} bytes, the file ended after {done:,}")
        done += got
    return out


def check_finite(where: str, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` unless it holds NaN or infinity (counted in blocks, no full-size mask)."""
    if tensor.dtype.is_floating_point:
        bad = count_non_finite(tensor)
        if bad:
            raise NonFiniteError(f"{where}: expected finite weights, got {bad:,} NaN or infinite entries")
    return tensor


def read_tensors(
    header: Header,
    names: list[str],
    dtype: torch.dtype | None,
    memory_budget: int | None = None,
    device: str | torch.device = "cpu",
) -> dict[str, torch.Tensor]:
    """Tensors ``names`` of ``header``'s file, floating ones cast to ``dtype`` and checked finite.

    The total they take in ``dtype`` is checked against ``memory_budget`` before the first byte is read.
    """
    need = sum(header.entries[n].bytes_as(dtype) for n in names)
    check_budget(f"{str(header.path)!r}", need, memory_budget)
    out: dict[str, torch.Tensor] = {}
    with open_regular(header.path, str(header.path), header.folder) as handle:
        for name in names:
            tensor = check_finite(header.where(name), read_entry(handle, header, name))
            if dtype is not None and tensor.dtype.is_floating_point and tensor.dtype != dtype:
                tensor = tensor.to(dtype)
            out[name] = tensor.to(device)
    return out


def expect_shape(header: Header, name: str, shape: tuple[int, ...], field: str = "") -> None:
    """Refuse tensor ``name`` unless its header shape is ``shape`` (``field`` says which config field set it)."""
    got = header.entries[name].shape
    if got != shape:
        because = f" (from {field})" if field else ""
        raise FileFormatError(f"{header.where(name)}: expected shape {shape}{because}, got {got}")


def expect_floating(header: Header, names: list[str]) -> None:
    """Refuse any of ``names`` stored as a non-floating dtype."""
    for name in names:
        if not header.entries[name].dtype.is_floating_point:
            raise FileFormatError(
                f"{header.where(name)}: expected a floating-point tensor, got {header.entries[name].dtype}"
            )
