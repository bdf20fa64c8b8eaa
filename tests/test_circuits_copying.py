"""Copying and matching summaries equal their dense definitions; copying heads score +1."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from conftest import make_random_model
from hypothesis import given, settings
from hypothesis import strategies as st

from circuitwidgets.circuits import (
    MLPPathsExcludedWarning,
    composition_scores,
    copying_scores,
    eigenvalues,
    kcomp_eigenvalues,
    same_matching_scores,
)
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel, ModelConfig

SETTINGS = settings(max_examples=10, deadline=None)


def dense_ov(model: CircuitModel, l: int, h: int) -> np.ndarray:
    return (model.W_E @ model.W_V[l, h] @ model.W_O[l, h] @ model.W_U).numpy()


def dense_qk(model: CircuitModel, l: int, h: int) -> np.ndarray:
    return (model.W_E @ model.W_Q[l, h] @ model.W_K[l, h].T @ model.W_E.T).numpy()


def dense_kcomp(model: CircuitModel, l1: int, h1: int, l2: int, h2: int) -> np.ndarray:
    W_QK2 = model.W_Q[l2, h2] @ model.W_K[l2, h2].T
    return (model.W_E @ W_QK2 @ (model.W_E @ model.W_V[l1, h1] @ model.W_O[l1, h1]).T).numpy()


def dense_score(M: np.ndarray, method: str, k: int = 5) -> float:
    """The definitions, on the full [V, V] matrix."""
    if method == "eigen":
        eigs = np.linalg.eigvals(M)
        eigs = eigs[np.abs(eigs) > 1e-9 * max(1.0, np.abs(eigs).max())]
        return float(eigs.sum().real / np.abs(eigs).sum())
    diag = np.diag(M)
    if method == "diagonal":
        return float((diag > 0).mean())
    return float(((M > diag[:, None]).sum(axis=1) < k).mean())


@st.composite
def models(draw: st.DrawFn, min_layers: int = 1) -> CircuitModel:
    return make_random_model(
        n_layers=draw(st.integers(min_layers, 3)),
        n_heads=draw(st.integers(1, 3)),
        d_model=draw(st.integers(2, 10)),
        d_head=draw(st.integers(1, 4)),
        d_vocab=draw(st.integers(2, 25)),
        seed=draw(st.integers(0, 1000)),
    )


@SETTINGS
@given(model=models())
def test_eigenvalues_are_the_nonzero_eigenvalues_of_the_full_circuits(model: CircuitModel) -> None:
    for circuit, dense in (("ov", dense_ov), ("qk", dense_qk)):
        ours = eigenvalues(model, circuit)  # type: ignore[arg-type]
        assert ours.shape == (model.cfg.n_layers, model.cfg.n_heads, model.cfg.d_head)
        assert ours.dtype == np.complex128
        for l in range(model.cfg.n_layers):
            for h in range(model.cfg.n_heads):
                full = np.linalg.eigvals(dense(model, l, h))
                big_ours = np.sort_complex(np.round(ours[l, h][np.abs(ours[l, h]) > 1e-7], 6))
                big_full = np.sort_complex(np.round(full[np.abs(full) > 1e-7], 6))
                np.testing.assert_allclose(big_ours, big_full, atol=1e-5)
                assert np.all(np.diff(np.abs(ours[l, h])) <= 1e-12)  # sorted by magnitude


@SETTINGS
@given(model=models(), method=st.sampled_from(["eigen", "diagonal", "topk"]), k=st.integers(1, 4))
def test_copying_scores_equal_the_dense_definitions(model: CircuitModel, method: str, k: int) -> None:
    for circuit, dense in (("ov", dense_ov), ("qk", dense_qk)):
        scores = copying_scores(model, circuit, method, k=k, memory_budget=64)  # type: ignore[arg-type]
        expected = np.array(
            [
                [dense_score(dense(model, l, h), method, k) for h in range(model.cfg.n_heads)]
                for l in range(model.cfg.n_layers)
            ]
        )
        np.testing.assert_allclose(scores, expected, atol=1e-7)


@SETTINGS
@given(model=models(min_layers=2), method=st.sampled_from(["eigen", "diagonal", "topk"]))
def test_same_matching_scores_summarise_every_kcomp_term(model: CircuitModel, method: str) -> None:
    L, H = model.cfg.n_layers, model.cfg.n_heads
    scores = same_matching_scores(model, method, k=2, progress_bar=False)  # type: ignore[arg-type]
    assert scores.shape == (L, H, L, H)
    for l1 in range(L):
        for l2 in range(L):
            for h1 in range(H):
                for h2 in range(H):
                    if l1 >= l2:
                        assert np.isnan(scores[l1, h1, l2, h2])
                    else:
                        expected = dense_score(dense_kcomp(model, l1, h1, l2, h2), method, 2)
                        assert scores[l1, h1, l2, h2] == pytest.approx(expected, abs=1e-7)
    assert np.isnan(kcomp_eigenvalues(model)[1, 0, 0, 0]).all()


def test_qk_kcomp_scores_use_the_earlier_head_with_most_k_composition() -> None:
    model = make_random_model(n_layers=3, n_heads=2, d_model=8, d_head=3, d_vocab=20, seed=5)
    scores = copying_scores(model, "qk_kcomp")
    comp = composition_scores(model, "K")
    assert np.isnan(scores[0]).all()
    for l2 in range(1, 3):
        for h2 in range(2):
            column = comp[:l2, :, l2, h2]
            l1, h1 = np.unravel_index(np.nanargmax(column), column.shape)
            assert scores[l2, h2] == pytest.approx(dense_score(dense_kcomp(model, int(l1), int(h1), l2, h2), "eigen"))


def _copying_model(sign: float) -> CircuitModel:
    """One head whose OV circuit is sign · W_E P W_Eᵀ (W_U = W_Eᵀ, P a projection onto d_head dims)."""
    base = make_random_model(n_layers=1, n_heads=1, d_model=8, d_head=3, d_vocab=30, seed=1)
    weights = dict(base.weights())
    weights["W_U"] = base.W_E.T.clone()
    eye = torch.eye(8, dtype=torch.float64)
    weights["W_V"] = eye[:, :3].reshape(1, 1, 8, 3) * sign
    weights["W_O"] = eye[:3, :].reshape(1, 1, 3, 8)
    weights["W_Q"] = eye[:, :3].reshape(1, 1, 8, 3) * sign
    weights["W_K"] = eye[:, :3].reshape(1, 1, 8, 3)
    return CircuitModel(base.cfg, weights)


def test_a_copying_head_scores_plus_one_and_an_anti_copying_head_minus_one() -> None:
    assert copying_scores(_copying_model(1.0), "ov")[0, 0] == pytest.approx(1.0)
    assert copying_scores(_copying_model(1.0), "qk")[0, 0] == pytest.approx(1.0)
    assert copying_scores(_copying_model(1.0), "ov", "diagonal")[0, 0] == 1.0
    assert copying_scores(_copying_model(-1.0), "ov")[0, 0] == pytest.approx(-1.0)
    assert copying_scores(_copying_model(-1.0), "qk", "diagonal")[0, 0] == 0.0


def test_tokens_restrict_the_diagonal_and_topk_rates() -> None:
    model = make_random_model(n_layers=1, n_heads=2, d_vocab=40)
    tokens = [3, 5, 7, 11]
    scores = copying_scores(model, "ov", "topk", k=3, tokens=tokens)
    for h in range(2):
        M = dense_ov(model, 0, h)
        expected = np.mean([(M[t] > M[t, t]).sum() < 3 for t in tokens])
        assert scores[0, h] == pytest.approx(expected)


def test_a_zero_head_scores_nan_rather_than_a_number() -> None:
    model = make_random_model(n_layers=1, n_heads=2)
    weights = dict(model.weights())
    weights["W_O"] = weights["W_O"].clone()
    weights["W_O"][0, 1] = 0
    scores = copying_scores(CircuitModel(model.cfg, weights), "ov")
    assert np.isnan(scores[0, 1]) and not np.isnan(scores[0, 0])


def test_models_with_mlps_warn_once_that_mlp_paths_are_excluded() -> None:
    base = make_random_model(n_layers=1, n_heads=1)
    cfg = ModelConfig(**{**base.cfg.to_dict(), "has_mlp": True, "d_mlp": 8, "act_fn": "relu"})
    weights = dict(base.weights()) | {
        "W_in": torch.zeros(1, 16, 8, dtype=torch.float64),
        "W_out": torch.zeros(1, 8, 16, dtype=torch.float64),
    }
    model = CircuitModel(cfg, weights)
    with pytest.warns(MLPPathsExcludedWarning, match="MLP"):
        copying_scores(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copying_scores(model)


def test_bad_choices_are_named() -> None:
    model = make_random_model()
    with pytest.raises(ArgumentError, match=r"circuit: expected one of \('ov', 'qk', 'qk_kcomp'\), got 'xy'"):
        copying_scores(model, "xy")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="method: expected one of"):
        copying_scores(model, method="trace")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"tokens: expected ids in \[0, 50\), got range \[0, 99\]"):
        copying_scores(model, method="diagonal", tokens=[0, 99])
