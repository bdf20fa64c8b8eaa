"""Run in a subprocess by ``test_widget_memory.py``: memory growth over create/close cycles of a widget.

Prints one JSON line: cycles, seconds, the resident-set growth in bytes after a warm-up (``/proc/self/statm``,
what the operating system charges the process: pages, so it moves in steps as the allocator's arenas grow),
and the bytes Python still holds per cycle over 300 more cycles (``tracemalloc``: exact, no page steps).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import tracemalloc

import numpy as np

from circuitwidgets import AttentionPatterns


def rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main(cycles: int, warmup: int) -> None:
    tokens = ["a", "b", "c"]
    patterns = np.tril(np.ones((1, 1, 3, 3), dtype=np.float32))
    patterns /= patterns.sum(-1, keepdims=True)

    def cycle() -> None:
        widget = AttentionPatterns.from_arrays(tokens, patterns)
        widget.close()

    for _ in range(warmup):
        cycle()
    gc.collect()
    before, started = rss(), time.perf_counter()
    for i in range(cycles):
        cycle()
        if i % 1000 == 999:
            gc.collect()
    gc.collect()
    after, seconds = rss(), time.perf_counter() - started
    tracemalloc.start()
    held = tracemalloc.get_traced_memory()[0]
    for _ in range(300):
        cycle()
    gc.collect()
    per_cycle = (tracemalloc.get_traced_memory()[0] - held) / 300
    tracemalloc.stop()
    print(json.dumps({"cycles": cycles, "seconds": seconds, "growth": after - before, "traced_per_cycle": per_cycle}))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
