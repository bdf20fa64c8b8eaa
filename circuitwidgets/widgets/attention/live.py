"""The attention widget's life in a kernel: streamed heads, long-context tiles, and what reading the state does.

:class:`LiveData` is a mixin of :class:`~circuitwidgets.widgets.AttentionPatterns`:
it owns the widget's :class:`~circuitwidgets.widgets.attention.source.Stream`
(dense patterns encoded head by head) or
:class:`~circuitwidgets.widgets.attention.tiles.TileSource` (long contexts),
answers the view's custom messages, and makes reading the data traits (saving,
exporting) finish the stream first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anywidget
import traitlets

from circuitwidgets.activations.summary import PatternEngine
from circuitwidgets.widgets.attention.source import Stream
from circuitwidgets.widgets.attention.tiles import TileSource, on_custom
from circuitwidgets.widgets.core.base import CircuitWidget

__all__ = ["DATA_TRAITS", "LiveData"]

#: Traits whose reading finishes a stream (they hold the streamed data).
DATA_TRAITS = ("patterns", "value_patterns", "overview", "top_sources", "top_weights")


class LiveData(CircuitWidget):
    """Streaming and tiles of an attention widget (see the module docs)."""

    _stream: Stream | None
    _tiles: TileSource | None
    _opened: bool

    @property
    def streaming(self) -> bool:
        """Whether heads are still being encoded (or, for long contexts, summarised) and sent."""
        return self._stream is not None or (self._tiles is not None and not self._tiles.done)

    @property
    def qk(self) -> PatternEngine | None:
        """The engine of a long-context widget, or ``None``: :class:`~circuitwidgets.activations.qk_patterns.QKPatterns`
        (:meth:`from_qk`, a model's long text), or :class:`~circuitwidgets.activations.dense_patterns.DensePatterns`
        (:meth:`from_arrays` over :data:`~circuitwidgets.widgets.attention.arrays.LONG_ARRAY_TOKENS` tokens)."""
        return None if self._tiles is None else self._tiles.engine

    def finish(self) -> None:
        """Encode (or summarise) the heads still streaming now (blocking), so the traits hold everything."""
        if self._stream is not None:
            self._stream.finish()
        if self._tiles is not None:
            self._tiles.finish()

    def _on_custom(self, widget: Any, content: Any, buffers: Any) -> None:
        on_custom(self, self._stream, self._tiles, content)

    def get_state(self, key: str | Sequence[str] | None = None, drop_defaults: bool = False) -> dict[str, Any]:
        """The synced state; finishes a stream first when the data traits are asked for."""
        if self.streaming and self._opened:
            keys = {key} if isinstance(key, str) else (set(key) if key is not None else set(DATA_TRAITS))
            if keys & set(DATA_TRAITS):
                self.finish()
        state: dict[str, Any] = super().get_state(key=key, drop_defaults=drop_defaults)
        return state

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The widget's mime bundle; while streaming without the ``text/html`` fallback.

        Building the fallback reads the whole state, which would end the stream
        in the kernel; a streamed state is larger than the fallback's limit
        (:data:`circuitwidgets.widgets.core.page.FALLBACK_STATE_LIMIT`) in any case.
        """
        if not self.streaming:
            return super()._repr_mimebundle_(**kwargs)
        bundle: tuple[dict[str, Any], dict[str, Any]] | None = anywidget.AnyWidget._repr_mimebundle_(self, **kwargs)
        return bundle

    @traitlets.observe("selected_layer", "selected_head")
    def _on_selected_head(self, change: traitlets.Bunch) -> None:
        if getattr(self, "_stream", None) is not None:
            self._stream.prioritise(self.selected_layer, self.selected_head)  # type: ignore[union-attr]
        if getattr(self, "_tiles", None) is not None:
            self._tiles.prioritise(self.selected_layer, self.selected_head)  # type: ignore[union-attr]
