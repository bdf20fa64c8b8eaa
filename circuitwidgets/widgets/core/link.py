"""``circuitwidgets.link(*widgets)``: standalone widgets whose selections move together.

Choose a head in one and the others follow, both ways, in a live kernel
(:func:`traitlets.link`) and in a page saved with
:func:`~circuitwidgets.save_html` (the page's widgets of one link group are
linked in the browser, with no kernel). What is linked:

- ``selected_layer`` and ``selected_head``, between the widgets that have them,
  as one selection (:class:`HeadLink`: a change of either copies both at once);
- ``selected_prompt``, between widgets showing batches of as many prompts
  (:class:`~circuitwidgets.AttentionPatterns` over several prompts);
- ``selected_feature`` (a unit: a dictionary's feature, a neuron, a toy model's
  feature), between widgets showing the same ``site`` (``L1.tc``, ``L1 neurons``)
  and as many features: a feature clicked in a
  :class:`~circuitwidgets.PromptFeatures` opens in the
  :class:`~circuitwidgets.FeatureDashboard`, and
  :class:`~circuitwidgets.Superposition` views of one toy model move together;
- ``selected_dest`` and ``selected_src`` (token positions), between widgets that
  have them and show the same number of tokens (in every prompt of a batch, or
  batches whose prompts have the same lengths, prompt by prompt); otherwise
  positions are not linked, with a :class:`LinkWarning` saying so.

A widget with ``head_positions`` (``[n_layers][n_heads]`` positions, a
:class:`~circuitwidgets.PromptFeatures` built with ``head_query=``) follows heads
too: a head chosen in any view moves its ``selected_dest`` to that head's entry,
and the group's position with it (live here; in a saved page, the page's link).

A view may link a trait under another name (``_link_as``: a patching map's
``selected_pos`` is linked as ``selected_dest``, so a click on a (layer,
position) cell selects that token in an attention view), and may hold a layer
that is not a head's (``_links_heads`` false: a map with no head axis, the logit
lens's rows), which then moves no other view's head, or no position
(``_links_positions`` false: a map with no position axis).

Widgets of models of different shapes (another number of layers or heads), or
of models with different names, are refused: a head of one is not a head of the other.
``link(..., twins=True)`` links views of twin models instead (trained from the
same initialisation on the same data order, with the same shape: the SoLU / GELU
pair ``pair-solu-1l`` / ``pair-gelu-1l``), and only what means the same in both:
the unit index (neuron ``i`` of one started as neuron ``i`` of the other) and the
token position where the views show the same tokens (the same held-out text);
never heads. :attr:`Link.description` says what it links.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from typing import Any

import traitlets

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.widgets.core.base import CircuitWidget
from circuitwidgets.widgets.core.link_sizes import check_shapes, model_name, positions_agree, size_of, tokens_of

__all__ = [
    "FEATURE_TRAITS",
    "HEAD_TRAITS",
    "POSITION_TRAITS",
    "PROMPT_TRAITS",
    "HeadLink",
    "Link",
    "LinkWarning",
    "link",
    "link_of",
]

#: Head selection, linked whenever both widgets have it.
HEAD_TRAITS = ("selected_layer", "selected_head")

#: Prompt selection, linked between widgets showing batches of as many prompts.
PROMPT_TRAITS = ("selected_prompt",)

#: Feature (unit) selection, linked between widgets showing units of the same ``site`` and as many features.
FEATURE_TRAITS = ("selected_feature",)

#: Token-position selection, linked between widgets showing as many tokens.
POSITION_TRAITS = ("selected_dest", "selected_src")

#: Everything linked, in the order it is synchronised (the prompt before positions in it).
_LINKED = (*HEAD_TRAITS, *PROMPT_TRAITS, *FEATURE_TRAITS, *POSITION_TRAITS)


class LinkWarning(UserWarning):
    """Something :func:`link` could not link (token positions of texts of different lengths)."""


def local_name(widget: Any, name: str) -> str | None:
    """The trait of ``widget`` linked as ``name`` (itself, or its ``_link_as`` alias), or ``None``."""
    if name in HEAD_TRAITS and not getattr(widget, "_links_heads", True):
        return None
    if name in POSITION_TRAITS and not getattr(widget, "_links_positions", True):
        return None
    if widget.has_trait(name):
        return name
    alias = getattr(type(widget), "_link_as", {}).get(name)
    return alias if alias is not None and widget.has_trait(alias) else None


def _head_positions(widget: Any) -> list[list[int]]:
    """``widget``'s ``head_positions`` table (empty when it has none)."""
    table = getattr(widget, "head_positions", None) if widget.has_trait("head_positions") else None
    return list(table) if isinstance(table, list) else []


class HeadLink:
    """``selected_layer`` and ``selected_head`` kept equal between widgets as one selection.

    Two :func:`traitlets.link` s (one per trait) would let a change of the head
    alone, or a click that sets both, pass through linked views as two steps, the
    first a head nobody chose (the new layer with the old head). Here a change of
    either trait copies the pair, inside ``hold_trait_notifications``, so every
    other view's observers see the new head at once. A widget with a layer and no
    head (term importance) follows the layer, and a layer chosen there moves no
    other view: the new layer with the old head index would be a head nobody chose.
    """

    def __init__(self, widgets: Sequence[Any]) -> None:
        members = []
        for widget in widgets:
            own = (local_name(widget, HEAD_TRAITS[0]), local_name(widget, HEAD_TRAITS[1]))
            if own != (None, None):
                members.append((widget, own))
        #: widgets whose position follows the head (``head_positions``), set after every head change
        self.followers = [w for w in widgets if _head_positions(w) and local_name(w, "selected_dest") is not None]
        linked = len(members) > 1 or bool(members and self.followers)
        self.members: list[tuple[Any, tuple[str | None, str | None]]] = members if linked else []
        self._busy = False
        if not self.members:
            return
        first = max(self.members, key=lambda m: sum(n is not None for n in m[1]))  # (a holder of both, if any)
        self._copy_from(first[0], first[1])
        for widget, own in self.members:
            widget.observe(self._changed, names=[n for n in own if n is not None])

    def _copy_from(self, source: Any, own: tuple[str | None, str | None]) -> None:
        values = [None if n is None else getattr(source, n) for n in own]
        self._busy = True
        try:
            for widget, theirs in self.members:
                if widget is source:
                    continue
                with widget.hold_trait_notifications():
                    for name, value in zip(theirs, values, strict=True):
                        if name is not None and value is not None and getattr(widget, name) != value:
                            setattr(widget, name, value)
        finally:
            self._busy = False

    def _changed(self, change: dict[str, Any]) -> None:
        if self._busy:  # (our own copy coming back)
            return
        for widget, own in self.members:
            if widget is change["owner"]:
                if own[1] is not None:  # (a layer alone names no head: it leads nowhere)
                    self._copy_from(widget, own)
                    self._follow(getattr(widget, own[0]) if own[0] is not None else None, getattr(widget, own[1]))
                return

    def _follow(self, layer: int | None, head: int) -> None:
        """Move each follower's position to the chosen head's entry (outside ``_busy``: it moves the group's)."""
        for widget in self.followers:
            table = _head_positions(widget)
            if layer is None or not 0 <= layer < len(table) or not 0 <= head < len(table[layer]):
                continue
            if table[layer][head] >= 0:
                setattr(widget, str(local_name(widget, "selected_dest")), table[layer][head])

    def unlink(self) -> None:
        """Stop keeping the heads equal."""
        for widget, own in self.members:
            widget.unobserve(self._changed, names=[n for n in own if n is not None])
        self.members = []
        self.followers = []


class Link:
    """Widgets whose selections are kept equal; :meth:`unlink` ends it.

    Attributes
    ----------
    widgets
        The linked widgets, in order.
    names
        The traits kept equal between at least two of them.
    """

    def __init__(self, widgets: Sequence[Any], twins: bool = False) -> None:
        self.widgets: tuple[Any, ...] = tuple(widgets)
        self.twins = twins
        self.names: tuple[str, ...] = ()
        self.notes: tuple[str, ...] = ()
        self._links: list[traitlets.link | HeadLink] = []
        self._connect()

    @property
    def description(self) -> str:
        """What is linked, in words (for twins, also what is not and why)."""
        linked = ", ".join(self.names) or "nothing"
        if not self.twins:
            return f"linked: {linked}"
        models = sorted({n for n in (model_name(w) for w in self.widgets) if n})
        return (
            f"twin models {', '.join(repr(m) for m in models)} (same shape, initialisation and data order); linked: "
            f"{linked}. Heads are not linked across models; a position is linked only between views of the same tokens"
        )

    def _connect(self) -> None:
        names = []
        notes = []
        heads = HeadLink(self.widgets) if not self.twins else HeadLink(())
        if heads.members:
            self._links.append(heads)
        for name in _LINKED:
            holders = [w for w in self.widgets if local_name(w, name) is not None]
            if self.twins and name in HEAD_TRAITS:
                continue  # (a head of one trained model is not the same head of another)
            if self.twins and name in POSITION_TRAITS and len({tokens_of(w) for w in holders}) > 1:
                notes.append("token positions are not linked: the twin views show different tokens")
                continue
            if name in HEAD_TRAITS:  # (one selection: HeadLink above)
                if len(holders) > 1:
                    names.append(name)
                continue
            if name in PROMPT_TRAITS:
                holders = [w for w in holders if (size_of(w, "n_prompts") or 1) > 1]
                if len({size_of(w, "n_prompts") for w in holders}) > 1:
                    continue  # (batches of different sizes: prompt 3 of one is not prompt 3 of the other)
            if name in FEATURE_TRAITS and len({getattr(w, "site", "") for w in holders}) > 1:
                continue  # (units of different layers or dictionaries: feature 3 of one is not feature 3 of another)
            if name in FEATURE_TRAITS and len({size_of(w, "n_features") for w in holders}) > 1:
                note = "features are not linked: the views have different numbers of features"
                if note not in notes:
                    notes.append(note)
                continue
            if name in POSITION_TRAITS and len(holders) > 1 and not positions_agree(holders):
                # (different texts: a position of one is not a position of the other)
                note = (
                    "token positions are not linked: the views show texts of different lengths ("
                    + ", ".join(f"{type(w).__name__} {size_of(w, 'n_tokens')}" for w in holders)
                    + " tokens)"
                )
                if note not in notes:
                    notes.append(note)
                continue
            if len(holders) < 2:
                continue
            names.append(name)
            first = holders[0]
            mine = local_name(first, name)
            assert mine is not None
            for other in holders[1:]:
                theirs = local_name(other, name)
                assert theirs is not None
                if getattr(other, theirs) != getattr(first, mine):
                    setattr(other, theirs, getattr(first, mine))
                self._links.append(traitlets.link((first, mine), (other, theirs)))
        self.names = tuple(names)
        self.notes = tuple(notes)
        for note in dict.fromkeys(notes):
            warnings.warn(f"circuitwidgets.link: {note}; {self.description}", LinkWarning, stacklevel=4)

    def names_of(self, widget: Any) -> tuple[str, ...]:
        """The linked names ``widget`` takes part in (its own trait for each: :meth:`aliases_of`)."""
        return tuple(n for n in self.names if local_name(widget, n) is not None)

    def aliases_of(self, widget: Any) -> dict[str, str]:
        """Linked name → ``widget``'s own trait, where they differ (``{"selected_dest": "selected_pos"}``)."""
        out = {}
        for name in self.names_of(widget):
            own = local_name(widget, name)
            if own is not None and own != name:
                out[name] = own
        return out

    def unlink(self) -> None:
        """Stop keeping the selections equal (live and in pages saved afterwards)."""
        for one in self._links:
            one.unlink()
        self._links = []
        for widget in self.widgets:
            if getattr(widget, "_cw_link", None) is self:
                widget._cw_link = None

    def __repr__(self) -> str:
        twins = "twins, " if self.twins else ""
        return f"Link({len(self.widgets)} widgets, {twins}{', '.join(self.names) or 'nothing'})"


def link(*widgets: Any, twins: bool = False) -> Link:
    """Keep the selections of ``widgets`` in step, live and in pages saved with ``save_html``.

    Parameters
    ----------
    *widgets
        Two or more circuitwidgets widgets (an explorer counts as one). A widget
        already linked joins its group: ``link(a, b); link(b, c)`` links all three.
    twins : bool
        The widgets show twin models (same shape, initialisation and data order, such as
        ``pair-gelu-1l`` and ``pair-solu-1l``): link only the unit index and the token position on the
        same text, never heads (``.description`` says so). Without it, widgets of different models are
        refused.

    Returns
    -------
    Link
        The group; ``.names`` lists what is linked, ``.unlink()`` ends it.

    Raises
    ------
    ArgumentTypeError
        ``widgets[i]`` is not a circuitwidgets widget.
    ArgumentError
        Fewer than two widgets, one given twice, no selection in common, or
        ``widgets[i]`` shows a model of another shape than ``widgets[0]``
        (another ``n_layers`` or ``n_heads``), or of another name (unless ``twins``),
        or joins a group linked the other way.
    """
    if not isinstance(twins, bool):
        raise ArgumentTypeError(f"twins: expected a bool, got {type(twins).__name__} {twins!r}")
    if len(widgets) == 1 and isinstance(widgets[0], (list, tuple)):
        widgets = tuple(widgets[0])
    for i, widget in enumerate(widgets):
        if not isinstance(widget, CircuitWidget):
            raise ArgumentTypeError(f"widgets[{i}]: expected a circuitwidgets widget, got {type(widget).__name__}")
    if len(widgets) < 2:
        raise ArgumentError(f"widgets: expected at least two widgets to link, got {len(widgets)}")
    for i, j in itertools.combinations(range(len(widgets)), 2):
        if widgets[i] is widgets[j]:
            raise ArgumentError(f"widgets[{j}]: the same widget as widgets[{i}]; expected distinct widgets")
    # a widget already linked brings its group along
    members: list[Any] = []
    previous: list[Link] = []
    for widget in widgets:
        group = getattr(widget, "_cw_link", None)
        for member in group.widgets if isinstance(group, Link) else (widget,):
            if not any(member is m for m in members):
                members.append(member)
        if isinstance(group, Link) and group not in previous:
            if group.twins != twins:
                raise ArgumentError(
                    f"twins: expected {group.twins} like the group {type(widget).__name__} is linked in, got {twins}"
                )
            previous.append(group)
    check_shapes(widgets, [_members(w) for w in widgets], twins)
    if not any(sum(local_name(w, n) is not None for w in members) >= 2 for n in _LINKED):
        raise ArgumentError(
            f"widgets: expected widgets with a selection in common ({', '.join(_LINKED)}), "
            f"got {', '.join(type(w).__name__ for w in widgets)}"
        )
    for group in previous:
        group.unlink()
    joined = Link(members, twins)
    for widget in members:
        widget._cw_link = joined
    return joined


def _members(widget: Any) -> tuple[Any, ...]:
    """The widgets ``widget`` is linked with (its group), or itself alone."""
    group = link_of(widget)
    return group.widgets if group is not None else (widget,)


def link_of(widget: Any) -> Link | None:
    """The :class:`Link` ``widget`` belongs to, or ``None``."""
    group = getattr(widget, "_cw_link", None)
    return group if isinstance(group, Link) else None
