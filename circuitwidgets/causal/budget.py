"""How a sweep spends its memory budget and how many variants it runs per pass.

``memory_budget`` bounds the whole call: the base runs' caches (the residual
streams and site values every variant starts from), the result arrays (one
float64 per cell) and one pass of stacked variants. Everything is counted
arithmetically before any work, from the model's shape: a sweep whose fixed
part and one variant do not fit raises :class:`~circuitwidgets.errors.MemoryBudgetError`
naming the budget and the need, and a sweep with more cells than its result
arrays can hold is refused with the cell count (never by building the cells).

Within the budget the passes are chosen for speed by their measured cost
(:mod:`circuitwidgets.causal.passes`); the budget is a ceiling on the variants
any pass holds at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from circuitwidgets.errors import MemoryBudgetError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.forward import forward_bytes

#: Factor over the arithmetic estimate of one pass's working tensors (allocator slack, temporaries of the mix, the
#: einsum buffers the estimate does not name): measured peaks stay within it (tests/test_causal_budget.py).
SLACK = 1.5

#: Sites whose hook makes every layer of a pass compute its dense attention pattern.
DENSE_SITES = frozenset({"pattern", "attn_scores"})


@dataclass(frozen=True)
class Need:
    """Bytes a sweep holds: ``fixed`` for the whole call, ``per_variant`` for each variant of a pass."""

    fixed: int
    per_variant: int
    cells: int
    arrays: int = 1  # float64 result arrays of one value per cell (2 with top=: the values and the estimates)


def logits_bytes(model: CircuitModel, batch: int, n_read: int | None, n_columns: int | None, n_pos: int) -> int:
    """Bytes of the logits a run computes: the metric's positions and ids, or all of them."""
    p = n_pos if n_read is None else n_read
    v = model.cfg.d_vocab if n_columns is None else n_columns
    return batch * p * v * model.W_E.element_size()


def run_bytes(model: CircuitModel, batch: int, n_pos: int, kept: set[str], logits: int, dense: bool = False) -> int:
    """One pass of ``batch`` sequences keeping ``kept``: the kept activations, one layer's working tensors, ``logits``.

    ``dense``: attention forms its full ``[dest, src]`` scores in every layer (a pattern is hooked).
    """
    cfg, size = model.cfg, model.W_E.element_size()
    full = forward_bytes(cfg, batch, n_pos, kept, size) - batch * n_pos * cfg.d_vocab * size
    square = 2 * batch * cfg.n_heads * n_pos * n_pos * size if dense and not kept & DENSE_SITES else 0
    return full + square + logits


def sweep_need(
    model: CircuitModel,
    site: str,
    batch: int,
    n_pos: int,
    base_names: Sequence[Sequence[str]],
    n_read: int | None,
    n_columns: int | None,
    cells: int,
    result_arrays: int = 1,
) -> Need:
    """What a sweep over ``cells`` cells needs: the base runs (each keeping one of ``base_names``), the result arrays
    (``result_arrays`` float64 per cell) and, per variant, one pass's share."""
    logits = logits_bytes(model, batch, n_read, n_columns, n_pos)
    kept = [set(names) | {"scale", "scale_mlp", "scale_final"} for names in base_names]
    caches = sum(run_bytes(model, batch, n_pos, k, 0) for k in kept) + logits
    fixed = caches + 8 * cells * result_arrays
    per_variant = math.ceil(SLACK * run_bytes(model, batch, n_pos, set(), logits, dense=site in DENSE_SITES))
    return Need(fixed, per_variant, cells, result_arrays)


def check_fits(need: Need, budget: int, what: str, by: Sequence[str], top: int | None = None) -> int:
    """Variants per pass that fit ``budget`` (at least 1), or a :class:`MemoryBudgetError` before any work.

    The error names the budget and the need, part by part; when the results of
    the cells are what does not fit, it suggests fewer cells (a smaller ``by``,
    or ``top=`` when not already asked).
    """
    results = 8 * need.cells * need.arrays
    room = budget - need.fixed
    if room >= need.per_variant:
        return room // need.per_variant
    if need.fixed - results + need.per_variant <= budget:
        hint = "ask for fewer cells with a smaller by (fewer dims, or fewer positions)" + (
            "" if top is not None else " or top=N (only the N cells attribution patching ranks highest are run)"
        )
    else:
        hint = "use fewer or shorter prompts"
    raise MemoryBudgetError(
        f"memory_budget: {what} by {tuple(by)!r} needs {_size(need.fixed - results)} for its base runs, "
        f"{_size(results)} for the results of its {need.cells:,} cells and {_size(need.per_variant)} per patched "
        f"variant, {_size(need.fixed + need.per_variant)} at least, more than memory_budget={budget:,} bytes "
        f"({_size(budget)}); {hint}, or raise memory_budget"
    )


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n < 2**30 else f"{n / 2**30:,.2f} GiB"
