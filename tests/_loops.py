"""Event loops for widget tests: the kernel's background tasks, played in a loop of the test's own."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any


async def until(done: Callable[[], bool], limit_s: float = 10.0) -> None:
    """Let the loop run (the widget's tasks sleep between steps) until ``done()`` or ``limit_s`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit_s
    while not done() and loop.time() < end:
        await asyncio.sleep(0.001)


def run_in_fresh_loop(make_coroutine: Callable[[], Any]) -> Any:
    """Run a coroutine on its own event loop in a worker thread.

    The browser tests' Playwright session keeps an event loop running on the
    main thread, where ``asyncio.run`` is refused.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make_coroutine())).result()
