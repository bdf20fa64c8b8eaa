"""The checks have teeth: a bundle whose ``render`` throws fails them.

Each run puts a deliberately broken bundle (``_broken.py``) into an exported
page and checks that opening it the way every exported-page test does raises.
``python tests/e2e/broken_bundle.py`` does the same for the whole suite, in
every host.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page

from circuitwidgets.export import bundle_source, html_page

from ._broken import BROKEN_MESSAGE, break_bundle
from ._pages import PageLog, open_offline
from ._widgets import attention_patterns


def test_a_page_whose_render_throws_fails_the_exported_page_checks(
    tmp_path: Path, page: Page, page_log: PageLog
) -> None:
    good = base64.b64encode(bundle_source().encode()).decode()
    bad = base64.b64encode(break_bundle(bundle_source()).encode()).decode()
    text = html_page(attention_patterns())
    assert good in text
    path = tmp_path / "broken.html"
    path.write_text(text.replace(good, bad), encoding="utf-8")

    with pytest.raises(AssertionError, match=re.escape(BROKEN_MESSAGE)):
        open_offline(page, page_log, path, ["attention"])
