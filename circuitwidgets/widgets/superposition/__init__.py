"""The superposition view: toy models trained in the kernel (:class:`Superposition`)."""

from circuitwidgets.widgets.superposition.widget import Superposition

__all__ = ["Superposition"]
