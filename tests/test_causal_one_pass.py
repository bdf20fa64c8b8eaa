"""A patching sweep as one pass of the clean rows, the corrupted rows and every variant (causal/one_pass.py): equal
to the slow definition on every family (float64), the same as the staircase path, chosen from the cost model once per
shape (kept on disk), and never taken where it cannot be exact."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from families import CASES
from test_causal_suffix import _check_every_cell, _family_pair

from circuitwidgets import causal
from circuitwidgets.causal import calibration, engine, one_pass, passes
from circuitwidgets.causal.metrics import as_metric
from circuitwidgets.causal.sites import check_site
from circuitwidgets.errors import NonFiniteError
from circuitwidgets.model import CircuitModel


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Which path each eligible sweep took, as it runs: ``"one"`` (the one pass) or ``"pass"`` (a staircase pass)."""
    seen: list[str] = []
    real_run, real_pass = one_pass.run, engine.evaluate_pass

    def run(*args: Any) -> Any:
        seen.append("one")
        return real_run(*args)

    def evaluate(*args: Any) -> Any:
        seen.append("pass")
        return real_pass(*args)

    monkeypatch.setattr(one_pass, "run", run)
    monkeypatch.setattr(engine, "evaluate_pass", evaluate)
    return seen


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_one_pass_equals_the_definition_on_every_family(case: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sites before and after attention, in the narrowed last layer (a metric reading two rows, neither the last),
    split by position and by head; per-layer inputs (Gemma 4) take the staircase path."""
    model, clean, corrupted, metric = _family_pair(case, seed=8, n_pos=7)
    monkeypatch.setattr(one_pass, "PINNED", True)
    seen = _runs(monkeypatch)
    two = causal.log_prob(clean[:, [3, 5]], pos=[2, 4])
    sites = [
        ("q", ("layer", "head"), metric),
        ("pattern", ("layer", "head", "pos"), two),
        ("z", ("layer", "pos"), two),
        ("resid_pre", ("layer", "pos"), metric),
        ("k", ("layer", "pos", "head"), two),
    ]
    if model.cfg.has_mlp:
        sites.append(("mlp_post", ("layer", "pos"), metric))
    for site, by, m in sites:
        seen.clear()
        _check_every_cell(model, site, by, clean, corrupted, m, every=3)
        expected = "pass" if model.cfg.d_per_layer is not None else "one"
        assert seen and set(seen) == {expected}, (site, seen)


def test_the_one_pass_gives_the_staircase_values_and_the_runs_metric_values(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    clean, corrupted = prompts

    def mean_log_prob(logits: torch.Tensor) -> torch.Tensor:  # a Python function: every logit computed
        return logits.log_softmax(-1)[:, 4:, 7].mean()

    for metric in (causal.normalised(causal.logit_diff(5, 7)), mean_log_prob):
        results = {}
        for pinned in (True, False):
            monkeypatch.setattr(one_pass, "PINNED", pinned)
            results[pinned] = causal.patch(gelu, clean, corrupted, metric, site="resid_mid", by=("layer", "pos"))
        one, stair = results[True], results[False]
        np.testing.assert_allclose(one.values, stair.values, rtol=0, atol=1e-12)
        assert one.clean_value == pytest.approx(stair.clean_value, abs=1e-12)
        assert one.corrupted_value == pytest.approx(stair.corrupted_value, abs=1e-12)


def test_the_path_is_chosen_from_the_model_once_per_shape_and_kept_on_disk(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """No path timed on the first call (one run of the chosen path); a fresh process (memory cleared) reads the
    choice from the calibration file and runs the same path with no base runs spent on choosing."""
    clean, corrupted = prompts
    monkeypatch.setenv("CIRCUITWIDGETS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(one_pass, "_CHOICES", {})
    monkeypatch.setattr(passes, "_CURVES", {})
    seen = _runs(monkeypatch)
    first = causal.patch(gelu, clean, corrupted, causal.logit_diff(5, 7), site="v", by=("layer", "head"))
    (choice,) = one_pass._CHOICES.values()
    assert seen == (["one"] if choice else ["pass"] * len(seen)) and seen
    assert len(list((tmp_path / "calibration").glob("*.json"))) == 1
    monkeypatch.setattr(one_pass, "_CHOICES", {})
    monkeypatch.setattr(calibration, "_MEMORY", {})
    pairs: list[int] = []
    real_pair = one_pass.run_pair
    monkeypatch.setattr(one_pass, "run_pair", lambda *a, **k: pairs.append(1) or real_pair(*a, **k))
    seen.clear()
    again = causal.patch(gelu, clean, corrupted, causal.logit_diff(5, 7), site="v", by=("layer", "head"))
    assert seen == (["one"] if choice else ["pass"] * len(seen)) and seen
    assert one_pass._CHOICES == {next(iter(one_pass._CHOICES)): choice} and not pairs
    assert np.array_equal(first.values, again.values)


@pytest.mark.parametrize(("one", "stair", "taken"), [(1.0, 2.0, "one"), (1.9, 2.0, "pass"), (3.0, 2.0, "pass")])
def test_the_modelled_path_and_its_margin_are_taken(
    gelu: CircuitModel,
    prompts: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
    one: float,
    stair: float,
    taken: str,
) -> None:
    clean, corrupted = prompts
    monkeypatch.setattr(one_pass, "_CHOICES", {})
    monkeypatch.setattr(one_pass, "one_pass_seconds", lambda *a: one)
    monkeypatch.setattr(one_pass, "staircase_seconds", lambda *a: stair)
    seen = _runs(monkeypatch)
    first = causal.patch(gelu, clean, corrupted, causal.logit_diff(5, 7), site="q", by=("layer", "head"))
    assert set(seen) == {taken}  # nothing timed: the first call ran the modelled path only
    assert list(one_pass._CHOICES.values()) == [taken == "one"]
    seen.clear()
    again = causal.patch(gelu, clean, corrupted, causal.logit_diff(5, 7), site="q", by=("layer", "head"))
    assert set(seen) == {taken} and np.array_equal(first.values, again.values)


def test_the_one_pass_is_never_taken_where_it_cannot_be_exact(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor]
) -> None:
    clean, _ = prompts
    cells = check_site(gelu, "z", ("layer", "head"), clean.shape[1])
    assert one_pass.eligible(gelu, cells, cells.count + 2, False, None)
    assert not one_pass.eligible(gelu, cells, cells.count + 1, False, None)  # every variant and both runs at once
    assert not one_pass.eligible(gelu, cells, 10**6, True, None)  # frozen norms replay the base run's scales
    assert not one_pass.eligible(gelu, cells, 10**6, False, {0: [(1,)]})  # top=: a few chosen cells


def test_the_one_pass_refuses_non_finite_metrics(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor]
) -> None:
    clean, corrupted = prompts
    cells = check_site(gelu, "z", ("layer", "head"), clean.shape[1])
    runs = {"n": 0}

    def blows_up_when_patched(logits: torch.Tensor) -> torch.Tensor:
        runs["n"] += 1
        return logits[0, -1, 0] * (float("inf") if runs["n"] > 2 else 1.0)

    with pytest.raises(NonFiniteError, match="blows_up_when_patched returned -inf"):  # as the staircase path does
        one_pass.run(gelu, clean, corrupted, cells, as_metric(blows_up_when_patched, gelu.cfg.d_vocab))
    with pytest.raises(NonFiniteError, match="expected a finite number"):
        one_pass.run(gelu, clean, corrupted, cells, as_metric(lambda lg: lg.sum() * float("nan"), gelu.cfg.d_vocab))
