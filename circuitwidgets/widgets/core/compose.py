"""The explorer's state, composed from its children's definitions (see :mod:`circuitwidgets.widgets.core.spec`).

:func:`compose` gives the explorer its traits, :func:`scope_names` tells the
front end where each child's traits live (``js/src/lib/scoped.ts``), and
:class:`ScopedView` lets a child's own Python code run on the explorer's state.
"""

from __future__ import annotations

import copy
import inspect
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import traitlets

from circuitwidgets.widgets.core.spec import Size, ViewSpec, spec_of

if TYPE_CHECKING:
    from circuitwidgets.widgets.core.base import CircuitWidget

__all__ = ["ScopedView", "compose", "scope_names"]


def compose(children: Sequence[type[CircuitWidget]]) -> dict[str, traitlets.TraitType]:  # type: ignore[type-arg]
    """Traits of a widget that shows ``children`` linked: derived from their definitions.

    For each child: ``<prefix>_data`` (a dictionary of its data traits, arrays as
    binary buffers) and a clone ``<prefix>_<name>`` of each setting and reply,
    checked against the child's data (see :class:`ScopedView`). The head
    selection traits are shared: one trait per name, a clone of the first
    child's that is not optional.
    """
    from circuitwidgets.widgets.core.arrays import data_serialization

    traits: dict[str, traitlets.TraitType] = {}  # type: ignore[type-arg]
    for child in children:
        spec = spec_of(child)
        if not spec.prefix:
            raise ValueError(f"{child.__name__} has no _prefix; it cannot be composed")
        traits[f"{spec.prefix}_data"] = traitlets.Dict().tag(
            sync=True, role="data", child=spec.prefix, **data_serialization
        )
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
