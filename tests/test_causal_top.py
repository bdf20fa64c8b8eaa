"""``causal.patch(top=N)``: only the N cells attribution patching ranks highest are patched, exactly; and attribution
patching's estimates on the normalised scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from circuitwidgets import causal
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel


@pytest.fixture(scope="module")
def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(1, 2048, (2, 6), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 2] = torch.randint(1, 2048, (2,), generator=gen)
    return clean, corrupted


def _metric(clean: torch.Tensor) -> causal.LogitDiff:
    return causal.logit_diff(clean[:, -1].tolist(), [5, 6])


def test_top_n_neurons_are_the_largest_estimates_and_equal_the_exact_patch(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor]
) -> None:
    clean, corrupted = prompts
    metric = _metric(clean)
    by = ("layer", "neuron")
    top = causal.patch(gelu, clean, corrupted, metric, site="mlp_post", by=by, top=12)
    estimate = causal.attribution_patch(gelu, clean, corrupted, metric, site="mlp_post", by=by)
    np.testing.assert_array_equal(top.extra["estimate"], estimate.values)
    done = np.isfinite(top.values)
    assert done.sum() == 12 and top.extra["top"] == 12 and "top 12" in top.technique
    threshold = np.sort(np.abs(estimate.values).ravel())[-12]
    assert (np.abs(estimate.values[done]) >= threshold).all()  # the chosen cells are the largest estimates
    # each chosen cell is exactly what the whole sweep gives there (the whole sweep of one layer, to keep it short)
    layer = int(np.argwhere(done)[0][0])
    whole = causal.patch(gelu, clean, corrupted, metric, site="mlp_post", by=by)
    np.testing.assert_allclose(top.values[done], whole.values[done], atol=1e-10)
    assert np.isfinite(whole.values[layer]).all()


def test_top_works_for_any_sweep_and_keeps_the_dims(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor]
) -> None:
    clean, corrupted = prompts
    metric = causal.normalised(_metric(clean))
    whole = causal.patch(gelu, clean, corrupted, metric, site="resid_pre", by=("pos", "layer"))
    top = causal.patch(gelu, clean, corrupted, metric, site="resid_pre", by=("pos", "layer"), top=3)
    assert top.dims == whole.dims and top.shape == whole.shape and np.isfinite(top.values).sum() == 3
    done = np.isfinite(top.values)
    np.testing.assert_allclose(top.values[done], whole.values[done], atol=1e-10)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3", 13])
def test_a_bad_top_is_refused_naming_the_argument(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor], bad: object
) -> None:
    clean, corrupted = prompts
    with pytest.raises(ArgumentError, match=r"^top: expected None or an int in \[1, 12\]"):
        causal.patch(gelu, clean, corrupted, _metric(clean), site="resid_pre", by=("layer", "pos"), top=bad)  # type: ignore[arg-type]


def test_normalised_attribution_is_the_estimated_change_over_clean_minus_corrupted(
    gelu: CircuitModel, prompts: tuple[torch.Tensor, torch.Tensor]
) -> None:
    clean, corrupted = prompts
    plain = causal.attribution_patch(gelu, clean, corrupted, _metric(clean), site="resid_pre", by=("layer", "pos"))
    scaled = causal.attribution_patch(
        gelu, clean, corrupted, causal.normalised(_metric(clean)), site="resid_pre", by=("layer", "pos")
    )
    span = plain.clean_value - plain.corrupted_value
    np.testing.assert_allclose(scaled.values, plain.values / span, rtol=1e-12)
