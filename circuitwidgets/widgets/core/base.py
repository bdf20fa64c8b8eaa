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
refusal (logger ``circuitwidgets.widgets.core.base``) and resynchronises.
"""

from __future__ import annotations

import difflib
import logging
import os
from pathlib import Path
from typing import Any, ClassVar

import anywidget
import ipywidgets
import traitlets

from circuitwidgets.errors import ArgumentError
from circuitwidgets.widgets.core.coalesce import from_view
from circuitwidgets.widgets.core.page import html_fallback
from circuitwidgets.widgets.core.spec import NONE, spec_of
from circuitwidgets.widgets.core.traits import SelectionIndex, view_of

__all__ = [
    "BUNDLE_PATH",
    "NONE",
    "STYLES_PATH",
    "BundleNotBuiltError",
    "CircuitWidget",
    "SelectionIndex",
    "TraitArgumentError",
    "check_selection",
    "read_bundle",
    "refuse_unknown",
]

log = logging.getLogger(__name__)

#: The built JavaScript of all views.
BUNDLE_PATH = Path(__file__).resolve().parents[2] / "static" / "index.js"

#: The built stylesheet of all views (``js/src/styles/``).
STYLES_PATH = BUNDLE_PATH.with_name("index.css")


def hot_reload() -> bool:
    """Whether anywidget's hot reload is asked for (the ``ANYWIDGET_HMR`` environment variable is set)."""
    return bool(os.environ.get("ANYWIDGET_HMR"))


def asset(path: Path) -> str | Path:
    """What a widget class gives anywidget as ``_esm`` or ``_css``: the file's text, or its path under hot reload.

    A path makes anywidget connect one strong callback per instance to a
    class-level file-watch signal that ``close()`` never disconnects
    (anywidget issue #929), so no widget, nor the model its data came from,
    would ever be freed. Text has no signal. With hot reload on, the path is
    kept (so ``npm --prefix js run watch`` reloads open views), each instance
    listens through a weakly held method and :meth:`CircuitWidget.close`
    disconnects it.
    """
    if hot_reload():
        return path
    text = path.read_text(encoding="utf-8")
    # anywidget takes a one-line string ending in a file suffix for a path; a newline rules that out.
    return text if "\n" in text else text + "\n"


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


def check_selection(obj: traitlets.HasTraits, proposal: traitlets.Bunch) -> int:
    """Check a :class:`SelectionIndex` proposal against ``obj``'s data (what the trait does itself on cross-validation)."""
    trait = proposal["trait"]
    if not isinstance(trait, SelectionIndex):
        raise TypeError(f"check_selection validates SelectionIndex traits, not {type(trait).__name__}")
    return trait.check(obj, view_of(obj, trait), int(proposal["value"]))


def refuse_unknown(cls: type, kwargs: dict[str, Any], hints: dict[str, str]) -> None:
    """Raise a :class:`TypeError` naming the keyword arguments ``cls`` does not take.

    traitlets would pass them on and drop them with only a DeprecationWarning,
    building an empty widget; ``hints`` maps known misspellings (CircuitsVis's
    ``attention=``) to the constructor that takes them.
    """
    unknown = [k for k in kwargs if not (isinstance(k, str) and isinstance(getattr(cls, k, None), traitlets.TraitType))]
    unknown = [k for k in unknown if not k.startswith("_")] + [k for k in unknown if k.startswith("_")]
    if not unknown:
        return
    notes = []
    public = sorted(n for n in cls.class_trait_names(sync=True) if not n.startswith("_"))  # type: ignore[attr-defined]
    for key in unknown:
        if key in hints:
            notes.append(hints[key])
        else:
            close = difflib.get_close_matches(str(key), public, n=1)
            if close:
                notes.append(f"did you mean {close[0]!r}?")
    raise TypeError(
        f"{cls.__name__}() got unexpected keyword argument(s) {', '.join(repr(k) for k in unknown)}"
        + (f": {'; '.join(notes)}" if notes else "")
    )


def _watcher_of(cls: type, key: str) -> Any:
    """The change signal of a watched ``_esm``/``_css`` (anywidget's ``FileContents``), or ``None`` for text."""
    value = getattr(cls, key, None)
    return None if value is None or isinstance(value, str) else getattr(value, "changed", None)


class CircuitWidget(anywidget.AnyWidget):
    """Base of all circuitwidgets widgets: the shared bundle, view dispatch, safe sync.

    Subclasses set ``_view`` to the name of their view in ``js/src/index.ts``
    and tag their synced traits with their role (:mod:`circuitwidgets.widgets.core.spec`);
    what the front end may set is derived from the tags.
    """

    _view = traitlets.Unicode("").tag(sync=True)
    """Name of the front-end view that renders this widget."""

    if BUNDLE_PATH.is_file():
        # Text, or under ANYWIDGET_HMR a watched path (see `asset`).
        _esm = asset(BUNDLE_PATH)
    if STYLES_PATH.is_file():
        _css = asset(STYLES_PATH)

    _prefix: ClassVar[str] = ""
    """Prefix of this view's traits inside :class:`~circuitwidgets.widgets.CircuitExplorer`."""

    _spellings: ClassVar[dict[str, str]] = {}
    """Keyword arguments other libraries use, and what to call instead (in the TypeError)."""

    _from_view: ClassVar[frozenset[str] | None] = None
    """Traits the front end may set: derived from the roles of the traits (``setting``, ``head``).

    ``None`` (a subclass with no tagged traits) accepts every synced trait,
    each still checked by its own validation.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        writable = spec_of(cls).from_view
        cls._from_view = writable or None

    def __init__(self, **kwargs: Any) -> None:
        read_bundle()  # fail early and clearly when the bundle is missing
        refuse_unknown(type(self), kwargs, type(self)._spellings)
        self._own_layout = "layout" not in kwargs  # a Layout the caller passed may be shared: theirs to close
        self._watch_assets()
        try:
            super().__init__(**kwargs)
        except traitlets.TraitError as exc:
            if isinstance(exc, TraitArgumentError):
                raise
            raise TraitArgumentError(f"{type(self).__name__}: {exc}") from None

    def _watch_assets(self) -> None:
        """Under hot reload, sync ``_esm``/``_css`` from the watched files through weakly held methods.

        anywidget would connect a lambda holding this widget to the class-level
        file watcher, never disconnected (anywidget issue #929): adding the
        traits first makes it skip that, and :meth:`close` disconnects ours.
        """
        for key, reload in (("_esm", self._reload_esm), ("_css", self._reload_css)):
            signal = _watcher_of(type(self), key)
            if signal is not None and not self.has_trait(key):
                self.add_traits(**{key: traitlets.Unicode(str(getattr(type(self), key))).tag(sync=True)})
                signal.connect(reload)

    def _reload_esm(self, contents: str) -> None:
        """Send the rebuilt bundle to the view (hot reload)."""
        self.set_trait("_esm", contents)

    def _reload_css(self, contents: str) -> None:
        """Send the rebuilt stylesheet to the view (hot reload)."""
        self.set_trait("_css", contents)

    def close(self) -> None:
        """Close the view's comm (and its ``Layout``'s, which ipywidgets would keep registered forever) and
        disconnect this widget from the hot-reload file watcher, if any."""
        layout = self._trait_values.get("layout")
        super().close()
        if isinstance(layout, ipywidgets.Layout) and getattr(self, "_own_layout", True):
            layout.close()
        for key, reload in (("_esm", self._reload_esm), ("_css", self._reload_css)):
            signal = _watcher_of(type(self), key)
            if signal is not None:
                signal.disconnect(reload, missing_ok=True)

    def _store_quietly(self, name: str, value: Any) -> None:
        """Set the kernel's value of ``name`` without sending it or notifying observers.

        For data the view has already received another way (a custom message
        carrying only what changed); :meth:`get_state`, saved state and exported
        pages see the value.
        """
        self._trait_values[name] = value

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """anywidget's mime bundle plus a ``text/html`` fallback: the same view, self-contained.

        Live front ends (JupyterLab, Notebook 7, VS Code) render the widget-view
        entry; ``jupyter nbconvert --to html`` and viewers with no widget manager
        show the ``text/html`` entry, which works offline (see :mod:`circuitwidgets.widgets.core.page`).
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
            log.warning(
                "%s: rejected update from the view: it may not set %s; keeping %s", type(self).__name__, refused, keys
            )
            self._resync(keys)
            return
        before = {k: getattr(self, k) for k in keys}
        try:
            with from_view():  # kernel work these changes start may be coalesced (core/coalesce.py)
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
