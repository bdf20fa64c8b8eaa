"""Faithfulness of circuits, run exactly per edge, and the curve over circuit sizes with MIB's CPR and CMD.

``faithfulness = (m(circuit) − m(empty)) / (m(model) − m(empty))`` where
``m(circuit)`` is the metric of the clean run in which only the circuit's edges
carry their actual writes and every other edge the corrupted (or mean) write
(:mod:`circuitwidgets.graphs.patching`); the whole model (no edge removed) and
the empty circuit (every edge removed) are run in the same batch, so the
whole model scores 1 and the empty circuit 0 by the same arithmetic as any
circuit between them.

The curve follows MIB (the circuit localization track): for each fraction of
the scored edges (MIB's ``0.1 %, 0.2 %, 0.5 %, 1 %, 2 %, 5 %, 10 %, 20 %, 50 %,
100 %`` by default), keep the ``int(fraction · edges)`` edges of largest
``|score|`` (dangling ones dropped, :func:`~circuitwidgets.graphs.prune`) and
measure faithfulness; **CPR** is the area under faithfulness and **CMD** the area
under ``|1 − faithfulness|``, both by the trapezoid rule over the fractions.
Every size is one variant of one batched pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs.graph import Graph, prune
from circuitwidgets.graphs.patching import ABLATIONS, edge_pairs, masked_values
from circuitwidgets.graphs.runs import Setup, setup
from circuitwidgets.model import CircuitModel

#: MIB's fractions of edges.
MIB_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass
class Curve:
    """Faithfulness over circuit sizes: the ``fractions`` asked for, the ``sizes`` (strongest edges taken,
    ``int(fraction · edges)``), the ``edges`` each circuit kept once dangling ones are dropped, ``values``
    (faithfulness), the metric of the whole model (``clean``) and of the empty circuit (``empty``), ``cpr``, ``cmd``."""

    fractions: list[float]
    sizes: list[int]
    edges: list[int]
    values: list[float]
    clean: float
    empty: float
    cpr: float
    cmd: float
    ablation: str

    def to_json(self) -> dict[str, object]:
        """The curve as plain JSON (a graph's ``extra["curve"]``, the view's trait)."""
        return {
            "fractions": self.fractions, "sizes": self.sizes, "edges": self.edges, "values": self.values, "clean": self.clean,
            "empty": self.empty, "cpr": self.cpr, "cmd": self.cmd, "ablation": self.ablation,
        }  # fmt: skip


def circuit_drop(s: Setup, circuit: Graph) -> np.ndarray:
    """``[senders, receivers]`` True on the model's edges the circuit leaves out (typed error naming ``circuit`` for
    an edge the model does not have)."""
    comps = s.comps
    exists = comps.edge_mask()
    label = circuit.nodes.label
    pairs = [(label[int(a)], label[int(b)]) for a, b in zip(circuit.edges.src, circuit.edges.dst, strict=True)]
    keep = np.zeros_like(exists)
    for si, ri in edge_pairs(comps.sender_labels(), comps.receiver_labels(), exists, pairs, "circuit"):
        keep[si, ri] = True
    drop: np.ndarray = exists & ~keep
    return drop


def _values(s: Setup, circuits: Sequence[Graph], ablation: str) -> tuple[np.ndarray, float, float]:
    """Faithfulness of each circuit, and the metric of the whole model and of the empty circuit."""
    if ablation not in ABLATIONS:
        raise ArgumentError(f"ablation: expected one of {ABLATIONS}, got {ablation!r}")
    exists = s.comps.edge_mask()
    drop = np.stack([np.zeros_like(exists), exists, *(circuit_drop(s, c) for c in circuits)])
    values = masked_values(s, drop, ablation)
    full, empty = float(values[0]), float(values[1])
    if abs(full - empty) < 1e-12:
        raise ArgumentError(
            f"corrupted: the metric is {full:.6g} with and without the corruption; faithfulness needs a corruption "
            "that changes it"
        )
    return (values[2:] - empty) / (full - empty), full, empty


def faithfulness(
    model: CircuitModel,
    circuit: Graph,
    clean: object,
    corrupted: object,
    metric: object,
    *,
    ablation: str = "patch",
    memory_budget: int | None = None,
) -> float:
    """How much of the model's behaviour the circuit's edges alone recover: 1.0 the whole model, 0.0 the empty circuit
    (every edge carrying the corrupted write, ``ablation="patch"``, or its mean over the corrupted prompts, ``"mean"``)."""
    if not isinstance(circuit, Graph):
        raise ArgumentTypeError(
            f"circuit: expected a Graph (e.g. prune(edge_attribution(...), edges=N)), got {type(circuit).__name__}"
        )
    s = setup(model, clean, corrupted, metric, memory_budget)
    return float(_values(s, [circuit], ablation)[0][0])


def faithfulness_curve(
    model: CircuitModel,
    graph: Graph,
    clean: object,
    corrupted: object,
    metric: object,
    fractions: int | Sequence[float] = MIB_FRACTIONS,
    *,
    ablation: str = "patch",
    memory_budget: int | None = None,
) -> Curve:
    """Faithfulness of ``graph``'s top edges at each fraction of its edges (an int: that many fractions spaced
    evenly on a log scale from 0.1 % to 100 %), with MIB's CPR and CMD (module docstring)."""
    fr = _fractions(fractions)
    s = setup(model, clean, corrupted, metric, memory_budget)
    total = len(graph.edges)
    sizes = [int(f * total) for f in fr]
    circuits = [prune(graph, edges=k) for k in sizes]
    values, full, empty = _values(s, circuits, ablation)
    v = [float(x) for x in values]
    cpr = float(sum((fr[i + 1] - fr[i]) * (v[i] + v[i + 1]) / 2 for i in range(len(fr) - 1)))
    cmd = float(sum((fr[i + 1] - fr[i]) * (abs(1 - v[i]) + abs(1 - v[i + 1])) / 2 for i in range(len(fr) - 1)))
    return Curve(list(fr), sizes, [len(c.edges) for c in circuits], v, full, empty, cpr, cmd, ablation)


def _fractions(fractions: object) -> list[float]:
    if isinstance(fractions, int) and not isinstance(fractions, bool):
        if fractions < 2:
            raise ArgumentError(f"fractions: expected at least 2 sizes, got {fractions}")
        return [float(x) for x in np.geomspace(0.001, 1.0, fractions)]
    if isinstance(fractions, (str, bytes)) or not isinstance(fractions, Sequence) or len(fractions) < 2:
        raise ArgumentTypeError(
            f"fractions: expected an int >= 2 or a list of fractions in (0, 1], got {fractions!r:.80}"
        )
    if not all(isinstance(f, (int, float, np.integer, np.floating)) and not isinstance(f, bool) for f in fractions):
        raise ArgumentTypeError(f"fractions: expected numbers in (0, 1], got {fractions!r:.80}")
    out = [float(f) for f in fractions]
    if any(not 0 < f <= 1 for f in out) or out != sorted(out):
        raise ArgumentError(f"fractions: expected increasing fractions in (0, 1], got {out!r:.80}")
    return out
