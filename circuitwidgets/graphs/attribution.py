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
that linear model: one pass back through its transposed map
(:mod:`circuitwidgets.graphs.transposed`) per batch of targets gives all sources.

Targets are taken in order of estimated influence on the logits (circuit-tracer's
ordering), so with ``max_feature_nodes`` smaller than the number of active
features the graph keeps the most influential ones; memory is the rows of the
kept targets times the nodes they reach (:class:`~circuitwidgets.graphs.rows.RowStore`),
never positions² per target.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.graphs._args import check_attribution_inputs
from circuitwidgets.graphs.dense import DenseAttribution
from circuitwidgets.graphs.graph import Graph
from circuitwidgets.graphs.replacement import run_frozen
from circuitwidgets.graphs.rows import AdjacencyRows, RowStore
from circuitwidgets.graphs.targets import resolve_target
from circuitwidgets.graphs.transcoders import check_architecture, check_transcoders
from circuitwidgets.model import ActivationCache, CircuitModel

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


def _batches(pending: torch.Tensor, layers: torch.Tensor, batch: int) -> list[torch.Tensor]:
    """``pending`` feature indices in batches of at most ``batch``, each of one layer and sorted by position (the
    active list is sorted by layer, position): a batch's pass runs only the layers and positions it needs."""
    ordered = torch.sort(pending).values
    out: list[torch.Tensor] = []
    for part in torch.split(ordered, torch.unique_consecutive(layers[ordered], return_counts=True)[1].tolist()):
        out.extend(torch.split(part, batch))
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
    target: object = None,
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
        Targets per pass back (all of one layer, sorted by position); a pass whose
        gradient ``[batch, pos, d_model]`` would exceed ``rows.GRAD_ELEMENTS`` is split
        (the edges do not depend on it).
    progress
        Print a plain line per ``update_interval`` batches.
    target
        What the logit node(s) are (``circuitwidgets.graphs.targets``): ``None`` the top logits (above), a
        token, a pair of tokens (their logit difference), or a direction ``[d_model]`` read where the unembedding
        reads (``(name, direction)`` names it).
    """
    check_architecture(model)
    checked = check_transcoders(model, transcoders)
    check_options(max_logits, logit_prob, max_feature_nodes, batch)
    check_attribution_inputs(model, checked, tokens, max_logits=max_logits, max_feature_nodes=max_feature_nodes, progress=progress)  # type: ignore[arg-type]  # fmt: skip
    t = model._check_tokens(tokens)
    if t.shape[0] != 1:
        raise ShapeError(f"tokens: expected one prompt ([pos] or [1, pos]), got {t.shape[0]} prompts")
    start = time.perf_counter()
    run = run_frozen(model, checked, t)
    rows = AdjacencyRows(model, checked, run)
    # the transposed map keeps its own (scaled) patterns: let the run's go (heads × positions² per layer)
    run.cache = ActivationCache({})
    goal = resolve_target(model, target, run.last_logits, max_logits, float(logit_prob))
    logit_idx, logit_p, logit_vecs = goal.ids, goal.weights, goal.vectors
    n_active, n_pos, L = len(run.values), run.n_pos, model.cfg.n_layers
    n_logits = len(logit_idx)
    logit_offset = n_active + (L + 1) * n_pos
    n_keep = n_active if max_feature_nodes is None else min(max_feature_nodes, n_active)
    store = RowStore(n_keep + n_logits, logit_offset + n_logits, n_active, model.dtype)
    like = run.values
    for i in range(0, n_logits, batch):
        vecs = logit_vecs[i : i + batch]
        store.fill(partial(rows.logits, vecs), logit_offset + torch.arange(i, i + len(vecs)), rows.n_others, like)
    visited = torch.zeros(n_active, dtype=torch.bool)
    n_batches = 0
    layers = run.active[:, 0].cpu()
    while int(visited.sum()) < n_keep:
        if n_keep == n_active:
            pending = torch.arange(n_active)
        else:
            rank = torch.argsort(store.influence(logit_p.cpu()), descending=True)
            pending = rank[~visited[rank]][: min(update_interval * batch, n_keep - int(visited.sum()))]
        for chunk in _batches(pending, layers, batch):
            store.fill(partial(rows.features, chunk.to(run.active.device)), chunk, rows.n_others, like)
            visited[chunk] = True
            n_batches += 1
            if progress and n_batches % update_interval == 0:
                print(
                    f"attribution graph: {int(visited.sum())}/{n_keep} feature rows, {time.perf_counter() - start:.1f} s",
                    flush=True,
                )
    selected = torch.nonzero(visited)[:, 0]
    active, values = run.active.cpu(), run.values.cpu()
    del rows, run  # the patterns and node writes are not needed for the square matrix
    adjacency = store.square(selected)
    del store
    return DenseAttribution(
        adjacency, active[selected], values[selected].to(adjacency.dtype), L, t[0].tolist(),
        model.to_str_tokens(t[0]), logit_idx.cpu(), logit_p.cpu().to(adjacency.dtype), n_active,
        {"model": model.name, "seconds": time.perf_counter() - start, "target": goal.description,
         "target_labels": goal.labels, "target_probabilities": goal.probabilities.tolist()},
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
    target: object = None,
) -> Graph:
    """The attribution graph of one prompt's next-token prediction (circuit tracing), pruned, as a :class:`Graph`.

    Built as :func:`attribution_matrix` (same arguments), scored on the whole
    graph (``scores``: ``replacement``, ``completeness``), then pruned to the nodes
    holding ``node_threshold`` of the influence on the logits and the edges
    holding ``edge_threshold`` (circuit-tracer's defaults, 0.8 and 0.98). ``target`` picks the logit node(s):
    the top logits, a token, a pair of tokens or a direction (:func:`attribution_matrix`); ``extra["target"]``
    says which.
    """
    from circuitwidgets.graphs.convert import to_graph
    from circuitwidgets.graphs.influence import check_threshold

    check_threshold("node_threshold", node_threshold)
    check_threshold("edge_threshold", edge_threshold)
    dense = attribution_matrix(
        model, transcoders, tokens, max_logits=max_logits, logit_prob=logit_prob,
        max_feature_nodes=max_feature_nodes, batch=batch, progress=progress, target=target,
    )  # fmt: skip
    logit_strs = [model.tokenizer.token_str(int(t)) if t >= 0 else "" for t in dense.logit_tokens.tolist()]
    return to_graph(dense, logit_strs, node_threshold, edge_threshold)
