"""Sweeps by position recompute only the positions from each pass's earliest patched one, reading earlier keys and
values from the base run: equal to the slow definition (one hooked whole run per cell, float64) on every family
(rotary offsets, sliding windows, shared keys and values, per-layer inputs, soft-caps, QK-norm, output norms)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from families import CASES, VOCAB
from test_causal import _slow_patch

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.causal import engine, one_pass, planning, staircase
from circuitwidgets.causal.passes import Curve
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources.huggingface import from_hf


def _offsets(monkeypatch: pytest.MonkeyPatch, layers: list[int] | None = None) -> list[int]:
    """The offsets of the sweep's passes (and in ``layers`` how many layers each pass joins), as they run; the
    sweeps take the staircase path (not one pass of everything, :mod:`circuitwidgets.causal.one_pass`)."""
    monkeypatch.setattr(one_pass, "PINNED", False)
    seen: list[int] = []
    real = staircase.evaluate_pass

    def spy(*args: Any) -> torch.Tensor:
        seen.append(args[6] if len(args) > 6 else 0)
        if layers is not None:
            layers.append(len(args[4]))
        return real(*args)

    monkeypatch.setattr(engine, "evaluate_pass", spy)
    return seen


def _least_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan passes as if time were proportional to rows (no per-pass overhead): the passes of least work, so every
    position starts its own pass, and the layers of a pass join it as a staircase."""
    monkeypatch.setattr(planning, "cost_curve", lambda *args: Curve((1,), (1e-6,), 0.0))


def _family_pair(case: Any, seed: int, n_pos: int) -> tuple[CircuitModel, torch.Tensor, torch.Tensor, Any]:
    """A family's tiny model in float64, two random prompts and their corruption, and a logit difference at the end."""
    model = from_hf(case.build(), dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(3, VOCAB, (2, n_pos), generator=gen)
    corrupted = torch.randint(3, VOCAB, (2, n_pos), generator=gen)
    return model, clean, corrupted, causal.logit_diff(clean[:, -1].tolist(), 4)


def _check_every_cell(model: CircuitModel, site: str, by: tuple[str, ...], clean: torch.Tensor, corrupted: torch.Tensor,
                      metric: Any, every: int = 1, **kwargs: Any) -> None:  # fmt: skip
    result = causal.patch(model, clean, corrupted, metric, site=site, by=by, **kwargs)
    values = np.asarray(result.values)
    for index in list(np.ndindex(values.shape))[::every]:
        cell = dict(zip(by, index, strict=True))
        expected = _slow_patch(model, clean, corrupted, metric, site, cell)
        assert values[index] == pytest.approx(expected, abs=1e-9), (site, cell)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_suffix_only_passes_equal_the_definition_on_every_family(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model, clean, corrupted, metric = _family_pair(case, seed=4, n_pos=7)
    joined: list[int] = []
    offsets = _offsets(monkeypatch, joined)
    _least_work(monkeypatch)
    _check_every_cell(model, "resid_pre", ("layer", "pos"), clean, corrupted, metric, memory_budget=2**24)
    assert max(offsets) > 0  # the passes did skip positions
    assert max(joined) == model.cfg.n_layers  # a pass carried every layer's variants (a staircase)
    _check_every_cell(model, "mlp_out", ("layer", "pos"), clean, corrupted, metric, every=3)
    monkeypatch.undo()  # passes planned by their measured cost
    _check_every_cell(model, "resid_mid", ("layer", "pos"), clean, corrupted, metric, every=3)
    if case.id.startswith(("llama", "gemma4", "mistral")):  # a head site split by position, and frozen norms
        _check_every_cell(model, "k", ("layer", "pos", "head"), clean, corrupted, metric, every=5)
        frozen = causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "pos"), freeze_norms=True)
        whole = causal.patch(
            model, clean, corrupted, lambda logits: metric(logits), site="z", by=("layer", "pos"), freeze_norms=True
        )  # an undeclared metric: whole passes
        np.testing.assert_allclose(frozen.values, whole.values, atol=1e-9, rtol=0)


def test_pattern_by_destination_and_metric_positions_bound_the_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    model = cw.load_pretrained("gelu-2l").to(torch.float64)
    gen = torch.Generator().manual_seed(5)
    clean = torch.randint(1, 2048, (2, 8), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 2] = torch.randint(1, 2048, (2,), generator=gen)
    offsets = _offsets(monkeypatch)
    _least_work(monkeypatch)  # (a plan by measured cost may rightly run one whole pass on a model this small)
    _check_every_cell(model, "pattern", ("layer", "pos"), clean, corrupted, causal.logit_diff(clean[:, -1].tolist(), 4))
    assert max(offsets) > 0
    offsets.clear()
    early = causal.log_prob(clean[:, 4], pos=3)  # reads position 3: no pass may start after it
    _check_every_cell(model, "resid_pre", ("layer", "pos"), clean, corrupted, early)
    assert max(offsets) <= 3


@pytest.mark.parametrize("case_id", ["llama-gqa2-biases-llama3rope", "gemma4-e2b-shaped"])
def test_staircase_passes_with_frozen_norms_equal_one_layer_whole_passes(
    case_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, clean, corrupted, metric = _family_pair(next(c for c in CASES if c.id == case_id), seed=6, n_pos=6)
    joined: list[int] = []
    offsets = _offsets(monkeypatch, joined)
    _least_work(monkeypatch)
    stair = causal.patch(model, clean, corrupted, metric, site="resid_mid", by=("layer", "pos"), freeze_norms=True)
    assert max(joined) == model.cfg.n_layers and max(offsets) > 0  # staircases, skipping positions
    joined.clear()
    monkeypatch.setattr(planning, "RESUMABLE", frozenset({"resid_mid"}))  # one layer per pass
    single = causal.patch(
        model, clean, corrupted, lambda logits: metric(logits), site="resid_mid", by=("layer", "pos"), freeze_norms=True
    )  # an undeclared metric: whole passes
    assert max(joined) == 1
    np.testing.assert_allclose(stair.values, single.values, atol=1e-9, rtol=0)


def test_staircase_joins_beside_shared_keys_and_values(monkeypatch: pytest.MonkeyPatch) -> None:
    # Gemma 4 with 6 layers whose last two reuse layers 2 and 3's keys and values: restart layers 0, 1, 2, 2, 2, 2, so
    # a staircase pass has variants joining at layers 1 and 2 while layers 4 and 5 read keys from layers 2 and 3
    e2b = next(c for c in CASES if c.id == "gemma4-e2b-shaped")
    six = dict(e2b.kwargs, num_hidden_layers=6, layer_types=["sliding_attention", "full_attention"] * 3)
    model = from_hf(type(e2b)("gemma4-6", e2b.config, e2b.model, six).build(), dtype=torch.float64)
    assert model.cfg.kv_sources == (0, 1, 2, 3, 2, 3)
    assert [model.restart_layer(layer) for layer in range(6)] == [0, 1, 2, 2, 2, 2]
    gen = torch.Generator().manual_seed(7)
    clean = torch.randint(3, VOCAB, (2, 6), generator=gen)
    corrupted = torch.randint(3, VOCAB, (2, 6), generator=gen)
    metric = causal.logit_diff(clean[:, -1].tolist(), 4)
    joined: list[int] = []
    offsets = _offsets(monkeypatch, joined)
    _least_work(monkeypatch)
    _check_every_cell(model, "resid_pre", ("layer", "pos"), clean, corrupted, metric)
    assert max(joined) == 6 and max(offsets) > 0
    _check_every_cell(model, "v", ("layer", "pos"), clean, corrupted, metric, every=2)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hooked_last_layer_narrows_to_the_read_rows_equal_to_the_definition(
    case: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass patching inside the last layer computes that layer's queries and what follows them at the metric's
    positions only (the mixers take those rows): every site after the keys and values, on every family."""
    model, clean, corrupted, metric = _family_pair(case, seed=6, n_pos=7)
    last = model.cfg.n_layers - 1
    narrowed: list[bool] = []
    real, real_pass = type(model)._layer, staircase.evaluate_pass
    in_pass = [False]

    def spy(self: Any, layer: int, *args: Any) -> torch.Tensor:
        record, queries = args[-2:]
        if in_pass[0] and layer == last and any(at == last for _, at in record.hooks):  # a pass patching there
            narrowed.append(queries is not None)
        return real(self, layer, *args)

    def spy_pass(*args: Any) -> torch.Tensor:
        in_pass[0] = True
        try:
            return real_pass(*args)
        finally:
            in_pass[0] = False

    monkeypatch.setattr(type(model), "_layer", spy)
    monkeypatch.setattr(engine, "evaluate_pass", spy_pass)
    monkeypatch.setattr(one_pass, "PINNED", False)  # (the one pass narrows too: tests/test_causal_one_pass.py)
    two = causal.log_prob(clean[:, [3, 5]], pos=[2, 4])  # two rows, neither at the end
    sites = [("q", ("layer", "head"), metric), ("pattern", ("layer", "head", "pos"), two), ("z", ("layer", "pos"), two)]
    if model.cfg.has_mlp:
        sites.append(("mlp_post", ("layer", "pos"), metric))
    for site, by, m in sites:
        narrowed.clear()
        _check_every_cell(model, site, by, clean, corrupted, m, every=2)
        assert narrowed and all(narrowed), site
