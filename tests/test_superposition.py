"""The toy-model engine: its fast gradient, sampler and optimiser against their plain definitions (float64)."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.superposition import MoreDimensionsThanFeaturesWarning, ToyModel, measure, train_toy
from circuitwidgets.superposition.model import batch_loss, pack, toy_gradient
from circuitwidgets.superposition.phase import classify_extra
from circuitwidgets.superposition.sampler import NegatedBatches


def _random_model(instances: int = 3, n: int = 6, m: int = 3, seed: int = 0) -> tuple[ToyModel, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    model = ToyModel(
        W=torch.randn(instances, m, n, generator=g, dtype=torch.float64),
        b=torch.randn(instances, n, generator=g, dtype=torch.float64) * 0.5,
        importance=torch.rand(instances, n, generator=g, dtype=torch.float64) + 0.1,
        feature_probability=torch.tensor([1.0, 0.4, 0.1][:instances], dtype=torch.float64),
    )
    return model, model.sample(64, g)


def _negated(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([-x, torch.ones(*x.shape[:-1], 1, dtype=x.dtype)], dim=-1)


def test_fast_gradient_is_the_gradient_of_the_plain_loss_in_float64() -> None:
    model, x = _random_model()
    W, b = model.W.clone().requires_grad_(), model.b.clone().requires_grad_()
    plain = ToyModel(W, b, model.importance, model.feature_probability)
    plain.loss(x).sum().backward()  # type: ignore[no-untyped-call]
    assert W.grad is not None and b.grad is not None
    scale = (2.0 / (x.shape[1] * x.shape[2])) * model.importance[:, None, :]
    fast = toy_gradient(pack(model.W, model.b), _negated(x), scale)
    assert torch.allclose(fast, pack(W.grad, b.grad), rtol=1e-10, atol=1e-12)
    assert (fast[:, :-1].abs() > 1e-6).any()  # not a vacuous match of zeros


def test_batch_loss_is_the_plain_loss() -> None:
    model, x = _random_model(seed=1)
    fast = batch_loss(pack(model.W, model.b), _negated(x), model.importance)
    assert torch.allclose(fast, model.loss(x), rtol=1e-12)


def test_sampler_draws_the_paper_distribution() -> None:
    probability = np.array([1.0, 0.3, 0.05])
    batches = NegatedBatches(probability, 8, 8192, np.random.SeedSequence(3), threaded=False)
    batch = next(iter(batches))
    assert batch.shape == (3, 8192, 9) and (batch[..., -1] == 1).all()
    x = -batch[..., :-1].double()
    present = (x > 0).double().mean(dim=(1, 2)).numpy()
    count = 8192 * 8
    assert np.all(np.abs(present - probability) <= 5 * np.sqrt(probability * (1 - probability) / count) + 1e-4)
    for k in range(3):
        values = x[k][x[k] > 0]
        assert values.max() < 1 and abs(float(values.mean()) - 0.5) < 0.02
        assert abs(float(values.var()) - 1 / 12) < 0.01  # uniform on [0, 1]


def test_threaded_and_inline_sampling_give_the_same_stream() -> None:
    def first(threaded: bool) -> list[torch.Tensor]:
        batches = NegatedBatches(np.array([0.5, 0.2]), 5, 300, np.random.SeedSequence(7), threaded=threaded)
        out = []
        for batch in batches:
            out.append(batch.clone())
            if len(out) == 40:
                break
        batches.close()
        return out

    assert all(torch.equal(a, b) for a, b in zip(first(True), first(False), strict=True))


def test_training_loop_is_adam_on_the_plain_loss() -> None:
    """The hand-written loop equals torch.optim.Adam with autograd on the same batches (float32)."""
    n, m, sparsity, importance = 5, 2, np.array([0.0, 0.8]), np.array([[1.0, 0.9, 0.8, 0.7, 0.6]] * 2)
    result = train_toy(n, m, sparsity=sparsity, importance=importance, steps=20, batch=64, snapshots=5, seed=4)
    assert list(result.snapshot_steps) == [0, 1, 5, 11, 20]
    W = torch.tensor(result.snapshot_W[0]).requires_grad_()
    b = torch.tensor(result.snapshot_b[0]).requires_grad_()
    plain = ToyModel(W, b, torch.tensor(importance, dtype=torch.float32), torch.tensor(1 - sparsity))
    optimiser = torch.optim.Adam([W, b], lr=1e-3)
    stream = NegatedBatches(1 - sparsity, n, 64, np.random.SeedSequence(4).spawn(2)[1], threaded=False)
    for step, negated in enumerate(stream, start=1):
        optimiser.zero_grad()
        plain.loss(-negated[..., :-1]).sum().backward()  # type: ignore[no-untyped-call]
        optimiser.step()
        if step in result.snapshot_steps:
            index = list(result.snapshot_steps).index(step)
            assert np.allclose(W.detach().numpy(), result.snapshot_W[index], atol=2e-6)
            assert np.allclose(b.detach().numpy(), result.snapshot_b[index], atol=2e-6)
        if step == 20:
            break
    assert not np.allclose(result.snapshot_W[0], result.W)  # it moved


def test_a_seed_fixes_the_result_and_another_changes_it() -> None:
    a = train_toy(4, 2, sparsity=0.5, steps=50, batch=32, seed=1)
    b = train_toy(4, 2, sparsity=0.5, steps=50, batch=32, seed=1)
    c = train_toy(4, 2, sparsity=0.5, steps=50, batch=32, seed=2)
    assert np.array_equal(a.W, b.W) and np.array_equal(a.b, b.b)
    assert not np.allclose(a.W, c.W)
    assert a.W.shape == (1, 2, 4) and a.b.shape == (1, 4) and a.W.dtype == np.float32


def test_shapes_per_instance_and_progress() -> None:
    seen: list[tuple[int, int]] = []
    result = train_toy(
        6, 3, sparsity=[0.0, 0.5, 0.9], steps=30, batch=16, snapshots=4, on_snapshot=lambda s, t: seen.append((s, t))
    )
    assert result.W.shape == (3, 3, 6) and result.b.shape == (3, 6) and result.importance.shape == (3, 6)
    assert result.snapshot_W.shape == (len(result.snapshot_steps), 3, 3, 6)
    assert result.snapshot_loss.shape == (len(result.snapshot_steps), 3)
    assert seen == [(int(s), 30) for s in result.snapshot_steps] and result.steps == 30 and not result.stopped


def test_a_set_stop_event_ends_the_run_early() -> None:
    stop = threading.Event()
    stop.set()
    result = train_toy(5, 2, steps=10_000, stop=stop)
    assert result.stopped and result.steps == 0 and result.snapshot_steps[-1] == 0


def test_measurements_match_their_definitions_in_float64() -> None:
    W = np.random.default_rng(0).standard_normal((2, 3, 7))
    W[1, :, 4] = 0.0  # a feature that is not represented
    norms = measure.feature_norms(W)
    sup, dim = measure.superposition(W), measure.feature_dimensionality(W)
    for k in range(2):
        for i in range(7):
            if norms[k, i] == 0:
                assert sup[k, i] == 0 and dim[k, i] == 0
                continue
            unit = W[k, :, i] / np.linalg.norm(W[k, :, i])
            terms = [float(unit @ W[k, :, j]) ** 2 for j in range(7)]
            assert np.isclose(sup[k, i], sum(terms) - terms[i], rtol=1e-12)
            assert np.isclose(dim[k, i], np.linalg.norm(W[k, :, i]) ** 2 / sum(terms), rtol=1e-12)
    assert np.allclose(measure.dimensions_per_feature(W), 3 / (W**2).sum(axis=(1, 2)))


@pytest.mark.parametrize(
    ("vectors", "dimensionality"),
    [
        (np.eye(2), 1.0),  # a dimension each
        (np.array([[1.0, -1.0]]).T.reshape(1, 2), 0.5),  # antipodal pair in one dimension
        (np.stack([np.cos(2 * np.pi * np.arange(5) / 5), np.sin(2 * np.pi * np.arange(5) / 5)]), 0.4),  # pentagon
        (np.stack([np.cos(2 * np.pi * np.arange(3) / 3), np.sin(2 * np.pi * np.arange(3) / 3)]), 2 / 3),  # triangle
    ],
)
def test_sticky_geometries_have_their_fractions(vectors: np.ndarray, dimensionality: float) -> None:
    assert np.allclose(measure.feature_dimensionality(vectors), dimensionality)


def test_angles_of_a_pentagon() -> None:
    theta = np.radians([10, 82, 154, 226, 298])
    W = np.stack([np.cos(theta), np.sin(theta)])
    (found,) = measure.angles(W)
    assert np.allclose(found, [10, 82, 154, 226, 298]) and np.allclose(measure.angle_gaps(found), 72)
    with pytest.raises(ShapeError, match="m = 2"):
        measure.angles(np.ones((3, 4)))


def test_extra_feature_phases_from_weights() -> None:
    W = np.array([[[1.0, 0.1]], [[0.05, 1.0]], [[1.0, -1.0]]])  # [3 models, m=1, n=2]
    assert list(classify_extra(W)) == [0, 1, 2]


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"n": 2.0}, ArgumentTypeError, "n: expected a positive integer, got 2.0"),
        ({"n": True}, ArgumentTypeError, "n: expected a positive integer, got True"),
        ({"n": 0}, ArgumentError, "n: expected a positive integer, got 0"),
        ({"m": -1}, ArgumentError, "m: expected a positive integer, got -1"),
        ({"sparsity": 1.0}, ArgumentError, r"sparsity: expected values in \[0, 1\).*got 1.0"),
        ({"sparsity": -0.1}, ArgumentError, "got -0.1"),
        ({"sparsity": float("nan")}, NonFiniteError, "sparsity: .*1 NaN/Inf"),
        ({"sparsity": [0.1, 0.2], "instances": 3}, ShapeError, "expected 3 values.*got 2"),
        ({"importance": [1.0, 2.0]}, ShapeError, r"importance: expected 5 .*got shape \(2,\)"),
        ({"importance": [1, 1, float("nan"), 1, 1]}, NonFiniteError, "importance"),
        ({"importance": [1, 1, -1, 1, 1]}, ArgumentError, "importance: expected non-negative"),
        ({"lr": float("inf")}, NonFiniteError, "lr"),
        ({"steps": 0}, ArgumentError, "steps: expected a positive integer, got 0"),
    ],
)
def test_bad_input_names_argument_expected_and_received(kwargs: dict[str, object], error: type, words: str) -> None:
    arguments: dict[str, object] = {"n": 5, "m": 2, "steps": 1, **kwargs}
    n, m = arguments.pop("n"), arguments.pop("m")
    with pytest.raises(error, match=words):
        train_toy(n, m, **arguments)  # type: ignore[arg-type]


def test_more_dimensions_than_features_is_accepted_and_stated() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train_toy(2, 3, steps=2)
    assert result.W.shape == (1, 3, 2)
    assert [w.category for w in caught] == [MoreDimensionsThanFeaturesWarning]
    assert "m=3 > n=2" in str(caught[0].message) and caught[0].filename == __file__


@pytest.mark.parametrize("sets", ["correlated", "anticorrelated"])
def test_feature_sets_keep_each_probability_and_tie_presence_within_a_set(sets: str) -> None:
    batches = NegatedBatches(np.array([0.25, 0.1]), 6, 20_000, np.random.SeedSequence(1), threaded=False, sets=sets)
    x = -next(iter(batches))[..., :-1].double()
    present = (x > 0).double()
    rate = present.mean(dim=1).numpy()
    assert np.allclose(rate, [[0.25] * 6, [0.1] * 6], atol=0.012)
    both = (present[..., 0] * present[..., 1]).mean(dim=1).numpy()  # features 0 and 1 share a set
    across = (present[..., 1] * present[..., 2]).mean(dim=1).numpy()  # 1 and 2 do not: independent
    assert np.allclose(both, [0.25, 0.1] if sets == "correlated" else [0, 0], atol=0.012)
    assert np.allclose(across, [0.25**2, 0.1**2], atol=0.006)
    assert abs(float(x[x > 0].mean()) - 0.5) < 0.01


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"feature_sets": "paired"}, "feature_sets: expected one of independent, correlated, anticorrelated"),
        ({"feature_sets": "correlated", "set_size": 3}, "set_size: expected at least 2 and a divisor of n = 4, got 3"),
        ({"feature_sets": "anticorrelated", "sparsity": 0.2}, r"need 1 − S ≤ 1/2 .*got 1 − S = 0.8"),
    ],
)
def test_bad_feature_sets_are_refused(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ArgumentError, match=words):
        train_toy(4, 2, steps=1, **kwargs)  # type: ignore[arg-type]
