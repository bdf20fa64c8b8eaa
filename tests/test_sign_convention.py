"""The style page states the sign convention the views use: its words are ``js/src/lib/colour.ts``'s, and the graph
legend's meanings of each sign (sent by the kernel) are the ones its table lists."""

from __future__ import annotations

import re
from pathlib import Path

from circuitwidgets.widgets.graph.data import ATTRIBUTION_SIGNS, EAP_SIGNS

ROOT = Path(__file__).resolve().parent.parent


def test_the_style_page_states_the_views_sign_convention() -> None:
    colour = (ROOT / "js" / "src" / "lib" / "colour.ts").read_text(encoding="utf-8")
    words = re.search(r'SIGN_WORDS = \{ positive: "([^"]+)", negative: "([^"]+)" \}', colour)
    assert words, "SIGN_WORDS not found in colour.ts"
    positive, negative = words.groups()
    assert re.search(r'POSITIVE = "#b2182b"', colour) and re.search(r'NEGATIVE = "#2166ac"', colour)
    page = (ROOT / "docs" / "style.md").read_text(encoding="utf-8")
    assert f'**"{positive}"**' in page and f'**"{negative}"**' in page
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| ")}
    assert EAP_SIGNS[1] in rows["edge attribution, edge patching"]
    assert EAP_SIGNS[0] in rows["edge attribution, edge patching"]
    graph = rows["attribution graph"]
    assert ATTRIBUTION_SIGNS[1] in graph and ATTRIBUTION_SIGNS[0].removesuffix(" (direct effect)") in graph
