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
from functools import partial
from typing import NamedTuple

import numpy as np
import torch

from circuitwidgets.graphs.influence import partial_influences
from circuitwidgets.graphs.replacement import FrozenRun
from circuitwidgets.graphs.transcoders import TranscoderLike
from circuitwidgets.graphs.transposed import Gradient, TransposedReplacement, Visit
from circuitwidgets.model import CircuitModel

#: Elements of one ``[B, n, d_model]`` gradient a backward pass may hold; larger batches are split (exact either way).
GRAD_ELEMENTS = 2**25


class RowViews(NamedTuple):
    """Rows ``[B, …]`` of an adjacency: their feature columns and their other columns (errors, then tokens)."""

    features: torch.Tensor
    others: torch.Tensor


class AdjacencyRows:
    """Computes adjacency rows (one per target) from batched transposed passes of the replacement model."""

    def __init__(self, model: CircuitModel, transcoders: Sequence[TranscoderLike], run: FrozenRun) -> None:
        self.model, self.transcoders, self.run = model, transcoders, run
        self.transposed = TransposedReplacement(model, transcoders, run)
        layers = run.active[:, 0]
        starts = _starts(layers, len(transcoders))
        self.spans = list(itertools.pairwise(starts))
        dtype = model.dtype
        # each layer's feature writes [n_l, d_model] in one layout: padded by position where that is used, else
        # the list (one layer at a time, never both: on a long prompt they are the largest tensors held)
        self.writes: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        self.padded: list[tuple[torch.Tensor, torch.Tensor] | None] = []
        with torch.no_grad():  # transcoders may be modules with trainable parameters: no graph through them
            for tc, (s, e) in zip(transcoders, self.spans, strict=True):
                pos = run.active[s:e, 1].contiguous()
                write = (run.values[s:e, None] * tc.W_dec[run.active[s:e, 2]]).to(dtype)
                padded = _by_position(pos, write, run.n_pos)
                self.writes.append((pos, write if padded is None else None))
                self.padded.append(padded)
                del write
            self.errors = run.errors.to(dtype)
            self.embeds = model.W_E[run.tokens[0]].detach().to(dtype)
        self.n_others = (len(transcoders) + 1) * run.n_pos

    def features(self, targets: torch.Tensor, out: RowViews | None = None) -> RowViews:
        """Rows of feature targets (indices into ``run.active``, all of one layer, best sorted), written into
        ``out`` (zeros) when given."""
        chosen = self.run.active[targets]
        layer = int(chosen[0, 0])

        def push(part: slice, visit: Visit) -> None:
            self.transposed.features(layer, chosen[part, 1], chosen[part, 2], visit)

        return self._split(chosen[:, 1], push, out)

    def logits(self, vectors: torch.Tensor, out: RowViews | None = None) -> RowViews:
        """Rows of logit targets ``vectors`` ``[B, d_model]`` (centred unembedding columns), written into ``out``
        (zeros) when given."""
        last = torch.full((len(vectors),), self.run.n_pos - 1, dtype=torch.long, device=vectors.device)

        def push(part: slice, visit: Visit) -> None:
            self.transposed.logits(vectors[part], visit)

        return self._split(last, push, out)

    def _split(self, pos: torch.Tensor, push: Callable[[slice, Visit], None], out: RowViews | None) -> RowViews:
        """Rows for targets at positions ``pos``, in parts whose gradients stay within :data:`GRAD_ELEMENTS`."""
        n = int(pos.max()) + 1
        step = max(1, GRAD_ELEMENTS // (n * self.model.cfg.d_model))
        if out is None:
            zeros = partial(torch.zeros, dtype=self.model.dtype, device=pos.device)
            out = RowViews(zeros(len(pos), len(self.run.values)), zeros(len(pos), self.n_others))
        for c in range(0, len(pos), step):
            rows = RowViews(out.features[c : c + step], out.others[c : c + step])  # views: the contraction fills them

            def visit(layer: int, grad: Gradient, rows: RowViews = rows) -> None:
                self._contract(rows, layer, grad)

            with torch.no_grad():
                push(slice(c, c + step), visit)
        return out

    def _contract(self, out: RowViews, layer: int, grad: Gradient) -> None:
        """Fill ``out``'s columns of the nodes writing where ``grad`` is (each write · the gradient there)."""
        n, n_pos = grad.n, self.run.n_pos
        if layer < 0:
            start = len(self.transcoders) * n_pos
            out.others[:, start : start + n] = grad.dots(self.embeds)
            return
        start = layer * n_pos
        out.others[:, start : start + n] = grad.dots(self.errors[layer])
        (s, _), (pos, write) = self.spans[layer], self.writes[layer]
        count = int(torch.searchsorted(pos, n))  # the layer's features before position n (sorted by position)
        if count == 0:
            return
        full, padded = grad.full(), self.padded[layer]
        if padded is None:
            assert write is not None
            out.features[:, s : s + count] = _dots(full, pos[:count], write[:count])
        else:
            out.features[:, s : s + count] = _padded_dots(full, padded[0][:n], padded[1][:count])


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
    """The computed rows (float64 for a float64 model, else float32), which node each is, and for each its absolute
    sum (the influence estimates normalise by it) and the end of its non-zero feature columns (a feature is only
    reached from earlier layers and positions: the estimates skip the rest).

    The feature columns ``[rows, n_active]`` and the others ``[rows, errors + tokens + logits]`` are two arrays,
    the first from calloc: its pages that no row writes (a layer-0 target's, the positions after a target's) are
    never touched and take no memory.
    """

    def __init__(self, n_rows: int, n_nodes: int, n_active: int, dtype: torch.dtype) -> None:
        store = np.float64 if dtype == torch.float64 else np.float32
        self.feats = torch.from_numpy(np.zeros((n_rows, n_active), dtype=store))
        self.others = torch.from_numpy(np.zeros((n_rows, n_nodes - n_active), dtype=store))
        self.row_node = torch.zeros(n_rows, dtype=torch.long)
        self.row_sums = torch.zeros(n_rows, dtype=self.feats.dtype)
        self.row_ends = torch.zeros(n_rows, dtype=torch.long)
        self.n_active, self.filled = n_active, 0

    def fill(self, compute: Callable[[RowViews | None], RowViews], nodes: torch.Tensor, n_others: int,
             like: torch.Tensor) -> None:  # fmt: skip
        """Append the rows of ``nodes`` ``[B]``: ``compute(out)`` writes them into ``out`` (the store's own rows when
        ``like``'s dtype and device are the store's: no copy) or, given ``None``, returns them; their first
        ``n_others`` other columns (the logits' columns stay zero)."""
        here = slice(self.filled, self.filled + len(nodes))
        rows = RowViews(self.feats[here], self.others[here, :n_others])
        if like.dtype == rows.features.dtype and like.device.type == "cpu":
            compute(rows)
        else:
            found = compute(None)
            rows.features.copy_(found.features.cpu().to(rows.features.dtype))
            rows.others.copy_(found.others.cpu().to(rows.others.dtype))
        norm = partial(torch.linalg.vector_norm, ord=1, dim=1)
        self.row_sums[here] = norm(rows.features) + norm(rows.others)
        nonzero = rows.features != 0
        last = self.n_active - nonzero.flip(1).to(torch.uint8).argmax(1)
        self.row_ends[here] = torch.where(nonzero.any(1), last, 0)
        self.row_node[here] = nodes
        self.filled += len(nodes)

    def influence(self, logit_p: torch.Tensor) -> torch.Tensor:
        """Each feature's influence on the logits ``[n_active]`` estimated from the rows so far."""
        f = self.filled
        return partial_influences(self.feats[:f], self.row_sums[:f], logit_p.to(self.feats.dtype), self.row_node[:f],
                                  self.row_ends[:f])  # fmt: skip

    def square(self, selected: torch.Tensor) -> torch.Tensor:
        """The adjacency ``[n, n]`` over the ``selected`` features, the errors, tokens and logits, copied from the
        rows a block at a time (never a second copy of them all)."""
        row_node, n_active, k = self.row_node, self.n_active, len(selected)
        n = k + self.others.shape[1]
        # each computed row's place: a feature's rank among the selected, a logit's after the tokens
        dest = torch.where(row_node >= n_active, row_node - n_active + k, torch.searchsorted(selected, row_node))
        adjacency = torch.zeros(n, n, dtype=self.feats.dtype)
        for c in range(0, self.filled, 1024):
            rows = dest[c : c + 1024]
            adjacency[rows, :k] = self.feats[c : c + 1024].index_select(1, selected)
            adjacency[rows, k:] = self.others[c : c + 1024]
        return adjacency
