"""Attribution graphs: the shared Dictionary works as a transcoder; bad input is refused by name."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from _graphs import mlp_model, random_transcoders

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError, UnsupportedArchitectureError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.graphs.attribution import attribution_graph, attribution_matrix

TOKENS = torch.tensor([[0, 5, 7, 9, 5, 7]])


def test_dictionaries_give_the_same_graph_as_plain_transcoders() -> None:
    model = mlp_model(seed=7)
    plain = random_transcoders(model, seed=8, skip=True)
    dicts = {
        f"L{tc.layer}.tc": Dictionary(
            "skip-transcoder",
            "relu",
            W_enc=tc.W_enc,
            b_enc=tc.b_enc,
            W_dec=tc.W_dec,
            b_dec=tc.b_dec,
            W_skip=tc.W_skip,
            layer=tc.layer,
        )
        for tc in plain
    }
    a = attribution_matrix(model, plain, TOKENS, max_feature_nodes=None)
    b = attribution_matrix(model, dicts, TOKENS, max_feature_nodes=None)
    assert a.n_features > 10
    torch.testing.assert_close(a.adjacency, b.adjacency, rtol=1e-12, atol=1e-12)


def test_transcoders_that_do_not_fit_are_refused() -> None:
    model = mlp_model()
    tcs = random_transcoders(model)
    with pytest.raises(ArgumentError, match=r"transcoders: expected one transcoder for each .* none for layers \[1\]"):
        attribution_matrix(model, tcs[:1], TOKENS)
    with pytest.raises(ArgumentError, match="two transcoders for layer 0"):
        attribution_matrix(model, [tcs[0], tcs[0]], TOKENS)
    narrow = random_transcoders(mlp_model(d_model=8))[1]
    with pytest.raises(ShapeError, match=r"transcoders\[1\]\.W_enc: expected shape \(16, 24\)"):
        attribution_matrix(model, [tcs[0], narrow], TOKENS)
    with pytest.raises(ArgumentError, match=r"transcoders\[0\]\.in_site"):
        attribution_matrix(model, [dataclasses.replace(tcs[0], in_site="resid_post"), tcs[1]], TOKENS)
    with pytest.raises(ArgumentError, match=r"transcoders\[1\]\.layer"):
        attribution_matrix(model, [tcs[0], dataclasses.replace(tcs[1], layer=5)], TOKENS)
    with pytest.raises(ArgumentTypeError, match=r"transcoders\[0\]: expected a transcoder"):
        attribution_matrix(model, [object(), tcs[1]], TOKENS)
    with pytest.raises(ArgumentTypeError, match="transcoders: expected a list or dict"):
        attribution_matrix(model, tcs[0], TOKENS)


def test_prompts_and_options_out_of_range_are_refused() -> None:
    model = mlp_model()
    tcs = random_transcoders(model)
    with pytest.raises(ShapeError, match="tokens: expected at least one position"):
        attribution_matrix(model, tcs, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ShapeError, match="tokens: expected one prompt"):
        attribution_matrix(model, tcs, TOKENS.repeat(2, 1))
    for name, bad in (("max_logits", 0), ("batch", 0), ("batch", 2.5), ("max_feature_nodes", -1)):
        with pytest.raises(ArgumentTypeError, match=name):
            attribution_matrix(model, tcs, TOKENS, **{name: bad})
    for bad in (0, 1.2, -0.5):
        with pytest.raises(ArgumentError, match="logit_prob"):
            attribution_matrix(model, tcs, TOKENS, logit_prob=bad)
        with pytest.raises(ArgumentError, match="node_threshold"):
            attribution_graph(model, tcs, TOKENS, node_threshold=bad)


def test_models_without_a_sequential_pre_norm_mlp_are_refused() -> None:
    model = mlp_model()
    cfg = dataclasses.replace(model.cfg, parallel_attn_mlp=True)
    parallel = type(model)(cfg, model.weights(), tokenizer=model.tokenizer)
    with pytest.raises(UnsupportedArchitectureError, match="in parallel"):
        attribution_matrix(parallel, random_transcoders(model), TOKENS)
