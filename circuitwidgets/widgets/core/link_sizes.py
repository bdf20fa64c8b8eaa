"""What :func:`circuitwidgets.link` reads off the widgets it links: their sizes, model names and tokens, and
the check that refuses widgets of models of different shapes (or names, unless they are twins)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from circuitwidgets.errors import ArgumentError

#: Sizes that must agree for widgets to be linked (read when a widget has them).
_SHAPE = ("n_layers", "n_heads")

#: Twins' unit views must also agree in their number of units (a dashboard's, a prompt view's).
_UNIT_COUNTS = ("n_units", "n_units_total")


def size_of(widget: Any, name: str) -> int | None:
    """``widget``'s size ``name`` (0 sizes, meaning no data yet, count as unknown)."""
    try:
        value = int(getattr(widget, name))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    return value or None


def positions_agree(holders: Sequence[Any]) -> bool:
    """Whether a token position of one holder is always one of the others': one number of tokens
    everywhere, or batches of the same lengths prompt by prompt (whose prompts are linked)."""
    counts = [tuple(getattr(w, "prompt_lengths", None) or (size_of(w, "n_tokens"),)) for w in holders]
    if len({n for c in counts for n in c}) <= 1:
        return True
    return len(set(counts)) == 1 and len(counts[0]) > 1


def tokens_of(widget: Any) -> tuple[str, ...] | None:
    """The tokens a view shows (``tokens``), if it has them."""
    tokens = getattr(widget, "tokens", None) if widget.has_trait("tokens") else None
    return tuple(tokens) if isinstance(tokens, list | tuple) else None


def model_name(widget: Any) -> str:
    name = getattr(widget, "model_name", "") if widget.has_trait("model_name") else ""
    return name if isinstance(name, str) else ""


def check_shapes(widgets: Sequence[Any], groups: Sequence[Sequence[Any]], twins: bool = False) -> None:
    """Refuse arguments whose models differ in shape or name (a widget's group counts as it), naming the argument.

    ``groups[i]``: the widgets ``widgets[i]`` is linked with (itself alone if none). Twins may differ in name,
    not in shape; their unit views must hold as many units."""
    named: tuple[int, str] | None = None
    for i, widget in enumerate(widgets if not twins else ()):
        found = [n for n in (model_name(m) for m in groups[i]) if n]
        if not found:
            continue
        if named is None:
            named = (i, found[0])
        elif found[0] != named[1]:
            raise ArgumentError(
                f"widgets[{i}]: expected a widget of the model {named[1]!r} like widgets[{named[0]}], "
                f"got {type(widget).__name__} of {found[0]!r}; widgets of different models cannot be linked"
            )
    for name in (*_SHAPE, *(_UNIT_COUNTS if twins else ())):
        reference: tuple[int, int] | None = None
        for i, widget in enumerate(widgets):
            sizes = [s for s in (size_of(m, name) for m in groups[i]) if s is not None]
            if not sizes:
                continue
            if reference is None:
                reference = (i, sizes[0])
            elif sizes[0] != reference[1]:
                linked = "" if size_of(widget, name) is not None else " (through the widgets it is linked to)"
                raise ArgumentError(
                    f"widgets[{i}]: expected a widget of a model with {name}={reference[1]} like widgets[{reference[0]}], "
                    f"got {type(widget).__name__} with {name}={sizes[0]}{linked}; widgets of different models cannot be linked"
                )
