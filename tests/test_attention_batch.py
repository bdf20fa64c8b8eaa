"""AttentionPatterns over a batch of prompts: each prompt as the model computes it alone, a synced selector, links."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import traitlets
from _comm import Recorder, from_view

import circuitwidgets as cw
from circuitwidgets import AttentionPatterns
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.tokenizer import VocabTokenizer
from circuitwidgets.widgets.core.context import ContextLengthError

# three prompts of unequal length (BOS = 0 first): padded on the wire, never refused
PROMPTS = [[0, 5, 9, 3, 7, 5, 9, 3, 7, 11, 2, 5], [0, 4, 4, 8, 1, 13, 6], [0, 17, 2, 2, 9, 12, 3, 14, 1]]
ONE_STEP = 0.5 / 255 + 1e-6


@pytest.fixture
def model(random_model: Callable[..., CircuitModel]) -> CircuitModel:
    m = random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=20, n_ctx=16, biases=True)
    m.tokenizer = VocabTokenizer(["<bos>", *(f"w{i}" for i in range(1, 20))], bos_token_id=0)
    return m


@pytest.fixture
def batch(model: CircuitModel) -> AttentionPatterns:
    return AttentionPatterns(model, PROMPTS)


def alone(model: CircuitModel, ids: list[int]) -> dict[str, np.ndarray]:
    """One prompt's patterns, value-weighted patterns and logit effects, computed densely on it alone."""
    t = torch.tensor(ids)
    _, cache = model.run_with_cache(t[None])
    L, n = model.cfg.n_layers, len(ids)
    A = np.stack([cache["pattern", l][0].numpy() for l in range(L)])
    norms = np.stack(
        [
            torch.linalg.vector_norm(torch.einsum("phe,hed->hpd", cache["v", l][0], model.W_O[l]), dim=-1).numpy()
            for l in range(L)
        ]
    )
    weighted = A * norms[:, :, None, :]
    weighted /= weighted.sum(-1, keepdims=True)
    effect = np.full((L, model.cfg.n_heads, n), np.nan)
    for l in range(L):
        for i in range(n - 1):
            effect[l, :, i] = (cache["result", l][0][i] @ model.W_U[:, ids[i + 1]]).numpy()
    return {"A": A, "weighted": weighted, "effect": effect}


def test_each_prompt_of_a_batch_is_what_the_model_computes_on_it_alone(
    model: CircuitModel, batch: AttentionPatterns
) -> None:
    assert batch.n_prompts == 3 and batch.prompt_lengths == [12, 7, 9]
    assert (batch.n_layers, batch.n_heads) == (2, 3)
    for p, ids in enumerate(PROMPTS):
        batch.selected_prompt = p
        want = alone(model, ids)
        assert batch.tokens == model.to_str_tokens(torch.tensor(ids)) == batch.prompts[p]
        assert batch.n_tokens == len(ids)
        assert np.abs(batch.attention - want["A"]).max() <= ONE_STEP
        assert batch.value_attention is not None and np.abs(batch.value_attention - want["weighted"]).max() <= ONE_STEP
        assert batch.logit_effect is not None
        effect = batch.logit_effect[p, ..., : len(ids)]
        np.testing.assert_allclose(effect[..., :-1], want["effect"][..., :-1], rtol=1e-5, atol=1e-5)
        assert np.isnan(effect[..., -1]).all()
        # exactly what a widget of that prompt alone holds
        single = AttentionPatterns(model, ids)
        np.testing.assert_array_equal(batch.attention, single.attention)


def test_the_wire_pads_prompts_on_the_right_each_filling_its_own_triangle(batch: AttentionPatterns) -> None:
    width = 12
    assert batch.causal and batch.patterns.shape == (3, 2, 3, width * (width + 1) // 2)
    assert batch.value_patterns is not None and batch.value_patterns.shape == batch.patterns.shape
    assert batch.value_norms is not None and batch.value_norms.shape == (3, 2, 3, width)
    for p, n in enumerate(batch.prompt_lengths):
        assert (batch.patterns[p, ..., n * (n + 1) // 2 :] == 0).all(), "padding is zero"
        assert (batch.value_norms[p, ..., n:] == 0).all()
        assert np.isnan(batch.logit_effect[p, ..., n:]).all()  # type: ignore[index]
        # each row of the prompt's own triangle sums to ~255 (a distribution), padding rows are absent
        tri = batch.patterns[p, 0, 0, : n * (n + 1) // 2].astype(int)
        starts = [i * (i + 1) // 2 for i in range(n + 1)]
        assert all(abs(tri[a:b].sum() - 255) <= (b - a) for a, b in itertools.pairwise(starts))


@pytest.mark.parametrize(
    "prompts",
    [
        torch.tensor([PROMPTS[0][:8], PROMPTS[2][:8]]),  # ids [batch, pos]
        np.array([PROMPTS[0][:8], PROMPTS[2][:8]]),
        [PROMPTS[0][:8], PROMPTS[2][:8]],  # token-id lists
        ["w5 w9 w3 w7 w5 w9 w3", "w17 w2 w2 w9 w12 w3 w14"],  # texts (BOS prepended to each)
    ],
)
def test_a_tensor_a_list_of_token_lists_and_a_list_of_texts_are_batches(model: CircuitModel, prompts: Any) -> None:
    w = AttentionPatterns(model, prompts)
    assert w.n_prompts == 2 and w.prompt_lengths == [8, 8]
    assert w.prompts[1][:3] == ["<bos>", "w17", "w2"]
    w.selected_prompt = 1
    np.testing.assert_array_equal(w.attention, AttentionPatterns(model, PROMPTS[2][:8]).attention)


def test_a_batch_of_one_is_one_prompt(model: CircuitModel) -> None:
    for one in ([PROMPTS[1]], torch.tensor([PROMPTS[1]]), ["w4 w4 w8"]):
        w = AttentionPatterns(model, one)
        assert w.prompts == [] and w.n_prompts == 1 and w.patterns.ndim == 3


def test_choosing_a_prompt_from_the_view_reaches_python_and_clears_positions_past_its_end(
    batch: AttentionPatterns,
) -> None:
    rec = Recorder()
    batch._send = rec  # type: ignore[method-assign]
    seen: list[Any] = []
    batch.observe(lambda change: seen.append(change["new"]), "selected_prompt")
    batch.selected_dest, batch.selected_src = 11, 3
    from_view(batch, selected_prompt=1)
    assert batch.selected_prompt == 1 and seen == [1]
    assert batch.tokens == batch.prompts[1]
    assert (batch.selected_dest, batch.selected_src) == (-1, 3), "11 is past prompt 1's 7 tokens; 3 is not"
    sent = {k for update in rec.updates() for k in update}
    assert {"tokens", "selected_dest"} <= sent
    # a prompt and a position in one update: the position is checked against that prompt
    from_view(batch, selected_prompt=2, selected_dest=8)
    assert (batch.selected_prompt, batch.selected_dest) == (2, 8)
    from_view(batch, selected_prompt=1, selected_dest=7)  # prompt 1 has 7 tokens: refused whole
    assert (batch.selected_prompt, batch.selected_dest) == (2, 8)
    with pytest.raises(
        traitlets.TraitError, match=r"'selected_prompt' trait of AttentionPatterns expected 0\.\.2, got 3"
    ):
        batch.selected_prompt = 3


def test_from_arrays_takes_a_batch_padded_on_the_right_or_one_array_per_prompt(
    model: CircuitModel, batch: AttentionPatterns
) -> None:
    width = 12
    padded = np.zeros((3, 2, 3, width, width), dtype=np.float32)
    norms = np.zeros((3, 2, 3, width), dtype=np.float32)
    per_prompt = []
    for p, ids in enumerate(PROMPTS):
        n = len(ids)
        padded[p, ..., :n, :n] = alone(model, ids)["A"]
        padded[p, ..., n:, :] = 1.0 / width  # what a padded row may hold: never read
        norms[p, ..., :n] = 1.0 + p
        per_prompt.append(alone(model, ids)["A"])
    tokens = batch.prompts
    for attention in (padded, torch.from_numpy(padded), per_prompt):
        w = AttentionPatterns.from_arrays(
            tokens, attention, value_norms=norms if attention is padded else None, selected_prompt=2
        )
        assert w.n_prompts == 3 and w.tokens == tokens[2] and w.causal
        for p in range(3):
            w.selected_prompt = p
            np.testing.assert_array_equal(
                w.attention, AttentionPatterns.from_arrays(tokens[p], per_prompt[p]).attention
            )
    assert AttentionPatterns.from_arrays(tokens, padded, value_norms=norms).value_attention is not None


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            lambda t, a: (t[:2], a),
            ShapeError,
            r"attention: expected one entry per prompt \(2 prompts in tokens\) along the first axis, got 3",
        ),
        (
            lambda t, a: (t, a[:, :, :, :11, :11]),
            ShapeError,
            r"attention\[0\]: expected \[\.\.\., 12, 12\] \(the longest prompt's 12 tokens",
        ),
        (
            lambda t, a: ([t[0], [*t[1], "x"], t[2]], a * np.float32(0.5)),
            ArgumentError,
            r"attention\[0\]: expected weights .*summing to 1",
        ),
        (
            lambda t, a: ([t[0], [1, 2], t[2]], a),
            ArgumentTypeError,
            r"tokens\[1\]: expected str entries, got int at index 0",
        ),
        (lambda t, a: ([t[0], [], t[2]], a), ShapeError, r"tokens\[1\]: expected at least one token"),
    ],
)
def test_bad_batches_from_arrays_name_the_argument_and_the_prompt(
    batch: AttentionPatterns, change: Any, error: type[Exception], message: str
) -> None:
    padded = np.zeros((3, 2, 3, 12, 12), dtype=np.float32)
    for p, n in enumerate(batch.prompt_lengths):
        padded[p, ..., :n, :n] = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    tokens, attention = change(batch.prompts, padded)
    with pytest.raises(error, match=message):
        AttentionPatterns.from_arrays(tokens, attention)


def test_a_padded_prompt_whose_rows_attend_to_padding_is_refused(batch: AttentionPatterns) -> None:
    # a left-padded or unmasked batch: prompt 1's own rows give weight to positions past its end
    padded = np.tile(np.tril(np.ones((12, 12))) / np.arange(1, 13)[:, None], (3, 1, 1, 1, 1)).astype(np.float32)
    padded[1, 0, 0, 6, :] = 1.0 / 12
    with pytest.raises(
        ArgumentError,
        match=r"attention\[1\]: expected weights in \[0, 1\] with each destination's weights over sources summing to 1",
    ):
        AttentionPatterns.from_arrays(batch.prompts, padded)


def test_from_cache_reads_our_cache_of_a_batch(model: CircuitModel) -> None:
    ids = torch.tensor([PROMPTS[0][:9], PROMPTS[2]])
    _, cache = model.run_with_cache(ids, names=["pattern"])
    w = AttentionPatterns.from_cache(cache, [model.to_str_tokens(row) for row in ids])
    want = AttentionPatterns(model, ids)
    for p in range(2):
        w.selected_prompt = want.selected_prompt = p
        np.testing.assert_array_equal(w.attention, want.attention)
    with pytest.raises(ShapeError, match=r"tokens: expected one token list per prompt of the cache \(2\), got 3"):
        AttentionPatterns.from_cache(cache, [["a"] * 9] * 3)
    with pytest.raises(
        ArgumentError, match=r"cache: expected 'pattern' for each of n_layers=3 layers, missing layer 2"
    ):
        AttentionPatterns.from_cache(cache, [model.to_str_tokens(row) for row in ids], n_layers=3)
    with pytest.raises(ArgumentError, match=r"cache: expected attention patterns"):
        AttentionPatterns.from_cache({}, [["a"]])


def test_from_cache_reads_a_transformer_lens_cache_of_a_right_padded_batch() -> None:
    pytest.importorskip("transformer_lens")
    native = pytest.importorskip("transformer_lens.model_bridge.sources.native")
    from transformer_lens.config import TransformerBridgeConfig

    cfg = TransformerBridgeConfig(
        d_model=16, d_head=4, n_heads=2, n_layers=2, n_ctx=16, d_vocab=20,
        attn_only=True, normalization_type=None, positional_embedding_type="standard", seed=0,
    )  # fmt: skip
    bridge = native.boot(cfg, dtype=torch.float64)
    long, short = [3, 5, 9, 3, 5, 9, 1, 2], [7, 7, 4, 2, 8]
    # right-padded: the causal mask keeps the padding out of short's rows
    padded = torch.tensor([long, [*short, 0, 0, 0]])
    _, cache = bridge.run_with_cache(padded)
    w = AttentionPatterns.from_cache(cache, [[f"t{i}" for i in long], [f"t{i}" for i in short]], selected_prompt=1)
    assert w.prompt_lengths == [8, 5] and w.n_tokens == 5 and w.n_layers == 2
    _, alone_cache = bridge.run_with_cache(torch.tensor([short]))
    want = np.stack([alone_cache["pattern", l][0].detach().numpy() for l in range(2)])
    assert np.abs(w.attention - want).max() <= ONE_STEP


def test_bad_batches_from_a_model_are_refused_before_any_forward_pass(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model, "run_with_cache", lambda *a, **k: pytest.fail("ran the model"))
    with pytest.raises(
        ContextLengthError, match=r"text_or_tokens\[1\]: expected at most n_ctx=16 tokens .*got 20.*window=16"
    ):
        AttentionPatterns(model, [PROMPTS[0], list(range(20))])
    with pytest.raises(ArgumentError, match=r"text_or_tokens\[0\]: expected ids in \[0, 20\)"):
        AttentionPatterns(model, [[0, 25], PROMPTS[1]])
    with pytest.raises(ArgumentError, match=r"window: applies to one text, got a batch of 3 prompts"):
        AttentionPatterns(model, PROMPTS, window=8)
    monkeypatch.setattr("circuitwidgets.widgets.attention.codec.MAX_STATE_BYTES", 1000)
    with pytest.raises(MemoryBudgetError, match=r"3 prompts × 2 layers × 3 heads over 12 tokens"):
        AttentionPatterns(model, PROMPTS)


def test_a_batch_is_encoded_at_once(model: CircuitModel) -> None:
    with pytest.raises(ArgumentError, match=r"stream: a batch of prompts, or a text in windows, is encoded at once"):
        AttentionPatterns(model, PROMPTS, stream=True)


def test_set_data_takes_a_batch_and_back(batch: AttentionPatterns) -> None:
    batch.selected_prompt, batch.selected_dest = 2, 8
    tokens = [["a", "b", "c"], ["d", "e"]]
    attention = [np.tril(np.ones((n, n)))[None] / np.arange(1, n + 1)[:, None] for n in (3, 2)]
    batch.set_data(tokens, attention)
    assert (batch.n_prompts, batch.selected_prompt, batch.selected_dest, batch.tokens) == (2, 0, -1, ["a", "b", "c"])
    assert batch.value_patterns is None and batch.n_layers == 1
    batch.set_data(["x", "y"], attention[1])
    assert batch.prompts == [] and batch.n_prompts == 1 and batch.tokens == ["x", "y"]


def test_linked_batches_choose_prompts_together_and_positions_only_when_every_prompt_has_as_many_tokens(
    model: CircuitModel, batch: AttentionPatterns
) -> None:
    other = AttentionPatterns(model, [list(reversed(p)) for p in PROMPTS])  # same lengths, other tokens
    single = AttentionPatterns(model, PROMPTS[0])
    group = cw.link(batch, other)
    assert group.names == ("selected_layer", "selected_head", "selected_prompt", "selected_dest", "selected_src")
    other.selected_prompt = 2
    assert batch.selected_prompt == 2
    batch.selected_dest = 8
    assert other.selected_dest == 8
    # a page saved now links the same (data-cw-link on each widget), offline
    page = cw.export.html_page([batch, other])
    assert (
        len(re.findall(r'data-cw-link="selected_layer selected_head selected_prompt selected_dest selected_src"', page))
        == 2
    )
    # a single text: heads follow, but it has no prompt to follow, and its 12 tokens are not every prompt's
    joined = cw.link(batch, single)
    assert joined.names == ("selected_layer", "selected_head", "selected_prompt")
    assert single.selected_prompt == 0
    joined.unlink()
    equal = AttentionPatterns(model, torch.tensor([PROMPTS[0][:8], PROMPTS[2][:8]]))
    assert cw.link(equal, AttentionPatterns(model, PROMPTS[0][:8])).names == (
        "selected_layer",
        "selected_head",
        "selected_dest",
        "selected_src",
    )


def test_a_slow_build_shows_a_progress_bar(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("circuitwidgets.widgets.attention.source.BAR_DELAY_S", 0.0)  # (every build is "slow")
    AttentionPatterns(model, PROMPTS, progress_bar=True)
    err = capsys.readouterr().err
    heads = 2 * len(PROMPTS) * 2 * 3  # raw and value-weighted, every prompt, layer and head
    assert re.search(rf"AttentionPatterns: .*/{heads} ", err), err[-300:]
    assert "0it" not in err, "one bar, no empty second one"
    AttentionPatterns(model, PROMPTS, progress_bar=False)
    assert "AttentionPatterns" not in capsys.readouterr().err
    # a build under a second makes no bar at all (in a notebook: no widget models left behind)
    monkeypatch.setattr("circuitwidgets.widgets.attention.source.BAR_DELAY_S", 60.0)
    AttentionPatterns(model, PROMPTS, progress_bar=True)
    assert "AttentionPatterns" not in capsys.readouterr().err
