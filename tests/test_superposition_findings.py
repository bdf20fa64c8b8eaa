"""The paper's findings, measured on freshly trained toy models (geometry by angles and norms, not pictures).

The intro setting of *Toy Models of Superposition*: 5 features, 2 hidden
dimensions, importance ``0.9^i``, Adam 1e-3, 10,000 steps of 1,024; seed 0,
one instance per feature probability.
"""

from __future__ import annotations

import numpy as np
import pytest

from circuitwidgets.superposition import ToyResult, importance_decay, train_toy
from circuitwidgets.superposition.measure import (
    STICKY_FRACTIONS,
    angle_gaps,
    angles,
    feature_dimensionality,
    feature_norms,
    represented,
)
from circuitwidgets.superposition.phase import phase_diagram

DENSITIES = (1.0, 0.3, 1 / 33, 1 / 100)


@pytest.fixture(scope="module")
def intro() -> ToyResult:
    return train_toy(5, 2, sparsity=[1 - d for d in DENSITIES], importance=importance_decay(5, 0.9), seed=0)


def test_dense_features_get_two_orthogonal_dimensions_and_the_rest_none(intro: ToyResult) -> None:
    norms = feature_norms(intro.W)[0]
    assert list(represented(intro.W)[0]) == [True, True, False, False, False]  # the two most important
    assert np.allclose(norms[:2], 1, atol=0.05) and (norms[2:] < 0.1).all()
    assert np.allclose(angle_gaps(angles(intro.W)[0]), [90, 270], atol=3)
    assert np.allclose(feature_dimensionality(intro.W)[0, :2], 1, atol=0.02)


def test_sparser_features_form_antipodal_pairs(intro: ToyResult) -> None:
    kept = represented(intro.W)[1]
    assert kept.sum() == 4
    degrees = angles(intro.W)[1]
    assert np.allclose(angle_gaps(degrees), 90, atol=4)  # two antipodal pairs, at right angles
    opposite = (degrees[:, None] - degrees[None, :]) % 360
    assert (np.abs(opposite - 180) < 4).sum() == 4  # each feature has its antipode
    assert np.allclose(feature_dimensionality(intro.W)[1][kept], 0.5, atol=0.04)


@pytest.mark.parametrize("instance", [2, 3], ids=["1/33", "1/100"])
def test_very_sparse_features_form_a_regular_pentagon(intro: ToyResult, instance: int) -> None:
    assert represented(intro.W)[instance].all()
    assert np.allclose(angle_gaps(angles(intro.W)[instance]), 72, atol=3)
    assert np.allclose(feature_dimensionality(intro.W)[instance], 0.4, atol=0.03)


def test_represented_features_stick_to_the_paper_fractions(intro: ToyResult) -> None:
    fractions = np.array([f for f, _ in STICKY_FRACTIONS])
    dims = feature_dimensionality(intro.W)[represented(intro.W)]
    assert dims.size == 2 + 4 + 5 + 5
    assert np.abs(dims[:, None] - fractions[None, :]).min(axis=1).max() < 0.04


def test_losses_fall_and_snapshots_replay_the_training(intro: ToyResult) -> None:
    assert intro.snapshot_steps[0] == 0 and intro.snapshot_steps[-1] == 10_000
    assert (intro.snapshot_loss[-1] < intro.snapshot_loss[0]).all()
    assert np.array_equal(intro.snapshot_W[-1], intro.W)


def test_phase_diagram_of_one_extra_feature() -> None:
    """n = 2, m = 1: dense → the more important feature takes the dimension; sparse, equal importance → both."""
    diagram = phase_diagram(densities=[1.0, 0.02], ratios=[0.1, 1.0, 10.0], tries=2)
    assert diagram.phase_at(1.0, 0.1) == "not represented"
    assert diagram.phase_at(1.0, 10.0) == "dedicated dimension"
    assert diagram.phase_at(0.02, 1.0) == "superposition"
    assert diagram.phase.shape == (3, 2) and diagram.W.shape == (3, 2, 1, 2)
