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


def _pair_angles(W: np.ndarray) -> np.ndarray:
    """Angle (degrees) between features 0 and 1, and between 2 and 3, of each model ``[instances, 2, 4]``."""
    degrees = np.degrees(np.arctan2(W[:, 1], W[:, 0]))
    return np.abs((degrees[:, [0, 2]] - degrees[:, [1, 3]] + 180) % 360 - 180)


@pytest.mark.slow
def test_correlated_features_are_orthogonal_and_anticorrelated_ones_antipodal() -> None:
    """4 features in 2 dimensions, in two sets of 2; three seeds (instances) each."""
    common = {"instances": 3, "steps": 5_000, "lr": 3e-3, "seed": 0}
    correlated = train_toy(4, 2, sparsity=0.9, feature_sets="correlated", **common)  # type: ignore[arg-type]
    assert np.allclose(_pair_angles(correlated.W), 90, atol=5)  # a local orthogonal basis per set
    anti = train_toy(4, 2, sparsity=0.6, feature_sets="anticorrelated", **common)  # type: ignore[arg-type]
    assert np.allclose(_pair_angles(anti.W), 180, atol=5)  # never together: no interference when antipodal
    assert represented(correlated.W).all() and represented(anti.W).all()


@pytest.mark.slow
def test_denser_correlated_features_collapse_onto_their_common_direction() -> None:
    dense = train_toy(4, 2, sparsity=0.6, feature_sets="correlated", instances=3, steps=5_000, lr=3e-3, seed=0)
    angle, norms = _pair_angles(dense.W), feature_norms(dense.W).reshape(3, 2, 2)
    collapsed = angle < 5
    assert collapsed.any()
    assert np.allclose(norms[collapsed], 2**-0.5, atol=0.03)  # one direction for the pair, each at 1/√2
