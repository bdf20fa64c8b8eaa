"""The component graph of a :class:`~circuitwidgets.CircuitModel`: senders, receivers and every edge between them.

Senders write into the residual stream: the input (token embedding, plus the
position embedding when it is added to the stream), each head (``z W_O``,
without ``b_O``, which no corruption changes) and each MLP. Receivers read it:
each head's query, key and value inputs separately (EAP's convention: a head's
three inputs are three receivers), each MLP's input and the logits. An edge
``s → r`` exists when ``s`` writes before ``r`` reads: senders of earlier
layers, and in the same layer a sequential MLP reads its layer's heads.

Sender order: ``embed``, then per layer ``L{l}H0 … L{l}H{n-1}``, ``MLP{l}``.
Receiver order: per layer all queries, all keys, all values, then ``MLP{l}``;
finally ``logits``. A receiver group (one layer's attention inputs, one MLP,
the logits) reads the first ``upstream`` senders, so scores are a lower-left
block structure in a ``[senders, receivers]`` matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from circuitwidgets.errors import ArgumentError, UnsupportedArchitectureError
from circuitwidgets.graphs.graph import EdgeTable, NodeTable
from circuitwidgets.model import CircuitModel


@dataclass(frozen=True)
class Group:
    """Receivers read together: ``kind`` ``"attn"`` (3 × n_heads inputs), ``"mlp"`` (1) or ``"logits"`` (1)."""

    kind: str
    layer: int
    first: int  # first receiver index
    size: int  # receivers in the group
    upstream: int  # senders it reads: indices [0, upstream)


@dataclass(frozen=True)
class Components:
    """Senders, receivers and receiver groups of a model's component graph (see the module docstring)."""

    n_layers: int
    n_heads: int
    has_mlp: bool
    parallel: bool

    @property
    def per_layer(self) -> int:
        """Senders per layer: the heads, and the MLP."""
        return self.n_heads + int(self.has_mlp)

    @property
    def n_senders(self) -> int:
        """All senders (``embed`` first)."""
        return 1 + self.n_layers * self.per_layer

    def head_sender(self, layer: int, head: int) -> int:
        """Sender index of head ``(layer, head)``."""
        return 1 + layer * self.per_layer + head

    def mlp_sender(self, layer: int) -> int:
        """Sender index of MLP ``layer``."""
        return 1 + layer * self.per_layer + self.n_heads

    def groups(self) -> list[Group]:
        """Receiver groups in the forward pass's order."""
        out, first, h = [], 0, self.n_heads
        for layer in range(self.n_layers):
            before = 1 + layer * self.per_layer
            out.append(Group("attn", layer, first, 3 * h, before))
            first += 3 * h
            if self.has_mlp:
                out.append(Group("mlp", layer, first, 1, before if self.parallel else before + h))
                first += 1
        out.append(Group("logits", self.n_layers, first, 1, self.n_senders))
        return out

    @property
    def n_receivers(self) -> int:
        """All receivers (``logits`` last)."""
        last = self.groups()[-1]
        return last.first + last.size

    def sender_labels(self) -> list[str]:
        """``embed``, ``L0H0`` …, ``MLP0`` …"""
        out = ["embed"]
        for layer in range(self.n_layers):
            out += [f"L{layer}H{h}" for h in range(self.n_heads)]
            if self.has_mlp:
                out.append(f"MLP{layer}")
        return out

    def receiver_labels(self) -> list[str]:
        """``L0H0.q`` …, ``L0H0.k`` …, ``L0H0.v`` …, ``MLP0`` …, ``logits``."""
        out = []
        for layer in range(self.n_layers):
            out += [f"L{layer}H{h}.{x}" for x in "qkv" for h in range(self.n_heads)]
            if self.has_mlp:
                out.append(f"MLP{layer}")
        return [*out, "logits"]

    def edge_mask(self) -> np.ndarray:
        """``[senders, receivers]`` True where the edge exists."""
        mask = np.zeros((self.n_senders, self.n_receivers), dtype=bool)
        for g in self.groups():
            mask[: g.upstream, g.first : g.first + g.size] = True
        return mask

    def tables(self, weights: np.ndarray) -> tuple[NodeTable, EdgeTable]:
        """The node table (senders and receivers, an MLP once) and the edges with weights from a
        ``[senders, receivers]`` matrix, in sender-major order."""
        kind, layer, index, label = ["embedding"], [-1], [-1], ["embed"]
        row_of_sender, row_of_receiver = [0], []

        def add(k: str, at: int, i: int, name: str) -> int:
            kind.append(k)
            layer.append(at)
            index.append(i)
            label.append(name)
            return len(kind) - 1

        for g in self.groups():
            if g.kind == "attn":
                row_of_sender += [add("head", g.layer, h, f"L{g.layer}H{h}") for h in range(self.n_heads)]
                row_of_receiver += [
                    add(f"head_{x}", g.layer, h, f"L{g.layer}H{h}.{x}") for x in "qkv" for h in range(self.n_heads)
                ]
            elif g.kind == "mlp":
                row = add("mlp", g.layer, -1, f"MLP{g.layer}")
                row_of_sender.append(row)
                row_of_receiver.append(row)
            else:
                row_of_receiver.append(add("logit", g.layer, -1, "logits"))
        n = len(kind)
        nodes = NodeTable(kind, np.array(layer), np.full(n, -1), np.array(index), label)
        s, r = np.nonzero(self.edge_mask())
        edges = EdgeTable(np.array(row_of_sender)[s], np.array(row_of_receiver)[r], weights[s, r])
        return nodes, edges


def components_of(model: CircuitModel) -> Components:
    """The component graph of ``model``, or a typed error naming what it cannot split into senders and receivers."""
    cfg = model.cfg
    refused = {
        "post_norm": cfg.post_norm,
        "normalization='rms_post'": cfg.normalization == "rms_post",
        "qk_norm='all'": cfg.qk_norm == "all",
        "kv_sources": cfg.kv_sources is not None,
        "d_per_layer": cfg.d_per_layer is not None,
        "head_dims": cfg.head_dims is not None,
        "v_norm": cfg.v_norm,
        "layer_scalar": model.weight("layer_scalar") is not None,
    }
    bad = [name for name, on in refused.items() if on]
    if bad:
        raise UnsupportedArchitectureError(
            f"model: {model.name!r} has {', '.join(bad)}; edge attribution needs a residual stream that is the sum of "
            "its senders' writes and receivers that read it through their own input norm (no output norms, no "
            "norm across heads, no shared keys/values, no per-layer inputs or residual scalars)"
        )
    if cfg.mlp_weights_absent:
        raise ArgumentError(f"model: {model.name!r} was loaded without its MLP weights; load it whole to run it")
    return Components(cfg.n_layers, cfg.n_heads, cfg.has_mlp, cfg.has_mlp and cfg.parallel_attn_mlp)
