"""Long contexts (AttentionPatterns.from_qk): the exact overview, top sources and the tile protocol."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from _comm import Recorder, custom_from_view
from _loops import run_in_fresh_loop, until

from circuitwidgets import AttentionPatterns
from circuitwidgets.errors import ArgumentError, MemoryBudgetError, ShapeError
from circuitwidgets.model import CircuitModel

IDS = [1, 7, 3, 9, 4, 1, 7, 3, 9, 4, 1, 7]


@pytest.fixture
def model(random_model: Callable[..., CircuitModel]) -> CircuitModel:
    return random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=20, n_ctx=32, biases=True)


# --- long contexts: from_qk, the overview and the tile protocol ---------------------


def _long_widget(
    monkeypatch: pytest.MonkeyPatch, n: int = 300, *, queued_tiles: bool = False, **kwargs: Any
) -> tuple[AttentionPatterns, Recorder]:
    """A long-context widget answering as a kernel with no event loop does: at once.

    (When the browser tests run first, their session's loop is running in this
    thread; the queued answers of a kernel with a loop have their own tests below.)
    """
    import circuitwidgets.widgets.attention.tiles as tiles_module
    import circuitwidgets.widgets.attention.widget as attention_module

    if not queued_tiles:
        monkeypatch.setattr(tiles_module, "running_loop", lambda: None)
    monkeypatch.setattr(attention_module, "running_loop", lambda: None)
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 4, n, 8, generator=g), torch.randn(2, 2, n, 8, generator=g)
    w = AttentionPatterns.from_qk([f"t{i}" for i in range(n)], q, k, sliding_window=[None, 50], **kwargs)
    rec = Recorder()
    monkeypatch.setattr(w, "_send", rec)
    return w, rec


def _tile_replies(rec: Recorder) -> list[tuple[dict[str, Any], list[Any]]]:
    return [(c, b) for c, b in rec.custom() if c.get("type") in ("tile", "tile_error")]


def test_from_qk_holds_queries_and_keys_and_sends_an_exact_overview_and_top_sources(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w, _ = _long_widget(monkeypatch)
    assert w.qk is not None and not w.streaming
    assert w.patterns.shape == (2, 4, 0) and (w.n_layers, w.n_heads, w.n_tokens) == (2, 4, 300)
    assert w.tile_block == 2 and w.tile_size == 64
    dense = w.qk.dense(1, 3).numpy()  # sliding window 50 on layer 1
    blocks = np.pad(dense, ((0, 0), (0, 0))).reshape(150, 2, 150, 2)
    assert np.abs(w.overview[1, 3, 0].astype(np.float32) - blocks.max((1, 3))).max() <= 1e-3  # float16 on the wire
    assert np.abs(w.overview[1, 3, 1].astype(np.float32) - blocks.mean((1, 3))).max() <= 1e-3
    top = w.top_sources[1, 3]
    assert top.shape[1] >= 1 and (top[:, 0] == dense.argmax(1)).all()
    with pytest.raises(ArgumentError, match="long-context"):
        _ = w.attention


def test_a_tile_request_is_answered_with_the_exact_block_max_and_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    w, rec = _long_widget(monkeypatch)
    custom_from_view(w, {"type": "tile", "id": 5, "layer": 0, "head": 1, "level": 0, "row": 4, "col": 2})
    [(content, buffers)] = _tile_replies(rec)
    assert content == {
        "type": "tile",
        "id": 5,
        "layer": 0,
        "head": 1,
        "level": 0,
        "row": 4,
        "col": 2,
        "kind": "raw",
        "rows": 44,
        "cols": 64,
    }
    got = np.frombuffer(bytes(buffers[0]), dtype=np.float32).reshape(44, 64)
    assert w.qk is not None
    np.testing.assert_allclose(got, w.qk.dense(0, 1).numpy()[256:300, 128:192], atol=1e-6)


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        ({"type": "tile", "id": 1, "layer": 0, "head": 9, "level": 0, "row": 0, "col": 0}, "no head"),
        ({"type": "tile", "id": 1, "layer": 0, "head": 0, "level": 0, "row": 5, "col": 0}, "outside"),
        ({"type": "tile", "id": 1, "layer": 0, "head": 0, "level": 0, "row": -1, "col": 0}, "outside"),
        ({"type": "tile", "id": 1, "layer": 0, "head": 0, "level": 7, "row": 0, "col": 0}, "level 7"),
        ({"type": "tile", "id": 1, "layer": "0", "head": 0, "level": 0, "row": 0, "col": 0}, "integer layer"),
        ({"type": "tile", "id": 1, "layer": 0, "head": 0, "level": 0, "row": 0}, "integer col"),
        ({"type": "tile", "id": True, "layer": 0, "head": 0, "level": 0, "row": 0, "col": 0}, "integer id"),
        ({"type": "tile", "id": 2**40, "layer": 0, "head": 0, "level": 0, "row": 0, "col": 0}, "id must be"),
        ({"type": "tile", "id": 1, "layer": 0, "head": 0, "level": 0, "row": 10**30, "col": 0}, "outside"),
        ({"type": "cancel", "ids": "all"}, "cancel"),
        ({"type": "tile", "id": 1, "layer": 0, "head": 0, "level": 0, "row": 0, "col": 0, "kind": "value"}, "no value"),
        ({"type": "tile", "id": 1, "layer": 0, "head": 0, "level": 0, "row": 0, "col": 0, "kind": [1]}, "kind must"),
    ],
)
def test_a_bad_tile_request_gets_an_error_message_never_an_exception_or_data(
    monkeypatch: pytest.MonkeyPatch, request_: dict[str, Any], says: str
) -> None:
    w, rec = _long_widget(monkeypatch)
    custom_from_view(w, request_)
    [(content, buffers)] = _tile_replies(rec)
    assert content["type"] == "tile_error" and says in content["message"] and buffers == []


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"q": torch.zeros(1, 2, 5, 4), "k": torch.zeros(1, 2, 5, 4)}, ShapeError, "q: expected 6 positions"),
        ({"q": torch.zeros(1, 3, 6, 4), "k": torch.zeros(1, 2, 6, 4)}, ArgumentError, "n_kv_heads"),
        (
            {"q": torch.zeros(1, 2, 6, 4), "k": torch.zeros(1, 2, 6, 4), "sliding_window": -2},
            ArgumentError,
            "sliding_window",
        ),
        ({"q": torch.zeros(1, 2, 6, 4), "k": torch.zeros(1, 2, 6, 4), "scale": math.inf}, ArgumentError, "scale"),
    ],
)
def test_from_qk_refuses_bad_queries_and_keys_naming_the_argument(
    kwargs: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        AttentionPatterns.from_qk([f"t{i}" for i in range(6)], **kwargs)


def test_from_qk_refuses_an_overview_over_its_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("circuitwidgets.widgets.attention.tiles.OVERVIEW_BUDGET_BYTES", 1000)
    with pytest.raises(MemoryBudgetError, match=r"q: .*overview"):
        AttentionPatterns.from_qk([f"t{i}" for i in range(64)], torch.zeros(2, 4, 64, 4), torch.zeros(2, 4, 64, 4))


def test_long_inputs_from_a_model_use_its_queries_and_keys_with_the_same_patterns(model: CircuitModel) -> None:
    dense_widget = AttentionPatterns(model, IDS)
    long_widget = AttentionPatterns.from_model(model, IDS, long=True)
    assert long_widget.qk is not None and long_widget.patterns.shape[2] == 0
    for layer in range(2):
        for head in range(3):
            want = dense_widget.attention[layer, head]
            np.testing.assert_allclose(long_widget.qk.dense(layer, head).numpy(), want, atol=0.5 / 255 + 1e-6)


def test_in_an_event_loop_tiles_are_served_newest_first_and_cancelled_requests_are_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w, rec = _long_widget(monkeypatch, queued_tiles=True)

    async def play() -> None:
        for i in range(4):
            custom_from_view(w, {"type": "tile", "id": i, "layer": 0, "head": 0, "level": 0, "row": i, "col": 0})
        custom_from_view(w, {"type": "cancel", "ids": [1, 2]})
        await until(lambda: len(_tile_replies(rec)) >= 2)

    run_in_fresh_loop(play)
    assert [c["id"] for c, _ in _tile_replies(rec)] == [3, 0]


def test_in_an_event_loop_the_selected_heads_overview_goes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 3, 40, 4, generator=g), torch.randn(2, 3, 40, 4, generator=g)
    rec = Recorder()

    async def build() -> tuple[bool, bool]:
        w = AttentionPatterns.from_qk([f"t{i}" for i in range(40)], q, k, selected_layer=1, selected_head=2)
        monkeypatch.setattr(w, "_send", rec)
        started = w.streaming
        custom_from_view(w, {"type": "want_heads"})
        await until(lambda: not w.streaming)
        return started, w.streaming

    started, still = run_in_fresh_loop(build)
    heads = [tuple(h) for c, _ in rec.custom() if c["type"] == "overview" for h in c["heads"]]
    assert started and not still
    assert heads[0] == (1, 2) and sorted(heads) == [(l, h) for l in range(2) for h in range(3)]
    assert any("overview" in u for u in rec.updates())  # the complete traits follow
