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

from collections.abc import Callable
from typing import Literal

import numpy as np
import torch

from circuitwidgets.causal.metrics import Metric
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.graphs.components import Components, Group
from circuitwidgets.graphs.graph import Graph
from circuitwidgets.graphs.runs import (
    Setup,
    bytes_per_sequence,
    chunks,
    logits_of,
    metric_values,
    prompt_of,
    setup,
    writes_and_value,
)
from circuitwidgets.model import CircuitModel

METHODS = ("eap", "eap-ig-inputs", "eap-ig-activations", "clean-corrupted")
Method = Literal["eap", "eap-ig-inputs", "eap-ig-activations", "clean-corrupted"]

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
    for start, stop, m in chunks(s, variants * bytes_per_sequence(model, s.clean.shape[1], comps)):
        a, b = s.clean[start:stop], s.corrupted[start:stop]
        grads, acts_clean, acts_corrupted, values = _runs(s, m, method, steps, a, b)
        share = (stop - start) / n
        clean_value += share * values[0]
        corrupted_value += share * values[1]
        diff = acts_corrupted - acts_clean  # (in the model's dtype: a float64 model gets float64 scores)
        for group, grad in zip(comps.groups(), grads, strict=True):
            block = torch.einsum("bpud,bprd->ur", diff[:, :, : group.upstream], grad).double()
            scores[: group.upstream, group.first : group.first + group.size] += share * block.cpu().numpy()
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
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, tuple[float, float]]:
    """The gradients of :func:`_gradients`, both prompts' writes and metric values (clean, corrupted).

    ``eap`` and ``clean-corrupted`` run the clean (and corrupted) prompts themselves in the
    gradient pass, so their writes and values are recorded there (one or two forward
    passes fewer); the integrated-gradients methods record them first, to interpolate.
    """
    if method in ("eap-ig-inputs", "eap-ig-activations"):
        (acts_clean, clean_value), (acts_corrupted, corrupted_value) = (
            writes_and_value(s, a, m),
            writes_and_value(s, b, m),
        )
        grads, _, _ = _gradients(s, m, method, steps, a, b, acts_clean, acts_corrupted)
        return grads, acts_clean, acts_corrupted, (clean_value, corrupted_value)
    grads, recorded, values = _gradients(s, m, method, steps, a, b, None, None)
    n = a.shape[0]
    if method == "eap":
        acts_corrupted, corrupted_value = writes_and_value(s, b, m)
        return grads, recorded, acts_corrupted, (values[0], corrupted_value)
    return grads, recorded[:n], recorded[n:], (values[0], values[1])


def _gradients(
    s: Setup,
    m: Metric,
    method: str,
    steps: int,
    a: torch.Tensor,
    b: torch.Tensor,
    acts_clean: torch.Tensor | None,
    acts_corrupted: torch.Tensor | None,
) -> tuple[list[torch.Tensor], torch.Tensor, list[float]]:
    """Per receiver group, ``Σ_variants ∂metric/∂input / variants`` ``[batch, pos, group size, d_model]``; the
    writes of every variant (when no interpolation is given, else empty) and each variant's metric."""
    comps = s.comps
    n = a.shape[0]
    v = _n_variants(method, steps, comps)
    tokens = torch.cat([a, b]) if method == "clean-corrupted" else a.repeat(v, 1)
    leaves: list[torch.Tensor] = []
    recorded: list[torch.Tensor] = []

    def add_leaf(group: Group, x: torch.Tensor, _: Callable[[], torch.Tensor]) -> torch.Tensor:
        leaf = torch.zeros_like(x, requires_grad=True)
        leaves.append(leaf)
        return x + leaf

    def record(_: int, value: torch.Tensor) -> torch.Tensor:
        recorded.append(value.detach())
        return value

    edit_output = (
        _interpolation(method, steps, comps, acts_clean, acts_corrupted, n)
        if acts_clean is not None and acts_corrupted is not None
        else record
    )
    with torch.enable_grad():
        logits = logits_of(s, m, tokens, edit_input=add_leaf, edit_output=edit_output)
        values = metric_values(m, logits, v, n)
        values.sum().backward()  # type: ignore[no-untyped-call]
    out = []
    for leaf in leaves:
        grad = leaf.grad
        assert grad is not None
        out.append(grad.view(v, n, *grad.shape[1:]).sum(0) / v)
    writes = torch.cat(recorded, dim=2) if recorded else torch.zeros(0)
    return out, writes, [float(x) for x in values.detach()]


def _interpolation(
    method: str, steps: int, comps: Components, clean: torch.Tensor, corrupted: torch.Tensor, n: int
) -> Callable[[int, torch.Tensor], torch.Tensor] | None:
    """The output edit of the integrated-gradients methods (``None`` for the others: ``record`` is used).

    Variants are stacked variant-major; variant ``i`` of ``eap-ig-inputs`` sets the input to
    ``corrupted + i/steps (clean − corrupted)``; variant ``g · steps + k − 1`` of ``eap-ig-activations``
    sets sender group ``g``'s writes to ``α clean + (1 − α) corrupted`` with ``α = k/steps``.
    """
    if method == "eap-ig-inputs":
        alphas = torch.arange(steps, dtype=clean.dtype, device=clean.device) / steps
        groups = torch.zeros(steps, dtype=torch.long, device=clean.device)
    elif method == "eap-ig-activations":
        n_groups = 1 + comps.n_layers * (1 + int(comps.has_mlp))
        k = torch.arange(1, steps + 1, dtype=clean.dtype, device=clean.device) / steps
        alphas = k.repeat(n_groups)
        groups = torch.arange(n_groups, device=clean.device).repeat_interleave(steps)
    else:
        return None
    firsts = _group_firsts(comps)
    chosen_groups = {int(g) for g in groups}
    v = len(alphas)

    def edit(first: int, out: torch.Tensor) -> torch.Tensor:
        g = firsts.index(first)
        if g not in chosen_groups:
            return out  # no variant sets this group: its writes are the run's own
        width = out.shape[2]
        c, k = clean[:, :, first : first + width], corrupted[:, :, first : first + width]
        alpha = alphas.view(v, 1, 1, 1, 1)
        mixed = (k + alpha * (c - k)).expand(v, *c.shape) if method == "eap-ig-inputs" else alpha * c + (1 - alpha) * k
        chosen = (groups == g).view(v, 1, 1, 1, 1)
        values = out.view(v, n, *out.shape[1:])
        return torch.where(chosen, mixed.to(out.dtype), values).view_as(out)

    return edit


def _group_firsts(comps: Components) -> list[int]:
    """First sender of each sender group: the input, then per layer the heads and the MLP."""
    out = [0]
    for layer in range(comps.n_layers):
        out.append(comps.head_sender(layer, 0))
        if comps.has_mlp:
            out.append(comps.mlp_sender(layer))
    return out
