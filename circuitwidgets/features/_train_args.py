"""Checks of a dictionary training run's settings, made before any activation is streamed (issue 58).

Every field of :class:`~circuitwidgets.features.train.DictionaryTrainConfig` that the loop divides by, hands to the
optimiser or sizes a buffer with is checked here, naming the field; a dictionary whose parameters and Adam state
cannot fit in memory (``width=10**12``) is refused with its size, not by the allocator after minutes.
"""

from __future__ import annotations

from typing import Any

import torch

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features._args import check_memory, check_number


def check_config(cfg: Any) -> None:
    """Refuse a config field out of its range (typed errors naming ``config.<field>``)."""
    check_int("config.tokens", cfg.tokens, 1)
    check_int("config.batch_size", cfg.batch_size, 1)
    check_number("config.lr", cfg.lr, 0.0, low_open=True)
    betas = cfg.betas
    if not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise ArgumentTypeError(f"config.betas: expected a pair of numbers in [0, 1), got {betas!r}")
    for i, beta in enumerate(betas):
        if check_number(f"config.betas[{i}]", beta, 0.0, 1.0) >= 1.0:
            raise ArgumentError(f"config.betas[{i}]: expected a number in [0, 1), got {beta}")
    check_int("config.warmup_steps", cfg.warmup_steps, 0)
    check_number("config.decay_fraction", cfg.decay_fraction, 0.0, 1.0)
    check_int("config.n_ctx", cfg.n_ctx, 2)
    check_int("config.buffer_rows", cfg.buffer_rows, 1)
    check_int("config.windows_per_run", cfg.windows_per_run, 1)
    check_int("config.passes", cfg.passes, 1)
    if cfg.k_aux is not None:
        check_int("config.k_aux", cfg.k_aux, 1)
    check_number("config.aux_coefficient", cfg.aux_coefficient, 0.0)
    check_int("config.dead_tokens", cfg.dead_tokens, 1)
    check_number("config.threshold_momentum", cfg.threshold_momentum, 0.0, 1.0)
    check_number("config.threshold_start_fraction", cfg.threshold_start_fraction, 0.0, 1.0)
    check_int("config.seed", cfg.seed)
    check_int("config.threads", cfg.threads, 1)
    check_int("config.checkpoint_every", cfg.checkpoint_every, 1)
    check_int("config.log_every", cfg.log_every, 1)


def check_sizes(cfg: Any, widths: list[tuple[str, int, int, int]], memory_budget: object = None) -> None:
    """Refuse a run whose dictionaries (``(name, d_in, width, d_out)``: float32 parameters, their gradients and Adam's
    two moments, four copies) and activation buffer do not fit in memory, before any is allocated."""
    params = sum(d_in * width + width * d_out + width + d_out + d_in * d_out for _, d_in, width, d_out in widths)
    widest = max((d_in + d_out for _, d_in, _, d_out in widths), default=0)
    need = 4 * 4 * params + 4 * cfg.buffer_rows * widest * max(1, len(widths))
    names = ", ".join(name for name, *_ in widths)
    device = torch.device(cfg.device) if isinstance(cfg.device, str) else cfg.device
    check_memory(f"width: training {names} (parameters, gradients, Adam's moments and the activation buffer)", need,
                 memory_budget, device if device.type in ("cpu", "cuda") else None)  # fmt: skip
