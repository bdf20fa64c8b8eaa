"""A dictionary training run's learning-rate schedule and the plan a time limit fits it to.

The rate warms up over ``warmup_steps``, holds, and decays linearly to 0 over the last ``decay_fraction`` of the
planned steps. A time limit shortens the plan (:func:`_fitted`) from the run's recent speed, but never below the
shortest plan whose decay is still ahead of the current step, so the decay keeps its share of the run.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

#: A :class:`~circuitwidgets.features.train.DictionaryTrainConfig` (not imported: that module imports this one).
DictionaryTrainConfig = Any


def fitted(cfg: DictionaryTrainConfig, step: int, elapsed: float, recent: tuple[int, float]) -> DictionaryTrainConfig:
    """``cfg`` with ``tokens`` cut so that the run, at its recent speed, ends within ``time_limit``.

    ``recent`` is an earlier ``(step, elapsed)`` reading: the speed since then (not since the start,
    which a slower stretch later would make too hopeful) prices the steps left.
    """
    then_step, then = recent
    if cfg.time_limit is None or elapsed <= then or step <= then_step:
        return cfg
    margin = 0.97  # the last checkpoint and the final save are not in the measured speed
    rate = (step - then_step) / (elapsed - then)
    steps = step + int(max(0.0, cfg.time_limit * margin - elapsed) * rate)
    # never a plan whose decay would have begun already: the decay keeps its share of the run (a plan cut late
    # squeezed it into a handful of steps: 13 of 213 at 240 s), at the cost of running past the fit by that much
    steps = max(steps, shortest_with_decay_ahead(step, cfg.decay_fraction))
    return replace(cfg, tokens=min(cfg.tokens, max(step + 1, steps) * cfg.batch_size))


def shortest_with_decay_ahead(step: int, decay_fraction: float) -> int:
    """The fewest steps ``S`` whose decay (the last ``int(S · decay_fraction)`` steps) starts at ``step`` or later."""
    steps = max(step + 1, math.ceil(step / max(1e-9, 1.0 - decay_fraction)))
    while steps - int(steps * decay_fraction) < step:
        steps += 1
    while steps > step + 1 and (steps - 1) - int((steps - 1) * decay_fraction) >= step:
        steps -= 1
    return steps


def before_decay(cfg: DictionaryTrainConfig, step: int) -> bool:
    """Whether ``step`` comes before the decay of ``cfg``'s plan."""
    return bool(step < cfg.steps - int(cfg.steps * cfg.decay_fraction))


def lr_at(cfg: DictionaryTrainConfig, step: int) -> float:
    """The learning rate of ``step``: warm-up, hold, linear decay to 0 over the plan's last ``decay_fraction``."""
    warm = min(1.0, (step + 1) / max(1, cfg.warmup_steps))
    decay_steps = int(cfg.steps * cfg.decay_fraction)
    left = cfg.steps - step
    decay = min(1.0, left / decay_steps) if decay_steps else 1.0
    return float(cfg.lr * warm * decay)
