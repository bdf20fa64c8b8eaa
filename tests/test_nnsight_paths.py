"""Path patching through nnsight gives the native engine's numbers, here and through the (fake) remote path.

Three-layer versions of the tiny GPT-2, Llama (llama3 rotary, biases) and Gemma 2
(soft-caps, sliding window, output norms) models, so that a sender's write reaches
receivers two layers on; their weights are scaled up so that a path's effect on the
metric is far above the 1e-5 tolerance (a backend that patched nothing would fail).
Keys and values are tested where each key head is one query head's (``kv=4``);
under grouped-query attention ``via="q"`` runs and ``k``/``v`` are refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from circuitwidgets import causal
from circuitwidgets.causal.nnsight_backend import _bytes_per_variant
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NotCoveredError
from tests.families import CASES_BY_ID, Case, randomise_norms_and_biases
from tests.test_nnsight import HOST, METRIC, TOL, _prompts, _Server, _tokenizer, cw, nnsight, transformers

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
#: (family, key/value heads): one key head per query head, and grouped-query attention.
MODELS = [("gpt2", 4), ("llama-gqa2-biases-llama3rope", 4), ("gemma2-softcaps-window", 4),
          ("llama-gqa2-biases-llama3rope", 2), ("gemma2-softcaps-window", 2)]  # fmt: skip
#: Weight scale per family: enough that queries matter (GPT-2's initialisation leaves its patterns near uniform).
SCALE = {"gpt2": 60.0, "llama-gqa2-biases-llama3rope": 8.0, "gemma2-softcaps-window": 8.0}
_BUILT: dict[tuple[str, int], tuple[Any, Any]] = {}


def _hf(family: str, kv: int) -> Any:
    if family == "gpt2":
        torch.manual_seed(0)
        config = transformers.GPT2Config(n_embd=32, n_layer=3, n_head=4, vocab_size=64, n_positions=64)
        config._attn_implementation = "eager"
        model = transformers.GPT2LMHeadModel(config).eval()
        randomise_norms_and_biases(model)
    else:
        case = CASES_BY_ID[family]
        model = Case(case.id, case.config, case.model, {**case.kwargs, "num_hidden_layers": 3,
                                                        "num_key_value_heads": kv}).build()  # fmt: skip
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 2:
                param.mul_(SCALE[family])
    return model


def _deep(family: str, kv: int, remote: bool | str = False) -> tuple[Any, Any]:
    """(native CircuitModel, nnsight handle) of a three-layer model of the family."""
    if (family, kv) not in _BUILT:
        hf = _hf(family, kv)
        _BUILT[family, kv] = (cw.from_hf(hf), nnsight.TransformersModel(hf, tokenizer=_tokenizer()))
    native, lm = _BUILT[family, kv]
    return native, cw.from_nnsight(lm, remote=remote)


def _same_paths(a: Any, b: Any) -> None:
    assert (a.dims, a.labels, a.technique, a.site, a.extra) == (b.dims, b.labels, b.technique, b.site, b.extra)
    np.testing.assert_array_equal(np.isnan(b.values), np.isnan(a.values))  # NaN where a receiver cannot read
    np.testing.assert_allclose(b.values, a.values, atol=TOL, rtol=0)
    assert abs(a.clean_value - b.clean_value) < TOL and abs(a.corrupted_value - b.corrupted_value) < TOL


def _vias(h: Any) -> list[str]:
    return ["q", "k", "v"] if h.n_kv_heads == h.n_heads else ["q"]


@pytest.mark.parametrize(("family", "kv"), MODELS)
def test_path_patching_matches_the_native_engine(family: str, kv: int) -> None:
    native, h = _deep(family, kv)
    clean, corrupted = _prompts()
    for via in _vias(h):
        a = causal.path_patch(native, clean, corrupted, METRIC, sender=None, via=via)  # type: ignore[arg-type]
        b = causal.path_patch(h, clean, corrupted, METRIC, sender=None, via=via)  # type: ignore[arg-type]
        _same_paths(a, b)
        assert b.values.shape == (3, 4, 3, 4)
        # the paths matter: far above the tolerance, so a backend that patched nothing would fail
        assert np.nanmax(np.abs(b.values - b.corrupted_value)) > 100 * TOL
        one = causal.path_patch(h, clean, corrupted, METRIC, sender=(0, 1), via=via)  # type: ignore[arg-type]
        np.testing.assert_allclose(one.values, b.values[0, 1], atol=TOL, rtol=0)
    normed = causal.normalised(METRIC)
    _same_paths(causal.path_patch(native, clean, corrupted, normed, sender=(1, 2), via="q"),
                causal.path_patch(h, clean, corrupted, normed, sender=(1, 2), via="q"))  # fmt: skip


def test_keys_and_values_under_grouped_query_attention_are_refused_by_name() -> None:
    _, h = _deep("llama-gqa2-biases-llama3rope", 2)
    clean, corrupted = _prompts()
    for via in ("k", "v"):
        with pytest.raises(NotCoveredError, match=f"via: '{via}' under grouped-query attention"):
            causal.path_patch(h, clean, corrupted, METRIC, sender=(0, 0), via=via)  # type: ignore[arg-type]


def test_a_small_memory_budget_splits_the_variants_into_several_traces() -> None:
    native, h = _deep("gemma2-softcaps-window", 4)
    clean, corrupted = _prompts()
    whole = causal.path_patch(native, clean, corrupted, METRIC, sender=None, via="k")
    # six variants a trace: chunks that hold two senders' variants, and one variant a trace
    six = 7 * _bytes_per_variant(h, *clean.shape)
    _same_paths(whole, causal.path_patch(h, clean, corrupted, METRIC, sender=None, via="k", memory_budget=six))
    one = causal.path_patch(h, clean, corrupted, METRIC, sender=(1, 3), via="k", memory_budget=1)
    np.testing.assert_allclose(one.values, whole.values[1, 3], atol=TOL, rtol=0)


def test_bad_arguments_are_refused_by_name() -> None:
    _, h = _deep("gpt2", 4)
    clean, corrupted = _prompts()
    for call, error, name in (
        (lambda: causal.path_patch(h, clean, corrupted, METRIC, via="o"), ArgumentError, "via"),  # type: ignore[arg-type]
        (lambda: causal.path_patch(h, clean, corrupted, METRIC, sender=(2, 0)), ArgumentError, "last layer"),
        (lambda: causal.path_patch(h, clean, corrupted, METRIC, sender=(0, 4)), ArgumentError, "sender"),
        (lambda: causal.path_patch(h, clean, corrupted, METRIC, sender=[0, 1]), ArgumentTypeError, "sender"),  # type: ignore[arg-type]
        (lambda: causal.path_patch(h, clean, corrupted[:1], METRIC, sender=(0, 1)), Exception, "corrupted"),
    ):
        with pytest.raises(error, match=name):
            call()


@pytest.fixture
def deep_server(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake NDIF of tests/test_nnsight.py, serving the three-layer Llama with one key head per query head."""
    from nnsight.intervention.backends.remote import RemoteBackend

    from circuitwidgets.sources import nnsight_remote

    lm = _deep("llama-gqa2-biases-llama3rope", 4)[1].lm
    fake = _Server(lm)
    monkeypatch.setattr(RemoteBackend, "request", lambda self, request, tracer: fake(self, request, tracer))
    monkeypatch.setattr(type(lm), "to_model_key", lambda self: "tiny-llama-3l")
    # nnsight's own backend in place of ours, as tests/test_nnsight.py's server says why
    monkeypatch.setattr(
        nnsight_remote, "backend", lambda lm, host, timeout: RemoteBackend("tiny-llama-3l", host=host or HOST)
    )
    return fake


def test_path_patching_through_the_remote_path_sends_one_small_request(deep_server: Any) -> None:
    native, h = _deep("llama-gqa2-biases-llama3rope", 4, remote=True)
    clean, corrupted = _prompts()
    for via in ("q", "v"):
        _same_paths(causal.path_patch(native, clean, corrupted, METRIC, sender=None, via=via),  # type: ignore[arg-type]
                    causal.path_patch(h, clean, corrupted, METRIC, sender=None, via=via))  # type: ignore[arg-type]  # fmt: skip
    assert [key for key, _ in deep_server.requests] == ["tiny-llama-3l"] * 2  # one trace per call: every sender
    assert all(size < 200_000 for _, size in deep_server.requests)  # the trace's code, prompts and indices only
