"""One definition per view: a widget's traits say what they are, everything else is derived.

A view is defined once, by its widget class: each synced trait is tagged with
its *role*, array traits name their dimensions, and the traits the view may set
carry their own validation (lonboard's habit: a trait class that checks itself,
:mod:`circuitwidgets.widgets.core.traits`). From that one definition come

- the front-end update allow-list (``_from_view``: every ``setting`` and ``head`` trait);
- the validators (each settable trait checks itself on cross-validation, so a
  whole update is checked once all its values are in);
- the sizes the selections are bounded by (:class:`Size`, read off the named
  dimensions of the array traits);
- the explorer (:mod:`circuitwidgets.widgets.core.compose`): its traits are built
  from its children's definitions, a child's own code (sizes, listings,
  observers) runs on the explorer's state, and ``js/src/lib/scoped.ts`` reads
  the same names in the browser.

Roles
-----
``data``     kernel → view: what the view draws; in the explorer, one ``<prefix>_data`` dictionary.
``setting``  view → kernel: a selection or view setting; in the explorer ``<prefix>_<name>``.
``head``     the head selection (``selected_layer`` / ``selected_head``): settable, and shared by
             every view of the explorer.
``reply``    kernel → view, not data: what a live kernel answers (search messages, live results);
             in the explorer ``<prefix>_<name>``.

Every error of trait validation is worded by :func:`trait_error`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import traitlets

__all__ = [
    "NONE",
    "ROLES",
    "Size",
    "ViewSpec",
    "head_selection",
    "kernel_reply",
    "spec_of",
    "trait_error",
    "view_data",
    "view_setting",
]

#: Value of an optional selection trait when nothing is selected.
NONE = -1

#: The roles a synced trait of a view can have (module docstring).
ROLES = ("data", "setting", "head", "reply")

T = TypeVar("T", bound=traitlets.TraitType)  # type: ignore[type-arg]


# ------------------------------------------------------------------ wording


def trait_error(obj: Any, name: str | None, expected: str, got: str) -> traitlets.TraitError:
    """The one wording of a refused trait value: which trait of which widget, what it expected, what it got."""
    return traitlets.TraitError(f"The '{name}' trait of {type(obj).__name__} expected {expected}, got {got}")


def shown(value: Any) -> str:
    """A value as error messages show it (repr, cut at 80 characters)."""
    return f"{value!r:.80}"


# -------------------------------------------------------------------- roles


def view_data(trait: T) -> T:
    """Tag ``trait`` as view data (kernel → view)."""
    return trait.tag(sync=True, role="data")


def view_setting(trait: T) -> T:
    """Tag ``trait`` as a selection or setting the view may set."""
    return trait.tag(sync=True, role="setting")


def head_selection(trait: T) -> T:
    """Tag ``trait`` as part of the head selection (shared by every view of the explorer)."""
    return trait.tag(sync=True, role="head")


def kernel_reply(trait: T) -> T:
    """Tag ``trait`` as a kernel reply to the view (not data, not settable by the view)."""
    return trait.tag(sync=True, role="reply")


# -------------------------------------------------------------------- sizes


class Size:
    """A size read off the named dimension of an array trait: ``n_heads = Size("n_heads")``.

    The first data trait (in definition order) whose ``dims`` name it gives it;
    0 while that array is missing.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __set_name__(self, owner: type, attr: str) -> None:
        self.__doc__ = f"Size ``{self.name}`` of the data (from the arrays' named dimensions)."

    def __get__(self, obj: Any, owner: type | None = None) -> int:
        if obj is None:
            return self  # type: ignore[return-value]
        # (a ScopedView, a child's state inside the explorer, names the child's class)
        cls = getattr(obj, "widget_class", None) or type(obj)
        where = spec_of(cls).dims.get(self.name)
        if where is None:
            raise AttributeError(f"{cls.__name__}: no array names the dimension {self.name!r}")
        trait, axis = where
        try:
            array = getattr(obj, trait)
        except (AttributeError, KeyError):
            return 0
        shape = getattr(array, "shape", None)
        return int(shape[axis]) if shape is not None and len(shape) > axis else 0


# --------------------------------------------------------------------- spec


@dataclass(frozen=True)
class ViewSpec:
    """What a widget class declares about its view (derived from its traits' tags)."""

    view: str
    """Name of the front-end view (``_view``)."""
    prefix: str
    """Prefix of its traits inside the explorer (``"eigen"`` → ``eigen_data``, ``eigen_method``)."""
    data: tuple[str, ...]
    """Data traits, kernel → view."""
    settings: tuple[str, ...]
    """Traits the view may set, other than the head selection."""
    heads: tuple[str, ...]
    """Head-selection traits (shared in the explorer)."""
    replies: tuple[str, ...]
    """Kernel replies that are not data."""
    dims: dict[str, tuple[str, int]]
    """Size name → (array trait, axis) it is read from."""

    @property
    def from_view(self) -> frozenset[str]:
        """What the front end may set."""
        return frozenset((*self.settings, *self.heads))

    @property
    def own(self) -> tuple[str, ...]:
        """Traits the explorer keeps as ``<prefix>_<name>`` (settings and replies)."""
        return (*self.settings, *self.replies)


#: Held weakly: traitlets' ``add_traits`` (anywidget's ``_esm``/``_css``, hot reload) makes a class per instance,
#: whose spec must go with it, or every widget ever made would stay in memory as its class (issue 45, finding 7).
_SPECS: weakref.WeakKeyDictionary[type, ViewSpec] = weakref.WeakKeyDictionary()


def spec_of(cls: type[traitlets.HasTraits]) -> ViewSpec:
    """The :class:`ViewSpec` of a widget class (computed once).

    Any :class:`~circuitwidgets.widgets.core.base.CircuitWidget` subclass; typed by what it reads
    (its traits), so this module stays below :mod:`.base`, which asks it for every subclass.
    """
    found = _SPECS.get(cls)
    if found is not None:
        return found
    roles: dict[str, list[str]] = {role: [] for role in ROLES}
    dims: dict[str, tuple[str, int]] = {}
    for name, trait in _ordered_traits(cls):
        role = trait.metadata.get("role")
        if role is None:
            continue
        if role not in ROLES:
            raise ValueError(f"{cls.__name__}.{name}: unknown role {role!r}; expected one of {ROLES}")
        roles[role].append(name)
        for axis, dim in enumerate(getattr(trait, "dims", None) or ()):
            if isinstance(dim, str):
                dims.setdefault(dim, (name, axis))
    view_trait = getattr(cls, "_view", None)
    spec = ViewSpec(
        view=str(view_trait.default_value) if isinstance(view_trait, traitlets.TraitType) else "",
        prefix=str(getattr(cls, "_prefix", "")),
        data=tuple(roles["data"]),
        settings=tuple(roles["setting"]),
        heads=tuple(roles["head"]),
        replies=tuple(roles["reply"]),
        dims=dims,
    )
    _SPECS[cls] = spec
    return spec


def _ordered_traits(cls: type) -> Iterator[tuple[str, traitlets.TraitType]]:  # type: ignore[type-arg]
    """Synced traits of ``cls`` in definition order (base classes first)."""
    seen: set[str] = set()
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, traitlets.TraitType) and name not in seen:
                seen.add(name)
                yield name, getattr(cls, name)
