"""A large attribution graph (512 positions, 6,000 edges, made up: building a real one is slow for CI) in an
exported page, offline: level of detail engages and says so, a click on a bin or the zoom button reveals the
nodes, a click on a node still selects it, a shift-click pins it, and zoomed out the pinned node's bin shows the
pin (nothing asked for is hidden without a word)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Locator, Page

import circuitwidgets as cw
from circuitwidgets.export import save_html
from circuitwidgets.graphs import Graph
from circuitwidgets.graphs.graph import EdgeTable, NodeTable

from ._pages import PageLog, open_offline, screenshot, wait_for, wait_status

N_POS = 512


def _large_graph(seed: int = 0) -> Graph:
    """Embeddings at every position, two features per position in each of 2 layers, 3 logits at the last; edges
    embedding → L0 → L1 → logit (every one on a path from the input to a logit), strongest first unordered."""
    rng = np.random.default_rng(seed)
    kind: list[str] = []
    label: list[str] = []
    cols: list[tuple[int, int, int]] = []  # (layer, pos, index) of each node

    def add(k: str, lay: int, p: int, i: int, name: str) -> int:
        kind.append(k)
        label.append(name)
        cols.append((lay, p, i))
        return len(kind) - 1

    emb = [add("embedding", -1, p, p, f"emb @{p}") for p in range(N_POS)]
    l0 = [add("feature", 0, p, 2 * p + j, f"L0 f{2 * p + j} @{p}") for p in range(N_POS) for j in range(2)]
    l1 = [add("feature", 1, p, 2 * p + j, f"L1 f{2 * p + j} @{p}") for p in range(N_POS) for j in range(2)]
    logits = [add("logit", 2, N_POS - 1, t, f"logit 't{t}' @{N_POS - 1}") for t in range(3)]
    layer, pos, index = (np.array(c) for c in zip(*cols, strict=True))
    pairs = [(emb[pos[f]], f) for f in l0]
    pairs += [(int(g), f) for f in l1 for g in rng.choice([x for x in l0 if pos[x] <= pos[f]], size=2)]
    pairs += [(int(f), int(rng.choice(logits))) for f in rng.choice(l1, size=6000 - len(pairs) - 3, replace=True)]
    pairs += [(emb[-1], t) for t in logits]
    src, dst = (np.array(c) for c in zip(*pairs, strict=True))
    n = len(kind)
    nodes = NodeTable(
        kind, layer, pos, index, label,
        activation=np.full(n, np.nan), influence=rng.random(n),
    )  # fmt: skip
    edges = EdgeTable(src, dst, rng.standard_normal(len(src)))
    return Graph(nodes, edges, prompt=[f"t{p}" for p in range(N_POS)], method="attribution", extra={"n_layers": 2})


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    view = cw.AttributionGraph(_large_graph(), title="A large graph")
    # (the kernel's pruned circuit: the view must say it keeps exactly these)
    return save_html([view], tmp_path_factory.mktemp("lod") / "lod.html"), len(view.circuit.edges)


def _note(graph: Locator) -> Locator:
    return graph.locator("[data-cw-lod]")


def test_level_of_detail_says_what_it_shows_zooms_in_and_selects(
    made: tuple[Path, int], page: Page, page_log: PageLog
) -> None:
    page_path, kept = made
    graph = open_offline(page, page_log, page_path, ["graph"])["graph"]
    note = _note(graph)
    wait_for(lambda: re.search(r"^Level of detail: .*nodes drawn as [\d,]+ groups", note.text_content() or ""), "LOD")
    assert graph.locator("[data-cw-bin]").count() > 0 and graph.locator("[data-cw-node]").count() == 0
    assert f"{kept:,} kept of 6,000" in (note.text_content() or "")
    screenshot(graph, "attribution-graph-lod-out")
    bins = int(note.get_attribute("data-cw-bins") or 0)
    # a click on a bin zooms into it: narrower bins, fewer positions each
    graph.locator("[data-cw-bin]").nth(3).click()
    wait_for(lambda: int(note.get_attribute("data-cw-bins") or 0) != bins, "the bin's zoom")
    for _ in range(12):  # the + button until every node in view is drawn (no bins)
        if graph.locator("[data-cw-node]").count():
            break
        before = note.text_content()
        graph.locator("[data-cw-zoom-in]").click()
        wait_for(lambda: note.text_content() != before, "a zoom step")  # noqa: B023 (used at once)
    wait_for(lambda: graph.locator('[data-cw-kind="feature"]').count() > 0, "feature nodes drawn when zoomed in")
    assert graph.locator("[data-cw-bin]").count() == 0 and "groups" not in (note.text_content() or "")
    screenshot(graph, "attribution-graph-lod-in")
    feature = graph.locator('[data-cw-kind="feature"]').nth(1)
    row = int(feature.get_attribute("data-cw-node") or -1)
    feature.dispatch_event("click")
    wait_status(graph, r"^L\d f\d+ @\d+ selected")
    assert graph.locator(f'[data-cw-node="{row}"][data-cw-selected]').count() == 1
    graph.locator(f'[data-cw-node="{row}"]').dispatch_event("click", {"shiftKey": True})
    wait_for(lambda: graph.locator(f'[data-cw-node="{row}"][data-cw-pinned]').count() == 1, "the pin drawn")
    graph.locator("[data-cw-zoom-fit]").click()
    wait_for(lambda: graph.locator("[data-cw-bin][data-cw-pinned]").count() == 1, "the pinned node's bin marked")
    assert graph.locator("[data-cw-bin][data-cw-selected]").count() == 1
    page_log.assert_offline_clean()
