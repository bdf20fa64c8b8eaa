"""Weight-space widgets: EigenScatter, SkipTrigramTable, CompositionMap, TermImportance.

Each widget's data is checked against the engine, its selections are checked
both ways (the kernel validates what the view sends, keeps the last valid
value and resynchronises the view), and its state is checked for size and
transport (binary buffers, no vocabulary-sized lists).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from _comm import Recorder, from_view
from conftest import make_random_model
from ipywidgets.widgets.widget import _remove_buffers

from circuitwidgets import circuits
from circuitwidgets.circuits.copying import eigen_score
from circuitwidgets.export import html_page
from circuitwidgets.model import CircuitModel
from circuitwidgets.tokenizer import VocabTokenizer
from circuitwidgets.widgets import CompositionMap, EigenScatter, SkipTrigramTable, TermImportance
from circuitwidgets.widgets.eigen.widget import CIRCUITS, DETECTORS, eigen_scatter_data
from circuitwidgets.widgets.skip_trigrams.widget import ORIGIN_OV, ORIGIN_QK

# --- helpers -------------------------------------------------------------------


def assert_rejected(widget: Any, monkeypatch: pytest.MonkeyPatch, **bad: Any) -> None:
    """The update is refused as a whole, the traits keep their values, and the view is told them."""
    keys = list(bad)
    before = {k: getattr(widget, k) for k in keys}
    rec = Recorder()
    monkeypatch.setattr(widget, "_send", rec)
    fired: list[Any] = []
    widget.observe(fired.append, names=keys)
    from_view(widget, **bad)
    widget.unobserve(fired.append, names=keys)
    assert {k: getattr(widget, k) for k in keys} == before
    assert fired == []
    assert rec.updates(), "the view must be resynchronised"
    assert {k: rec.updates()[-1][k] for k in keys} == before


def state_bytes(widget: Any) -> tuple[int, int]:
    """(binary buffer bytes, JSON bytes) of a widget's state as sent to the view (without the bundle)."""
    state, _, buffers = _remove_buffers(widget.get_state())
    state.pop("_esm", None)
    return sum(memoryview(b).nbytes for b in buffers), len(json.dumps(state).encode())


def longest_float_list(value: Any) -> int:
    """Length of the longest JSON list of floats in a state (big arrays must be buffers)."""
    if isinstance(value, dict):
        return max((longest_float_list(v) for v in value.values()), default=0)
    if isinstance(value, list):
        own = len(value) if value and all(isinstance(v, float) for v in value) else 0
        return max([own, *(longest_float_list(v) for v in value)])
    return 0


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    return make_random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=50, n_ctx=32)


HOSTILE = [
    "<bos>",
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</script>",
    "&nbsp;",
    " the",
    "\n",
    "`${x}`",
]


@pytest.fixture(scope="module")
def hostile_model() -> CircuitModel:
    base = make_random_model(n_layers=2, n_heads=2, d_model=16, d_head=4, d_vocab=40, n_ctx=32, seed=3)
    vocab = HOSTILE + [f"w{i}" for i in range(40 - len(HOSTILE))]
    return CircuitModel(base.cfg, base.weights(), tokenizer=VocabTokenizer(vocab, bos_token_id=0), name="hostile")


@pytest.fixture(scope="module")
def eigen(model: CircuitModel) -> EigenScatter:
    return EigenScatter(model)


@pytest.fixture(scope="module")
def table(model: CircuitModel) -> SkipTrigramTable:
    return SkipTrigramTable(model, layer=1, head=2, k=6, profile_k=4)


# --- EigenScatter ----------------------------------------------------------------


def test_eigen_scores_are_the_engines_for_every_definition(model: CircuitModel, eigen: EigenScatter) -> None:
    np.testing.assert_allclose(eigen.score("ov", "eigen"), circuits.copying_scores(model, "ov", "eigen"), rtol=1e-5)
    np.testing.assert_allclose(eigen.score("qk", "eigen"), circuits.copying_scores(model, "qk", "eigen"), rtol=1e-5)
    for method in ("diagonal", "topk"):
        for circuit in CIRCUITS:
            np.testing.assert_allclose(
                eigen.score(circuit, method), circuits.copying_scores(model, circuit, method), rtol=1e-5, equal_nan=True
            )
    # the K-composition term's eigen score goes through the earlier head with the largest K-composition
    kcomp = circuits.kcomp_eigenvalues(model)
    for h2 in range(3):
        l1, h1 = eigen.kcomp_source[1, h2]
        assert circuits.composition_scores(model, "K")[l1, h1, 1, h2] == np.nanmax(
            circuits.composition_scores(model, "K")[0, :, 1, h2]
        )
        assert eigen.score("qk_kcomp", "eigen")[1, h2] == pytest.approx(
            float(eigen_score(kcomp[l1, h1, 1, h2])), rel=1e-5
        )
    assert np.isnan(eigen.score("qk_kcomp")[0]).all() and (eigen.kcomp_source[0] == -1).all()


def test_eigen_eigenvalues_and_detectors_are_the_engines(model: CircuitModel, eigen: EigenScatter) -> None:
    for i, circuit in enumerate(("ov", "qk")):
        expected = circuits.eigenvalues(model, circuit)  # type: ignore[arg-type]
        got = eigen.eigenvalues[i, ..., 0] + 1j * eigen.eigenvalues[i, ..., 1]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    for k, kind in enumerate(DETECTORS):
        np.testing.assert_allclose(eigen.detectors[k], circuits.head_scores(model, kind), rtol=1e-5)  # type: ignore[arg-type]
        np.testing.assert_allclose(eigen.detector(kind), eigen.detectors[k])
    eigen.selected_layer, eigen.selected_head = 1, 2
    sel = eigen.selected_eigenvalues["ov"]
    np.testing.assert_allclose(sel, circuits.eigenvalues(model, "ov")[1, 2], rtol=1e-4, atol=1e-5)


def test_eigen_topk_samples_tokens_of_a_large_vocabulary() -> None:
    big = make_random_model(n_layers=1, n_heads=2, d_vocab=300)
    data = eigen_scatter_data(big, max_tokens=100)
    assert "100 sampled tokens of 300" in data["method_notes"][2]
    ids = torch.randperm(300, generator=torch.Generator().manual_seed(0))[:100].sort().values
    np.testing.assert_allclose(data["scores"][2, 0], circuits.copying_scores(big, "ov", "topk", tokens=ids), rtol=1e-5)


def test_eigen_one_layer_model_has_no_kcomp_axis() -> None:
    w = EigenScatter(make_random_model(n_layers=1, n_heads=2))
    assert w.qk_circuit == "qk"
    assert np.isnan(w.score("qk_kcomp")).all()


def test_eigen_state_is_binary_and_small(eigen: EigenScatter) -> None:
    state, paths, _ = _remove_buffers(eigen.get_state())
    assert {p[0] for p in paths} >= {"scores", "eigenvalues", "kcomp_source", "detectors"}
    assert longest_float_list(state) == 0
    assert state["_view"] == "eigen"


def test_eigen_selection_from_view_round_trips(eigen: EigenScatter) -> None:
    from_view(eigen, selected_layer=0, selected_head=1, method="diagonal")
    assert (eigen.selected_layer, eigen.selected_head, eigen.method) == (0, 1, "diagonal")
    eigen.method = "eigen"


@pytest.mark.parametrize(
    "bad",
    [
        {"selected_layer": 2},
        {"selected_head": 3},
        {"selected_head": -1},
        {"selected_head": "1"},
        {"selected_head": True},
        {"method": "magic"},
        {"qk_circuit": "ov"},
        {"selected_layer": 1, "selected_head": 9},
    ],
)
def test_eigen_invalid_values_from_view_are_rejected(
    eigen: EigenScatter, monkeypatch: pytest.MonkeyPatch, bad: dict[str, Any]
) -> None:
    assert_rejected(eigen, monkeypatch, **bad)


# --- SkipTrigramTable --------------------------------------------------------------


def _triples(records: Any) -> dict[tuple[int, int, int], tuple[float, float]]:
    return {(r.source, r.destination, r.out): (r.qk, r.ov) for r in records}


def test_trigram_rows_are_the_engines_largest_ov_and_qk_entries(model: CircuitModel, table: SkipTrigramTable) -> None:
    for layer in range(2):
        for head in range(3):
            by_ov = circuits.skip_trigrams(model, layer, head, k=6, by="ov")
            by_qk = circuits.skip_trigrams(model, layer, head, k=6, by="qk")
            table.layer, table.head = layer, head
            got = table.trigrams
            assert _triples(got).keys() == _triples(by_ov).keys() | _triples(by_qk).keys()
            for key, (qk, ov) in _triples(got).items():
                ref = _triples(by_ov).get(key) or _triples(by_qk)[key]
                assert (qk, ov) == pytest.approx(ref, rel=1e-5)
            rows = table.rows[layer, head]
            origins = {
                (table.token_ids[r[0]], table.token_ids[r[1]], table.token_ids[r[2]]): r[3] for r in rows if r[0] >= 0
            }
            assert all(origins[(r.source, r.destination, r.out)] & ORIGIN_OV for r in by_ov)
            assert all(origins[(r.source, r.destination, r.out)] & ORIGIN_QK for r in by_qk)
            assert all(t.copying == (t.source == t.out) for t in got)


def test_trigram_precomputed_source_lists_the_engines_triples_in_order(
    model: CircuitModel, table: SkipTrigramTable
) -> None:
    table.layer, table.head = 1, 2
    source = table.trigrams[0].source
    table.source_token = source
    assert table.live == {} or table.live.get("source") != source
    expected = circuits.skip_trigrams(model, 1, 2, k=4, source=source)
    got = table.trigrams
    assert [(r.source, r.destination, r.out) for r in got] == [(r.source, r.destination, r.out) for r in expected]
    np.testing.assert_allclose([r.qk for r in got], [r.qk for r in expected], rtol=1e-5)
    np.testing.assert_allclose([r.ov for r in got], [r.ov for r in expected], rtol=1e-5)
    table.source_token = -1


def test_trigram_other_source_is_computed_live_by_the_kernel(model: CircuitModel) -> None:
    w = SkipTrigramTable(model, layer=0, head=1, k=2, profile_k=3)
    precomputed = {int(w.token_ids[i]) for i in w.profile_sources[0, 1] if i >= 0}
    other = next(t for t in range(50) if t not in precomputed)
    from_view(w, source_token=other)
    assert w.live["layer"] == 0 and w.live["head"] == 1
    assert int(w.token_ids[w.live["source"]]) == other
    expected = circuits.skip_trigrams(model, 0, 1, k=3, source=other)
    assert [(r.destination, r.out) for r in w.trigrams] == [(r.destination, r.out) for r in expected]
    assert w.n_rows == 9


def test_trigram_search_text_resolves_to_a_token(model: CircuitModel) -> None:
    w = SkipTrigramTable(model, k=2, profile_k=2)
    from_view(w, source_query="<17>")
    assert (w.source_token, w.source_message, w.source_query) == (17, "", "")
    from_view(w, source_query="not a token")
    assert w.source_token == 17
    assert "not" in w.source_message and "token" in w.source_message
    assert w.source_query == ""


def test_trigram_visible_whitespace_resolves(hostile_model: CircuitModel) -> None:
    w = SkipTrigramTable(hostile_model, k=2, profile_k=2)
    w.source_query = "·the"
    assert w.source_token == HOSTILE.index(" the")
    w.source_query = "<script>alert(1)</script>"
    assert w.source_token == HOSTILE.index("<script>alert(1)</script>")


def test_trigram_heads_not_precomputed_are_computed_when_selected(model: CircuitModel) -> None:
    w = SkipTrigramTable(model, layer=0, head=0, k=3, profile_k=2, heads=[(0, 0)])
    assert w.ready.tolist() == [[1, 0, 0], [0, 0, 0]]
    from_view(w, selected_layer=1, selected_head=1)
    assert w.ready[1, 1] == 1
    assert _triples(w.trigrams).keys() >= _triples(circuits.skip_trigrams(model, 1, 1, k=3, by="ov")).keys()


def test_trigram_offline_data_says_what_is_missing(model: CircuitModel) -> None:
    """Built from data alone (as an exported page is), nothing is computed: missing listings are empty."""
    data = SkipTrigramTable(model, k=2, profile_k=2, heads=[(0, 0)])
    offline = SkipTrigramTable(
        **{
            k: getattr(data, k)
            for k in (
                "token_ids",
                "token_strs",
                "rows",
                "row_values",
                "profile_sources",
                "profile_tokens",
                "profile_values",
                "ready",
                "k",
                "profile_k",
                "d_vocab",
            )
        }
    )
    offline.layer, offline.head = 1, 1
    assert offline.n_rows == 0 and offline.ready[1, 1] == 0


def test_trigram_selected_row_resets_when_head_changes(table: SkipTrigramTable) -> None:
    table.layer, table.head, table.source_token = 0, 0, -1
    from_view(table, selected_row=1)
    assert table.selected_trigram == table.trigrams[1]
    from_view(table, selected_head=1)
    assert table.selected_row == -1 and table.selected_trigram is None


@pytest.mark.parametrize(
    "bad",
    [
        {"selected_layer": 2},
        {"selected_head": -1},
        {"source_token": 50},
        {"source_token": -2},
        {"source_token": "the"},
        {"selected_row": 10_000},
        {"source_query": "x" * 2000},
        {"source_query": 5},
    ],
)
def test_trigram_invalid_values_from_view_are_rejected(
    table: SkipTrigramTable, monkeypatch: pytest.MonkeyPatch, bad: dict[str, Any]
) -> None:
    table.layer, table.head, table.source_token = 0, 0, -1
    assert_rejected(table, monkeypatch, **bad)


def test_trigram_state_holds_only_the_tokens_it_shows() -> None:
    big = make_random_model(n_layers=1, n_heads=2, d_vocab=3000, d_model=16)
    w = SkipTrigramTable(big, k=5, profile_k=4)
    referenced = set(w.rows[..., :3].ravel()) | set(w.profile_tokens.ravel()) | set(w.profile_sources.ravel())
    referenced.discard(-1)
    assert len(w.token_strs) == len(referenced) < 200
    buffers, text = state_bytes(w)
    assert buffers + text < 40_000
    assert longest_float_list(_remove_buffers(w.get_state())[0]) == 0


def test_trigram_hostile_tokens_stay_text_in_exported_html(hostile_model: CircuitModel) -> None:
    w = SkipTrigramTable(hostile_model, k=8, profile_k=4, sources=[1, 2, 3])
    assert {"<script>alert(1)</script>", '"><img src=x onerror=alert(1)>'} <= set(w.token_strs)
    page = html_page(w)
    assert "<script>alert(1)" not in page and "<img src=x" not in page and '</script>","' not in page


# --- CompositionMap ---------------------------------------------------------------


def test_composition_scores_are_the_engines(model: CircuitModel) -> None:
    w = CompositionMap(model)
    for i, kind in enumerate("QKV"):
        np.testing.assert_allclose(w.scores[i], circuits.composition_scores(model, kind), rtol=1e-5, equal_nan=True)  # type: ignore[arg-type]
        np.testing.assert_allclose(
            w.score(kind, baseline=True),
            circuits.composition_scores(model, kind, baseline=True),
            rtol=1e-5,
            atol=1e-6,
            equal_nan=True,
        )  # type: ignore[arg-type]
    assert w.baseline_value == pytest.approx(circuits.composition_baseline(16, 4))
    assert np.isnan(w.scores[:, 1, :, 0, :]).all()  # a later head never composes into an earlier one


def test_composition_edge_selection_both_ways(model: CircuitModel, monkeypatch: pytest.MonkeyPatch) -> None:
    w = CompositionMap(model)
    from_view(w, selected_edge=[0, 2, 1, 1], edge_kind="K", selected_layer=1, selected_head=1)
    assert (w.selected_edge, w.edge_kind, w.selected_layer, w.selected_head) == ([0, 2, 1, 1], "K", 1, 1)
    w.select_edge((0, 0), (1, 2), "V")
    assert (w.selected_edge, w.edge_kind, w.selected_layer, w.selected_head) == ([0, 0, 1, 2], "V", 1, 2)
    for bad in (
        [1, 0, 0, 0],
        [0, 0, 0, 1],
        [0, 3, 1, 0],
        [0, 0, 2, 0],
        [0, 0, 1],
        [0, True, 1, 0],
        "0.0-1.1",
        [0.5, 0, 1, 0],
    ):
        assert_rejected(w, monkeypatch, selected_edge=bad)
    for bad_kind in (
        {"edge_kind": "X"},
        {"kind": "QK"},
        {"n_edges": 0},
        {"n_edges": 1000},
        {"subtract_baseline": "yes"},
    ):
        assert_rejected(w, monkeypatch, **bad_kind)
    from_view(w, selected_edge=[])
    assert w.selected_edge == []


def test_composition_one_layer_model_is_all_nan() -> None:
    w = CompositionMap(make_random_model(n_layers=1, n_heads=2))
    assert w.scores.shape == (3, 1, 2, 1, 2) and np.isnan(w.scores).all()


# --- TermImportance ---------------------------------------------------------------


def test_term_importance_is_the_engines(model: CircuitModel) -> None:
    tokens = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(1))
    w = TermImportance(model, tokens)
    ref = circuits.term_importance(model, tokens)
    np.testing.assert_allclose(w.marginal, ref.marginal)
    np.testing.assert_allclose(w.losses, ref.losses)
    np.testing.assert_allclose(w.layer_order1, ref.layer_order1)
    assert (w.loss_no_terms, w.full_loss) == pytest.approx((ref.loss_no_terms, ref.full_loss))
    assert (w.n_sequences, w.n_positions, w.n_orders, w.n_layers) == (2, 12, 3, 2)
    assert w.losses[-1] == pytest.approx(w.full_loss, rel=1e-6)


def test_term_importance_selection_and_arguments(model: CircuitModel, monkeypatch: pytest.MonkeyPatch) -> None:
    w = TermImportance(model, list(range(10)))
    from_view(w, selected_order=2, selected_layer=1)
    assert (w.selected_order, w.selected_layer) == (2, 1)
    for bad in ({"selected_order": 3}, {"selected_layer": 2}, {"selected_order": -2}):
        assert_rejected(w, monkeypatch, **bad)
    with pytest.raises(ValueError, match="tokens_or_text"):
        TermImportance(model)


def test_widgets_refuse_what_is_not_a_model() -> None:
    for cls in (EigenScatter, CompositionMap, SkipTrigramTable):
        with pytest.raises(TypeError, match="CircuitModel"):
            cls("gpt2")  # type: ignore[arg-type]
