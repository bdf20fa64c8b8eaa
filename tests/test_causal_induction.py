"""``causal.induction``: the stated prompt set and the induction test, checked on small random float64 models
against their definitions (each part on its own, by the library's single-purpose functions and by hand)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from circuitwidgets import causal
from circuitwidgets.causal.induction import induction_prompts, induction_test
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel


def test_the_prompts_are_the_stated_draws_with_their_corruptions(random_model: Callable[..., CircuitModel]) -> None:
    model = random_model(n_layers=2, d_vocab=50, n_ctx=32)
    p = induction_prompts(model, half=6, n_prompts=3, seed=4)
    gen = torch.Generator().manual_seed(4)
    draws = torch.randint(0, 50, (6, 6), generator=gen)  # (no BOS on this model: every id may be drawn)
    first, other = draws[:3], draws[3:]
    assert torch.equal(p.clean, torch.cat([first, first[:, :5]], dim=1))
    assert torch.equal(p.corrupt_a, torch.cat([other, first[:, :5]], dim=1))
    assert torch.equal(p.answer, first[:, 5]) and torch.equal(p.control, other[:, 5])
    changed = (p.clean != p.corrupt_b).nonzero()[:, 1].tolist()
    assert set(changed) <= {4} and torch.equal(p.corrupt_b[:, 4], other[:, 0])
    with pytest.raises(ArgumentError, match="half: expected an int >= 3"):
        induction_prompts(model, half=2)


def test_every_part_reads_one_metric_and_the_spread_decomposes_the_mean(
    random_model: Callable[..., CircuitModel],
) -> None:
    model = random_model(n_layers=2, n_heads=3, d_vocab=50, n_ctx=32, seed=1)
    p = induction_prompts(model, half=6, n_prompts=4, seed=2)
    t = induction_test(model, p)
    # head patching: the library's patch on the batch, normalised by its own clean and corrupted runs
    expected = causal.patch(model, p.clean, p.corrupt_a, causal.normalised(p.metric), site="z", by=("layer", "head"))
    np.testing.assert_allclose(t.heads_a.values, expected.values, atol=1e-10)
    # the spread: each prompt's value on the batch's scale; the prompts' values average exactly to the sweep's
    raw = causal.patch(model, p.clean, p.corrupt_a, p.metric, site="z", by=("layer", "head"))
    assert raw.clean_value is not None and raw.corrupted_value is not None
    each = []
    for i in range(4):
        one = causal.patch(
            model, p.clean[i : i + 1], p.corrupt_a[i : i + 1], causal.logit_diff(int(p.answer[i]), int(p.control[i])),
            site="z", by=("layer", "head"),
        )  # fmt: skip
        each.append((one.values - raw.corrupted_value) / (raw.clean_value - raw.corrupted_value))
    np.testing.assert_allclose(np.mean(each, axis=0), t.heads_a.values, atol=1e-10)
    np.testing.assert_allclose(np.std(each, axis=0), t.heads_a_sd, atol=1e-10)
    # the model's logit difference, by hand
    with torch.no_grad():
        logits = model(p.clean)[:, -1]
    rows = torch.arange(4)
    by_hand = (logits[rows, p.answer] - logits[rows, p.control]).numpy()
    np.testing.assert_allclose(t.clean, by_hand, atol=1e-10)
    assert t.heads_a.clean_value == pytest.approx(float(by_hand.mean()), abs=1e-10)
    # the attribution's parts sum to it, prompt by prompt; the lens's last row reads it
    parts = t.attribution.values.sum(axis=(1, 2)) + sum(np.asarray(v) for v in t.attribution.extra["rest"].values())
    np.testing.assert_allclose(parts, by_hand, atol=1e-9)
    np.testing.assert_allclose(t.lens[-1], by_hand, atol=1e-9)
    # the first copy's components are read where the next token is the answer too
    assert int(t.components_first.extra["pos"]) == p.clean.shape[1] - 1 - p.half
    assert torch.equal(p.clean[:, p.clean.shape[1] - p.half], p.answer)
    assert t.previous is not None and t.paths_k is not None and t.heads_b is not None
