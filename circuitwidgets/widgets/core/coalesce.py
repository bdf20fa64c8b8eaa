"""Front-end requests coalesced: the view's newest request of a kind supersedes the ones still queued.

A trait the view sets can start kernel work (``qk_offset`` recomputes every
precomputed head, a head selection computes that head's table). A user who
drags a slider sends ten such updates; run one by one, ten recomputations of
1–2 s each queue up, and the view waits for all of them although only the
last one matters. With :func:`latest_wins`, an update that arrives from the view
(inside :meth:`CircuitWidget.set_state <circuitwidgets.widgets.core.base.CircuitWidget.set_state>`)
while a kernel's event loop runs only records its work, keyed by kind; the work
runs on a later turn of the loop, after the messages already waiting have been
read, and only the newest of each kind runs. Without an event loop (a script,
a test) and for changes made from Python (``w.qk_offset = 3`` in a cell) the work
runs at once, as before, so Python code sees the new state on the next line.

One mechanism for every widget: the observers that start kernel work call
:func:`latest_wins` (or are decorated with :func:`coalesced`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["DELAY_S", "coalesced", "from_view", "latest_wins", "pending_kinds"]

log = logging.getLogger("circuitwidgets")

#: Seconds a request waits before it runs, so that the updates already sent with it are read first.
DELAY_S = 0.01

_FROM_VIEW: contextvars.ContextVar[bool] = contextvars.ContextVar("circuitwidgets_from_view", default=False)

#: Per widget (held weakly), the newest work of each kind not yet run.
_PENDING: weakref.WeakKeyDictionary[Any, dict[str, Callable[[], None]]] = weakref.WeakKeyDictionary()

F = TypeVar("F", bound=Callable[..., None])


@contextlib.contextmanager
def from_view() -> Iterator[None]:
    """Mark the changes made inside as coming from the view (``set_state`` applies a front-end update in it)."""
    token = _FROM_VIEW.set(True)
    try:
        yield
    finally:
        _FROM_VIEW.reset(token)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def latest_wins(owner: Any, kind: str, work: Callable[[], None]) -> None:
    """Run ``work`` now, or, for a view's request inside a running event loop, on a later turn of the loop,
    unless a newer request of the same ``kind`` for the same ``owner`` replaces it first."""
    loop = _running_loop()
    if loop is None or not _FROM_VIEW.get():
        work()
        return
    pending = _PENDING.setdefault(owner, {})
    first = kind not in pending
    pending[kind] = work
    if first:
        loop.call_later(DELAY_S, _run, weakref.ref(owner), kind)


def _run(ref: weakref.ref[Any], kind: str) -> None:
    owner = ref()
    pending = _PENDING.get(owner) if owner is not None else None
    work = pending.pop(kind, None) if pending is not None else None
    if work is None:
        return
    try:
        work()
    except Exception:  # a deferred request has no caller to raise to: say what failed in the kernel's log
        log.exception("%s: the view's %s request failed", type(owner).__name__, kind)


def pending_kinds(owner: Any) -> list[str]:
    """The kinds of request of ``owner`` waiting to run (for tests and diagnostics)."""
    return sorted(_PENDING.get(owner, {}))


def coalesced(kind: str) -> Callable[[F], F]:
    """Decorate an observer ``method(self, change)`` whose work the view's newest request of ``kind`` supersedes."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def observer(self: Any, change: Any) -> None:
            latest_wins(self, kind, functools.partial(method, self, change))

        return observer  # type: ignore[return-value]

    return decorate
