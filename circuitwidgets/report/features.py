"""The report's features part: the features the induction answer reads, and the attribution graph of that answer.

For a model with dictionaries (a shipped model's, or ``circuitwidgets report --dictionaries DIR``), on the
report's own prompt (the first sequence of repeated random tokens of the causal sections, so positions line up
with the head views):

- :class:`~circuitwidgets.PromptFeatures` of the last layer's dictionary at every token, linked to a
  :class:`~circuitwidgets.FeatureDashboard` of all its features read over held-out code (dense features marked);
- where the dictionaries hold a transcoder for every layer, the attribution graph of the same next-token
  prediction (:func:`circuitwidgets.graphs.attribution_graph`), drawn by :class:`~circuitwidgets.AttributionGraph`
  with the induction circuit pinned and grouped: the answer's token in the first copy, the features at the last
  token, and the answer's logit.

Every number the text quotes is formatted from the computed result. Returns ``(title, explanation HTML, widget)``
triples, as :mod:`circuitwidgets.report.causal` does.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from circuitwidgets._text import visible_label, visible_token
from circuitwidgets.causal.induction import InductionTest
from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.model import CircuitModel

__all__ = ["CORPUS_ROWS", "corpus_rows", "features_sections", "shown_dictionary", "transcoders_of"]

#: The dashboard reads this many rows of held-out code, of this many tokens each (BOS first).
CORPUS_ROWS = (32, 64)

#: Top contexts kept per feature in the page (no random sample: the page holds every feature of the dictionary).
TOP_K = 6

Triple = tuple[str, str, Any]


def shown_dictionary(dictionaries: Mapping[str, Dictionary]) -> str:
    """Name of the dictionary the features part shows: the last layer's transcoder, else the latest-layer one."""
    names = list(dictionaries)
    if not names:
        raise ArgumentError("dictionaries: expected at least one dictionary of the model, got none")

    def rank(name: str) -> tuple[int, int, str]:
        d = dictionaries[name]
        return (int(d.layer), int(d.kind == "transcoder"), name)

    return max(names, key=rank)


def transcoders_of(model: CircuitModel, dictionaries: Mapping[str, Dictionary]) -> list[Dictionary] | None:
    """One (non-skip) transcoder per layer, in layer order, or ``None`` when the dictionaries lack one."""
    by_layer: dict[int, Dictionary] = {}
    for name in sorted(dictionaries):
        d = dictionaries[name]
        if d.kind == "transcoder" and d.out_site == "mlp_out":
            by_layer.setdefault(int(d.layer), d)
    if not model.cfg.has_mlp or any(layer not in by_layer for layer in range(model.cfg.n_layers)):
        return None
    return [by_layer[layer] for layer in range(model.cfg.n_layers)]


def corpus_rows(model: CircuitModel, fallback: torch.Tensor) -> tuple[torch.Tensor, str]:
    """``[rows, n_ctx]`` tokens of held-out standard-library code (BOS first) and what they are, in words; the
    report's own prompts (``fallback``) where the model has no text tokenizer or the library is missing."""
    from circuitwidgets.training.corpus import load_stdlib_corpus

    rows, n_ctx = CORPUS_ROWS
    n_ctx = min(n_ctx, model.cfg.n_ctx)
    ids: list[int] = []
    try:
        for text in load_stdlib_corpus().val:
            ids.extend(model.tokenizer.encode(text))
            if len(ids) >= rows * (n_ctx - 1):
                break
    except (ArgumentError, ValueError, KeyError, OSError, AttributeError):
        ids = []
    if len(ids) < rows * (n_ctx - 1):
        return fallback, f"the page's {fallback.shape[0]} prompts of repeated random tokens"
    body = torch.tensor(ids[: rows * (n_ctx - 1)], dtype=torch.long).view(rows, n_ctx - 1)
    bos = torch.full((rows, 1), int(model.tokenizer.bos_token_id or 0), dtype=torch.long)
    return torch.cat([bos, body], dim=1), "held-out code (the standard library files the models never trained on)"


def _token(model: CircuitModel, token: int) -> str:
    return f"<code>{html.escape(visible_token(model.tokenizer.token_str(int(token))))}</code>"


def _answer_source(tokens: torch.Tensor, half: int) -> int:
    """Position of the answer's token in the first copy: the one after the earlier occurrence of the last token."""
    row = tokens.reshape(-1).tolist()
    last = len(row) - 1
    guess = last - half + 1
    if 0 < guess <= last and row[guess - 1] == row[last]:
        return guess
    earlier = [p + 1 for p in range(last - 1) if row[p] == row[last]]
    return earlier[-1] if earlier else guess


def features_sections(
    model: CircuitModel,
    test: InductionTest,
    dictionaries: Mapping[str, Dictionary],
    log: Callable[[str], None] = lambda s: None,
) -> list[Triple]:
    """The features part's sections for ``model`` on the first prompt of ``test`` (see the module's docstring)."""
    from circuitwidgets.widgets import FeatureDashboard, PromptFeatures

    name = shown_dictionary(dictionaries)
    dictionary = dictionaries[name]
    tokens = test.prompts.clean[:1]
    last = tokens.shape[1] - 1
    rows, corpus = corpus_rows(model, test.prompts.clean)
    log(f"feature dashboard of {name} ({dictionary.d_sae:,} features over {rows.numel():,} tokens)")
    dashboard = FeatureDashboard.from_model(model, dictionary, rows, k=TOP_K, samples=0, progress=False)
    prompt = PromptFeatures(model, dictionary, tokens, k=5, density=dashboard.density, head_query=last)
    at_last = prompt.features_at(last)
    if at_last:
        strongest = int(at_last[0][0].rsplit("/", 1)[-1])
        prompt.selected_feature = dashboard.selected_feature = strongest
    dense = set(int(u) for u in prompt.dense)
    label = html.escape(visible_label(name))
    listed = ", ".join(
        f"<b>{html.escape(unit)}</b> ({value:.2f}{', dense' if int(unit.rsplit('/', 1)[-1]) in dense else ''})"
        for unit, value in at_last[:3]
    )
    share = f"{prompt.dense_share * 100:.0f} %"
    text = (
        f"<p>The same prompt as the head views above, read through the model's dictionary <b>{label}</b> "
        f"({dictionary.d_sae:,} features of layer {dictionary.layer}'s {html.escape(dictionary.kind)}): under each "
        "token, its five strongest active features with their activations. At the last token, where induction "
        f"predicts the answer {_token(model, int(test.prompts.answer[0]))}, the strongest are {listed or 'none'}. "
        f"Features marked ◆ are dense: active on more than {share} of the {dashboard.n_tokens_read:,} tokens read "
        f"({len(dense)} of the features active on this prompt), so their presence says little about one token. "
        "Click a feature to open it in the dashboard below; a position chosen in any head view above selects the "
        f"same token here, and a head chosen there selects the token that head attends to most from the last token "
        f"(BOS left out), here and in every view linked by position: {_head_example(model, test, prompt.head_positions)}.</p>"
    )
    sections: list[Triple] = [(f"The features the induction answer reads ({name})", text, prompt)]
    dash_text = (
        f"<p>Every feature of <b>{label}</b>, read over {dashboard.n_tokens_read:,} tokens of {html.escape(corpus)}: "
        "its top contexts (each token shaded by the feature's activation, the example's own token outlined), the "
        "histogram of its positive activations, the tokens its output direction promotes and suppresses (in logits "
        "per unit of activation) and its nearest features by decoder cosine. It follows the feature chosen in the "
        "prompt view above or in the graph below; arrows, a number or a token search pick another.</p>"
    )
    sections.append((f"One feature at a time: the dashboard of {name}", dash_text, dashboard))
    transcoders = transcoders_of(model, dictionaries)
    if transcoders is not None:
        log("attribution graph of the induction answer")
        sections.append(_graph_section(model, test, transcoders, dashboard, int(dictionary.layer)))
    return sections


def _head_example(model: CircuitModel, test: InductionTest, table: list[list[int]]) -> str:
    """What a click on the head that restores most of the induction answer selects, in words."""
    labels, _ = test.heads_a.top(1, absolute=False)[0]
    layer, head = int(labels[0][1:]), int(labels[1][1:])
    pos, source = table[layer][head], _answer_source(test.prompts.clean[:1], test.prompts.half)
    token = _token(model, int(test.prompts.clean[0, pos]))
    where = (
        "the answer's token in the first copy"
        if pos == source
        else f"the answer's token in the first copy is at {source}"
    )
    return f"the head that restores most of the answer when patched, L{layer}H{head}, selects position {pos} ({token}, {where})"


def _graph_section(
    model: CircuitModel, test: InductionTest, transcoders: list[Dictionary], dashboard: Any, layer: int
) -> Triple:
    """The attribution graph of the page's prompt's next token, the induction circuit pinned and grouped."""
    from circuitwidgets import graphs
    from circuitwidgets.widgets import AttributionGraph

    tokens = test.prompts.clean[:1]
    last = tokens.shape[1] - 1
    source = _answer_source(tokens, test.prompts.half)
    answer = int(test.prompts.answer[0])
    graph = graphs.attribution_graph(model, transcoders, tokens, max_feature_nodes=200)
    view = AttributionGraph(
        graph,
        dashboards={layer: dashboard},
        site_layer=layer,
        title=f"Attribution graph: why {visible_token(model.tokenizer.token_str(answer))!r} next?",
    )
    nodes = graph.nodes
    kinds, pos, index = list(nodes.kind), np.asarray(nodes.pos), np.asarray(nodes.index)
    influence = np.nan_to_num(np.asarray(nodes.influence, dtype=np.float64))
    first_copy = _strongest([i for i, k in enumerate(kinds) if pos[i] == source and k != "logit"], influence)
    at_last = _strongest(
        [i for i, k in enumerate(kinds) if pos[i] == last and k in ("feature", "embedding")], influence
    )
    logits = [i for i, k in enumerate(kinds) if k == "logit"]
    answer_logit = next((i for i in logits if index[i] == answer), None)
    if first_copy:
        view.group(f"first copy, pos {source}", first_copy)
    if at_last:
        view.group(f"last token, pos {last}", at_last)
    if answer_logit is not None:
        view.pin(answer_logit)
    ranked = [int(i) for i in np.argsort(-influence) if kinds[int(i)] != "logit"]
    rank = {node: r + 1 for r, node in enumerate(ranked)}
    emb = next((i for i in first_copy if kinds[i] == "embedding"), None)
    read = (
        f"The answer's own token in the first copy (position {source}) is the "
        f"{_ordinal(rank[emb])} most influential of the graph's {len(ranked)} input and feature nodes "
        f"(influence {influence[emb]:.3f})"
        if emb is not None
        else f"No node at the answer's position in the first copy ({source}) survives pruning"
    )
    said = (
        f"its logit is pinned on the right (the model's probability on it: {float(nodes.activation[answer_logit]):.3f})"
        if answer_logit is not None and nodes.activation is not None
        else "its logit is not among the graph's top logits, so nothing is pinned there"
    )
    text = (
        "<p>The attribution graph of the same prediction (circuit tracing): the transcoders replace the MLPs, "
        "attention patterns and norms are frozen from the run, and each edge is one node's direct effect on another. "
        "Attention is frozen, so the induction head is not a node: it is the edge from the first copy to the last "
        f"token. {read}; the answer is {_token(model, answer)} and {said}. The pinned groups are the induction "
        f"circuit: what the head reads (the {GROUP_SIZE} most influential nodes of the first copy), what it writes "
        f"into (the last token's {GROUP_SIZE} most influential) and the logit they raise. Replacement {graph.scores['replacement']:.3f}, completeness {graph.scores['completeness']:.3f} "
        "(1 is a graph with no error nodes). Click a feature node to open it in the dashboard above; its token "
        "is selected in the head views.</p>"
    )
    return ("The attribution graph of the induction answer", text, view)


#: Nodes kept in each pinned group: the most influential of their position (the rest stay in the graph, unpinned).
GROUP_SIZE = 6


def _strongest(rows: list[int], influence: np.ndarray) -> list[int]:
    """The :data:`GROUP_SIZE` rows of ``rows`` with the largest influence on the logits, strongest first."""
    return sorted(rows, key=lambda i: -float(influence[i]))[:GROUP_SIZE]


def _ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``…"""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
