"""HeadScores: any per-head quantity as a linked heatmap; detectors from the engine; long texts refused early."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
import traitlets
from conftest import make_random_model

import circuitwidgets as cw
from circuitwidgets import circuits
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets import CircuitExplorer, HeadScores
from circuitwidgets.widgets.core.context import ContextLengthError
from circuitwidgets.widgets.explorer import CHILDREN

KINDS = circuits.HEAD_KINDS


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    return make_random_model(n_layers=2, n_heads=3, d_vocab=40, n_ctx=24, seed=3)


# --- from_scores ----------------------------------------------------------------------


def test_from_scores_shows_any_per_head_quantity_and_selects_the_largest() -> None:
    scores = np.array([[0.1, 0.9, 0.2], [0.3, 0.4, 0.5]])
    w = HeadScores.from_scores(scores, name="ablation loss change", note="mean over 10 prompts")
    assert (w.n_maps, w.n_layers, w.n_heads) == (1, 2, 3)
    np.testing.assert_array_equal(w.values, scores)
    assert w.names == ["ablation loss change"] and w.notes == ["mean over 10 prompts"]
    assert (w.selected_layer, w.selected_head) == (0, 1) and w.selected_score == 0.9
    assert w.scores.dtype == np.float64


def test_signed_scores_select_the_largest_magnitude_and_labels_are_kept() -> None:
    scores = torch.tensor([[0.5, -2.0], [1.0, 0.0]])
    w = HeadScores.from_scores(scores, name="DLA", layer_labels=["attn 0", "attn 1"], head_labels=["a", "b"])
    assert (w.selected_layer, w.selected_head) == (0, 1)
    assert w.layer_labels == ["attn 0", "attn 1"] and w.head_labels == ["a", "b"]
    sequential = HeadScores.from_scores(scores, scale="sequential")
    assert (sequential.selected_layer, sequential.selected_head) == (1, 0)


def test_several_named_maps_share_one_widget() -> None:
    a, b = np.zeros((2, 2)), np.eye(2)
    w = HeadScores.from_scores({"first": a, "second": b}, selected_map=1)
    assert w.names == ["first", "second"] and w.n_maps == 2
    np.testing.assert_array_equal(w.values, b)


@pytest.mark.parametrize(
    ("scores", "error", "message"),
    [
        (np.zeros(3), ShapeError, r"^scores: expected an array \[n_layers, n_heads\].*got shape \[3\]"),
        (np.zeros((2, 3, 4)), ShapeError, r"^scores: .*got shape \[2, 3, 4\]"),
        (np.zeros((0, 3)), ShapeError, r"^scores: .*at least one head"),
        (
            np.array([[0.0, np.nan], [1.0, 2.0]]),
            NonFiniteError,
            r"^scores: expected finite values, got 1 NaN .*layer 0, head 1",
        ),
        (np.array([[np.inf]]), NonFiniteError, r"^scores: expected finite values"),
        ([["a", "b"]], ArgumentTypeError, r"^scores: expected an array \[n_layers, n_heads\] of numbers"),
        ({"x": np.zeros((2, 2)), "y": np.zeros((2, 3))}, ShapeError, r"^scores\['y'\]: expected shape \[2, 2\]"),
        ({}, ShapeError, r"^scores: expected at least one map"),
    ],
)
def test_bad_scores_are_refused_naming_the_argument(scores: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        HeadScores.from_scores(scores)


def test_bad_labels_scale_and_traits_are_refused() -> None:
    with pytest.raises(ShapeError, match=r"^layer_labels: expected 2 labels \(one per layer\), got 3"):
        HeadScores.from_scores(np.zeros((2, 2)), layer_labels=["a", "b", "c"])
    with pytest.raises(ArgumentTypeError, match=r"^head_labels: expected a list of 2 strings"):
        HeadScores.from_scores(np.zeros((2, 2)), head_labels="ab")
    with pytest.raises(ArgumentError, match=r"^scale: expected one of"):
        HeadScores.from_scores(np.zeros((2, 2)), scale="log")
    with pytest.raises(traitlets.TraitError, match="'scores' trait of HeadScores expected finite values"):
        HeadScores(scores=np.full((1, 2, 2), np.nan), names=["x"])
    w = HeadScores.from_scores(np.zeros((2, 2)))
    with pytest.raises(traitlets.TraitError, match=r"'selected_head' trait of HeadScores expected 0\.\.1, got 2"):
        w.selected_head = 2


def test_a_selection_from_the_view_is_checked_and_resynchronised() -> None:
    w = HeadScores.from_scores(np.zeros((2, 3)))
    sent: list[Any] = []
    w.send_state = lambda keys=None: sent.append(keys)  # type: ignore[method-assign]
    w.set_state({"selected_layer": 1, "selected_head": 2})
    assert (w.selected_layer, w.selected_head) == (1, 2)
    w.set_state({"selected_head": 7})
    assert w.selected_head == 2 and sent == [["selected_head"]]
    w.set_state({"scores": None})  # data is not the view's to set
    assert w.n_heads == 3


# --- from_model: the engine's detectors ------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_from_model_equals_the_engine_for_each_kind(model: CircuitModel, kind: str) -> None:
    w = HeadScores.from_model(model, kind=kind)
    np.testing.assert_array_equal(w.values, circuits.head_scores(model, kind))
    assert w.names == [kind.replace("_", "-") + " score"] and "repeated random tokens" in w.notes[0]
    expected = np.unravel_index(int(np.argmax(w.values)), w.values.shape)
    assert (w.selected_layer, w.selected_head) == tuple(int(i) for i in expected)


def test_all_kinds_on_the_users_tokens_run_the_model_once_and_equal_the_engine(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = torch.tensor([[0, 5, 6, 7, 5, 6, 7, 5], [0, 9, 8, 9, 8, 9, 8, 1]])
    calls = 0
    real = type(model).run_with_cache

    def counted(self: CircuitModel, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "run_with_cache", counted)
    w = HeadScores.from_model(model, kind="all", tokens=tokens)
    assert calls == 1 and w.n_maps == len(KINDS)
    monkeypatch.setattr(type(model), "run_with_cache", real)
    for i, kind in enumerate(KINDS):
        np.testing.assert_allclose(w.scores[i], circuits.head_scores(model, kind, tokens=tokens), atol=0, rtol=0)
    _, cache = model.run_with_cache(tokens, names=["pattern"])
    from_cache = HeadScores.from_model(model, kind="induction", tokens=tokens, cache=cache)
    np.testing.assert_array_equal(from_cache.values, w.scores[KINDS.index("induction")])


def test_unknown_kinds_and_long_texts_are_refused_before_any_forward_pass(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_forward(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model ran before the refusal")

    monkeypatch.setattr(type(model), "run_with_cache", no_forward)
    monkeypatch.setattr(type(model), "forward", no_forward)
    with pytest.raises(ArgumentError, match=r"^kind: expected one of .*got 'inductoin'"):
        HeadScores.from_model(model, kind=["induction", "inductoin"])
    with pytest.raises(ArgumentTypeError, match=r"^kind: "):
        HeadScores.from_model(model, kind=3)  # type: ignore[arg-type]
    with pytest.raises(
        ContextLengthError, match=r"^tokens: expected at most n_ctx=24 tokens .*got 30\. Pass a shorter"
    ):
        HeadScores.from_model(model, kind="all", tokens=list(range(1, 31)))
    with pytest.raises(ArgumentTypeError, match=r"^model: expected a CircuitModel when kind"):
        HeadScores(kind="induction")


# --- the explorer and the report --------------------------------------------------------


@pytest.fixture(scope="module")
def explorer(model: CircuitModel) -> CircuitExplorer:
    return CircuitExplorer(model, list(range(1, 12)), k=2, profile_k=2, max_tokens=8, progress_bar=False)


def test_head_scores_join_the_explorer_with_the_shared_head_selection(
    model: CircuitModel, explorer: CircuitExplorer
) -> None:
    assert HeadScores in CHILDREN
    assert "headscores" in [c["view"] for c in explorer._children]
    heads = explorer.view("heads")
    assert heads.names == [k.replace("_", "-") + " score" for k in KINDS]
    for i, kind in enumerate(KINDS):
        np.testing.assert_array_equal(heads.scores[i], circuits.head_scores(model, kind))
    # one head selection: the heatmap's choice is every view's
    explorer.set_state({"selected_layer": 1, "selected_head": 2})
    assert explorer.selected == (1, 2) and (heads.selected_layer, heads.selected_head) == (1, 2)
    explorer.set_state({"heads_selected_map": 4})
    assert explorer.heads_selected_map == 4
    explorer.set_state({"heads_selected_map": 5})  # out of range: refused, kept
    assert explorer.heads_selected_map == 4


def test_report_shows_head_scores_linked_to_the_other_views(tmp_path: Any) -> None:
    from circuitwidgets.report import LINKED, write_report

    path = write_report(cw.load_pretrained("attn-only-1l"), tmp_path / "r.html", text="def f(x):\n    return x\n")
    page = path.read_text(encoding="utf-8")
    blocks = re.findall(
        r'<div class="cw-widget"([^>]*)><script type="application/json" class="cw-state">(.{0,200})', page
    )
    heads = [attrs for attrs, state in blocks if '"_view":"headscores"' in state]
    # (the report links through cw.link: each view lists the linked traits it has; head scores have no position)
    assert len(heads) == 1 and 'data-cw-link="selected_layer selected_head"' in heads[0], heads
    assert "data-cw-link-group=" in heads[0] and {"selected_layer", "selected_head"} <= set(LINKED)
    assert all("data-cw-link" in attrs for attrs, _ in blocks)


# --- long texts: refused early; slow builds show a progress bar ----------------------------


def test_explorer_refuses_a_text_longer_than_the_context_before_any_work(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("work started before the refusal")

    monkeypatch.setattr(type(model), "run_with_cache", no_work)
    monkeypatch.setattr(type(model), "forward", no_work)
    monkeypatch.setattr("circuitwidgets.widgets.eigen.widget.EigenScatter.initial", no_work)
    with pytest.raises(
        ContextLengthError, match=r"^text_or_tokens: expected at most n_ctx=24 tokens .*got 40\."
    ) as info:
        CircuitExplorer(model, list(range(1, 41)))
    assert isinstance(info.value, ShapeError) and "AttentionPatterns" in str(info.value)
    shipped = cw.load_pretrained("attn-only-1l")
    monkeypatch.setattr(type(shipped), "run_with_cache", no_work)
    with pytest.raises(
        ContextLengthError, match=r"^text_or_tokens: expected at most n_ctx=256 tokens .*Pass a shorter text"
    ):
        CircuitExplorer(shipped, "x = 1\n" * 300)


def test_term_importance_refuses_a_long_text_before_its_forward_passes(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model ran before the refusal")

    monkeypatch.setattr("circuitwidgets.widgets.term_importance.term_importance", no_work)
    with pytest.raises(
        ContextLengthError, match=r"^text_or_tokens: expected at most n_ctx=24 tokens .*got 25\..*batch"
    ):
        cw.TermImportance(model, torch.ones(2, 25, dtype=torch.long))


class _Recorder:
    """Stands in for ``tqdm.tqdm`` (plain text): records bars, passes iterables through."""

    bars: ClassVar[list[_Recorder]] = []

    def __init__(self, iterable: Any = None, **kwargs: Any) -> None:
        self.iterable, self.kwargs = iterable, kwargs
        self.n, self.closed = 0, False
        self.postfixes: list[str] = []
        _Recorder.bars.append(self)

    def __iter__(self) -> Any:
        yield from self.iterable

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, s: str) -> None:
        self.postfixes.append(s)

    def close(self) -> None:
        self.closed = True


def test_explorer_build_shows_a_progress_bar_step_by_step(model: CircuitModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tqdm.tqdm", _Recorder)
    _Recorder.bars = []
    CircuitExplorer(model, list(range(1, 10)), k=2, profile_k=2, max_tokens=8, progress_bar=True)
    ours = [b for b in _Recorder.bars if b.kwargs.get("desc") == "CircuitExplorer"]
    assert len(ours) == 1
    bar = ours[0]
    assert bar.kwargs["total"] == len(CHILDREN) + 1 and bar.kwargs["disable"] is False and bar.kwargs["delay"] == 0
    assert bar.n == bar.kwargs["total"] and bar.closed
    assert bar.postfixes[0] == "eigenvalues and copying scores" and "head detectors" in bar.postfixes
    # hidden on request; tqdm decides (text when stderr is a terminal) by default
    _Recorder.bars = []
    CircuitExplorer(model, list(range(1, 10)), k=2, profile_k=2, max_tokens=8, progress_bar=False)
    assert [b.kwargs["disable"] for b in _Recorder.bars if b.kwargs.get("desc") == "CircuitExplorer"] == [True]


def test_head_scores_of_several_kinds_show_a_bar_after_a_second(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tqdm.tqdm", _Recorder)
    _Recorder.bars = []
    HeadScores.from_model(model, kind="all")
    (bar,) = [b for b in _Recorder.bars if b.kwargs.get("desc") == "head scores"]
    assert bar.kwargs["delay"] == 1.0 and bar.kwargs["disable"] is None and bar.n == len(KINDS) and bar.closed
    assert bar.postfixes == list(KINDS)


def test_head_scores_is_exported_by_the_package() -> None:
    assert cw.HeadScores is HeadScores and "HeadScores" in cw.__all__ and "link" in cw.__all__
