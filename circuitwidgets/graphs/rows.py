"""Adjacency rows of an attribution graph: gradients contracted with the node writes, and the rows kept so far.

:class:`AdjacencyRows` turns the gradients of
:class:`~circuitwidgets.graphs.transposed.TransposedReplacement` into rows
(each node's write dotted with the target's gradient where it writes), one
layer at a time as they arrive; :class:`RowStore` holds the computed rows,
estimates the features' influence from them (to choose the next targets) and
assembles the square adjacency at the end.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import torch

from circuitwidgets.graphs.influence import partial_influences
from circuitwidgets.graphs.replacement import FrozenRun
from circuitwidgets.graphs.transcoders import TranscoderLike
from circuitwidgets.graphs.transposed import Gradient, TransposedReplacement, Visit
from circuitwidgets.model import CircuitModel

#: Elements of one ``[B, n, d_model]`` gradient a backward pass may hold; larger batches are split (exact either way).
GRAD_ELEMENTS = 2**25


class AdjacencyRows:
    """Computes adjacency rows (one per target) from batched transposed passes of the replacement model."""

    def __init__(self, model: CircuitModel, transcoders: Sequence[TranscoderLike], run: FrozenRun) -> None:
        self.model, self.transcoders, self.run = model, transcoders, run
        self.transposed = TransposedReplacement(model, transcoders, run)
        layers = run.active[:, 0]
        starts = _starts(layers, len(transcoders))
        self.spans = list(itertools.pairwise(starts))
        dtype = model.dtype
        with torch.no_grad():  # transcoders may be modules with trainable parameters: no graph through them
            writes = [
                (run.values[s:e, None] * tc.W_dec[run.active[s:e, 2]]).to(dtype)
                for tc, (s, e) in zip(transcoders, self.spans, strict=True)
            ]
            self.writes = [(run.active[s:e, 1].contiguous(), w) for (s, e), w in zip(self.spans, writes, strict=True)]
            self.padded = [_by_position(pos, w, run.n_pos) for pos, w in self.writes]
            self.errors = run.errors.to(dtype)
            self.embeds = model.W_E[run.tokens[0]].detach().to(dtype)
        self.n_sources = len(run.values) + (len(transcoders) + 1) * run.n_pos

    def features(self, targets: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``[B, n_sources]`` of feature targets (indices into ``run.active``, all of one layer, best sorted),
        written into ``out`` (zeros) when given."""
        chosen = self.run.active[targets]
        layer = int(chosen[0, 0])

        def push(part: slice, visit: Visit) -> None:
            self.transposed.features(layer, chosen[part, 1], chosen[part, 2], visit)

        return self._split(chosen[:, 1], push, out)

    def logits(self, vectors: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``[B, n_sources]`` of logit targets ``vectors`` ``[B, d_model]`` (centred unembedding columns),
        written into ``out`` (zeros) when given."""
        last = torch.full((len(vectors),), self.run.n_pos - 1, dtype=torch.long, device=vectors.device)

        def push(part: slice, visit: Visit) -> None:
            self.transposed.logits(vectors[part], visit)

        return self._split(last, push, out)

    def _split(self, pos: torch.Tensor, push: Callable[[slice, Visit], None], out: torch.Tensor | None) -> torch.Tensor:
        """Rows for targets at positions ``pos``, in parts whose gradients stay within :data:`GRAD_ELEMENTS`."""
        n = int(pos.max()) + 1
        step = max(1, GRAD_ELEMENTS // (n * self.model.cfg.d_model))
        if out is None:
            out = torch.zeros(len(pos), self.n_sources, dtype=self.model.dtype, device=pos.device)
        for c in range(0, len(pos), step):
            rows = out[c : c + step]  # a view: the contraction fills it

            def visit(layer: int, grad: Gradient, rows: torch.Tensor = rows) -> None:
                self._contract(rows, layer, grad)

            with torch.no_grad():
                push(slice(c, c + step), visit)
        return out

    def _contract(self, out: torch.Tensor, layer: int, grad: Gradient) -> None:
        """Fill ``out``'s columns of the nodes writing where ``grad`` is (each write · the gradient there)."""
        n, n_pos = grad.n, self.run.n_pos
        L = len(self.transcoders)
        if layer < 0:
            start = len(self.run.values) + L * n_pos
            out[:, start : start + n] = grad.dots(self.embeds)
            return
        start = len(self.run.values) + layer * n_pos
        out[:, start : start + n] = grad.dots(self.errors[layer])
        (s, _), (pos, write) = self.spans[layer], self.writes[layer]
        count = int(torch.searchsorted(pos, n))  # the layer's features before position n (sorted by position)
        if count == 0:
            return
        full, padded = grad.full(), self.padded[layer]
        if padded is None:
            out[:, s : s + count] = _dots(full, pos[:count], write[:count])
        else:
            out[:, s : s + count] = _padded_dots(full, padded[0][:n], padded[1][:count])


def _starts(layers: torch.Tensor, n_layers: int) -> list[int]:
    """Index of each layer's first active feature in a layer-sorted list, and the list's length last."""
    return torch.searchsorted(layers.contiguous(), torch.arange(n_layers + 1, device=layers.device)).tolist()


def _by_position(pos: torch.Tensor, write: torch.Tensor, n_pos: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The writes laid out ``[pos, k_max, d_model]`` (zero padded) and each feature's flat index in that layout,
    or ``None`` when padding would more than double the work (features crowded at a few positions)."""
    counts = torch.bincount(pos, minlength=n_pos)
    k_max = int(counts.max()) if len(pos) else 0
    if len(pos) == 0 or n_pos * k_max > 2 * len(pos) + n_pos:
        return None
    slot = (
        torch.arange(len(pos), device=pos.device) - (torch.cumsum(counts, 0) - counts)[pos]
    )  # rank within its position
    flat = pos * k_max + slot
    padded = torch.zeros(n_pos * k_max, write.shape[-1], dtype=write.dtype, device=write.device)
    padded[flat] = write
    return padded.view(n_pos, k_max, -1), flat


def _padded_dots(grad: torch.Tensor, padded: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
    """``[B, n]`` as :func:`_dots`, one batched product per position: ``grad[:, p] · padded[p]ᵀ``."""
    out = torch.bmm(grad.transpose(0, 1), padded.transpose(1, 2))  # [pos, B, k_max]
    return out.transpose(0, 1).reshape(grad.shape[0], -1)[:, flat]


def _dots(grad: torch.Tensor, pos: torch.Tensor, write: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """``[B, n]``: ``grad[b, pos[j]] · write[j]``, in chunks of features (memory ``B · chunk · d_model``)."""
    out = torch.empty(grad.shape[0], len(pos), dtype=grad.dtype, device=grad.device)
    for c in range(0, len(pos), chunk):
        out[:, c : c + chunk] = torch.einsum("bnd,nd->bn", grad[:, pos[c : c + chunk]], write[c : c + chunk])
    return out


class RowStore:
    """The computed rows ``[rows, nodes]`` (float64 for a float64 model, else float32), which node each is, and
    for each its absolute sum (the influence estimates normalise by it) and the end of its non-zero feature columns
    (a feature is only reached from earlier layers and positions: the estimates skip the rest)."""

    def __init__(self, n_rows: int, n_nodes: int, n_sources: int, n_active: int, dtype: torch.dtype) -> None:
        store = torch.float64 if dtype == torch.float64 else torch.float32
        # numpy's zeros come from calloc: pages untouched by any row (a feature is reached only from earlier
        # layers and positions) are never written, so they take no memory
        self.edges = torch.from_numpy(
            np.zeros((n_rows, n_nodes), dtype=np.float64 if store == torch.float64 else np.float32)
        )
        self.row_node = torch.zeros(n_rows, dtype=torch.long)
        self.row_sums = torch.zeros(n_rows, dtype=store)
        self.row_ends = torch.zeros(n_rows, dtype=torch.long)
        self.n_sources, self.n_active, self.filled = n_sources, n_active, 0

    def fill(
        self, compute: Callable[[torch.Tensor | None], torch.Tensor], nodes: torch.Tensor, like: torch.Tensor
    ) -> None:
        """Append the rows of ``nodes`` ``[B]``: ``compute(out)`` writes them into ``out`` (the store's own rows when
        ``like``'s dtype and device are the store's, no copy) or, given ``None``, returns them."""
        here = slice(self.filled, self.filled + len(nodes))
        rows = self.edges[here, : self.n_sources]
        if like.dtype == rows.dtype and like.device.type == "cpu":
            compute(rows)
        else:
            rows.copy_(compute(None).cpu().to(rows.dtype))
        self.row_sums[here] = torch.linalg.vector_norm(rows, ord=1, dim=1)
        nonzero = rows[:, : self.n_active] != 0
        last = self.n_active - nonzero.flip(1).to(torch.uint8).argmax(1)
        self.row_ends[here] = torch.where(nonzero.any(1), last, 0)
        self.row_node[here] = nodes
        self.filled += len(nodes)

    def influence(self, logit_p: torch.Tensor) -> torch.Tensor:
        """Each feature's influence on the logits ``[n_active]`` estimated from the rows so far."""
        f = self.filled
        return partial_influences(self.edges[:f, : self.n_active], self.row_sums[:f], logit_p.to(self.edges.dtype),
                                  self.row_node[:f], self.row_ends[:f])  # fmt: skip

    def square(self, selected: torch.Tensor) -> torch.Tensor:
        """The adjacency ``[n, n]`` over the ``selected`` features, the errors, tokens and logits, copied from the
        rows a block at a time (never a second copy of them all)."""
        edges, row_node, n_active = self.edges, self.row_node, self.n_active
        n_cols = edges.shape[1]
        columns = torch.cat([selected, torch.arange(n_active, n_cols)])
        n = len(columns)
        # each computed row's place: a feature's rank among the selected, a logit's after the tokens
        dest = torch.where(row_node >= n_active, row_node - n_cols + n, torch.searchsorted(selected, row_node))
        adjacency = torch.zeros(n, n, dtype=edges.dtype)
        for c in range(0, len(edges), 1024):
            adjacency[dest[c : c + 1024]] = edges[c : c + 1024].index_select(1, columns)
        return adjacency
