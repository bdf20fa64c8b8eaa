"""A zero-layer model has a report too: its direct path is a bigram table, on a page that needs no view."""

from __future__ import annotations

from pathlib import Path

from circuitwidgets.cli import main


def test_report_of_the_zero_layer_model_is_its_bigram_table(tmp_path: Path) -> None:
    out = tmp_path / "r0.html"
    assert main(["report", "--model", "attn-only-0l", "-o", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "<h2>The direct path: bigram statistics</h2>" in page and "attn-only-0l" in page
    assert "<script" not in page  # nothing to run: no view, no bundle
