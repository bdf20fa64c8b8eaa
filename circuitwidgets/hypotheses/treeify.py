"""The treeified model of a causal-scrubbing hypothesis: each path through the model reads its own input.

The tree's nodes are named by their path to the logits (a tuple of component
names, :mod:`circuitwidgets.hypotheses.paths`): a reader (``logits``, a head's
``q``/``k``/``v``, an MLP) sums what its writers (``embed``, earlier heads and
MLPs, the attention biases) write; a head's output is computed from its three
readers' streams. A node whose whole subtree reads one example is that example's
cached value (one run of the dataset); only the nodes above a kept path are
recomputed, each as one layer's pass over the dataset from its treeified streams.
The sum is exact for models whose stream is the sum of these parts (pre-norm
models without sublayer-output norms), which :func:`check_decomposes` verifies.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from circuitwidgets.errors import UnsupportedArchitectureError
from circuitwidgets.hypotheses.paths import component, head_index, is_head, layer_of
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.cache import Recorder

Key = tuple[str, ...]

#: What one run of the dataset keeps: every reader's stream and every writer's output.
CACHED = ["resid_pre", "resid_mid", "resid_final", "z", "attn_out", "mlp_out"]


class _StopError(Exception):
    """Ends a pass once the activation it was run for is captured."""


def covers(path: Key, key: Key) -> bool:
    """Whether kept ``path`` covers node ``key`` (the node lies in the path's subtree, or is its root)."""
    n = len(path)
    if len(key) < n or key[len(key) - n + 1 :] != path[1:]:
        return False
    first = key[len(key) - n]
    return first == path[0] or ("." not in path[0] and is_head(path[0]) and component(first) == path[0])


def variants(key: Key) -> list[Key]:
    """The keys a node's subtree starts from: a head writer's three readers, else the node itself."""
    if is_head(key[0]) and "." not in key[0]:
        return [(f"{key[0]}.{s}", *key[1:]) for s in "qkv"]
    return [key]


def strictly_below(path: Key, key: Key) -> bool:
    """Whether kept ``path``'s root lies strictly inside node ``key``'s subtree."""
    if covers(path, key):
        return False
    return any(len(path) >= len(v) and path[len(path) - len(v) :] == v for v in variants(key))


def writers(model: CircuitModel, reader: str) -> list[str]:
    """The components writing into ``reader``'s stream, in forward order (``embed`` first)."""
    cfg = model.cfg
    out = ["embed"]
    for layer in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            out.append(f"L{layer}H{h}")
        if cfg.has_mlp:
            out.append(f"MLP{layer}")
    if reader == "logits":
        return out
    place = layer_of(component(reader))
    return [w for w in out if w == "embed" or layer_of(w) < place]


class Treeified:
    """One draw of a hypothesis on a dataset: the example each kept path reads, the rest reading ``rest``.

    ``samples[i]``: per example, the index of the example kept path ``i`` reads;
    ``rest``: the example every other path reads. :meth:`final_stream` is the
    treeified stream the logits read; :attr:`passes` counts the one-layer passes it ran.
    """

    def __init__(
        self,
        model: CircuitModel,
        tokens: torch.Tensor,
        cache: ActivationCache,
        paths: Sequence[Key],
        samples: Sequence[torch.Tensor],
        rest: torch.Tensor,
    ) -> None:
        self.model, self.tokens, self.cache = model, tokens, cache
        self.paths, self.samples, self.rest = list(paths), list(samples), rest
        self.passes = 0
        W_O = model.weight("W_O")
        assert W_O is not None
        self._W_O = W_O
        self.recomputed = 0
        self._streams: dict[Key, torch.Tensor] = {}
        self._outputs: dict[Key, torch.Tensor] = {}
        self._indexed: dict[tuple[str, int | None, int], torch.Tensor] = {}

    def assigned(self, key: Key) -> torch.Tensor:
        """The example each reference's node ``key`` reads: the innermost kept path covering it, else ``rest``."""
        best, index = (-1, 0), None
        for i, path in enumerate(self.paths):
            rank = (len(path), int("." in path[0]))  # longer is inner; a reader's input beats its head's
            if covers(path, key) and rank > best:
                best, index = rank, i
        return self.rest if index is None else self.samples[index]

    def recompute(self, key: Key) -> bool:
        """Whether node ``key``'s subtree holds a kept path of its own (else it is one example's cached value)."""
        return any(strictly_below(p, key) for p in self.paths)

    def stream(self, key: Key) -> torch.Tensor:
        """The stream reader ``key`` reads ``[N, pos, d_model]``."""
        if key in self._streams:
            return self._streams[key]
        reader = key[0]
        if not self.recompute(key):
            out = self._cached_stream(reader, self.assigned(key))
        else:
            out = self._bias(reader)
            for w in writers(self.model, reader):
                out = out + self.output((w, *key))
        self._streams[key] = out
        return out

    def _cached_stream(self, reader: str, examples: torch.Tensor) -> torch.Tensor:
        """The clean run's stream at ``reader`` of ``examples``, one tensor per (site, layer, draw): a head whose
        queries and values read the same stream then needs no pass of its own for the values."""
        site = _reader_site(self.model, reader)
        layer = None if reader == "logits" else layer_of(component(reader))[0]
        slot = (site, layer, id(examples))
        if slot not in self._indexed:
            whole = self.cache[site] if layer is None else self.cache[site, layer]
            self._indexed[slot] = whole[examples]
        return self._indexed[slot]

    def output(self, key: Key) -> torch.Tensor:
        """What writer ``key[0]`` writes in node ``key`` ``[N, pos, d_model]``."""
        if key in self._outputs:
            return self._outputs[key]
        w = key[0]
        recompute = self.recompute(key)
        if w == "embed":
            out = self.cache["resid_pre", 0][self.assigned(key)]
        elif is_head(w):
            layer, h = head_index(w)
            W_O = self._W_O[layer, h]
            if not recompute:
                out = self.cache["z", layer][self.assigned(key)][:, :, h] @ W_O
            else:
                out = self._head(layer, h, *(self.stream(v) for v in variants(key))) @ W_O
        else:
            layer = layer_of(w)[0]
            out = self.cache["mlp_out", layer][self.assigned(key)] if not recompute else self._mlp(layer, key)
        self._outputs[key] = out
        return out

    def _bias(self, reader: str) -> torch.Tensor:
        """The attention biases written before ``reader`` (``b_O`` of each layer before it)."""
        b_O = self.model.weight("b_O")
        total = torch.zeros(self.model.cfg.d_model, dtype=self.model.W_E.dtype, device=self.model.device)
        if b_O is None:
            return total
        last = self.model.cfg.n_layers if reader == "logits" else layer_of(component(reader))[0]
        if reader.startswith("MLP"):
            last += 1  # an MLP reads its own layer's attention output
        return total + b_O[:last].sum(0)

    def _capture(
        self, layer: int, resid: torch.Tensor, hooks: dict[tuple[str, int | None], object], name: str
    ) -> torch.Tensor:
        got: dict[str, torch.Tensor] = {}

        def grab(value: torch.Tensor) -> None:
            got["v"] = value
            raise _StopError

        all_hooks = {**hooks, (name, layer): grab}
        self.passes += 1
        try:
            self.model.run_from(self.tokens, layer, resid, Recorder({}, set(), all_hooks))  # type: ignore[arg-type]
        except _StopError:
            return got["v"]
        raise AssertionError(f"{name} of layer {layer} was never computed")  # pragma: no cover

    def _head(self, layer: int, h: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Head ``h``'s ``z`` ``[N, pos, d_head]`` with its queries, keys and values read from three streams."""
        self.recomputed += 1
        hooks: dict[tuple[str, int | None], object] = {}
        for name, src in (("k", k), ("v", v)):
            if src is not q:
                value = self._capture(layer, src, {}, name)
                hooks[(name, layer)] = lambda _, value=value: value
        return self._capture(layer, q, hooks, "z")[:, :, h]

    def _mlp(self, layer: int, key: Key) -> torch.Tensor:
        """MLP ``layer``'s output from its treeified stream."""
        self.recomputed += 1
        mid = self.stream(key)
        return self._capture(layer, mid, {("resid_mid", layer): lambda _: mid}, "mlp_out")


def _reader_site(model: CircuitModel, reader: str) -> str:
    if reader == "logits":
        return "resid_final"
    return "resid_mid" if reader.startswith("MLP") else "resid_pre"


def check_decomposes(model: CircuitModel, cache: ActivationCache) -> None:
    """Refuse a model whose stream is not embed + Σ heads' ``z W_O`` + ``b_O`` + MLP outputs (sublayer-output norms,
    per-layer inputs, parallel blocks): the treeified sum would not be the model's."""
    cfg = model.cfg
    if cfg.post_norm or cfg.normalization == "rms_post" or cfg.parallel_attn_mlp or cfg.d_per_layer or cfg.kv_sources:
        raise UnsupportedArchitectureError(
            f"model: causal scrubbing needs a stream that is the sum of its writers; {model.name!r} has "
            "sublayer-output norms, parallel blocks, per-layer inputs or shared keys and values"
        )
    b_O = model.weight("b_O")
    resid = cache["resid_pre", 0]
    tol = 1e-9 if resid.dtype == torch.float64 else 1e-3
    for layer in range(cfg.n_layers):
        W_O = model.weight("W_O")
        assert W_O is not None
        heads = torch.einsum("bphd,hdm->bpm", cache["z", layer], W_O[layer])
        attn = heads + (b_O[layer] if b_O is not None else 0)
        mlp = cache["mlp_out", layer] if cfg.has_mlp else 0
        resid = resid + attn + mlp
        scale = float(resid.abs().max()) + 1.0
        if not torch.allclose(attn, cache["attn_out", layer], atol=tol * scale, rtol=0):
            raise UnsupportedArchitectureError(
                f"model: {model.name!r}'s attention output at layer {layer} is not the sum of its heads' z W_O + b_O"
            )
    if not torch.allclose(resid, cache["resid_final"], atol=tol * (float(resid.abs().max()) + 1.0), rtol=0):
        raise UnsupportedArchitectureError(f"model: {model.name!r}'s final stream is not the sum of its writers")
