"""The sites q, k, v, mlp_pre, mlp_post, resid_mid, result and pattern through nnsight give the native engine's numbers
(patch, ablate, attribution).

Queries and keys are the attention function's inputs (after rotary), as the native
engine keeps them; under grouped-query attention a sweep of ``k``/``v`` by position
patches every query head's copy, and one query head's copy alone is refused by name.
``resid_mid``, ``result`` and ``pattern`` are tested on the three-layer models of
tests/test_nnsight_paths.py, whose scaled weights make every site's effect far larger
than the tolerance (GPT-2's patterns barely matter at its initialisation).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from circuitwidgets import causal
from circuitwidgets.errors import NotCoveredError
from tests.test_nnsight import FAMILIES, METRIC, TOL, _pair, _prompts, _same, server  # noqa: F401
from tests.test_nnsight_paths import _deep, deep_server  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
SWEEPS = [("q", ("layer", "head")), ("q", ("pos", "layer")), ("k", ("layer", "pos")), ("v", ("layer", "pos")),
          ("mlp_pre", ("layer", "neuron")), ("mlp_post", ("layer", "pos", "neuron"))]  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("site", "by"), SWEEPS)
def test_more_sites_match_the_native_engine(family: str, site: str, by: tuple[str, ...]) -> None:
    native, h = _pair(family)
    clean, corrupted = _prompts()
    _same(causal.patch(native, clean, corrupted, METRIC, site, by), causal.patch(h, clean, corrupted, METRIC, site, by))
    for kind in ("zero", "mean"):
        _same(causal.ablate(native, clean, METRIC, site, by, kind=kind, reference=corrupted),  # type: ignore[arg-type]
              causal.ablate(h, clean, METRIC, site, by, kind=kind, reference=corrupted))  # type: ignore[arg-type]  # fmt: skip
    _same(causal.attribution_patch(native, clean, corrupted, METRIC, site, by),
          causal.attribution_patch(h, clean, corrupted, METRIC, site, by))  # fmt: skip


def test_keys_and_values_by_head_match_without_grouping_and_are_refused_with_it() -> None:
    native, h = _pair("gpt2")  # one key and value head per query head
    clean, corrupted = _prompts()
    for site in ("k", "v"):
        by = ("layer", "head", "pos")
        _same(causal.patch(native, clean, corrupted, METRIC, site, by),
              causal.patch(h, clean, corrupted, METRIC, site, by))  # fmt: skip
    _, grouped = _pair("llama-gqa2-biases-llama3rope")
    for call in (
        lambda: causal.patch(grouped, clean, corrupted, METRIC, "k", ("layer", "head")),
        lambda: causal.ablate(grouped, clean, METRIC, "v", ("layer", "pos", "head")),
        lambda: causal.attribution_patch(grouped, clean, corrupted, METRIC, "v", ("layer", "head")),
    ):
        with pytest.raises(NotCoveredError, match="grouped-query attention"):
            call()


def test_a_key_sweep_through_the_remote_path(server: Any) -> None:  # noqa: F811
    native, h = _pair("llama-gqa2-biases-llama3rope", remote=True)
    fake = server()
    clean, corrupted = _prompts()
    _same(causal.patch(native, clean, corrupted, METRIC, "k", ("layer", "pos")),
          causal.patch(h, clean, corrupted, METRIC, "k", ("layer", "pos")))  # fmt: skip
    _same(causal.patch(native, clean, corrupted, METRIC, "mlp_post", ("layer", "neuron")),
          causal.patch(h, clean, corrupted, METRIC, "mlp_post", ("layer", "neuron")))  # fmt: skip
    assert len(fake.requests) == 2 and all(size < 200_000 for _, size in fake.requests)


MORE = [("resid_mid", ("layer", "pos")), ("result", ("layer", "head")), ("result", ("layer", "pos", "head")),
        ("pattern", ("layer", "head")), ("pattern", ("head", "layer", "pos"))]  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("site", "by"), MORE)
def test_the_stream_between_sublayers_head_results_and_patterns_match_the_native_engine(
    family: str, site: str, by: tuple[str, ...]
) -> None:
    native, h = _deep(family, 2 if family != "gpt2" else 4)
    clean, corrupted = _prompts()
    a, b = causal.patch(native, clean, corrupted, METRIC, site, by), causal.patch(h, clean, corrupted, METRIC, site, by)
    _same(a, b)
    assert a.site == b.site == site
    assert np.abs(b.values - b.corrupted_value).max() > 100 * TOL  # the site matters: patching nothing would fail
    for kind in ("zero", "mean", "resample"):
        _same(causal.ablate(native, clean, METRIC, site, by, kind=kind, reference=corrupted),  # type: ignore[arg-type]
              causal.ablate(h, clean, METRIC, site, by, kind=kind, reference=corrupted))  # type: ignore[arg-type]  # fmt: skip
    _same(causal.attribution_patch(native, clean, corrupted, METRIC, site, by),
          causal.attribution_patch(h, clean, corrupted, METRIC, site, by))  # fmt: skip


def test_patterns_need_eager_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    _, h = _pair("llama-gqa2-biases-llama3rope")
    clean, corrupted = _prompts()
    monkeypatch.setattr(h.lm._module.config, "_attn_implementation", "sdpa")
    with pytest.raises(NotCoveredError, match="site: 'pattern' needs the probabilities eager attention"):
        causal.patch(h, clean, corrupted, METRIC, "pattern", ("layer", "head"))


def test_the_new_sites_through_the_remote_path(deep_server: Any) -> None:  # noqa: F811
    native, h = _deep("llama-gqa2-biases-llama3rope", 4, remote=True)
    clean, corrupted = _prompts()
    for site, by in (("resid_mid", ("layer", "pos")), ("pattern", ("layer", "head")), ("result", ("layer", "head"))):
        _same(
            causal.patch(native, clean, corrupted, METRIC, site, by),
            causal.patch(h, clean, corrupted, METRIC, site, by),
        )
    _same(causal.attribution_patch(native, clean, corrupted, METRIC, "resid_mid", ("layer", "pos")),
          causal.attribution_patch(h, clean, corrupted, METRIC, "resid_mid", ("layer", "pos")))  # fmt: skip
    assert len(deep_server.requests) == 4 and all(size < 200_000 for _, size in deep_server.requests)


FROZEN = [("resid_pre", ("layer", "pos")), ("resid_mid", ("layer", "pos")), ("attn_out", ("layer", "pos")),
          ("z", ("layer", "head")), ("mlp_post", ("layer", "neuron")), ("resid_post", ("layer",))]  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES)
def test_frozen_norm_scales_match_the_native_engine(family: str) -> None:
    native, h = _pair(family)  # the unscaled models: frozen scales on the scaled ones amplify float32 rounding
    clean, corrupted = _prompts()
    moved = 0.0
    for site, by in FROZEN:
        a = causal.patch(native, clean, corrupted, METRIC, site, by, freeze_norms=True)
        b = causal.patch(h, clean, corrupted, METRIC, site, by, freeze_norms=True)
        _same(a, b)
        assert b.convention == "norm scales frozen from the base run (nnsight)"
        moved = max(moved, float(np.abs(b.values - causal.patch(h, clean, corrupted, METRIC, site, by).values).max()))
        for kind in ("zero", "mean"):
            _same(causal.ablate(native, clean, METRIC, site, by, kind=kind, reference=corrupted, freeze_norms=True),  # type: ignore[arg-type]
                  causal.ablate(h, clean, METRIC, site, by, kind=kind, reference=corrupted, freeze_norms=True))  # type: ignore[arg-type]  # fmt: skip
    assert moved > 10 * TOL  # freezing changes the numbers: a backend that recomputed the norms would fail


def test_frozen_norm_scales_through_the_remote_path(deep_server: Any) -> None:  # noqa: F811
    native, h = _deep("llama-gqa2-biases-llama3rope", 4, remote=True)
    clean, corrupted = _prompts()
    for site, by in (("z", ("layer", "head")), ("resid_mid", ("layer", "pos"))):
        a = causal.patch(native, clean, corrupted, METRIC, site, by, freeze_norms=True)
        b = causal.patch(h, clean, corrupted, METRIC, site, by, freeze_norms=True)
        np.testing.assert_allclose(b.values, a.values, atol=TOL * max(1.0, float(np.abs(a.values).max())), rtol=0)
    assert len(deep_server.requests) == 2 and all(size < 200_000 for _, size in deep_server.requests)
