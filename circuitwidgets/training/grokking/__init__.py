"""Grokking modular addition (Nanda et al., *Progress measures for grokking via mechanistic interpretability*).

:func:`train` trains the one-layer transformer on ``(a + b) mod p`` live;
:func:`load_pretrained` loads the shipped run (the paper's p = 113, 30 % of pairs, weight decay 1 and
AdamW betas, at a narrower width and a higher learning rate so that it trains on a CPU: its card says so).
Both give a :class:`GrokHistory` (per-step curves and checkpoints); the progress measures
(:func:`progress_measures`, :func:`find_phases`) read its checkpoints.
"""

from __future__ import annotations

from circuitwidgets.training.grokking.model import GrokConfig, forward, init_weights
from circuitwidgets.training.grokking.progress import Phases, ProgressMeasures, find_phases, progress_measures
from circuitwidgets.training.grokking.shipped import load_pretrained
from circuitwidgets.training.grokking.store import load_checkpoint
from circuitwidgets.training.grokking.train import GrokHistory, train

__all__ = [
    "GrokConfig",
    "GrokHistory",
    "Phases",
    "ProgressMeasures",
    "find_phases",
    "forward",
    "init_weights",
    "load_checkpoint",
    "load_pretrained",
    "progress_measures",
    "train",
]
