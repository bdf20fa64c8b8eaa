"""Findings on the shipped two-layer model with MLPs (``gelu-2l``), weight space and causal.

The shipped attention-only models show the paper's induction circuit; this one
has it too, next to GELU MLPs. Each test checks one claim on the shipped
weights, on repeated random tokens ``[BOS] r r`` or on held-out standard-library
code (the training corpus's validation files, a split stable by path hash);
the measured figures are in the comments. The README's "Findings (causal)"
table comes from these tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets import causal, circuits
from circuitwidgets.circuits import MLPPathsExcludedWarning
from circuitwidgets.training.corpus import load_stdlib_corpus

NAME = "gelu-2l"
HALF = 50  # length of r in [BOS] r r
#: Positions of the repeated half read by the direct logit attribution (each predicts r's next token).
REPEATED_POSITIONS = (HALF + 5, HALF + 17, HALF + 29, HALF + 41)


@pytest.fixture(scope="module")
def model() -> cw.CircuitModel:
    return cw.load_pretrained(NAME)


@pytest.fixture(scope="module")
def repeated(model: cw.CircuitModel) -> torch.Tensor:
    return circuits.repeated_random_tokens(model, seq_len=HALF, n_seqs=16, seed=0)  # [16, 1 + 2 · 50]


@pytest.fixture(scope="module")
def held_out(model: cw.CircuitModel) -> torch.Tensor:
    """Every held-out file of the standard library, tokenised and concatenated (about 400k tokens)."""
    val = load_stdlib_corpus().val
    return torch.tensor([i for text in val for i in model.tokenizer.encode(text)], dtype=torch.long)


@pytest.fixture(scope="module")
def layer_one(model: cw.CircuitModel, held_out: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over 64 held-out windows of 255 tokens: each token's text, the next token's text, and the layer-1 neurons'
    activations ``[token, neuron]``."""
    windows = _windows(held_out, 64, 256)
    _, cache = model.run_with_cache(windows[:, :-1], names=["mlp_post"])
    text = model.tokenizer.token_str
    strings = np.array([text(int(i)) for i in windows[:, :-1].flatten()])
    after = np.array([text(int(i)) for i in windows[:, 1:].flatten()])
    return strings, after, cache["mlp_post", 1].flatten(0, 1).numpy()


def _windows(ids: torch.Tensor, n: int, length: int) -> torch.Tensor:
    """``n`` windows of ``length`` tokens spread evenly over ``ids``, each after a BOS: ``[n, 1 + length]``."""
    starts = torch.linspace(0, len(ids) - length - 1, n).long().tolist()
    return torch.stack([torch.cat([torch.zeros(1, dtype=torch.long), ids[s : s + length]]) for s in starts])


def _induction_heads(model: cw.CircuitModel) -> list[int]:
    """Layer-1 heads with an induction score of at least 0.1 (L1H3, L1H5, L1H6)."""
    return [int(h) for h in np.flatnonzero(circuits.head_scores(model, "induction")[1] >= 0.1)]


def test_a_previous_token_head_feeds_the_induction_heads_by_k_composition(model: cw.CircuitModel) -> None:
    previous = circuits.head_scores(model, "previous_token")[0]
    # measured: L0H3 0.645; the next layer-0 head L0H6 0.253
    assert int(np.argmax(previous)) == 3 and previous[3] > 0.5
    assert np.sort(previous)[-2] < 0.35
    induction = circuits.head_scores(model, "induction")[1]
    # measured: L1H3 0.344, L1H6 0.281, L1H5 0.169; every other layer-1 head at most 0.004
    assert int(np.argmax(induction)) == 3 and induction[3] > 0.25
    assert induction[6] > 0.2 and induction[5] > 0.1
    assert np.delete(induction, [3, 5, 6]).max() < 0.02
    with pytest.warns(MLPPathsExcludedWarning):
        k = circuits.composition_scores(model, "K", baseline=True)[0, :, 1, :]  # [layer-0 head, layer-1 head]
    # measured above baseline: L0H3 -> L1H3 0.0546, -> L1H6 0.0543, -> L1H5 0.0458
    assert k[3, 3] > 0.04 and k[3, 6] > 0.04 and k[3, 5] > 0.03
    # the previous-token head is each induction head's strongest K source: next best into L1H3 is L0H6, 0.0254
    for head in (3, 5, 6):
        assert int(np.argmax(k[:, head])) == 3
    assert k[3, 3] > 1.7 * np.delete(k[:, 3], 3).max()  # measured 2.15 times


def test_on_the_repeated_half_layer_one_attention_writes_the_answer_through_the_induction_heads(
    model: cw.CircuitModel, repeated: torch.Tensor
) -> None:
    """Direct logit attribution to the correct next token, at positions of the second copy of ``r`` and at the
    same positions of the first copy (same answers: the difference is what repetition adds)."""
    labels = ["embed", "L0 attn", "L0 mlp", "L1 attn", "L1 mlp"]
    second: list[np.ndarray] = []
    first: list[np.ndarray] = []
    heads: list[np.ndarray] = []
    for p in REPEATED_POSITIONS:
        for store, q in ((second, p), (first, p - HALF)):
            a = causal.logit_attribution(model, repeated, repeated[:, q + 1], by="component", pos=q, reduce="none")
            assert a.labels["component"] == labels
            rest = sum(a.extra["rest"].values())  # the unembedding's bias
            # the components sum to the model's logits (measured: to 6e-6)
            np.testing.assert_allclose(a.values.sum(-1) + rest, a.extra["model_logits"], atol=1e-3)
            store.append(a.values)
        h = causal.logit_attribution(model, repeated, repeated[:, p + 1], by="head", pos=p, reduce="none")
        r = h.extra["rest"]
        np.testing.assert_allclose(h.values.sum((-1, -2)) + sum(r.values()), h.extra["model_logits"], atol=1e-3)
        np.testing.assert_allclose(h.values[:, 1].sum(-1) + r["L1 attn bias"], second[-1][:, 3], atol=1e-6)
        heads.append(h.values)
    two = np.concatenate(second).mean(0)  # [component]
    one = np.concatenate(first).mean(0)
    per_head = np.concatenate(heads).mean(0)  # [layer, head]
    # measured (mean direct logit of the correct token): second half embed 0.01, L0 attn -0.22, L0 mlp -1.81,
    # L1 attn +2.41, L1 mlp -0.89; first half 0.01, -0.18, -2.02, -0.07, -0.86
    assert two[3] > 1.5 and one[3] < 0.5
    gain = two - one
    assert gain.sum() > 2.0  # measured: the answer's logit rises by 2.62 with repetition
    assert gain[3] > 0.75 * gain.sum()  # layer-1 attention: 2.48 of the 2.62 (0.95)
    # the MLPs push the random answer down in both halves and barely change with repetition (+0.22, -0.04)
    assert two[2] < 0 and two[4] < 0 and one[2] < 0 and one[4] < 0
    assert abs(gain[2]) + abs(gain[4]) < 0.3 * gain[3]  # 0.25 against 2.48
    induction = _induction_heads(model)
    assert induction == [3, 5, 6]
    carried = per_head[1, induction].sum()
    # measured: L1H3 1.24, L1H6 0.86, L1H5 0.84 = 2.95; all heads with a positive share 3.16; attention layers 2.19
    assert carried > 0.8 * per_head[per_head > 0].sum()  # 0.93
    assert carried > two[1] + two[3]  # more than the attention layers' whole share (biases and L1H0 pull it down)


def test_logit_lens_the_repeated_token_becomes_the_prediction_only_after_layer_one(
    model: cw.CircuitModel, repeated: torch.Tensor, held_out: torch.Tensor
) -> None:
    # repeated held-out code [BOS] p p, 16 passages of 100 tokens: is the next token the lens's top-1?
    n = 100
    passages = _windows(held_out, 16, n)[:, 1:]
    code = torch.cat([torch.zeros(16, 1, dtype=torch.long), passages, passages], dim=1)
    lens = causal.logit_lens(model, code, k=10)
    assert lens.layer_labels == ["before L0", "before L1", "final"]
    first, second = np.arange(1, n), np.arange(n + 1, 2 * n)

    def top1(ids: torch.Tensor, top: np.ndarray, positions: np.ndarray, k: int = 1) -> np.ndarray:
        hits = top[:, :, positions, :k] == ids[:, positions + 1].numpy()[None, :, :, None]
        rate: np.ndarray = hits.any(-1).mean((1, 2))  # per lens row
        return rate

    one, two = top1(code, lens.top_ids, first), top1(code, lens.top_ids, second)
    # measured: first half 0.016, 0.196, 0.460; second half 0.016, 0.192, 0.640
    assert abs(two[1] - one[1]) < 0.05  # before L1 (after L0's heads and MLP) repetition has not helped yet
    assert two[2] - one[2] > 0.1  # after layer 1 it has: +0.18
    assert two[2] > 0.5
    # random tokens: the answer rises in rank only after layer 1, but rarely reaches the top
    lens = causal.logit_lens(model, repeated, k=10)
    first, second = np.arange(1, HALF), np.arange(HALF + 1, 2 * HALF)
    r1, r10 = top1(repeated, lens.top_ids, second), top1(repeated, lens.top_ids, second, k=10)
    f10 = top1(repeated, lens.top_ids, first, k=10)
    # measured: top-1 0, 0, 0.015; top-10 0.005, 0.005, 0.064 (first half 0.005, 0.006, 0.006)
    assert r1[:2].max() == 0 and r1[2] < 0.05
    assert r10[2] > 0.03 and r10[2] > 5 * max(r10[1], f10[2])
    lp = np.stack([lens.log_prob(int(repeated[0, p + 1]))[:, 0, p] for p in second])  # prompt 0 only, [pos, row]
    # measured (prompt 0): -15.1, -14.7, -11.1
    assert lp.mean(0)[2] - lp.mean(0)[1] > 1.5


def test_the_top_logit_neuron_on_held_out_code_fires_on_quotes_and_predicts_a_line_break(
    model: cw.CircuitModel, held_out: torch.Tensor, layer_one: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    # direct logit attribution of each neuron to the correct next token after 192 windows of 64 held-out tokens
    windows = _windows(held_out, 192, 65)
    tokens, answers = windows[:, :-1], windows[:, -1]
    parts = [
        causal.logit_attribution(model, tokens[i : i + 32], answers[i : i + 32], by="neuron").values
        * len(tokens[i : i + 32])
        for i in range(0, len(tokens), 32)
    ]
    mean: np.ndarray = np.sum(parts, axis=0) / len(tokens)  # [layer, neuron]
    order = np.argsort(-mean.ravel())
    best, runner = divmod(int(order[0]), model.cfg.d_mlp or 0), float(mean.ravel()[order[1]])
    # measured: L1N317 0.26 (0.21 and 0.22 on two other samples), next L1N398 0.10
    assert best == (1, 317) and mean[best] > 0.15 and mean[best] > 1.3 * runner
    # its max-activating examples (the layer_one fixture's held-out windows)
    strings, after, post = layer_one
    quote = np.array(["'" in s or '"' in s for s in strings])
    act = post[:, 317]
    top = np.argsort(-act)[:50]
    # measured: all 50 strongest activations are on a quote token (mostly a string closing a line: `\n'`),
    # 40 of them followed by a newline; mean activation 2.11 on quote tokens against 0.018 elsewhere
    assert quote[top].mean() > 0.9
    assert np.mean([s.startswith("\n") for s in after[top]]) > 0.6
    assert act[quote].mean() > 20 * act[~quote].mean()
    # what it writes: 9 of the 10 tokens whose logits it raises most are a newline and indentation
    W_out = model.weight("W_out")
    assert W_out is not None
    boost = W_out[1, 317] @ model.W_U
    raised = [model.tokenizer.token_str(int(i)) for i in (boost - boost.mean()).topk(10).indices]
    assert sum(s.startswith("\n") for s in raised) >= 8


def test_an_indentation_neuron_predicts_the_start_of_a_word(
    model: cw.CircuitModel, layer_one: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    # L1N779, in the top four of the direct logit attribution above on every sample measured (0.08-0.16)
    strings, after, post = layer_one
    blank = np.array([s != "" and s.strip() == "" for s in strings])  # whitespace-only tokens (indentation)
    act = post[:, 779]
    top = np.argsort(-act)[:50]
    # measured: all 50 strongest activations are on whitespace-only tokens, each followed by a token that starts
    # with a space; mean activation 6.03 on whitespace-only tokens against 0.10 elsewhere
    assert blank[top].mean() > 0.9
    assert np.mean([s.startswith(" ") for s in after[top]]) > 0.9
    assert act[blank].mean() > 20 * act[~blank].mean()
    # it raises words: the 10 tokens whose logits it raises most all are a space then a letter (' G', ' dist', ...)
    W_out = model.weight("W_out")
    assert W_out is not None
    boost = W_out[1, 779] @ model.W_U
    raised = [model.tokenizer.token_str(int(i)) for i in (boost - boost.mean()).topk(10).indices]
    assert sum(s[:1] == " " and s[1:2].isalpha() for s in raised) >= 8
