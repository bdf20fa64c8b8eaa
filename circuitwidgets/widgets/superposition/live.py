"""Retraining in the kernel when a slider moves: the latest request wins, closing stops it.

One background thread trains at a time. A new request sets the running one's
stop event (its loop ends at its next step, :func:`~circuitwidgets.superposition.train_toy`'s
``stop``) and starts its own, so no queue of stale retrains builds up; only the
latest request's result is published (a generation counter guards the race of
an old run finishing just as a new request arrives).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from circuitwidgets.superposition import ToyResult

__all__ = ["Retrainer"]

log = logging.getLogger(__name__)


class Retrainer:
    """Runs ``train(probability, decay, stop)`` on a thread and hands the latest finished result to ``publish``."""

    def __init__(
        self,
        train: Callable[[float, float, threading.Event], ToyResult],
        publish: Callable[[float, float, ToyResult], None],
        failed: Callable[[str], None],
    ) -> None:
        self._train, self._publish, self._failed = train, publish, failed
        self._lock = threading.Lock()
        self._generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.superseded = 0
        """How many runs a later request stopped (for tests and the view's status)."""

    def request(self, probability: float, decay: float) -> None:
        """Train at ``(probability, decay)``, stopping any run in progress."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._stop.set()
                self.superseded += 1
            self._generation += 1
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run,
                args=(self._generation, probability, decay, self._stop),
                name="toy-retrain",
                daemon=True,
            )
            self._thread.start()

    def _run(self, generation: int, probability: float, decay: float, stop: threading.Event) -> None:
        try:
            result = self._train(probability, decay, stop)
        except Exception as exc:  # reported in the view's status; the kernel keeps running
            log.exception("retraining at p=%s, decay=%s failed", probability, decay)
            with self._lock:
                if generation == self._generation:
                    self._failed(f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            if generation != self._generation or result.stopped:
                return
            try:
                self._publish(probability, decay, result)
            except Exception as exc:
                log.exception("publishing the retrained model failed")
                self._failed(f"{type(exc).__name__}: {exc}")

    @property
    def running(self) -> bool:
        """Whether a run is in progress."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the current run to end; whether it has."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running

    def close(self) -> None:
        """Stop the run in progress (its result is dropped) and wait for its thread."""
        with self._lock:
            self._generation += 1
            self._stop.set()
        self.wait(5.0)
