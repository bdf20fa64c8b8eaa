"""Path-patching sweeps as pair scores: what the composition views draw beside (or instead of) the weights.

:func:`circuitwidgets.causal.path_patch` with ``sender=None`` measures, for every
earlier head (the sender) and every later head (the receiver), the metric when
the sender's clean-minus-corrupted write reaches only the receiver's ``via``
input (q, k or v). Those are the same pairs, in the same slots, as Q-, K- and
V-composition, so one or more such sweeps make a ``[3, L, H, L, H]`` stack like
:attr:`CompositionMap.scores <circuitwidgets.CompositionMap.scores>` (NaN for the
kinds not run), with a title and a note saying how the numbers were made:
metric, clean and corrupted values, the corruption, the convention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from circuitwidgets.causal.result import Sweep
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.widgets.patching_map import NORMALISED_NOTE, check_sweep

__all__ = ["PATH_DIMS", "PathScores", "check_text", "corruption_text", "path_patching_scores"]

#: Dims of a path-patching sweep over every sender (``causal.path_patch(..., sender=None)``).
PATH_DIMS = ("sender_layer", "sender_head", "layer", "head")

#: The receiver's inputs, in the order of the composition kinds (Q, K, V).
VIAS = ("q", "k", "v")

#: Positions named one by one in a corruption's description (more are counted).
_SHOWN_POSITIONS = 4


@dataclass(frozen=True)
class PathScores:
    """Path-patching effects of every (sender, receiver) pair, stacked like composition scores."""

    scores: NDArray[np.float32]
    """float32 ``[3, L, H, L, H]``: effect via q, k, v; NaN for a kind not run and where the sender is not earlier."""
    vias: tuple[str, ...]
    """The receiver inputs measured (``"k"``, …), in q, k, v order."""
    metric: str
    """The metric's name (``"normalised logit_diff(pos=-1)"``)."""
    model: str
    """The model's name."""
    title: str
    """A caption: the technique and the metric."""
    note: str
    """How the numbers were made: metric and its clean/corrupted values, corruption, convention, kinds not run."""


def check_text(name: str, value: object) -> str | None:
    """``value`` when it is a string or ``None``, else an :class:`ArgumentTypeError` naming ``name``."""
    if value is not None and not isinstance(value, str):
        raise ArgumentTypeError(f"{name}: expected a string or None, got {type(value).__name__}")
    return value


def _check_path_sweep(sweep: object, name: str) -> tuple[Sweep, str]:
    """``sweep`` as a path-patching Sweep over every sender, with its ``via``; else a typed error naming ``name``."""
    checked = check_sweep(sweep, name)
    if checked.technique != "path patching":
        raise ArgumentError(
            f"{name}: expected a path-patching Sweep (causal.path_patch), got technique {checked.technique!r}"
        )
    if tuple(checked.dims) != PATH_DIMS:
        raise ShapeError(
            f"{name}: expected a path-patching sweep over every sender (causal.path_patch(..., sender=None)) "
            f"with dims {PATH_DIMS!r}, got dims {tuple(checked.dims)!r}"
        )
    shape = checked.shape
    if shape[:2] != shape[2:]:
        raise ShapeError(f"{name}: expected values [L, H, L, H], got shape {list(shape)}")
    via = checked.extra.get("via", checked.site)
    if via not in VIAS:
        raise ArgumentError(f"{name}: expected a receiver input 'q', 'k' or 'v' (the sweep's via), got {via!r}")
    return checked, str(via)


def corruption_text(sweep: Sweep) -> str:
    """The prompts in words: how many pairs of how many tokens, and where the corrupted ones differ."""
    clean = sweep.prompts.get("clean") or []
    corrupted = sweep.prompts.get("corrupted") or []
    if not clean or not corrupted:
        return ""
    differ = sorted(
        {
            i
            for a, b in zip(clean, corrupted, strict=False)
            for i, (x, y) in enumerate(zip(a, b, strict=False))
            if x != y
        }
    )
    size = f"{len(clean)} prompt pair{'s' if len(clean) != 1 else ''} of {len(clean[0])} tokens"
    if not differ:
        return f"{size}, identical"
    shown = ", ".join(str(i) for i in differ[:_SHOWN_POSITIONS])
    more = f" and {len(differ) - _SHOWN_POSITIONS} more" if len(differ) > _SHOWN_POSITIONS else ""
    where = "position" if len(differ) == 1 else "positions"
    first = [i for i in differ[:2] if i < len(clean[0]) and i < len(corrupted[0]) and clean[0][i] != corrupted[0][i]]
    example = "; ".join(f"{clean[0][i]!r} → {corrupted[0][i]!r}" for i in first)
    return f"{size}, the corrupted prompts differ at {where} {shown}{more}" + (
        f" (first pair: {example})" if example else ""
    )


def _note(sweeps: dict[str, Sweep]) -> str:
    """What a reader needs to trust the numbers, from the sweeps' own records (identical parts said once)."""
    first = next(iter(sweeps.values()))
    vias = " / ".join(sweeps)
    lines = [
        f"Path patching on {first.model!r}: the metric {first.metric} when one earlier head's (the sender's) "
        f"clean − corrupted write is added to one later head's (the receiver's) {vias} input only."
    ]
    values = {
        via: f"{s.clean_value:.4g} on the clean run and {s.corrupted_value:.4g} on the corrupted run"
        for via, s in sweeps.items()
        if s.clean_value is not None and s.corrupted_value is not None
    }
    if values:
        distinct = list(dict.fromkeys(values.values()))
        said = distinct[0] if len(distinct) == 1 else "; ".join(f"via {v}: {t}" for v, t in values.items())
        if first.metric.startswith("normalised"):
            lines.append(f"Normalised from {said}: {NORMALISED_NOTE}.")
        else:
            lines.append(f"The metric is {said}.")
    corruption = list(dict.fromkeys(corruption_text(s) for s in sweeps.values()))
    if corruption[0]:
        lines.append(f"Corruption: {'; '.join(corruption)}.")
    # (each convention ends with the via it used; say the shared part once)
    conventions = list(dict.fromkeys(s.convention.split("; sender's write")[0] for s in sweeps.values()))
    if conventions[0]:
        lines.append(f"Convention: {'; '.join(conventions)}.")
    missing = [v for v in VIAS if v not in sweeps]
    if missing:
        lines.append(f"Not run: via {', '.join(missing)} (empty).")
    return " ".join(lines)


def path_patching_scores(sweeps: Sequence[object], name: str = "sweeps") -> PathScores:
    """Stack path-patching sweeps over every sender into ``[3, L, H, L, H]`` by their ``via``.

    Raises
    ------
    ArgumentError, ArgumentTypeError, ShapeError
        Naming ``sweeps[i]``: not a Sweep, not path patching over every sender, a
        second sweep of the same ``via``, or another model, metric or shape than ``sweeps[0]``.
    """
    if len(sweeps) == 0:
        raise ArgumentError(f"{name}: expected at least one path-patching Sweep (causal.path_patch), got none")
    by_via: dict[str, Sweep] = {}
    for i, value in enumerate(sweeps):
        where = f"{name}[{i}]"
        sweep, via = _check_path_sweep(value, where)
        if via in by_via:
            raise ArgumentError(f"{where}: expected one sweep per via, got a second via {via!r}")
        if by_via:
            first = next(iter(by_via.values()))
            for what, mine, theirs in (
                ("shape", sweep.shape, first.shape),
                ("model", sweep.model, first.model),
                ("metric", sweep.metric, first.metric),
            ):
                if mine != theirs:
                    raise ArgumentError(f"{where}: expected the {what} of {name}[0], {theirs!r}, got {mine!r}")
        by_via[via] = sweep
    ordered = {v: by_via[v] for v in VIAS if v in by_via}
    first = next(iter(ordered.values()))
    L, H = first.shape[:2]
    scores = np.full((3, L, H, L, H), np.nan, dtype=np.float32)
    earlier = np.arange(L)[:, None, None, None] < np.arange(L)[None, None, :, None]
    for via, sweep in ordered.items():
        values = np.asarray(sweep.values, dtype=np.float64)
        scores[VIAS.index(via)] = np.where(earlier, values, np.nan)
    return PathScores(
        scores=scores,
        vias=tuple(ordered),
        metric=first.metric,
        model=first.model,
        title=f"Path patching: {first.metric}",
        note=_note(ordered),
    )
