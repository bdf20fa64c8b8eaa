"""``LogitLens.log_prob(next_tokens=True)``: each position's actual next token, without the dense array."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.errors import ArgumentError, ArgumentTypeError


def test_next_token_log_probs_equal_the_dense_definition_and_the_models_loss() -> None:
    model = cw.load_pretrained("gelu-2l").to(torch.float64)
    tokens = torch.randint(1, 2048, (2, 9), generator=torch.Generator().manual_seed(7))
    lens = causal.logit_lens(model, tokens)
    got = lens.log_prob(next_tokens=True)
    assert got.shape == (model.cfg.n_layers + 1, 2, 8)
    dense = lens.dense().log_softmax(-1)[:, :, :-1]
    expected = dense.gather(-1, tokens[None, :, 1:, None].expand(dense.shape[0], -1, -1, 1))[..., 0]
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-9, rtol=0)
    np.testing.assert_allclose(-got[-1], causal.per_token_loss(model, tokens), atol=1e-9, rtol=0)
    with pytest.raises(ArgumentError, match="either ids or next_tokens"):
        lens.log_prob(5, next_tokens=True)
    with pytest.raises(ArgumentTypeError, match="next_tokens: expected a bool"):
        lens.log_prob(next_tokens="yes")  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="ids: expected token ids"):
        lens.log_prob()
