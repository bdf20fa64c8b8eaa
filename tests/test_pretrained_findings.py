"""The paper's findings, measured on the shipped models (issue 5).

Each test states one claim of *A Mathematical Framework for Transformer
Circuits* and checks it on the weights we ship.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets import circuits
from circuitwidgets.training.corpus import load_stdlib_corpus


@pytest.fixture(scope="module")
def zero_layer() -> cw.CircuitModel:
    return cw.load_pretrained("attn-only-0l")


@pytest.fixture(scope="module")
def one_layer() -> cw.CircuitModel:
    return cw.load_pretrained("attn-only-1l")


@pytest.fixture(scope="module")
def two_layer() -> cw.CircuitModel:
    return cw.load_pretrained("attn-only-2l")


PASSAGE = '''def read_config(self, path):
    """Read the configuration file at path."""
    with open(path) as handle:
        for line in handle:
            key, value = line.split("=", 1)
            self.options[key.strip()] = value.strip()
    return self.options
'''


def _next_token_loss(model: cw.CircuitModel, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return torch.nn.functional.cross_entropy(logits[0, :-1], tokens[0, 1:], reduction="none")


def test_shipped_models_are_listed() -> None:
    assert {"attn-only-0l", "attn-only-1l", "attn-only-2l"} <= set(cw.list_pretrained())


def test_zero_layer_bigrams_after_def_come_names(zero_layer: cw.CircuitModel) -> None:
    # In indented code the keyword is the token " def"; a name follows it, as a
    # separate space-prefixed token.
    logits = zero_layer.W_E @ zero_layer.W_U
    (def_id,) = zero_layer.tokenizer.encode(" def")
    top = [zero_layer.tokenizer.token_str(int(i)) for i in logits[def_id].topk(10).indices]
    names = [t for t in top if t.startswith(" ") and t[1:].isidentifier()]
    assert len(names) >= 7, top


def test_zero_layer_bigrams_after_open_paren_come_self_or_names(zero_layer: cw.CircuitModel) -> None:
    logits = zero_layer.W_E @ zero_layer.W_U
    paren = zero_layer.to_tokens("(", prepend_bos=False)[0, 0]
    top = [zero_layer.tokenizer.token_str(int(i)).strip() for i in logits[paren].topk(10).indices]
    assert "self" in top[:3], top
    assert sum(t.isidentifier() for t in top) >= 6, top


def test_zero_layer_beats_unigram_loss_on_held_out_code(zero_layer: cw.CircuitModel) -> None:
    # Unigram frequencies from an eighth of the training files (add-one
    # smoothed); both models scored on the held-out files of the same split.
    corpus = load_stdlib_corpus()
    counts = torch.ones(zero_layer.cfg.d_vocab, dtype=torch.float64)
    for text in corpus.train[::8]:
        counts += torch.bincount(
            torch.tensor(zero_layer.tokenizer.encode(text), dtype=torch.long), minlength=zero_layer.cfg.d_vocab
        )
    log_unigram = (counts / counts.sum()).log()
    ids = torch.tensor([i for text in corpus.val for i in zero_layer.tokenizer.encode(text)][:50_000])
    log_bigram = (zero_layer.W_E[ids[:-1]] @ zero_layer.W_U).double().log_softmax(-1)
    bigram = -log_bigram.gather(-1, ids[1:, None]).mean().item()
    unigram = -log_unigram[ids[1:]].mean().item()
    assert bigram < unigram - 1.0, (bigram, unigram)


def test_one_layer_has_strong_copying_heads(one_layer: cw.CircuitModel) -> None:
    scores = circuits.copying_scores(one_layer, circuit="ov", method="eigen")
    assert scores.max() > 0.9, scores
    assert (scores > 0.5).sum() >= 2, scores


def test_one_layer_most_heads_are_copying_heads(one_layer: cw.CircuitModel) -> None:
    """The paper's one-layer finding: a majority of heads have OV eigenvalue copying scores above 0.5."""
    scores = circuits.copying_scores(one_layer, circuit="ov", method="eigen")
    assert scores.shape == (1, one_layer.cfg.n_heads) and one_layer.cfg.n_heads >= 8
    assert (scores > 0.5).sum() > one_layer.cfg.n_heads / 2, scores


def test_one_layer_skip_trigram_tables_contain_copying_triples(one_layer: cw.CircuitModel) -> None:
    scores = circuits.copying_scores(one_layer, circuit="ov", method="eigen")[0]
    head = int(np.argmax(scores))
    records = circuits.skip_trigrams(one_layer, 0, head, k=50)
    assert any(r.copying for r in records)


def test_two_layer_has_a_previous_token_head_in_layer_0(two_layer: cw.CircuitModel) -> None:
    prev = circuits.head_scores(two_layer, kind="previous_token")
    assert prev[0].max() >= 0.5, prev


def test_two_layer_has_an_induction_head_in_layer_1(two_layer: cw.CircuitModel) -> None:
    ind = circuits.head_scores(two_layer, kind="induction")
    assert ind[1].max() >= 0.5, ind


def test_induction_head_reads_the_previous_token_head_by_k_composition(two_layer: cw.CircuitModel) -> None:
    prev = circuits.head_scores(two_layer, kind="previous_token")
    ind = circuits.head_scores(two_layer, kind="induction")
    prev_head, ind_head = int(prev[0].argmax()), int(ind[1].argmax())
    k = circuits.composition_scores(two_layer, kind="K", baseline=True)
    assert int(np.nanargmax(k[0, :, 1, ind_head])) == prev_head or int(np.nanargmax(k[0, prev_head, 1, :])) == ind_head
    assert k[0, prev_head, 1, ind_head] > 0


def test_induction_heads_sit_in_the_extreme_corner(two_layer: cw.CircuitModel) -> None:
    ind = circuits.head_scores(two_layer, kind="induction")
    head = int(ind[1].argmax())
    ov = circuits.copying_scores(two_layer, circuit="ov", method="eigen")
    qk = circuits.copying_scores(two_layer, circuit="qk_kcomp", method="eigen")
    assert ov[1, head] > 0.5, ov
    assert qk[1, head] > 0.5, qk


def test_second_copy_of_repeated_random_tokens_is_predicted(two_layer: cw.CircuitModel) -> None:
    g = torch.Generator().manual_seed(0)
    n = 100
    rand = torch.randint(1, two_layer.cfg.d_vocab, (1, n), generator=g)
    bos = torch.tensor([[two_layer.tokenizer.bos_token_id]])
    tokens = torch.cat([bos, rand, rand], dim=1)
    loss = _next_token_loss(two_layer, tokens)
    first, second = loss[1:n].mean().item(), loss[n + 1 :].mean().item()
    assert second < first - 2.0, (first, second)


def test_order_one_terms_matter_far_more_than_order_two(two_layer: cw.CircuitModel) -> None:
    tokens = two_layer.to_tokens(PASSAGE)
    result = circuits.term_importance(two_layer, tokens, max_order=2)
    marginal = result.marginal
    assert math.isfinite(marginal[1]) and math.isfinite(marginal[2])
    assert marginal[1] > 3 * abs(marginal[2]), marginal
