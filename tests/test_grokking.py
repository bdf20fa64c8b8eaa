"""Grokking modular addition: the fast forward and every progress measure against its slow definition (float64),
the training loop's history, checkpoints and resumption, and the typed errors for bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.training.grokking import GrokConfig, load_checkpoint, train
from circuitwidgets.training.grokking.measures import (
    excluded_loss,
    fourier_norms,
    grid_logits,
    key_frequencies,
    neuron_activations,
    neuron_frequency_map,
    restricted_loss,
    sum_squared_weights,
)
from circuitwidgets.training.grokking.model import forward, forward_full, init_weights, pairs, split
from circuitwidgets.training.grokking.progress import progress_measures

SMALL = {"d_model": 16, "n_heads": 2, "d_head": 8, "d_mlp": 24}


def _weights(p: int, seed: int = 0) -> dict[str, torch.Tensor]:
    cfg = GrokConfig(p=p, seed=seed, **SMALL)
    w = {k: v.double() for k, v in init_weights(cfg).items()}
    g = torch.Generator().manual_seed(seed + 7)
    w["b_in"] = torch.randn(w["b_in"].shape, generator=g, dtype=torch.float64) * 0.3
    w["b_out"] = torch.randn(w["b_out"].shape, generator=g, dtype=torch.float64) * 0.3
    return w


def _fourier_basis(p: int) -> tuple[torch.Tensor, list[int]]:
    """Unit basis over p values as rows, and each row's frequency (0: the constant)."""
    x = torch.arange(p, dtype=torch.float64)
    rows, freqs = [torch.full((p,), 1 / math.sqrt(p), dtype=torch.float64)], [0]
    for k in range(1, p // 2 + 1):
        c = torch.cos(2 * math.pi * k * x / p)
        rows.append(c / c.norm())
        freqs.append(k)
        if 2 * k != p:
            s = torch.sin(2 * math.pi * k * x / p)
            rows.append(s / s.norm())
            freqs.append(k)
    return torch.stack(rows), freqs


@pytest.mark.parametrize("p", [7, 10, 13])
def test_fast_forward_equals_the_three_position_transformer(p: int) -> None:
    w = _weights(p)
    a, b = pairs(p)
    assert torch.allclose(forward(w, a, b), forward_full(w, a, b)[:, -1], atol=1e-12)


@pytest.mark.parametrize("p", [11, 12])
def test_fourier_norms_against_the_explicit_basis(p: int) -> None:
    w = _weights(p, seed=3)
    basis, freqs = _fourier_basis(p)
    assert torch.allclose(basis @ basis.T, torch.eye(p, dtype=torch.float64), atol=1e-12)
    coords = basis @ w["W_E"][:p]  # [p, d]
    slow = torch.zeros(p // 2 + 1, dtype=torch.float64)
    for row, k in enumerate(freqs):
        slow[k] += coords[row].square().sum()
    assert torch.allclose(fourier_norms(w), slow.sqrt(), atol=1e-12)
    # Parseval: nothing is lost or counted twice.
    assert torch.isclose(fourier_norms(w).square().sum(), w["W_E"][:p].square().sum())


def test_key_frequencies_are_the_ones_the_embedding_is_built_from() -> None:
    p, d = 31, 16
    a = torch.arange(p, dtype=torch.float64)[:, None]
    g = torch.Generator().manual_seed(0)
    mix = torch.randn(6, d, generator=g, dtype=torch.float64)
    waves = [torch.cos(2 * math.pi * k * a / p) for k in (4, 9, 14)] + [
        torch.sin(2 * math.pi * k * a / p) for k in (4, 9, 14)
    ]
    w = _weights(p)
    w["W_E"] = torch.cat(
        [torch.cat(waves, dim=1) @ mix + 0.01 * torch.randn(p, d, generator=g, dtype=torch.float64), w["W_E"][p:]]
    )
    assert key_frequencies(fourier_norms(w)) == [4, 9, 14]
    with pytest.raises(ArgumentError, match="norms"):
        key_frequencies(torch.ones(1))


def _projection(logits: torch.Tensor, vectors: list[torch.Tensor]) -> torch.Tensor:
    """Least-squares projection of each answer's logits (over the p² pairs) onto the span of ``vectors``."""
    p = logits.shape[0]
    basis = torch.stack([v.reshape(-1) for v in vectors], dim=1)  # [p², n]
    coef = torch.linalg.lstsq(basis, logits.reshape(p * p, p)).solution
    return (basis @ coef).reshape(p, p, p)


@pytest.mark.parametrize("p", [11, 13])
def test_restricted_and_excluded_loss_against_least_squares(p: int) -> None:
    w = _weights(p, seed=1)
    keys = [2, 5]
    logits = grid_logits(w)
    s = (torch.arange(p)[:, None] + torch.arange(p)[None, :]).double()
    waves = [f(2 * math.pi * k * s / p) for k in keys for f in (torch.cos, torch.sin)]
    restricted = _projection(logits, [torch.ones(p, p, dtype=torch.float64), *waves])
    excluded = logits - _projection(logits, waves)
    cfg = GrokConfig(p=p, **SMALL)
    train_idx, _ = split(cfg)
    a, b = pairs(p)
    answers = ((a + b) % p)[train_idx]

    def loss(lg: torch.Tensor) -> float:
        return float(torch.nn.functional.cross_entropy(lg.reshape(p * p, p)[train_idx], answers))

    assert restricted_loss(w, keys, train_idx) == pytest.approx(loss(restricted), abs=1e-10)
    assert excluded_loss(w, keys, train_idx) == pytest.approx(loss(excluded), abs=1e-10)
    assert restricted_loss(w, keys, train_idx) != pytest.approx(loss(logits), abs=1e-3)
    with pytest.raises(ArgumentError, match="keys"):
        restricted_loss(w, [0], train_idx)


@pytest.mark.parametrize("p", [7, 10])
def test_neuron_frequency_map_against_the_2d_basis(p: int) -> None:
    w = _weights(p, seed=2)
    acts = neuron_activations(w)
    basis, freqs = _fourier_basis(p)
    coef = torch.einsum("ia,abm,jb->ijm", basis, acts, basis).square()  # [p, p, m]
    total = coef.sum(dim=(0, 1)) - coef[0, 0]
    slow = torch.zeros(acts.shape[-1], p // 2 + 1, dtype=torch.float64)
    for k in range(1, p // 2 + 1):
        rows = [i for i, f in enumerate(freqs) if f in (0, k)]
        slow[:, k] = coef[rows][:, rows].sum(dim=(0, 1)) - coef[0, 0]
    live = total > 1e-20
    assert 0 < int(live.sum()) < live.numel()  # some neurons are dead (constant) on this grid: their row is 0
    fast = neuron_frequency_map(w)
    assert torch.allclose(fast[live], slow[live] / total[live, None], atol=1e-10)
    assert torch.all(fast[~live] == 0)
    assert torch.all(fast[live].sum(dim=1) <= 1 + 1e-9)  # the groups are disjoint (mixed-frequency terms in none)


def test_sum_squared_weights() -> None:
    w = _weights(7)
    assert sum_squared_weights(w) == pytest.approx(sum(float((t**2).sum()) for t in w.values()), rel=1e-12)


def test_train_records_every_measured_step_and_learns(tmp_path: Path) -> None:
    h = train(13, 0.5, steps=60, eval_every=5, checkpoint_every=20, seed=3, **SMALL)
    assert h.steps.tolist() == list(range(0, 61, 5))
    for curve in (h.train_loss, h.test_loss, h.train_accuracy, h.test_accuracy):
        assert curve.shape == h.steps.shape and np.isfinite(curve).all()
    assert sorted(h.checkpoints) == [0, 20, 40, 60]
    assert h.train_loss[-1] < h.train_loss[0]
    # The history's losses are those of the checkpoints' weights.
    cfg = h.config
    _, test_idx = split(cfg)
    a, b = pairs(13)
    logits = forward(h.checkpoints[40], a[test_idx], b[test_idx])
    test_loss = torch.nn.functional.cross_entropy(logits.double(), ((a + b) % 13)[test_idx])
    assert float(test_loss) == pytest.approx(h.test_loss[h.steps.tolist().index(40)], rel=1e-6)
    m = progress_measures(h)
    assert m.steps.tolist() == [0, 20, 40, 60]
    assert m.fourier_norms.shape == (4, 7) and m.neuron_frequency.shape == (4, 24, 7)
    assert m.sum_squared_weights[0] == pytest.approx(sum_squared_weights(h.checkpoints[0]))
    # One pass over the grid per checkpoint gives what the measures compute on their own.
    train_idx = split(cfg)[0]
    w40 = h.checkpoints[40]
    assert m.restricted_loss[2] == pytest.approx(restricted_loss(w40, m.key_frequencies, train_idx), rel=1e-9)
    assert m.excluded_loss[2] == pytest.approx(excluded_loss(w40, m.key_frequencies, train_idx), rel=1e-9)
    assert np.allclose(m.neuron_frequency[2], neuron_frequency_map(w40).float().numpy(), atol=1e-6)


def test_a_resumed_run_equals_an_unbroken_one(tmp_path: Path) -> None:
    kwargs = {"steps": 40, "eval_every": 4, "checkpoint_every": 10, "seed": 5, **SMALL}
    unbroken = train(11, 0.4, **kwargs)  # type: ignore[arg-type]
    train(11, 0.4, out_dir=tmp_path, **{**kwargs, "steps": 20})  # type: ignore[arg-type]
    resumed = train(11, 0.4, out_dir=tmp_path, **kwargs)  # type: ignore[arg-type]
    assert resumed.steps.tolist() == unbroken.steps.tolist()
    assert np.allclose(resumed.test_loss, unbroken.test_loss, rtol=1e-6)
    for name, t in unbroken.checkpoints[40].items():
        assert torch.allclose(resumed.checkpoints[40][name], t, atol=1e-6), name
    cfg, step, _ = load_checkpoint(tmp_path / "checkpoints" / "step_000040.safetensors")
    assert step == 40 and cfg == unbroken.config
    with pytest.raises(ArgumentError, match=r"out_dir.*another configuration"):
        train(11, 0.5, out_dir=tmp_path, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"p": 2}, ArgumentError, r"p: expected an int >= 3, got 2"),
        ({"p": 7.0}, ArgumentTypeError, r"p: expected an int >= 3, got float"),
        ({"p": "7"}, ArgumentTypeError, r"p: expected an int"),
        ({"fraction": 0.0}, ArgumentError, r"fraction: expected a number in \(0.0, 1.0\), got 0.0"),
        ({"fraction": 1.0}, ArgumentError, r"fraction"),
        ({"fraction": float("nan")}, ArgumentError, r"fraction"),
        ({"weight_decay": -0.1}, ArgumentError, r"weight_decay: expected a number >= 0.0, got -0.1"),
        ({"steps": 0}, ArgumentError, r"steps"),
        ({"betas": 0.9}, ArgumentTypeError, r"betas"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(kwargs: dict[str, object], error: type, match: str) -> None:
    args = {"p": 7, "fraction": 0.5, "steps": 1, **SMALL, **kwargs}
    with pytest.raises(error, match=match):
        train(**args)  # type: ignore[arg-type]


def test_a_checkpoint_of_another_task_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "model.safetensors"
    save_file({"W_E": torch.zeros(3, 2)}, str(other), metadata={"task": "language_model"})
    with pytest.raises(ArgumentError, match="checkpoint: expected a checkpoint of task 'modular_addition'"):
        load_checkpoint(other)
    plain = tmp_path / "plain.safetensors"
    save_file({"W_E": torch.zeros(3, 2)}, str(plain))
    with pytest.raises(ArgumentError, match="got one of task None"):
        load_checkpoint(plain)
    (tmp_path / "junk.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(ArgumentError, match="checkpoint: expected a safetensors file"):
        load_checkpoint(tmp_path / "junk.safetensors")
    with pytest.raises(ArgumentError, match="no such file"):
        load_checkpoint(tmp_path / "absent.safetensors")
