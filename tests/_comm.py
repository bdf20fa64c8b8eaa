"""The comm seen from the kernel side: what widget tests use to play the front end.

``Recorder`` replaces a widget's ``_send`` and keeps what the kernel sends to
the view; ``from_view`` and ``custom_from_view`` deliver messages the way the
front end does, through ipywidgets' own message path.
"""

from __future__ import annotations

from typing import Any


class Recorder:
    """Stands in for the comm: records the messages (and buffers) the kernel sends to the view."""

    def __init__(self) -> None:
        self.sent: list[tuple[dict[str, Any], list[Any]]] = []

    def __call__(self, msg: dict[str, Any], buffers: Any = None) -> None:
        self.sent.append((msg, list(buffers or [])))

    def updates(self) -> list[dict[str, Any]]:
        """The states of the ``update`` messages, in order."""
        return [m["state"] for m, _ in self.sent if m.get("method") == "update"]

    def custom(self) -> list[tuple[dict[str, Any], list[Any]]]:
        """The contents and buffers of the ``custom`` messages, in order."""
        return [(m["content"], b) for m, b in self.sent if m.get("method") == "custom"]


def from_view(widget: Any, **state: Any) -> None:
    """An update as the front end sends it over the comm."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}}, "buffers": []})


def custom_from_view(widget: Any, content: dict[str, Any]) -> None:
    """A custom message as the front end sends it over the comm."""
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})
