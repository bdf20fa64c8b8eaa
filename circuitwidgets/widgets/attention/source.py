"""An attention widget's validated data, and how it streams to the view.

- :class:`Source`: validated data for a new widget (from a model,
  :mod:`~circuitwidgets.widgets.attention.from_model`, or from arrays), encoded at
  once or by a :class:`Stream` (one head per turn of the kernel's event loop;
  see *Streaming* below);
- :func:`build_bar`: the progress bar of a build that takes over a second.

Streaming
---------
With a running event loop (a Jupyter kernel) and more than
:data:`STREAM_BYTES` of patterns, the constructor validates everything but
returns before encoding: ``patterns`` holds the placeholder ``[n_layers,
n_heads, 0]``, and a task on the kernel's loop encodes one head per step
(selected head first; a head selected meanwhile jumps the queue), yielding to
the kernel between steps. Each encoded head goes to the view as a custom
message ``{"type": "heads", "heads": [[l, h]], "value": bool}`` with its
buffers (the view asks for the heads already done with ``{"type":
"want_heads"}`` when it renders). When the last head is done the complete
arrays are assigned to ``patterns`` / ``value_patterns``, so saved widget
state and exported HTML hold everything; reading the data from Python
(``attention``, ``get_state``, ``save_html``) finishes the stream first.
The price is one extra transfer of the data (streamed heads, then the trait).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from circuitwidgets.activations.value_paths import value_weighted
from circuitwidgets.widgets.attention.codec import Heads, check_state_bytes, encode_all, head_size, pack, validate
from circuitwidgets.widgets.core.base import CircuitWidget

__all__ = [
    "BAR_DELAY_S",
    "STREAM_BYTES",
    "YIELD_S",
    "BuildBar",
    "Source",
    "Stream",
    "build_bar",
    "default_diagonals",
    "repeat_period",
    "running_loop",
]

#: Patterns larger than this (bytes, encoded) stream head by head when an event loop runs.
STREAM_BYTES = 16 * 2**20

#: A build's progress bar appears once the build has taken this long (seconds).
BAR_DELAY_S = 1.0


class BuildBar:
    """A plain-text ``tqdm`` bar on stderr over ``total`` steps (never a widget a notebook would save), made
    only once the build has taken :data:`BAR_DELAY_S`: a fast build creates nothing.

    ``enabled=None`` lets tqdm decide (shown when stderr is a terminal); ``False`` hides it. :meth:`close` it when done.
    """

    def __init__(self, total: int, desc: str, enabled: bool | None = None) -> None:
        self.total, self.desc, self.enabled = total, desc, enabled
        self.done = 0
        self.started = time.monotonic()
        self.bar: Any = None

    def update(self, n: int = 1) -> None:
        """``n`` more steps done."""
        self.done += n
        if self.bar is None and self.enabled is not False and time.monotonic() - self.started >= BAR_DELAY_S:
            from tqdm import tqdm

            self.bar = tqdm(
                total=self.total, initial=self.done - n, desc=self.desc, leave=False,
                disable=None if self.enabled is None else not self.enabled,
            )  # fmt: skip
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        """Remove the bar (if one was shown)."""
        if self.bar is not None:
            self.bar.close()


def build_bar(total: int, desc: str, enabled: bool | None = None) -> BuildBar:
    """A :class:`BuildBar` over ``total`` steps."""
    return BuildBar(total, desc, enabled)


def repeat_period(tokens: Sequence[Any], min_length: int = 4) -> int | None:
    """Period ``p`` of a repeated sequence (``tokens[i] == tokens[i - p]`` for at least half of ``i ≥ p``), else None.

    The paper's induction test input ``[BOS] r_1..r_n r_1..r_n`` has period ``n``;
    there an induction head attends along the diagonal ``dest - src = p - 1``.
    Cost: O(n²) comparisons.
    """
    n = len(tokens)
    codes = (
        np.unique(np.asarray([str(t) for t in tokens], dtype=object), return_inverse=True)[1] if n else np.zeros(0, int)
    )
    best: tuple[int, int] | None = None
    for p in range(2, n - min_length + 1):
        matches = int((codes[p:] == codes[:-p]).sum())
        if matches >= max(min_length, (n - p) // 2) and (best is None or matches > best[1]):
            best = (p, matches)
    return None if best is None else best[0]


def default_diagonals(tokens: Sequence[str]) -> list[dict[str, Any]]:
    """Previous-token diagonal, and the induction diagonal when the tokens repeat (:func:`repeat_period`)."""
    out: list[dict[str, Any]] = [{"offset": 1, "label": "previous token"}]
    period = repeat_period(tokens)
    if period is not None and period - 1 != 1:
        out.append({"offset": period - 1, "label": f"induction (repeat every {period})"})
    return out


# ---------------------------------------------------------------- streaming


class Stream:
    """Encodes heads one step at a time for a widget (see the module docs, *Streaming*)."""

    def __init__(
        self,
        widget: CircuitWidget,
        heads: Heads,
        causal: bool,
        norms: NDArray[np.float32] | None,
    ) -> None:
        self.widget = widget
        self.heads = heads
        self.causal = causal
        self.norms = norms
        shape = (heads.n_layers, heads.n_heads, *head_size(heads.n, causal))
        self.patterns = np.empty(shape, dtype=np.uint8)
        self.value_patterns = np.empty(shape, dtype=np.uint8) if norms is not None else None
        self.tril = np.tri(heads.n, dtype=bool) if causal else None
        self.ready = np.zeros((heads.n_layers, heads.n_heads), dtype=bool)
        self.queue: list[tuple[int, int]] = [(l, h) for l in range(heads.n_layers) for h in range(heads.n_heads)]
        self.view_wants = False
        self.task: asyncio.Task[None] | None = None

    def prioritise(self, layer: int, head: int) -> None:
        """Encode ``[layer, head]`` next."""
        if (layer, head) in self.queue:
            self.queue.remove((layer, head))
            self.queue.insert(0, (layer, head))

    def _encode(self, layer: int, head: int) -> None:
        a = self.heads.head(layer, head)
        self.patterns[layer, head] = pack(a, self.causal, self.tril)
        if self.value_patterns is not None and self.norms is not None:
            self.value_patterns[layer, head] = pack(value_weighted(a, self.norms[layer, head]), self.causal, self.tril)
        self.ready[layer, head] = True

    def _message(self, heads: list[tuple[int, int]]) -> None:
        buffers: list[memoryview] = []
        for layer, head in heads:
            buffers.append(memoryview(self.patterns[layer, head]).cast("B"))
            if self.value_patterns is not None:
                buffers.append(memoryview(self.value_patterns[layer, head]).cast("B"))
        content = {"type": "heads", "heads": [[l, h] for l, h in heads], "value": self.value_patterns is not None}
        self.widget.send(content, buffers)

    def send_ready(self) -> None:
        """Send every head encoded so far (the view asked), in messages of up to 16 MB."""
        self.view_wants = True
        per_head = self.patterns[0, 0].nbytes * (2 if self.value_patterns is not None else 1)
        batch = max(1, STREAM_BYTES // max(1, per_head))
        ready = [(int(l), int(h)) for l, h in zip(*np.nonzero(self.ready), strict=True)]
        for i in range(0, len(ready), batch):
            self._message(ready[i : i + batch])

    def step(self) -> bool:
        """Encode (and send) the next head; commit when none is left. Returns whether heads remain."""
        if self.queue:
            layer, head = self.queue.pop(0)
            self._encode(layer, head)
            if self.view_wants:
                self._message([(layer, head)])
        if not self.queue:
            self.commit()
            return False
        return True

    def commit(self) -> None:
        """Give the widget the complete arrays (saved state and exports hold them); the stream ends."""
        widget = self.widget
        if widget._stream is not self:
            return
        widget._stream = None
        with widget.hold_sync():
            widget.patterns = self.patterns
            if self.value_patterns is not None:
                widget.value_patterns = self.value_patterns

    def finish(self) -> None:
        """Encode every remaining head now (blocking) and commit."""
        self.view_wants = False  # the complete traits follow; no need to send heads one by one
        while self.step():
            pass

    async def run(self) -> None:
        """Encode head after head, yielding to the event loop in between."""
        while self.queue and self.widget._stream is self:
            if self.widget.comm is None:  # closed: stop; reading the data finishes on demand
                return
            if not self.step():
                return
            await asyncio.sleep(YIELD_S)


#: Seconds a background task sleeps between steps. A zero sleep is a single turn of the loop, and
#: ipykernel 7 needs several turns to bring a comm message to its handler: measured with 100 ms
#: steps, a message waited 0.4 s with zero sleeps and 0.1 s (one step) with 1 ms sleeps.
YIELD_S = 0.001


def running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Source:
    """Validated data for a new widget: tokens, heads and the optional per-position arrays (``loss``: ``[n]``)."""

    def __init__(
        self,
        tokens: list[str],
        heads: Heads,
        causal: bool | None,
        norms: NDArray[np.float32] | None,
        effect: NDArray[np.float32] | None,
        *,
        known_causal: bool,
        loss: NDArray[np.float32] | None = None,
    ) -> None:
        self.tokens, self.heads, self.norms, self.effect, self.loss = tokens, heads, norms, effect, loss
        check_state_bytes(heads.n_layers, heads.n_heads, heads.n, value_weighted=norms is not None)
        self.causal = validate(heads, causal, row_stochastic=True, known_causal=known_causal)

    def prepare(
        self,
        widget: CircuitWidget | None,
        stream: bool | None,
        loop_running: bool,
        done: Callable[[int], object] | None = None,
    ) -> tuple[dict[str, Any], Stream | None]:
        """Initial traits, and the stream that will fill ``patterns`` (or ``None``: encoded here).

        ``done(n)`` is called as ``n`` more heads are encoded here (a progress bar; twice per head
        with value-weighted patterns).
        """
        heads, causal, norms = self.heads, self.causal, self.norms
        per_head = int(np.prod(head_size(heads.n, causal)))
        total = heads.n_layers * heads.n_heads * per_head * (2 if norms is not None else 1)
        if stream is None:
            stream = loop_running and total > STREAM_BYTES
        data: dict[str, Any] = {
            "prompts": [],
            "tokens": self.tokens,
            "causal": causal,
            "value_norms": norms,
            "logit_effect": self.effect,
            "per_token_loss": self.loss,
            "diagonals": default_diagonals(self.tokens),
        }
        if stream and widget is not None:
            placeholder = np.zeros((heads.n_layers, heads.n_heads, 0), dtype=np.uint8)
            data["patterns"] = placeholder
            data["value_patterns"] = placeholder if norms is not None else None
            return data, Stream(widget, heads, causal, norms)
        data["patterns"] = encode_all(heads, causal, done=done)
        data["value_patterns"] = None
        if norms is not None:
            data["value_patterns"] = encode_all(heads, causal, lambda l, h, a: value_weighted(a, norms[l, h]), done)
        return data, None

    @property
    def encoded_heads(self) -> int:
        """Heads :meth:`prepare` encodes (``done``'s total): raw, and value-weighted when there are norms."""
        return self.heads.n_layers * self.heads.n_heads * (2 if self.norms is not None else 1)
