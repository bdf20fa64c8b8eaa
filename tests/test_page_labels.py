"""One escaping rule for every string that reaches a page: names, labels and titles as well as tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

import circuitwidgets as cw
from circuitwidgets._text import visible_label, visible_token
from circuitwidgets.export import html_page
from circuitwidgets.report import write_report

RLO_NAME = "abc\u202eexe.txt"  # shows as "abctxt.exe" when the override is left raw


@pytest.mark.parametrize("code", [0x202E, 0x061C, 0x2066, 0x200B, 0xE0041, 0xE007F])
def test_tokens_and_labels_escape_every_invisible_format_character(code: int) -> None:
    for show in (visible_token, visible_label):
        shown = show(f"a{chr(code)}b")
        assert chr(code) not in shown
        assert shown.startswith("a\\u") and shown.endswith("b")


def test_labels_keep_spaces_and_letters_of_right_to_left_scripts() -> None:
    assert visible_label("שלום model 2") == "שלום model 2"


def test_page_title_escapes_an_override() -> None:
    import numpy as np

    widget = cw.AttentionPatterns.from_arrays(["a", "b"], np.array([[[[1.0, 0.0], [0.5, 0.5]]]], dtype=np.float32))
    page = html_page(widget, title=f"report: {RLO_NAME}")
    assert "\u202e" not in page.split("</title>")[0]
    assert "<title>report: abc\\u202eexe.txt</title>" in page


@pytest.mark.skipif("attn-only-1l" not in cw.list_pretrained(), reason="shipped model missing")
def test_report_heading_escapes_the_model_name(tmp_path: Path) -> None:
    model = cw.load_pretrained("attn-only-1l")
    model.name = RLO_NAME
    page = write_report(model, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "\u202e" not in page.split("<script")[0]  # what Python wrote; the views escape their own
    assert "<h1>abc\\u202eexe.txt: a walk" in page
