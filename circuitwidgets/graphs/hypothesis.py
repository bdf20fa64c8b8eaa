"""A causal-scrubbing hypothesis as a component graph, so the graph view draws the paths it keeps.

The nodes are the component graph's (:mod:`circuitwidgets.graphs.components`: ``embed``, heads as senders,
their ``q``/``k``/``v`` as receivers, MLPs, ``logits``); each kept path adds its edges (each component to the
input of the next that reads it; a path starting at a layer-0 component also the embedding into it), weighted by the fraction of the metric the hypothesis recovers, and the
graph's scores carry each refinement's fraction and interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs.components import components_of
from circuitwidgets.graphs.graph import EdgeTable, Graph
from circuitwidgets.hypotheses.paths import Hypothesis, check_against, component
from circuitwidgets.hypotheses.scrub import Scrub
from circuitwidgets.model import CircuitModel


def hypothesis_graph(model: CircuitModel, hypothesis: Hypothesis, results: Sequence[Scrub]) -> Graph:
    """The kept paths of ``hypothesis`` as a :class:`Graph`, with the fraction recovered at each refinement.

    ``results``: the scrubs of each refinement up to ``hypothesis`` (the last one is ``hypothesis``'s own); its
    recovered fraction weighs every edge, and ``graph.extra["refinements"]`` lists them all. Draw it with
    :class:`~circuitwidgets.AttributionGraph`.
    """
    if not isinstance(hypothesis, Hypothesis):
        raise ArgumentTypeError(f"hypothesis: expected a Hypothesis, got {type(hypothesis).__name__}")
    if not results or not all(isinstance(r, Scrub) for r in results):
        raise ArgumentTypeError(
            "results: expected a non-empty list of scrub(...) results, the last one this hypothesis's"
        )
    if results[-1].hypothesis != hypothesis.name:
        raise ArgumentError(
            f"results: expected the last result to score {hypothesis.name!r}, got {results[-1].hypothesis!r}"
        )
    comps = components_of(model)
    nodes, _ = comps.tables(np.zeros((comps.n_senders, comps.n_receivers)))
    row = {label: i for i, label in enumerate(nodes.label)}
    src: list[int] = []
    dst: list[int] = []
    for i, path in enumerate(hypothesis.paths):
        check_against(model, path.nodes, f"hypothesis.paths[{i}]")
        pairs = list(pairwise(path.nodes))
        start = path.nodes[0]
        if start != "embed" and "." not in start and start.startswith(("L0H", "MLP0")):
            # a layer-0 component's whole subtree: the embedding into each of its inputs (drawn as a path from it)
            pairs += [("embed", f"{start}.{x}") for x in "qkv"] if start.startswith("L0H") else [("embed", start)]
        for writer, reader in pairs:
            edge = (row[component(writer)], row[reader])
            if edge not in zip(src, dst, strict=True):
                src.append(edge[0])
                dst.append(edge[1])
    last = results[-1]
    edges = EdgeTable(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.full(len(src), last.recovered))
    refinements = [
        {"hypothesis": r.hypothesis, "recovered": r.recovered, "interval": list(r.interval), "paths": r.paths}
        for r in results
    ]
    return Graph(
        nodes, edges, {"recovered": last.recovered, "interval_low": last.interval[0], "interval_high": last.interval[1]},
        [], [], f"edges of the paths {hypothesis.name!r} keeps; weight: the fraction of {last.metric} it recovers",
        "causal scrubbing", last.metric, {"model": model.name, "refinements": refinements},
    )  # fmt: skip
