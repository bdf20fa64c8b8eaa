"""Testing hypotheses about a model (DESIGN.md §3f), on the causal engine's floor.

Causal tracing (:func:`causal_trace`, ROME's noise-and-restore map), linear
probes with a control task (:func:`probe`, :func:`control_task`) and causal
scrubbing (:func:`scrub` of a :class:`Hypothesis`). Each returns a result that
says how it was made; a trace and a probe's accuracy map are
:class:`~circuitwidgets.causal.Sweep` results the patching views draw.
"""

from __future__ import annotations

from circuitwidgets.hypotheses.paths import Hypothesis
from circuitwidgets.hypotheses.probe import Probe, Probes, control_task, probe
from circuitwidgets.hypotheses.scrub import Scrub, scrub
from circuitwidgets.hypotheses.trace import causal_trace

__all__ = ["Hypothesis", "Probe", "Probes", "Scrub", "causal_trace", "control_task", "probe", "scrub"]
