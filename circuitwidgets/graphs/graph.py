"""``Graph``: one result for attribution graphs (feature nodes) and edge attribution (component nodes).

A graph is a node table (parallel arrays, one row per node) and a sparse edge
list ``src → dst`` ("``dst`` reads ``src``") with one weight per edge, plus the
scores, prompt, convention, method and metric that say how it was made
(DESIGN.md §3e, SPECS.md). It is saved as one safetensors file: the numeric
columns as tensors, everything else as JSON in the file's metadata, written to
a temporary file and renamed so an interrupted save never leaves half a graph.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, FileFormatError, ShapeError
from circuitwidgets.features._untrusted import open_regular, size_of

#: The kinds of node a graph may hold.
NODE_KINDS = ("embedding", "feature", "error", "head", "head_q", "head_k", "head_v", "mlp", "logit")
#: The format version written into a saved graph's metadata.
FORMAT = "circuitwidgets.graph/1"
#: Largest graph file :meth:`Graph.load` reads (bytes), refused by its size before reading.
MAX_GRAPH_BYTES = 4 * 2**30


@dataclass
class NodeTable:
    """Nodes as parallel columns: ``kind``, ``layer`` (-1 embeddings, ``n_layers`` logits), ``pos`` (-1: not per
    position), ``index`` (feature / head / token id, or -1), ``label``, ``activation`` and ``influence`` (NaN: none)."""

    kind: list[str]
    layer: np.ndarray
    pos: np.ndarray
    index: np.ndarray
    label: list[str]
    activation: np.ndarray = field(default_factory=lambda: np.zeros(0))
    influence: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        n = len(self.kind)
        self.layer = _int_column("nodes.layer", self.layer, n)
        self.pos = _int_column("nodes.pos", self.pos, n)
        self.index = _int_column("nodes.index", self.index, n)
        for name in ("activation", "influence"):
            value = getattr(self, name)
            if len(value) == 0 and n:
                value = np.full(n, np.nan)
            setattr(self, name, _float_column(f"nodes.{name}", value, n))
        bad = [k for k in self.kind if k not in NODE_KINDS]
        if bad:
            raise ArgumentError(f"nodes.kind: expected each of {NODE_KINDS}, got {bad[0]!r}")
        if len(self.label) != n or not all(isinstance(s, str) for s in self.label):
            raise ShapeError(f"nodes.label: expected {n} strings, got {len(self.label)} entries")

    def __len__(self) -> int:
        return len(self.kind)

    def take(self, ids: np.ndarray) -> NodeTable:
        """The rows ``ids``, in that order."""
        return NodeTable(
            [self.kind[i] for i in ids], self.layer[ids], self.pos[ids], self.index[ids],
            [self.label[i] for i in ids], self.activation[ids], self.influence[ids],
        )  # fmt: skip


@dataclass
class EdgeTable:
    """Sparse edges ``src[i] → dst[i]`` (node rows; ``dst`` reads ``src``) with ``weight[i]``."""

    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.weight)
        self.src = _int_column("edges.src", self.src, n)
        self.dst = _int_column("edges.dst", self.dst, n)
        self.weight = _float_column("edges.weight", self.weight, n)

    def __len__(self) -> int:
        return len(self.weight)

    def take(self, ids: np.ndarray) -> EdgeTable:
        """The edges ``ids``, in that order."""
        return EdgeTable(self.src[ids], self.dst[ids], self.weight[ids])


@dataclass
class Graph:
    """Nodes, sparse weighted edges and how they were made.

    ``scores``: named numbers (``{"faithfulness": ...}``, ``{"replacement": ...,
    "completeness": ...}``); ``prompt`` the tokens as text and ``tokens`` their ids
    (of the first prompt when there are many); ``convention`` says in words what a
    weight means (sign, metric, corruption); ``method`` how it was computed
    (``"attribution"``, ``"eap"``, ``"eap-ig-inputs"`` …); ``metric`` what it
    measures; ``extra`` any JSON-able detail (model name, faithfulness curve).
    """

    nodes: NodeTable
    edges: EdgeTable
    scores: dict[str, float] = field(default_factory=dict)
    prompt: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    convention: str = ""
    method: str = ""
    metric: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.nodes)
        for name, col in (("edges.src", self.edges.src), ("edges.dst", self.edges.dst)):
            if len(col) and (int(col.min()) < 0 or int(col.max()) >= n):
                raise ArgumentError(f"{name}: expected node rows in [0, {n}), got {int(col.min())}..{int(col.max())}")

    # ------------------------------------------------------------------ reading
    def __repr__(self) -> str:
        return (
            f"Graph(method={self.method!r}, metric={self.metric!r}, {len(self.nodes)} nodes, "
            f"{len(self.edges)} edges, scores={self.scores})"
        )

    def node(self, label: str) -> int:
        """The row of the node called ``label`` (typed error naming it when there is none)."""
        for i, name in enumerate(self.nodes.label):
            if name == label:
                return i
        raise ArgumentError(f"node: no node called {label!r} in this graph (e.g. {self.nodes.label[:4]!r})")

    def edge_index(self, sender: str, receiver: str) -> int:
        """The row of the edge ``sender → receiver`` (labels), or a typed error naming the missing edge."""
        s, r = self.node(sender), self.node(receiver)
        hits = np.flatnonzero((self.edges.src == s) & (self.edges.dst == r))
        if not len(hits):
            raise ArgumentError(f"edge: the graph has no edge {sender!r} → {receiver!r}")
        return int(hits[0])

    def order(self) -> np.ndarray:
        """Edge rows by ``|weight|``, strongest first (ties: original order); NaN weights last."""
        magnitude = np.nan_to_num(np.abs(self.edges.weight), nan=-1.0)
        return np.argsort(-magnitude, kind="stable")

    def top(self, k: int = 10) -> list[tuple[str, str, float]]:
        """The ``k`` strongest edges as ``(sender label, receiver label, weight)``, largest ``|weight|`` first."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ArgumentTypeError(f"k: expected an int >= 0, got {k!r}")
        label = self.nodes.label
        return [
            (label[int(self.edges.src[i])], label[int(self.edges.dst[i])], float(self.edges.weight[i]))
            for i in self.order()[:k]
        ]

    # ---------------------------------------------------------------- shrinking
    def with_edges(self, rows: np.ndarray) -> Graph:
        """The same nodes with only the edges ``rows`` (and every other field copied)."""
        return self._copy(self.nodes, self.edges.take(np.asarray(rows, dtype=np.int64)))

    def subgraph(self, node_ids: Sequence[int] | np.ndarray) -> Graph:
        """Only the nodes ``node_ids`` (rows, kept in the graph's order) and the edges between them."""
        ids = np.asarray(node_ids, dtype=np.int64).reshape(-1)
        n = len(self.nodes)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= n):
            raise ArgumentError(f"node_ids: expected rows in [0, {n}), got {int(ids.min())}..{int(ids.max())}")
        keep = np.unique(ids)
        new_row = np.full(n, -1, dtype=np.int64)
        new_row[keep] = np.arange(len(keep))
        inside = (new_row[self.edges.src] >= 0) & (new_row[self.edges.dst] >= 0)
        edges = EdgeTable(new_row[self.edges.src[inside]], new_row[self.edges.dst[inside]], self.edges.weight[inside])
        return self._copy(self.nodes.take(keep), edges)

    def prune(self, *, edges: int | None = None, nodes: int | None = None, threshold: float | None = None) -> Graph:
        """The graph cut down by exactly one of: the ``edges`` strongest edges, the ``nodes`` nodes with most
        ``|weight|`` on their edges, or the edges with ``|weight| ≥ threshold`` (see :func:`circuitwidgets.graphs.prune`)."""
        return prune(self, edges=edges, nodes=nodes, threshold=threshold)

    def _copy(self, nodes: NodeTable, edges: EdgeTable) -> Graph:
        return Graph(
            nodes, edges, dict(self.scores), list(self.prompt), list(self.tokens), self.convention, self.method,
            self.metric, json.loads(json.dumps(self.extra)),
        )  # fmt: skip

    # ------------------------------------------------------------------ storage
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the graph to one safetensors file (numeric columns as tensors, the rest as JSON metadata).

        Written to a temporary file beside ``path`` and renamed over it, so an
        interrupted save leaves the old file (or nothing), never half a graph.
        """
        from safetensors.numpy import save as save_bytes

        out = Path(path)
        tensors = {
            "nodes.layer": self.nodes.layer, "nodes.pos": self.nodes.pos, "nodes.index": self.nodes.index,
            "nodes.activation": self.nodes.activation, "nodes.influence": self.nodes.influence,
            "edges.src": self.edges.src, "edges.dst": self.edges.dst, "edges.weight": self.edges.weight,
        }  # fmt: skip
        meta = {
            "format": FORMAT, "kind": self.nodes.kind, "label": self.nodes.label, "scores": self.scores,
            "prompt": self.prompt, "tokens": self.tokens, "convention": self.convention, "method": self.method,
            "metric": self.metric, "extra": self.extra,
        }  # fmt: skip
        data = save_bytes(
            {k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata={"graph": json.dumps(meta)}
        )
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, out)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return out

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Graph:
        """Read a graph written by :meth:`save` (safetensors only: nothing is unpickled; a truncated or
        inconsistent file is an :class:`~circuitwidgets.errors.ArgumentError` naming it)."""
        from safetensors import SafetensorError
        from safetensors.numpy import load as load_bytes

        where = Path(path)
        with open_regular(where, "path") as handle:  # a FIFO or device is refused without blocking
            if size_of(handle) > MAX_GRAPH_BYTES:
                raise FileFormatError(
                    f"path: {str(where)!r}: expected at most {MAX_GRAPH_BYTES:,} bytes, got {size_of(handle):,}"
                )
            raw = handle.read(MAX_GRAPH_BYTES + 1)
        try:
            tensors = load_bytes(raw)
            meta = _metadata(raw)
        except (SafetensorError, ValueError, KeyError, OSError, RecursionError, TypeError) as exc:
            raise ArgumentError(f"path: {str(where)!r} is not a readable graph file ({str(exc)[:200]})") from None
        try:
            nodes = NodeTable(
                list(meta["kind"]), tensors["nodes.layer"], tensors["nodes.pos"], tensors["nodes.index"],
                list(meta["label"]), tensors["nodes.activation"], tensors["nodes.influence"],
            )  # fmt: skip
            edges = EdgeTable(tensors["edges.src"], tensors["edges.dst"], tensors["edges.weight"])
            scores = {str(k): float(v) for k, v in dict(meta["scores"]).items()}
            return cls(
                nodes, edges, scores, [str(s) for s in meta["prompt"]], [int(t) for t in meta["tokens"]],
                str(meta["convention"]), str(meta["method"]), str(meta["metric"]), dict(meta["extra"]),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ArgumentError(f"path: {str(where)!r} holds an inconsistent graph ({exc})") from exc


#: Kinds a path of a circuit starts from, and the kind it ends at.
SOURCE_KINDS = frozenset({"embedding", "error"})
SINK_KINDS = frozenset({"logit"})
INPUT_KINDS = frozenset({"head_q", "head_k", "head_v"})


def prune(
    graph: Graph,
    *,
    edges: int | None = None,
    nodes: int | None = None,
    threshold: float | None = None,
    connected: bool = True,
) -> Graph:
    """``graph`` cut down by exactly one of ``edges`` (the N strongest edges by ``|weight|``), ``nodes`` (the N
    components with most ``|weight|`` on their edges: a head with its q/k/v inputs counts as one) or
    ``threshold`` (edges with ``|weight| ≥ threshold``); then, with ``connected``, without dangling edges."""
    given = {k: v for k, v in (("edges", edges), ("nodes", nodes), ("threshold", threshold)) if v is not None}
    if len(given) != 1:
        raise ArgumentError(f"prune: expected exactly one of edges=, nodes=, threshold=, got {sorted(given) or 'none'}")
    (name, value), = given.items()  # fmt: skip
    if name == "threshold":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
            raise ArgumentTypeError(f"threshold: expected a finite number >= 0, got {value!r}")
        rows = np.flatnonzero(np.abs(graph.edges.weight) >= value)
    else:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ArgumentTypeError(f"{name}: expected an int >= 0, got {value!r}")
        rows = graph.order()[:value] if name == "edges" else _rows_of_top_nodes(graph, value)
    rows = np.sort(rows)
    if not isinstance(connected, bool):
        raise ArgumentTypeError(f"connected: expected a bool, got {type(connected).__name__}")
    if connected:
        rows = rows[live_edges(graph, rows)]
    return graph.with_edges(rows)


def component_of(graph: Graph) -> np.ndarray:
    """Each node's component row: a head's q/k/v input maps to its head's node, every other node to itself."""
    n = graph.nodes
    owner = np.arange(len(n))
    heads = {(int(n.layer[i]), int(n.index[i]), int(n.pos[i])): i for i, k in enumerate(n.kind) if k == "head"}
    for i, kind in enumerate(n.kind):
        if kind in INPUT_KINDS:
            owner[i] = heads.get((int(n.layer[i]), int(n.index[i]), int(n.pos[i])), i)
    return owner


def _rows_of_top_nodes(graph: Graph, count: int) -> np.ndarray:
    owner = component_of(graph)
    weight = np.nan_to_num(np.abs(graph.edges.weight))
    load = np.zeros(len(graph.nodes))
    np.add.at(load, owner[graph.edges.src], weight)
    np.add.at(load, owner[graph.edges.dst], weight)
    candidates = np.unique(owner)
    ranked = candidates[np.argsort(-load[candidates], kind="stable")][:count]
    chosen = np.zeros(len(graph.nodes), dtype=bool)
    chosen[ranked] = True
    return np.flatnonzero(chosen[owner[graph.edges.src]] & chosen[owner[graph.edges.dst]])


def live_edges(graph: Graph, rows: np.ndarray) -> np.ndarray:
    """A mask over ``rows`` (edge rows): the edges on some path from a source node to a logit through ``rows``."""
    n = len(graph.nodes)
    owner = component_of(graph)
    src, dst = owner[graph.edges.src[rows]], owner[graph.edges.dst[rows]]
    kinds = graph.nodes.kind
    forward = _reach(n, src, dst, [i for i in range(n) if kinds[i] in SOURCE_KINDS])
    backward = _reach(n, dst, src, [i for i in range(n) if kinds[i] in SINK_KINDS])
    mask: np.ndarray = forward[src] & backward[dst]
    return mask


def _reach(n: int, frm: np.ndarray, to: np.ndarray, starts: list[int]) -> np.ndarray:
    """Nodes reachable from ``starts`` along edges ``frm[i] → to[i]``."""
    seen = np.zeros(n, dtype=bool)
    seen[starts] = True
    while True:
        step = seen.copy()
        step[to[seen[frm]]] = True
        if (step == seen).all():
            return seen
        seen = step


def _metadata(raw: bytes) -> dict[str, Any]:
    """The JSON metadata of a saved graph (from the safetensors header), checked for its format."""
    if len(raw) < 8:
        raise ValueError("file shorter than a safetensors header")
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    meta = json.loads(header["__metadata__"]["graph"])
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"expected format {FORMAT!r}")
    return meta


def _int_column(name: str, values: object, n: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (n,) or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ShapeError(f"{name}: expected {n} integers, got shape {arr.shape} of {arr.dtype}")
    return arr.astype(np.int64)


def _float_column(name: str, values: object, n: int) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,):
        raise ShapeError(f"{name}: expected {n} numbers, got shape {arr.shape}")
    return arr
