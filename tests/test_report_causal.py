"""The report's "Testing the circuit" sections: head patching, (layer, position) patching, path patching from the
previous-token head into the keys, and the logit attribution, on the shipped 12-head model (the default), as
linked views whose text names what the computed results say, all on one metric and one prompt set
(``causal.induction.induction_test``), recomputed here from the library's own functions."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch

import circuitwidgets as cw
from circuitwidgets import causal, circuits
from circuitwidgets.causal.induction import HALF, induction_prompts, induction_test
from circuitwidgets.report import build_sections
from circuitwidgets.report.causal import causal_sections, strongest_heads

NAME = "attn-only-2l-12h"

pytestmark = [
    pytest.mark.skipif(NAME not in cw.list_pretrained(), reason="shipped model missing"),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def model() -> Any:
    return cw.load_pretrained(NAME)


@pytest.fixture(scope="module")
def sections(model: Any) -> list[Any]:
    return build_sections(model)


@pytest.fixture(scope="module")
def testing(sections: list[Any]) -> list[Any]:
    """The page's "Testing the circuit" sections, in order."""
    return [s for s in sections if s.title.startswith("Testing the circuit")]


@pytest.fixture(scope="module")
def sweeps(model: Any) -> tuple[causal.Sweep, causal.Sweep, causal.Sweep]:
    """Head patching under corruption A, path patching from the previous-token head and the clean logit difference
    by head, computed here as a notebook cell would (the notebook's prompts, written out)."""
    gen = torch.Generator().manual_seed(0)
    first = torch.randint(1, 2048, (8, HALF), generator=gen)
    other = torch.randint(1, 2048, (8, HALF), generator=gen)
    bos = torch.zeros(8, 1, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, : HALF - 1]], dim=1)
    corrupt_a = torch.cat([bos, other, first[:, : HALF - 1]], dim=1)
    first_b = first.clone()
    first_b[:, HALF - 2] = other[:, 0]
    corrupt_b = torch.cat([bos, first_b, first[:, : HALF - 1]], dim=1)
    metric = causal.normalised(causal.logit_diff(first[:, -1].tolist(), other[:, -1].tolist()))
    heads = causal.patch(model, clean, corrupt_a, metric, site="z", by=("layer", "head"))
    prev = int(np.argmax(circuits.head_scores(model, kind="previous_token")[0]))
    paths = causal.path_patch(model, clean, corrupt_b, metric, sender=(0, prev), via="k")
    by_head = causal.logit_attribution(model, clean, (first[:, -1], other[:, -1]), by="head")
    return heads, paths, by_head


def _named_heads(explanation: str, after: str) -> list[tuple[str, str]]:
    """The heads the text names in bold after ``after``, with their values as written."""
    tail = explanation.split(after, 1)[1]
    return re.findall(r"<b>(L\d+H\d+)</b> \(([+−-]\d+\.\d\d)", tail.split("</p>", 1)[0])


def test_the_prompts_are_notebook_04s_and_corruption_b_changes_one_token(model: Any) -> None:
    p = induction_prompts(model)
    assert p.clean.shape == p.corrupt_a.shape == p.corrupt_b.shape == (8, 2 * HALF)
    differ = sorted(set((p.clean != p.corrupt_b).nonzero()[:, 1].tolist()))
    assert differ == [HALF - 1]  # the earlier occurrence of the last token, nothing else
    assert (p.clean[:, HALF - 1] == p.clean[:, -1]).all()
    assert (p.clean[:, HALF] == p.answer).all() and (p.control != p.answer).all()


def test_the_sections_draw_the_sweeps_a_notebook_cell_computes(
    model: Any, testing: list[Any], sweeps: tuple[causal.Sweep, causal.Sweep, causal.Sweep]
) -> None:
    heads, positions, paths, attribution = (s.widget for s in testing)
    assert isinstance(heads, cw.PatchingMap) and isinstance(paths, cw.PatchingMap)
    assert isinstance(positions, cw.PatchingMap) and positions.col_dim == "pos"
    assert isinstance(attribution, cw.LogitAttribution)
    expected, path, by_head = sweeps
    np.testing.assert_allclose(heads.values[0], expected.values, atol=1e-9)
    assert heads.metric == "normalised logit_diff(pos=-1)" and heads.caption == expected.describe()
    assert paths.caption == path.describe() and "L0H11" in paths.title
    np.testing.assert_allclose(paths.values[0], path.values, atol=1e-9, equal_nan=True)
    assert np.isnan(paths.values[0, 0]).all()  # layer 0 cannot read a layer-0 sender
    # the attribution reads the patching's metric: its bars sum to the patching's clean logit difference
    assert attribution.by == "head" and "control" in attribution.metric
    assert attribution.total == pytest.approx(attribution.logit, abs=1e-6)
    assert attribution.logit == pytest.approx(expected.clean_value, abs=1e-4)
    bars = _as_sweep(attribution)
    np.testing.assert_allclose(bars.values, by_head.values, atol=1e-6)


def test_the_text_names_the_heads_the_results_rank_first_with_their_spread(model: Any, testing: list[Any]) -> None:
    heads, _, paths, attribution = testing
    for section, after in ((heads, "three strongest heads"), (paths, "strongest receivers")):
        values = section.widget.values[0]
        order = np.argsort(-np.nan_to_num(values, nan=-np.inf), axis=None)[:3]
        computed = [
            (f"L{layer}H{head}", f"{values[layer, head]:+.2f}")
            for layer, head in (np.unravel_index(int(i), values.shape) for i in order)
        ]
        assert _named_heads(section.explanation, after) == computed, section.title
    assert re.search(r"<b>L1H\d</b> \(\+\d\.\d\d ± \d\.\d\d\)", heads.explanation)  # the spread over prompts
    induction = circuits.head_scores(model, kind="induction")[1]
    by_detector = {f"L1H{h}" for h in np.argsort(-induction)[:3]}
    assert {n for n, _ in _named_heads(heads.explanation, "three strongest heads")} == by_detector
    assert {n for n, _ in _named_heads(paths.explanation, "strongest receivers")} == by_detector
    by_head = _as_sweep(attribution.widget)
    top = [(n, f"{v:+.2f}") for n, v in strongest_heads(by_head)]
    layer, head = np.unravel_index(int(np.nanargmin(by_head.values)), by_head.values.shape)
    against = (f"L{layer}H{head}", f"{by_head.values[layer, head]:+.2f}")
    assert _named_heads(attribution.explanation, "write the most") == [*top, against]


def _as_sweep(bars: Any) -> causal.Sweep:
    """The head bars of a LogitAttribution view as a ``(layer, head)`` sweep, to rank them."""
    n_layers, n_heads = bars.shape
    values = np.full((n_layers, n_heads), np.nan)
    for value, layer, head, kind in zip(bars.values, bars.bar_layers, bars.bar_heads, bars.kinds, strict=True):
        if kind == "head":
            values[layer, head] = value
    labels = {"layer": [f"L{i}" for i in range(n_layers)], "head": [f"H{i}" for i in range(n_heads)]}
    return causal.Sweep(values, ("layer", "head"), labels, "direct logit attribution", bars.metric)


def test_the_text_states_prompts_metric_corruption_and_the_cell_that_recomputes_it(testing: list[Any]) -> None:
    heads, positions, paths, attribution = testing
    for section, corruption in ((heads, "Corruption A"), (positions, "Corruption B"), (paths, "Corruption B")):
        assert corruption in section.explanation
    for section in (heads, paths):
        corrupted = re.search(r"corrupted ([-\d.e]+);", section.widget.caption)
        assert corrupted is not None, section.widget.caption
        assert "<b>Metric</b>" in section.explanation and "control token" in section.explanation
        assert f"(logit difference {float(corrupted.group(1)):.2f})" in section.explanation
    assert "induction_test(cw.load_pretrained(&#x27;attn-only-2l-12h&#x27;))" in heads.explanation
    assert "L0H11" in paths.explanation and "through these heads' keys" in paths.explanation
    for row in ("L0 attn", "L1 attn", "total: the logit difference", "before L0", "final"):  # the tables are kept
        assert f"<th>{row}</th>" in attribution.explanation


def test_the_position_map_finds_the_corrupted_token_then_the_next_one(model: Any) -> None:
    t = induction_test(model)
    values = t.positions_b.values  # [layer, pos]
    assert int(np.argmax(values[0])) == HALF - 1  # before layer 0: the corrupted token itself
    assert int(np.argmax(values[1])) == HALF  # before layer 1: the next position (the previous-token head's move)
    # the lens reads the same logit difference: its last row is the model's, prompt by prompt
    np.testing.assert_allclose(t.lens[-1], t.clean, atol=1e-4)


def test_the_head_views_start_on_the_pages_head(model: Any, testing: list[Any]) -> None:
    induction = circuits.head_scores(model, kind="induction")
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(induction)), induction.shape))
    for section in testing:
        if section.widget.n_heads if hasattr(section.widget, "n_heads") else True:
            assert (section.widget.selected_layer, section.widget.selected_head) == (layer, head), section.title


def test_a_one_layer_model_has_no_path_patching() -> None:
    model = cw.load_pretrained("attn-only-1l")
    t = induction_test(model)
    assert t.paths_k is None and t.heads_b is None
    sections = causal_sections(model, t, circuits.head_scores(model, kind="previous_token"))
    assert [type(w).__name__ for _, _, w in sections] == ["PatchingMap", "PatchingMap", "LogitAttribution"]
    assert not any("path patching" in title for title, _, _ in sections)
