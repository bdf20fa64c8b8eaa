"""Reading files we did not write: one gate for every dictionary, transcoder set, checkpoint and graph file.

Every reader of ``features/`` and ``graphs/`` opens its files here, so each holds to the same rules:

- only a regular file is read: a FIFO, a device (``/dev/zero``) or a folder is refused by its ``fstat``, and it is
  opened non-blocking first, so a FIFO with no writer never blocks;
- a file inside a folder (a SAELens folder, a transcoder set) must resolve inside that folder: a symlink out of it
  is refused by name;
- sizes are checked before reading: text and JSON against a cap, safetensors by their header (each tensor's
  offsets must match its dtype and shape and lie inside the file), and the tensors' total in the dtype they will be
  held in against ``memory_budget``;
- JSON nested past what Python can parse, or with numbers past its digit limit, is a typed error, never a
  ``RecursionError``.

Every error is a :class:`~circuitwidgets.errors.FileFormatError` (or :class:`MemoryBudgetError`) naming the file,
the field, the expected and the received.
"""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import IO, Any

import torch

from circuitwidgets._checks import check_budget as checked
from circuitwidgets._checks import device_memory
from circuitwidgets.errors import FileFormatError, MemoryBudgetError

#: Largest JSON or YAML config read (bytes): a dictionary's config is a few KB.
CONFIG_BYTES = 16 * 2**20


def _describe_mode(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def inside(path: Path, folder: Path, what: str) -> Path:
    """``path`` (a member of ``folder``) resolved, refused when it resolves outside ``folder`` (a symlink out)."""
    real, root = path.resolve(), folder.resolve()
    if real != root and root not in real.parents:
        raise FileFormatError(
            f"{what}: {str(path)!r}: expected a file inside {str(folder)!r}, got a link to {str(real)!r} outside it"
        )
    return real


def open_regular(path: str | os.PathLike[str], what: str, folder: Path | None = None) -> io.BufferedReader:
    """``path`` opened for binary reading, refused unless it is a regular file (inside ``folder`` when given).

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor: a FIFO without a writer would
    block a plain ``open`` forever, and a check by name before opening could be raced.
    """
    p = Path(path)
    if folder is not None:
        inside(p, folder, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(p, flags)
    except FileNotFoundError:
        raise FileFormatError(f"{what}: expected a file, got {str(p)!r}, which does not exist") from None
    except OSError as exc:
        raise FileFormatError(f"{what}: {str(p)!r} cannot be opened ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileFormatError(f"{what}: expected a regular file, got {str(p)!r}, which is {_describe_mode(mode)}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def size_of(handle: IO[bytes]) -> int:
    """Bytes of an open regular file."""
    return os.fstat(handle.fileno()).st_size


def read_text(path: str | os.PathLike[str], what: str, folder: Path | None = None, limit: int = CONFIG_BYTES) -> str:
    """A UTF-8 text file of at most ``limit`` bytes, refused by its size before it is read."""
    with open_regular(path, what, folder) as handle:
        size = size_of(handle)
        if size > limit:
            raise FileFormatError(f"{what}: {str(path)!r}: expected at most {limit:,} bytes, got {size:,}")
        raw = handle.read(limit + 1)
    if len(raw) > limit:  # grew while read
        raise FileFormatError(f"{what}: {str(path)!r}: expected at most {limit:,} bytes, got more")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileFormatError(
            f"{what}: {str(path)!r}: expected UTF-8 text, got {exc.reason} at byte {exc.start}"
        ) from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (NaN and Infinity are not numbers a file may hold)")


def parse_json(text: str | bytes, what: str) -> Any:
    """JSON from ``text``; malformed, NaN/Infinity, too deep or too long numbers are a :class:`FileFormatError`."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise FileFormatError(f"{what}: expected JSON, got nesting deeper than Python can parse") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, NaN, a number past the int digit limit
        raise FileFormatError(f"{what}: expected JSON, got {str(exc)[:200]}") from None


def read_json(path: str | os.PathLike[str], what: str, folder: Path | None = None, limit: int = CONFIG_BYTES) -> Any:
    """A JSON file of at most ``limit`` bytes (see :func:`read_text` and :func:`parse_json`)."""
    return parse_json(read_text(path, what, folder, limit), f"{what} {str(path)!r}")


def check_budget(what: str, need: int, memory_budget: int | None) -> None:
    """Refuse ``need`` bytes over ``memory_budget`` (``None``: this machine's physical memory), before reading."""
    budget = device_memory(torch.device("cpu")) if memory_budget is None else checked("memory_budget", memory_budget)
    if need > budget:
        raise MemoryBudgetError(
            f"{what}: holding its tensors needs {need:,} bytes, more than memory_budget={budget:,} "
            "(refused from the file's header, before reading it)"
        )


# ------------------------------------------------------------------------------------------ typed config fields
def field_of(cfg: dict[str, Any], name: str, where: str, kinds: type | tuple[type, ...], default: Any = ...) -> Any:
    """``cfg[name]`` if it has one of ``kinds`` (bools are never ints or floats), else ``default`` when absent."""
    if name not in cfg:
        if default is ...:
            raise FileFormatError(f"{where}: {name}: expected a value, got none (the field is missing)")
        return default
    value = cfg[name]
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    ok = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
    if not ok:
        names = " or ".join("null" if k is type(None) else k.__name__ for k in allowed)
        raise FileFormatError(f"{where}: {name}: expected {names}, got {json.dumps(value)[:60]}")
    return value


def int_field(cfg: dict[str, Any], name: str, where: str, low: int, high: int | None = None, default: Any = ...) -> Any:
    """``cfg[name]`` as an int in ``[low, high]`` (JSON ``2.0``, ``true`` and ``"2"`` refused)."""
    value = field_of(cfg, name, where, int, default)
    if value is default and name not in cfg:
        return value
    if value < low or (high is not None and value > high):
        top = "" if high is None else f", at most {high:,}"
        raise FileFormatError(f"{where}: {name}: expected an int of at least {low}{top}, got {value}")
    return value
