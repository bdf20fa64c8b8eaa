"""The eigenvalue view, :class:`EigenScatter` (module :mod:`.widget`; its data: :mod:`.data`)."""

from circuitwidgets.widgets.eigen.widget import EigenScatter

__all__ = ["EigenScatter"]
