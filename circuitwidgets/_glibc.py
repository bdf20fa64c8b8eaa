"""glibc's allocator controls, where the process has glibc (Linux); absent elsewhere.

Two places tune how freed memory returns to the operating system: training
keeps its large per-step tensors in the heap (fewer page faults), the
streaming loader gives a converted layer's scratch back (a bounded peak).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any


@functools.cache
def libc() -> Any:
    """The C library as a ``ctypes.CDLL``, or None off Linux or where ``libc.so.6`` is not found."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def malloc_trim() -> None:
    """Give the heap's free memory back to the operating system (nothing without glibc)."""
    c = libc()
    trim = getattr(c, "malloc_trim", None) if c is not None else None
    if trim is not None:
        trim(0)
