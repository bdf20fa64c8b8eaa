"""Interventions from the graph view: the target's change a graph predicts beside the change measured.

For chosen feature nodes (one, or a supernode's members together) set to zero, doubled, or a value:

- ``predicted``: the graph's claim, the direct effect (attention frozen, every layer's MLP output frozen but for
  the intervened features' decoder writes, norms frozen): exactly the sum of the nodes' edges into the target
  times their relative change (tests/test_features_intervention.py);
- ``measured``: :func:`circuitwidgets.features.intervene` with circuit-tracer's defaults (attention frozen, the
  MLPs free), so every indirect path through later features counts too.

The target is the graph's: its top logit (the top-logits graph), its one token, or its pair's logit difference,
each as the graph's logit node measures it (a logit minus the mean logit; a difference of two logits).
"""

from __future__ import annotations

from typing import Any

from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.intervention import Intervened, intervene
from circuitwidgets.graphs import Graph
from circuitwidgets.graphs.checked import target_value

__all__ = ["MODES", "intervention_key", "measure"]

#: What the view offers: set to 0, double, or a value.
MODES = ("zero", "times2", "value")


def intervention_key(rows: list[int], mode: str, value: float) -> str:
    """The key of one request (its results are stored under it): sorted rows, the mode and the value."""
    shown = f"{value:g}" if mode == "value" else ""
    return f"{','.join(str(r) for r in sorted(rows))}|{mode}|{shown}"


def _change(graph: Graph, out: Intervened) -> float:
    goal = dict(graph.extra.get("target") or {"kind": "top"})
    logits = [int(graph.nodes.index[i]) for i, k in enumerate(graph.nodes.kind) if k == "logit"]
    return target_value(goal, logits, out.logits) - target_value(goal, logits, out.clean_logits)


def measure(
    graph: Graph, model: Any, transcoders: Any, rows: list[int], mode: str, value: float = 0.0
) -> dict[str, Any]:
    """One request's result: ``{"key", "rows", "mode", "value", "predicted", "measured"}`` (changes of the target)."""
    if mode not in MODES:
        raise ArgumentError(f"mode: expected one of {MODES}, got {mode!r}")
    nodes = graph.nodes
    chosen = [r for r in rows if 0 <= r < len(nodes) and nodes.kind[r] == "feature"]
    if not chosen:
        raise ArgumentError(f"rows: expected feature nodes of the graph, got {rows!r:.80}")
    todo = []
    for r in chosen:
        a = float(nodes.activation[r])
        new = 0.0 if mode == "zero" else 2 * a if mode == "times2" else float(value)
        todo.append((int(nodes.layer[r]), int(nodes.pos[r]), int(nodes.index[r]), new))
    n_layers = int(graph.extra.get("n_layers", model.cfg.n_layers))
    direct = intervene(model, transcoders, graph.tokens, todo, constrained_layers=range(n_layers))
    free = intervene(model, transcoders, graph.tokens, todo)
    return {
        "key": intervention_key(chosen, mode, value),
        "rows": chosen,
        "mode": mode,
        "value": float(value),
        "predicted": _change(graph, direct),
        "measured": _change(graph, free),
    }
