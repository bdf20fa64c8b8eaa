"""Front-end requests coalesced (issue 45, finding 4): inside a kernel's event loop, the view's newest request of
a kind supersedes the queued ones (a dragged offset slider recomputes once, with its last value), for every
trait that starts kernel work; from Python, and without an event loop, every change still runs at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from families import CASES_BY_ID

import circuitwidgets as cw
from circuitwidgets.sources.huggingface import from_hf
from circuitwidgets.widgets.core import coalesce

pytestmark = pytest.mark.filterwarnings("ignore::circuitwidgets._checks.MLPPathsExcludedWarning")


@pytest.fixture(scope="module")
def rotary() -> Any:
    return from_hf(CASES_BY_ID["llama-gqa2-biases-llama3rope"].build())


def _counting(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[Any]:
    calls: list[Any] = []
    original = getattr(owner, name)

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


async def _burst(widget: Any, trait: str, values: list[int]) -> None:
    """Ten updates from the view, as a kernel reads ten comm messages in one turn, then the turns after them."""
    for v in values:
        widget.set_state({trait: v})
    await asyncio.sleep(5 * coalesce.DELAY_S)
    while coalesce.pending_kinds(widget):
        await asyncio.sleep(coalesce.DELAY_S)


@pytest.mark.parametrize("cls", [cw.CompositionMap])  # (EigenScatter shares its ReadsQKAtOffset observer)
def test_a_burst_of_offsets_from_the_view_recomputes_once_at_the_last(
    rotary: Any, monkeypatch: pytest.MonkeyPatch, cls: type
) -> None:
    widget = cls(rotary)
    calls = _counting(monkeypatch, cls, "_recompute_at_offset")
    asyncio.run(_burst(widget, "qk_offset", [1, 2, 3, 4, 5, 6, 7, 8, 9, 3]))
    assert widget.qk_offset == 3
    assert len(calls) == 1 and calls[0][1] == 3  # (model, engine offset): only the newest request ran
    reference = cls(rotary)
    reference.qk_offset = 3  # one change from Python: runs at once
    got, want = widget.get_state()[_data(widget)], reference.get_state()[_data(widget)]
    assert bytes(got["view"]) == bytes(want["view"])  # the same state as the last request alone gives


def _data(widget: Any) -> str:
    return "eigenvalues" if isinstance(widget, cw.EigenScatter) else "scores"


def test_skip_trigram_offsets_and_head_selections_coalesce(rotary: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    table = cw.SkipTrigramTable(rotary, k=5, progress_bar=False)
    fills = _counting(monkeypatch, cw.SkipTrigramTable, "_fill")
    asyncio.run(_burst(table, "qk_offset", [1, 2, 3, 4]))
    assert table.qk_offset == 4 and len(fills) == 1

    async def heads() -> None:
        for head in range(rotary.cfg.n_heads):
            table.set_state({"selected_layer": 1, "selected_head": head})
        await asyncio.sleep(5 * coalesce.DELAY_S)

    fills.clear()
    asyncio.run(heads())
    assert len(fills) == 1 and (table.selected_layer, table.selected_head) == (1, rotary.cfg.n_heads - 1)


@pytest.mark.slow
def test_the_explorer_coalesces_its_shared_offset(rotary: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    explorer = cw.CircuitExplorer(rotary, [1, 5, 9, 12, 5, 9], k=5, max_tokens=32, progress_bar=False)
    initial = _counting(monkeypatch, cw.EigenScatter, "initial")
    asyncio.run(_burst(explorer, "eigen_qk_offset", [1, 2, 3, 2]))
    assert len(initial) == 1
    assert explorer.eigen_qk_offset == explorer.trigram_qk_offset == explorer.composition_qk_offset == 2


def test_python_changes_and_scripts_run_at_once(rotary: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    widget = cw.CompositionMap(rotary)
    calls = _counting(monkeypatch, cw.CompositionMap, "_recompute_at_offset")
    widget.set_state({"qk_offset": 2})  # a view's update with no event loop: at once
    assert len(calls) == 1

    async def in_a_cell() -> None:
        widget.qk_offset = 5  # Python's own change inside a kernel: at once, seen on the next line
        assert len(calls) == 2

    asyncio.run(in_a_cell())
