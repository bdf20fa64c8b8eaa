"""Direct logit attribution and attribution patching through nnsight give the native engine's numbers.

The same tiny GPT-2, Llama (GQA, llama3 rotary, biases) and Gemma 2 (soft-caps,
sliding window, output norms) models as tests/test_nnsight.py, each run through
``cw.from_nnsight`` and ``cw.from_hf``; every number agrees within 1e-5 (a
normalised attribution patch within 1e-5 of its largest value: it divides a
float32 gradient by clean − corrupted), here and through the fake NDIF server.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from circuitwidgets import causal
from tests.test_nnsight import FAMILIES, METRIC, SWEEPS, TOL, _pair, _prompts, _same, server  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _answers(d_model: int) -> list[Any]:
    direction = torch.randn(d_model, generator=torch.Generator().manual_seed(3))
    return [5, (5, 7), ([5, 6], [7, 8]), direction]


def _same_attribution(a: Any, b: Any) -> None:
    assert (a.dims, a.labels, a.metric, a.convention) == (b.dims, b.labels, b.metric, b.convention)
    assert a.prompts.keys() == b.prompts.keys()
    np.testing.assert_allclose(b.values, a.values, atol=TOL, rtol=0)
    assert list(b.extra["rest"]) == list(a.extra["rest"])
    for name, value in a.extra["rest"].items():
        np.testing.assert_allclose(b.extra["rest"][name], value, atol=TOL, rtol=0, err_msg=name)
    np.testing.assert_allclose(b.extra["logit"], a.extra["logit"], atol=TOL, rtol=0)
    np.testing.assert_allclose(b.extra["model_logits"], a.extra["model_logits"], atol=TOL, rtol=0)
    assert b.extra["softcap"] == a.extra["softcap"] and b.extra["pos"] == a.extra["pos"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("by", ["component", "layer", "head", "neuron"])
def test_logit_attribution_matches_the_native_engine_and_sums_to_the_logit(family: str, by: str) -> None:
    native, h = _pair(family)
    tokens, _ = _prompts()
    cap = native.cfg.final_softcap
    for answers in _answers(h.d_model):
        for pos in (-1, 3):
            for reduce in ("mean", "none"):
                a = causal.logit_attribution(native, tokens, answers, by=by, pos=pos, reduce=reduce)  # type: ignore[arg-type]
                b = causal.logit_attribution(h, tokens, answers, by=by, pos=pos, reduce=reduce)  # type: ignore[arg-type]
                _same_attribution(a, b)
                if reduce == "none":  # the parts sum to the logit, and that is the model's (before any soft-cap)
                    total = b.values.reshape(b.values.shape[0], -1).sum(-1) + sum(b.extra["rest"].values())
                    np.testing.assert_allclose(total, b.extra["logit"], atol=TOL, rtol=0)
                    comparable = isinstance(answers, int) or (not cap and not isinstance(answers, torch.Tensor))
                    if comparable:  # a soft-cap applies to each logit, not to a difference of two
                        logit = cap * np.tanh(b.extra["logit"] / cap) if cap else b.extra["logit"]
                        np.testing.assert_allclose(logit, b.extra["model_logits"], atol=TOL, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("site", "by"), [*SWEEPS, ("z", ("head", "layer", "pos")), ("resid_pre", ("layer",))])
def test_attribution_patching_matches_the_native_engine(family: str, site: str, by: tuple[str, ...]) -> None:
    native, h = _pair(family)
    clean, corrupted = _prompts()
    _same(causal.attribution_patch(native, clean, corrupted, METRIC, site, by),
          causal.attribution_patch(h, clean, corrupted, METRIC, site, by))  # fmt: skip
    normed = causal.normalised(METRIC)
    a = causal.attribution_patch(native, clean, corrupted, normed, site, by)
    b = causal.attribution_patch(h, clean, corrupted, normed, site, by)
    assert (a.dims, a.labels.keys(), a.technique, a.convention) == (b.dims, b.labels.keys(), b.technique, b.convention)
    np.testing.assert_allclose(b.values, a.values, atol=TOL * max(1.0, float(np.abs(a.values).max())), rtol=0)
    # the backward pass stops at the site: the user's (or the server's) weights get no .grad
    assert all(p.grad is None for p in h.lm._module.parameters())


@pytest.mark.parametrize("family", FAMILIES)
def test_patching_the_top_cells_matches_the_native_engine(family: str) -> None:
    native, h = _pair(family)
    clean, corrupted = _prompts()
    a = causal.patch(native, clean, corrupted, METRIC, "z", ("layer", "head", "pos"), top=5)
    b = causal.patch(h, clean, corrupted, METRIC, "z", ("layer", "head", "pos"), top=5)
    assert a.technique == b.technique and b.extra["top"] == 5
    np.testing.assert_array_equal(np.isnan(b.values), np.isnan(a.values))
    np.testing.assert_allclose(b.values, a.values, atol=TOL, rtol=0)
    np.testing.assert_allclose(b.extra["estimate"], a.extra["estimate"], atol=TOL, rtol=0)


def test_attribution_through_the_remote_path_sends_one_small_request_each(server: Any) -> None:  # noqa: F811
    native, h = _pair("llama-gqa2-biases-llama3rope", remote=True)
    fake = server()
    tokens, corrupted = _prompts()
    for by in ("head", "neuron"):
        a = causal.logit_attribution(native, tokens, (5, 7), by=by)  # type: ignore[arg-type]
        b = causal.logit_attribution(h, tokens, (5, 7), by=by)  # type: ignore[arg-type]
        _same_attribution(a, b)
    _same(causal.attribution_patch(native, tokens, corrupted, METRIC, "z", ("layer", "head", "pos")),
          causal.attribution_patch(h, tokens, corrupted, METRIC, "z", ("layer", "head", "pos")))  # fmt: skip
    assert [key for key, _ in fake.requests] == ["tiny-llama"] * 3  # one trace per call
    assert all(size < 200_000 for _, size in fake.requests)  # the trace's code and the prompts: no weights, no caches


def test_bad_arguments_are_refused_by_name() -> None:
    _, h = _pair("gpt2")
    tokens, corrupted = _prompts()
    from circuitwidgets.errors import ArgumentError, ShapeError

    for call, error, name in (
        (lambda: causal.logit_attribution(h, tokens, 5, by="path"), ArgumentError, "by"),  # type: ignore[arg-type]
        (lambda: causal.logit_attribution(h, tokens, 5, pos=7), ArgumentError, "pos"),
        (lambda: causal.logit_attribution(h, tokens, 5, reduce="sum"), ArgumentError, "reduce"),  # type: ignore[arg-type]
        (lambda: causal.logit_attribution(h, tokens, 64), ArgumentError, "answers"),
        (lambda: causal.logit_attribution(h, tokens, [1, 2, 3]), ShapeError, "answers"),  # 3 ids, 2 prompts
        (lambda: causal.logit_attribution(h, tokens, torch.ones(3)), ShapeError, "answers"),
        (lambda: causal.attribution_patch(h, tokens, corrupted[:1], METRIC), ShapeError, "corrupted"),
        (lambda: causal.attribution_patch(h, tokens, corrupted, METRIC, "z", ("pos",)), ArgumentError, "by"),
        (lambda: causal.patch(h, tokens, corrupted, METRIC, "z", ("layer", "head"), top=0), ArgumentError, "top"),
    ):
        with pytest.raises(error, match=name):
            call()
