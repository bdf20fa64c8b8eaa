"""Peak extra resident memory of a call, sampled in a thread (shared by the benchmarks).

Importing this module changes nothing in the process: glibc's allocator keeps its
defaults, as in a user's session. A benchmark that wants resident memory to follow
each call's own allocations (freed memory given back at once) sets that itself
(``bench_engine``); the timed benchmarks must not, since returning every large
block to the system page-faults each new tensor (``bench_causal``'s docstring).
"""

from __future__ import annotations

import gc
import threading
import time

import psutil  # type: ignore[import-untyped]

from circuitwidgets._glibc import libc

#: The C library (None without glibc: RSS figures may then undercount reused memory).
LIBC = libc()


class PeakRSS:
    """Sample this process's RSS in a thread; ``peak`` is the maximum above the level at entry."""

    def __init__(self, interval: float = 0.001) -> None:
        self.interval, self.process, self.peak = interval, psutil.Process(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss - self.base)
            time.sleep(self.interval)

    def __enter__(self) -> PeakRSS:
        gc.collect()
        if LIBC is not None:
            LIBC.malloc_trim(0)
        self.base = self.process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss - self.base)
