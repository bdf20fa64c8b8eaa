"""cw.link: standalone widgets' selections in step, live both ways and in saved pages; other models refused."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.widgets import AttentionPatterns, HeadScores
from circuitwidgets.widgets.core.link import HEAD_TRAITS as HEADS
from circuitwidgets.widgets.core.link import HeadLink, Link, link_of


def _heads(n_layers: int = 2, n_heads: int = 3, seed: int = 0) -> HeadScores:
    return HeadScores.from_scores(np.random.default_rng(seed).random((n_layers, n_heads)), name=f"s{seed}")


def _attention(n_tokens: int = 4, n_layers: int = 2, n_heads: int = 3) -> AttentionPatterns:
    a = np.tril(np.ones((n_layers, n_heads, n_tokens, n_tokens)))
    return AttentionPatterns.from_arrays([f"t{i}" for i in range(n_tokens)], a / a.sum(-1, keepdims=True))


def test_a_head_chosen_in_either_widget_moves_the_other() -> None:
    a, b = _heads(seed=1), _attention()
    group = cw.link(a, b)
    assert isinstance(group, Link) and group.names == ("selected_layer", "selected_head")
    assert (b.selected_layer, b.selected_head) == (a.selected_layer, a.selected_head)  # b starts on a's head
    a.selected_layer, a.selected_head = 1, 2
    assert (b.selected_layer, b.selected_head) == (1, 2)
    b.selected_head = 0
    assert a.selected_head == 0
    # a click in the view is a state update: it moves the other widget too
    a.set_state({"selected_layer": 0, "selected_head": 1})
    assert (b.selected_layer, b.selected_head) == (0, 1)


def test_token_positions_are_linked_between_views_of_as_many_tokens() -> None:
    a, b, c = _attention(4), _attention(4), _attention(6)
    assert cw.link(a, b).names == ("selected_layer", "selected_head", "selected_dest", "selected_src")
    a.selected_dest = 3
    assert b.selected_dest == 3
    b.selected_src = 2
    assert a.selected_src == 2
    # another text's positions are not this one's: heads are linked, positions are not
    group = cw.link(a, c)
    assert set(group.widgets) == {a, b, c} and group.names == ("selected_layer", "selected_head")
    c.selected_dest = 5
    assert a.selected_dest == 3
    c.selected_layer = 1
    assert a.selected_layer == b.selected_layer == 1


def test_linking_again_joins_groups_and_unlink_ends_it() -> None:
    a, b, c = _heads(seed=1), _heads(seed=2), _heads(seed=3)
    first = cw.link(a, b)
    group = cw.link(b, c)
    assert link_of(a) is link_of(b) is link_of(c) is group and link_of(a) is not first
    c.selected_head = 2
    assert a.selected_head == b.selected_head == 2
    group.unlink()
    a.selected_head = 0
    assert b.selected_head == c.selected_head == 2 and link_of(a) is None


def test_widgets_of_different_models_are_refused_naming_the_argument() -> None:
    a = _heads(2, 3)
    with pytest.raises(
        ArgumentError,
        match=r"^widgets\[1\]: expected a widget of a model with n_heads=3 like widgets\[0\], got HeadScores with n_heads=4",
    ):
        cw.link(a, _heads(2, 4))
    with pytest.raises(
        ArgumentError, match=r"^widgets\[2\]: .*n_layers=2 like widgets\[0\], got AttentionPatterns with n_layers=1"
    ):
        cw.link(a, _heads(2, 3, seed=5), _attention(n_layers=1))
    b = _heads(2, 3, seed=6)
    cw.link(a, b)
    with pytest.raises(
        ArgumentError, match=r"^widgets\[1\]: .*n_layers=3 like widgets\[0\], got HeadScores with n_layers=2"
    ):
        cw.link(_heads(3, 3), b)
    assert link_of(a) is link_of(b)  # the refused call left the group as it was


def test_bad_arguments_are_refused() -> None:
    a = _heads()
    with pytest.raises(ArgumentTypeError, match=r"^widgets\[1\]: expected a circuitwidgets widget, got int"):
        cw.link(a, 3)
    with pytest.raises(ArgumentError, match=r"^widgets: expected at least two widgets to link, got 1"):
        cw.link(a)
    with pytest.raises(ArgumentError, match=r"^widgets\[1\]: the same widget as widgets\[0\]"):
        cw.link(a, a)
    assert cw.link([a, _heads(seed=7)]).names == ("selected_layer", "selected_head")  # a list works too
    # term importance has a layer selection only: that is what is linked
    terms = cw.TermImportance.from_losses([3.0, 2.0], loss_no_terms=4.0, layer_order1=[0.5, 0.2])
    assert cw.link(_heads(seed=8), terms).names == ("selected_layer",)


def _blocks(page: str) -> list[str]:
    return re.findall(r'<div class="cw-widget"([^>]*)>', page)


def test_a_saved_page_keeps_linked_widgets_linked(tmp_path: Path) -> None:
    a, b, lone = _heads(seed=1), _attention(), _heads(seed=2)
    cw.link(a, b)
    page = cw.save_html([a, lone, b], tmp_path / "linked.html").read_text(encoding="utf-8")
    blocks = _blocks(page)
    linked = ' data-cw-link="selected_layer selected_head" data-cw-link-group="g0"'
    assert blocks == [linked, "", linked]
    # a page holding one widget of the group has nothing to link
    assert _blocks(cw.save_html([a, lone], tmp_path / "one.html").read_text(encoding="utf-8")) == ["", ""]
    # two groups on one page stay apart
    c, d = _heads(seed=3), _heads(seed=4)
    cw.link(c, d)
    groups = [
        re.search(r'group="(\w+)"', x)
        for x in _blocks(cw.save_html([a, b, c, d], tmp_path / "two.html").read_text(encoding="utf-8"))
    ]
    assert [g.group(1) if g else None for g in groups] == ["g0", "g0", "g2", "g2"]


def test_a_head_is_one_selection_linked_views_never_see_half_of_a_change() -> None:
    a, b, c = _heads(seed=1), _attention(), _heads(seed=2)
    cw.link(a, b, c)
    a.set_state({"selected_layer": 0, "selected_head": 0})
    seen: list[tuple[int, int]] = []
    for view in (b, c):
        view.observe(lambda ch: seen.append((ch["owner"].selected_layer, ch["owner"].selected_head)), names=list(HEADS))
    # a click in the view sets both traits in one message: the others see the new head only, never (1, 0)
    a.set_state({"selected_layer": 1, "selected_head": 2})
    assert seen and set(seen) == {(1, 2)}
    assert (b.selected_layer, b.selected_head) == (c.selected_layer, c.selected_head) == (1, 2)
    seen.clear()
    c.selected_head = 1  # a change of the head alone keeps the layer
    assert set(seen) == {(1, 1)} and (a.selected_layer, a.selected_head) == (1, 1)


def test_a_view_with_a_layer_and_no_head_follows_the_layer_only() -> None:
    model = cw.load_pretrained("attn-only-2l")
    terms, heads = cw.TermImportance(model, [1, 5, 9, 12, 5, 9]), cw.HeadScores.from_model(model, "induction")
    group = cw.link(heads, terms)
    assert group.names == ("selected_layer",) and isinstance(group._links[0], HeadLink)
    heads.set_state({"selected_layer": 1, "selected_head": 3})
    assert terms.selected_layer == 1
    terms.selected_layer = 0  # a layer alone names no head: the head view keeps L1H3 (no invented L0H3)
    assert (heads.selected_layer, heads.selected_head) == (1, 3)
    heads.set_state({"selected_layer": 0, "selected_head": 2})
    assert terms.selected_layer == 0
    group.unlink()
    heads.selected_layer = 1
    assert terms.selected_layer == 0
