"""Base class of every circuitwidgets widget, and validated selection traits.

All views live in one ES module bundle, ``circuitwidgets/static/index.js``
(built from ``js/`` by ``npm --prefix js run build``, or by ``pip install``).
A widget picks its view with the ``_view`` trait.

Selections (``selected_head``, ``selected_dest``, ...) are :class:`SelectionIndex`
traits: integers checked against the size of the data. A value the front end
sends that is out of range or malformed is rejected, the trait keeps its last
valid value, and the view is sent that value back so both sides agree again.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from circuitwidgets.export import html_fallback

__all__ = [
    "BUNDLE_PATH",
    "NONE",
    "BundleNotBuiltError",
    "CircuitWidget",
    "SelectionIndex",
    "check_selection",
    "read_bundle",
]

log = logging.getLogger(__name__)

#: The built JavaScript of all views.
BUNDLE_PATH = Path(__file__).resolve().parent.parent / "static" / "index.js"

#: Value of an optional selection trait when nothing is selected.
NONE = -1


class BundleNotBuiltError(FileNotFoundError):
    """The JavaScript bundle ``circuitwidgets/static/index.js`` is missing."""


def read_bundle(path: Path | None = None) -> str:
    """Text of the built JavaScript bundle.

    Raises
    ------
    BundleNotBuiltError
        If the bundle has not been built (a source checkout without ``npm run build``).
    """
    path = BUNDLE_PATH if path is None else path
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BundleNotBuiltError(
            f"the circuitwidgets JavaScript bundle is missing ({path}). In a source checkout run "
            "`npm --prefix js ci && npm --prefix js run build` (or `pip install -e .`, which builds it); "
            "otherwise reinstall circuitwidgets."
        ) from None


class SelectionIndex(traitlets.Int):  # type: ignore[type-arg]
    """An index into one dimension of the widget's data, bounded by its size.

    The trait itself only accepts integers (not bools). The bounds are checked
    by :func:`check_selection`, which the widget registers as a cross-validator
    with ``@traitlets.validate(...)``: cross-validation runs once all values
    of an update are in, so data and selection can change together.

    Parameters
    ----------
    size
        Name of an attribute of the widget giving the exclusive upper bound
        (for example ``"n_heads"``), read at validation time.
    optional
        Whether :data:`NONE` (-1) means "nothing selected" and is accepted.
    default_value
        Initial value; :data:`NONE` for optional selections, else 0.
    """

    def __init__(self, size: str, *, optional: bool = False, default_value: int | None = None, **kwargs: Any) -> None:
        if default_value is None:
            default_value = NONE if optional else 0
        super().__init__(default_value=default_value, **kwargs)
        self.size = size
        self.optional = optional

    def validate(self, obj: Any, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise traitlets.TraitError(
                f"The '{self.name}' trait of {type(obj).__name__} expected an int, "
                f"got {value!r:.80} ({type(value).__name__})"
            )
        return int(value)

    def check(self, obj: Any, value: int) -> int:
        """``value`` if it is in range for ``obj``'s data, else raise :class:`traitlets.TraitError`."""
        n = int(getattr(obj, self.size))
        if (self.optional and value == NONE) or 0 <= value < n:
            return value
        if n == 0:
            allowed = "-1 (none), as there is no data" if self.optional else "nothing, as there is no data"
        else:
            allowed = f"-1 (none) or 0..{n - 1}" if self.optional else f"0..{n - 1}"
        raise traitlets.TraitError(f"The '{self.name}' trait of {type(obj).__name__} expected {allowed}, got {value}")


def check_selection(obj: traitlets.HasTraits, proposal: traitlets.Bunch) -> int:
    """Cross-validator body for :class:`SelectionIndex` traits.

    Use in a widget as::

        @traitlets.validate("selected_head", "selected_dest")
        def _validate_selection(self, proposal):
            return check_selection(self, proposal)
    """
    trait = proposal["trait"]
    if not isinstance(trait, SelectionIndex):
        raise TypeError(f"check_selection validates SelectionIndex traits, not {type(trait).__name__}")
    return trait.check(obj, int(proposal["value"]))


class CircuitWidget(anywidget.AnyWidget):
    """Base of all circuitwidgets widgets: the shared bundle, view dispatch, safe sync.

    Subclasses set ``_view`` to the name of their view in ``js/src/index.ts``.
    """

    _view = traitlets.Unicode("").tag(sync=True)
    """Name of the front-end view that renders this widget."""

    _esm = traitlets.Unicode().tag(sync=True)
    """The bundled ES module (read from :data:`BUNDLE_PATH`)."""

    @traitlets.default("_esm")
    def _default_esm(self) -> str:
        return read_bundle()

    def __init__(self, **kwargs: Any) -> None:
        read_bundle()  # fail early and clearly when the bundle is missing
        super().__init__(**kwargs)

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """anywidget's mime bundle plus a ``text/html`` fallback: the same view, self-contained.

        Live front ends (JupyterLab, Notebook 7, VS Code) render the widget-view
        entry; ``jupyter nbconvert --to html`` and viewers with no widget manager
        show the ``text/html`` entry, which works offline (see :mod:`circuitwidgets.export`).
        The fallback is left out when the state is too large to duplicate.
        """
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        fallback = html_fallback(self)
        if fallback is not None:
            data = {**data, "text/html": fallback}
        return data, metadata

    def set_state(self, sync_data: dict[str, Any]) -> None:
        """Apply a state update from the front end, rejecting invalid values.

        When any value is rejected (its trait raises :class:`traitlets.TraitError`)
        nothing of this update is applied, and the current values are sent back
        so the view shows what the kernel holds.
        """
        try:
            super().set_state(sync_data)
        except (traitlets.TraitError, TypeError, ValueError) as exc:
            keys = [k for k in sync_data if k in self.keys]
            log.warning("%s: rejected update from the view (%s); keeping %s", type(self).__name__, exc, keys)
            if keys:
                self.send_state(keys)
