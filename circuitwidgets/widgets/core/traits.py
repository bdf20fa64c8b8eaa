"""Traits the view may set, each carrying its own validation (see :mod:`circuitwidgets.widgets.core.spec`).

The check runs at cross-validation, once every value of an update is in, and
reads the widget's data through :func:`view_of`: the widget itself, or, for a
copy of the trait in the explorer, the child's state there. Errors are worded
by :func:`~circuitwidgets.widgets.core.spec.trait_error`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

import traitlets

from circuitwidgets.widgets.core.spec import NONE, shown, trait_error

__all__ = ["Checked", "Choice", "Count", "Edge", "Integer", "SelectionIndex", "Text", "view_of"]


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


class Integer(traitlets.Int):  # type: ignore[type-arg]
    """An int trait that refuses bools and non-integers (numpy integers are accepted).

    ``traitlets.Int`` takes ``True`` (an ``int`` to Python) and keeps it, so it
    is exported as ``true``; and an update from the view whose value equals the
    current one (``True == 1``) skips cross-validation, so the check must be here.
    """

    def validate(self, obj: Any, value: Any) -> int:
        """An int, within the trait's ``min``/``max`` if it has them."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise trait_error(obj, self.name, "an int", f"{value!r:.80} ({type(value).__name__})")
        return int(super().validate(obj, int(value)))


class SelectionIndex(Checked, Integer):
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


class Count(Checked, Integer):
    """An int in ``low..high`` (bools refused, whatever their value)."""

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
        super().__init__(Integer(), default_value=[], **kwargs)
        self.reason = reason

    def check(self, obj: Any, view: Any, value: Any) -> list[int]:
        why = self.reason(value, int(view.n_layers), int(view.n_heads))
        if why is not None:
            # (reason() words "expected …, got …" itself)
            raise traitlets.TraitError(f"The '{self.name}' trait of {type(obj).__name__} {why}")
        return [int(v) for v in value]
