"""Grokking modular addition (Nanda et al., *Progress measures for grokking via mechanistic interpretability*).

:func:`train` trains the one-layer transformer on ``(a + b) mod p`` live;
:func:`load_pretrained` loads the shipped run (the paper's recipe: p = 113, 30 % of pairs, d_model 128,
d_mlp 512, AdamW with lr 1e-3, weight decay 1; trained here on a CPU for 12,000 steps: its card has the command).
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
