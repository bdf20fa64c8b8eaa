"""What edge attribution and edge patching share: checked inputs, the metric per chunk of prompts, the cost estimate.

Prompts are processed in chunks so that memory stays bounded on many pairs.
The metric is a mean over prompts (as :func:`~circuitwidgets.causal.logit_diff`,
:func:`~circuitwidgets.causal.log_prob` and :func:`~circuitwidgets.causal.loss`
are), so the whole set's value, and its gradient, is the chunks' weighted by
their share of prompts. A metric the package cannot slice per prompt (any
function of the whole logits) runs its prompts in one chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from circuitwidgets.causal.engine import same_shape
from circuitwidgets.causal.metrics import Metric, as_metric, scalar
from circuitwidgets.errors import ArgumentTypeError
from circuitwidgets.graphs._args import named_tokens
from circuitwidgets.graphs.components import Components, components_of
from circuitwidgets.model import CircuitModel

#: Default bytes one batched backward pass may hold (activations kept for the backward pass).
GRAPH_MEMORY_BUDGET = 2**30


@dataclass
class Setup:
    """Checked inputs of a graph computation."""

    model: CircuitModel
    comps: Components
    clean: torch.Tensor
    corrupted: torch.Tensor
    metric: object  # as given (sliced per chunk)
    whole: Metric  # the metric on all prompts
    budget: int


def setup(model: CircuitModel, clean: object, corrupted: object, metric: object, memory_budget: object) -> Setup:
    """Checked model (splittable), prompt pair (same shape: different lengths are refused naming ``corrupted``),
    metric and memory budget."""
    comps = components_of(model)
    a, b = same_shape(named_tokens(model, "clean", clean), named_tokens(model, "corrupted", corrupted))
    whole = as_metric(metric, model.cfg.d_vocab)
    if memory_budget is None:
        budget = GRAPH_MEMORY_BUDGET
    elif isinstance(memory_budget, bool) or not isinstance(memory_budget, int) or memory_budget < 1:
        raise ArgumentTypeError(f"memory_budget: expected a positive int (bytes) or None, got {memory_budget!r}")
    else:
        budget = memory_budget
    return Setup(model, comps, a, b, metric, whole, budget)


def sliced(metric: object, start: int, stop: int, batch: int) -> object | None:
    """``metric`` restricted to prompts ``start:stop`` of ``batch`` (its ``for_prompts``: the declared metrics that
    are means over prompts have one), or ``None`` when it cannot be sliced."""
    cut = getattr(metric, "for_prompts", None)
    return cut(start, stop, batch) if callable(cut) else None


def chunks(s: Setup, per_prompt_bytes: int, most: int | None = None) -> list[tuple[int, int, Metric]]:
    """``(start, stop, metric)`` per chunk of prompts: as many as ``s.budget`` holds at ``per_prompt_bytes`` each,
    and at most ``most`` (all prompts in one chunk when the metric cannot be sliced)."""
    n = s.clean.shape[0]
    size = max(1, min(n, s.budget // max(per_prompt_bytes, 1), most if most is not None else n))
    if sliced(s.metric, 0, 1, n) is None or size >= n:
        return [(0, n, s.whole)]
    out = []
    for start in range(0, n, size):
        stop = min(n, start + size)
        part = sliced(s.metric, start, stop, n)
        assert part is not None
        out.append((start, stop, as_metric(part, s.model.cfg.d_vocab)))
    return out


def metric_values(m: Metric, logits: torch.Tensor, n: int, batch: int) -> torch.Tensor:
    """The metric of ``n`` variants stacked variant-major on the batch axis ``[n]`` (typed error if not scalar)."""
    values = m.batched(logits.view(n, batch, *logits.shape[1:]), batch)
    if values.shape != (n,):
        scalar(values, m.name)  # raises, naming the metric
    return values


def prompt_of(model: CircuitModel, tokens: torch.Tensor) -> tuple[list[str], list[int]]:
    """The first prompt's token strings (untrusted text) and ids."""
    return model.to_str_tokens(tokens[0]), [int(t) for t in tokens[0]]


def bytes_per_sequence(model: CircuitModel, n_pos: int, comps: Components) -> int:
    """Rough bytes one sequence holds through a split pass kept for its backward pass: every receiver's input,
    every write, attention scores and MLP hidden units, in the weights' dtype."""
    cfg = model.cfg
    per_pos = (comps.n_receivers + comps.n_senders) * cfg.d_model * 3 + cfg.n_layers * (4 * (cfg.d_mlp or 0))
    per_pos += cfg.n_layers * cfg.n_heads * (n_pos + 6 * cfg.d_head)
    return per_pos * n_pos * model.W_E.element_size()


__all__: Sequence[str] = (
    "Setup",
    "chunks",
    "metric_values",
    "setup",
    "sliced",
)
