"""Value-weighted patterns over long contexts: tiles and overview equal ``A_ij n_j / Σ_k A_ik n_k``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from circuitwidgets.activations.qk_patterns import TILE, QKPatterns
from circuitwidgets.activations.value_paths import value_weighted
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from tests.test_tiles import CASES, N, _blocks, _dense, _one_thread, _qk  # noqa: F401 (_one_thread: its autouse fixture)


def _norms() -> torch.Tensor:
    g = torch.Generator().manual_seed(11)
    norms = torch.rand(2, 4, N, generator=g) * 3
    norms[1, 3, :40] = 0.0  # the first rows see only zero norms: their value-weighted rows stay 0
    norms[1, 3, 100:110] = 0.0  # and some sources carry nothing
    return norms


def _dense_value(dense: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """The reference: the dense definition (activations.value_paths.value_weighted) in float64."""
    w = dense * norms.double()[None, :]
    sums = w.sum(-1, keepdim=True)
    return torch.where(sums > 0, w / torch.where(sums > 0, sums, 1.0), 0.0)


@pytest.mark.parametrize("rows_a_chunk", [None, 8, 3])
@pytest.mark.parametrize(("causal", "window", "cap"), CASES)
def test_value_weighted_overview_and_tiles_equal_the_dense_definition(
    monkeypatch: pytest.MonkeyPatch, causal: bool, window: int | None, cap: float | None, rows_a_chunk: int | None
) -> None:
    if rows_a_chunk is not None:
        monkeypatch.setattr("circuitwidgets.activations.qk_patterns.CHUNK_BYTES", 4 * N * rows_a_chunk)
    q, k = _qk()
    norms = _norms()
    engine = QKPatterns(q, k, causal=causal, sliding_window=window, softcap=cap, value_norms=norms)
    layer, head = 1, 3
    want = _dense_value(_dense(q, k, layer, head, causal, window, cap), norms[layer, head])
    # the package's own dense definition agrees with the reference
    np.testing.assert_allclose(
        value_weighted(engine.dense(layer, head).numpy(), norms[layer, head].numpy()), want.numpy(), atol=1e-6
    )
    if causal:  # rows < 40 see only zero norms
        assert float(want[:40].abs().max()) == 0.0
    summary = engine.summarise(layer, head, block=16, top_k=4)
    assert summary.value is not None
    lse, vmax, vmean = summary.value
    assert engine.lse(layer, head, "value") is lse  # kept: tiles after the summary need no second pass
    bmax, bmean = _blocks(want, 16)
    assert np.abs(vmax - bmax.numpy()).max() <= 1e-6
    assert np.abs(vmean - bmean.numpy()).max() <= 1e-6
    assert (engine.dense(layer, head, "value").double() - want).abs().max() <= 1e-6
    for level in (0, 1, 2):
        span = TILE * 2**level
        for row in range(-(-N // span)):
            for col in range(-(-N // span)):
                got_max, got_mean = engine.tile(layer, head, level, row, col, "value")
                want_max, want_mean = _blocks(
                    want[row * span : (row + 1) * span, col * span : (col + 1) * span], 2**level
                )
                assert np.abs(got_max - want_max.numpy()).max() <= 1e-6
                assert np.abs(got_mean - want_mean.numpy()).max() <= 1e-6
    # the raw pattern is untouched by the norms
    raw_max, _ = _blocks(_dense(q, k, layer, head, causal, window, cap), 16)
    assert np.abs(summary.max - raw_max.numpy()).max() <= 1e-6


def test_value_tiles_without_a_summary_compute_their_own_log_sum_exp() -> None:
    q, k = _qk()
    norms = _norms()
    engine = QKPatterns(q, k, value_norms=norms)
    want = _dense_value(_dense(q, k, 1, 3, True, None, None), norms[1, 3])
    got, _ = engine.tile(1, 3, 0, 0, 0, "value")  # no summary first
    assert np.abs(got - want[:TILE, :TILE].numpy()).max() <= 1e-6
    assert np.isfinite(got).all() and (got[:40] == 0).all()


def test_value_kind_without_norms_and_bad_norms_are_refused_naming_the_argument() -> None:
    q, k = _qk()
    engine = QKPatterns(q, k)
    assert engine.kinds == ("raw",)
    with pytest.raises(ArgumentError, match="value_norms"):
        engine.tile(0, 0, 0, 0, 0, "value")
    with pytest.raises(ArgumentError, match="kind"):
        QKPatterns(q, k, value_norms=_norms()).tile(0, 0, 0, 0, 0, "logit")
    bad: list[tuple[object, type[Exception], str]] = [
        (torch.ones(2, 4, N - 1), ShapeError, r"value_norms: expected \[n_layers, n_heads, n_tokens\]"),
        (-torch.ones(2, 4, N), ArgumentError, "value_norms: expected norms ≥ 0"),
        (torch.full((2, 4, N), float("nan")), NonFiniteError, "value_norms"),
        (torch.ones(2, 4, N, dtype=torch.int64), ArgumentTypeError, "value_norms"),
        ("norms", ArgumentTypeError, "value_norms"),
    ]
    for norms, error, message in bad:
        with pytest.raises(error, match=message):
            QKPatterns(q, k, value_norms=norms)


@pytest.mark.parametrize("gap", [400.0, 95.0])
@pytest.mark.parametrize("summarised", [True, False])
def test_rows_whose_attention_sits_on_a_source_of_norm_zero_are_still_exact(summarised: bool, gap: float) -> None:
    # every row puts all but about e^-gap of its raw weight on source 0, whose value norm is 0: in float32 the
    # other terms of exp(s - max) vanish (400) or lose their precision (95: subnormal), yet the value-weighted
    # row is a proper distribution over them
    d = 4
    q, k = torch.zeros(1, 1, N, d), torch.zeros(1, 1, N, d)
    q[..., 0], q[..., 1] = 1.0, 1.0
    k[0, 0, 0, 0] = 2 * gap  # score gap on source 0 (the scale is sqrt(4))
    k[0, 0, 1:, 1] = 4 * torch.randn(N - 1, generator=torch.Generator().manual_seed(1))  # the others: about ±2
    norms = torch.linspace(1.0, 2.0, N).reshape(1, 1, N)
    norms[0, 0, 0] = 0.0
    engine = QKPatterns(q, k, value_norms=norms)
    want = _dense_value(_dense(q, k, 0, 0, True, None, None), norms[0, 0])
    assert float(want[5, 1:6].sum()) > 0.99 and float(want[0].abs().max()) == 0.0  # (row 0 sees only source 0)
    if summarised:
        summary = engine.summarise(0, 0, block=8, top_k=2)
        assert summary.value is not None
        bmax, bmean = _blocks(want, 8)
        assert np.abs(summary.value[1] - bmax.numpy()).max() <= 1e-6
        assert np.abs(summary.value[2] - bmean.numpy()).max() <= 1e-6
    for row in range(4):
        got, _ = engine.tile(0, 0, 0, row, 0, "value")
        assert np.abs(got - want[64 * row : 64 * (row + 1), :64].numpy()).max() <= 1e-6
