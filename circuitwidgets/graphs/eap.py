"""Edge attribution patching (EAP) and its integrated-gradients versions, over every edge of the component graph.

The score of edge ``s → r`` is hannamw/EAP-IG's (re-derived, not copied):
``Σ_{prompts, positions, d_model} (write_s(corrupted) − write_s(clean)) · g_r`` with
``g_r`` the gradient of the metric (a mean over prompts) with respect to
receiver ``r``'s input, taken

- ``"eap"``: at the clean run;
- ``"clean-corrupted"``: averaged over the clean run and the corrupted run;
- ``"eap-ig-inputs"``: averaged over ``steps`` runs whose input (embedding) is
  ``corrupted + k/steps · (clean − corrupted)``, ``k = 0 … steps − 1``;
- ``"eap-ig-activations"``: averaged over runs that set one sender group's
  writes (the input, one layer's heads, one MLP) to ``α clean + (1 − α)
  corrupted``, ``α = k/steps``, ``k = 1 … steps``, for each group in turn.

So a score estimates ``metric(clean run with this one edge corrupted) −
metric(clean run)`` (:func:`~circuitwidgets.graphs.edge_patch` measures it
exactly). The reference divides once more by the number of prompts; its
metrics are already means, so ours leave that constant factor out. Every
variant (step, run) of a chunk of prompts is stacked on the batch axis: one
backward pass per chunk.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from circuitwidgets.causal.metrics import Metric
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs import gradpass
from circuitwidgets.graphs._args import check_pass_budget
from circuitwidgets.graphs.components import Components
from circuitwidgets.graphs.gradpass import Block, Written, norm_jvp, sender_major
from circuitwidgets.graphs.graph import Graph
from circuitwidgets.graphs.runs import Setup, bytes_per_sequence, chunks, prompt_of, setup
from circuitwidgets.model import CircuitModel

METHODS = ("eap", "eap-ig-inputs", "eap-ig-activations", "clean-corrupted")
Method = Literal["eap", "eap-ig-inputs", "eap-ig-activations", "clean-corrupted"]

#: Token rows (variants × prompts × positions) one pass holds at most, memory allowing: the per-receiver gradients
#: (``3 · n_heads`` of ``d_model`` per row and layer) are the largest tensors, and bigger passes measured slower per
#: row on a CPU (plain EAP, gelu-2l, 1,000 pairs, 1 thread, CPU seconds on a loaded machine: 2.1–2.9 s with passes
#: of 512–1,024 rows, 3.1–3.2 s with 2,000–6,000).
ROWS_PER_PASS = 1024

CONVENTION = (
    "weight ≈ metric(clean run with the sender's write replaced by its corrupted write for this receiver only) − "
    "metric(clean run): (corrupted − clean write) · ∂metric/∂receiver input, summed over prompts' positions and "
    "d_model (hannamw/EAP-IG's sign); metric averaged over prompts; norms recomputed"
)


def edge_attribution(
    model: CircuitModel,
    clean: object,
    corrupted: object,
    metric: object,
    method: Method = "eap",
    steps: int = 5,
    *,
    memory_budget: int | None = None,
) -> Graph:
    """Scores for every edge of ``model``'s component graph, as a :class:`Graph` (``top(k)``: strongest first).

    ``clean``/``corrupted``: token ids ``[batch, pos]`` of the same shape (pairs);
    ``metric``: a function of the logits returning a scalar (a mean over prompts),
    e.g. :func:`circuitwidgets.causal.logit_diff`; ``method`` and ``steps`` as in the
    module docstring; ``memory_budget``: bytes one batched pass may hold.
    """
    if method not in METHODS:
        raise ArgumentError(f"method: expected one of {METHODS}, got {method!r}")
    if isinstance(steps, bool) or not isinstance(steps, int):
        raise ArgumentTypeError(f"steps: expected an int >= 1, got {steps!r}")
    if steps < 1:
        raise ArgumentError(f"steps: expected an int >= 1, got {steps}")
    s = setup(model, clean, corrupted, metric, memory_budget)
    comps = s.comps
    n = s.clean.shape[0]
    variants = _n_variants(method, steps, comps)
    scores = np.zeros((comps.n_senders, comps.n_receivers))
    clean_value = corrupted_value = 0.0
    n_pos = s.clean.shape[1]
    check_pass_budget(f"edge_attribution ({method}, {variants:,} variants of a prompt)",
                      variants * bytes_per_sequence(model, n_pos, comps), memory_budget, s.clean.device)  # fmt: skip
    most = max(1, ROWS_PER_PASS // (variants * n_pos))
    for start, stop, m in chunks(s, variants * bytes_per_sequence(model, n_pos, comps), most):
        a, b = s.clean[start:stop], s.corrupted[start:stop]
        blocks, acts_clean, acts_corrupted, values = _runs(s, m, method, steps, a, b)
        share = (stop - start) / n
        clean_value += share * values[0]
        corrupted_value += share * values[1]
        for sender, size, receiver, r, part in _scores(model, blocks, acts_clean, acts_corrupted):
            scores[sender : sender + size, receiver : receiver + r] += share * part
    whole = s.whole
    if whole.normalise:
        c = whole.clean if whole.clean is not None else clean_value
        k = whole.corrupted if whole.corrupted is not None else corrupted_value
        if abs(c - k) < 1e-12:
            raise ArgumentError("metric: normalising needs different clean and corrupted values; got equal values")
        scores /= c - k
    nodes, edges = comps.tables(scores)
    prompt, tokens = prompt_of(model, s.clean)
    extra = {
        "model": model.name, "n_layers": model.cfg.n_layers, "n_heads": model.cfg.n_heads, "n_prompts": n, "steps": steps if "ig" in method else None,
        "clean_value": clean_value, "corrupted_value": corrupted_value, "graph": "components",
    }  # fmt: skip
    return Graph(nodes, edges, {}, prompt, tokens, CONVENTION, method, whole.name, extra)


def _n_variants(method: str, steps: int, comps: Components) -> int:
    """Sequences per prompt in the batched backward pass."""
    if method == "eap":
        return 1
    if method == "clean-corrupted":
        return 2
    if method == "eap-ig-inputs":
        return steps
    return steps * (1 + comps.n_layers * (1 + int(comps.has_mlp)))


def _runs(
    s: Setup, m: Metric, method: str, steps: int, a: torch.Tensor, b: torch.Tensor
) -> tuple[list[Block], list[Written], list[Written], tuple[float, float]]:
    """Per receiver block, ``Σ_variants ∂metric/∂input / variants``; both prompts' writes; their metric values.

    ``eap`` and ``clean-corrupted`` run the clean (and corrupted) prompts themselves in the
    gradient pass, so their writes and values are recorded there (one or two forward
    passes fewer); the integrated-gradients methods record them first, to interpolate.
    """
    if method in ("eap-ig-inputs", "eap-ig-activations"):
        clean, corrupted = gradpass.run(s, m, a, grad=False), gradpass.run(s, m, b, grad=False)
        v = _n_variants(method, steps, s.comps)
        edit = _interpolation(method, steps, clean.writes, corrupted.writes, a.shape[0])
        blocks = gradpass.run(s, m, a.repeat(v, 1), v, edit).blocks
        return blocks, clean.writes, corrupted.writes, (float(clean.values[0]), float(corrupted.values[0]))
    if method == "eap":
        run, corrupted = gradpass.run(s, m, a), gradpass.run(s, m, b, grad=False)
        return run.blocks, run.writes, corrupted.writes, (float(run.values[0]), float(corrupted.values[0]))
    run = gradpass.run(s, m, torch.cat([a, b]), 2)
    n = a.shape[0]
    halves = [[Written(w.first, w.value[i * n : (i + 1) * n], w.rows, w.layer) for w in run.writes] for i in (0, 1)]
    return run.blocks, halves[0], halves[1], (float(run.values[0]), float(run.values[1]))


def _scores(
    model: CircuitModel, blocks: list[Block], clean: list[Written], corrupted: list[Written]
) -> list[tuple[int, int, int, int, np.ndarray]]:
    """``(first sender, senders, first receiver, receivers, scores)`` per sender group and receiver block:
    ``Σ_{prompts, positions, d_model} (corrupted − clean write) · gradient``, over the positions the block's
    receivers read (the last layer's queries and MLP, and the logits, only where the metric reads: their gradient
    is zero elsewhere). Writes are sender-major ``[senders, batch, pos, d_model]``, gradients receiver-major, so
    that each block is one matrix product over ``(batch, pos, d_model)``."""
    diffs = []
    for c, k in zip(clean, corrupted, strict=True):  # (a layer's heads: (Δz)_h W_O[h], one product for both runs)
        d = sender_major(model, Written(c.first, k.value - c.value, c.rows, c.layer))
        diffs.append((c.first, d, c.rows))
    at_rows: dict[int, torch.Tensor] = {}
    normed: dict[tuple[int, bool, int], torch.Tensor] = {}
    out = []
    for block in blocks:
        r, variants = block.size, block.grad.shape[1]
        grad = block.grad.reshape(r, -1)
        if block.stream is None and variants > 1:
            grad = block.grad.sum(1).reshape(r, -1) / variants
        for first, d, rows in diffs:
            if first >= block.group.upstream:
                break
            assert block.rows is not None or rows is None  # a receiver at every position reads no last-layer sender
            if block.rows is not None and rows is None:
                d = at_rows[first] if first in at_rows else at_rows.setdefault(first, d[:, :, block.rows])
            if block.stream is not None:  # J_N(stream) applied to the writes (fewer than the receivers it serves)
                key = (block.group.first, block.rows is None, first)
                if key not in normed:
                    normed[key] = norm_jvp(model, block.stream, d[:, None])
                part = normed[key].reshape(d.shape[0], -1) @ grad.T / variants
            else:
                part = d.reshape(d.shape[0], -1) @ grad.T
            # (in the model's dtype: a float64 model gets float64 scores)
            out.append((first, d.shape[0], block.first, r, part.double().cpu().numpy()))
    return out


def _interpolation(
    method: str, steps: int, clean: list[Written], corrupted: list[Written], n: int
) -> gradpass.WriteEdit:
    """The write edit of the integrated-gradients methods.

    Variants are stacked variant-major; variant ``i`` of ``eap-ig-inputs`` sets the input to
    ``corrupted + i/steps (clean − corrupted)``; variant ``g · steps + k − 1`` of ``eap-ig-activations``
    sets sender group ``g``'s writes to ``α clean + (1 − α) corrupted`` with ``α = k/steps``.
    """
    c0 = clean[0].value
    if method == "eap-ig-inputs":
        alphas = torch.arange(steps, dtype=c0.dtype, device=c0.device) / steps
        groups = torch.zeros(steps, dtype=torch.long, device=c0.device)
    else:
        k = torch.arange(1, steps + 1, dtype=c0.dtype, device=c0.device) / steps
        alphas = k.repeat(len(clean))
        groups = torch.arange(len(clean), device=c0.device).repeat_interleave(steps)
    index = {w.first: i for i, w in enumerate(clean)}
    chosen_groups = {int(g) for g in groups}
    v = len(alphas)

    def edit(first: int, out: torch.Tensor, _: list[int] | None) -> torch.Tensor:
        g = index[first]
        if g not in chosen_groups:
            return out  # no variant sets this group: its writes are the run's own
        c, k = clean[g].value, corrupted[g].value
        alpha = alphas.view(v, 1, 1, 1, 1)
        mixed = (k + alpha * (c - k)).expand(v, *c.shape) if method == "eap-ig-inputs" else alpha * c + (1 - alpha) * k
        chosen = (groups == g).view(v, 1, 1, 1, 1)
        values = out.reshape(v, n, *out.shape[1:])
        return torch.where(chosen, mixed.to(out.dtype), values).reshape(out.shape)

    return edit
