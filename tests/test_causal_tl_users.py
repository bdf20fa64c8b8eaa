"""A TransformerLens user's habits meet a clear path (issue 44): hook names as aliases or "did you mean", a
``fwd_hooks`` list refused with the equivalent call, string and ``[batch, 2]`` answers, a metric with no gradient
in attribution patching, and half-precision models computed in float32 (and said so)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from conftest import make_random_model

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.hook_names import parse_tl_name


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    return make_random_model(n_layers=2, n_heads=3)


@pytest.fixture(scope="module")
def gelu() -> CircuitModel:
    return cw.load_pretrained("gelu-2l")


def _pair() -> tuple[torch.Tensor, torch.Tensor]:
    clean = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(1))
    corrupted = clean.clone()
    corrupted[:, 2] = (corrupted[:, 2] + 7) % 50
    return clean, corrupted


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        ("blocks.0.attn.hook_z", ("z", 0)),
        ("blocks.11.hook_resid_pre", ("resid_pre", 11)),
        ("blocks.2.mlp.hook_post", ("mlp_post", 2)),
        ("blocks.1.ln1.hook_scale", ("scale", 1)),
        ("hook_embed", ("embed", None)),
        ("ln_final.hook_scale", ("scale_final", None)),
        ("hook_z", ("z", None)),
        ("attn.hook_pattern", ("pattern", None)),
        ("z", None),
        ("blocks.0.attn.hook_zz", None),
    ],
)
def test_transformer_lens_names_parse(name: str, ours: Any) -> None:
    assert parse_tl_name(name) == ours


def test_run_with_hooks_accepts_transformer_lens_names(model: CircuitModel) -> None:
    clean, _ = _pair()
    zero = {("z", 0): lambda v: v * 0}
    expected = model.run_with_hooks(clean, zero)
    assert torch.equal(model.run_with_hooks(clean, {"blocks.0.attn.hook_z": lambda v: v * 0}), expected)
    assert torch.equal(model.run_with_hooks(clean, {("hook_z", 0): lambda v: v * 0}), expected)
    assert not torch.equal(model.run_with_hooks(clean, {}), expected)  # the hook did something


def test_fwd_hooks_list_is_refused_with_the_equivalent_call(model: CircuitModel) -> None:
    clean, _ = _pair()

    def zero_z(value: torch.Tensor, hook: object) -> torch.Tensor:
        return value * 0

    pairs = [("blocks.0.attn.hook_z", zero_z)]
    for call in (lambda: model.run_with_hooks(clean, fwd_hooks=pairs), lambda: model.run_with_hooks(clean, pairs)):
        with pytest.raises(ArgumentTypeError, match=r"run_with_hooks\(tokens, \{\('z', 0\): lambda value: zero_z"):
            call()


@pytest.mark.parametrize("call", ["patch", "ablate", "attribution_patch"])
def test_sweep_site_aliases_and_did_you_mean(model: CircuitModel, call: str) -> None:
    clean, corrupted = _pair()
    metric = causal.logit_diff(1, 2)
    fn = getattr(causal, call)
    args = (model, clean, metric) if call == "ablate" else (model, clean, corrupted, metric)
    ours = fn(*args, site="z", by=("layer", "head"))
    aliased = fn(*args, site="hook_z", by=("layer", "head"))
    assert aliased.site == "z" and np.array_equal(aliased.values, ours.values)
    with pytest.raises(ArgumentError, match="did you mean 'z'"):
        fn(*args, site="blocks.0.attn.hook_z", by=("layer", "head"))
    with pytest.raises(ArgumentError, match="did you mean 'resid_pre'"):
        fn(*args, site="blocks.1.hook_resid_pre")


def test_answers_as_strings_and_pairs(gelu: CircuitModel) -> None:
    t = gelu.to_tokens(["The cat sat on the", "The dog lay on the"])
    the, a = gelu.tokenizer.encode(" the")[0], gelu.tokenizer.encode(" a")[0]
    by_ids = causal.logit_attribution(gelu, t, (the, a))
    assert np.array_equal(causal.logit_attribution(gelu, t, (" the", " a")).values, by_ids.values)
    single = causal.logit_attribution(gelu, t, " the")
    assert np.array_equal(single.values, causal.logit_attribution(gelu, t, the).values)
    rows = torch.tensor([[the, a], [a, the]])
    paired = causal.logit_attribution(gelu, t, rows, reduce="none")
    as_tuple = causal.logit_attribution(gelu, t, ([the, a], [a, the]), reduce="none")
    assert paired.metric == "logit difference (answer − wrong)"
    assert np.array_equal(paired.values, as_tuple.values)
    with pytest.raises(ArgumentError, match=r"exactly one token.*splits into"):
        causal.logit_attribution(gelu, t, " thequickbrownfox")
    with pytest.raises(ShapeError, match=r"\[batch, 2\] tensor of \(correct, wrong\)"):
        causal.logit_attribution(gelu, t, torch.tensor([1, 2, 3]))
    for bad in (None, {"a": 1}, 1.5):
        with pytest.raises(ArgumentTypeError, match="answers"):
            causal.logit_attribution(gelu, t, bad)


def test_attribution_patch_refuses_a_metric_without_gradient(model: CircuitModel) -> None:
    clean, corrupted = _pair()
    for metric in (lambda x: x[:, -1, 0].mean().item(), lambda x: x[:, -1, 0].mean().detach()):
        with pytest.raises(ArgumentTypeError, match="must return a torch tensor computed from the logits"):
            causal.attribution_patch(model, clean, corrupted, metric)
        assert causal.patch(model, clean, corrupted, metric).values.shape == (2, 6)  # patch needs no gradient


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_models_compute_in_float32(dtype: torch.dtype) -> None:
    clean, corrupted = _pair()
    half = make_random_model(n_layers=2, n_heads=3).to(dtype)  # (Module.to converts in place: a fresh model each)
    upcast = make_random_model(n_layers=2, n_heads=3).to(dtype).to(torch.float32)  # the same rounded weights
    metric = causal.logit_diff(1, 2)
    name = str(dtype).removeprefix("torch.")
    for fn in (causal.patch, causal.attribution_patch):
        got = fn(half, clean, corrupted, metric, site="z", by=("layer", "head"))
        want = fn(upcast, clean, corrupted, metric, site="z", by=("layer", "head"))
        assert f"{name} weights computed in float32" in got.convention
        np.testing.assert_allclose(got.values, want.values, rtol=0, atol=1e-6)
    dla = causal.logit_attribution(half, clean, 3)
    assert f"{name} weights computed in float32" in dla.convention
    total = dla.values.sum() + sum(float(np.sum(v)) for v in dla.extra["rest"].values())
    assert abs(total - float(dla.extra["model_logits"])) < 1e-4
