"""The most resident memory a block of code added above its start, sampled from ``/proc/self/statm``.

Standard library only, so both sides of a peer comparison (ours and a reference run by its own interpreter) measure
the same way: ``ru_maxrss`` is the process's peak since it began, which loading the weights can set, so it cannot
say what a computation itself added.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType

_PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    """This process's resident set now, in bytes (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * _PAGE


class LiveRSS:
    """``with LiveRSS() as rss: ...``; then ``rss.above`` is the largest resident set seen (every ``interval`` s, and at
    the end) minus the one at entry, in bytes."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval, self.above, self.base = interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.above = max(self.above, resident_bytes() - self.base)

    def __enter__(self) -> LiveRSS:
        self.base = resident_bytes()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.above = max(self.above, resident_bytes() - self.base)
