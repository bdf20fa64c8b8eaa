"""Long contexts from dense arrays: from_arrays above LONG_ARRAY_TOKENS builds the long-context view (overview
first, exact tiles served from the array), below it the dense view as before."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from _comm import Recorder, custom_from_view

from circuitwidgets import AttentionPatterns
from circuitwidgets.activations.dense_patterns import DensePatterns
from circuitwidgets.activations.value_paths import value_weighted
from circuitwidgets.errors import ArgumentError
from circuitwidgets.widgets.attention.arrays import LONG_ARRAY_TOKENS

N = 150


def _patterns(n: int = N, *, causal: bool = True, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax patterns ``[2, 3, n, n]`` (causal or not) and value norms ``[2, 3, n]`` (some zero)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, 3, n, n, generator=g) * 3
    if causal:
        scores.masked_fill_(torch.ones(n, n, dtype=torch.bool).triu(1), -torch.inf)
    norms = torch.rand(2, 3, n, generator=g) * 2
    norms[1, 2, : n // 2] = 0.0
    return scores.softmax(-1), norms


def _widget(monkeypatch: pytest.MonkeyPatch, attention: Any, **kwargs: Any) -> tuple[AttentionPatterns, Recorder]:
    """A widget built as in a kernel without an event loop (summaries and tiles answered at once)."""
    import circuitwidgets.widgets.attention.tiles as tiles_module
    import circuitwidgets.widgets.attention.widget as attention_module

    monkeypatch.setattr(tiles_module, "running_loop", lambda: None)
    monkeypatch.setattr(attention_module, "running_loop", lambda: None)
    monkeypatch.setattr("circuitwidgets.widgets.attention.arrays.LONG_ARRAY_TOKENS", 100)
    n = int(attention.shape[-1]) if not isinstance(attention, list) else int(attention[0].shape[-1])
    w = AttentionPatterns.from_arrays([f"t{i}" for i in range(n)], attention, **kwargs)
    rec = Recorder()
    monkeypatch.setattr(w, "_send", rec)
    return w, rec


def _blocks(a: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Block max and mean of ``[n, n]`` over ``block × block`` cells (zero-padded, as masked cells are 0)."""
    n = a.shape[0]
    g = -(-n // block)
    padded = np.zeros((g * block, g * block), dtype=np.float64)
    padded[:n, :n] = a
    v = padded.reshape(g, block, g, block)
    counts = np.minimum(block, n - np.arange(g) * block)
    return v.max((1, 3)), v.sum((1, 3)) / (counts[:, None] * counts[None, :])


@pytest.mark.parametrize("causal", [True, False])
def test_a_dense_array_above_the_threshold_gives_the_long_context_view_with_the_arrays_overview(
    monkeypatch: pytest.MonkeyPatch, causal: bool
) -> None:
    a, _ = _patterns(causal=causal)
    w, _ = _widget(monkeypatch, a)
    assert isinstance(w.qk, DensePatterns) and not w.streaming
    assert w.patterns.shape == (2, 3, 0) and w.value_patterns is None and w.causal is causal
    assert (w.tile_block, w.tile_size) == (1, 64)  # 150 tokens: one token per overview cell
    assert w.overview is not None and w.overview.shape == (2, 3, 2, 150, 150)
    for layer, head in [(0, 0), (1, 2)]:
        dense = a[layer, head].numpy()
        bmax, bmean = _blocks(dense, 1)
        np.testing.assert_allclose(w.overview[layer, head, 0].astype(np.float32), bmax, atol=1e-3, rtol=1e-3)
        np.testing.assert_allclose(w.overview[layer, head, 1].astype(np.float32), bmean, atol=1e-3, rtol=1e-3)
        assert w.top_sources is not None and (w.top_sources[layer, head, :, 0] == dense.argmax(1)).all()
    with pytest.raises(ArgumentError, match="long-context"):
        _ = w.attention


def test_the_summary_in_chunks_of_rows_equals_the_dense_block_max_and_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("circuitwidgets.activations.dense_patterns.CHUNK_BYTES", 4 * 300 * 42)
    a, norms = _patterns(300)
    engine = DensePatterns(a, causal=True, value_norms=norms)
    assert engine.chunk_rows(4) == 40  # several chunks of rows: the bands meet exactly
    summary = engine.summariser(1, 2, 4, 3)
    while not summary.done:
        summary.step()
    result = summary.result()
    dense = a[1, 2].numpy()
    bmax, bmean = _blocks(dense, 4)
    np.testing.assert_allclose(result.max, bmax, atol=1e-7)
    np.testing.assert_allclose(result.mean, bmean, atol=1e-7)
    top = np.sort(dense, 1)[:, ::-1][:, :3]
    np.testing.assert_allclose(np.where(result.top_sources >= 0, result.top_weights, 0), top, atol=1e-7)
    assert result.value is not None
    vmax, vmean = _blocks(value_weighted(dense, norms[1, 2].numpy()), 4)
    np.testing.assert_allclose(result.value[1], vmax, atol=1e-6)
    np.testing.assert_allclose(result.value[2], vmean, atol=1e-6)


@pytest.mark.parametrize("kind", ["raw", "value"])
def test_a_tile_request_is_answered_with_the_arrays_own_entries(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    a, norms = _patterns(causal=False)
    w, rec = _widget(monkeypatch, a.numpy(), value_norms=norms)
    custom_from_view(w, {"type": "tile", "id": 7, "layer": 1, "head": 2, "level": 0, "row": 2, "col": 1, "kind": kind})
    [(content, buffers)] = [(c, b) for c, b in rec.custom() if c.get("type") in ("tile", "tile_error")]
    assert content["type"] == "tile" and (content["rows"], content["cols"]) == (22, 64)
    got = np.frombuffer(bytes(buffers[0]), dtype=np.float32).reshape(22, 64)
    dense = a[1, 2].numpy()
    want = dense if kind == "raw" else value_weighted(dense, norms[1, 2].numpy())
    np.testing.assert_allclose(got, want[128:150, 64:128], atol=1e-7 if kind == "value" else 0)
    # a coarser tile: the block max and mean of the same entries
    assert w.qk is not None
    bmax, bmean = w.qk.tile(1, 2, 1, 0, 0, kind)
    ref_max, ref_mean = _blocks(want[:128, :128], 2)
    np.testing.assert_allclose(bmax, ref_max, atol=1e-6)
    np.testing.assert_allclose(bmean, ref_mean, atol=1e-6)


def test_causal_tiles_above_the_diagonal_are_zero_and_below_it_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = _patterns(300)
    engine = DensePatterns([a[0], a[1]], causal=True)
    m, mean = engine.tile(0, 1, 0, 0, 4)  # rows 0-63, columns 256-299: above the diagonal
    assert not m.any() and not mean.any()
    m, _ = engine.tile(0, 1, 0, 4, 4)
    np.testing.assert_array_equal(m, np.tril(a[0, 1, 256:, 256:].numpy()))
    np.testing.assert_array_equal(engine.dense(1, 0).numpy(), a[1, 0].numpy())


def test_below_the_threshold_from_arrays_is_the_dense_view_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    a, norms = _patterns(60)
    tokens = [f"t{i}" for i in range(60)]
    w = AttentionPatterns.from_arrays(tokens, a, value_norms=norms)
    assert w.qk is None and w.tile_block == 0 and w.patterns.shape == (2, 3, 60 * 61 // 2)
    np.testing.assert_allclose(w.attention, a.numpy(), atol=0.5 / 255 + 1e-6)
    forced = AttentionPatterns.from_arrays(tokens, a, long=True)
    assert isinstance(forced.qk, DensePatterns)
    assert AttentionPatterns.from_arrays(tokens, a, long=False).patterns.shape == w.patterns.shape


def test_the_threshold_is_a_named_constant_and_a_cache_of_one_long_prompt_goes_the_long_way() -> None:
    assert LONG_ARRAY_TOKENS == 2048
    n = LONG_ARRAY_TOKENS + 1
    eye = torch.eye(n)
    a = (0.5 * eye + 0.5 * eye.roll(1, 1))[None, None]  # each token and the next: not causal
    w = AttentionPatterns.from_cache({("pattern", 0): a}, [f"t{i}" for i in range(n)], n_layers=1)
    assert isinstance(w.qk, DensePatterns) and w.causal is False and w.tile_block == 16
    w.finish()
    assert w.overview is not None and (w.overview[0, 0, 0].diagonal() == 0.5).all()
    assert w.top_sources is not None and sorted(w.top_sources[0, 0, 5, :2]) == [5, 6]


def test_the_long_path_checks_the_array_as_the_dense_one_does(monkeypatch: pytest.MonkeyPatch) -> None:
    a, _ = _patterns()
    with pytest.raises(ArgumentError, match="summing to 1"):
        _widget(monkeypatch, a * 0.5)
    with pytest.raises(ArgumentError, match="causal=True"):
        _widget(monkeypatch, _patterns(causal=False)[0], causal=True)


def test_the_export_carries_the_overview_and_top_sources_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import circuitwidgets.widgets.attention.tiles as tiles_module

    a, norms = _patterns()
    w, _ = _widget(monkeypatch, a, value_norms=norms)
    state = w.get_state()
    assert state["overview"] is not None and state["top_sources"] is not None
    assert w.overview is not None and w.top_sources is not None and w.top_weights is not None
    assert w.overview.shape[2] == 4  # raw and value-weighted max and mean
    carried = sum(x.nbytes for x in (w.overview, w.top_sources, w.top_weights))
    assert carried <= tiles_module.EXPORT_BUDGET_BYTES and w.top_sources.shape[-1] == 16
