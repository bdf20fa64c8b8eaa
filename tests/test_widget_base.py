"""Widget infrastructure: binary array transport, validated selections, AttentionPatterns traits."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import traitlets
from _comm import Recorder, from_view
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from ipywidgets.widgets.widget import _remove_buffers

from circuitwidgets import AttentionPatterns
from circuitwidgets.widgets.attention.widget import decode_patterns, encode_patterns
from circuitwidgets.widgets.core import base as _base
from circuitwidgets.widgets.core.arrays import array_from_json, array_to_json, quantise_unit

# --- helpers -------------------------------------------------------------------


def causal_patterns(n_layers: int, n_heads: int, n: int, seed: int = 0) -> np.ndarray:
    """Random softmax-like causal attention ``[n_layers, n_heads, n, n]``."""
    rng = np.random.default_rng(seed)
    a = rng.random((n_layers, n_heads, n, n)) * np.tril(np.ones((n, n)))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


def wire(value: dict[str, Any]) -> dict[str, Any]:
    """What the front end receives: JSON state with buffers lifted out (as ipywidgets sends it)."""
    state, paths, buffers = _remove_buffers({"x": value})
    json.dumps(state)  # the JSON part must hold no bytes
    assert paths == [["x", "view"]]
    return {"view": memoryview(bytes(buffers[0])), "dtype": state["x"]["dtype"], "shape": state["x"]["shape"]}


@pytest.fixture
def widget(monkeypatch: pytest.MonkeyPatch) -> tuple[AttentionPatterns, Recorder]:
    w = AttentionPatterns.from_arrays(list("abcdef"), causal_patterns(2, 3, 6))
    rec = Recorder()
    monkeypatch.setattr(w, "_send", rec)
    return w, rec


# --- array transport -----------------------------------------------------------

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "float16", "float32", "float64", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 4), (2, 3, 5), (1, 0, 4)])
def test_array_round_trips_through_binary_buffer(dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    a = (rng.random(shape) * 100).astype(dtype)
    sent = array_to_json(a)
    assert sent is not None
    assert isinstance(sent["view"], memoryview)
    assert sent["dtype"] == dtype and sent["shape"] == list(shape)
    back = array_from_json(wire(dict(sent)))
    assert back is not None
    assert back.dtype == a.dtype and back.shape == a.shape
    np.testing.assert_array_equal(back, a)


def test_array_codec_handles_views_and_big_endian() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    for arr in (a.T, a[:, ::2], a.astype(">f4"), np.asfortranarray(a)):
        back = array_from_json(wire(dict(array_to_json(arr) or {})))
        np.testing.assert_array_equal(back, arr)


@given(
    hnp.arrays(
        st.sampled_from([np.float32, np.int32, np.uint8, np.float16]),
        hnp.array_shapes(min_dims=0, max_dims=4, max_side=6),
    )
)
@settings(max_examples=60, deadline=None)
def test_array_round_trip_property(a: np.ndarray) -> None:
    back = array_from_json(wire(dict(array_to_json(a) or {})))
    np.testing.assert_array_equal(back, a)


def test_array_codec_rejects_what_the_view_cannot_decode() -> None:
    with pytest.raises(TypeError, match="complex128"):
        array_to_json(np.zeros(3, dtype=np.complex128))
    with pytest.raises(TypeError, match="int64"):
        array_from_json({"view": b"\0" * 8, "dtype": "int64", "shape": [1]})
    with pytest.raises(ValueError, match="needs 12 bytes"):
        array_from_json({"view": b"\0" * 8, "dtype": "float32", "shape": [3]})
    with pytest.raises(TypeError, match="view"):
        array_from_json({"dtype": "float32", "shape": [3]})
    assert array_to_json(None) is None and array_from_json(None) is None


@given(hnp.arrays(np.float64, hnp.array_shapes(max_dims=3), elements=st.floats(0, 1)))
@settings(max_examples=60, deadline=None)
def test_uint8_quantisation_error_at_most_half_a_step(a: np.ndarray) -> None:
    q = quantise_unit(a)
    assert q.dtype == np.uint8
    assert np.abs(q / 255.0 - a).max(initial=0.0) <= 0.5 / 255 + 1e-6


# --- AttentionPatterns: data ---------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 9, 33])
def test_causal_patterns_send_lower_triangle_only(n: int) -> None:
    a = causal_patterns(2, 3, n)
    w = AttentionPatterns.from_arrays([f"t{i}" for i in range(n)], a)
    assert w.causal is True
    assert w.patterns.dtype == np.uint8
    assert w.patterns.shape == (2, 3, n * (n + 1) // 2)
    assert np.abs(w.attention - a).max() <= 1 / 255


def test_full_patterns_are_sent_whole_and_round_trip_within_one_step() -> None:
    rng = np.random.default_rng(3)
    a = rng.random((4, 5, 5))
    a /= a.sum(-1, keepdims=True)
    w = AttentionPatterns.from_arrays(list("vwxyz"), a)
    assert w.causal is False
    assert (w.n_layers, w.n_heads, w.n_tokens) == (1, 4, 5)
    assert w.patterns.shape == (1, 4, 5, 5)
    assert np.abs(w.attention[0] - a).max() <= 1 / 255


def test_lower_triangle_layout_is_row_after_row() -> None:
    a = np.zeros((1, 3, 3))
    a[0, 2, 1] = 1.0  # dest 2 -> src 1: offset 2*3/2 + 1 = 4
    packed, causal = encode_patterns(a, 3)
    assert causal and packed.shape == (1, 1, 6)
    assert packed[0, 0].tolist() == [0, 0, 0, 0, 255, 0]
    np.testing.assert_array_equal(decode_patterns(packed, 3, True)[0], a)


def test_patterns_cross_the_wire_as_one_binary_buffer(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, _ = widget
    state, paths, buffers = _remove_buffers(w.get_state())
    assert ["patterns", "view"] in paths
    assert sum(memoryview(b).nbytes for b in buffers) == 2 * 3 * 21
    assert state["patterns"]["dtype"] == "uint8"
    assert state["_view"] == "attention"
    json.dumps(state)


def test_torch_tensors_are_accepted() -> None:
    torch = pytest.importorskip("torch")
    a = torch.softmax(torch.randn(2, 4, 4, requires_grad=True), dim=-1)
    w = AttentionPatterns.from_arrays(list("abcd"), a)
    assert w.causal is False and w.n_heads == 2


@pytest.mark.parametrize(
    ("attention", "message"),
    [
        (np.ones((2, 3, 4)) / 4, "dest == src == 3"),
        (np.ones((2, 2, 3, 3, 3)), "shape"),
        (np.full((1, 3, 3), 2.0), r"\[0, 1\]"),
        (np.full((1, 3, 3), np.nan), "NaN"),
    ],
)
def test_malformed_attention_is_refused(attention: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AttentionPatterns.from_arrays(list("abc"), attention)


def test_causal_true_with_weight_above_diagonal_is_refused() -> None:
    with pytest.raises(ValueError, match="above the diagonal"):
        AttentionPatterns.from_arrays(list("ab"), np.full((1, 2, 2), 0.5), causal=True)


def test_patterns_must_match_tokens() -> None:
    w = AttentionPatterns.from_arrays(list("abc"), causal_patterns(1, 2, 3))
    with pytest.raises(traitlets.TraitError, match="patterns"):
        w.patterns = np.zeros((1, 2, 5), dtype=np.uint8)


def test_set_data_resets_selections_that_no_longer_fit() -> None:
    w = AttentionPatterns.from_arrays(list("abcdef"), causal_patterns(2, 4, 6), selected_layer=1, selected_head=3)
    w.selected_dest = 5
    w.set_data(list("ab"), causal_patterns(1, 2, 2))
    assert (w.selected_layer, w.selected_head, w.selected_dest, w.n_tokens) == (0, 0, -1, 2)


# --- AttentionPatterns: selection both ways -----------------------------------


def test_selection_defaults() -> None:
    w = AttentionPatterns.from_arrays(list("ab"), causal_patterns(1, 1, 2))
    assert (w.selected_layer, w.selected_head, w.selected_dest, w.selected_src) == (0, 0, -1, -1)


def test_initial_selection_is_validated_after_data() -> None:
    w = AttentionPatterns(selected_head=2, tokens=list("ab"), patterns=encode_patterns(causal_patterns(1, 3, 2), 2)[0])
    assert w.selected_head == 2
    with pytest.raises(traitlets.TraitError, match="selected_head"):
        AttentionPatterns(selected_head=3, tokens=list("ab"), patterns=encode_patterns(causal_patterns(1, 3, 2), 2)[0])


def test_valid_selection_from_view_reaches_python_and_fires_observers(
    widget: tuple[AttentionPatterns, Recorder],
) -> None:
    w, _ = widget
    seen: list[tuple[str, int]] = []
    w.observe(lambda c: seen.append((c["name"], c["new"])), names=["selected_head", "selected_dest"])
    from_view(w, selected_head=2, selected_dest=4)
    assert (w.selected_head, w.selected_dest) == (2, 4)
    assert sorted(seen) == [("selected_dest", 4), ("selected_head", 2)]


def test_setting_selection_from_python_is_validated_and_sent(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, rec = widget
    w.selected_head = 1
    assert rec.updates()[-1] == {"selected_head": 1}
    with pytest.raises(traitlets.TraitError, match=r"selected_head.*expected 0\.\.2, got 7"):
        w.selected_head = 7
    with pytest.raises(traitlets.TraitError, match="expected an int"):
        w.selected_dest = "2"  # type: ignore[assignment]
    assert w.selected_head == 1


# --- the bundle ----------------------------------------------------------------


def test_widget_carries_the_bundled_module(widget: tuple[AttentionPatterns, Recorder]) -> None:
    w, _ = widget
    assert w._esm == _base.BUNDLE_PATH.read_text(encoding="utf-8")
    assert "export" in w._esm


def test_missing_bundle_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setattr(_base, "BUNDLE_PATH", tmp_path / "index.js")
    with pytest.raises(_base.BundleNotBuiltError, match=r"npm --prefix js run build"):
        AttentionPatterns.from_arrays(list("ab"), causal_patterns(1, 1, 2))
