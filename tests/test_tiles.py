"""Long-context attention from queries and keys: tiles and overview equal the dense softmax."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from circuitwidgets.activations.qk_patterns import TILE, QKPatterns, overview_block
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError

N, D = 203, 16


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Float32 products split across threads round differently from run to run (up to 7e-6 here, over the 1e-6
    these comparisons allow; one run in three or six failed on two threads). One thread makes them reproducible."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


CASES = [
    pytest.param(causal, window, cap, id=f"{'causal' if causal else 'full'}-w{window}-cap{cap}")
    for causal in (True, False)
    for window in (None, 29)
    for cap in (None, 2.5)
]


def _qk(n_kv: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(2, 4, N, D, generator=g), torch.randn(2, n_kv, N, D, generator=g)


def _dense(
    q: torch.Tensor, k: torch.Tensor, layer: int, head: int, causal: bool, window: int | None, cap: float | None
) -> torch.Tensor:
    """The reference: float64 scores, mask, softmax over the whole row."""
    kv = head // (q.shape[1] // k.shape[1])
    s = q[layer, head].double() @ k[layer, kv].double().T / math.sqrt(q.shape[-1])
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    allowed = torch.ones(N, N, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= j > i - window
        if not causal:
            allowed &= j < i + window
    return s.masked_fill(~allowed, -math.inf).softmax(-1)


def _blocks(a: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense block max and mean over the cells inside the matrix."""
    rows, cols = a.shape
    gr, gc = -(-rows // block), -(-cols // block)
    pad = torch.nn.functional.pad(a, (0, gc * block - cols, 0, gr * block - rows)).reshape(gr, block, gc, block)
    ones = torch.nn.functional.pad(torch.ones_like(a), (0, gc * block - cols, 0, gr * block - rows)).reshape(
        gr, block, gc, block
    )
    return pad.amax((1, 3)), pad.sum((1, 3)) / ones.sum((1, 3))


@pytest.mark.parametrize("rows_a_chunk", [None, 8, 3])
@pytest.mark.parametrize(("causal", "window", "cap"), CASES)
def test_overview_and_every_tile_equal_the_dense_softmax(
    monkeypatch: pytest.MonkeyPatch, causal: bool, window: int | None, cap: float | None, rows_a_chunk: int | None
) -> None:
    if rows_a_chunk is not None:  # tiles and summaries in chunks of a few rows, each over the columns it sees
        monkeypatch.setattr("circuitwidgets.activations.qk_patterns.CHUNK_BYTES", 4 * N * rows_a_chunk)
    q, k = _qk()
    engine = QKPatterns(q, k, causal=causal, sliding_window=window, softcap=cap)
    layer, head = 1, 3  # key head 1 under grouped-query attention
    dense = _dense(q, k, layer, head, causal, window, cap)
    summary = engine.summarise(layer, head, block=16, top_k=4)
    bmax, bmean = _blocks(dense, 16)
    assert np.abs(summary.max - bmax.numpy()).max() <= 1e-6
    assert np.abs(summary.mean - bmean.numpy()).max() <= 1e-6
    assert (engine.dense(layer, head).double() - dense).abs().max() <= 1e-6
    for level in (0, 1, 2):
        span = TILE * 2**level
        for row in range(-(-N // span)):
            for col in range(-(-N // span)):
                got_max, got_mean = engine.tile(layer, head, level, row, col)
                want_max, want_mean = _blocks(
                    dense[row * span : (row + 1) * span, col * span : (col + 1) * span], 2**level
                )
                assert got_max.shape == tuple(want_max.shape)
                assert np.abs(got_max - want_max.numpy()).max() <= 1e-6
                assert np.abs(got_mean - want_mean.numpy()).max() <= 1e-6


@pytest.mark.parametrize(("causal", "window", "cap"), CASES[::3])
def test_each_rows_top_sources_are_its_largest_weights(causal: bool, window: int | None, cap: float | None) -> None:
    q, k = _qk()
    engine = QKPatterns(q, k, causal=causal, sliding_window=window, softcap=cap)
    dense = _dense(q, k, 0, 2, causal, window, cap)
    summary = engine.summarise(0, 2, block=8, top_k=3)
    want_w = dense.topk(3, dim=-1).values
    valid = summary.top_sources >= 0
    assert np.abs(np.where(valid, summary.top_weights, 0) - np.where(valid, want_w.numpy(), 0)).max() <= 1e-6
    picked = dense.numpy()[np.arange(N)[:, None], np.where(valid, summary.top_sources, 0)]
    assert np.abs(np.where(valid, picked, 0) - np.where(valid, want_w.numpy(), 0)).max() <= 1e-6
    # the first row of a causal pattern has a single source: the others are marked -1
    if causal:
        assert summary.top_sources[0].tolist() == [0, -1, -1]


def test_chunks_smaller_than_the_matrix_give_the_same_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k = _qk()
    whole = QKPatterns(q, k).summarise(0, 0, block=8, top_k=2)
    monkeypatch.setattr("circuitwidgets.activations.qk_patterns.CHUNK_BYTES", 4 * N * 16)  # 16 rows a chunk
    chunked = QKPatterns(q, k).summarise(0, 0, block=8, top_k=2)
    assert np.abs(whole.max - chunked.max).max() <= 1e-7
    assert torch.allclose(whole.lse, chunked.lse, atol=1e-6)


def test_overview_block_is_the_smallest_power_of_two_fitting_the_cells() -> None:
    assert overview_block(200) == 1
    assert overview_block(257) == 2
    assert overview_block(32_768) == 128
    assert overview_block(32_769) == 256


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"q": torch.zeros(1, 2, 8, 4), "k": torch.zeros(1, 2, 9, 4)}, ShapeError, "k:"),
        ({"q": torch.zeros(2, 8, 4), "k": torch.zeros(2, 8, 4)}, ShapeError, "q:"),
        ({"q": torch.zeros(1, 3, 8, 4), "k": torch.zeros(1, 2, 8, 4)}, ArgumentError, "n_kv_heads"),
        ({"q": torch.zeros(1, 2, 8, 4), "k": torch.zeros(1, 2, 8, 4, dtype=torch.float64)}, ArgumentTypeError, "dtype"),
        ({"q": torch.full((1, 2, 8, 4), math.nan), "k": torch.zeros(1, 2, 8, 4)}, NonFiniteError, "q:"),
        ({"q": torch.zeros(1, 2, 8, 4), "k": torch.zeros(1, 2, 8, 4), "scale": 0.0}, ArgumentError, "scale:"),
        ({"q": torch.zeros(1, 2, 8, 4), "k": torch.zeros(1, 2, 8, 4), "softcap": -1.0}, ArgumentError, "softcap:"),
        (
            {"q": torch.zeros(1, 2, 8, 4), "k": torch.zeros(1, 2, 8, 4), "sliding_window": 0},
            ArgumentError,
            "sliding_window:",
        ),
        (
            {"q": torch.zeros(2, 2, 8, 4), "k": torch.zeros(2, 2, 8, 4), "sliding_window": [3]},
            ArgumentError,
            "sliding_window:",
        ),
        ({"q": torch.zeros(1, 2, 8, 4, dtype=torch.complex64), "k": torch.zeros(1, 2, 8, 4)}, ArgumentTypeError, "q:"),
    ],
)
def test_bad_queries_and_keys_are_refused_naming_the_argument(
    kwargs: dict[str, object], error: type[Exception], names: str
) -> None:
    q, k = kwargs.pop("q"), kwargs.pop("k")
    with pytest.raises(error, match=names):
        QKPatterns(q, k, **kwargs)  # type: ignore[arg-type]


def test_a_tile_outside_the_matrix_is_refused() -> None:
    q, k = _qk()
    engine = QKPatterns(q, k)
    with pytest.raises(ArgumentError, match="outside"):
        engine.tile(0, 0, 0, 4, 0)
    with pytest.raises(ArgumentError, match="head"):
        engine.tile(0, 4, 0, 0, 0)


@pytest.mark.parametrize("window", [None, 9])
def test_weights_of_any_rectangle_are_masked_like_the_dense_pattern(window: int | None) -> None:
    q, k = _qk()
    engine = QKPatterns(q, k, sliding_window=window)
    dense = engine.dense(0, 1)
    for r0, r1, c0, c1 in [(5, 6, 0, N), (0, 3, 0, N), (40, 47, 30, N), (17, 18, 17, 40)]:
        torch.testing.assert_close(engine.weights(0, 1, r0, r1, c0, c1), dense[r0:r1, c0:c1], atol=1e-7, rtol=1e-6)
