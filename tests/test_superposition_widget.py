"""The superposition widget in the kernel: its grid, the view's updates, and retraining (latest wins, close stops)."""

from __future__ import annotations

import numpy as np
import pytest

from circuitwidgets.errors import ArgumentError
from circuitwidgets.superposition.measure import feature_norms
from circuitwidgets.widgets import Superposition
from circuitwidgets.widgets.core.link import LinkWarning

SMALL = {"probabilities": [1.0, 0.1], "decays": [1.0, 0.9], "steps": 100, "snapshots": 4, "phase": False}


@pytest.fixture(scope="module")
def widget() -> Superposition:
    return Superposition(**SMALL)  # type: ignore[arg-type]


def test_the_grid_holds_every_cells_trajectory_and_its_measurements(widget: Superposition) -> None:
    assert widget.grid_W.shape == (2, 2, 4, 2, 5) and widget.grid_gram.shape == (2, 2, 4, 5, 5)
    assert widget.n_features == 5 and widget.n_snapshots == 4 and list(widget.snapshot_steps) == [0, 11, 44, 100]
    W = widget.grid_W[1, 0, -1]
    assert np.allclose(widget.grid_norms[1, 0, -1], feature_norms(W)[0], atol=1e-6)
    assert np.allclose(widget.grid_gram[1, 0, -1], W.T @ W, atol=1e-5)
    # the view starts on a grid cell, shown through live_* without training
    assert widget.live_probability == widget.feature_probability == pytest.approx(0.1, rel=1e-6)
    assert np.array_equal(widget.live_W[0, 0], widget.grid_W[1, 0]) and widget.step == 3


def test_the_view_may_move_the_sliders_and_scrubber_but_not_out_of_range(widget: Superposition) -> None:
    widget.set_state({"step": 9})
    assert widget.step == 3
    widget.set_state({"feature_probability": 1.5})
    assert widget.feature_probability == pytest.approx(0.1, rel=1e-6)
    widget.set_state({"grid_W": []})  # data is the kernel's
    assert widget.grid_W.shape == (2, 2, 4, 2, 5)
    widget.set_state({"step": 1, "selected_feature": 4})
    assert (widget.step, widget.selected_feature) == (1, 4)


def test_a_slider_value_off_the_grid_is_retrained_in_the_kernel() -> None:
    widget = Superposition(**SMALL)  # type: ignore[arg-type]
    widget.retrain(0.3, 0.9)
    assert (widget.live_probability, widget.live_decay, widget.training) == (0.3, 0.9, "")
    assert widget.live_W.shape == (1, 1, 4, 2, 5)
    assert not any(np.allclose(widget.live_W[0, 0, -1], cell) for cell in widget.grid_W[:, :, -1].reshape(-1, 2, 5))
    widget.retrain(1.0, 0.9)  # back on the grid: copied, not trained
    assert np.array_equal(widget.live_W[0, 0], widget.grid_W[0, 1])
    widget.close()


def test_a_new_request_supersedes_a_running_retrain_and_closing_stops_it() -> None:
    widget = Superposition(probabilities=[1.0], decays=[1.0], steps=3_000, snapshots=3, phase=False)
    widget.feature_probability = 0.5
    widget.feature_probability = 0.4  # while 0.5 trains
    assert widget.training == "training"
    widget._retrainer.wait(120)
    assert widget.superseded == 1 and widget.live_probability == pytest.approx(0.4)
    widget.feature_probability = 0.2
    widget.close()  # stops it: its result is never published
    assert not widget._retrainer.running and widget.live_probability == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"probabilities": [0.0, 1.0]}, r"probabilities: expected a non-empty list of numbers in \(0, 1\]"),
        ({"decays": [1.5]}, r"decays: expected .* got \[1.5\]"),
        ({"decays": "fast"}, "decays: expected a list of numbers"),
    ],
)
def test_bad_grids_are_refused_naming_the_argument(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ArgumentError, match=words):
        Superposition(**{**SMALL, **kwargs})  # type: ignore[arg-type]


def test_linked_views_share_the_selected_feature(widget: Superposition) -> None:
    import circuitwidgets as cw

    other = Superposition(probabilities=[0.1], decays=[1.0], steps=20, snapshots=2, phase=False)
    group = cw.link(widget, other)
    assert group.names == ("selected_feature",)
    widget.selected_feature = 2
    assert other.selected_feature == 2
    other.selected_feature = 0
    assert widget.selected_feature == 0
    group.unlink()
    wide = Superposition(n=6, probabilities=[0.1], decays=[1.0], steps=20, snapshots=2, phase=False)
    with pytest.warns(LinkWarning, match="features are not linked"):
        assert cw.link(widget, wide).names == ()  # feature 5 of one is no feature of the other


def test_the_default_phase_recipe_finds_superposition_where_sparse_features_share_a_dimension() -> None:
    # the cells a 2-try, 2,000-step recipe got wrong: sparse (1 − S ≤ 0.063) and of comparable importance, the
    # extra feature shares the dimension (the paper's phase diagram); 2 tries called one of these "not represented"
    from circuitwidgets.superposition.phase import CLEAN_STEPS, CLEAN_TRIES, PHASES, phase_diagram

    diagram = phase_diagram([0.063, 0.01], [0.63, 1.58], tries=CLEAN_TRIES, steps=CLEAN_STEPS)
    assert [[PHASES[int(c)] for c in row] for row in diagram.phase] == [["superposition"] * 2] * 2
