"""The causal views: PatchingMap, LogitLens, LogitAttribution, one line from a causal result; linked to the attention view."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _comm import from_view

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.causal import Sweep
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.widgets import PatchingMap
from circuitwidgets.widgets.core.link import LinkWarning


@pytest.fixture(scope="module")
def induction() -> dict[str, Any]:
    """The docs' induction example on the 12-head model, one prompt (40 tokens), and its sweeps."""
    model = cw.load_pretrained("attn-only-2l-12h")
    gen = torch.Generator().manual_seed(0)
    first, other = torch.randint(1, 2048, (2, 1, 20), generator=gen)
    bos = torch.zeros(1, 1, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, :19]], dim=1)
    corrupted = torch.cat([bos, other, first[:, :19]], dim=1)
    metric = causal.normalised(causal.logit_diff(first[:, 19].tolist(), other[:, 19].tolist()))
    return {
        "model": model,
        "clean": clean,
        "corrupted": corrupted,
        "heads": causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "head")),
        "pos": causal.patch(model, clean, corrupted, metric, site="resid_pre", by=("layer", "pos")),
        "pos_head": causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "pos", "head")),
        "path": causal.path_patch(model, clean, corrupted, metric, sender=(0, 11), via="k"),
    }


def _sweep(dims: tuple[str, ...], shape: tuple[int, ...], **kw: Any) -> Sweep:
    values = np.random.default_rng(0).normal(size=shape)
    names = {"layer": "L", "head": "H", "neuron": "N", "pos": "", "component": "c", "batch": "b"}
    labels = {d: [f"{names.get(d, d)}{i}" for i in range(n)] for d, n in zip(dims, shape, strict=True)}
    for d in ("sender_layer", "sender_head"):
        if d in labels:
            labels[d] = [f"{'L' if d == 'sender_layer' else 'H'}{i}" for i in range(len(labels[d]))]
    return Sweep(values, dims, labels, kw.pop("technique", "activation patching"), kw.pop("metric", "logit"), **kw)


# ---------------------------------------------------------------- PatchingMap


def test_patching_map_of_heads_selects_the_strongest_head_and_states_how_it_was_made(induction: dict[str, Any]) -> None:
    sweep = induction["heads"]
    w = cw.PatchingMap(sweep)
    assert w.values.shape == (1, 2, 12) and w.col_dim == "head" and w.panel_dim == ""
    layer, head = np.unravel_index(np.argmax(np.abs(sweep.values)), sweep.shape)
    assert (w.selected_layer, w.selected_head, w.selected_pos) == (layer, head, -1)
    assert w.selected_value == sweep.values[layer, head]
    assert w.caption == sweep.describe() and "site 'z'" in w.caption and "clean" in w.caption
    assert w.normalised and w.scale_note == "0 = corrupted behaviour, 1 = clean behaviour restored"
    assert (w.n_layers, w.n_heads, w.n_tokens) == (2, 12, 0) and w.model_name == "attn-only-2l-12h"


def test_patching_map_of_positions_carries_both_prompts_and_marks_where_they_differ(induction: dict[str, Any]) -> None:
    w = cw.PatchingMap(induction["pos"])
    model = induction["model"]
    assert w.col_dim == "pos" and w.values.shape == (1, 2, 40) and w.n_tokens == 40 and w.n_heads == 0
    assert w.clean_tokens == model.to_str_tokens(induction["clean"][0])
    assert w.corrupted_tokens == model.to_str_tokens(induction["corrupted"][0])
    assert w.differ == [i for i in range(40) if w.clean_tokens[i] != w.corrupted_tokens[i]]
    assert 1 <= min(w.differ) and max(w.differ) <= 20
    assert w.selected_head == -1 and 0 <= w.selected_pos < 40


def test_patching_map_of_layers_positions_and_heads_is_one_head_at_a_time(induction: dict[str, Any]) -> None:
    sweep = induction["pos_head"]
    w = cw.PatchingMap(sweep)
    assert (w.col_dim, w.panel_dim, w.values.shape) == ("pos", "head", (12, 2, 40))
    np.testing.assert_array_equal(w.values[3], sweep.values[:, :, 3])
    assert w.panel_labels == [f"H{i}" for i in range(12)] and (w.n_heads, w.n_tokens) == (12, 40)
    assert w.selected_value == np.nanmax(np.abs(sweep.values)) * np.sign(w.selected_value)


def test_path_patching_receivers_keep_their_nan_cells(induction: dict[str, Any]) -> None:
    w = cw.PatchingMap(induction["path"])
    assert np.isnan(w.values[0, 0]).all() and np.isfinite(w.values[0, 1]).all()
    assert w.selected_layer == 1 and np.isfinite(w.selected_value)
    page = cw.export.html_page(w)  # NaN travels as binary, never as JSON
    assert "NaN" not in page


def test_every_sender_of_a_path_patching_sweep_is_a_panel() -> None:
    values = np.full((2, 3, 2, 3), np.nan)
    values[0, :, 1] = np.arange(9.0).reshape(3, 3)
    sweep = _sweep(("sender_layer", "sender_head", "layer", "head"), (2, 3, 2, 3), technique="path patching")
    sweep.values = values
    w = PatchingMap(sweep)
    assert w.panel_dim == "sender" and w.panel_labels == ["L0H0 →", "L0H1 →", "L0H2 →"]
    assert (w.selected_panel, w.selected_layer, w.selected_head) == (2, 1, 2)


def test_top_neurons_keeps_the_strongest_neurons_on_request() -> None:
    sweep = _sweep(("layer", "neuron"), (2, 50))
    sweep.values[1, 37] = 9.0
    assert PatchingMap(sweep).values.shape == (1, 2, 50)
    w = PatchingMap(sweep, top_neurons=5)
    assert w.values.shape == (1, 2, 5) and 37 in w.col_index and "N37" in w.col_labels
    assert w.col_index == sorted(w.col_index) and not w._links_heads and not w._links_positions


@pytest.mark.parametrize(
    ("sweep", "kwargs", "error", "match"),
    [
        ("not a sweep", {}, ArgumentTypeError, r"^sweep: expected a circuitwidgets\.causal\.Sweep, got str"),
        (_sweep(("component",), (5,)), {}, ShapeError, r"^sweep: .*got dims \('component',\).*cw\.LogitAttribution"),
        (_sweep(("batch", "layer", "head"), (2, 2, 3)), {}, ShapeError, r"^sweep: .*'batch'.*reduce='mean'"),
        (_sweep(("pos", "head"), (4, 3)), {}, ShapeError, r"^sweep: .*got dims \('pos', 'head'\)"),
        (
            _sweep(("layer", "head"), (2, 3)),
            {"top_neurons": 0},
            ArgumentError,
            r"^top_neurons: expected a positive int",
        ),
        (
            _sweep(("layer", "head"), (2, 3)),
            {"top_neurons": 4},
            ArgumentError,
            r"^top_neurons: the sweep has no neuron",
        ),
    ],
)
def test_a_sweep_a_map_cannot_draw_is_refused_naming_the_argument(
    sweep: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        PatchingMap(sweep, **kwargs)


def test_a_sweep_whose_labels_disagree_with_its_values_is_refused() -> None:
    sweep = _sweep(("layer", "head"), (2, 3))
    sweep.labels["head"] = ["H0"]
    with pytest.raises(ShapeError, match=r"^sweep: dim 'head' has 3 entries"):
        PatchingMap(sweep)


def test_the_view_sets_layer_head_and_position_and_out_of_range_is_refused(induction: dict[str, Any]) -> None:
    w = cw.PatchingMap(induction["pos_head"])
    from_view(w, selected_layer=0, selected_head=4, selected_pos=7)
    assert (w.selected_layer, w.selected_head, w.selected_pos) == (0, 4, 7)
    from_view(w, selected_pos=40)
    assert w.selected_pos == 7
    from_view(w, values=[1, 2])  # data: never from the view
    assert w.values.shape == (12, 2, 40)


# ---------------------------------------------------------------- link


def test_a_patching_map_moves_a_linked_attention_view_to_its_head_and_token(induction: dict[str, Any]) -> None:
    heads, positions = cw.PatchingMap(induction["heads"]), cw.PatchingMap(induction["pos_head"])
    attention = cw.AttentionPatterns(induction["model"], induction["clean"][0])
    group = cw.link(heads, positions, attention)
    assert group.names == ("selected_layer", "selected_head", "selected_dest")
    heads.selected_layer, heads.selected_head = 1, 5
    assert (attention.selected_layer, attention.selected_head) == (1, 5) and positions.selected_head == 5
    positions.selected_pos = 21
    assert attention.selected_dest == 21
    attention.selected_dest = 3
    assert positions.selected_pos == 3 and heads.selected_pos == -1  # (no position axis: not linked)
    assert group.aliases_of(positions) == {"selected_dest": "selected_pos"} and group.names_of(heads) == (
        "selected_layer",
        "selected_head",
    )


def test_a_map_with_no_head_axis_links_positions_only(induction: dict[str, Any]) -> None:
    positions = cw.PatchingMap(induction["pos"])
    attention = cw.AttentionPatterns(induction["model"], induction["clean"][0], selected_layer=0, selected_head=2)
    group = cw.link(positions, attention)
    assert group.names == ("selected_dest",) and (attention.selected_layer, attention.selected_head) == (0, 2)
    positions.selected_layer, positions.selected_pos = 1, 9
    assert attention.selected_dest == 9 and attention.selected_layer == 0


def test_prompts_of_other_lengths_link_heads_only_and_say_so(induction: dict[str, Any]) -> None:
    positions = cw.PatchingMap(induction["pos_head"])
    attention = cw.AttentionPatterns(induction["model"], induction["clean"][0, :12])
    with pytest.warns(LinkWarning, match=r"token positions are not linked: .*PatchingMap 40, AttentionPatterns 12"):
        group = cw.link(positions, attention)
    assert group.names == ("selected_layer", "selected_head") and group.notes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cw.link(cw.PatchingMap(induction["heads"]), cw.AttentionPatterns(induction["model"], "def f(x):"))


def test_views_of_another_model_are_refused_naming_the_argument(induction: dict[str, Any]) -> None:
    gelu = cw.load_pretrained("gelu-2l")
    attention = cw.AttentionPatterns(gelu, "def f(x):")
    with pytest.raises(ArgumentError, match=r"^widgets\[1\]: expected a widget of a model with n_heads=12"):
        cw.link(cw.PatchingMap(induction["heads"]), attention)
    renamed = _sweep(("layer", "head"), (2, 12), model="other-model")
    with pytest.raises(ArgumentError, match=r"^widgets\[1\]: expected a widget of the model 'attn-only-2l-12h'"):
        cw.link(cw.PatchingMap(induction["heads"]), PatchingMap(renamed))


def test_a_saved_page_links_the_map_position_as_the_attention_token(tmp_path: Path, induction: dict[str, Any]) -> None:
    positions = cw.PatchingMap(induction["pos_head"])
    attention = cw.AttentionPatterns(induction["model"], induction["clean"][0])
    cw.link(positions, attention)
    page = cw.save_html([positions, attention], tmp_path / "p.html").read_text(encoding="utf-8")
    blocks = re.findall(r'<div class="cw-widget"([^>]*)>', page)
    assert 'data-cw-link="selected_layer selected_head selected_dest"' in blocks[0]
    assert 'data-cw-link-as="selected_dest=selected_pos"' in blocks[0]
    assert "data-cw-link-as" not in blocks[1] and 'data-cw-link-group="g0"' in blocks[1]


# ---------------------------------------------------------------- LogitLens


@pytest.fixture(scope="module")
def gelu() -> dict[str, Any]:
    model = cw.load_pretrained("gelu-2l")
    ids = model.to_tokens("def add(self, other):\n    return self.value + other.value")
    return {"model": model, "ids": ids, "lens": causal.logit_lens(model, ids, k=4)}


def test_logit_lens_carries_each_cell_top_k_as_text_and_probabilities(gelu: dict[str, Any]) -> None:
    lens = gelu["lens"]
    w = cw.LogitLens(lens)
    rows, _, n, k = lens.top_ids.shape
    assert w.top_ids.shape == w.top_probs.shape == (rows, n, k) and (w.n_rows, w.n_tokens, w.k) == (3, n, 4)
    assert w.layer_labels == ["before L0", "before L1", "final"] and w.tokens == lens.tokens[0]
    assert w.selected_layer == 2 and w.selected_pos == -1 and w.n_layers == 2
    np.testing.assert_allclose(w.top_probs, np.exp(lens.top_log_probs[:, 0]), rtol=1e-6)
    top = gelu["model"].to_str_tokens(torch.tensor(lens.top_ids[1, 0, 5]))
    assert [w.vocab[i] for i in w.top_ids[1, 5]] == top
    w.selected_layer, w.selected_pos = 1, 5
    assert [t for t, _ in w.selected_prediction] == top and w.selected_prediction[0][1] >= w.selected_prediction[1][1]
    same = cw.LogitLens(gelu["model"], gelu["ids"], k=4)
    np.testing.assert_array_equal(same.top_ids, w.top_ids)


def test_logit_lens_bad_input_is_refused_naming_the_argument(gelu: dict[str, Any]) -> None:
    with pytest.raises(ArgumentTypeError, match=r"^lens: expected a circuitwidgets\.causal\.LogitLens result"):
        cw.LogitLens(np.zeros(3))
    with pytest.raises(ArgumentError, match=r"^prompt: expected a prompt index in \[0, 1\), got 1"):
        cw.LogitLens(gelu["lens"], prompt=1)
    with pytest.raises(ArgumentTypeError, match=r"^tokens: expected a text or token ids with a model"):
        cw.LogitLens(gelu["model"])
    w = cw.LogitLens(gelu["lens"])
    from_view(w, selected_layer=3)  # (rows 0..2)
    assert w.selected_layer == 2


def test_logit_lens_links_its_position_to_the_attention_token_but_not_its_rows(gelu: dict[str, Any]) -> None:
    w = cw.LogitLens(gelu["lens"])
    attention = cw.AttentionPatterns(gelu["model"], gelu["ids"], selected_layer=0, selected_head=3)
    group = cw.link(w, attention)
    assert group.names == ("selected_dest",)
    w.selected_layer, w.selected_pos = 0, 4
    assert attention.selected_dest == 4 and (attention.selected_layer, attention.selected_head) == (0, 3)


# ---------------------------------------------------------------- LogitAttribution


def test_logit_attribution_bars_sum_to_the_model_logit(gelu: dict[str, Any]) -> None:
    model, ids = gelu["model"], gelu["ids"]
    answer = int(ids[0, -1])
    for by in ("component", "layer", "head", "neuron"):
        sweep = causal.logit_attribution(model, ids, answer, by=by, pos=-2)
        w = cw.LogitAttribution(sweep, top_neurons=5)
        assert w.by == by and w.logit == pytest.approx(float(sweep.extra["logit"]))
        assert w.total == pytest.approx(w.logit, abs=1e-6), by
        assert w.labels[0] == "embed" and w.labels[-1] == "unembed bias" and len(w.labels) == len(w.values)
    heads = cw.LogitAttribution(causal.logit_attribution(model, ids, answer, by="head", pos=-2))
    assert sum(k == "head" for k in heads.kinds) == 16 and (heads.n_layers, heads.n_heads) == (2, 8)
    i = heads.labels.index(f"L{heads.selected_layer}H{heads.selected_head}")
    assert abs(heads.values[i]) == np.abs(heads.values[np.array(heads.kinds) == "head"]).max()
    neurons = cw.LogitAttribution(causal.logit_attribution(model, ids, answer, by="neuron", pos=-2), top_neurons=5)
    assert neurons.kinds.count("neuron") == 5 and "L1 other neurons" in neurons.labels and not neurons._links_heads


def test_logit_attribution_refuses_what_it_cannot_draw_naming_the_argument(induction: dict[str, Any]) -> None:
    with pytest.raises(ShapeError, match=r"^sweep: expected a direct logit attribution .*cw\.PatchingMap"):
        cw.LogitAttribution(induction["heads"])
    with pytest.raises(ArgumentTypeError, match=r"^sweep: expected a circuitwidgets\.causal\.Sweep, got list"):
        cw.LogitAttribution([1.0, 2.0])
    model = induction["model"]
    by_prompt = causal.logit_attribution(model, induction["clean"].repeat(2, 1), 5, by="head", reduce="none")
    with pytest.raises(ArgumentError, match=r"^prompt: expected a prompt index in \[0, 2\)"):
        cw.LogitAttribution(by_prompt)
    w = cw.LogitAttribution(by_prompt, prompt=1)
    assert w.total == pytest.approx(float(by_prompt.extra["logit"][1]), abs=1e-6)
    with pytest.raises(ArgumentError, match=r"^top_neurons: expected a positive int"):
        cw.LogitAttribution(causal.logit_attribution(model, induction["clean"], 5), top_neurons=0)


def test_a_head_bar_moves_a_linked_attention_view(induction: dict[str, Any]) -> None:
    model = induction["model"]
    w = cw.LogitAttribution(causal.logit_attribution(model, induction["clean"], 5, by="head"))
    attention = cw.AttentionPatterns(model, induction["clean"][0])
    cw.link(w, attention)
    from_view(w, selected_layer=1, selected_head=9)
    assert (attention.selected_layer, attention.selected_head) == (1, 9)
    components = cw.LogitAttribution(causal.logit_attribution(model, induction["clean"], 5))
    with pytest.raises(ArgumentError, match=r"^widgets: expected widgets with a selection in common"):
        cw.link(components, cw.PatchingMap(induction["pos"]))
