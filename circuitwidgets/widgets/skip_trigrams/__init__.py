"""The skip-trigram view, :class:`SkipTrigramTable` (module :mod:`.widget`; rows: :mod:`.data`, :mod:`.source`)."""

from circuitwidgets.widgets.skip_trigrams.widget import SkipTrigramTable

__all__ = ["SkipTrigramTable"]
