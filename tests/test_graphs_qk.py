"""QK attribution: the query-term × key-term parts sum to the model's own attention score (float64)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _graphs import decoder_model, mlp_model, random_transcoders

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs.qk import qk_attribution

TOKENS = torch.tensor([[0, 5, 7, 9, 5, 7, 3, 11]])


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"normalization": "rms_pre", "positions": "rotary", "seed": 1}, {"positions": "shortformer", "seed": 2}],
)
def test_terms_sum_to_the_score(kwargs: dict[str, object]) -> None:
    model = mlp_model(**kwargs)  # type: ignore[arg-type]
    tcs = random_transcoders(model, skip=True)
    _, cache = model.run_with_cache(TOKENS, names=["attn_scores"])
    for layer, head, query, key in [(1, 0, 7, 4), (1, 1, 5, 5), (0, 1, 6, 0), (1, 0, 3, 1)]:
        qk = qk_attribution(model, tcs, TOKENS, layer, head, query, key)
        assert qk.score == pytest.approx(float(cache["attn_scores", layer][0, head, query, key]), rel=1e-12)
        assert qk.terms.sum() == pytest.approx(qk.score, rel=1e-10, abs=1e-10)
        assert qk.terms.shape == (len(qk.query_labels), len(qk.key_labels))
        if layer == 1:  # an earlier layer's features and heads are terms of their own
            assert any(lbl.startswith("L0 f") for lbl in qk.query_labels)
            assert "L0H1" in qk.key_labels
        assert len(qk.top(3)) == 3 and abs(qk.top(1)[0][2]) == pytest.approx(abs(qk.terms).max())


def test_heads_and_positions_out_of_range_are_refused() -> None:
    model = mlp_model()
    tcs = random_transcoders(model)
    with pytest.raises(ArgumentError, match=r"head: expected an int in \[0, 2\), got 2"):
        qk_attribution(model, tcs, TOKENS, 1, 2, 7, 3)
    with pytest.raises(ArgumentError, match=r"layer: expected an int in \[0, 2\)"):
        qk_attribution(model, tcs, TOKENS, 2, 0, 7, 3)
    with pytest.raises(ArgumentTypeError, match="head: expected an int"):
        qk_attribution(model, tcs, TOKENS, 1, "0", 7, 3)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match=r"key: a query at position 3 attends to keys 0\.\.3"):
        qk_attribution(model, tcs, TOKENS, 1, 0, 3, 5)


def test_terms_sum_to_the_score_through_output_norms() -> None:
    """Gemma 2: each earlier head's term goes through the attention output norm (scale frozen); GQA, rotary."""
    model = decoder_model(seed=4)
    tcs = random_transcoders(model, skip=True)
    _, cache = model.run_with_cache(TOKENS, names=["attn_scores"])
    cap = model.cfg.attn_softcap
    assert cap is not None
    for layer, head, query, key in [(1, 3, 7, 4), (2, 0, 5, 2), (2, 1, 6, 6)]:
        qk = qk_attribution(model, tcs, TOKENS, layer, head, query, key)
        # the model records the soft-capped score; the split is of the score before it (DESIGN.md §3a)
        assert cap * np.tanh(qk.score / cap) == pytest.approx(float(cache["attn_scores", layer][0, head, query, key]))
        assert qk.terms.sum() == pytest.approx(qk.score, rel=1e-10, abs=1e-10)
        assert "L0H2" in qk.key_labels and any(lbl.startswith("L0 f") for lbl in qk.query_labels)
