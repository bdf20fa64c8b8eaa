"""A causal-scrubbing hypothesis: the paths through a model it keeps, and the input property each one reads.

Components are named as the causal engine names them: ``embed`` (the token and
position embeddings that enter the stream), a head ``L1H4`` (all of its inputs) or
one of its inputs ``L1H4.q`` / ``.k`` / ``.v``, an MLP layer ``MLP0``, and ``logits``.
A path runs from a writer to ``logits`` through readers, each reading the one
before: ``("L0H7", "L1H4.k", "logits")`` is head L0H7's output as L1H4's keys
read it, and L1H4's output as the logits read it, with everything upstream of
L0H7 (the path's subtree). Kept paths read an input with the same key as the
example scored; every other path reads a random other example. The model is
treeified (each path has its own input); where two kept paths nest, the inner
one's key wins inside it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel

#: A key function: one input's token ids (a tuple of ints) to a hashable key; inputs with equal keys are interchangeable.
KeyFn = Callable[[tuple[int, ...]], Hashable]

_HEAD = re.compile(r"^L(\d+)H(\d+)(?:\.([qkv]))?$")
_MLP = re.compile(r"^MLP(\d+)$")


def whole_input(tokens: tuple[int, ...]) -> Hashable:
    """The key of a path that reads the whole input: the token ids themselves."""
    return tokens


@dataclass(frozen=True)
class KeptPath:
    """One kept path: its components (a writer or reader first, ``logits`` last) and the key function it reads."""

    nodes: tuple[str, ...]
    key: KeyFn
    label: str

    def __str__(self) -> str:
        return " → ".join(self.nodes) + f" [{self.label}]"


class Hypothesis:
    """Paths kept, each with the input property it reads (a key function); every other path is resampled.

    Parameters
    ----------
    paths
        ``(path, key)`` pairs: a path is a sequence of component names ending in
        ``"logits"`` (or a string ``"L0H7 -> L1H4.k -> logits"``); ``key`` maps one
        input's token ids (a tuple of ints) to a hashable value, or is ``None`` for the
        whole input. A triple ``(path, key, label)`` names the key in results.
    name
        how results and views call this hypothesis.

    Examples
    --------
    >>> induction = Hypothesis([("L0H7 -> L1H4.k -> logits", None), ("embed -> L1H4.v -> logits", None)])
    """

    def __init__(self, paths: Sequence[object] = (), name: str = "") -> None:
        if isinstance(paths, (str, bytes)) or not isinstance(paths, Sequence):
            raise ArgumentTypeError(f"paths: expected a list of (path, key) pairs, got {type(paths).__name__}")
        kept = []
        for i, item in enumerate(paths):
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise ArgumentTypeError(
                    f"paths[{i}]: expected a (path, key) pair or (path, key, label), got {item!r:.80}"
                )
            nodes, key = parse_path(item[0], f"paths[{i}]"), item[1]
            if key is not None and not callable(key):
                raise ArgumentTypeError(f"paths[{i}]: expected a key function or None, got {type(key).__name__}")
            label = str(item[2]) if len(item) == 3 else ("whole input" if key is None else _fn_name(key))
            kept.append(KeptPath(nodes, whole_input if key is None else key, label))
        seen = [p.nodes for p in kept]
        for i, nodes in enumerate(seen):
            if nodes in seen[:i]:
                raise ArgumentError(f"paths[{i}]: expected each path once, got {' -> '.join(nodes)!r} twice")
        if not isinstance(name, str):
            raise ArgumentTypeError(f"name: expected a str, got {type(name).__name__}")
        self.paths: tuple[KeptPath, ...] = tuple(kept)
        self.name = name or f"{len(kept)} kept path{'s' if len(kept) != 1 else ''}"

    @classmethod
    def full(cls, model: CircuitModel | None = None) -> Hypothesis:
        """Every path, reading the whole input: the model itself (recovers 100 %)."""
        return cls([(("logits",), None)], name="full model")

    @classmethod
    def empty(cls, model: CircuitModel | None = None) -> Hypothesis:
        """No path kept: every input resampled (recovers 0 %, to sampling error)."""
        return cls([], name="empty")

    def __repr__(self) -> str:
        inner = "; ".join(map(str, self.paths)) or "nothing kept"
        return f"Hypothesis({self.name!r}: {inner})"


def _fn_name(fn: object) -> str:
    return str(getattr(fn, "__name__", type(fn).__name__))


def parse_path(path: object, arg: str) -> tuple[str, ...]:
    """A path's component names, checked for form (a writer or reader first, readers after, ``logits`` last)."""
    if isinstance(path, str):
        path = [p.strip() for p in re.split(r"->|→", path)]
    if not isinstance(path, (tuple, list)) or not path or not all(isinstance(p, str) for p in path):
        raise ArgumentTypeError(f"{arg}: expected a path such as ('L0H7', 'L1H4.k', 'logits'), got {path!r:.80}")
    nodes = tuple(path)
    if nodes[-1] != "logits" or "logits" in nodes[:-1]:
        raise ArgumentError(f"{arg}: expected a path ending in 'logits' (once), got {' -> '.join(nodes)!r}")
    for j, node in enumerate(nodes[:-1]):
        head = _HEAD.match(node)
        ok = (node == "embed" and j == 0) or _MLP.match(node) is not None or head is not None
        if head is not None and j > 0 and head.group(3) is None:
            ok = False  # a head after the path's start reads its predecessor through q, k or v: say which
        if not ok:
            raise ArgumentError(
                f"{arg}: expected components 'embed' (first), 'L<layer>H<head>' (first), 'L<layer>H<head>.q|k|v' "
                f"or 'MLP<layer>', got {node!r} in {' -> '.join(nodes)!r}"
            )
    return nodes


def layer_of(node: str) -> tuple[int, int]:
    """A component's place in the forward order: ``(layer, 0)`` for a head, ``(layer, 1)`` for an MLP."""
    head = _HEAD.match(node)
    if head is not None:
        return int(head.group(1)), 0
    mlp = _MLP.match(node)
    assert mlp is not None
    return int(mlp.group(1)), 1


def check_against(model: CircuitModel, nodes: tuple[str, ...], arg: str) -> None:
    """A path's components exist in ``model`` and each writes into the next (errors name ``arg``)."""
    cfg = model.cfg
    for node in nodes[:-1]:
        if node == "embed":
            continue
        head = _HEAD.match(node)
        if head is not None and not (int(head.group(1)) < cfg.n_layers and int(head.group(2)) < cfg.n_heads):
            raise ArgumentError(
                f"{arg}: {node!r} is not a head of {model.name!r} ({cfg.n_layers} layers × {cfg.n_heads} heads)"
            )
        mlp = _MLP.match(node)
        if mlp is not None and not (cfg.has_mlp and int(mlp.group(1)) < cfg.n_layers):
            raise ArgumentError(f"{arg}: {node!r} is not an MLP layer of {model.name!r}")
    for writer, reader in pairwise(nodes):
        if writer == "embed" or reader == "logits":
            continue
        if layer_of(writer.split(".")[0]) >= layer_of(reader.split(".")[0]):
            raise ArgumentError(f"{arg}: {writer!r} does not write into {reader!r} (it runs at or after it)")


def component(node: str) -> str:
    """A node's component (``L1H4.k`` → ``L1H4``)."""
    return node.split(".")[0]


def is_head(node: str) -> bool:
    """Whether ``node`` names a head or one of its inputs."""
    return _HEAD.match(node) is not None


def head_index(node: str) -> tuple[int, int]:
    """``(layer, head)`` of a head node."""
    m = _HEAD.match(node)
    assert m is not None
    return int(m.group(1)), int(m.group(2))
