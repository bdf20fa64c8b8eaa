"""Linear probes against scikit-learn on the same activations and split (logistic regression for two and for more
classes, ridge regression for values), the control task's definition, the accuracy map, and bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError, ShapeError
from circuitwidgets.hypotheses import Probe, Probes, control_task, probe
from circuitwidgets.model import CircuitModel

sklearn = pytest.importorskip("sklearn.linear_model")
metrics = pytest.importorskip("sklearn.metrics")


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(1, 2048, (24, 8), generator=torch.Generator().manual_seed(0))
    return tokens, tokens % 2


def _split(model: CircuitModel, p: Probe, tokens: torch.Tensor, labels: torch.Tensor) -> tuple[Any, ...]:
    _, cache = model.run_with_cache(tokens, names=[p.site])
    acts = cache[p.site, p.layer].double()
    test = torch.zeros(tokens.shape[0], dtype=torch.bool)
    test[p.held_out] = True
    mask = ~torch.isnan(labels) if labels.dtype.is_floating_point else labels >= 0
    train, held = mask & ~test[:, None], mask & test[:, None]
    return acts[train].numpy(), labels[train].numpy(), acts[held].numpy(), labels[held].numpy()


def test_a_two_class_probe_equals_scikit_learns_logistic_regression(gelu: CircuitModel, data: Any) -> None:
    tokens, labels = data
    p = probe(gelu, "resid_post", tokens, labels, layer=1, l2=2.0)
    assert isinstance(p, Probe) and p.kind == "logistic" and len(p.held_out) == 6
    x, y, xt, yt = _split(gelu, p, tokens, labels)
    ref = sklearn.LogisticRegression(C=0.5, tol=1e-12, max_iter=1000, solver="newton-cholesky").fit(x, y)
    np.testing.assert_allclose(p.weights.numpy(), ref.coef_, atol=1e-6)
    np.testing.assert_allclose(p.intercept.numpy(), ref.intercept_, atol=1e-6)
    assert p.accuracy == pytest.approx(ref.score(xt, yt), abs=1e-12)
    assert p.train_accuracy == pytest.approx(ref.score(x, y), abs=1e-12)
    assert torch.equal(p.direction, p.weights[0])


def test_a_many_class_probe_equals_scikit_learns_softmax_regression(random_model: Any) -> None:
    model = random_model(d_model=24, d_vocab=50)  # a narrow stream: the softmax fit's Hessian is 3 · 25 square
    tokens = torch.randint(0, 50, (24, 8), generator=torch.Generator().manual_seed(0))
    labels = tokens % 3
    labels[:, 0] = -1  # unlabelled positions are left out of training and scoring
    p = probe(model, "attn_out", tokens, labels, layer=0)
    assert isinstance(p, Probe) and p.classes == [0, 1, 2]
    x, y, xt, yt = _split(model, p, tokens, labels)
    ref = sklearn.LogisticRegression(C=1.0, tol=1e-12, max_iter=1000, solver="newton-cholesky").fit(x, y)
    np.testing.assert_allclose(p.weights.numpy(), ref.coef_, atol=1e-6)
    probs = torch.softmax(torch.as_tensor(xt) @ p.weights.T + p.intercept, -1).numpy()
    np.testing.assert_allclose(probs, ref.predict_proba(xt), atol=1e-6)
    assert p.accuracy == pytest.approx(ref.score(xt, yt), abs=1e-12)
    with pytest.raises(ArgumentError, match="direction"):
        _ = p.direction
    assert torch.equal(p.direction_of(2), p.weights[2])


def test_a_value_probe_equals_scikit_learns_ridge_regression(gelu: CircuitModel, data: Any) -> None:
    tokens, _ = data
    values = (tokens % 7).double()
    values[3, 2] = float("nan")
    p = probe(gelu, "resid_pre", tokens, values, layer=1, l2=3.0)
    assert isinstance(p, Probe) and p.kind == "ridge"
    x, y, xt, yt = _split(gelu, p, tokens, values)
    ref = sklearn.Ridge(alpha=3.0).fit(x, y)
    np.testing.assert_allclose(p.weights[0].numpy(), ref.coef_, atol=1e-6)
    assert float(p.intercept[0]) == pytest.approx(ref.intercept_, abs=1e-6)
    assert p.accuracy == pytest.approx(metrics.r2_score(yt, ref.predict(xt)), abs=1e-6)


def test_the_control_task_gives_each_token_type_one_label_from_the_labels(gelu: CircuitModel, data: Any) -> None:
    tokens, labels = data
    labels = labels.clone()
    labels[0, :3] = -1
    control = control_task(tokens, labels, seed=1)
    assert torch.equal(control < 0, labels < 0)
    seen: dict[int, int] = {}
    for t, c in zip(tokens[labels >= 0].tolist(), control[labels >= 0].tolist(), strict=True):
        assert seen.setdefault(t, c) == c
    assert set(control[labels >= 0].tolist()) <= {0, 1}
    p = probe(gelu, "resid_post", tokens, labels, layer=0, seed=1)
    assert isinstance(p, Probe)
    x, _, xt, _ = _split(gelu, p, tokens, labels)
    _, yc, _, yct = _split(gelu, p, tokens, control)
    ref = sklearn.LogisticRegression(C=1.0, tol=1e-12, max_iter=1000, solver="newton-cholesky").fit(x, yc)
    assert p.control_accuracy == pytest.approx(ref.score(xt, yct), abs=1e-12)
    assert p.selectivity == pytest.approx(p.accuracy - p.control_accuracy)


def test_every_layer_gives_an_accuracy_map_the_patching_view_draws(gelu: CircuitModel, data: Any) -> None:
    tokens, labels = data
    every = probe(gelu, "resid_post", tokens, labels)
    assert isinstance(every, Probes) and len(every) == 2
    sweep = every.accuracy_map
    assert sweep.dims == ("layer", "pos") and sweep.shape == (2, 8)
    for layer in range(2):
        held = every[layer].held_out
        predicted = every[layer].predict(gelu.run_with_cache(tokens, names=["resid_post"])[1]["resid_post", layer])
        expected = (predicted[held] == labels[held]).double().mean(0).numpy()
        np.testing.assert_allclose(sweep.values[layer], expected, atol=1e-12)
    assert cw.PatchingMap(sweep).values.shape[1:] == (2, 8)


def test_a_probe_direction_is_a_direction_for_logit_attribution(gelu: CircuitModel, data: Any) -> None:
    tokens, labels = data
    p = probe(gelu, "resid_post", tokens, labels, layer=1)
    assert isinstance(p, Probe)
    dla = cw.causal.logit_attribution(gelu, tokens[:2], p.direction, by="head")
    total = dla.values.sum() + sum(dla.extra["rest"].values())
    assert total == pytest.approx(float(np.mean(dla.extra["logit"])), abs=1e-8)


def test_a_probe_direction_reads_through_the_lens_as_a_token_does(gelu: CircuitModel, data: Any) -> None:
    tokens, labels = data
    p = probe(gelu, "resid_post", tokens, labels, layer=1)
    assert isinstance(p, Probe)
    lens = cw.causal.logit_lens(gelu, tokens[:2])
    token = 17  # along a token's unembedding column: the lens's own logit of it (log-prob + log-sum-exp - bias)
    b_U = gelu.weight("b_U")
    logit = lens.log_prob(token) + lens._lse.double().numpy() - (0.0 if b_U is None else float(b_U[token]))
    np.testing.assert_allclose(lens.along(gelu.W_U[:, token]), logit, atol=1e-4)
    read = lens.along(p.direction)
    assert read.shape == (gelu.cfg.n_layers + 1, 2, tokens.shape[1]) and np.isfinite(read).all()
    assert np.allclose(lens.along(2 * p.direction), 2 * read)  # linear in the direction, as a readout must be
    with pytest.raises(ShapeError, match="direction"):
        lens.along(p.direction[:-1])
    with pytest.raises(ArgumentError, match="direction"):
        lens.along(torch.full((gelu.cfg.d_model,), float("nan")))


def test_bad_probe_input_is_refused_naming_the_argument(gelu: CircuitModel, data: Any) -> None:
    tokens, labels = data
    with pytest.raises(ArgumentError, match="site"):
        probe(gelu, "resid_everywhere", tokens, labels)
    with pytest.raises(ShapeError, match="labels"):
        probe(gelu, "resid_post", tokens, labels[:, :5])
    with pytest.raises(ShapeError, match="labels"):
        control_task(tokens, labels[:3])
    with pytest.raises(ArgumentError, match="layer"):
        probe(gelu, "resid_post", tokens, labels, layer=2)
    with pytest.raises(ArgumentError, match="l2"):
        probe(gelu, "resid_post", tokens, labels, layer=0, l2=0)
    with pytest.raises(ArgumentError, match="test_fraction"):
        probe(gelu, "resid_post", tokens, labels, layer=0, test_fraction=1.5)
    with pytest.raises(ArgumentError, match="classes"):
        probe(gelu, "resid_post", tokens, torch.zeros_like(labels), layer=0)
    with pytest.raises(ArgumentError, match="site"):
        probe(cw.load_pretrained("attn-only-1l"), "mlp_out", tokens % 48, labels, layer=0)
