"""Base class of every circuitwidgets widget, and validated selection traits.

All views live in one ES module bundle, ``circuitwidgets/static/index.js``
(built from ``js/`` by ``npm --prefix js run build``, or by ``pip install``).
A widget picks its view with the ``_view`` trait.

Selections (``selected_head``, ``selected_dest``, ...) are :class:`SelectionIndex`
traits: integers checked against the size of the data. A value the front end
sends that is out of range or malformed is rejected, the trait keeps its last
valid value, and the view is sent that value back so both sides agree again.

What the front end may set at all is declared per widget in ``_from_view``
(the selections and view settings its JavaScript writes); an update that
touches any other synced trait (data such as ``tokens`` or ``scores``, the
bundle, the view name) is refused as a whole, in the same way. Nothing a front
end sends raises in the kernel: :meth:`CircuitWidget.set_state` logs the
refusal (logger ``circuitwidgets.widgets._base``) and resynchronises.
"""

from __future__ import annotations

import logging
import numbers
from pathlib import Path
from typing import Any, ClassVar

import anywidget
import traitlets

from circuitwidgets.errors import ArgumentError
from circuitwidgets.export import html_fallback

__all__ = [
    "BUNDLE_PATH",
    "NONE",
    "BundleNotBuiltError",
    "CircuitWidget",
    "SelectionIndex",
    "TraitArgumentError",
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


class TraitArgumentError(ArgumentError, traitlets.TraitError):
    """An invalid initial trait value given to a widget's constructor.

    Both a circuitwidgets :class:`~circuitwidgets.errors.ArgumentError` (a
    ``ValueError``) and a :class:`traitlets.TraitError`, so either can be caught.
    """


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
        """An int (numpy integers are accepted from Python; bools and floats are not)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
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

    _from_view: ClassVar[frozenset[str] | None] = None
    """Traits the front end may set (the selections and settings its view writes).

    ``None`` (a subclass that does not declare them) accepts every synced trait,
    each still checked by its own validation.
    """

    def __init__(self, **kwargs: Any) -> None:
        read_bundle()  # fail early and clearly when the bundle is missing
        try:
            super().__init__(**kwargs)
        except traitlets.TraitError as exc:
            if isinstance(exc, TraitArgumentError):
                raise
            raise TraitArgumentError(f"{type(self).__name__}: {exc}") from None

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
        """Apply a state update from the front end, rejecting invalid values; never raises.

        The update is applied all or nothing. It is refused when it sets a
        trait the view may not set (see ``_from_view``) or when any value is
        invalid (its trait or a validator raises); an observer that fails while
        the update is applied rolls it back too. On refusal the reason is
        logged and the current values of the update's traits are sent back, so
        the view shows what the kernel holds.
        """
        if not isinstance(sync_data, dict):
            log.warning("%s: ignored an update from the view that is not a dict (%r)", type(self).__name__, sync_data)
            return
        keys = [k for k in sync_data if isinstance(k, str) and k in self.keys]
        writable = type(self)._from_view
        refused = [k for k in keys if writable is not None and k not in writable]
        if refused:
            log.warning("%s: rejected update from the view: it may not set %s; keeping %s", type(self).__name__, refused, keys)
            self._resync(keys)
            return
        before = {k: getattr(self, k) for k in keys}
        try:
            super().set_state(sync_data)
        except (traitlets.TraitError, TypeError, ValueError, OverflowError) as exc:
            log.warning("%s: rejected update from the view (%.300s); keeping %s", type(self).__name__, exc, keys)
            self._restore(before)
            self._resync(keys)
        except Exception:
            log.exception("%s: an update from the view failed; keeping %s", type(self).__name__, keys)
            self._restore(before)
            self._resync(keys)

    def _restore(self, before: dict[str, Any]) -> None:
        """Put back the values an update changed before it failed (observers see the rollback)."""
        changed = {k: v for k, v in before.items() if getattr(self, k) is not v}
        if not changed:
            return
        try:
            with self.hold_trait_notifications():
                for key, value in changed.items():
                    self.set_trait(key, value)
        except Exception:
            log.exception("%s: could not restore %s after a failed update", type(self).__name__, sorted(changed))

    def _resync(self, keys: list[str]) -> None:
        """Send the kernel's values of ``keys`` to the view."""
        if not keys:
            return
        try:
            self.send_state(keys)
        except Exception:
            log.exception("%s: could not resynchronise %s with the view", type(self).__name__, keys)
