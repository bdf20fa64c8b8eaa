"""Graphs of a model's computation: one :class:`Graph` result, made by edge attribution (EAP, EAP-IG) over
components, checked by exact edge patching, pruned, and scored by faithfulness (DESIGN.md §3e).

- :func:`edge_attribution`: a score for every edge of the component graph (embeddings, each head's q/k/v
  inputs, heads, MLPs, logits) from a few batched backward passes;
- :func:`edge_patch`: the exact effect of removing one edge (what the scores estimate), and
  :func:`agreement`: rank correlation and top-k overlap of an estimate with it;
- :func:`prune`, :func:`faithfulness`, :func:`faithfulness_curve`: circuits of any size, run exactly per edge,
  with MIB's CPR and CMD.

Attribution graphs over transcoder features (issue 41) share the same result and view.
"""

from __future__ import annotations

from circuitwidgets.graphs.compare import Agreement, agreement
from circuitwidgets.graphs.eap import METHODS, edge_attribution
from circuitwidgets.graphs.faithfulness import MIB_FRACTIONS, Curve, faithfulness, faithfulness_curve
from circuitwidgets.graphs.graph import EdgeTable, Graph, NodeTable, prune
from circuitwidgets.graphs.patching import edge_patch

__all__ = [
    "METHODS",
    "MIB_FRACTIONS",
    "Agreement",
    "Curve",
    "EdgeTable",
    "Graph",
    "NodeTable",
    "agreement",
    "edge_attribution",
    "edge_patch",
    "faithfulness",
    "faithfulness_curve",
    "prune",
]
