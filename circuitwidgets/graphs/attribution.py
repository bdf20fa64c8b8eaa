"""Attribution graphs (circuit tracing): the direct effects between transcoder features, errors, tokens and logits.

The definition is circuit-tracer's (Ameisen et al., 2025; circuit-tracer 0.5):
in the local replacement model of one prompt (:mod:`circuitwidgets.graphs.replacement`)
the nodes are the active transcoder features at each position, one error node
per layer and position, the token embeddings, and the most likely next tokens'
logits (up to ``max_logits``, until their probability reaches ``logit_prob``).
A feature's value as a target is its pre-activation minus its encoder bias,
``x · W_enc[:, f]``; a logit's is the unembedding input at the last position
dotted with the token's unembedding column minus the mean column (the logit
minus the mean logit, less the biases). An edge ``s → t`` is ``t``'s change per
unit of ``s``'s write (``a_s W_dec[s]``, the error vector, the embedding) in
that linear model: one backward pass per batch of targets gives all sources.

Targets are taken in order of estimated influence on the logits (circuit-tracer's
ordering), so with ``max_feature_nodes`` smaller than the number of active
features the graph keeps the most influential ones; memory is the rows of the
kept targets times the nodes, never positions² per target.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.graphs.dense import DenseAttribution
from circuitwidgets.graphs.graph import Graph
from circuitwidgets.graphs.influence import partial_influences
from circuitwidgets.graphs.replacement import FrozenRun, LinearReplacement, run_frozen
from circuitwidgets.graphs.transcoders import TranscoderLike, check_architecture, check_transcoders
from circuitwidgets.model import CircuitModel

#: circuit-tracer's defaults.
MAX_FEATURE_NODES = 7500
BATCH = 256


def check_options(max_logits: object, logit_prob: object, max_feature_nodes: object, batch: object) -> None:
    """Typed errors naming the option that is out of range."""
    for name, value, low in (("max_logits", max_logits, 1), ("batch", batch, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ArgumentTypeError(f"{name}: expected an int >= {low}, got {value!r}")
    if max_feature_nodes is not None and (
        isinstance(max_feature_nodes, bool) or not isinstance(max_feature_nodes, int) or max_feature_nodes < 0
    ):
        raise ArgumentTypeError(f"max_feature_nodes: expected an int >= 0 or None (all), got {max_feature_nodes!r}")
    if isinstance(logit_prob, bool) or not isinstance(logit_prob, (int, float)) or not 0 < logit_prob <= 1:
        raise ArgumentError(f"logit_prob: expected a probability in (0, 1], got {logit_prob!r}")


def salient_logits(
    logits: torch.Tensor, W_U: torch.Tensor, max_logits: int, logit_prob: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(token ids [k], probabilities [k], centred unembedding columns [k, d_model])``.

    The most likely tokens, fewest whose probabilities reach ``logit_prob``, at most ``max_logits``.
    """
    probs = torch.softmax(logits, dim=-1)
    top_p, top_idx = torch.topk(probs, min(max_logits, probs.shape[-1]))
    cutoff = (
        int(
            torch.searchsorted(torch.cumsum(top_p, 0), torch.tensor(logit_prob, dtype=top_p.dtype, device=top_p.device))
        )
        + 1
    )
    top_p, top_idx = top_p[:cutoff], top_idx[:cutoff]
    centred = W_U[:, top_idx] - W_U.mean(dim=-1, keepdim=True)
    return top_idx, top_p, centred.T


class _Rows:
    """Computes adjacency rows (one per target) from batched backward passes of the replacement model."""

    def __init__(self, model: CircuitModel, transcoders: Sequence[TranscoderLike], run: FrozenRun, batch: int) -> None:
        self.model, self.transcoders, self.run = model, transcoders, run
        self.linear = LinearReplacement(model, transcoders, run, batch)
        layers = run.active[:, 0]
        self.spans = [
            (int(s), int(e))
            for s, e in zip(_starts(layers, len(transcoders)), _starts(layers, len(transcoders))[1:], strict=False)
        ]
        dtype = model.dtype
        with torch.no_grad():  # transcoders may be modules with trainable parameters: no graph through them
            self.writes = [
                (run.values[s:e, None] * tc.W_dec[run.active[s:e, 2]]).to(dtype)
                for tc, (s, e) in zip(transcoders, self.spans, strict=True)
            ]
            self.padded = [
                _by_position(run.active[s:e, 1], w, run.n_pos)
                for (s, e), w in zip(self.spans, self.writes, strict=True)
            ]
        self.embeds = model.W_E[run.tokens[0]]
        n_pos = run.n_pos
        self.n_sources = len(run.values) + (len(transcoders) + 1) * n_pos

    def compute(self, targets: torch.Tensor, final: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``[B, n_sources]`` for feature targets (indices into ``run.active``) or, with ``final`` ``[B, d_model]``,
        for logit targets."""
        with torch.no_grad():
            cots = self._cotangents(targets, final)
        g_embed, g_layers = self.linear.backward(*cots)
        with torch.no_grad():
            return self._contract(g_embed, g_layers)

    def _cotangents(self, targets: torch.Tensor, final: torch.Tensor | None) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Per layer ``[B, pos, d_in]`` (a feature target's encoder column at its position) and ``[B, d_model]``."""
        run, model = self.run, self.model
        B = len(targets) if final is None else final.shape[0]
        dtype = model.dtype
        layer_cots = []
        for layer, tc in enumerate(self.transcoders):
            cot = torch.zeros(B, run.n_pos, tc.W_enc.shape[0], dtype=tc.W_enc.dtype, device=model.device)
            if final is None:
                here = torch.nonzero(run.active[targets, 0] == layer)[:, 0]
                if len(here):
                    chosen = run.active[targets[here]]
                    cot[here, chosen[:, 1]] = tc.W_enc[:, chosen[:, 2]].T
            layer_cots.append(cot)
        final_cot = torch.zeros(B, model.cfg.d_model, dtype=dtype, device=model.device)
        if final is not None:
            final_cot[:] = final.to(dtype)
        return layer_cots, final_cot

    def _contract(self, g_embed: torch.Tensor, g_layers: list[torch.Tensor]) -> torch.Tensor:
        """Rows ``[B, n_sources]``: each node's write dotted with the gradient where it writes."""
        run = self.run
        parts = []
        for (s, e), write, padded, grad in zip(self.spans, self.writes, self.padded, g_layers, strict=True):
            parts.append(_dots(grad, run.active[s:e, 1], write) if padded is None else _padded_dots(grad, *padded))
        for grad, error in zip(g_layers, run.errors, strict=True):
            parts.append(torch.einsum("bpd,pd->bp", grad, error.to(grad.dtype)))
        parts.append(torch.einsum("bpd,pd->bp", g_embed, self.embeds.to(g_embed.dtype)))
        return torch.cat(parts, dim=1)


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


def attribution_matrix(
    model: CircuitModel,
    transcoders: object,
    tokens: torch.Tensor | Sequence[int] | str,
    *,
    max_logits: int = 10,
    logit_prob: float = 0.95,
    max_feature_nodes: int | None = MAX_FEATURE_NODES,
    batch: int = BATCH,
    update_interval: int = 4,
    progress: bool = False,
) -> DenseAttribution:
    """The unpruned attribution graph of one prompt (module docstring), as a dense adjacency matrix.

    Parameters
    ----------
    transcoders
        One per layer (a list, or a dict whose values are transcoders), each with the
        attributes of ``circuitwidgets.graphs.transcoders.TranscoderLike`` (a
        ``circuitwidgets.features.Dictionary`` has them).
    tokens
        One prompt: ``[pos]`` or ``[1, pos]`` ids, or a text.
    max_logits, logit_prob
        Logit nodes: the most likely tokens, fewest reaching ``logit_prob``, at most ``max_logits``.
    max_feature_nodes
        Feature nodes kept (the most influential, estimated as they are computed); ``None``: all.
    batch
        Targets per backward pass (memory ``batch · pos · d_model`` per layer).
    progress
        Print a plain line per ``update_interval`` batches.
    """
    check_architecture(model)
    checked = check_transcoders(model, transcoders)
    check_options(max_logits, logit_prob, max_feature_nodes, batch)
    t = model._check_tokens(tokens)
    if t.shape[0] != 1:
        raise ShapeError(f"tokens: expected one prompt ([pos] or [1, pos]), got {t.shape[0]} prompts")
    start = time.perf_counter()
    run = run_frozen(model, checked, t)
    rows = _Rows(model, checked, run, min(batch, max(len(run.values), max_logits)))
    logit_idx, logit_p, logit_vecs = salient_logits(run.last_logits, model.W_U, max_logits, float(logit_prob))
    n_active, n_pos, L = len(run.values), run.n_pos, model.cfg.n_layers
    n_logits = len(logit_idx)
    logit_offset = n_active + (L + 1) * n_pos
    n_keep = n_active if max_feature_nodes is None else min(max_feature_nodes, n_active)
    store = torch.float64 if model.dtype == torch.float64 else torch.float32
    edges = torch.zeros(n_keep + n_logits, logit_offset + n_logits, dtype=store)
    row_node = torch.zeros(n_keep + n_logits, dtype=torch.long)
    for i in range(0, n_logits, batch):
        vecs = logit_vecs[i : i + batch]
        edges[i : i + len(vecs), :logit_offset] = rows.compute(torch.empty(0, dtype=torch.long), vecs).cpu().to(store)
        row_node[i : i + len(vecs)] = logit_offset + torch.arange(i, i + len(vecs))
    filled = n_logits
    visited = torch.zeros(n_active, dtype=torch.bool)
    n_batches = 0
    while int(visited.sum()) < n_keep:
        if n_keep == n_active:
            pending = torch.arange(n_active)
        else:
            influence = partial_influences(edges[:filled], logit_p.cpu().to(store), row_node[:filled])
            rank = torch.argsort(influence[:n_active], descending=True)
            pending = rank[~visited[rank]][: min(update_interval * batch, n_keep - int(visited.sum()))]
        for c in range(0, len(pending), batch):
            chunk = pending[c : c + batch]
            edges[filled : filled + len(chunk), :logit_offset] = (
                rows.compute(chunk.to(run.active.device)).cpu().to(store)
            )
            row_node[filled : filled + len(chunk)] = chunk
            visited[chunk] = True
            filled += len(chunk)
            n_batches += 1
            if progress and n_batches % update_interval == 0:
                print(
                    f"attribution graph: {int(visited.sum())}/{n_keep} feature rows, {time.perf_counter() - start:.1f} s",
                    flush=True,
                )
    selected = torch.nonzero(visited)[:, 0]
    columns = torch.cat([selected, torch.arange(n_active, logit_offset + n_logits)])
    ordered = edges[row_node.argsort()][:, columns]
    n = len(columns)
    adjacency = torch.zeros(n, n, dtype=store)
    adjacency[:n_keep] = ordered[:n_keep]
    adjacency[n - n_logits :] = ordered[n_keep:]
    active = run.active.cpu()
    return DenseAttribution(
        adjacency, active[selected], run.values.cpu()[selected].to(store), L, t[0].tolist(),
        model.to_str_tokens(t[0]), logit_idx.cpu(), logit_p.cpu().to(store), n_active,
        {"model": model.name, "seconds": time.perf_counter() - start},
    )  # fmt: skip


def attribution_graph(
    model: CircuitModel,
    transcoders: object,
    tokens: torch.Tensor | Sequence[int] | str,
    *,
    max_logits: int = 10,
    logit_prob: float = 0.95,
    max_feature_nodes: int | None = MAX_FEATURE_NODES,
    batch: int = BATCH,
    node_threshold: float = 0.8,
    edge_threshold: float = 0.98,
    progress: bool = False,
) -> Graph:
    """The attribution graph of one prompt's next-token prediction (circuit tracing), pruned, as a :class:`Graph`.

    Built as :func:`attribution_matrix` (same arguments), scored on the whole
    graph (``scores``: ``replacement``, ``completeness``), then pruned to the nodes
    holding ``node_threshold`` of the influence on the logits and the edges
    holding ``edge_threshold`` (circuit-tracer's defaults, 0.8 and 0.98).
    """
    from circuitwidgets.graphs.convert import to_graph
    from circuitwidgets.graphs.influence import check_threshold

    check_threshold("node_threshold", node_threshold)
    check_threshold("edge_threshold", edge_threshold)
    dense = attribution_matrix(
        model, transcoders, tokens, max_logits=max_logits, logit_prob=logit_prob,
        max_feature_nodes=max_feature_nodes, batch=batch, progress=progress,
    )  # fmt: skip
    logit_strs = [model.tokenizer.token_str(int(t)) for t in dense.logit_tokens]
    return to_graph(dense, logit_strs, node_threshold, edge_threshold)
