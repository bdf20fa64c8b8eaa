"""The report's features part (``circuitwidgets.report.features``) on a tiny random model with MLPs and random
transcoders: which dictionary it shows, its views on the page's prompt, the graph's induction circuit pinned and
grouped, and text whose numbers are the computed ones; the CLI's ``--dictionaries`` is checked before any work."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from test_features_examples import mlp_model

import circuitwidgets as cw
from circuitwidgets.causal.induction import induction_prompts, induction_test
from circuitwidgets.cli import main
from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.model import CircuitModel
from circuitwidgets.report.features import (
    GROUP_SIZE,
    _answer_source,
    features_sections,
    shown_dictionary,
    transcoders_of,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    return mlp_model(seed=3)


@pytest.fixture(scope="module")
def dictionaries() -> dict[str, Dictionary]:
    tc = [Dictionary.random("transcoder", "topk", 12, 32, layer=i, k=4, dtype=torch.float64, seed=i) for i in (0, 1)]
    sae = Dictionary.random("sae", "topk", 12, 16, layer=0, in_site="resid_post", k=3, dtype=torch.float64, seed=5)
    return {"L0.tc": tc[0], "L1.tc": tc[1], "L0.resid_post": sae}


def test_the_last_layers_transcoder_is_shown_and_the_graph_needs_one_per_layer(
    model: CircuitModel, dictionaries: dict[str, Dictionary]
) -> None:
    assert shown_dictionary(dictionaries) == "L1.tc"
    assert shown_dictionary({"L0.resid_post": dictionaries["L0.resid_post"]}) == "L0.resid_post"
    assert [d.layer for d in transcoders_of(model, dictionaries) or []] == [0, 1]
    assert transcoders_of(model, {"L1.tc": dictionaries["L1.tc"]}) is None
    with pytest.raises(ArgumentError, match="dictionaries"):
        shown_dictionary({})
    # the answer's token in the first copy: the one after the earlier occurrence of the last token
    assert _answer_source(torch.tensor([[0, 5, 6, 7, 5, 6, 7]]), 3) == 4
    assert _answer_source(torch.tensor([[0, 9, 5, 6, 1, 5]]), 7) == 3


def test_the_features_part_shows_the_prompt_the_dashboard_and_the_pinned_circuit(
    model: CircuitModel, dictionaries: dict[str, Dictionary]
) -> None:
    test = induction_test(model, induction_prompts(model, half=8, n_prompts=2))
    sections = features_sections(model, test, dictionaries)
    assert [type(w).__name__ for _, _, w in sections] == ["PromptFeatures", "FeatureDashboard", "AttributionGraph"]
    (_, prompt_text, prompt), (_, _, dashboard), (_, graph_text, graph) = sections
    tokens = test.prompts.clean[:1]
    last = tokens.shape[1] - 1
    assert prompt.tokens == [str(s) for s in model.to_str_tokens(tokens[0], prepend_bos=False)]
    # the dense units are the dashboard's, and the text names the strongest features at the last token
    assert list(prompt.dense) == [
        u for u in range(dashboard.n_units) if float(dashboard.density[u]) > prompt.dense_share
    ]
    strongest = prompt.features_at(last)[:3]
    for unit, value in strongest:
        assert f"<b>{unit}</b> ({value:.2f}" in prompt_text
    if strongest:
        assert prompt.selected_feature == dashboard.selected_feature == int(strongest[0][0].split("/")[-1])
    # the circuit: the first copy's and the last token's strongest nodes grouped, the answer's logit pinned if there
    groups = {g["label"]: g["nodes"] for g in graph.supernodes}
    source = _answer_source(tokens, test.prompts.half)
    assert set(groups) <= {f"first copy, pos {source}", f"last token, pos {last}"} and groups
    for label, rows in groups.items():
        assert 0 < len(rows) <= GROUP_SIZE
        assert all(int(graph.node_pos[r]) == (source if label.startswith("first") else last) for r in rows)
    answer = int(test.prompts.answer[0])
    logit_rows = [i for i, k in enumerate(graph.node_kind) if k == "logit" and int(graph.node_index[i]) == answer]
    assert bool(logit_rows) == bool(set(logit_rows) & set(graph.pinned))
    scores = re.search(r"Replacement ([\d.]+), completeness ([\d.]+)", graph_text)
    assert scores and graph.site_layer == 1 and graph.n_site_features == 32
    assert np.isfinite(float(scores.group(1))) and np.isfinite(float(scores.group(2)))


def test_the_cli_checks_dictionaries_and_names_model_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report was computed")

    monkeypatch.setattr("circuitwidgets.report.write_report", fail)
    assert main(["report", "--dictionaries", str(tmp_path / "none"), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("circuitwidgets report: error: --dictionaries: expected a directory of dictionary"), err
    assert main(["report", "--model", "no-such-model", "-o", str(tmp_path / "r.html")]) == 2
    assert "error: --model: expected one of the shipped models" in capsys.readouterr().err
    assert "gelu-2l" in cw.list_pretrained()
