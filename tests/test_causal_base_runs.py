"""The runs every sweep starts from (:mod:`circuitwidgets.causal.base_runs`): what each keeps, and the source and
base runs as one pass of twice the batch, equal to the two runs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from circuitwidgets import causal
from circuitwidgets.model import CircuitModel


def test_the_base_run_keeps_norm_scales_only_for_a_sweep_that_freezes_them(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor]
) -> None:
    from circuitwidgets.causal.base_runs import run_base
    from circuitwidgets.causal.metrics import as_metric

    clean, _ = prompts
    metric = as_metric(causal.logit_diff(5, 7), gelu.cfg.d_vocab)
    plain = run_base(gelu, clean, metric, ["resid_pre"])
    frozen = run_base(gelu, clean, metric, ["resid_pre"], scales=True)
    assert ("scale", 0) not in plain.cache and ("scale", 0) in frozen.cache and ("scale_mlp", 1) in frozen.cache
    assert plain.value == pytest.approx(frozen.value, abs=1e-12)  # the fused LayerNorm: the same numbers
    torch.testing.assert_close(plain.cache["resid_pre", 1], frozen.cache["resid_pre", 1], atol=1e-12, rtol=0)


def test_the_source_and_base_runs_as_one_pass_are_the_two_runs(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    from circuitwidgets.causal import one_pass
    from circuitwidgets.causal.base_runs import run_base, run_pair
    from circuitwidgets.causal.metrics import as_metric

    clean, corrupted = prompts
    metric = as_metric(causal.logit_diff(5, 7), gelu.cfg.d_vocab)
    source, base = run_pair(gelu, clean, corrupted, metric, ["z"], ["resid_pre", "z"], scales=True)
    alone = (run_base(gelu, clean, metric, ["z"]), run_base(gelu, corrupted, metric, ["resid_pre", "z"], scales=True))
    for joint, single in zip((source, base), alone, strict=True):
        assert sorted(joint.cache.keys()) == sorted(single.cache.keys())  # each keeps its own names only
        assert joint.value == pytest.approx(single.value, abs=1e-12)
        for key in single.cache:
            assert joint.cache[key].shape == single.cache[key].shape
            torch.testing.assert_close(joint.cache[key], single.cache[key], rtol=0, atol=1e-12)
    assert ("scale", 0) in base.cache and ("scale", 0) not in source.cache
    assert base.cache["resid_pre", 0].untyped_storage().nbytes() == base.cache["resid_pre", 0].nbytes  # a copy
    joints: list[bool] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        joints.append(kwargs["joint"])
        return run_pair(*args, **kwargs)

    monkeypatch.setattr(one_pass, "run_pair", spy)
    monkeypatch.setattr(one_pass, "PINNED", False)  # the staircase path, which makes base runs
    # a budget with room for one variant only runs them apart, with the same sweep
    one = causal.patch(gelu, clean, corrupted, causal.logit_diff(5, 7), site="z", by=("layer", "head"))
    assert joints == [True]
    budget = _one_variant_budget(gelu, corrupted, "z", ("layer", "head"), causal.logit_diff(5, 7))
    tight = causal.patch(gelu, clean, corrupted, causal.logit_diff(5, 7), "z", ("layer", "head"), memory_budget=budget)
    assert joints == [True, False]
    np.testing.assert_allclose(tight.values, one.values, rtol=0, atol=1e-12)


def _one_variant_budget(model: CircuitModel, tokens: torch.Tensor, site: str, by: tuple[str, ...], metric: Any) -> int:
    """The memory budget that leaves a sweep room for exactly one variant per pass."""
    from circuitwidgets.causal.budget import sweep_need
    from circuitwidgets.causal.engine import base_names
    from circuitwidgets.causal.metrics import as_metric
    from circuitwidgets.causal.sites import check_site

    m = as_metric(metric, model.cfg.d_vocab)
    cells = check_site(model, site, by, tokens.shape[1])
    read = m.positions_at(tokens.shape[1])
    n_read = None if read is None else len(read)
    n_columns = None if m.columns is None else len(m.columns)
    names = [[site], base_names(cells, m)]
    need = sweep_need(model, site, *tokens.shape, names, n_read, n_columns, cells.count)
    return need.fixed + need.per_variant
