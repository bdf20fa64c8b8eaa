"""The speed paths of a patching pass compute the same numbers as the plain ones (float64, every family).

- each layer's queries, keys and values from one product over a fused ``[d_model, n]`` weight
  (:mod:`circuitwidgets.model.fused`) equal the per-head projections; the fused copy follows in-place edits of
  the stored weights and is not used where the weights require gradients;
- attention by torch's ``scaled_dot_product_attention`` equals the written-out softmax (windows, a suffix-only
  pass's offset, a few asked rows, chunks);
- a sweep of ``z`` or ``attn_out`` that resumes the patched layer from the base run (``Recorder.resume``) equals
  the same sweep run through the whole layer;
- the causal benchmark refuses ``--device cuda`` clearly where there is no CUDA.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from families import CASES, VOCAB

from circuitwidgets import causal
from circuitwidgets.causal import one_pass, planning, staircase
from circuitwidgets.model import forward, fused
from circuitwidgets.model.cache import Recorder
from circuitwidgets.sources.huggingface import from_hf

ROOT = Path(__file__).resolve().parents[1]


def _gpt2() -> Any:
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    hf = transformers.GPT2LMHeadModel(config).double().eval()  # type: ignore[no-untyped-call]
    hf.config._attn_implementation = "eager"
    return hf


BUILDERS = [(c.id, c.build) for c in CASES] + [("gpt2", _gpt2)]


@pytest.mark.parametrize("build", [b for _, b in BUILDERS], ids=[i for i, _ in BUILDERS])
def test_fused_projections_equal_the_per_head_ones(build: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    model = from_hf(build(), dtype=torch.float64)
    tokens = torch.randint(3, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    fast = model(tokens)
    narrowed = model.run_from(tokens, 0, None, Recorder({}, set()), positions=[8, 2])
    monkeypatch.setattr(fused, "FUSED_CACHE_BYTES", 0)  # every layer projects per head
    model.__dict__.pop("_fused_cache", None)
    slow = model(tokens)
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)
    torch.testing.assert_close(narrowed, slow[:, [8, 2]], atol=1e-12, rtol=0)


def test_the_fused_copy_follows_in_place_edits_and_not_gradients() -> None:
    model = from_hf(_gpt2(), dtype=torch.float64)
    tokens = torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    before = model(tokens)
    cache = model.__dict__["_fused_cache"]
    with torch.no_grad():
        model._buffers["W_K"][1].mul_(2.0)  # type: ignore[index]
    after = model(tokens)
    assert not torch.allclose(before, after)
    model.__dict__.pop("_fused_cache")
    torch.testing.assert_close(after, model(tokens), atol=1e-12, rtol=0)  # a fresh copy gives the same numbers
    model._buffers["W_Q"].requires_grad_(True)  # type: ignore[union-attr]
    assert cache.get(model._buffers, 0) is None


@pytest.mark.parametrize(
    ("n_q", "offset", "dest", "window", "chunk"),
    [(10, 0, None, None, None), (10, 0, None, 3, None), (6, 4, None, None, None), (2, 0, [3, 9], None, None),
     (10, 0, None, None, 720), (6, 4, None, 2, 720)],
)  # fmt: skip
def test_sdpa_attention_equals_the_written_out_softmax(
    n_q: int,
    offset: int,
    dest: list[int] | None,
    window: int | None,
    chunk: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    g = torch.Generator().manual_seed(2)
    k, v = (torch.randn(2, 10, 3, 4, dtype=torch.float64, generator=g) for _ in range(2))
    q = torch.randn(2, n_q, 3, 4, dtype=torch.float64, generator=g)
    if chunk is not None:
        monkeypatch.setattr(forward, "ATTENTION_CHUNK_BYTES", chunk)  # several chunks of query rows
    at = torch.tensor(list(range(offset, offset + n_q)) if dest is None else dest)[:, None]
    src = torch.arange(10)[None]
    allowed = (src <= at) & (src > at - window) if window is not None else src <= at
    scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / 2.0
    expected = torch.einsum("bhqk,bkhe->bqhe", scores.masked_fill(~allowed, float("-inf")).softmax(-1), v)
    got = forward.chunked_attention(q, k, v, 2.0, None, window, offset, dest)
    torch.testing.assert_close(got, expected, atol=1e-14, rtol=0)


@pytest.mark.parametrize("build", [CASES[0].build, _gpt2], ids=[CASES[0].id, "gpt2"])
@pytest.mark.parametrize(
    ("site", "by"), [("z", ("layer", "head")), ("z", ("layer", "pos", "head")), ("attn_out", ("layer", "pos"))]
)
def test_resuming_the_patched_layer_equals_running_it_whole(
    build: Any, site: str, by: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    model = from_hf(build(), dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    clean = torch.randint(3, VOCAB, (2, 8), generator=g)
    corrupted = clean.clone()
    corrupted[:, 3] = torch.randint(3, VOCAB, (2,), generator=g)
    metric = causal.logit_diff(clean[:, -1].tolist(), [5])
    resumed = []
    real = staircase.resumed

    def spy(*args: Any) -> Any:
        resumed.append(real(*args))
        return resumed[-1]

    monkeypatch.setattr(staircase, "resumed", spy)
    monkeypatch.setattr(one_pass, "PINNED", False)  # the staircase path, whose passes resume
    fast = causal.patch(model, clean, corrupted, metric, site=site, by=by).values
    assert any(r is not None for r in resumed)
    monkeypatch.setattr(staircase, "RESUMABLE", frozenset())  # the layer run whole (and joined as a staircase)
    monkeypatch.setattr(planning, "RESUMABLE", frozenset())
    slow = causal.patch(model, clean, corrupted, metric, site=site, by=by).values
    torch.testing.assert_close(torch.as_tensor(fast), torch.as_tensor(slow), atol=1e-12, rtol=0)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given where there is no CUDA")
def test_the_benchmark_refuses_cuda_clearly_without_it() -> None:
    run = subprocess.run(
        [sys.executable, "benchmarks/bench_causal.py", "--device", "cuda"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 2
    assert "--device cuda: no CUDA device is available" in run.stderr and "--device cpu" in run.stderr
