"""Graphs of a model's computation: one :class:`Graph` result, made by edge attribution (EAP, EAP-IG) over
components, checked by exact edge patching, pruned, and scored by faithfulness (DESIGN.md §3e).

- :func:`edge_attribution`: a score for every edge of the component graph (embeddings, each head's q/k/v
  inputs, heads, MLPs, logits) from a few batched backward passes;
- :func:`edge_patch`: the exact effect of removing one edge (what the scores estimate), and
  :func:`agreement`: rank correlation and top-k overlap of an estimate with it;
- :func:`prune`, :func:`faithfulness`, :func:`faithfulness_curve`: circuits of any size, run exactly per edge,
  with MIB's CPR and CMD.

Attribution graphs over transcoder features (issue 41, circuit-tracer's definition) share the same result and view:

- :func:`attribution_graph`: one prompt's graph of features, errors, tokens and logits, pruned by influence, with
  the replacement and completeness scores (:func:`attribution_matrix`: the unpruned dense matrix);
- :func:`qk_attribution`: one head's attention score split into query-term × key-term parts;
- :func:`to_circuit_tracer_json` / :func:`from_circuit_tracer_json`: circuit-tracer's (Neuronpedia's) graph files;
- :func:`check_by_intervention`: the most influential features zeroed in the model, the target's change beside the
  graph's prediction (direct part exact; rank correlation with attention frozen and free).

``target=`` of :func:`attribution_graph` picks the logit node(s): the top logits, one token, a pair of tokens
(their logit difference) or a direction.
"""

from __future__ import annotations

from circuitwidgets.graphs.attribution import attribution_graph, attribution_matrix
from circuitwidgets.graphs.checked import InterventionCheck, check_by_intervention
from circuitwidgets.graphs.compare import Agreement, agreement
from circuitwidgets.graphs.ct_json import from_circuit_tracer_json, to_circuit_tracer_json
from circuitwidgets.graphs.dense import DenseAttribution
from circuitwidgets.graphs.eap import METHODS, edge_attribution
from circuitwidgets.graphs.faithfulness import MIB_FRACTIONS, Curve, faithfulness, faithfulness_curve
from circuitwidgets.graphs.graph import EdgeTable, Graph, NodeTable, prune
from circuitwidgets.graphs.hypothesis import hypothesis_graph
from circuitwidgets.graphs.patching import edge_patch
from circuitwidgets.graphs.qk import QKAttribution, qk_attribution

__all__ = [
    "METHODS",
    "MIB_FRACTIONS",
    "Agreement",
    "Curve",
    "DenseAttribution",
    "EdgeTable",
    "Graph",
    "InterventionCheck",
    "NodeTable",
    "QKAttribution",
    "agreement",
    "attribution_graph",
    "attribution_matrix",
    "check_by_intervention",
    "edge_attribution",
    "edge_patch",
    "faithfulness",
    "faithfulness_curve",
    "from_circuit_tracer_json",
    "hypothesis_graph",
    "prune",
    "qk_attribution",
    "to_circuit_tracer_json",
]
