"""A forward pass that keeps no pattern runs attention in chunks of query rows, so long texts fit.

The dense pass holds ``heads · pos²`` scores per layer: 128 GiB at 32K tokens and
32 heads. When neither ``attn_scores`` nor ``pattern`` is kept (a plain forward, or
the queries and keys a long-context attention view needs), attention is computed a
chunk of rows at a time with the same mask, window and soft-cap; these tests hold it
to the dense pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from families import CASES_BY_ID, Case

from circuitwidgets import AttentionPatterns, from_hf
from circuitwidgets.activations.value_paths import logit_effects, value_norms, value_weighted
from circuitwidgets.model import forward as forward_module
from circuitwidgets.model.forward import attention_mask, chunked_attention, soft_cap

#: A Llama with grouped-query heads whose context fits a text past LONG_TOKENS.
LONG_LLAMA = {"num_key_value_heads": 2, "max_position_embeddings": 4096}


def _dense(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, cap: float | None, window: int | None
) -> torch.Tensor:
    scores = soft_cap(torch.einsum("bqhe,bkhe->bhqk", q, k) / scale, cap)
    scores = scores.masked_fill(~attention_mask(q.shape[1], window, q.device), float("-inf"))
    return torch.einsum("bhqk,bkhe->bqhe", scores.softmax(-1), v)


@pytest.mark.parametrize(("window", "cap"), [(None, None), (5, None), (None, 2.0), (7, 3.0), (1, None)])
def test_chunks_of_rows_give_the_dense_weights(
    monkeypatch: pytest.MonkeyPatch, window: int | None, cap: float | None
) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 40, 3, 8, generator=g) for _ in range(3))
    monkeypatch.setattr(forward_module, "ATTENTION_CHUNK_BYTES", 4 * 2 * 3 * 40 * 6)  # 6 rows a chunk
    got = chunked_attention(q, k, v, 2.5, cap, window)
    torch.testing.assert_close(got, _dense(q, k, v, 2.5, cap, window), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("case_id", ["gemma2-softcaps-window", "mistral-window", "llama-mqa-linear-rope"])
def test_a_forward_keeping_no_pattern_equals_the_dense_one(monkeypatch: pytest.MonkeyPatch, case_id: str) -> None:
    model = from_hf(CASES_BY_ID[case_id].build())
    tokens = torch.randint(3, 64, (2, 50), generator=torch.Generator().manual_seed(1))
    dense_logits, dense = model.run_with_cache(tokens)  # keeps the patterns: the dense pass
    monkeypatch.setattr(forward_module, "ATTENTION_CHUNK_BYTES", 4 * 2 * model.cfg.n_heads * 50 * 7)  # 7 rows a chunk
    logits, chunked = model.run_with_cache(tokens, names=["z", "q", "k"])
    torch.testing.assert_close(logits, dense_logits, atol=1e-5, rtol=1e-5)
    for layer in range(model.cfg.n_layers):
        torch.testing.assert_close(chunked["z", layer], dense["z", layer], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(model(tokens), dense_logits, atol=1e-5, rtol=1e-5)


def test_keeping_no_pattern_is_estimated_without_the_square_of_the_length() -> None:
    model = from_hf(CASES_BY_ID["mistral-window"].build())
    n = 32_768
    with_patterns = model.forward_bytes(1, n, names={"pattern"})
    queries_and_keys = model.forward_bytes(1, n, names={"q", "k"})
    assert with_patterns > 2 * model.cfg.n_heads * n * n * 4  # kept and working patterns
    assert queries_and_keys < 512 * 2**20, f"{queries_and_keys:,} bytes"


def test_a_long_text_from_a_rotary_model_is_shown_from_its_queries_and_keys_exactly() -> None:
    n = 2_100  # over LONG_TOKENS: the long-context path
    model = from_hf(Case("llama-long", "LlamaConfig", "LlamaForCausalLM", LONG_LLAMA).build())
    ids = torch.randint(3, 64, (n,), generator=torch.Generator().manual_seed(2))
    w = AttentionPatterns(model, ids)
    assert w.qk is not None and w.patterns.shape[2] == 0
    _, cache = model.run_with_cache(ids[None], names=["pattern", "v", "z", "scale_final"])  # the dense forward
    norms, effects = value_norms(model, cache), logit_effects(model, cache, ids)
    # value norms and logit effects (from the chunked forward's z) equal the dense forward's
    assert w.value_norms is not None and w.logit_effect is not None
    np.testing.assert_allclose(w.value_norms, norms, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.logit_effect, effects, rtol=1e-4, atol=1e-5)
    for layer, head in [(0, 0), (1, 3)]:  # (head 3 reads key and value head 1: grouped-query attention)
        want = cache["pattern", layer][0, head]
        rows = [0, 1, 777, n - 1]
        got = torch.stack([w.qk.weights(layer, head, r, r + 1, 0, n)[0] for r in rows])
        np.testing.assert_allclose(got.numpy(), want[rows].numpy(), atol=1e-6)
        want_value = value_weighted(want[rows].numpy(), norms[layer, head])
        got_value = torch.stack([w.qk.weights(layer, head, r, r + 1, 0, n, "value")[0] for r in rows])
        np.testing.assert_allclose(got_value.numpy(), want_value, atol=1e-6)
