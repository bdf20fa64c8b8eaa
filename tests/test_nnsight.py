"""The nnsight backend (``cw.from_nnsight``) gives the native engine's numbers, locally and through the remote path.

Tiny random models built from configs (GPT-2, Llama with GQA and llama3 rotary,
Gemma 2 with soft-caps and a sliding window) run through nnsight traces and
through ``cw.from_hf(hf)``; every covered function agrees within 1e-5. The
remote path is the local one with ``remote=True``: nnsight's request sender is
replaced by one that records the request and runs it as a server would
(deserialised with circuitwidgets hidden), or fails as a server would.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

nnsight = pytest.importorskip("nnsight")
transformers = pytest.importorskip("transformers")

import circuitwidgets as cw  # noqa: E402
from circuitwidgets import causal  # noqa: E402
from circuitwidgets.errors import NotCoveredError, RemoteRunError, RemoteWeightsError  # noqa: E402
from tests.families import CASES_BY_ID, randomise_norms_and_biases  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
FAMILIES = ["gpt2", "llama-gqa2-biases-llama3rope", "gemma2-softcaps-window"]
TOL = 1e-5


def _tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers

    raw = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)}, unk_token="w0"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="w0", unk_token="w0")


def _hf(family: str) -> Any:
    if family == "gpt2":
        torch.manual_seed(0)
        config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=64)
        config._attn_implementation = "eager"
        model = transformers.GPT2LMHeadModel(config).eval()
        randomise_norms_and_biases(model)  # so that the layer norms' weights and biases matter
        return model
    return CASES_BY_ID[family].build()


_BUILT: dict[str, tuple[Any, Any]] = {}


def _pair(family: str, remote: bool | str = False) -> tuple[Any, Any]:
    """(native CircuitModel, nnsight handle) of one family's tiny model."""
    if family not in _BUILT:
        hf = _hf(family)
        _BUILT[family] = (cw.from_hf(hf), nnsight.TransformersModel(hf, tokenizer=_tokenizer()))
    native, lm = _BUILT[family]
    return native, cw.from_nnsight(lm, remote=remote)


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(3, 64, (2, 7), generator=g), torch.randint(3, 64, (2, 7), generator=g)


METRIC = causal.logit_diff([5, 6], [7, 8])
SWEEPS = [("resid_pre", ("layer", "pos")), ("resid_post", ("layer", "pos")), ("attn_out", ("pos", "layer")),
          ("mlp_out", ("layer", "pos")), ("z", ("layer", "head"))]  # fmt: skip


def _same(a: Any, b: Any) -> None:
    assert a.dims == b.dims and a.labels.keys() == b.labels.keys()
    np.testing.assert_allclose(b.values, a.values, atol=TOL, rtol=0)
    for x, y in ((a.clean_value, b.clean_value), (a.corrupted_value, b.corrupted_value)):
        assert (x is None) == (y is None) and (x is None or abs(x - y) < TOL)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(("site", "by"), SWEEPS)
def test_patching_matches_the_native_engine(family: str, site: str, by: tuple[str, ...]) -> None:
    native, h = _pair(family)
    clean, corrupted = _prompts()
    _same(causal.patch(native, clean, corrupted, METRIC, site, by), causal.patch(h, clean, corrupted, METRIC, site, by))
    normed = causal.normalised(METRIC)
    _same(causal.patch(native, clean, corrupted, normed, site, by), causal.patch(h, clean, corrupted, normed, site, by))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", ["zero", "mean", "resample"])
def test_ablation_matches_the_native_engine(family: str, kind: str) -> None:
    native, h = _pair(family)
    tokens, reference = _prompts()
    ref = None if kind == "zero" else reference
    for site, by in (("z", ("layer", "head")), ("resid_post", ("layer",)), ("mlp_out", ("layer", "pos"))):
        a = causal.ablate(native, tokens, METRIC, site, by, kind=kind, reference=ref)
        b = causal.ablate(h, tokens, METRIC, site, by, kind=kind, reference=ref)
        _same(a, b)

    # a plain callable metric (TransformerLens's form) and a small memory budget: several traces
    def last_logit(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1, 9].mean()

    a = causal.ablate(native, tokens, last_logit, "z", kind=kind, reference=ref)
    b = causal.ablate(h, tokens, last_logit, "z", kind=kind, reference=ref, memory_budget=1)
    _same(a, b)


@pytest.mark.parametrize("family", FAMILIES)
def test_lens_and_loss_match_the_native_engine(family: str) -> None:
    native, h = _pair(family)
    tokens, _ = _prompts()
    np.testing.assert_allclose(causal.per_token_loss(h, tokens), causal.per_token_loss(native, tokens), atol=TOL)
    a, b = causal.logit_lens(native, tokens, k=3), causal.logit_lens(h, tokens, k=3)
    assert a.layer_labels == b.layer_labels
    np.testing.assert_array_equal(b.top_ids, a.top_ids)
    np.testing.assert_allclose(b.top_log_probs, a.top_log_probs, atol=TOL)
    np.testing.assert_allclose(b.log_prob([5, 9]), a.log_prob([5, 9]), atol=TOL)
    np.testing.assert_allclose(b.log_prob(next_tokens=True), a.log_prob(next_tokens=True), atol=TOL)
    np.testing.assert_array_equal(b.rank(5), a.rank(5))


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_data_match_the_native_engine(family: str) -> None:
    native, h = _pair(family)
    ids = torch.randint(3, 64, (40,), generator=torch.Generator().manual_seed(2))
    data = h.attention_qk(ids)
    _, cache = native.run_with_cache(ids[None], names=["q", "k", "pattern"])
    cfg = native.cfg
    L, H, N = cfg.n_layers, cfg.n_heads, 40
    assert data["q"].shape == (L, H, N, h.d_head) and data["k"].shape == (L, h.n_kv_heads, N, h.d_head)
    assert data["softcap"] == cfg.attn_softcap and data["sliding_window"] == [cfg.window(i) for i in range(L)]
    for layer in range(L):
        k = data["k"][layer].repeat_interleave(H // h.n_kv_heads, dim=0)
        ours = data["q"][layer] @ k.transpose(-1, -2) / data["scale"]
        theirs = torch.einsum("qhe,khe->hqk", cache["q", layer][0], cache["k", layer][0]).float() / cfg.scale
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=TOL)
    patterns = h.attention_patterns(ids)
    for layer in range(L):
        np.testing.assert_allclose(patterns["attention"][layer].numpy(), cache["pattern", layer][0].numpy(), atol=TOL)
    widget = cw.AttentionPatterns.from_qk(**data)
    assert widget is not None


def test_what_is_not_covered_is_refused_by_name() -> None:
    _, h = _pair("llama-gqa2-biases-llama3rope")
    clean, corrupted = _prompts()
    for call, name in (
        (lambda: causal.path_patch(h, clean, corrupted, METRIC, sender=(0, 0), via="k"), "grouped-query"),
        (lambda: causal.path_patch(h, clean, corrupted, METRIC, sender=(0, 0), via="q", freeze_norms=True), "freeze"),
    ):
        with pytest.raises(NotCoveredError, match=name):
            call()


class _Server:
    """Stands in for NDIF: records each request, then runs it as the server would (or fails)."""

    def __init__(self, lm: Any, fail: str | None = None) -> None:
        self.lm = lm
        self.fail = fail
        self.requests: list[tuple[str, int]] = []

    def __call__(self, backend: Any, request: Any, tracer: Any) -> Any:
        from nnsight.intervention.backends.local import LocalSimulationBackend
        from nnsight.intervention.backends.remote import RemoteError

        blob = backend._serialize(tracer)
        self.requests.append((request.model_key, len(blob)))
        if self.fail is not None:
            raise RemoteError(self.fail)
        LocalSimulationBackend(self.lm)(tracer)  # deserialised with local modules hidden, run here
        return None


#: The host a remote handle names when none is given (nnsight's default NDIF host).
HOST = "https://api.ndif.us"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    from circuitwidgets.sources import nnsight_remote

    def make(fail: str | None = None) -> _Server:
        lm = _pair("llama-gqa2-biases-llama3rope")[1].lm
        fake = _Server(lm, fail)
        # nnsight's own backend stands in for ours here (ours, its deadline and typed failures, are tested against
        # localhost servers in test_nnsight_remote): a trace ships its backend to the server, and ours travels by
        # value with circuitwidgets, so a fake patched onto it would travel too, naming this test module, which
        # the simulated server cannot import when this file is imported as tests.test_nnsight.
        from nnsight.intervention.backends.remote import RemoteBackend

        monkeypatch.setattr(RemoteBackend, "request", lambda self, request, tracer: fake(self, request, tracer))
        monkeypatch.setattr(
            nnsight_remote, "backend", lambda lm, host, timeout: RemoteBackend("tiny-llama", host=host or HOST)
        )
        monkeypatch.setattr(
            type(_pair("llama-gqa2-biases-llama3rope")[1].lm), "to_model_key", lambda self: "tiny-llama"
        )
        return fake

    return make


def test_the_remote_path_sends_the_local_trace_and_gets_the_same_numbers(server: Any) -> None:
    native, h = _pair("llama-gqa2-biases-llama3rope", remote=True)
    fake = server()
    clean, corrupted = _prompts()
    _same(causal.patch(native, clean, corrupted, METRIC, "z", ("layer", "head")),
          causal.patch(h, clean, corrupted, METRIC, "z", ("layer", "head")))  # fmt: skip
    assert len(fake.requests) == 1 and fake.requests[0][0] == "tiny-llama"  # one trace for the whole sweep
    assert fake.requests[0][1] < 200_000  # the trace's source, its variables and the cell indices: no masks, no caches
    np.testing.assert_allclose(causal.per_token_loss(h, clean), causal.per_token_loss(native, clean), atol=TOL)
    lens = causal.logit_lens(h, clean, k=2)
    np.testing.assert_array_equal(lens.top_ids, causal.logit_lens(native, clean, k=2).top_ids)
    with pytest.raises(NotCoveredError, match="remotely"):
        lens.log_prob(5)
    data = h.attention_qk(clean[:1])
    assert data["q"].shape[0] == native.cfg.n_layers


def test_a_trace_that_fails_remotely_names_the_servers_message(server: Any) -> None:
    _, h = _pair("llama-gqa2-biases-llama3rope", remote=True)
    server("CUDA out of memory on the server (job 42)")
    clean, corrupted = _prompts()
    result = None
    with pytest.raises(RemoteRunError, match=r"CUDA out of memory on the server \(job 42\)"):
        result = causal.patch(h, clean, corrupted, METRIC, "z", ("layer", "head"))
    assert result is None
    with pytest.raises(RemoteRunError, match="per_token_loss"):
        causal.per_token_loss(h, clean)


def test_weight_space_analyses_read_the_shards(tmp_path: Any) -> None:
    native, h = _pair("llama-gqa2-biases-llama3rope", remote=True)
    with pytest.raises(RemoteWeightsError, match="safetensors shards"):
        h.weights()
    h.lm._module.save_pretrained(tmp_path)
    streamed = cw.from_nnsight(h.lm, remote=True, weights=str(tmp_path)).weights()
    assert streamed.cfg.mlp_weights_absent
    np.testing.assert_allclose(streamed.W_Q.float().numpy(), native.W_Q.float().numpy(), atol=TOL)
    local = cw.from_nnsight(h.lm).weights()  # a local model: its own weights
    np.testing.assert_allclose(local.W_OV.float().numpy() if hasattr(local, "W_OV") else local.W_O.float().numpy(),
                               native.W_OV.float().numpy() if hasattr(native, "W_OV") else native.W_O.float().numpy(),
                               atol=TOL)  # fmt: skip
