"""The causal half of the engine: interventions on a run of a :class:`~circuitwidgets.CircuitModel`.

Activation patching (:func:`patch`), path patching (:func:`path_patch`),
ablation (:func:`ablate`), attribution patching (:func:`attribution_patch`),
exact direct logit attribution (:func:`logit_attribution`), the logit lens
(:func:`logit_lens`) and per-token loss (:func:`per_token_loss`). Definitions
follow TransformerLens where it has the technique (DESIGN.md §3c). Every sweep
runs many patched variants per pass, each joining the pass at its patched layer
(:mod:`circuitwidgets.causal.engine`), and returns a :class:`Sweep` that says
how it was made: technique, site, metric with its clean and corrupted values,
convention (norms recomputed or frozen, centring), model and prompts.
"""

from __future__ import annotations

from circuitwidgets.causal.attribution import attribution_patch, logit_attribution
from circuitwidgets.causal.calibration import calibration_dir, clear_calibration
from circuitwidgets.causal.declared import log_prob, loss, reads
from circuitwidgets.causal.lens import LogitLens, logit_lens, per_token_loss
from circuitwidgets.causal.metrics import LogitDiff, logit_diff, normalised
from circuitwidgets.causal.patching import ablate, patch, path_patch
from circuitwidgets.causal.result import Sweep

__all__ = [
    "LogitDiff",
    "LogitLens",
    "Sweep",
    "ablate",
    "attribution_patch",
    "calibration_dir",
    "clear_calibration",
    "log_prob",
    "logit_attribution",
    "logit_diff",
    "logit_lens",
    "loss",
    "normalised",
    "patch",
    "path_patch",
    "per_token_loss",
    "reads",
]
