"""Long contexts with value norms and logit effects: the value-weighted overview, its tiles, and the traits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import traitlets
from _comm import Recorder, custom_from_view

from circuitwidgets import AttentionPatterns
from circuitwidgets.activations.value_paths import value_weighted
from circuitwidgets.errors import ArgumentError, NonFiniteError, ShapeError

N = 300


def _inputs() -> dict[str, Any]:
    g = torch.Generator().manual_seed(5)
    norms = torch.rand(2, 4, N, generator=g) * 2
    norms[0, 2, 10:20] = 0.0
    effect = torch.randn(2, 4, N, generator=g)
    effect[:, :, -1] = float("nan")  # no next token
    return {
        "q": torch.randn(2, 4, N, 8, generator=g),
        "k": torch.randn(2, 2, N, 8, generator=g),
        "value_norms": norms,
        "logit_effect": effect,
    }


def _widget(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> tuple[AttentionPatterns, Recorder]:
    import circuitwidgets.widgets.attention.tiles as tiles_module
    import circuitwidgets.widgets.attention.widget as attention_module

    monkeypatch.setattr(tiles_module, "running_loop", lambda: None)
    monkeypatch.setattr(attention_module, "running_loop", lambda: None)
    w = AttentionPatterns.from_qk([f"t{i}" for i in range(N)], **{**_inputs(), **kwargs})
    rec = Recorder()
    monkeypatch.setattr(w, "_send", rec)
    return w, rec


def test_value_norms_give_a_value_weighted_overview_beside_the_raw_one(monkeypatch: pytest.MonkeyPatch) -> None:
    w, _ = _widget(monkeypatch, sliding_window=[None, 50])
    inputs = _inputs()
    assert w.qk is not None and w.qk.kinds == ("raw", "value")
    assert w.overview is not None and w.overview.shape == (2, 4, 4, 150, 150)  # raw max, mean; value max, mean
    np.testing.assert_array_equal(w.value_norms, inputs["value_norms"].numpy())
    np.testing.assert_array_equal(w.logit_effect, inputs["logit_effect"].numpy())
    for layer, head in [(0, 2), (1, 3)]:
        raw = w.qk.dense(layer, head).numpy()
        want = value_weighted(raw, inputs["value_norms"][layer, head].numpy()).reshape(150, 2, 150, 2)
        got_max, got_mean = w.overview[layer, head, 2:4].astype(np.float32)
        assert np.abs(got_max - want.max((1, 3))).max() <= 1e-3  # float16 on the wire
        assert np.abs(got_mean - want.mean((1, 3))).max() <= 1e-3
        assert (
            np.abs(w.overview[layer, head, 0].astype(np.float32) - raw.reshape(150, 2, 150, 2).max((1, 3))).max()
            <= 1e-3
        )
    # the exported page's top sources stay the raw pattern's
    assert w.top_sources is not None and (w.top_sources[1, 3, :, 0] == w.qk.dense(1, 3).numpy().argmax(1)).all()


def test_a_value_tile_is_answered_exactly_and_the_view_may_show_the_value_weighted_pattern(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w, rec = _widget(monkeypatch)
    request = {"type": "tile", "id": 9, "layer": 0, "head": 2, "level": 0, "row": 0, "col": 0, "kind": "value"}
    custom_from_view(w, request)
    [(content, buffers)] = [(c, b) for c, b in rec.custom() if c.get("type") == "tile"]
    assert content["kind"] == "value" and (content["rows"], content["cols"]) == (64, 64)
    got = np.frombuffer(bytes(buffers[0]), dtype=np.float32).reshape(64, 64)
    assert w.qk is not None
    want = value_weighted(w.qk.dense(0, 2).numpy(), _inputs()["value_norms"][0, 2].numpy())
    np.testing.assert_allclose(got, want[:64, :64], atol=1e-6)
    assert (got[:, 10:20] == 0).all()  # sources with a zero norm carry nothing
    w.pattern_kind = "value"  # allowed: the kernel has the norms
    assert w.pattern_kind == "value"


def test_without_value_norms_the_value_weighted_pattern_is_refused_naming_what_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    w, _ = _widget(monkeypatch, value_norms=None, logit_effect=None)
    assert w.value_norms is None and w.logit_effect is None
    assert w.overview is not None and w.overview.shape[2] == 2
    with pytest.raises(traitlets.TraitError, match="value_norms"):
        w.pattern_kind = "value"
    with pytest.raises(ArgumentError, match="value"):
        _ = w.value_attention


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"value_norms": torch.ones(2, 4, N - 1)}, ShapeError, "value_norms"),
        ({"value_norms": -torch.ones(2, 4, N)}, ArgumentError, "value_norms: expected norms ≥ 0"),
        ({"logit_effect": torch.ones(2, 3, N)}, ShapeError, "logit_effect"),
        ({"logit_effect": torch.full((2, 4, N), float("inf"))}, NonFiniteError, "logit_effect"),
    ],
)
def test_from_qk_refuses_bad_norms_and_effects_naming_the_argument(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        _widget(monkeypatch, **kwargs)


def test_the_export_budget_counts_the_value_overview_the_norms_and_the_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    import circuitwidgets.widgets.attention.tiles as tiles_module

    overview = 2 * 4 * 4 * 150 * 150 * 2  # [L, H, 4 channels, G, G] float16
    per_position = 2 * (2 * 4 * N * 4)  # value norms and logit effects, float32
    per_k = 2 * 4 * N * 6  # one more source per row: int32 index and float16 weight
    monkeypatch.setattr(tiles_module, "EXPORT_BUDGET_BYTES", overview + per_position + 3 * per_k + per_k // 2)
    w, _ = _widget(monkeypatch)
    assert w.top_sources is not None and w.top_weights is not None and w.overview is not None
    assert w.top_sources.shape[-1] == 3
    assert w.value_norms is not None and w.logit_effect is not None
    carried = sum(a.nbytes for a in (w.overview, w.top_sources, w.top_weights, w.value_norms, w.logit_effect))
    assert carried <= tiles_module.EXPORT_BUDGET_BYTES
