"""Offline pages: one bundle per page, inert token text, and the report's size (issue 8)."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest

import circuitwidgets as cw
from circuitwidgets.errors import ArgumentError
from circuitwidgets.export import bundle_source, html_page, save_html
from circuitwidgets.report import write_report

#: The stated bound for the report of the shipped two-layer model.
REPORT_BOUND_BYTES = 1_000_000

HOSTILE = ["<script>window.__pwned=1</script>", "</script><img src=x onerror=alert(1)>", "&nbsp;", "\u2028"]


def _attention(tokens: list[str]) -> cw.AttentionPatterns:
    n = len(tokens)
    pattern = np.tril(np.ones((n, n)))
    pattern /= pattern.sum(-1, keepdims=True)
    return cw.AttentionPatterns.from_arrays(tokens, np.stack([pattern, pattern]))


def test_a_page_with_several_widgets_carries_one_copy_of_the_bundle(tmp_path: Path) -> None:
    path = save_html([_attention(["a", "b", "c"]), _attention(["d", "e"])], tmp_path / "two.html")
    page = path.read_text()
    encoded = base64.b64encode(bundle_source().encode()).decode()
    assert page.count(encoded) == 1
    assert page.count('class="cw-widget"') == 2


def test_hostile_tokens_never_reach_the_html_parser_as_markup() -> None:
    page = html_page(_attention(HOSTILE))
    # Outside our own four script elements there is no <script> or <img>.
    assert page.count("<script") == 4
    assert "<img" not in page
    assert "\u2028" not in page


def test_pages_forbid_every_network_request(tmp_path: Path) -> None:
    page = save_html(_attention(["a", "b"]), tmp_path / "p.html").read_text()
    assert "default-src 'none'" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)


def test_save_html_names_a_bad_path() -> None:
    with pytest.raises(ArgumentError, match="path"):
        save_html(_attention(["a", "b"]), "figure.png")


@pytest.mark.skipif("attn-only-2l" not in cw.list_pretrained(), reason="shipped model missing")
def test_report_of_the_shipped_two_layer_model_is_small_and_complete(tmp_path: Path) -> None:
    model = cw.load_pretrained("attn-only-2l")
    path = write_report(model, tmp_path / "report.html", card=cw.pretrained_card("attn-only-2l"))
    page = path.read_text()
    size = path.stat().st_size
    assert size < REPORT_BOUND_BYTES, size
    for heading in (
        "bigram",
        "Copying heads",
        "Skip-trigrams",
        "Composition",
        "Induction heads",
        "detector scores",
        "path terms",
        "during training",
    ):
        assert heading in page
    assert page.count('class="cw-widget"') == 12  # the training history too: the shipped card has one
    # the "Testing the circuit" sections: three patching maps and the attribution bars, linked like every view
    assert page.count("<h2>Testing the circuit") == 4
    blocks = re.findall(
        r'<div class="cw-widget"([^>]*)><script type="application/json" class="cw-state">(.{0,300})', page
    )
    views = [re.search(r'"_view":"(\w+)"', state).group(1) for _, state in blocks]  # type: ignore[union-attr]
    assert views.count("patchingmap") == 3 and views.count("logitattribution") == 1 and views.count("logitlens") == 1
    # one link group; heads linked wherever a view has them, the prompt's positions between the views that show it
    assert all('data-cw-link-group="g0"' in attrs for attrs, _ in blocks)
    links = [re.search(r'data-cw-link="([^"]*)"', attrs).group(1).split() for attrs, _ in blocks]  # type: ignore[union-attr]
    by_view = dict(zip(views, links, strict=False))
    assert by_view["attention"] == ["selected_layer", "selected_head", "selected_dest"]
    assert by_view["logitlens"] == ["selected_dest"]
    assert sum("selected_dest" in names for names in links) == 3  # attention, lens, (layer, position) map


def test_a_page_can_link_traits_across_its_widgets_and_the_shim_is_the_built_one() -> None:
    from circuitwidgets.export import shim_source

    page = html_page([_attention(["a", "b"]), _attention(["c", "d"])], link=["selected_layer", "selected_head"])
    assert page.count('data-cw-link="selected_layer selected_head"') == 2
    assert shim_source() in page and "__circuitwidgetsMount" in shim_source()
    assert "data-cw-link" not in html_page(_attention(["a", "b"]))
    for bad in ("selected_head", ["selected head"], ['x" onload="y']):
        with pytest.raises(TypeError, match="link"):
            html_page(_attention(["a", "b"]), link=bad)  # type: ignore[arg-type]
