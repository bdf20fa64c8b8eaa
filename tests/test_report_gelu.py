"""The report of the shipped model with MLPs (``gelu-2l``): written, about that model, with its causal section."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import circuitwidgets as cw
from circuitwidgets.report import write_report

NAME = "gelu-2l"


@pytest.mark.skipif(NAME not in cw.list_pretrained(), reason="shipped model missing")
def test_report_of_the_shipped_mlp_model_is_written_and_shows_what_the_mlps_write(tmp_path: Path) -> None:
    model = cw.load_pretrained(NAME)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # the weight-space views warn that MLP paths are outside them (the page says so)
        path = write_report(model, tmp_path / "report.html", card=cw.pretrained_card(NAME))
    page = path.read_text()
    assert path.stat().st_size < 1_000_000
    assert f"<h1>{NAME}:" in page and f"circuitwidgets report: {NAME}" in page
    assert "with MLPs" in page
    for heading in (
        "bigram",
        "Copying heads",
        "Composition",
        "Induction heads",
        "direct logit attribution",
        "during training",
    ):
        assert heading in page
    # the causal section: one attribution row per component, MLPs included, and the logit lens's three rows
    for row in ("L0 attn", "L0 mlp", "L1 attn", "L1 mlp", "total: the logit difference", "before L0", "final"):
        assert f"<th>{row}</th>" in page
    # repetition raises the answer's logit difference through layer 1's attention (the change column, mean ± s.d.)
    change = re.search(r"<th>L1 attn</th><td>[^<]*</td><td>[^<]*</td><td>([+-][\d.]+) ±", page)
    assert change is not None and float(change.group(1)) > 1.5
    # the causal sections: three patching maps and the attribution bars beside the tables; then the lens
    assert page.count('class="cw-widget"') == 12 and page.count("<h2>Testing the circuit") == 4
    assert "held-out code" in page and "mean loss, second copy" in page
    # its previous-token head's direct write into the keys carries little: the effect goes another way (notebook 04)
    assert "No receiver's keys carry much" in page
