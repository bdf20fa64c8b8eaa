"""Composition scores equal the paper's definition, not the permuted product; the baseline is what it says."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_random_model
from hypothesis import given, settings
from hypothesis import strategies as st

from circuitwidgets.circuits import composition_baseline, composition_scores
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel

SETTINGS = settings(max_examples=12, deadline=None)


def W_OV(model: CircuitModel, l: int, h: int) -> torch.Tensor:
    return model.W_V[l, h] @ model.W_O[l, h]


def W_QK(model: CircuitModel, l: int, h: int) -> torch.Tensor:
    return model.W_Q[l, h] @ model.W_K[l, h].T


def dense_composition(model: CircuitModel, kind: str) -> np.ndarray:
    """‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F), one dense [d, d] product per pair."""
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out = np.full((L, H, L, H), np.nan)
    for l1 in range(L):
        for l2 in range(l1 + 1, L):
            for h1 in range(H):
                for h2 in range(H):
                    W_A = W_OV(model, l1, h1)
                    W_B = {"Q": W_QK(model, l2, h2), "K": W_QK(model, l2, h2).T, "V": W_OV(model, l2, h2)}[kind]
                    out[l1, h1, l2, h2] = float((W_A @ W_B).norm() / (W_A.norm() * W_B.norm()))
    return out


@SETTINGS
@given(
    n_layers=st.integers(1, 3),
    n_heads=st.integers(1, 3),
    d_model=st.integers(2, 12),
    d_head=st.integers(1, 5),
    seed=st.integers(0, 1000),
    budget=st.sampled_from([1, 2000, 10**8]),
)
def test_composition_scores_equal_the_dense_definition(
    n_layers: int, n_heads: int, d_model: int, d_head: int, seed: int, budget: int
) -> None:
    model = make_random_model(n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_head=d_head, seed=seed)
    for kind in ("Q", "K", "V"):
        ours = composition_scores(model, kind, memory_budget=budget)  # type: ignore[arg-type]
        np.testing.assert_allclose(ours, dense_composition(model, kind), rtol=1e-9, atol=1e-12)


def test_composition_is_nan_unless_the_first_head_is_in_an_earlier_layer() -> None:
    scores = composition_scores(make_random_model(n_layers=3, n_heads=2), "V")
    l1, l2 = np.meshgrid(np.arange(3), np.arange(3), indexing="ij")
    earlier = (l1 < l2)[:, None, :, None].repeat(2, 1).repeat(2, 3)
    assert np.isnan(scores[~earlier]).all()
    assert np.isfinite(scores[earlier]).all()


def test_k_composition_is_not_the_permuted_product() -> None:
    """The paper's first diagram computed ‖W_O W_K W_Qᵀ W_V‖-style permutations; ours is ‖W_V W_O W_K W_Qᵀ‖."""
    model = make_random_model(n_layers=2, n_heads=2, d_model=16, d_head=4, seed=7)
    ours = composition_scores(model, "K")
    for h1 in range(2):
        for h2 in range(2):
            V1, O1 = model.W_V[0, h1], model.W_O[0, h1]
            Q2, K2 = model.W_Q[1, h2], model.W_K[1, h2]
            norms = (V1 @ O1).norm() * (Q2 @ K2.T).norm()
            correct = float((V1 @ O1 @ K2 @ Q2.T).norm() / norms)
            permuted = float((O1 @ K2 @ Q2.T @ V1).norm() / norms)  # [d_head, d_head]: cheap and wrong
            assert ours[0, h1, 1, h2] == pytest.approx(correct, rel=1e-10)
            assert abs(permuted - correct) > 1e-3


def test_baseline_is_the_mean_score_of_seeded_gaussian_factors() -> None:
    d, dh, n = 12, 3, 20
    g = np.random.default_rng(4)
    scores = []
    for group in (16, 4):  # drawn 16 samples per call
        z = torch.from_numpy(g.standard_normal((group, 4, d * dh)))
        for i in range(group):
            X1, Y1, X2, Y2 = z[i, 0].view(d, dh), z[i, 1].view(dh, d), z[i, 2].view(d, dh), z[i, 3].view(dh, d)
            A, B = X1 @ Y1, X2 @ Y2
            scores.append(float((A @ B).norm() / (A.norm() * B.norm())))
    assert composition_baseline(d, dh, n_samples=n, seed=4) == pytest.approx(np.mean(scores), rel=1e-12)
    assert composition_baseline(d, dh, n_samples=n, seed=4) == composition_baseline(d, dh, n_samples=n, seed=4)


def test_random_heads_compose_at_the_baseline_rate() -> None:
    model = make_random_model(n_layers=2, n_heads=12, d_model=32, d_head=4, seed=11)
    raw = composition_scores(model, "V")
    corrected = composition_scores(model, "V", baseline=True, n_samples=200)
    baseline = composition_baseline(32, 4, n_samples=200)
    np.testing.assert_allclose(corrected, raw - baseline)
    assert abs(np.nanmean(corrected)) < 0.03
    assert 0 < baseline < 1
    assert composition_baseline(64, 4, n_samples=50) < composition_baseline(16, 4, n_samples=50)


def test_composition_arguments_are_checked() -> None:
    model = make_random_model()
    with pytest.raises(ArgumentError, match=r"kind: expected one of \('Q', 'K', 'V'\), got 'q'"):
        composition_scores(model, "q")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="baseline: expected a bool, got str"):
        composition_scores(model, "K", baseline="yes")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"n_samples: expected an int in \[1, 100001\), got 0"):
        composition_baseline(16, 4, n_samples=0)
