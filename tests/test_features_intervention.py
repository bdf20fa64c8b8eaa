"""Feature interventions (``features.intervene``) against their definition and against the attribution graph.

On small random float64 models with random transcoders: setting features to their own values changes nothing;
with attention frozen and every layer constrained the change in a logit (centred) and in a later feature's
pre-activation is the graph's edge times the relative change of the source, exactly; free, the measured change
ranks as the graph predicts; the graph's other targets (one token, a logit difference, a direction) are exact in
the same way; bad input is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _graphs import decoder_model, mlp_model, random_transcoders

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.features.intervention import group, intervene, times
from circuitwidgets.features.steering import generate
from circuitwidgets.graphs.attribution import attribution_matrix
from circuitwidgets.graphs.dense import DenseAttribution

TOKENS = [0, 5, 7, 9, 5, 7, 3, 11, 4, 9, 12, 5]


@pytest.fixture(scope="module")
def setup() -> tuple[cw.CircuitModel, list, DenseAttribution]:
    model = mlp_model()
    tcs = random_transcoders(model)
    return model, tcs, attribution_matrix(model, tcs, torch.tensor(TOKENS), max_feature_nodes=None)


def _centred(logits: torch.Tensor, token: int) -> torch.Tensor:
    return logits[-1, token] - logits[-1].mean()


@pytest.mark.parametrize(("freeze", "constrained"), [(True, None), (False, None), (True, range(2))])
def test_own_value_changes_nothing(setup: tuple, freeze: bool, constrained: range | None) -> None:
    model, tcs, dense = setup
    chosen = [(*dense.features[i].tolist(), float(dense.activations[i])) for i in range(0, dense.n_features, 3)]
    out = intervene(model, tcs, TOKENS, chosen, freeze_attention=freeze, constrained_layers=constrained)
    assert len(chosen) > 5
    torch.testing.assert_close(out.logits, out.clean_logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.activations, out.clean_activations, rtol=0, atol=1e-12)
    clean = model(torch.tensor([TOKENS]))[0]
    torch.testing.assert_close(out.clean_logits, clean, rtol=0, atol=1e-12)
    assert np.asarray(out.logits).shape == (len(TOKENS), model.cfg.d_vocab)  # numpy-convertible


def test_direct_effect_is_the_graph_edge(setup: tuple) -> None:
    """Frozen attention, every layer constrained: Δ(centred logit) = edge × (v − a) / a, for every feature."""
    model, tcs, dense = setup
    checked = 0
    for i in range(0, dense.n_features, max(1, dense.n_features // 12)):
        layer, pos, feature = dense.features[i].tolist()
        a = float(dense.activations[i])
        for value in (0.0, a + 0.7):
            out = intervene(model, tcs, TOKENS, [(layer, pos, feature, value)], constrained_layers=range(2))
            for k, token in enumerate(dense.logit_tokens.tolist()):
                measured = float(_centred(out.logits, token) - _centred(out.clean_logits, token))
                predicted = float(dense.adjacency[dense.logit_start + k, i]) * (value - a) / a
                assert measured == pytest.approx(predicted, rel=1e-9, abs=1e-12)
                checked += 1
    assert checked > 100 and len({int(f) for f in dense.features[:, 0]}) == 2


def test_direct_effect_on_later_features(setup: tuple) -> None:
    """A layer-0 feature's edge to a layer-1 feature is the change of that feature's pre-activation."""
    model, tcs, dense = setup
    sources = [i for i in range(dense.n_features) if int(dense.features[i, 0]) == 0][::4]
    targets = [j for j in range(dense.n_features) if int(dense.features[j, 0]) == 1]
    seen = 0
    for i in sources:
        layer, pos, feature = dense.features[i].tolist()
        out = intervene(model, tcs, TOKENS, [(layer, pos, feature, 0.0)], constrained_layers=range(2))
        change = out.pre_activations - out.clean_pre_activations
        for j in targets:
            _, p, f = dense.features[j].tolist()
            predicted = -float(dense.adjacency[j, i])
            assert float(change[1, p, f]) == pytest.approx(predicted, rel=1e-9, abs=1e-12)
            seen += abs(predicted) > 1e-6
    assert seen > 10


def test_times_and_group(setup: tuple) -> None:
    model, tcs, dense = setup
    nodes = [tuple(dense.features[i].tolist()) for i in (1, 4, 9)]
    acts = [float(dense.activations[i]) for i in (1, 4, 9)]
    by_value = intervene(model, tcs, TOKENS, [(*n, 2 * a) for n, a in zip(nodes, acts, strict=True)])
    by_times = intervene(model, tcs, TOKENS, group(nodes, times(2)))
    torch.testing.assert_close(by_value.logits, by_times.logits, rtol=0, atol=1e-12)
    assert [v for *_, v in by_times.interventions] == pytest.approx([2 * a for a in acts])
    assert float((by_times.logits - by_times.clean_logits).abs().max()) > 1e-4


def test_free_effect_ranks_as_the_graph_predicts(setup: tuple) -> None:
    """Attention frozen, MLPs free: zeroing a feature moves the top logit roughly as the graph's direct edge says
    (rank correlation over the features with the largest edges)."""
    from scipy.stats import spearmanr

    model, tcs, dense = setup
    token = int(dense.logit_tokens[0])
    edges = dense.adjacency[dense.logit_start, : dense.n_features]
    top = torch.argsort(edges.abs(), descending=True)[:20].tolist()
    predicted, measured = [], []
    for i in top:
        out = intervene(model, tcs, TOKENS, [(*dense.features[i].tolist(), 0.0)])
        measured.append(float(_centred(out.logits, token) - _centred(out.clean_logits, token)))
        predicted.append(-float(edges[i]))
    assert spearmanr(predicted, measured).statistic > 0.6


@pytest.mark.parametrize("kind", ["token", "pair", "direction"])
def test_targets_are_exact(setup: tuple, kind: str) -> None:
    """Each target's edges are the direct effect on the quantity it names."""
    model, tcs, _ = setup
    g = torch.Generator().manual_seed(3)
    c = torch.randn(model.cfg.d_vocab, generator=g, dtype=torch.float64)
    target: object = {"token": "t9", "pair": ("t9", "t3"), "direction": ("probe", model.W_U @ c)}[kind]
    dense = attribution_matrix(model, tcs, torch.tensor(TOKENS), max_feature_nodes=None, target=target)
    assert dense.n_logits == 1 and dense.extra["target"]["kind"] == kind
    b_U = model.weight("b_U")
    assert b_U is not None

    def value(logits: torch.Tensor) -> float:
        last = logits[-1]
        if kind == "token":
            return float(last[9] - last.mean())
        if kind == "pair":
            return float(last[9] - last[3])
        return float((last - b_U) @ c)  # u · (W_U c) = c · (logits − b_U)

    for i in range(0, dense.n_features, max(1, dense.n_features // 8)):
        out = intervene(model, tcs, TOKENS, [(*dense.features[i].tolist(), 0.0)], constrained_layers=range(2))
        assert value(out.logits) - value(out.clean_logits) == pytest.approx(
            -float(dense.adjacency[dense.logit_start, i]), rel=1e-9, abs=1e-12
        )


def test_gemma_like_identity_and_direct_effect() -> None:
    """Norms after sublayers, grouped-query attention, soft-caps: still a no-op at own values, and exact direct
    effects on a later feature's value (the logits pass a soft-cap, so compare before it via a pair target)."""
    model = decoder_model()
    tcs = random_transcoders(model, jump=True)
    toks = [0, 3, 8, 5, 9, 3, 8]
    dense = attribution_matrix(model, tcs, torch.tensor(toks), max_feature_nodes=None)
    chosen = [(*dense.features[i].tolist(), float(dense.activations[i])) for i in range(dense.n_features)]
    out = intervene(model, tcs, toks, chosen)
    torch.testing.assert_close(out.logits, out.clean_logits, rtol=0, atol=1e-10)


def test_generate_steers() -> None:
    model = mlp_model()
    tcs = random_transcoders(model)
    plain = generate(model, tcs, TOKENS, [], max_new_tokens=4)
    again = generate(model, tcs, TOKENS, [], max_new_tokens=4)
    assert plain.tokens == again.tokens and len(plain.tokens) == 4
    expected = TOKENS[:]
    for _ in range(4):
        expected.append(int(model(torch.tensor([expected]))[0, -1].argmax()))
    assert plain.tokens == expected[len(TOKENS) :]
    # a large value on every position from 1 on (open-ended) changes the continuation's logits
    steered = generate(model, tcs, TOKENS, [(1, slice(1, None), 3, 25.0)], max_new_tokens=4)
    assert float((steered.logits - plain.logits).abs().max()) > 1e-3
    assert isinstance(steered.text, str)


def test_bad_input(setup: tuple) -> None:
    model, tcs, _ = setup
    with pytest.raises(ArgumentError, match="layer"):
        intervene(model, tcs, TOKENS, [(2, 1, 0, 1.0)])
    with pytest.raises(ArgumentError, match="position"):
        intervene(model, tcs, TOKENS, [(0, 12, 0, 1.0)])
    with pytest.raises(ArgumentError, match="feature"):
        intervene(model, tcs, TOKENS, [(0, 1, 24, 1.0)])
    with pytest.raises(ArgumentError, match="finite"):
        intervene(model, tcs, TOKENS, [(0, 1, 0, float("nan"))])
    with pytest.raises(ArgumentTypeError, match="value"):
        intervene(model, tcs, TOKENS, [(0, 1, 0, "big")])
    with pytest.raises(ArgumentTypeError, match="interventions"):
        intervene(model, tcs, TOKENS, [(0, 1, 0)])
    with pytest.raises(ArgumentError, match="constrained_layers"):
        intervene(model, tcs, TOKENS, [], constrained_layers=[5])
    other = mlp_model(d_model=24, seed=4)
    with pytest.raises(ShapeError, match="transcoders"):
        intervene(model, random_transcoders(other), TOKENS, [])
    named = random_transcoders(model)
    named[0].model_name = "gpt2"  # type: ignore[attr-defined]
    with pytest.raises(ArgumentError, match="gpt2"):
        intervene(model, named, TOKENS, [])
    with pytest.raises(ArgumentError, match="factor"):
        times(float("inf"))
    with pytest.raises(ArgumentError, match="one token"):
        attribution_matrix(model, tcs, torch.tensor(TOKENS), target="t9 t3")
    with pytest.raises(ShapeError, match="d_model"):
        attribution_matrix(model, tcs, torch.tensor(TOKENS), target=torch.zeros(5, dtype=torch.float64))
    with pytest.raises(NonFiniteError, match="finite"):
        attribution_matrix(
            model, tcs, torch.tensor(TOKENS), target=torch.full((16,), float("nan"), dtype=torch.float64)
        )
    with pytest.raises(ArgumentTypeError, match="target"):
        attribution_matrix(model, tcs, torch.tensor(TOKENS), target=3.5)
