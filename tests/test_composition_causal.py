"""Causal beside weights: CompositionMap's title and note, its map of path-patching sweeps, and
CompositionVsPatching (composition score against path-patching effect, per pair of heads)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import traitlets

import circuitwidgets as cw
from circuitwidgets import causal, circuits
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.widgets.path_composition import corruption_text, path_patching_scores

INDUCTION = [(1, 5), (1, 7), (1, 9)]


@pytest.fixture(scope="module")
def corruption_b() -> dict[str, Any]:
    """Notebook 04's corruption B on the 12-head model: only the earlier copy of the last token replaced,
    so the previous-token head L0H11 carries what the induction heads' keys need. Path patching via q, k, v."""
    model = cw.load_pretrained("attn-only-2l-12h")
    gen = torch.Generator().manual_seed(0)
    B, n = 8, 20
    first = torch.randint(1, 2048, (B, n), generator=gen)
    other = torch.randint(1, 2048, (B, n), generator=gen)
    bos = torch.zeros(B, 1, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, : n - 1]], dim=1)
    first_b = first.clone()
    first_b[:, n - 2] = other[:, 0]
    corrupted = torch.cat([bos, first_b, first[:, : n - 1]], dim=1)
    metric = causal.normalised(causal.logit_diff(first[:, n - 1].tolist(), other[:, 1].tolist()))
    sweeps = {via: causal.path_patch(model, clean, corrupted, metric, via=via) for via in "qkv"}
    return {"model": model, "sweeps": sweeps, "metric": metric, "clean": clean, "corrupted": corrupted}


def _scores(L: int = 2, H: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(L, H, L, H))


# ------------------------------------------------------------ title and note


def test_from_scores_takes_a_title_and_a_note() -> None:
    q, k, v = _scores(seed=0), _scores(seed=1), _scores(seed=2)
    w = cw.CompositionMap.from_scores(q, k, v, title="Path patching: logit", note="how it was made")
    assert (w.title, w.note) == ("Path patching: logit", "how it was made")
    plain = cw.CompositionMap.from_scores(q, k, v)
    assert (plain.title, plain.note) == ("", "")  # (the view says "Composition between heads")


@pytest.mark.parametrize("name", ["title", "note", "model_name"])
def test_from_scores_refuses_text_that_is_not_a_string_by_name(name: str) -> None:
    with pytest.raises(ArgumentTypeError, match=rf"^{name}: expected a string or None, got int$"):
        cw.CompositionMap.from_scores(_scores(), _scores(), _scores(), **{name: 3})


def test_the_title_and_note_traits_check_their_type() -> None:
    w = cw.CompositionMap.from_scores(_scores(), _scores(), _scores())
    with pytest.raises(traitlets.TraitError, match=r"'title' trait of .*CompositionMap"):
        w.title = 3  # type: ignore[assignment]
    with pytest.raises(traitlets.TraitError, match=r"'note' trait of .*CompositionMap"):
        w.note = ["a"]  # type: ignore[assignment]


# ------------------------------------------------------------ a path-patching map


def test_a_path_patching_map_puts_each_via_in_its_kind_and_says_how_it_was_made(corruption_b: dict[str, Any]) -> None:
    k = corruption_b["sweeps"]["k"]
    w = cw.CompositionMap.from_path_patching(k)
    assert w.scores.shape == (3, 2, 12, 2, 12) and w.kind == "K" and w.baseline_value == 0.0
    np.testing.assert_allclose(w.scores[1, 0, :, 1], k.values[0, :, 1], rtol=1e-6)
    assert np.isnan(w.scores[[0, 2]]).all()  # q and v not run
    assert np.isnan(w.scores[1, 1]).all() and np.isnan(w.scores[1, :, :, 0]).all()  # no earlier head
    assert w.model_name == "attn-only-2l-12h"
    assert w.title == "Path patching: normalised logit_diff(pos=-1)"
    assert "composition" not in w.title.lower()
    for said in (
        "metric normalised logit_diff(pos=-1)",
        f"{k.clean_value:.4g} on the clean run and {k.corrupted_value:.4g} on the corrupted run",
        "0 = corrupted behaviour, 1 = clean behaviour restored",
        "8 prompt pairs of 40 tokens, the corrupted prompts differ at position 19",
        "the receiver's) k input only",
        "Convention: model has no norms.",
        "Not run: via q, v",
    ):
        assert said in w.note, said


def test_sweeps_of_every_via_fill_every_kind_in_any_order(corruption_b: dict[str, Any]) -> None:
    s = corruption_b["sweeps"]
    w = cw.CompositionMap.from_path_patching(s["v"], s["q"], s["k"])
    for kind, via in enumerate("qkv"):
        np.testing.assert_allclose(w.scores[kind, 0, :, 1], s[via].values[0, :, 1], rtol=1e-6)
    assert w.kind == "all" and "Not run" not in w.note and "q / k / v input only" in w.note
    # the title and note given win over the ones made from the sweeps
    mine = cw.CompositionMap.from_path_patching(s["k"], title="Mine", note="My note")
    assert (mine.title, mine.note) == ("Mine", "My note")


def test_a_path_patching_map_refuses_other_results_by_name(corruption_b: dict[str, Any]) -> None:
    s, model = corruption_b["sweeps"], corruption_b["model"]
    one_sender = causal.path_patch(
        model, corruption_b["clean"], corruption_b["corrupted"], corruption_b["metric"], (0, 11)
    )
    heads = causal.patch(
        model, corruption_b["clean"], corruption_b["corrupted"], corruption_b["metric"], "z", ("layer", "head")
    )
    with pytest.raises(ArgumentError, match=r"^sweeps: expected at least one path-patching Sweep"):
        cw.CompositionMap.from_path_patching()
    with pytest.raises(ArgumentTypeError, match=r"^sweeps\[0\]: expected a circuitwidgets.causal.Sweep, got ndarray"):
        cw.CompositionMap.from_path_patching(s["k"].values)  # type: ignore[arg-type]
    with pytest.raises(
        ShapeError, match=r"^sweeps\[0\]: expected a path-patching sweep over every sender .*sender=None"
    ):
        cw.CompositionMap.from_path_patching(one_sender)
    with pytest.raises(ArgumentError, match=r"^sweeps\[1\]: expected a path-patching Sweep .*'activation patching'"):
        cw.CompositionMap.from_path_patching(s["k"], heads)
    with pytest.raises(ArgumentError, match=r"^sweeps\[1\]: expected one sweep per via, got a second via 'k'"):
        cw.CompositionMap.from_path_patching(s["k"], s["k"])
    other_metric = dataclasses.replace(s["q"], metric="logit of ' the'")
    with pytest.raises(ArgumentError, match=r"^sweeps\[1\]: expected the metric of sweeps\[0\]"):
        cw.CompositionMap.from_path_patching(s["k"], other_metric)
    no_via = dataclasses.replace(s["q"], site="z", extra={})
    with pytest.raises(ArgumentError, match=r"^sweeps\[0\]: expected a receiver input 'q', 'k' or 'v'.*got 'z'"):
        cw.CompositionMap.from_path_patching(no_via)


def test_a_corruption_is_described_from_the_prompts(corruption_b: dict[str, Any]) -> None:
    k = corruption_b["sweeps"]["k"]
    text = corruption_text(k)
    clean, corrupted = k.prompts["clean"][0][19], k.prompts["corrupted"][0][19]
    assert text == (
        f"8 prompt pairs of 40 tokens, the corrupted prompts differ at position 19 (first pair: {clean!r} → {corrupted!r})"
    )
    assert corruption_text(dataclasses.replace(k, prompts={})) == ""
    path = path_patching_scores([k])
    assert path.vias == ("k",) and path.metric == k.metric and path.scores.dtype == np.float32


# ------------------------------------------------------------ composition against path patching


def test_the_induction_heads_sit_top_right_of_the_k_plot(corruption_b: dict[str, Any]) -> None:
    """High K-composition from the previous-token head L0H11 and a high path-patching effect via k."""
    model, s = corruption_b["model"], corruption_b["sweeps"]
    w = cw.CompositionVsPatching(model, s["k"])
    assert w.kind == "K" and w.selected_edge == [0, 11, 1, 5] and (w.selected_layer, w.selected_head) == (1, 5)
    pairs = w.pairs()
    assert len(pairs) == 12 * 12
    by_effect = sorted(pairs, key=lambda p: -p.patching)
    assert sorted(p.later for p in by_effect[:3]) == INDUCTION and {p.earlier for p in by_effect[:3]} == {(0, 11)}
    for p in by_effect[:3]:
        assert p.composition > 0.1 and p.patching > 0.2, p  # measured: K-comp 0.131–0.134, effect 0.23–0.35
    assert all(p.patching < 0.05 for p in by_effect[3:])
    assert max(p.composition for p in by_effect[3:]) < 0.05
    assert by_effect[0].name == "L0H11 → L1H5"
    # the x axis is the weights' own score minus the baseline, the y axis the sweep's value
    kcomp = circuits.composition_scores(model, kind="K", baseline=True)
    top = by_effect[0]
    np.testing.assert_allclose(
        top.composition, kcomp[0, 11, 1, 5], atol=2e-3
    )  # (baselines: separate Monte-Carlo draws)
    assert top.patching == pytest.approx(s["k"].values[0, 11, 1, 5], rel=1e-6)
    assert 0.6 < w.correlation() < 0.95  # (0.77: the three induction pairs carry it)
    with pytest.raises(ArgumentError, match=r"^kind: expected one of \('Q', 'K', 'V'\), got 'X'"):
        w.pairs("X")
    assert w.pairs("V") == [] and np.isnan(w.correlation("V"))  # via v not run


def test_the_plot_of_every_via_and_its_kind_switch(corruption_b: dict[str, Any]) -> None:
    s = corruption_b["sweeps"]
    w = cw.CompositionVsPatching(corruption_b["model"], s["q"], s["k"], s["v"])
    assert {k: len(w.pairs(k)) for k in "QKV"} == {"Q": 144, "K": 144, "V": 144}
    assert abs(w.correlation("Q")) < abs(w.correlation("K"))
    w.kind = "V"
    assert w.pairs() == w.pairs("V")


def test_the_plot_refuses_wrong_arguments_by_name(corruption_b: dict[str, Any], random_model: Any) -> None:
    model, k = corruption_b["model"], corruption_b["sweeps"]["k"]
    with pytest.raises(ArgumentError, match=r"^sweeps: expected at least one path-patching Sweep after the model"):
        cw.CompositionVsPatching(model)
    with pytest.raises(ShapeError, match=r"^sweeps\[0\]: expected path patching of 'random-2l-seed0'"):
        cw.CompositionVsPatching(random_model(), k)
    with pytest.raises(ArgumentError, match=r"^sweeps\[0\]: expected a sweep of the model 'attn-only-2l-12h'"):
        cw.CompositionVsPatching(model, dataclasses.replace(k, model="other"))
    with pytest.raises(ShapeError, match=r"^sweeps\[0\]: expected a path-patching sweep over every sender"):
        cw.CompositionVsPatching(
            model,
            causal.path_patch(model, corruption_b["clean"], corruption_b["corrupted"], corruption_b["metric"], (0, 11)),
        )


def test_from_scores_checks_its_arrays_and_selects_the_strongest_effect() -> None:
    L, H = 2, 3
    comp = np.random.default_rng(0).uniform(size=(3, L, H, L, H))
    path = np.full((3, L, H, L, H), np.nan)
    path[1, 0, :, 1] = np.arange(H * H).reshape(H, H) / 10  # strongest: L0H2 → L1H2
    w = cw.CompositionVsPatching.from_scores(
        comp, torch.tensor(path), baseline=0.1, metric="m", note="n", model_name="toy"
    )
    assert (w.kind, w.selected_edge, w.metric, w.note, w.model_name) == ("K", [0, 2, 1, 2], "m", "n", "toy")
    assert len(w.pairs()) == H * H and w.pairs("Q") == []
    assert w.pairs()[0].composition == pytest.approx(comp[1, 0, 0, 1, 0] - 0.1, rel=1e-6)
    assert np.isnan(w.composition[:, 1]).all()  # a later head is never earlier
    with pytest.raises(ShapeError, match=r"^composition: expected scores \[3, n_layers"):
        cw.CompositionVsPatching.from_scores(comp[0], path)
    with pytest.raises(ShapeError, match=r"^patching: expected shape \[3, 2, 3, 2, 3\] like composition"):
        cw.CompositionVsPatching.from_scores(comp, np.zeros((3, 2, 2, 2, 2)))
    with pytest.raises(ArgumentError, match=r"^patching: expected finite scores .*got infinities"):
        cw.CompositionVsPatching.from_scores(comp, np.where(np.isnan(path), np.inf, path))
    with pytest.raises(ArgumentTypeError, match=r"^composition: expected scores .*got an array of dtype <U3"):
        cw.CompositionVsPatching.from_scores("abc", path)  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match=r"^baseline: expected a finite number, got True"):
        cw.CompositionVsPatching.from_scores(comp, path, baseline=True)
    with pytest.raises(ArgumentTypeError, match=r"^metric: expected a string or None, got int"):
        cw.CompositionVsPatching.from_scores(comp, path, metric=1)  # type: ignore[arg-type]
    with pytest.raises(
        traitlets.TraitError, match=r"'patching' trait of CompositionVsPatching expected shape \[3, 2, 3, 2, 3\]"
    ):
        w.patching = np.zeros((3, 3, 3, 3, 3), dtype=np.float32)
    with pytest.raises(
        traitlets.TraitError, match=r"'selected_edge' trait of CompositionVsPatching expected an earlier head"
    ):
        w.selected_edge = [1, 0, 0, 0]
    # a path-patching map's finite-score check does not apply to a kind not run
    with pytest.raises(NonFiniteError, match=r"^q: expected finite scores"):
        cw.CompositionMap.from_scores(path[0], path[1], path[2])


def test_the_plot_links_its_later_head_and_exports(corruption_b: dict[str, Any], tmp_path: Path) -> None:
    model, k = corruption_b["model"], corruption_b["sweeps"]["k"]
    plot = cw.CompositionVsPatching(model, k)
    causal_map = cw.CompositionMap.from_path_patching(k)
    weights = cw.CompositionMap(model, n_samples=10)
    cw.link(plot, causal_map, weights)
    plot.select_pair((0, 11), (1, 9))
    assert plot.selected_edge == [0, 11, 1, 9]
    assert (
        (causal_map.selected_layer, causal_map.selected_head)
        == (1, 9)
        == (weights.selected_layer, weights.selected_head)
    )
    page = cw.save_html([weights, causal_map, plot], tmp_path / "page.html").read_text()
    assert '"compvspatching"' in page and "Path patching: normalised logit_diff(pos=-1)" in page
