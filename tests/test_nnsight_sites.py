"""The sites q, k, v, mlp_pre and mlp_post through nnsight give the native engine's numbers (patch, ablate, attribution).

Queries and keys are the attention function's inputs (after rotary), as the native
engine keeps them; under grouped-query attention a sweep of ``k``/``v`` by position
patches every query head's copy, and one query head's copy alone is refused by name.
"""

from __future__ import annotations

from typing import Any

import pytest

from circuitwidgets import causal
from circuitwidgets.errors import NotCoveredError
from tests.test_nnsight import FAMILIES, METRIC, _pair, _prompts, _same, server  # noqa: F401

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
