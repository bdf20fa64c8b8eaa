"""AttentionPatterns streaming head by head: selected head first, complete traits at the end, the loop kept free."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest
from _attention_data import IDS, causal_patterns
from _comm import Recorder, custom_from_view
from _loops import run_in_fresh_loop

from circuitwidgets import AttentionPatterns
from circuitwidgets.model import CircuitModel


@pytest.fixture
def model(random_model: Callable[..., CircuitModel]) -> CircuitModel:
    return random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=20, n_ctx=32, biases=True)


def test_streaming_sends_the_selected_head_first_and_ends_with_complete_traits(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = AttentionPatterns(model, IDS, stream=True, selected_layer=1, selected_head=2)
    rec = Recorder()
    monkeypatch.setattr(w, "_send", rec)
    assert (
        w.streaming
        and w.patterns.shape == (2, 3, 0)
        and w.value_patterns is not None
        and w.value_patterns.shape == (2, 3, 0)
    )
    stream = w._stream
    assert stream is not None
    custom_from_view(w, {"type": "want_heads"})  # the view rendered and asks for what is ready (nothing yet)
    assert rec.custom() == []
    stream.step()
    ((content, buffers),) = rec.custom()
    assert content == {"type": "heads", "heads": [[1, 2]], "value": True}
    n = len(IDS)
    assert [memoryview(b).nbytes for b in buffers] == [n * (n + 1) // 2] * 2
    w.selected_layer, w.selected_head = 0, 1  # a head chosen meanwhile jumps the queue
    stream.step()
    assert rec.custom()[-1][0]["heads"] == [[0, 1]]
    # a second view asking later gets everything done so far in one message
    custom_from_view(w, {"type": "want_heads"})
    assert rec.custom()[-1][0]["heads"] == [[0, 1], [1, 2]]
    while stream.step():
        pass
    assert not w.streaming
    final = rec.updates()[-1]
    assert set(final) == {"patterns", "value_patterns"}
    sync = AttentionPatterns(model, IDS, stream=False)
    np.testing.assert_array_equal(w.patterns, sync.patterns)
    assert w.value_patterns is not None and sync.value_patterns is not None
    np.testing.assert_array_equal(w.value_patterns, sync.value_patterns)


def test_displaying_a_streaming_widget_does_not_end_the_stream(model: CircuitModel) -> None:
    w = AttentionPatterns(model, IDS, stream=True)
    bundle = w._repr_mimebundle_()
    assert bundle is not None and "application/vnd.jupyter.widget-view+json" in bundle[0]
    assert "text/html" not in bundle[0] and w.streaming
    w.finish()
    assert "text/html" in (w._repr_mimebundle_() or ({}, {}))[0]  # small and complete: the offline fallback is back


def test_reading_the_data_finishes_a_stream(model: CircuitModel) -> None:
    w = AttentionPatterns(model, IDS, stream=True)
    assert w.streaming
    state = w.get_state()  # what save_html and the explorer read
    assert not w.streaming
    assert state["patterns"]["shape"] == [2, 3, len(IDS) * (len(IDS) + 1) // 2]
    w2 = AttentionPatterns(model, IDS, stream=True)
    assert w2.get_state("selected_head") == {"selected_head": 0} and w2.streaming  # selection alone does not
    assert w2.attention.shape == (2, 3, len(IDS), len(IDS)) and not w2.streaming


def test_in_an_event_loop_large_inputs_stream_without_blocking(monkeypatch: pytest.MonkeyPatch) -> None:
    from circuitwidgets.widgets.attention import source as module

    monkeypatch.setattr(module, "STREAM_BYTES", 1000)
    a = causal_patterns(3, 4, 40)

    async def build() -> tuple[bool, set[int], bool]:
        w = AttentionPatterns.from_arrays([f"t{i}" for i in range(40)], a, selected_layer=2, selected_head=3)
        started_streaming = w.streaming
        left_seen: set[int] = set()  # heads still to encode, each time the test's coroutine ran
        for _ in range(5000):
            if not w.streaming:
                break
            left_seen.add(len(w._stream.queue))  # type: ignore[union-attr]
            await asyncio.sleep(0.001)  # the kernel's other work runs here
        return started_streaming, left_seen, w.streaming

    started, left_seen, still = run_in_fresh_loop(build)
    assert started and not still
    assert len(left_seen) >= 4  # the loop turned between heads: other work ran while they streamed


def test_small_inputs_and_scripts_do_not_stream(model: CircuitModel) -> None:
    assert not AttentionPatterns(model, IDS).streaming  # no event loop running

    async def build() -> bool:
        return AttentionPatterns(model, IDS).streaming  # below STREAM_BYTES

    assert not run_in_fresh_loop(build)
