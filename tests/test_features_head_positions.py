"""PromptFeatures follows heads: ``head_query=`` gives each head the token it attends to most from that query
(BOS left out), checked against the attention recomputed from the cached queries and keys; a head chosen in a
linked view moves the view's position and, through the link, every view linked by position (live here; the saved
page's link is vitest's ``shim.test.ts`` and the report's browser test)."""

from __future__ import annotations

import math

import pytest
import torch
from test_features_widgets import dictionary, model

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.features.prompt import strongest_sources

__all__ = ["dictionary", "model"]  # (the tiny model and dictionary of the widgets' tests, fixtures)


@pytest.fixture(scope="module")
def prompt() -> torch.Tensor:
    tokens = torch.randint(1, 40, (1, 14), generator=torch.Generator().manual_seed(5))
    tokens[0, 0] = 0
    return tokens


def _slow(model: CircuitModel, prompt: torch.Tensor, query: int) -> list[list[int]]:
    """Softmax of ``q·k / √d_head`` over the sources up to ``query``, recomputed per head; argmax without BOS."""
    _, cache = model.run_with_cache(prompt, names=["q", "k"])
    out = []
    for layer in range(model.cfg.n_layers):
        q, k = cache["q", layer][0].double(), cache["k", layer][0].double()  # [pos, head, d_head]
        row = []
        for head in range(model.cfg.n_heads):
            scores = [float(q[query, head] @ k[src, head]) / math.sqrt(model.cfg.d_head) for src in range(query + 1)]
            weights = [math.exp(s - max(scores)) for s in scores]
            candidates = range(1, query + 1) if query > 0 else range(1)
            row.append(max(candidates, key=lambda s: weights[s]))
        out.append(row)
    return out


@pytest.mark.parametrize("query", [13, 6, 1, 0])
def test_each_head_gets_the_token_it_attends_to_most_from_the_query(
    model: CircuitModel, prompt: torch.Tensor, query: int
) -> None:
    assert strongest_sources(model, prompt, query) == _slow(model, prompt, query)
    assert strongest_sources(model, prompt, query - 14) == _slow(model, prompt, query)  # (negative: from the end)


def test_a_head_chosen_in_a_linked_view_moves_the_position_of_every_view_linked_by_it(
    model: CircuitModel, prompt: torch.Tensor, dictionary: Dictionary
) -> None:
    features = cw.PromptFeatures(model, dictionary, prompt, k=3, head_query=-1)
    table = _slow(model, prompt, 13)
    assert features.head_positions == table
    attention = cw.AttentionPatterns.from_model(model, prompt[0])
    scores = cw.HeadScores.from_scores(torch.zeros(2, 3), name="zeros", model_name="tiny-mlp")
    cw.link(attention, features, scores)
    attention.selected_dest = 13
    scores.selected_layer, scores.selected_head = 1, 2
    assert features.selected_dest == attention.selected_dest == table[1][2]
    attention.selected_layer, attention.selected_head = 0, 1
    assert features.selected_dest == attention.selected_dest == table[0][1]
    assert (scores.selected_layer, scores.selected_head) == (0, 1)
    # a position chosen afterwards moves everything as before
    attention.selected_dest = 4
    assert features.selected_dest == 4
    # without head_query nothing follows the head
    plain = cw.PromptFeatures(model, dictionary, prompt, k=3)
    assert plain.head_positions == []
    other = cw.AttentionPatterns.from_model(model, prompt[0])
    cw.link(other, plain)
    other.selected_dest = 3
    other.selected_layer, other.selected_head = 1, 1
    assert plain.selected_dest == other.selected_dest == 3


def test_bad_head_queries_are_refused_naming_the_argument(
    model: CircuitModel, prompt: torch.Tensor, dictionary: Dictionary
) -> None:
    with pytest.raises(ArgumentError, match=r"head_query: .*\[-14, 14\).* 14"):
        cw.PromptFeatures(model, dictionary, prompt, head_query=14)
    with pytest.raises(ArgumentTypeError, match="head_query: expected an int, got float"):
        cw.PromptFeatures(model, dictionary, prompt, head_query=1.0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="head_query: expected a model"):
        cw.PromptFeatures(head_query=1)
    with pytest.raises(ArgumentError, match="query: "):
        strongest_sources(model, prompt, -15)
