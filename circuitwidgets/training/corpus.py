"""The offline training corpus: the Python standard library's own source.

Every machine that runs Python has it, so the shipped models can be retrained
anywhere with no network. Files are read in sorted order and split into train
and validation by a hash of their relative path, so the split is stable.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

HELD_OUT_PERCENT = 2


@dataclass(frozen=True)
class Corpus:
    """Texts of the corpus, split into training and validation files."""

    root: Path
    train: list[str]
    val: list[str]

    @property
    def n_chars(self) -> int:
        """Total characters over both splits."""
        return sum(map(len, self.train)) + sum(map(len, self.val))


def stdlib_root() -> Path:
    """Directory of this interpreter's standard library source."""
    return Path(sysconfig.get_paths()["stdlib"])


def _is_held_out(relative: str) -> bool:
    digest = hashlib.sha256(relative.encode()).digest()
    return digest[0] * 100 // 256 < HELD_OUT_PERCENT


def load_stdlib_corpus(root: Path | None = None) -> Corpus:
    """Read every ``.py`` file of the standard library (``site-packages`` excluded).

    Parameters
    ----------
    root
        Directory to read instead of the interpreter's standard library.
    """
    root = root or stdlib_root()
    paths = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts)
    if not paths:
        raise FileNotFoundError(f"no .py files under corpus root {root}")
    train: list[str] = []
    val: list[str] = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        relative = path.relative_to(root).as_posix()
        (val if _is_held_out(relative) else train).append(text)
    return Corpus(root=root, train=train, val=val)
