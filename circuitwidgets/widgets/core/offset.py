"""The rotary offset at which a weight-space view reads QK circuits (DESIGN.md §3a).

A rotary head's QK circuit depends on the offset ``Δ = i − j`` between query and
key positions (:func:`circuitwidgets.circuits.W_QK`). The eigenvalue scatter,
the skip-trigram table and the composition map of a rotary model therefore
hold one offset, in their ``qk_offset`` trait, and say which in the view
(``0``: query and key at the same position, what tools that ignore rotary
compute; ``1``: the previous token). It is 0 unless given, and a live kernel
recomputes the view when it changes; ``-1`` means the model has no rotary layer
and its QK circuits do not depend on an offset.
"""

from __future__ import annotations

from typing import Any

import traitlets

from circuitwidgets.circuits import rotates
from circuitwidgets.circuits.ov_qk import check_offset
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.coalesce import coalesced
from circuitwidgets.widgets.core.spec import shown, trait_error, view_setting
from circuitwidgets.widgets.core.traits import Count

__all__ = [
    "NO_OFFSET",
    "ReadsQKAtOffset",
    "engine_offset",
    "offset_caption",
    "offset_setting",
    "resolve_offset",
    "validate_offset",
]

#: ``qk_offset`` of a view whose model has no rotary layer.
NO_OFFSET = -1


def resolve_offset(model: CircuitModel, offset: object) -> int:
    """``qk_offset`` for ``model``: the checked ``offset`` (0 when ``None``) on rotary models, else :data:`NO_OFFSET`."""
    if not rotates(model):
        return NO_OFFSET
    checked = check_offset(model, 0 if offset is None else offset)
    assert checked is not None
    return checked


def engine_offset(value: int) -> int | None:
    """The engine's ``offset`` argument for a ``qk_offset`` trait value."""
    return None if value < 0 else int(value)


def offset_setting() -> Count:
    """A ``qk_offset`` trait: set by the view's offset control, checked against the model by :func:`validate_offset`."""
    return view_setting(Count(NO_OFFSET, 2**31 - 1, default_value=NO_OFFSET))


def validate_offset(widget: Any, model: CircuitModel | None, value: int) -> int:
    """``value`` if it is a valid ``qk_offset`` for ``model`` (any when the widget holds no model), else a TraitError."""
    if model is None:
        return value
    if not rotates(model):
        if value != NO_OFFSET:
            raise trait_error(widget, "qk_offset", f"-1 (model {model.name!r} has no rotary layer)", shown(value))
        return value
    if not 0 <= value < model.cfg.n_ctx:
        raise trait_error(
            widget, "qk_offset", f"an offset in [0, {model.cfg.n_ctx}) for this rotary model", shown(value)
        )
    return value


def offset_caption(value: int) -> str:
    """Words for a ``qk_offset`` (used in reports)."""
    if value < 0:
        return ""
    where = {0: " (query and key at the same position)", 1: " (key one token before the query)"}.get(value, "")
    return f"QK circuits at rotary offset Δ = {value}{where}"


class ReadsQKAtOffset(traitlets.HasTraits):
    """Mixin of a view built from a model that reads QK circuits: checks ``qk_offset``, recomputes when it changes.

    The widget keeps its model in ``_model`` (set after its initial traits, so
    those do not trigger a recomputation) and implements :meth:`_recompute_at_offset`.
    """

    _model: CircuitModel | None = None

    @traitlets.validate("qk_offset")
    def _validate_offset(self, proposal: traitlets.Bunch) -> int:
        return validate_offset(self, self._model, int(proposal["value"]))

    @traitlets.observe("qk_offset")
    @coalesced("qk_offset")  # the view's newest offset wins: a dragged slider recomputes once, not per step
    def _on_offset(self, change: traitlets.Bunch) -> None:
        new = int(change["new"])  # (the newest request's: its value is the trait's now)
        if self._model is not None and new != getattr(self, "_computed_offset", int(change["old"])):
            self._computed_offset = new
            self._recompute_at_offset(self._model, engine_offset(new))

    def _recompute_at_offset(self, model: CircuitModel, offset: int | None) -> None:
        """Recompute the traits that depend on the QK circuits at ``offset``."""
        raise NotImplementedError
