"""circuit-tracer's graph JSON (the Neuronpedia graph format: ``metadata``, ``qParams``, ``nodes``, ``links``), read and written.

Node ids as circuit-tracer writes them: a feature ``"{layer}_{feature}_{pos}"``,
an error ``"0_{layer}_{pos}"``, a token ``"E_{token id}_{pos}"``, a logit
``"{n_layers + 1}_{token id}_{pos}"``; a node's ``influence`` is its cumulative
share of influence (``Graph.extra["cumulative_influence"]``). Files are
untrusted: every field is type-checked and a bad one is an
:class:`~circuitwidgets.errors.ArgumentError` naming the file; writes go to a
temporary file renamed over the target, so an interrupted write leaves no half file.

The format has one ambiguity: layer 0's feature ``f`` at position ``p`` and
layer ``f``'s error at ``p`` both get the id ``"0_{f}_{p}"``. Such a file is
written as circuit-tracer writes it, and refused when read.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from circuitwidgets._text import visible_token
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, FileFormatError
from circuitwidgets.features._untrusted import open_regular, parse_json, size_of
from circuitwidgets.graphs.graph import EdgeTable, Graph, NodeTable

#: circuit-tracer's names for the node kinds.
FEATURE_TYPES = {
    "feature": "cross layer transcoder",
    "error": "mlp reconstruction error",
    "embedding": "embedding",
    "logit": "logit",
}
_KINDS = {v: k for k, v in FEATURE_TYPES.items()}
#: Largest graph file read (bytes): circuit-tracer's 73-token graphs reach 1.7 GB; a file past this is refused by name.
MAX_BYTES = 2 * 2**30


def _cantor(x: int, y: int) -> int:
    return (x + y) * (x + y + 1) // 2 + y


def _node_json(graph: Graph, i: int, n_layers: int, cumulative: list[float], first_logit: int) -> dict[str, Any]:
    n = graph.nodes
    kind, layer, pos, index = n.kind[i], int(n.layer[i]), int(n.pos[i]), int(n.index[i])
    influence = cumulative[i] if i < len(cumulative) else None
    node: dict[str, Any] = {"ctx_idx": pos, "feature_type": FEATURE_TYPES[kind], "influence": influence}
    clerp = graph.extra.get("clerps", {}).get(n.label[i])
    if isinstance(clerp, str) and kind != "logit":
        node["clerp"] = clerp
    if kind == "feature":
        node |= {"node_id": f"{layer}_{index}_{pos}", "feature": _cantor(layer, index), "layer": str(layer),
                 "jsNodeId": f"{layer}_{index}-0", "activation": float(n.activation[i])}  # fmt: skip
    elif kind == "error":
        node |= {"node_id": f"0_{layer}_{pos}", "feature": -1, "layer": str(layer), "jsNodeId": f"{layer}_{pos}-0"}
    elif kind == "embedding":
        node |= {"node_id": f"E_{index}_{pos}", "feature": pos, "layer": "E", "jsNodeId": f"E_{index}-{pos}"}
    else:
        p = float(n.activation[i])
        token = graph.extra.get("logit_strings", {}).get(str(index), str(index))
        node |= {"node_id": f"{n_layers + 1}_{index}_{pos}", "feature": index, "layer": str(n_layers + 1),
                 "jsNodeId": f"L_{index}-{pos}", "token_prob": p, "is_target_logit": i == first_logit,
                 "clerp": f'Output "{token}" (p={p:.3f})', "influence": None}  # fmt: skip
    return node


def circuit_tracer_dict(graph: Graph, slug: str = "graph", scan: str = "circuitwidgets") -> dict[str, Any]:
    """``graph`` (an attribution graph: feature, error, embedding and logit nodes) as circuit-tracer's JSON object."""
    bad = sorted({k for k in graph.nodes.kind if k not in FEATURE_TYPES})
    if bad:
        raise ArgumentError(
            f"graph: circuit-tracer's format holds feature, error, embedding and logit nodes, got {bad}"
        )
    logits = [i for i, k in enumerate(graph.nodes.kind) if k == "logit"]
    n_layers = int(graph.extra.get("n_layers", int(graph.nodes.layer[logits[0]]) if logits else 0))
    cumulative = [float(v) for v in graph.extra.get("cumulative_influence", [])]
    nodes = [_node_json(graph, i, n_layers, cumulative, logits[0] if logits else -1) for i in range(len(graph.nodes))]
    ids = [node["node_id"] for node in nodes]
    links = [
        {"source": ids[int(s)], "target": ids[int(d)], "weight": float(w)}
        for s, d, w in zip(graph.edges.src, graph.edges.dst, graph.edges.weight, strict=True)
    ]
    names = graph.extra.get("transcoder_list", [])
    transcoder_list = [str(x) for x in names] if isinstance(names, list) else []
    meta = {"slug": slug, "scan": scan, "transcoder_list": transcoder_list, "prompt_tokens": list(graph.prompt),
            "prompt": "".join(graph.prompt), "node_threshold": graph.extra.get("node_threshold"), "schema_version": 1}  # fmt: skip
    pinned, supernodes = _pins_out(graph, ids)
    qparams = {"pinnedIds": pinned, "supernodes": supernodes, "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": meta, "qParams": qparams, "nodes": nodes, "links": links}


def _pins_out(graph: Graph, ids: list[str]) -> tuple[list[str], list[list[str]]]:
    """``extra["pinned"]`` and ``extra["supernodes"]`` (node labels) as the front end's ``pinnedIds`` and
    ``supernodes`` (``[label, node_id, ...]``); labels not in the graph are left out."""
    row = {label: i for i, label in enumerate(graph.nodes.label)}
    pinned = [ids[row[x]] for x in graph.extra.get("pinned", []) if x in row]
    groups = [
        [str(g["label"]), *(ids[row[x]] for x in g["nodes"] if x in row)]
        for g in graph.extra.get("supernodes", [])
        if isinstance(g, dict) and isinstance(g.get("nodes"), list)
    ]
    return pinned, groups


def _pins_in(qparams: object, ids: dict[str, int], labels: list[str]) -> dict[str, Any]:
    """The pins and supernodes of a file's ``qParams`` as ``extra`` entries (node labels); unknown ids and
    malformed entries are left out (a hand-edited or hostile file cannot name a node that is not there)."""
    if not isinstance(qparams, dict):
        return {}
    raw = qparams.get("pinnedIds", [])
    pinned = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else []
    out: dict[str, Any] = {"pinned": [labels[ids[x]] for x in pinned if isinstance(x, str) and x in ids]}
    groups = []
    for g in qparams.get("supernodes", []) if isinstance(qparams.get("supernodes"), list) else []:
        if isinstance(g, list) and len(g) > 1 and all(isinstance(x, str) for x in g):
            members = [labels[ids[x]] for x in g[1:] if x in ids]
            if members:
                groups.append({"label": g[0], "nodes": members})
    out["supernodes"] = groups
    return out if out["pinned"] or groups else {}


def to_circuit_tracer_json(
    graph: Graph,
    path: str | os.PathLike[str],
    slug: str = "graph",
    scan: str = "circuitwidgets",
    transcoders: object = None,
) -> Path:
    """Write ``graph`` as circuit-tracer's graph JSON at ``path`` (atomically: temporary file, then rename).

    Logit nodes carry their token strings (``clerp`` ``Output " the" (p=0.520)``, as circuit-tracer writes them);
    ``metadata.transcoder_list`` names ``transcoders`` (the dictionaries the graph was built with, a list or a
    ``{layer: Dictionary}`` mapping), else the list a file read here held.
    """
    out = Path(path)
    content = circuit_tracer_dict(graph, slug, scan)
    if transcoders is not None:
        content["metadata"]["transcoder_list"] = transcoder_names(transcoders)
    data = json.dumps(content, allow_nan=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def transcoder_names(transcoders: object) -> list[str]:
    """The names (``L0.tc``, ...) of a list or ``{layer: Dictionary}`` mapping of dictionaries, in layer order."""
    values = list(transcoders.values()) if isinstance(transcoders, dict) else transcoders
    if not isinstance(values, (list, tuple)) or not all(hasattr(d, "name") for d in values):
        raise ArgumentTypeError(
            f"transcoders: expected a list or {{layer: Dictionary}} of dictionaries, got {type(transcoders).__name__}"
        )
    return [str(d.name) for d in sorted(values, key=lambda d: int(getattr(d, "layer", 0)))]


def _field(where: str, node: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = node.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ArgumentError(f"{where}.{name}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


#: Largest index a node may carry (layer, position, feature, token): the page's typed arrays are int32.
MAX_INDEX = 2**31 - 1


def _ints(where: str, node_id: str, count: int, prefix: str = "") -> list[int]:
    parts = node_id.removeprefix(prefix).split("_")
    if len(parts) != count or not all(p.isascii() and p.isdigit() and len(p) < 12 for p in parts):
        raise ArgumentError(
            f"{where}.node_id: expected {count} non-negative integers joined by '_', got {node_id[:40]!r}"
        )
    values = [int(p) for p in parts]
    if max(values) > MAX_INDEX:
        raise ArgumentError(f"{where}.node_id: expected indices of at most {MAX_INDEX:,} (int32), got {node_id[:40]!r}")
    return values


def _number(where: str, node: dict[str, Any], name: str) -> float:
    """An optional finite number field (absent or null: NaN)."""
    value = node.get(name)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ArgumentError(f"{where}.{name}: expected a finite number or null, got {json.dumps(value)[:40]}")
    return float(value)


def _parse_node(where: str, node: object) -> tuple[str, int, int, int, float, float, str]:
    """``(kind, layer, pos, index, activation, cumulative influence, node id)`` of one node object."""
    if not isinstance(node, dict):
        raise ArgumentError(f"{where}: expected an object, got {type(node).__name__}")
    node_id = _field(where, node, "node_id", str)
    ftype = _field(where, node, "feature_type", str)
    if ftype not in _KINDS:
        raise ArgumentError(f"{where}.feature_type: expected one of {sorted(_KINDS)}, got {ftype[:40]!r}")
    kind = _KINDS[ftype]
    pos = _field(where, node, "ctx_idx", int)
    cum, act = _number(where, node, "influence"), _number(where, node, "activation")
    if kind == "feature":
        layer, index, p = _ints(where, node_id, 3)
    elif kind == "error":
        _, layer, p = _ints(where, node_id, 3)
        index = -1
    elif kind == "embedding":
        index, p = _ints(where, node_id, 2, "E_")
        layer = -1
    else:
        layer, index, p = _ints(where, node_id, 3)
        layer -= 1
        act = float(_field(where, node, "token_prob", (int, float)))
        if not 0.0 <= act <= 1.0:  # NaN fails too
            raise ArgumentError(f"{where}.token_prob: expected a probability in [0, 1], got {act}")
    if p != pos:
        raise ArgumentError(f"{where}: node_id {node_id[:40]!r} says position {p}, ctx_idx says {pos}")
    return kind, layer, pos, index, act, cum, node_id


def from_circuit_tracer_dict(data: object, where: str = "graph") -> Graph:
    """A :class:`Graph` from circuit-tracer's JSON object (``where`` names it in errors)."""
    if not isinstance(data, dict):
        raise ArgumentError(
            f"{where}: expected a JSON object with metadata, nodes and links, got {type(data).__name__}"
        )
    for key, kind in (("metadata", dict), ("nodes", list), ("links", list)):
        if not isinstance(data.get(key), kind):
            raise ArgumentError(
                f"{where}: expected {key!r} to be a JSON {kind.__name__}, got {type(data.get(key)).__name__}"
            )
    rows = [_parse_node(f"{where}: nodes[{i}]", node) for i, node in enumerate(data["nodes"])]
    ids = {r[6]: i for i, r in enumerate(rows)}
    if len(ids) != len(rows):
        seen: set[str] = set()
        twice = next(r[6] for r in rows if r[6] in seen or seen.add(r[6]))  # type: ignore[func-returns-value]
        raise ArgumentError(
            f"{where}: nodes: two nodes share the node_id {twice[:40]!r}, so links cannot tell them apart "
            "(circuit-tracer names layer 0's feature f and layer f's error at a position alike)"
        )
    src, dst, weight = [], [], []
    for i, link in enumerate(data["links"]):
        at = f"{where}: links[{i}]"
        if not isinstance(link, dict):
            raise ArgumentError(f"{at}: expected an object, got {type(link).__name__}")
        s, t = _field(at, link, "source", str), _field(at, link, "target", str)
        w = float(_field(at, link, "weight", (int, float)))
        if s not in ids or t not in ids or not math.isfinite(w):
            raise ArgumentError(
                f"{at}: expected a finite weight between listed nodes, got {s[:40]!r} -> {t[:40]!r} ({w})"
            )
        src.append(ids[s])
        dst.append(ids[t])
        weight.append(w)
    meta = data["metadata"]
    prompt = meta.get("prompt_tokens", [])
    if not isinstance(prompt, list) or not all(isinstance(s, str) for s in prompt):
        raise ArgumentError(f"{where}: metadata.prompt_tokens: expected a list of strings")
    _check_ranges(where, rows, len(prompt))
    kinds = [r[0] for r in rows]
    logit_strings = {str(r[3]): t for r, node in zip(rows, data["nodes"], strict=True) if r[0] == "logit"
                     for t in [_logit_token(node.get("clerp"))] if t is not None}  # fmt: skip
    labels = [_label(r, prompt, logit_strings) for r in rows]
    clerps = {label: node["clerp"] for label, r, node in zip(labels, rows, data["nodes"], strict=True)
              if r[0] != "logit" and isinstance(node.get("clerp"), str) and node["clerp"]}  # fmt: skip
    nodes = NodeTable(kinds, np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
                      np.array([r[3] for r in rows]), labels, np.array([r[4] for r in rows]))  # fmt: skip
    tokens = {r[2]: r[3] for r in rows if r[0] == "embedding"}
    logit_layers = {r[1] for r in rows if r[0] == "logit"}
    extra: dict[str, Any] = {"cumulative_influence": [r[5] for r in rows], "source": "circuit-tracer json"}
    names = meta.get("transcoder_list")
    if isinstance(names, list) and all(isinstance(x, str) for x in names):
        extra["transcoder_list"] = names
    if logit_strings:
        extra["logit_strings"] = logit_strings
    if clerps:
        extra["clerps"] = clerps
    if len(logit_layers) == 1:
        extra["n_layers"] = logit_layers.pop()
    extra |= _pins_in(data.get("qParams"), ids, labels)
    return Graph(
        nodes, EdgeTable(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(weight)), {},
        [str(s) for s in prompt], [tokens[p] for p in sorted(tokens)], "circuit-tracer graph file", "attribution",
        "logits", extra,
    )  # fmt: skip


def _check_ranges(where: str, rows: list[tuple[str, int, int, int, float, float, str]], n_pos: int) -> None:
    """Every node's position inside the prompt, every feature's and error's layer below the logits' layer."""
    logit_layers = {r[1] for r in rows if r[0] == "logit"}
    n_layers = min(logit_layers) if logit_layers else MAX_INDEX
    for i, (kind, layer, pos, *_rest) in enumerate(rows):
        if pos >= n_pos:
            raise ArgumentError(
                f"{where}: nodes[{i}].ctx_idx: expected a position in [0, {n_pos}) (metadata.prompt_tokens), got {pos}"
            )
        if kind in ("feature", "error") and layer >= n_layers:
            raise ArgumentError(
                f"{where}: nodes[{i}].layer: expected a layer in [0, {n_layers}) (below the logit nodes'), got {layer}"
            )
    if len(logit_layers) > 1:
        raise ArgumentError(
            f"{where}: nodes: expected every logit node on one layer, got layers {sorted(logit_layers)}"
        )


def _logit_token(clerp: object) -> str | None:
    """The token of circuit-tracer's logit ``clerp`` (``Output " the" (p=0.520)``), or None."""
    if not isinstance(clerp, str) or not clerp.startswith('Output "'):
        return None
    end = clerp.rfind('" (p=')
    return clerp[len('Output "') : end] if end >= len('Output "') else None


def _label(row: tuple[str, int, int, int, float, float, str], prompt: list[str], logits: dict[str, str]) -> str:
    kind, layer, pos, index = row[:4]
    if kind == "feature":
        return f"L{layer} f{index} @{pos}"
    if kind == "error":
        return f"L{layer} error @{pos}"
    if kind == "embedding":
        shown = visible_token(prompt[pos]) if 0 <= pos < len(prompt) else str(index)
        return f"emb {shown!r} @{pos}"
    if str(index) in logits:
        return f"logit {visible_token(logits[str(index)])!r} ({index})"
    return f"logit ({index})"


def from_circuit_tracer_json(path: str | os.PathLike[str], max_bytes: int = MAX_BYTES) -> Graph:
    """Read circuit-tracer's (or Neuronpedia's) graph JSON file into a :class:`Graph` (typed errors name the file).

    Only a regular file of at most ``max_bytes`` is read (refused by its size, before reading; a FIFO or device is
    refused without blocking); every node's position must lie inside ``metadata.prompt_tokens``, every layer
    below the logit nodes', every index fit an int32, every number be finite. Logit nodes keep their token strings
    (``extra["logit_strings"]``) and other nodes their ``clerp`` (``extra["clerps"]``, by node label).
    """
    where = Path(path)
    with open_regular(where, "path") as handle:
        size = size_of(handle)
        if size > max_bytes:
            raise FileFormatError(f"path: {str(where)!r}: expected at most {max_bytes:,} bytes, got {size:,}")
        raw = handle.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise FileFormatError(f"path: {str(where)!r}: expected at most {max_bytes:,} bytes, got more")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileFormatError(
            f"path: {str(where)!r}: expected UTF-8 JSON, got {exc.reason} at byte {exc.start}"
        ) from None
    data = parse_json(text, f"path: {str(where)!r}")
    return from_circuit_tracer_dict(data, repr(str(where)))
