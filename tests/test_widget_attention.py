"""AttentionPatterns: built from a model or from arrays, validated, encoded, and in step with the view."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import traitlets
from _attention_data import IDS, causal_patterns
from _comm import Recorder, custom_from_view, from_view
from ipywidgets.widgets.widget import _remove_buffers

from circuitwidgets import AttentionPatterns
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.attention.widget import decode_patterns, repeat_period
from circuitwidgets.widgets.core.arrays import array_from_json

# --- helpers -------------------------------------------------------------------


def on_the_wire(widget: AttentionPatterns, name: str) -> np.ndarray:
    """A trait as the front end receives it (JSON state plus binary buffers), decoded again."""
    state, paths, buffers = _remove_buffers(widget.get_state(name))
    json.dumps(state)
    assert paths == [[name, "view"]]
    value = dict(state[name])
    value["view"] = memoryview(bytes(buffers[0]))
    out = array_from_json(value)
    assert out is not None
    return out


@pytest.fixture
def model(random_model: Callable[..., CircuitModel]) -> CircuitModel:
    return random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=20, n_ctx=32, biases=True)


@pytest.fixture
def widget(model: CircuitModel, monkeypatch: pytest.MonkeyPatch) -> tuple[AttentionPatterns, Recorder]:
    w = AttentionPatterns(model, IDS)
    rec = Recorder()
    monkeypatch.setattr(w, "_send", rec)
    return w, rec


def dense(model: CircuitModel) -> dict[str, Any]:
    """Everything the widget shows, computed densely from the model's cache."""
    ids = torch.tensor(IDS)
    _, cache = model.run_with_cache(ids[None])
    L, H, n = model.cfg.n_layers, model.cfg.n_heads, len(IDS)
    A = np.stack([cache["pattern", l][0].numpy() for l in range(L)])
    norms = np.stack(
        [
            torch.linalg.vector_norm(torch.einsum("phe,hed->hpd", cache["v", l][0], model.W_O[l]), dim=-1).numpy()
            for l in range(L)
        ]
    )
    weighted = A * norms[:, :, None, :]
    weighted /= weighted.sum(-1, keepdims=True)
    effect = np.full((L, H, n), np.nan)
    for l in range(L):
        result = cache["result", l][0]  # [pos, H, d_model]
        for i in range(n - 1):
            effect[l, :, i] = (result[i] @ model.W_U[:, IDS[i + 1]]).numpy()
    return {"A": A, "norms": norms, "weighted": weighted, "effect": effect}


# --- built from a model: the paper's quantities --------------------------------


def test_model_constructor_runs_every_layer_and_matches_the_cache(model: CircuitModel) -> None:
    w = AttentionPatterns(model, IDS)
    want = dense(model)
    assert w.tokens == model.to_str_tokens(torch.tensor(IDS))
    assert (w.n_layers, w.n_heads, w.n_tokens) == (2, 3, len(IDS))
    assert w.causal is True and w.patterns.shape == (2, 3, len(IDS) * (len(IDS) + 1) // 2)
    assert np.abs(w.attention - want["A"]).max() <= 0.5 / 255 + 1e-6


def test_value_weighted_pattern_is_attention_times_value_norm_normalised_per_row(model: CircuitModel) -> None:
    w = AttentionPatterns(model, IDS)
    want = dense(model)
    np.testing.assert_allclose(w.value_norms, want["norms"], rtol=1e-5, atol=1e-6)
    assert w.value_attention is not None
    assert np.abs(w.value_attention - want["weighted"]).max() <= 0.5 / 255 + 1e-6
    # the unnormalised product the view reports is A · ‖v W_O‖
    l, h, i, j = 1, 2, 7, 3
    assert w.attention[l, h, i, j] * w.value_norms[l, h, j] == pytest.approx(
        want["A"][l, h, i, j] * want["norms"][l, h, j], abs=want["norms"].max() / 255
    )


def test_logit_effect_is_head_output_dotted_with_the_next_tokens_unembedding(model: CircuitModel) -> None:
    w = AttentionPatterns(model, IDS)
    want = dense(model)
    assert w.logit_effect is not None and w.logit_effect.dtype == np.float32
    np.testing.assert_allclose(w.logit_effect[..., :-1], want["effect"][..., :-1], rtol=1e-5, atol=1e-5)
    assert np.isnan(w.logit_effect[..., -1]).all(), "the last position has no next token"


def test_text_input_is_tokenised_with_bos(model: CircuitModel) -> None:
    pytest.importorskip("tokenizers")
    from circuitwidgets import load_pretrained

    m = load_pretrained("attn-only-1l")
    w = AttentionPatterns(m, "def f(x): return x")
    assert w.tokens == m.to_str_tokens("def f(x): return x")
    assert w.tokens[0] == m.to_str_tokens(torch.tensor([m.tokenizer.bos_token_id]))[0]
    assert w.value_patterns is not None and w.logit_effect is not None


def test_induction_diagonal_is_offered_for_a_repeated_sequence(model: CircuitModel) -> None:
    w = AttentionPatterns(model, IDS)
    assert repeat_period(IDS) == 5
    assert w.diagonals == [
        {"offset": 1, "label": "previous token"},
        {"offset": 4, "label": "induction (repeat every 5)"},
    ]
    assert w.show_diagonals is False
    assert repeat_period(list("abcdefgh")) is None


# --- transport -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["patterns", "value_patterns"])
def test_binary_encoding_round_trips_within_one_step_per_weight(
    widget: tuple[AttentionPatterns, Recorder], name: str, model: CircuitModel
) -> None:
    w, _ = widget
    received = on_the_wire(w, name)
    assert received.dtype == np.uint8
    decoded = decode_patterns(received, w.n_tokens, w.causal)
    want = dense(model)["A" if name == "patterns" else "weighted"]
    err = np.abs(decoded - want).max()
    assert err <= 1 / 255 and err <= 0.5 / 255 + 1e-6


def test_arrays_cross_as_buffers_and_json_holds_no_floats(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, _ = widget
    state, paths, buffers = _remove_buffers(w.get_state())
    assert sorted(p[0] for p in paths) == [
        "logit_effect",
        "patterns",
        "per_token_loss",
        "value_norms",
        "value_patterns",
    ]
    n = w.n_tokens
    assert sum(memoryview(b).nbytes for b in buffers) == 2 * (6 * n * (n + 1) // 2) + 2 * (6 * n * 4) + n * 4
    state.pop("_esm")  # the bundle
    state.pop("_css")  # and its stylesheet
    assert len(json.dumps(state)) < 2000


def test_full_patterns_round_trip_too() -> None:
    rng = np.random.default_rng(3)
    a = rng.random((2, 2, 7, 7)).astype(np.float32)
    a /= a.sum(-1, keepdims=True)
    w = AttentionPatterns.from_arrays(list("abcdefg"), a)
    assert w.causal is False and w.patterns.shape == (2, 2, 7, 7)
    assert np.abs(decode_patterns(on_the_wire(w, "patterns"), 7, False) - a).max() <= 0.5 / 255 + 1e-6


def test_from_arrays_accepts_value_norms_and_logit_effects() -> None:
    a = causal_patterns(1, 2, 5)
    norms = np.arange(10, dtype=np.float32).reshape(2, 5) + 1
    effect = np.ones((2, 5), dtype=np.float32)
    effect[:, -1] = np.nan
    w = AttentionPatterns.from_arrays(list("abcde"), a, value_norms=norms, logit_effect=effect)
    expected = a[0] * norms[:, None, :]
    expected /= expected.sum(-1, keepdims=True)
    assert w.value_attention is not None
    assert np.abs(w.value_attention[0] - expected).max() <= 0.5 / 255 + 1e-6
    assert w.logit_effect is not None and w.logit_effect.shape == (1, 2, 5)


# --- selection and view state, both ways -------------------------------------------


def test_view_state_traits_default_and_validate(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, rec = widget
    assert (w.selected_layer, w.selected_head, w.selected_dest, w.selected_src, w.pattern_kind) == (0, 0, -1, -1, "raw")
    w.pattern_kind = "value"
    assert rec.updates()[-1] == {"pattern_kind": "value"}
    with pytest.raises(traitlets.TraitError, match=r"pattern_kind.*expected one of \('raw', 'value'\), got 'weird'"):
        w.pattern_kind = "weird"
    raw_only = AttentionPatterns.from_arrays(list("ab"), causal_patterns(1, 1, 2))
    with pytest.raises(traitlets.TraitError, match=r"value-weighted patterns need a model"):
        raw_only.pattern_kind = "value"
    with pytest.raises(traitlets.TraitError, match=r"diagonals.*expected entries"):
        w.diagonals = [{"offset": "1"}]


def test_clicks_in_the_view_reach_python_and_fire_observers(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, _ = widget
    seen: list[tuple[str, Any]] = []
    w.observe(
        lambda c: seen.append((c["name"], c["new"])),
        names=["selected_layer", "selected_head", "selected_dest", "selected_src", "show_diagonals"],
    )
    from_view(w, selected_layer=1, selected_head=2)
    from_view(w, selected_dest=11, selected_src=6)
    from_view(w, show_diagonals=True)
    assert (w.selected_layer, w.selected_head, w.selected_dest, w.selected_src, w.show_diagonals) == (1, 2, 11, 6, True)
    assert sorted(seen) == sorted(
        [
            ("selected_layer", 1),
            ("selected_head", 2),
            ("selected_dest", 11),
            ("selected_src", 6),
            ("show_diagonals", True),
        ]
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"selected_layer": 2},
        {"selected_head": 3},
        {"selected_head": -1},
        {"selected_dest": len(IDS)},
        {"selected_src": -2},
        {"selected_head": "1"},
        {"selected_head": 1.5},
        {"selected_head": True},
        {"selected_head": None},
        {"selected_dest": [1]},
        {"selected_head": [1]},
        {"pattern_kind": "logits"},
        {"pattern_kind": 3},
        {"strip": "entropy"},
        {"strip": None},
        {"show_diagonals": "yes"},
        {"diagonals": [{"offset": 1, "label": "x", "extra": 2}]},
        {"patterns": {"view": b"\0" * 3, "dtype": "uint8", "shape": [1, 1, 3]}},
        {"selected_head": 1, "selected_dest": 99},  # all or nothing
    ],
)
def test_invalid_state_from_the_view_is_rejected_and_the_view_resynchronised(
    widget: tuple[AttentionPatterns, Recorder], bad: dict[str, Any]
) -> None:
    w, rec = widget
    w.selected_head, w.selected_dest = 2, 3
    keys = [
        "selected_layer",
        "selected_head",
        "selected_dest",
        "selected_src",
        "pattern_kind",
        "strip",
        "show_diagonals",
        "diagonals",
    ]
    before = {k: getattr(w, k) for k in keys}
    patterns = w.patterns
    fired: list[Any] = []
    w.observe(fired.append, names=[*keys, "patterns"])
    rec.sent.clear()
    from_view(w, **bad)
    assert {k: getattr(w, k) for k in keys} == before
    assert w.patterns is patterns
    assert fired == []
    resent = rec.updates()
    assert resent, "the view must be told the values the kernel keeps"
    assert set(bad) <= set(resent[-1])
    assert {k: resent[-1][k] for k in bad if k in keys} == {k: before[k] for k in bad if k in keys}


@pytest.mark.parametrize(
    "state", [{"tokens": ["x"]}, {"causal": False}, {"value_patterns": None}, {"diagonals": []}, {"logit_effect": None}]
)
def test_the_view_may_set_only_selections_and_settings(
    widget: tuple[AttentionPatterns, Recorder], state: dict[str, Any]
) -> None:
    w, rec = widget
    before = getattr(w, next(iter(state)))
    from_view(w, **state)
    assert getattr(w, next(iter(state))) is before or getattr(w, next(iter(state))) == before
    assert rec.updates() and set(state) <= set(rec.updates()[-1])


def test_setting_selection_from_python_is_validated_and_sent(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, rec = widget
    w.selected_dest = 4
    assert rec.updates()[-1] == {"selected_dest": 4}
    with pytest.raises(traitlets.TraitError, match=r"selected_dest.*expected -1 \(none\) or 0\.\.11, got 12"):
        w.selected_dest = 12
    assert w.selected_dest == 4


# --- compatibility ---------------------------------------------------------------


def test_from_model_is_the_constructor_the_explorer_uses(model: CircuitModel) -> None:
    a = AttentionPatterns.from_model(model, IDS, selected_head=1)
    b = AttentionPatterns(model, IDS)
    np.testing.assert_array_equal(a.patterns, b.patterns)
    assert a.selected_head == 1


def test_set_data_replaces_everything_and_drops_model_only_arrays(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, _ = widget
    w.pattern_kind = "value"
    w.selected_layer, w.selected_head, w.selected_dest = 1, 2, 11
    w.set_data(list("abc"), causal_patterns(1, 2, 3))
    assert (w.n_layers, w.n_heads, w.n_tokens) == (1, 2, 3)
    assert (w.selected_layer, w.selected_head, w.selected_dest, w.pattern_kind) == (0, 0, -1, "raw")
    assert w.value_patterns is None and w.logit_effect is None and w.value_norms is None


def test_a_dense_widget_answers_tile_requests_with_an_error(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, rec = widget
    custom_from_view(w, {"type": "tile", "id": 1, "layer": 0, "head": 0, "level": 0, "row": 0, "col": 0})
    [(content, _)] = [(c, b) for c, b in rec.custom() if c.get("type") == "tile_error"]
    assert content["type"] == "tile_error" and "from_qk" in content["message"]
