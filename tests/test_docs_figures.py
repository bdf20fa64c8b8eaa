"""The documentation's measured and computed figures, each checked against its source.

A figure on a docs page is either a measurement recorded by the benchmark the page names (its docstring or its
results file), shown to the digits the page gives, or arithmetic the page shows, recomputed here. A page that
quotes a number its source does not hold fails here, so the pages cannot drift from the records.
"""

from __future__ import annotations

import itertools
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCH = ROOT / "benchmarks"

NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def numbers(text: str) -> list[str]:
    """Every decimal number written in ``text`` (thousands separators kept, as written)."""
    return NUMBER.findall(text)


def rounds_to(source: str, shown: str) -> bool:
    """Whether the recorded ``source`` number, rounded half up to ``shown``'s decimals, is ``shown``."""
    places = len(shown.split(".")[1]) if "." in shown else 0
    value = Decimal(source.replace(",", "")).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    return value == Decimal(shown.replace(",", ""))


def unsourced(shown: str, source: str) -> list[str]:
    """The numbers of ``shown`` that no number of ``source`` rounds to."""
    recorded = numbers(source)
    return [n for n in numbers(shown) if not any(rounds_to(r, n) for r in recorded)]


def table_after(page: str, heading: str) -> str:
    """The markdown table's body rows following the line that contains ``heading`` (header and rule left out)."""
    lines = page[page.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    return "\n".join(rows[2:])


def test_rounding_is_half_up_to_the_digits_shown() -> None:
    assert rounds_to("32.55", "32.6") and rounds_to("253.9", "254") and rounds_to("3,905", "3,905")
    assert not rounds_to("32.55", "32.5") and not rounds_to("13.6", "13")
    assert unsourced("| a | 12.0 s | 7 |", "measured 11.96 s and 7.2") == []
    assert unsourced("| a | 12.1 s |", "measured 11.96 s") == ["12.1"]


def test_the_edge_attribution_reference_table_is_the_benchmarks_record() -> None:
    page = (DOCS / "graphs.md").read_text(encoding="utf-8")
    source = (BENCH / "bench_eap_reference.py").read_text(encoding="utf-8")
    rows = table_after(page, "| method | reference | ours |")
    assert rows.count("\n") == 1, rows
    assert unsourced(rows, source) == [], rows
    prose = page[page.index("Over all 32,491 edges") : page.index("| method | reference | ours |")]
    assert unsourced(prose, source) == [], prose


def test_the_edge_attribution_cost_table_is_the_benchmarks_record() -> None:
    page = (DOCS / "graphs.md").read_text(encoding="utf-8")
    source = (BENCH / "bench_eap.py").read_text(encoding="utf-8")
    rows = table_after(page, "| what | before | after | goal |")
    assert rows.count("\n") == 2, rows
    assert unsourced(rows, source) == [], rows


def test_causal_tracings_speed_on_the_hypotheses_page_is_the_results_files() -> None:
    page = (DOCS / "hypotheses.md").read_text(encoding="utf-8")
    results = (BENCH / "hypotheses_results.md").read_text(encoding="utf-8")
    table = table_after(results, "## Causal tracing")
    ours = [float(x) for x in re.findall(r"\| ([\d.]+) s \| [\d.]+ s \|", table)]
    hooks = [float(x) for x in re.findall(r"\| [\d.]+ s \| ([\d.]+) s \|", table)]
    assert len(ours) == len(hooks) == 3, table

    def whole(x: float) -> str:
        return str(Decimal(str(x)).quantize(Decimal(1), rounding=ROUND_HALF_UP))

    claim = f"takes {whole(min(ours))}–{whole(max(ours))} s against {whole(min(hooks))}–{whole(max(hooks))} s"
    assert claim in " ".join(page.split()), claim


def test_the_graph_views_measurements_are_included_from_their_results_file() -> None:
    page = (DOCS / "attribution-graphs.md").read_text(encoding="utf-8")
    assert "```{include} ../benchmarks/graph_view_results.md" in page
    results = (BENCH / "graph_view_results.md").read_text(encoding="utf-8")
    assert "benchmarks/bench_graph_view.py" in results and "727,096 edges" in results
    assert "727,096" not in page.replace("727,096 edges in view", "")


UNITS = {"B": 1, "KB": 1e3, "KiB": 1024, "MB": 1e6, "GB": 1e9}
PRODUCT = re.compile(r"(\(?\d[\d,]*(?: (?:[×+]|B \+) \(?[\d,]+\)?)+) (?:B )?= ([\d,.]+)(?: (KB|KiB|MB|GB|B)\b)?")


def evaluate(expression: str) -> int:
    """A product or sum of whole numbers as the page writes it (``×``, ``+``, parentheses, thousands commas, a
    sum of byte counts ``a B + b``); a parenthesis the prose opened before the expression is dropped."""
    cleaned = expression.replace(",", "").replace("×", "*").replace(" B +", " +")
    if cleaned.count("(") > cleaned.count(")"):
        cleaned = cleaned.removeprefix("(")
    assert re.fullmatch(r"[\d\s*+()]+", cleaned), expression
    return int(eval(cleaned, {"__builtins__": {}}))  # digits, +, * and parentheses only, checked above


def shown_matches(value: float, shown: str) -> bool:
    """Whether ``value`` written to ``shown``'s digits (half up) is ``shown``."""
    return rounds_to(repr(value), shown)


def test_the_nnsight_pages_arithmetic_is_right() -> None:
    page = " ".join((DOCS / "nnsight.md").read_text(encoding="utf-8").split())
    # a product with a symbol in it (``N`` tokens) is left out: the match would start after the symbol
    found = [m.groups() for m in PRODUCT.finditer(page) if not page[: m.start()].endswith("× ")]
    assert len(found) >= 8, found
    for expression, shown, unit in found:
        total = evaluate(expression)
        value = total / UNITS[unit] if unit else float(total)
        assert shown_matches(value, shown.rstrip(".")), (expression, shown, unit, value)


@pytest.mark.parametrize("expression", ["80 × 64 × 8 B = 41 KiB", "5,120 × 128,256 × 2 B = 1.30 GB"])
def test_a_wrong_product_is_caught(expression: str) -> None:
    (found,) = PRODUCT.findall(expression)
    total = evaluate(found[0])
    assert not shown_matches(total / UNITS[found[2]], found[1])


def test_the_causal_pages_planning_margin_is_the_engines() -> None:
    from circuitwidgets.causal.one_pass import MODELLED_MARGIN

    page = " ".join((DOCS / "causal.md").read_text(encoding="utf-8").split())
    assert f"(the one pass when modelled at least {round((1 - MODELLED_MARGIN) * 100)}% faster)" in page
