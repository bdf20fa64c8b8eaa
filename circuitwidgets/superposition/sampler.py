"""Batches of the toy models' synthetic data, drawn on a second thread while the first trains.

A feature is present with probability ``p = 1 − S`` and then uniform in
``[0, 1]``. Both draws come from one uniform number ``u``: the feature is
present when ``u < p`` and its value is ``u / p`` (uniform on ``[0, 1)`` given
that ``u < p``), so each entry costs one 32-bit random number, not the two of
the reference loop (presence, then value). The numbers are 23-bit uniforms
made from the raw 64-bit output of a seeded PCG64 stream (two per output),
which is where most of the reference loop's time went.

A batch is ``[instances, batch, n + 1]`` float32 holding ``−x`` and a last
column of ones: the sign and the column let the training step fold ``x`` and
the bias into one matrix product (see :mod:`circuitwidgets.superposition.model`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np
import torch
from torch.nn import functional

_MANTISSA = 0x007FFFFF
_ONE = 0x3F800000  # the bits of 1.0f: mantissa bits OR'ed in give a float in [1, 2)
_CHUNK_ENTRIES = 2**18  # entries drawn per call at most (about 1 MiB: stays in a core's L2 cache)


class NegatedBatches:
    """Seeded stream of batches ``[−x, 1]`` (see the module's docstring); iterate to draw them in order.

    With ``threaded=True`` a background thread draws the next batches while the
    caller uses the current one (the numbers are the same either way: one
    sequential stream). :meth:`close` stops the thread; buffers are recycled, so
    a batch is valid only until the next one is drawn.
    """

    def __init__(
        self,
        probability: np.ndarray,
        n: int,
        batch: int,
        seed: np.random.SeedSequence,
        *,
        threaded: bool = True,
        sets: str = "independent",
        set_size: int = 2,
    ) -> None:
        self.instances = int(probability.shape[0])
        self.n, self.batch = n, batch
        self.sets, self.set_size = sets, set_size
        p = torch.as_tensor(probability, dtype=torch.float32).view(-1, 1, 1)
        self._p = p
        self._scale, self._offset = -1.0 / p, 1.0 / p  # −u/p = f·(−1/p) + 1/p for f = 1 + u
        self._bits = np.random.PCG64(seed)
        # Small batches are drawn several steps at a time, so the per-call overhead is paid once per chunk.
        self.chunk = max(1, _CHUNK_ENTRIES // (self.instances * batch * (n + 1)))
        entries = self.chunk * self.instances * batch * (n + 1)
        # (correlated or anticorrelated sets draw one more uniform per set: whether, or which of it, is present)
        self._set_entries = 0 if sets == "independent" else self.chunk * self.instances * batch * (n // set_size)
        self._words = (entries + self._set_entries + 1) // 2
        self._threaded = threaded
        self._free: queue.Queue[torch.Tensor] = queue.Queue()
        self._ready: queue.Queue[torch.Tensor | BaseException] = queue.Queue(maxsize=2)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for _ in range(4 if threaded else 1):
            self._free.put(torch.empty(self.chunk, self.instances, batch, n + 1))

    def _fill(self, out: torch.Tensor) -> torch.Tensor:
        raw = self._bits.random_raw(self._words).view(np.int32)
        bits = torch.from_numpy(raw[: out.numel()]).view(out.shape)
        bits.bitwise_and_(_MANTISSA).bitwise_or_(_ONE)
        uniform = bits.view(torch.float32)  # 1 + u, u uniform in [0, 1) on a 2^-23 grid
        if self.sets == "independent":
            torch.addcmul(self._offset, uniform, self._scale, out=out)  # −u/p
            functional.threshold(out, -1.0, 0.0, inplace=True)  # absent (u ≥ p, so −u/p ≤ −1) → 0
        else:
            self._fill_sets(out, uniform, raw[out.numel() : out.numel() + self._set_entries])
        out[..., self.n] = 1.0
        return out

    def _fill_sets(self, out: torch.Tensor, uniform: torch.Tensor, raw: np.ndarray) -> None:
        """Features in sets of ``set_size``: present all together (correlated) or at most one (anticorrelated).

        Each feature is present with probability ``p`` either way; a present
        feature's value is ``u`` (its entry's uniform), and one more uniform per
        set decides presence: ``s < p`` for the whole set, or feature ``⌊s / p⌋``
        of the set (none when ``s ≥ k·p``).
        """
        k = self.set_size
        shape = (*out.shape[:-1], self.n // k)
        bits = torch.from_numpy(raw).view(shape)
        bits.bitwise_and_(_MANTISSA).bitwise_or_(_ONE)
        chooser = bits.view(torch.float32) - 1.0
        if self.sets == "correlated":
            present = (chooser < self._p).repeat_interleave(k, dim=-1)
        else:
            which = torch.floor(chooser / self._p)
            present = (which.unsqueeze(-1) == torch.arange(k, dtype=which.dtype)).flatten(-2)
        values = uniform[..., : self.n] - 1.0
        out[..., : self.n] = torch.where(present, -values, torch.zeros(()))

    def _produce(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    buffer = self._free.get(timeout=0.1)
                except queue.Empty:
                    continue
                batch = self._fill(buffer)
                while not self._stop.is_set():
                    try:
                        self._ready.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # handed to the consumer, which re-raises it
            self._ready.put(exc)

    def __iter__(self) -> Iterator[torch.Tensor]:
        if not self._threaded:
            buffer = self._free.get()
            while True:
                yield from self._fill(buffer)
        self._thread = threading.Thread(target=self._produce, name="toy-batches", daemon=True)
        self._thread.start()
        previous: torch.Tensor | None = None
        try:
            while True:
                item = self._ready.get()
                if isinstance(item, BaseException):
                    raise item
                if previous is not None:
                    self._free.put(previous)
                previous = item
                yield from item
        finally:
            self.close()

    def close(self) -> None:
        """Stop the drawing thread (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
