"""The causal planner's calibration kept on disk, per machine and sweep shape, so that a fresh process's first sweep
is planned as a warm one is (no layer timing, no base runs spent on choosing a path).

What is kept: each cost curve (:func:`~circuitwidgets.causal.passes.measure_curve`: one layer's measured seconds by
rows) and each path choice made from it (:mod:`~circuitwidgets.causal.one_pass`), under the keys the planner already
uses, in one JSON file per machine: ``<cache>/calibration/<fingerprint>.json``. The fingerprint hashes what the timings
depend on (the CPU's model and count, torch's version and threads, the GPU's name); the file records them too.

``<cache>`` is ``$CIRCUITWIDGETS_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/circuitwidgets``, else
``~/.cache/circuitwidgets``. Clear it with :func:`clear_calibration`, ``python -m circuitwidgets calibration --clear``,
or ``rm -r`` of the folder :func:`calibration_dir` names. A file that cannot be read is ignored (and replaced on the
next write); one that cannot be written leaves the calibration in memory only.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
from functools import cache
from pathlib import Path

import torch

#: The environment variable that relocates the cache (tests point it at a temporary folder).
CACHE_ENV = "CIRCUITWIDGETS_CACHE_DIR"
#: Bumped when what is stored, or how a choice is made from it, changes: older files are then ignored.
VERSION = 1


def cache_root() -> Path:
    """The package's cache folder (not created): ``$CIRCUITWIDGETS_CACHE_DIR``, ``$XDG_CACHE_HOME/circuitwidgets`` or
    ``~/.cache/circuitwidgets``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "circuitwidgets"


def calibration_dir() -> Path:
    """The folder of the calibration files (not created)."""
    return cache_root() / "calibration"


def clear_calibration() -> int:
    """Remove every calibration file (every machine's); the number removed. The next sweep of each shape measures
    its cost curve again."""
    folder = calibration_dir()
    removed = 0
    for path in folder.glob("*.json") if folder.is_dir() else ():
        path.unlink(missing_ok=True)
        removed += 1
    _MEMORY.clear()
    return removed


def machine() -> dict[str, object]:
    """What a timing depends on besides the sweep's shape: this machine's CPU and GPU, torch's version and threads."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "arch": platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "gpu": gpu,
        "version": VERSION,
    }


def load(kind: str, key: tuple[object, ...]) -> object:
    """The stored entry of ``kind`` (``"curve"``, ``"choice"``) under ``key``, or ``None``."""
    return _entries().get(_name(kind, key))


def store(kind: str, key: tuple[object, ...], value: object) -> None:
    """Keep ``value`` (JSON-able) under ``kind`` and ``key``, on disk when the cache folder can be written."""
    entries = _entries()
    entries[_name(kind, key)] = value
    path = _path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"machine": machine(), "entries": entries}, indent=0, sort_keys=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
            out.write(body)
        os.replace(out.name, path)  # (atomic: a process reading meanwhile sees the old file or the new one)
    except OSError:  # a read-only or full disk: the calibration stays in this process's memory
        pass


#: This process's view of each file, by path (read once; a file changed by another process is not reread).
_MEMORY: dict[Path, dict[str, object]] = {}


def _entries() -> dict[str, object]:
    path = _path()
    if path not in _MEMORY:
        _MEMORY[path] = _read(path)
    return _MEMORY[path]


def _read(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("machine") != machine() or not isinstance(data.get("entries"), dict):
        return {}
    return dict(data["entries"])


def _path() -> Path:
    digest = hashlib.sha256(json.dumps(machine(), sort_keys=True).encode()).hexdigest()[:16]
    return calibration_dir() / f"{digest}.json"


def _name(kind: str, key: tuple[object, ...]) -> str:
    return f"{kind}:{key!r}"


@cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
