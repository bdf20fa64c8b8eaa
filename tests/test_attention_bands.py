"""Long contexts, live: heads summarised in slices, sent as bands of finished overview rows.

A head at 32K tokens takes seconds to summarise. The kernel must answer tile
requests and selections within a slice of that work, and the view must see each
head's rows as they become final, not only the whole head at the end.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch
from _comm import Recorder, custom_from_view
from _loops import run_in_fresh_loop, until

from circuitwidgets import AttentionPatterns
from circuitwidgets.activations.qk_patterns import QKPatterns
from circuitwidgets.activations.summary import HeadSummariser
from circuitwidgets.widgets.attention import tiles as _attention_tiles
from circuitwidgets.widgets.attention.tiles import TileSource

N = 96  # block 1: the overview is the pattern itself


def _qk(n: int = N, layers: int = 1, heads: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(layers, heads, n, 8, generator=g), torch.randn(layers, heads, n, 8, generator=g)


def _small_chunks(monkeypatch: pytest.MonkeyPatch, rows: int, n: int = N) -> None:
    monkeypatch.setattr("circuitwidgets.activations.qk_patterns.CHUNK_BYTES", 4 * n * rows)


def _bands(sent: list[tuple[dict[str, Any], list[Any]]], head: tuple[int, int]) -> list[tuple[dict[str, Any], Any]]:
    return [(c, b) for c, b in sent if c.get("type") == "overview" and "rows" in c and tuple(c["heads"][0]) == head]


def _reassemble(bands: list[tuple[dict[str, Any], Any]], grid: int) -> np.ndarray:
    """The head's ``[2, G, G]`` overview from its bands, checking they tile the rows in order."""
    out = np.full((2, grid, grid), np.nan, dtype=np.float16)
    expect = 0
    for content, [buffer] in bands:
        i0, i1 = content["rows"]
        assert i0 == expect, f"band starts at row {i0}, expected {expect}"
        out[:, i0:i1] = np.frombuffer(bytes(buffer), dtype=np.float16).reshape(2, i1 - i0, grid)
        expect = i1
    assert expect == grid
    return out


def test_a_head_goes_to_the_view_in_bands_that_tile_its_rows_and_equal_the_final_overview(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_chunks(monkeypatch, rows=8)  # 12 chunks a head
    monkeypatch.setattr(_attention_tiles, "BAND_INTERVAL_S", 0.0)  # a band after every chunk
    q, k = _qk()
    rec = Recorder()

    async def play() -> AttentionPatterns:
        w = AttentionPatterns.from_qk([f"t{i}" for i in range(N)], q, k, selected_layer=0, selected_head=2)
        monkeypatch.setattr(w, "_send", rec)
        custom_from_view(w, {"type": "want_heads"})
        await until(lambda: not w.streaming)
        return w

    w = run_in_fresh_loop(play)
    overview_msgs = [c for c, _ in rec.custom() if c["type"] == "overview"]
    assert tuple(overview_msgs[0]["heads"][0]) == (0, 2)  # the selected head first
    for head in range(3):
        bands = _bands(rec.custom(), (0, head))
        assert len(bands) >= 2, "a head of 12 chunks arrives in more than one band"
        assert [c["done"] for c, _ in bands] == [False] * (len(bands) - 1) + [True]
        whole = _reassemble(bands, N)
        np.testing.assert_array_equal(whole, w.overview[0, head])
    dense = w.qk.dense(0, 2).numpy()
    assert np.abs(w.overview[0, 2, 0].astype(np.float32) - dense).max() <= 1e-3


def test_bands_come_at_most_once_per_interval_and_the_first_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _small_chunks(monkeypatch, rows=8)
    monkeypatch.setattr(_attention_tiles, "BAND_INTERVAL_S", 3600.0)
    q, k = _qk(heads=1)
    rec = Recorder()
    source = TileSource(QKPatterns(q, k), rec)
    source.view_wants = True
    while source.step():
        pass
    bands = _bands(rec.sent, (0, 0))
    assert [c["rows"] for c, _ in bands] == [[0, 8], [8, N]]  # the first chunk, then the rest when done
    assert [c["done"] for c, _ in bands] == [False, True]


def test_choosing_another_head_mid_summary_finishes_it_first_and_the_first_resumes_where_it_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_chunks(monkeypatch, rows=8)
    monkeypatch.setattr(_attention_tiles, "BAND_INTERVAL_S", 0.0)
    q, k = _qk()
    rec = Recorder()
    engine = QKPatterns(q, k)
    source = TileSource(engine, rec)
    source.view_wants = True
    for _ in range(3):
        source.step()  # head (0, 0): rows 0..24
    source.prioritise(0, 2)
    while source.step():
        pass
    order = [tuple(c["heads"][0]) for c, _ in rec.sent if c.get("done")]
    assert order == [(0, 2), (0, 0), (0, 1)]
    first = _bands(rec.sent, (0, 0))
    assert [c["rows"][0] for c, _ in first][:4] == [0, 8, 16, 24]  # resumed at row 24, not from the start
    for head in range(3):
        dense = engine.dense(0, head).numpy()
        assert np.abs(_reassemble(_bands(rec.sent, (0, head)), N)[0].astype(np.float32) - dense).max() <= 1e-3


def test_asking_mid_head_sends_the_rows_finished_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    _small_chunks(monkeypatch, rows=8)
    q, k = _qk(heads=2)
    rec = Recorder()
    source = TileSource(QKPatterns(q, k), rec)
    source.step()
    source.step()  # two chunks of head (0, 0): 16 of its 96 rows
    assert not rec.sent  # the view has not asked
    source.send_ready()
    [(content, [buffer])] = rec.sent
    assert content == {"type": "overview", "heads": [[0, 0]], "rows": [0, 16], "done": False}
    assert len(bytes(buffer)) == 2 * 16 * N * 2


def test_a_tile_is_answered_between_slices_of_a_head_not_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 512
    _small_chunks(monkeypatch, rows=2, n=n)  # 256 chunks a head
    monkeypatch.setattr(_attention_tiles, "SLICE_S", 0.0)  # one chunk per turn of the loop
    q, k = _qk(n=n, heads=2)
    rec = Recorder()

    async def play() -> AttentionPatterns:
        w = AttentionPatterns.from_qk([f"t{i}" for i in range(n)], q, k)
        monkeypatch.setattr(w, "_send", rec)
        custom_from_view(w, {"type": "want_heads"})
        await asyncio.sleep(0.01)
        custom_from_view(w, {"type": "tile", "id": 1, "layer": 0, "head": 1, "level": 0, "row": 1, "col": 0})
        await until(lambda: not w.streaming)
        return w

    run_in_fresh_loop(play)
    kinds = [(c["type"], c.get("done")) for c, _ in rec.custom()]
    tile_at = kinds.index(("tile", None))
    first_done = kinds.index(("overview", True))
    assert tile_at < first_done, "the tile waited for the whole head"


def test_background_summaries_run_on_one_thread_and_leave_the_users_setting_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_chunks(monkeypatch, rows=8)
    q, k = _qk()
    seen: list[int] = []
    step = HeadSummariser.step

    def watched(self: Any) -> tuple[int, int]:
        seen.append(torch.get_num_threads())
        return step(self)

    monkeypatch.setattr(HeadSummariser, "step", watched)

    async def play() -> set[int]:
        torch.set_num_threads(2)  # the user's setting, in the loop's thread
        w = AttentionPatterns.from_qk([f"t{i}" for i in range(N)], q, k)
        between: set[int] = set()  # what the user's code sees while the summaries are under way
        while w.streaming:
            between.add(torch.get_num_threads())
            await asyncio.sleep(0.001)
        return between | {torch.get_num_threads()}

    users = run_in_fresh_loop(play)
    assert len(seen) == 3 * N // 8 and set(seen) == {_attention_tiles.BACKGROUND_THREADS}
    assert users == {2}
