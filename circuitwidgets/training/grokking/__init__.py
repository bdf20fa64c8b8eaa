"""Grokking modular addition (Nanda et al., *Progress measures for grokking via mechanistic interpretability*).

:func:`train` trains the one-layer transformer on ``(a + b) mod p`` live;
:func:`load_pretrained` loads the shipped run of the paper's recipe. Both give a
:class:`GrokHistory` (per-step curves and checkpoints); the progress measures
(:mod:`~circuitwidgets.training.grokking.measures`) read its checkpoints.
"""

from __future__ import annotations

from circuitwidgets.training.grokking.model import GrokConfig, forward, init_weights
from circuitwidgets.training.grokking.store import load_checkpoint
from circuitwidgets.training.grokking.train import GrokHistory, train

__all__ = ["GrokConfig", "GrokHistory", "forward", "init_weights", "load_checkpoint", "train"]
