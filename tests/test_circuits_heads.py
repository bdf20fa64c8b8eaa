"""Head detectors on repeated random tokens: definitions, determinism, and heads built to match."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import make_random_model

from circuitwidgets.circuits import copying_scores, head_scores, repeated_random_tokens, same_matching_scores
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel
from circuitwidgets.tokenizer import VocabTokenizer


def test_repeated_tokens_are_seeded_bos_prefixed_and_never_bos_inside() -> None:
    base = make_random_model(d_vocab=20, n_ctx=32)
    model = CircuitModel(base.cfg, dict(base.weights()), tokenizer=VocabTokenizer([f"t{i}" for i in range(20)], bos_token_id=7))
    tokens = repeated_random_tokens(model, seq_len=10, n_seqs=30, seed=3)
    assert tokens.shape == (30, 21)
    assert (tokens[:, 0] == 7).all() and not (tokens[:, 1:] == 7).any()
    torch.testing.assert_close(tokens[:, 1:11], tokens[:, 11:])
    torch.testing.assert_close(tokens, repeated_random_tokens(model, seq_len=10, n_seqs=30, seed=3))
    assert not torch.equal(tokens, repeated_random_tokens(model, seq_len=10, n_seqs=30, seed=4))
    assert set(tokens[:, 1:].unique().tolist()) == set(range(20)) - {7}


@pytest.mark.parametrize("kind", ["previous_token", "duplicate_token", "induction"])
def test_scores_are_mean_attention_to_the_detectors_source(kind: str) -> None:
    model = make_random_model(n_layers=2, n_heads=3, n_ctx=32)
    n = 6
    scores = head_scores(model, kind, seq_len=n, n_seqs=4, seed=1)  # type: ignore[arg-type]
    tokens = repeated_random_tokens(model, n, 4, seed=1)  # this model has no BOS: r_1..r_n r_1..r_n
    _, cache = model.run_with_cache(tokens)
    for l in range(2):
        pattern = cache["pattern", l]
        if kind == "previous_token":
            expected = np.mean([pattern[:, :, i, i - 1].numpy() for i in range(1, 2 * n)], axis=0).mean(0)
        else:
            shift = n if kind == "duplicate_token" else n - 1
            expected = np.mean([pattern[:, :, i, i - shift].numpy() for i in range(n, 2 * n)], axis=0).mean(0)
        np.testing.assert_allclose(scores[l], expected)


def _previous_token_model() -> CircuitModel:
    """One head whose positional QK term is large exactly for key = query − 1 (shortformer positions)."""
    base = make_random_model(n_layers=1, n_heads=1, d_model=32, d_head=32, n_ctx=32, d_vocab=10, seed=0)
    weights = dict(base.weights())
    weights["W_E"] = torch.zeros(10, 32, dtype=torch.float64)
    weights["W_pos"] = torch.eye(32, dtype=torch.float64)
    weights["W_Q"] = (torch.diag(torch.ones(31, dtype=torch.float64), -1) * 60.0).reshape(1, 1, 32, 32)
    weights["W_K"] = torch.eye(32, dtype=torch.float64).reshape(1, 1, 32, 32)
    return CircuitModel(base.cfg, weights)


def test_a_head_that_attends_to_the_previous_position_is_a_previous_token_head() -> None:
    model = _previous_token_model()
    assert head_scores(model, "previous_token", seq_len=10)[0, 0] > 0.99
    assert head_scores(model, "induction", seq_len=10)[0, 0] < 0.01


def test_seq_len_must_fit_the_context() -> None:
    with pytest.raises(ArgumentError, match="seq_len: expected at most 16"):
        head_scores(make_random_model(n_ctx=32), "induction", seq_len=17)
    with pytest.raises(ArgumentError, match="kind: expected one of"):
        head_scores(make_random_model(), "copying")  # type: ignore[arg-type]


def test_shipped_two_layer_model_has_induction_heads_that_copy_and_match() -> None:
    """The paper's claim on our own 2-layer model: induction heads K-compose with a previous-token head."""
    from circuitwidgets.sources.pretrained import list_pretrained, load_pretrained

    if "attn-only-2l" not in list_pretrained():
        pytest.skip("the shipped attn-only-2l model is not built in this checkout")
    model = load_pretrained("attn-only-2l")
    induction = head_scores(model, "induction", seq_len=40, n_seqs=4)
    previous = head_scores(model, "previous_token", seq_len=40, n_seqs=4)
    h2 = int(np.argmax(induction[1]))
    h1 = int(np.argmax(previous[0]))
    assert induction[1, h2] > 0.3 and previous[0, h1] > 0.3
    assert copying_scores(model, "ov")[1, h2] > 0.5
    assert same_matching_scores(model)[0, h1, 1, h2] > 0.5
