"""Checked traits of the graph view's reading controls: node labels, influence thresholds, intervention requests.

A label is user text (circuit-tracer's ``clerp``): at most :data:`~circuitwidgets.widgets.graph.reading.MAX_CLERP`
characters, one per node; the view sets it as text, never markup.
"""

from __future__ import annotations

import math
from typing import Any

import traitlets

from circuitwidgets.widgets.core.spec import shown, trait_error
from circuitwidgets.widgets.core.traits import Checked
from circuitwidgets.widgets.graph.reading import MAX_CLERP
from circuitwidgets.widgets.graph.steer import MODES

__all__ = ["Clerps", "InterventionRequest", "Threshold"]


class Clerps(Checked, traitlets.List):  # type: ignore[type-arg]
    """One label per node (``""`` for none), each a str of at most ``MAX_CLERP`` characters."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(traitlets.Unicode(), default_value=[], **kwargs)

    def check(self, obj: Any, view: Any, value: Any) -> list[str]:
        n = int(view.n_nodes)
        if len(value) not in (0, n):
            raise trait_error(obj, self.name, f"{n} labels (one per node)", f"{len(value)}")
        long = [s for s in value if len(s) > MAX_CLERP]
        if long:
            raise trait_error(obj, self.name, f"labels of at most {MAX_CLERP} characters", shown(long[0]))
        return list(value)


class Threshold(traitlets.Float):  # type: ignore[type-arg]
    """A cumulative share of influence in (0, 1]."""

    def validate(self, obj: Any, value: Any) -> float:
        v = super().validate(obj, value)
        if not (math.isfinite(v) and 0 < v <= 1):
            raise trait_error(obj, self.name, "a share of influence in (0, 1]", shown(v))
        return float(v)


class InterventionRequest(traitlets.Dict):
    """``{}`` or ``{"rows": [int, ...], "mode": one of MODES, "value": finite number, "id": int}``."""

    def validate(self, obj: Any, value: Any) -> dict[str, Any]:
        v = super().validate(obj, value)
        if not v:
            return {}
        rows, mode, val = v.get("rows"), v.get("mode"), v.get("value", 0.0)
        if (
            not isinstance(rows, list)
            or not rows
            or not all(isinstance(r, int) and not isinstance(r, bool) for r in rows)
        ):
            raise trait_error(obj, self.name, "rows: a non-empty list of node rows", shown(rows))
        if mode not in MODES:
            raise trait_error(obj, self.name, f"mode: one of {MODES}", shown(mode))
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
            raise trait_error(obj, self.name, "value: a finite number", shown(val))
        return dict(v)
