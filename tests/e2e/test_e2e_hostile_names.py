"""Hostile names in every view (issue 45, finding 6): a model's name, a metric's ``__name__``, user labels,
captions and status lines carrying a right-to-left override, zero-width and isolate characters reach neither
the page's text nor its attributes nor any SVG export raw.

Every widget class of ``circuitwidgets.widgets`` is built here (a new class without a builder fails the test),
with the hostile string wherever the user names something, and drawn in one exported page.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from playwright.sync_api import Download, Page

import circuitwidgets as cw
import circuitwidgets.widgets as widgets
from circuitwidgets import causal
from circuitwidgets._text import is_invisible_format
from circuitwidgets.training import grokking
from circuitwidgets.widgets.core.base import CircuitWidget

from ._pages import PageLog, screenshot, wait_for, wait_view
from ._widgets import causal_patterns, hostile_tokens

HOSTILE = "abc\u202eexe.txt\u200b \u2066iso\u2069\u061c"


def _named(name: str) -> Any:
    model = cw.load_pretrained(name)
    model.name = f"{HOSTILE} model"
    return model


def _metric() -> Any:
    metric = causal.logit_diff(5, 6)
    metric.__name__ = f"{HOSTILE} metric"
    return metric


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(1, 2048, (2, 8), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 3] = torch.randint(1, 2048, (2,), generator=gen)
    return clean, corrupted


def _patching_map() -> Any:
    sweep = causal.patch(_named("attn-only-2l"), *_prompts(), _metric(), site="z", by=("layer", "head"))
    sweep.labels["layer"] = [f"{HOSTILE} L{i}" for i in range(len(sweep.labels["layer"]))]
    return cw.PatchingMap(sweep)


def _logit_attribution() -> Any:
    model = _named("attn-only-2l")
    bars = causal.logit_attribution(model, _prompts()[0], 5, by="component")
    bars.labels["component"] = [f"{HOSTILE} {c}" for c in bars.labels["component"]]
    return cw.LogitAttribution(bars)


def _logit_lens() -> Any:
    lens = causal.logit_lens(_named("gelu-2l"), _prompts()[0])
    lens.layer_labels = [f"{HOSTILE} {label}" for label in lens.layer_labels]
    return cw.LogitLens(lens)


def _composition_vs_patching() -> Any:
    model = _named("attn-only-2l")
    k = causal.path_patch(model, *_prompts(), _metric(), via="k")
    return cw.CompositionVsPatching(model, dataclasses.replace(k), n_samples=10)


def _attribution_graph() -> Any:
    from circuitwidgets import graphs

    graph = graphs.edge_attribution(_named("attn-only-2l"), *_prompts(), _metric())
    graph.nodes.label[:] = [f"{HOSTILE} {label}" for label in graph.nodes.label]
    return widgets.AttributionGraph(graph, title=f"{HOSTILE} graph")


def _feature_dashboard() -> Any:
    rows = torch.randint(1, 2048, (4, 16), generator=torch.Generator().manual_seed(0))
    dictionary = cw.features.load_pretrained("gelu-2l")["L1.tc"]
    return widgets.FeatureDashboard.from_model(
        _named("gelu-2l"), dictionary, rows, k=4, samples=3, batch_size=4, progress=False
    )


def _prompt_features() -> Any:
    dictionary = cw.features.load_pretrained("gelu-2l")["L1.tc"]
    return widgets.PromptFeatures(_named("gelu-2l"), dictionary, f"{HOSTILE} text", k=3)


BUILDERS: dict[str, Callable[[], Any]] = {
    "AttentionPatterns": lambda: widgets.AttentionPatterns.from_arrays(
        hostile_tokens(), causal_patterns(1, 2, len(hostile_tokens()), seed=1)
    ),
    "CircuitExplorer": lambda: widgets.CircuitExplorer(
        _named("attn-only-2l"), f"{HOSTILE} text", k=5, profile_k=2, max_tokens=64, progress_bar=False
    ),
    "CompositionMap": lambda: widgets.CompositionMap(_named("attn-only-2l"), n_samples=10),
    "CompositionVsPatching": _composition_vs_patching,
    "EigenScatter": lambda: widgets.EigenScatter(_named("attn-only-2l"), max_tokens=64),
    "HeadScores": lambda: widgets.HeadScores.from_scores(
        np.arange(24.0).reshape(2, 12) / 24,
        name=f"{HOSTILE} score",
        note=f"{HOSTILE} note",
        layer_labels=[f"{HOSTILE} a", f"{HOSTILE} b"],
        head_labels=[f"{HOSTILE} {h}" for h in range(12)],
        model_name=f"{HOSTILE} model",
    ),
    "LogitAttribution": _logit_attribution,
    "LogitLens": _logit_lens,
    "PatchingMap": _patching_map,
    "SkipTrigramTable": lambda: widgets.SkipTrigramTable(_named("attn-only-2l"), k=5, profile_k=2, progress_bar=False),
    "TermImportance": lambda: widgets.TermImportance(_named("attn-only-2l"), f"{HOSTILE} text"),
    "TrainingHistory": lambda: widgets.TrainingHistory.from_model(_named("attn-only-2l-12h")),
    "GrokkingScrubber": lambda: widgets.GrokkingScrubber.from_history(
        grokking.train(7, 0.5, steps=20, d_model=8, n_heads=2, d_head=4, d_mlp=16, checkpoint_every=10),
        title=f"{HOSTILE} run",
    ),
    "AttributionGraph": _attribution_graph,
    "FeatureDashboard": _feature_dashboard,
    "PromptFeatures": _prompt_features,
    "NeuronSparsity": lambda: widgets.NeuronSparsity.from_models(
        [_named("pair-gelu-1l"), _named("pair-solu-1l")], _prompts()[0]
    ),
    "Superposition": lambda: widgets.Superposition(
        probabilities=[1.0], decays=[1.0], steps=20, snapshots=2, phase=False
    ),
}

#: Every text node and attribute value under a view (including open shadow roots).
_TEXT_JS = """
(root) => {
  const out = [];
  const walk = (node) => {
    if (node.nodeType === Node.TEXT_NODE) { out.push(node.textContent); return; }
    if (node.nodeType !== Node.ELEMENT_NODE) return;
    for (const a of node.attributes) out.push(a.value);
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const c of node.childNodes) walk(c);
  };
  walk(root);
  return out.join("\\n");
}
"""


def _raw(text: str) -> list[str]:
    return sorted({f"U+{ord(ch):04X}" for ch in text if is_invisible_format(ord(ch))})


def test_every_widget_class_has_a_hostile_builder() -> None:
    classes = {
        name for name in widgets.__all__
        if isinstance(getattr(widgets, name), type) and issubclass(getattr(widgets, name), CircuitWidget)
    }  # fmt: skip
    assert classes == set(BUILDERS), f"build these with hostile names too: {sorted(classes ^ set(BUILDERS))}"


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    built = [builder() for builder in BUILDERS.values()]  # (the views of session 10 first, in their order)
    path = tmp_path_factory.mktemp("hostile_names") / "hostile_names.html"
    return cw.save_html(built, path), [w._view for w in built]


def test_hostile_names_reach_no_page_text_attribute_or_svg_raw(
    hostile_page: tuple[Path, list[str]], page: Page, page_log: PageLog
) -> None:
    path, views = hostile_page
    page.goto(path.resolve().as_uri())
    seen: dict[str, int] = {}
    for view_name in views:
        nth = seen.get(view_name, 0)
        seen[view_name] = nth + 1
        view = wait_view(page, page_log, view_name, nth=nth)
        wait_for(lambda v=view: len(v.evaluate(_TEXT_JS)) > 20, f"{view_name} drew its text")  # type: ignore[misc]
        text = view.evaluate(_TEXT_JS)
        assert not _raw(text), f"{view_name}: raw {_raw(text)} in the page"
    # Every SVG button of the page clicked in one task: Chromium drops the 11th download a frame asks for within a
    # second (10 of these 22 came without the spacing in lib/export.ts), so the page spaces them and none is lost.
    downloads: list[Download] = []
    page.on("download", lambda d: downloads.append(d))
    n: int = page.evaluate(
        "() => { const b = [...document.querySelectorAll('[data-cw-export=svg]')]; b.forEach((e) => e.click()); return b.length; }"
    )
    assert n >= len(views)

    def all_arrived() -> bool:
        page.wait_for_timeout(50)  # (Playwright delivers the page's events while it is called)
        return len(downloads) >= n

    wait_for(all_arrived, f"{n} SVG downloads", timeout_s=60)
    assert set(views) <= {re.sub(r"^circuitwidgets-([a-z]+).*", r"\1", d.suggested_filename) for d in downloads}
    for download in downloads:
        svg = Path(download.path()).read_text(encoding="utf-8")
        assert not _raw(svg), f"{download.suggested_filename}: raw {_raw(svg)} in its SVG export"
    body = page.evaluate("document.body.innerText")
    assert "\\u202e" in body  # the hostile names were shown, escaped
    assert not _raw(body)
    screenshot(page, "hostile-names")
    assert re.search(r"abc\\u202eexe\.txt\\u200b", body)
