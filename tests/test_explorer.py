"""CircuitExplorer: all views' data in one widget, one shared head selection, the paper's heads where they are."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from _comm import Recorder, from_view
from conftest import make_random_model
from ipywidgets.widgets.widget import _remove_buffers

import circuitwidgets
from circuitwidgets import circuits
from circuitwidgets.export import html_page
from circuitwidgets.model import CircuitModel
from circuitwidgets.tokenizer import VocabTokenizer
from circuitwidgets.widgets import CircuitExplorer, CompositionMap, EigenScatter
from circuitwidgets.widgets.eigen.widget import DETECTORS, INDUCTION_MIN
from circuitwidgets.widgets.term_importance import term_importance_data

# --- helpers -------------------------------------------------------------------


def longest_float_list(value: Any) -> int:
    if isinstance(value, dict):
        return max((longest_float_list(v) for v in value.values()), default=0)
    if isinstance(value, list):
        own = len(value) if value and all(isinstance(v, float) for v in value) else 0
        return max([own, *(longest_float_list(v) for v in value)])
    return 0


WORDS = ["<bos>", "<script>alert(1)</script>", "</script>", "&nbsp;", "`${x}`", "\u202eevil", "a", "b", "c", "d"]


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    base = make_random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=40, n_ctx=48, seed=5)
    vocab = WORDS + [f"w{i}" for i in range(40 - len(WORDS))]
    return CircuitModel(
        base.cfg, base.weights(), tokenizer=VocabTokenizer(vocab, bos_token_id=0), name="random-explorer"
    )


TEXT = " ".join([*WORDS[1:], "w1", "w2", "w3", *WORDS[1:], "w1", "w2", "w3"])


@pytest.fixture(scope="module")
def explorer(model: CircuitModel) -> CircuitExplorer:
    return CircuitExplorer(model, TEXT, k=4, profile_k=3)


@pytest.fixture(scope="module")
def lazy(model: CircuitModel) -> CircuitExplorer:
    """An explorer whose skip-trigrams are precomputed for head (0, 0) only."""
    return CircuitExplorer(model, TEXT, k=3, profile_k=2, trigram_heads=[(0, 0)])


@pytest.fixture
def fresh(lazy: CircuitExplorer) -> CircuitExplorer:
    """``lazy`` with its selections back at their defaults."""
    with lazy.hold_trait_notifications():
        lazy.selected_layer, lazy.selected_head = 0, 0
        lazy.trigram_source_token, lazy.trigram_selected_row, lazy.trigram_source_message = -1, -1, ""
        lazy.composition_selected_edge, lazy.composition_edge_kind = [], ""
    return lazy


# --- data ----------------------------------------------------------------------


def test_explorer_holds_the_data_of_every_view(model: CircuitModel, explorer: CircuitExplorer) -> None:
    eigen = EigenScatter(model)
    np.testing.assert_array_equal(explorer.eigen_data["scores"], eigen.scores)
    np.testing.assert_array_equal(explorer.eigen_data["detectors"], eigen.detectors)
    composition = CompositionMap(model)
    np.testing.assert_array_equal(explorer.composition_data["scores"], composition.scores)
    assert explorer.composition_data["baseline_value"] == composition.baseline_value
    terms = term_importance_data(model, TEXT)
    np.testing.assert_allclose(explorer.terms_data["marginal"], terms["marginal"])
    assert explorer.attention_data["tokens"] == model.to_str_tokens(TEXT)
    assert explorer.trigram_data["ready"].all()
    # the text's tokens are precomputed skip-trigram sources of every head
    text_ids = {int(t) for t in model.to_tokens(TEXT)[0] if int(t) != 0}
    stored = {
        int(explorer.trigram_data["token_ids"][i]) for i in explorer.trigram_data["profile_sources"][1, 2] if i >= 0
    }
    assert text_ids <= stored


def test_explorer_selects_the_strongest_induction_head_by_default_else_the_strongest_copying_head(
    model: CircuitModel, explorer: CircuitExplorer
) -> None:
    induction = circuits.head_scores(model, "induction")
    # a head counts as an induction head from INDUCTION_MIN; this random model may have none,
    # and then the strongest OV copying head opens (never a head picked by noise)
    scores = induction if induction.max() >= INDUCTION_MIN else circuits.copying_scores(model, "ov", "eigen")
    assert explorer.selected == tuple(int(i) for i in np.unravel_index(np.nanargmax(scores), scores.shape))


def test_explorer_state_travels_as_binary_buffers(explorer: CircuitExplorer) -> None:
    state, paths, _buffers = _remove_buffers(explorer.get_state())
    assert ["eigen_data", "scores", "view"] in paths
    assert ["composition_data", "scores", "view"] in paths
    assert ["trigram_data", "rows", "view"] in paths
    assert ["attention_data", "patterns", "view"] in paths
    assert longest_float_list(state) == 0
    json.dumps({k: v for k, v in state.items() if k != "_esm"})
    sizes = explorer.state_sizes()
    assert set(sizes) == {
        "eigen_data",
        "trigram_data",
        "composition_data",
        "terms_data",
        "attention_data",
        "heads_data",
    }
    assert sum(sizes.values()) < 200_000


def test_explorer_tokens_stay_text_in_exported_html(explorer: CircuitExplorer) -> None:
    page = html_page(explorer)
    assert "<script>alert(1)" not in page
    assert page.count("</script>") == page.count("<script")  # no token closes a script element


# --- the shared selection --------------------------------------------------------


def test_selecting_a_head_from_any_view_is_one_kernel_selection(model: CircuitModel) -> None:
    fresh = CircuitExplorer(model, TEXT, k=3, profile_k=2, trigram_heads=[(0, 0)], selected_layer=0, selected_head=0)
    seen: list[tuple[str, Any]] = []
    fresh.observe(lambda c: seen.append((c["name"], c["new"])), names=["selected_layer", "selected_head"])
    from_view(fresh, selected_layer=1, selected_head=1)
    assert fresh.selected == (1, 1)
    assert sorted(seen) == [("selected_head", 1), ("selected_layer", 1)]
    # the skip-trigrams of a head not precomputed are computed for the kernel's selection
    assert fresh.trigram_data["ready"][1, 1] == 1
    assert fresh.trigram_n_rows > 0


def test_composition_edge_click_selects_both_heads(fresh: CircuitExplorer) -> None:
    from_view(
        fresh, composition_selected_edge=[0, 2, 1, 0], composition_edge_kind="K", selected_layer=1, selected_head=0
    )
    assert fresh.composition_selected_edge == [0, 2, 1, 0]
    assert fresh.selected == (1, 0)


def test_trigram_row_resets_when_the_head_changes(fresh: CircuitExplorer) -> None:
    fresh.selected_layer, fresh.selected_head = 0, 0
    from_view(fresh, trigram_selected_row=1)
    assert fresh.trigram_selected_row == 1
    from_view(fresh, selected_head=1)
    assert fresh.trigram_selected_row == -1


def test_trigram_search_runs_in_the_kernel(model: CircuitModel, fresh: CircuitExplorer) -> None:
    fresh.selected_layer, fresh.selected_head = 0, 0
    from_view(fresh, trigram_source_query="w20")
    assert fresh.trigram_source_token == model.tokenizer.encode("w20")[0]
    assert fresh.trigram_source_query == "" and fresh.trigram_source_message == ""
    expected = circuits.skip_trigrams(model, 0, 0, k=2, source="w20")
    assert fresh.trigram_n_rows == len(expected)
    from_view(fresh, trigram_source_query="no such token")
    assert "not" in fresh.trigram_source_message


@pytest.mark.parametrize(
    "bad",
    [
        {"selected_layer": 2},
        {"selected_head": -1},
        {"selected_head": 1.5},
        {"eigen_method": "magic"},
        {"eigen_qk_circuit": "ov"},
        {"trigram_source_token": 10_000},
        {"trigram_selected_row": 10_000},
        {"composition_selected_edge": [1, 0, 0, 0]},
        {"composition_kind": "X"},
        {"composition_n_edges": 0},
        {"terms_selected_order": 9},
        {"attention_selected_dest": 999},
        {"attention_pattern_kind": "neither"},
        {"eigen_data": {}},
        {"selected_layer": 1, "attention_selected_src": 999},
    ],
)
def test_invalid_values_from_the_view_are_rejected_and_resynchronised(
    fresh: CircuitExplorer, monkeypatch: pytest.MonkeyPatch, bad: dict[str, Any]
) -> None:
    keys = list(bad)
    before = {k: getattr(fresh, k) for k in keys}
    rec = Recorder()
    monkeypatch.setattr(fresh, "_send", rec)
    from_view(fresh, **bad)
    after = {k: getattr(fresh, k) for k in keys}
    assert after.keys() == before.keys()
    for k in keys:
        assert after[k] is before[k] or after[k] == before[k]
    assert rec.updates(), "the view must be told the values the kernel keeps"


def test_explorer_refuses_bad_arguments(model: CircuitModel) -> None:
    with pytest.raises(TypeError, match="CircuitModel"):
        CircuitExplorer("gpt2", "text")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="text"):
        CircuitExplorer(model, "")


def test_one_layer_explorer_has_no_composition() -> None:
    small = make_random_model(n_layers=1, n_heads=2, d_vocab=20)
    w = CircuitExplorer(small, "<1> <2> <3> <1> <2> <3>", k=2, profile_k=2)
    assert w.eigen_qk_circuit == "qk"
    assert np.isnan(w.composition_data["scores"]).all()


# --- the shipped two-layer model (the paper's claims, read through the widget) ------

SHIPPED = "attn-only-2l"
needs_shipped = pytest.mark.skipif(
    SHIPPED not in circuitwidgets.list_pretrained(),
    reason=f"the shipped model {SHIPPED!r} is not in circuitwidgets/pretrained yet (train it with `circuitwidgets train`)",
)

CODE = '''def parse(self, text):
    """Split text into tokens."""
    tokens = []
    for line in text.splitlines():
        tokens.extend(line.split())
    return tokens
'''


@pytest.fixture(scope="module")
def shipped() -> tuple[CircuitModel, CircuitExplorer]:
    model = circuitwidgets.load_pretrained(SHIPPED)
    return model, CircuitExplorer(model, CODE + CODE)


def _heads(scores: np.ndarray, threshold: float) -> set[tuple[int, int]]:
    return {(int(l), int(h)) for l, h in zip(*np.nonzero(scores > threshold), strict=True)}


@needs_shipped
def test_previous_token_head_is_in_layer_0(shipped: tuple[CircuitModel, CircuitExplorer]) -> None:
    model, w = shipped
    prev = w.eigen_data["detectors"][DETECTORS.index("previous_token")]
    layer, head = np.unravel_index(int(np.argmax(prev)), prev.shape)
    reference = circuits.head_scores(model, "previous_token")
    assert (layer, head) == np.unravel_index(int(np.argmax(reference)), reference.shape)
    assert layer == 0 and prev[layer, head] > 0.5


@needs_shipped
def test_induction_heads_are_in_layer_1_and_selected_by_default(shipped: tuple[CircuitModel, CircuitExplorer]) -> None:
    model, w = shipped
    induction = w.eigen_data["detectors"][DETECTORS.index("induction")]
    found = _heads(induction, 0.2)
    assert found, "no head attends to the token after the previous copy"
    assert found == _heads(circuits.head_scores(model, "induction").astype(np.float32), 0.2)
    assert {layer for layer, _ in found} == {1}
    assert w.selected in found


@needs_shipped
def test_induction_heads_sit_in_the_copying_and_matching_corner(shipped: tuple[CircuitModel, CircuitExplorer]) -> None:
    _, w = shipped
    methods = w.eigen_data["methods"]
    scores = w.eigen_data["scores"][methods.index("eigen")]  # [circuit, L, H]
    induction = w.eigen_data["detectors"][DETECTORS.index("induction")]
    prev = w.eigen_data["detectors"][DETECTORS.index("previous_token")]
    prev_head = tuple(int(i) for i in np.unravel_index(int(np.argmax(prev)), prev.shape))
    for layer, head in _heads(induction, 0.2):
        assert scores[0, layer, head] > 0.5, "an induction head copies (OV eigenvalues mostly positive)"
        assert scores[2, layer, head] > 0.5, "its K-composition term matches tokens with themselves"
        assert tuple(w.eigen_data["kcomp_source"][layer, head]) == prev_head
        kcomp = w.composition_data["scores"][1, :, :, layer, head]
        assert np.unravel_index(int(np.nanargmax(kcomp[0])), kcomp[0].shape) == (prev_head[1],)


@needs_shipped
def test_shipped_explorer_state_is_small(shipped: tuple[CircuitModel, CircuitExplorer]) -> None:
    _, w = shipped
    sizes = w.state_sizes()
    print("attn-only-2l explorer state bytes:", sizes, "total", sum(sizes.values()))
    assert sum(sizes.values()) < 1_000_000
    assert w.terms_data["marginal"][1] > 0


@pytest.mark.slow
def test_state_of_a_50k_vocabulary_model_is_small() -> None:
    """Skip-trigram state grows with the rows and sources shown, not with the vocabulary."""
    from circuitwidgets.widgets import SkipTrigramTable

    torch.manual_seed(0)
    big = make_random_model(n_layers=1, n_heads=1, d_model=32, d_head=8, d_vocab=50_257, n_ctx=16, dtype=torch.float32)
    w = SkipTrigramTable(big, k=20, profile_k=8)
    _, _, buffers = _remove_buffers(w.get_state())
    total = sum(memoryview(b).nbytes for b in buffers) + len(json.dumps(w.token_strs))
    assert len(w.token_strs) < 1000 and total < 100_000
