"""A scrubbed hypothesis drawn as a component graph: its kept paths' edges, the fraction recovered per refinement."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError
from circuitwidgets.graphs.hypothesis import hypothesis_graph


def test_a_hypothesis_graph_has_its_paths_edges_and_the_refinements_scores() -> None:
    model = cw.load_pretrained("attn-only-2l")
    first = torch.randint(1, model.cfg.d_vocab, (12, 6), generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([torch.zeros(12, 1, dtype=torch.long), first, first], dim=1)
    full = cw.Hypothesis.full(model)
    kept = cw.Hypothesis([("L0H1 -> L1H3.k -> logits", None), ("embed -> L1H3.q -> logits", None)], name="k path")
    results = [cw.scrub(model, h, tokens, resamples=2) for h in (full, kept)]
    graph = hypothesis_graph(model, kept, results)
    labels = graph.nodes.label
    edges = {(labels[s], labels[d]) for s, d in zip(graph.edges.src, graph.edges.dst, strict=True)}
    expected = {("L0H1", "L1H3.k"), ("L1H3", "logits"), ("embed", "L1H3.q")}
    assert edges == expected | {("embed", f"L0H1.{x}") for x in "qkv"}  # L0H1's subtree: the embedding
    np.testing.assert_allclose(graph.edges.weight, results[-1].recovered)
    assert [r["recovered"] for r in graph.extra["refinements"]] == pytest.approx([1.0, results[-1].recovered])
    view = cw.AttributionGraph(graph)
    assert view.n_edges == 6
    assert view.title == "Hypothesis (causal scrubbing): the paths it keeps"
    assert view.positive_note.startswith("a kept path")
    full_name = results[0].hypothesis
    assert view.caption.endswith(f"recovered: {full_name} 100.0 % → k path {100 * results[-1].recovered:.1f} %"
                                 f" [{100 * results[-1].interval[0]:.1f}, {100 * results[-1].interval[1]:.1f}]")  # fmt: skip
    with pytest.raises(ArgumentError, match="results"):
        hypothesis_graph(model, kept, results[:1])
