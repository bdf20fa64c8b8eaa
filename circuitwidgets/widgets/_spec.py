"""One definition per view: a widget's traits say what they are, everything else is derived.

A view is defined once, by its widget class: each synced trait is tagged with
its *role*, array traits name their dimensions, and the traits the view may set
carry their own validation (lonboard's habit: a trait class that checks itself).
From that one definition come

- the front-end update allow-list (``_from_view``: every ``setting`` and ``head`` trait);
- the validators (each settable trait checks itself on cross-validation, so a
  whole update is checked once all its values are in);
- the sizes the selections are bounded by (:class:`Size`, read off the named
  dimensions of the array traits);
- the explorer: :func:`compose` builds its traits from its children's
  definitions, and :class:`ScopedView` lets a child's own code (its sizes,
  listings, observers) run on the explorer's state (``js/src/lib/scoped.ts`` does
  the same in the browser, from the names :func:`scope_names` sends it).

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

import copy
import inspect
import numbers
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import traitlets

if TYPE_CHECKING:
    from circuitwidgets.widgets._base import CircuitWidget

__all__ = [
    "NONE",
    "ROLES",
    "Choice",
    "Count",
    "Edge",
    "ScopedView",
    "SelectionIndex",
    "Size",
    "Text",
    "ViewSpec",
    "compose",
    "head_selection",
    "kernel_reply",
    "scope_names",
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


# ------------------------------------------------------ self-validating traits


def view_of(obj: Any, trait: traitlets.TraitType) -> Any:  # type: ignore[type-arg]
    """What a trait's check reads sizes and data from: the widget, or its child's view inside an explorer."""
    scope = trait.metadata.get("scope")
    return obj if scope is None else obj.view(scope)


class Checked:
    """Mixin: a settable trait that checks its value against the widget's data.

    The check runs at cross-validation (after every value of an update is in,
    so data and selection can change together) and reads the data through
    :func:`view_of`, so the same trait works in its widget and, cloned, in the
    explorer.
    """

    name: str | None
    metadata: dict[str, Any]

    def check(self, obj: Any, view: Any, value: Any) -> Any:
        """``value`` if it fits ``view``'s data, else raise :func:`trait_error`."""
        return value

    def _cross_validate(self, obj: Any, value: Any) -> Any:
        value = super()._cross_validate(obj, value)  # type: ignore[misc]
        return self.check(obj, view_of(obj, self), value)  # type: ignore[arg-type]


class SelectionIndex(Checked, traitlets.Int):  # type: ignore[type-arg]
    """An index into one dimension of the widget's data, bounded by its size.

    Parameters
    ----------
    size
        Name of the size that bounds it (exclusive), for example ``"n_heads"``:
        an attribute of the widget (a :class:`Size` or a property), read when checked.
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
            raise trait_error(obj, self.name, "an int", f"{value!r:.80} ({type(value).__name__})")
        return int(value)

    def check(self, obj: Any, view: Any, value: Any) -> int:
        n = int(getattr(view, self.size))
        if (self.optional and value == NONE) or 0 <= value < n:
            return int(value)
        if n == 0:
            allowed = "-1 (none), as there is no data" if self.optional else "nothing, as there is no data"
        else:
            allowed = f"-1 (none) or 0..{n - 1}" if self.optional else f"0..{n - 1}"
        raise trait_error(obj, self.name, allowed, str(value))


class Choice(Checked, traitlets.Unicode):  # type: ignore[type-arg]
    """One of a fixed list of strings, or of the strings in a data trait (``choices_from``).

    ``requires`` may add a condition: it returns ``None`` when the value is
    fine, else what was expected instead (worded into the error).
    """

    def __init__(
        self,
        choices: Sequence[str] = (),
        *,
        choices_from: str | None = None,
        default_value: str = "",
        requires: Callable[[Any, str], str | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(default_value=default_value, **kwargs)
        self.choices = tuple(choices)
        self.choices_from = choices_from
        self.requires = requires

    def allowed(self, view: Any) -> list[str] | tuple[str, ...]:
        """The strings accepted now."""
        return list(getattr(view, self.choices_from)) if self.choices_from else self.choices

    def check(self, obj: Any, view: Any, value: Any) -> str:
        allowed = self.allowed(view)
        if value not in allowed:
            raise trait_error(obj, self.name, f"one of {allowed}", shown(value))
        reason = self.requires(view, value) if self.requires is not None else None
        if reason is not None:
            raise trait_error(obj, self.name, reason, shown(value))
        return str(value)


class Count(Checked, traitlets.Int):  # type: ignore[type-arg]
    """An int in ``low..high`` (bools refused)."""

    def __init__(self, low: int, high: int, default_value: int, **kwargs: Any) -> None:
        super().__init__(default_value=default_value, **kwargs)
        self.low, self.high = low, high

    def check(self, obj: Any, view: Any, value: Any) -> int:
        if isinstance(value, bool) or not self.low <= value <= self.high:
            raise trait_error(obj, self.name, f"{self.low}..{self.high}", str(value))
        return int(value)


class Text(Checked, traitlets.Unicode):  # type: ignore[type-arg]
    """A string of at most ``max_chars`` characters."""

    def __init__(self, max_chars: int, default_value: str = "", **kwargs: Any) -> None:
        super().__init__(default_value=default_value, **kwargs)
        self.max_chars = max_chars

    def check(self, obj: Any, view: Any, value: Any) -> str:
        if len(value) > self.max_chars:
            raise trait_error(obj, self.name, f"at most {self.max_chars} characters", str(len(value)))
        return str(value)


class Edge(Checked, traitlets.List):  # type: ignore[type-arg]
    """``[]`` or ``[l1, h1, l2, h2]``: an earlier head and a later head, checked by ``reason(value, n_layers, n_heads)``."""

    def __init__(self, reason: Callable[[Any, int, int], str | None], **kwargs: Any) -> None:
        super().__init__(traitlets.Int(), default_value=[], **kwargs)
        self.reason = reason

    def check(self, obj: Any, view: Any, value: Any) -> list[int]:
        why = self.reason(value, int(view.n_layers), int(view.n_heads))
        if why is not None:
            # (reason() words "expected …, got …" itself)
            raise traitlets.TraitError(f"The '{self.name}' trait of {type(obj).__name__} {why}")
        return [int(v) for v in value]


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
        cls = obj.widget_class if isinstance(obj, ScopedView) else type(obj)
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


_SPECS: dict[type, ViewSpec] = {}


def spec_of(cls: type[CircuitWidget]) -> ViewSpec:
    """The :class:`ViewSpec` of a widget class (computed once)."""
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


# ----------------------------------------------------------------- explorer


def compose(children: Sequence[type[CircuitWidget]]) -> dict[str, traitlets.TraitType]:  # type: ignore[type-arg]
    """Traits of a widget that shows ``children`` linked: derived from their definitions.

    For each child: ``<prefix>_data`` (a dictionary of its data traits, arrays as
    binary buffers) and a clone ``<prefix>_<name>`` of each setting and reply,
    checked against the child's data (see :class:`ScopedView`). The head
    selection traits are shared: one trait per name, a clone of the first
    child's that is not optional.
    """
    from circuitwidgets.widgets._arrays import data_serialization

    traits: dict[str, traitlets.TraitType] = {}  # type: ignore[type-arg]
    for child in children:
        spec = spec_of(child)
        if not spec.prefix:
            raise ValueError(f"{child.__name__} has no _prefix; it cannot be composed")
        traits[f"{spec.prefix}_data"] = traitlets.Dict().tag(sync=True, role="data", child=spec.prefix, **data_serialization)
        for name in spec.own:
            traits[f"{spec.prefix}_{name}"] = _clone(getattr(child, name), spec.prefix)
        for name in spec.heads:
            trait = getattr(child, name)
            if name not in traits and not getattr(trait, "optional", False):
                traits[name] = _clone(trait, spec.prefix, shared=True)
    return traits


def _clone(trait: traitlets.TraitType, prefix: str, shared: bool = False) -> traitlets.TraitType:  # type: ignore[type-arg]
    """A copy of ``trait`` for the explorer, checked against the ``prefix`` child's data."""
    clone = copy.copy(trait)
    clone.metadata = {**trait.metadata, "scope": prefix}
    if shared:
        clone.metadata["shared"] = True
    clone.name = None
    clone.this_class = None
    return clone


def scope_names(children: Sequence[type[CircuitWidget]]) -> list[dict[str, Any]]:
    """What the front end needs to run each child view on the explorer's model (``js/src/lib/scoped.ts``)."""
    out = []
    for child in children:
        spec = spec_of(child)
        out.append(
            {
                "view": spec.view,
                "prefix": f"{spec.prefix}_",
                "data": f"{spec.prefix}_data",
                "own": list(spec.own),
                "shared": {name: name for name in spec.heads},
            }
        )
    return out


class ScopedView:
    """A child view's state inside the explorer, under the child's own trait names.

    Reading ``name`` gives the shared head selection, the explorer trait
    ``<prefix>_<name>`` or ``<prefix>_data[name]``, by the child's spec; other
    attributes are the child class's own (its :class:`Size` s, properties and
    methods run on this view), so the child's code works unchanged on the
    explorer's state. Writes go the same way (a data key replaces the
    dictionary, so batch them with :meth:`hold_sync`). Private attributes
    (``_source``) live on the view itself.
    """

    def __init__(self, owner: CircuitWidget, widget_class: type[CircuitWidget]) -> None:
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "widget_class", widget_class)
        object.__setattr__(self, "spec", spec_of(widget_class))

    def _where(self, name: str) -> tuple[str, str | None]:
        spec: ViewSpec = self.spec
        if name in spec.heads:
            return name, None
        if name in spec.own:
            return f"{spec.prefix}_{name}", None
        if name in spec.data:
            return f"{spec.prefix}_data", name
        raise AttributeError(name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            trait, key = self._where(name)
        except AttributeError:
            return self._class_attribute(name)
        value = getattr(self.owner, trait)
        if key is None:
            return value
        if key not in value:
            raise AttributeError(f"{self.spec.prefix}_data has no {key!r}")
        return value[key]

    def _class_attribute(self, name: str) -> Any:
        attr = inspect.getattr_static(self.widget_class, name)
        if isinstance(attr, property) and attr.fget is not None:
            return attr.fget(self)
        if isinstance(attr, Size):
            return attr.__get__(self, self.widget_class)
        if isinstance(attr, types.FunctionType):
            return types.MethodType(attr, self)
        if isinstance(attr, (staticmethod, classmethod)):
            return getattr(self.widget_class, name)
        raise AttributeError(f"{self.widget_class.__name__} view has no {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        trait, key = self._where(name)
        if key is None:
            setattr(self.owner, trait, value)
        else:
            setattr(self.owner, trait, {**getattr(self.owner, trait), key: value})

    def _store_quietly(self, name: str, value: Any) -> None:
        """Set ``name`` in the explorer's state without sending it (see ``CircuitWidget._store_quietly``)."""
        trait, key = self._where(name)
        if key is None:
            self.owner._store_quietly(trait, value)
        else:
            getattr(self.owner, trait)[key] = value  # (the dictionary itself: nothing is sent)

    def send(self, content: dict[str, Any], buffers: list[Any] | None = None) -> None:
        """A custom message to the view (through the explorer's comm)."""
        self.owner.send(content, buffers)

    @contextmanager
    def hold_trait_notifications(self) -> Iterator[None]:
        """The explorer's :meth:`~traitlets.HasTraits.hold_trait_notifications`."""
        with self.owner.hold_trait_notifications():
            yield

    @contextmanager
    def hold_sync(self) -> Iterator[None]:
        """The explorer's :meth:`~ipywidgets.Widget.hold_sync` (one message for many writes)."""
        with self.owner.hold_sync():
            yield
