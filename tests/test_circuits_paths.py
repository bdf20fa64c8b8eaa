"""Bigrams, the path expansion of the logits, and the term-importance algorithm."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_random_model

from circuitwidgets.circuits import bigrams, path_expansion, term_importance
from circuitwidgets.errors import ShapeError
from circuitwidgets.model import CircuitModel, ModelConfig


def with_config(model: CircuitModel, **changes: object) -> CircuitModel:
    cfg = ModelConfig(**{**model.cfg.to_dict(), **changes})
    return CircuitModel(cfg, dict(model.weights()))


def test_bigrams_are_the_largest_direct_path_entries() -> None:
    model = make_random_model(biases=True, d_vocab=40)
    b_U = model.weight("b_U")
    assert b_U is not None
    dense = model.W_E @ model.W_U + b_U
    records = bigrams(model, k=6, memory_budget=100)
    assert [r.logit for r in records] == pytest.approx(torch.topk(dense.flatten(), 6).values.tolist())
    assert all(dense[r.current, r.next] == pytest.approx(r.logit) for r in records)
    row = bigrams(model, k=3, token=5)
    assert [r.next for r in row] == torch.topk(dense[5], 3).indices.tolist()
    assert row.to_pandas().shape == (3, 5)


@pytest.mark.parametrize(
    ("positions", "normalization"),
    [("shortformer", "none"), ("standard", "none"), ("rotary", "none"), ("shortformer", "ln_pre")],
)
def test_two_layer_logits_are_direct_plus_heads_plus_virtual_heads(positions: str, normalization: str) -> None:
    model = with_config(
        make_random_model(n_layers=2, n_heads=3, positional_embedding_type=positions, seed=1),
        normalization=normalization,
    )
    expansion = path_expansion(model, torch.tensor([3, 14, 15, 9, 26, 5, 35, 8, 9, 7]))
    assert expansion.heads.shape == (2, 3, 9)
    assert expansion.virtual_heads.shape == (2, 3, 2, 3, 9)
    assert np.isnan(expansion.virtual_heads[1, :, 0]).all() and np.isnan(expansion.virtual_heads[0, :, 0]).all()
    np.testing.assert_allclose(expansion.remainder, 0, atol=1e-9)
    np.testing.assert_allclose(
        expansion.direct + expansion.heads.sum((0, 1)) + np.nansum(expansion.virtual_heads, (0, 1, 2, 3)),
        expansion.logits,
    )


def test_each_head_term_is_its_pattern_times_the_embedding_through_its_ov_circuit() -> None:
    model = make_random_model(n_layers=2, n_heads=2, seed=3)
    tokens = torch.tensor([1, 2, 3, 1, 2, 3, 4])
    expansion = path_expansion(model, tokens)
    _, cache = model.run_with_cache(tokens)
    targets = tokens[1:]
    E = model.W_E[tokens]
    for l in range(2):
        for h in range(2):
            A = cache["pattern", l][0, h]
            logits = A @ E @ model.W_V[l, h] @ model.W_O[l, h] @ model.W_U
            np.testing.assert_allclose(expansion.heads[l, h], logits[:-1].gather(1, targets[:, None])[:, 0].numpy())
    A1, A2 = cache["pattern", 0][0, 1], cache["pattern", 1][0, 0]
    virtual = A2 @ A1 @ E @ model.W_V[0, 1] @ model.W_O[0, 1] @ model.W_V[1, 0] @ model.W_O[1, 0] @ model.W_U
    np.testing.assert_allclose(
        expansion.virtual_heads[0, 1, 1, 0], virtual[:-1].gather(1, targets[:, None])[:, 0].numpy()
    )


def test_biases_and_deeper_paths_land_in_the_remainder() -> None:
    model = make_random_model(n_layers=3, n_heads=2, biases=True, seed=2)
    expansion = path_expansion(model, torch.arange(8))
    assert np.abs(expansion.remainder).max() > 1e-6


def test_term_importance_orders_add_up_to_the_full_loss() -> None:
    model = make_random_model(n_layers=2, n_heads=3, d_vocab=30, seed=5)
    tokens = torch.randint(0, 30, (3, 12), generator=torch.Generator().manual_seed(0))
    result = term_importance(model, tokens)
    assert result.losses.shape == (3,) and result.marginal.shape == (3,) and result.layer_order1.shape == (2,)
    # Two attention-only layers: no path has more than two heads.
    assert result.losses[2] == pytest.approx(result.full_loss, rel=1e-10)
    assert result.loss_no_terms == pytest.approx(np.log(30))
    assert result.loss_no_terms - result.marginal.sum() == pytest.approx(result.full_loss)


def test_term_importance_order_zero_is_the_direct_path_alone() -> None:
    model = make_random_model(n_layers=2, n_heads=2, d_vocab=20, seed=6)
    tokens = torch.randint(0, 20, (2, 9), generator=torch.Generator().manual_seed(1))
    result = term_importance(model, tokens, max_order=1)
    logits = model.W_E[tokens] @ model.W_U
    direct_loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 20), tokens[:, 1:].reshape(-1))
    assert result.losses[0] == pytest.approx(float(direct_loss))
    # Order-1 terms of both layers together equal the first-order run; per-layer effects are measured alone.
    single = term_importance(make_random_model(n_layers=1, n_heads=2, d_vocab=20, seed=6), tokens, max_order=1)
    assert single.layer_order1[0] == pytest.approx(single.marginal[1])


def test_path_expansion_needs_one_sequence_of_two_tokens() -> None:
    model = make_random_model()
    with pytest.raises(ShapeError, match=r"tokens: expected \[pos\] or \[1, pos\] token ids, got shape \(2, 3\)"):
        path_expansion(model, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ShapeError, match="tokens: expected at least 2 positions"):
        path_expansion(model, [4])
