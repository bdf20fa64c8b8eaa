"""A closed widget, and the model its data came from, can be freed (anywidget issue #929)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from conftest import make_random_model

from circuitwidgets import AttentionPatterns
from circuitwidgets.widgets import SkipTrigramTable
from circuitwidgets.widgets.core import base as _base


def test_closed_widget_and_its_model_are_garbage_collected() -> None:
    model = make_random_model()
    table = SkipTrigramTable(model)
    table.close()
    table_ref, model_ref = weakref.ref(table), weakref.ref(model)
    del table, model
    gc.collect()
    assert table_ref() is None, "a closed widget is still referenced"
    assert model_ref() is None, "the model of a closed widget is still referenced"


def test_bundle_and_styles_are_given_as_text_without_hot_reload() -> None:
    assert isinstance(_base.CircuitWidget._esm, str)
    assert "\n" in _base.CircuitWidget._esm
    if _base.STYLES_PATH.is_file():
        assert isinstance(_base.CircuitWidget._css, str)
        assert "\n" in _base.CircuitWidget._css  # never taken for a path by anywidget


def test_asset_is_a_path_under_hot_reload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYWIDGET_HMR", "1")
    assert _base.asset(_base.BUNDLE_PATH) == _base.BUNDLE_PATH
    monkeypatch.delenv("ANYWIDGET_HMR")
    assert _base.asset(_base.BUNDLE_PATH) == _base.BUNDLE_PATH.read_text(encoding="utf-8")


def test_watched_bundle_reloads_open_widgets_and_close_frees_them() -> None:
    class Watched(_base.CircuitWidget):
        _esm = _base.BUNDLE_PATH  # a path: anywidget watches it (as under ANYWIDGET_HMR)

    signal = Watched._esm.changed  # type: ignore[attr-defined]
    widget = Watched()
    signal.emit("export default {};\n")
    assert str(widget._esm) == "export default {};\n"
    widget.close()
    ref = weakref.ref(widget)
    del widget
    gc.collect()
    assert ref() is None, "the file watcher still holds a closed widget"
    signal.emit("export default {render() {}};\n")  # nothing left to reach


def test_closed_attention_widgets_release_their_patterns() -> None:
    tokens = [f"t{i}" for i in range(64)]
    patterns = np.tril(np.ones((1, 4, 64, 64), dtype=np.float32))
    patterns /= patterns.sum(-1, keepdims=True)
    refs = []
    for _ in range(5):
        widget = AttentionPatterns.from_arrays(tokens, patterns)
        widget.close()
        refs.append(weakref.ref(widget))
        del widget
    gc.collect()
    assert all(r() is None for r in refs)
