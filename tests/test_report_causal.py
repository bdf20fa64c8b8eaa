"""The report's "Testing the circuit" sections: head patching, path patching from the previous-token head into
the keys, and the second copy's logit attribution, on the shipped 12-head model (the default), as linked views
whose text names what the computed results say."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import circuitwidgets as cw
from circuitwidgets import causal, circuits
from circuitwidgets.report import build_sections
from circuitwidgets.report_causal import HALF, causal_prompts, causal_sections, strongest_heads

NAME = "attn-only-2l-12h"

pytestmark = pytest.mark.skipif(NAME not in cw.list_pretrained(), reason="shipped model missing")


@pytest.fixture(scope="module")
def model() -> Any:
    return cw.load_pretrained(NAME)


@pytest.fixture(scope="module")
def testing(model: Any) -> list[Any]:
    """The page's "Testing the circuit" sections, in order."""
    return [s for s in build_sections(model) if s.title.startswith("Testing the circuit")]


@pytest.fixture(scope="module")
def sweeps(model: Any) -> tuple[causal.Sweep, causal.Sweep]:
    """Head patching under corruption A and path patching from the previous-token head under B, computed here."""
    p = causal_prompts(model)
    metric = causal.normalised(p.metric)
    heads = causal.patch(model, p.clean, p.corrupt_a, metric, site="z", by=("layer", "head"))
    prev = int(np.argmax(circuits.head_scores(model, kind="previous_token")[0]))
    return heads, causal.path_patch(model, p.clean, p.corrupt_b, metric, sender=(0, prev), via="k")


def _named_heads(explanation: str, after: str) -> list[tuple[str, str]]:
    """The heads the text names in bold after ``after``, with their values as written."""
    tail = explanation.split(after, 1)[1]
    return re.findall(r"<b>(L\d+H\d+)</b> \(([+−-]\d+\.\d\d)\)", tail.split("</p>", 1)[0])


def test_the_section_holds_a_head_map_a_path_map_and_an_attribution_of_the_computed_sweeps(
    model: Any, testing: list[Any], sweeps: tuple[causal.Sweep, causal.Sweep]
) -> None:
    heads, paths, attribution = (s.widget for s in testing)
    assert isinstance(heads, cw.PatchingMap) and isinstance(paths, cw.PatchingMap)
    assert isinstance(attribution, cw.LogitAttribution)
    expected, path = sweeps
    assert heads.col_dim == "head" and heads.title == "activation patching of z"
    np.testing.assert_allclose(heads.values[0], expected.values, atol=1e-12)
    assert heads.metric == "normalised logit_diff(pos=-1)" and heads.caption == expected.describe()
    assert paths.title == "path patching of k" and paths.caption == path.describe()
    np.testing.assert_allclose(paths.values[0], path.values, atol=1e-12, equal_nan=True)
    assert np.isnan(paths.values[0, 0]).all()  # layer 0 cannot read a layer-0 sender
    # the bars split the second copy's mean logit by head, and they sum to it
    assert attribution.by == "head" and "second copy" in attribution.metric
    assert attribution.total == pytest.approx(attribution.logit, abs=1e-6)
    assert list(attribution.shape) == [model.cfg.n_layers, model.cfg.n_heads]


def test_the_text_names_the_heads_the_results_rank_first(model: Any, testing: list[Any]) -> None:
    heads, paths, attribution = testing
    for section, after in ((heads, "three strongest heads"), (paths, "strongest receivers")):
        sweep_map = section.widget
        values = sweep_map.values[0]
        order = np.argsort(-np.nan_to_num(values, nan=-np.inf), axis=None)[:3]
        computed = [
            (f"L{layer}H{head}", f"{values[layer, head]:+.2f}")
            for layer, head in (np.unravel_index(int(i), values.shape) for i in order)
        ]
        assert _named_heads(section.explanation, after) == computed, section.title
    # on this model they are the induction heads, found by both tests: layer 1's strongest by the detector
    induction = circuits.head_scores(model, kind="induction")[1]
    by_detector = {f"L1H{h}" for h in np.argsort(-induction)[:3]}
    assert {n for n, _ in _named_heads(heads.explanation, "three strongest heads")} == by_detector
    assert {n for n, _ in _named_heads(paths.explanation, "strongest receivers")} == by_detector
    by_head = _as_sweep(attribution.widget)
    top = [(n, f"{v:+.2f}") for n, v in strongest_heads(by_head)]
    layer, head = np.unravel_index(int(np.nanargmin(by_head.values)), by_head.values.shape)
    against = (f"L{layer}H{head}", f"{by_head.values[layer, head]:+.2f}")
    assert by_head.values[layer, head] < 0  # (on this model a head writes against the answer: L1H3)
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


def test_the_text_states_metric_corruption_and_convention_with_the_computed_values(
    testing: list[Any], sweeps: tuple[causal.Sweep, causal.Sweep]
) -> None:
    heads, paths, attribution = testing
    for section, corruption, sweep in ((heads, "Corruption A", sweeps[0]), (paths, "Corruption B", sweeps[1])):
        text = section.explanation
        assert "<b>Metric</b>" in text and corruption in text and "<b>Convention</b>: model has no norms" in text
        assert f"(logit difference {sweep.corrupted_value:.2f})" in text
        assert f"the clean run ({sweep.clean_value:.2f})" in text
    # the sender is the previous-token detector's head, and its effect goes through the receivers' keys
    assert "L0H11" in paths.explanation and "through these heads' keys" in paths.explanation
    assert "convention</b>: model has no norms" in attribution.explanation
    for row in ("L0 attn", "L1 attn", "total: the logit", "before L0", "final"):  # the tables are kept
        assert f"<th>{row}</th>" in attribution.explanation


def test_the_new_views_start_on_the_pages_head(model: Any, testing: list[Any]) -> None:
    induction = circuits.head_scores(model, kind="induction")
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(induction)), induction.shape))
    for section in testing:
        assert (section.widget.selected_layer, section.widget.selected_head) == (layer, head), section.title


def test_a_one_layer_model_has_no_path_patching_and_its_prompts_fit() -> None:
    model = cw.load_pretrained("attn-only-1l")
    tokens = circuits.repeated_random_tokens(model, seq_len=HALF, n_seqs=1, seed=0)
    previous = circuits.head_scores(model, kind="previous_token")
    sections = causal_sections(model, tokens, HALF, previous)
    assert len(sections) == 2
    assert isinstance(sections[0][2], cw.PatchingMap) and isinstance(sections[1][2], cw.LogitAttribution)
    assert not any("path patching" in title for title, _, _ in sections)
    p = causal_prompts(model)
    assert p.clean.shape == p.corrupt_a.shape == p.corrupt_b.shape == (8, 2 * HALF)
    differ = (p.clean != p.corrupt_b).nonzero()[:, 1].unique().tolist()
    assert differ == [HALF - 1]  # corruption B changes the earlier occurrence of the last token, nothing else
    assert (p.clean[:, HALF - 1] == p.clean[:, -1]).all()
