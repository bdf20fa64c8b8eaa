"""The attention view, :class:`AttentionPatterns` (module :mod:`.widget`; the rest is its machinery)."""

from circuitwidgets.widgets.attention.widget import AttentionPatterns

__all__ = ["AttentionPatterns"]
