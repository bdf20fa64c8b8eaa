"""One definition per view: every widget's public surface, and the explorer derived from its children."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import traitlets
from _comm import Recorder, from_view
from conftest import make_random_model

from circuitwidgets import circuits
from circuitwidgets.circuits.copying import eigen_score
from circuitwidgets.errors import ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets import (
    AttentionPatterns,
    CircuitExplorer,
    CompositionMap,
    EigenScatter,
    SkipTrigramTable,
    TermImportance,
)
from circuitwidgets.widgets.core.spec import spec_of
from circuitwidgets.widgets.explorer import CHILDREN

TEXT = "<1> <2> <3> <4> <1> <2> <3> <4>"


@pytest.fixture(scope="module")
def model() -> CircuitModel:
    return make_random_model(n_layers=2, n_heads=2, d_model=16, d_head=4, d_vocab=24, n_ctx=32, seed=11)


# --- from_model: the same widget as the constructor -----------------------------


def test_every_widget_builds_from_a_model(model: CircuitModel) -> None:
    built = {
        "eigen": EigenScatter.from_model(model, max_tokens=8),
        "composition": CompositionMap.from_model(model, n_samples=4),
        "trigrams": SkipTrigramTable.from_model(model, k=2, profile_k=2, selected_layer=1, selected_head=1),
        "terms": TermImportance.from_model(model, TEXT),
        "attention": AttentionPatterns.from_model(model, TEXT),
        "explorer": CircuitExplorer(model, text_or_tokens=TEXT, k=2, profile_k=2, max_tokens=8),
    }
    for name, w in built.items():
        if name != "terms":
            assert (w.n_layers, w.n_heads) == (2, 2), name
    np.testing.assert_array_equal(built["eigen"].scores, EigenScatter(model, max_tokens=8).scores)
    assert (built["trigrams"].selected_layer, built["trigrams"].selected_head) == (1, 1)
    assert built["terms"].n_orders == 3 and built["terms"].n_layers == 2
    assert built["attention"].tokens == model.to_str_tokens(TEXT)


def test_one_argument_name_for_text_or_tokens(model: CircuitModel) -> None:
    ids = model.to_tokens(TEXT)[0]
    by_text = TermImportance(model, text_or_tokens=TEXT)
    by_ids = TermImportance(model, text_or_tokens=ids.tolist())
    np.testing.assert_allclose(by_text.losses, by_ids.losses)
    # the former keyword still works
    np.testing.assert_allclose(TermImportance(model, tokens_or_text=TEXT).losses, by_text.losses)
    assert AttentionPatterns(model, text_or_tokens=ids).tokens == AttentionPatterns(model, TEXT).tokens


def test_old_skip_trigram_head_names_still_select(model: CircuitModel) -> None:
    w = SkipTrigramTable(model, layer=1, head=0, k=2, profile_k=2)
    assert (w.selected_layer, w.selected_head) == (1, 0)
    w.head = 1
    assert w.selected_head == 1 and w.head == 1


# --- array constructors ---------------------------------------------------------


def test_eigen_scatter_from_eigenvalues_scores_them_as_the_paper_does() -> None:
    rng = np.random.default_rng(0)
    ov = rng.normal(size=(2, 3, 4)) + 1j * rng.normal(size=(2, 3, 4))
    qk = np.abs(rng.normal(size=(2, 3, 4))) + 0j  # all positive: a perfect matching score of +1
    w = EigenScatter.from_eigenvalues(ov, qk, detectors={"induction": np.arange(6.0).reshape(2, 3)})
    np.testing.assert_allclose(w.score("ov"), eigen_score(ov), rtol=1e-6)
    np.testing.assert_allclose(w.score("qk"), 1.0, rtol=1e-6)
    assert (w.selected_layer, w.selected_head) == (1, 2)  # the strongest induction head
    assert w.qk_circuit == "qk" and np.isnan(w.detector("previous_token")).all()
    np.testing.assert_allclose(w.selected_eigenvalues["ov"], ov[1, 2].astype(np.complex64), rtol=1e-6)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (
            lambda: EigenScatter.from_eigenvalues(np.zeros((2, 3)), np.zeros((2, 3))),
            ShapeError,
            ["ov", "[n_layers, n_heads, d]", "(2, 3)"],
        ),
        (
            lambda: EigenScatter.from_eigenvalues(np.zeros((2, 3, 4)), np.zeros((1, 3, 4))),
            ShapeError,
            ["qk", "like ov", "(1, 3, 4)"],
        ),
        (lambda: EigenScatter.from_eigenvalues(np.array([["a"]]), np.zeros(1)), ArgumentTypeError, ["ov", "dtype"]),
        (
            lambda: CompositionMap.from_scores(np.zeros((2, 2, 2)), 0, 0),
            ShapeError,
            ["q", "[n_layers, n_heads, n_layers, n_heads]"],
        ),
        (
            lambda: CompositionMap.from_scores(np.zeros((2, 2, 2, 2)), np.zeros((3, 2, 3, 2)), np.zeros((2, 2, 2, 2))),
            ShapeError,
            ["k", "like q"],
        ),
        (
            lambda: CompositionMap.from_scores(
                np.full((2, 1, 2, 1), np.nan), np.zeros((2, 1, 2, 1)), np.zeros((2, 1, 2, 1))
            ),
            NonFiniteError,
            ["q", "finite"],
        ),
        (lambda: TermImportance.from_losses([], loss_no_terms=3.0), ShapeError, ["losses", "order-0"]),
        (lambda: TermImportance.from_losses([[1.0]], loss_no_terms=3.0), ShapeError, ["losses", "[n]", "(1, 1)"]),
        (lambda: TermImportance.from_losses([1.0, np.nan], loss_no_terms=3.0), NonFiniteError, ["losses", "finite"]),
        (lambda: TermImportance.from_losses([1.0], loss_no_terms="3"), ArgumentTypeError, ["loss_no_terms", "'3'"]),
        (lambda: SkipTrigramTable.from_trigrams([]), ArgumentTypeError, ["trigrams", "dict", "list"]),
        (lambda: SkipTrigramTable.from_trigrams({(0,): []}), ArgumentTypeError, ["(layer, head)", "(0,)"]),
        (
            lambda: SkipTrigramTable.from_trigrams({(0, 0): [("a", "b", "c", 1.0)]}),
            ArgumentTypeError,
            ["trigrams[(0, 0)]", "(source, destination, out, qk, ov)"],
        ),
    ],
)
def test_array_constructors_name_what_is_wrong(call: Any, error: type[Exception], words: list[str]) -> None:
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_composition_map_from_scores_keeps_earlier_to_later_only() -> None:
    q = np.arange(16, dtype=float).reshape(2, 2, 2, 2)
    w = CompositionMap.from_scores(q, q * 2, q * 3, baseline=0.5, subtract_baseline=False)
    assert np.isnan(w.score("Q")[1, 0, 0, 0]) and np.isnan(w.score("Q")[0, 0, 0, 1])  # not earlier → later
    assert w.score("K")[0, 1, 1, 0] == q[0, 1, 1, 0] * 2
    assert w.score("V", baseline=True)[0, 0, 1, 1] == pytest.approx(q[0, 0, 1, 1] * 3 - 0.5)
    w.select_edge((0, 1), (1, 0), "K")
    assert w.selected_edge == [0, 1, 1, 0]


def test_term_importance_from_losses_gives_each_orders_marginal() -> None:
    w = TermImportance.from_losses([5.0, 3.0, 2.5], loss_no_terms=6.0, layer_order1=[1.5, 0.5])
    np.testing.assert_allclose(w.marginal, [1.0, 2.0, 0.5])
    assert w.full_loss == 2.5 and (w.n_orders, w.n_layers) == (3, 2)
    from_view(w, selected_order=2, selected_layer=1)
    assert (w.selected_order, w.selected_layer) == (2, 1)


def test_skip_trigram_table_from_trigrams_lists_each_heads_rows(model: CircuitModel) -> None:
    found = circuits.skip_trigrams(model, 1, 1, 3, by="ov")
    w = SkipTrigramTable.from_trigrams(
        {(1, 1): found, (0, 0): [("x", "y", "x", 0.5, 2.0)]}, selected_layer=1, selected_head=1
    )
    assert [(t.source, t.destination, t.out) for t in w.trigrams] == [(t.source, t.destination, t.out) for t in found]
    w.selected_layer, w.selected_head = 0, 0
    (row,) = w.trigrams
    assert (row.source_str, row.destination_str, row.out_str, row.qk, row.ov, row.copying) == (
        "x",
        "y",
        "x",
        0.5,
        2.0,
        True,
    )
    w.selected_head = 1
    assert w.n_rows == 0  # a head not given: nothing to list, and no kernel to compute it


# --- unknown keyword arguments ---------------------------------------------------


WIDGETS: dict[str, Any] = {
    "AttentionPatterns": lambda m, **kw: AttentionPatterns(m, TEXT, **kw),
    "EigenScatter": lambda m, **kw: EigenScatter(m, max_tokens=8, **kw),
    "CompositionMap": lambda m, **kw: CompositionMap(m, n_samples=4, **kw),
    "SkipTrigramTable": lambda m, **kw: SkipTrigramTable(m, k=2, profile_k=2, **kw),
    "TermImportance": lambda m, **kw: TermImportance(m, TEXT, **kw),
    "CircuitExplorer": lambda m, **kw: CircuitExplorer(m, TEXT, k=2, profile_k=2, max_tokens=8, **kw),
}


@pytest.mark.parametrize("name", list(WIDGETS))
def test_unknown_keyword_arguments_are_refused_by_name(model: CircuitModel, name: str) -> None:
    with pytest.raises(TypeError, match=rf"{name}\(\) got unexpected keyword argument\(s\) 'colour_scheme'"):
        WIDGETS[name](model, colour_scheme="dark")
    with pytest.raises(TypeError, match="did you mean 'selected_layer'"):
        WIDGETS[name](model, selected_layr=1)


def test_circuitsvis_spellings_point_to_from_arrays() -> None:
    tokens = ["a", "b"]
    attention = np.array([[[1.0, 0.0], [0.5, 0.5]]])
    with pytest.raises(TypeError, match=r"'attention'.*AttentionPatterns\.from_arrays\(tokens, attention\)"):
        AttentionPatterns(tokens=tokens, attention=attention)
    with pytest.raises(TypeError, match=r"tokens= without patterns.*from_arrays"):
        AttentionPatterns(tokens=tokens)
    assert AttentionPatterns.from_arrays(tokens=tokens, attention=attention).n_tokens == 2


# --- derived, not restated ---------------------------------------------------------


def _synced(cls: type) -> set[str]:
    return {n for n in cls.class_trait_names(sync=True) if not n.startswith("_")} - {  # type: ignore[attr-defined]
        "layout",
        "tabbable",
        "tooltip",
    }


def test_explorer_traits_are_exactly_its_childrens() -> None:
    expected = {"model_name"}
    writable = set()
    for child in CHILDREN:
        spec = spec_of(child)
        assert _synced(child) == {*spec.data, *spec.settings, *spec.heads, *spec.replies}, child.__name__
        expected.add(f"{spec.prefix}_data")
        expected |= {f"{spec.prefix}_{name}" for name in spec.own} | set(spec.heads)
        writable |= {f"{spec.prefix}_{name}" for name in spec.settings} | set(spec.heads)
        assert child._from_view == spec.from_view
    assert _synced(CircuitExplorer) == expected
    assert CircuitExplorer._from_view == writable
    # each setting keeps its child's validation, under the explorer's name
    for child in CHILDREN:
        spec = spec_of(child)
        for name in spec.settings:
            mine, theirs = CircuitExplorer.class_traits()[f"{spec.prefix}_{name}"], child.class_traits()[name]
            assert type(mine) is type(theirs) and mine.metadata["scope"] == spec.prefix


def test_explorer_names_reach_the_front_end(model: CircuitModel) -> None:
    w = CircuitExplorer(model, TEXT, k=2, profile_k=2, max_tokens=8)
    children = {c["view"]: c for c in w._children}
    assert children["skiptrigrams"] == {
        "view": "skiptrigrams",
        "prefix": "trigram_",
        "data": "trigram_data",
        "own": ["qk_offset", "source_token", "source_query", "selected_row", "live", "source_message"],
        "shared": {"selected_layer": "selected_layer", "selected_head": "selected_head"},
    }
    assert children["termimportance"]["shared"] == {"selected_layer": "selected_layer"}
    # a child's validation runs on the explorer's state, worded with the explorer's trait name
    with pytest.raises(traitlets.TraitError, match=r"The 'eigen_method' trait of CircuitExplorer expected one of \["):
        w.eigen_method = "magic"
    rec = Recorder()
    w._send = rec  # type: ignore[method-assign]
    from_view(w, composition_n_edges=500)
    assert w.composition_n_edges == 12 and rec.updates() == [{"composition_n_edges": 12}]


# --- skip-trigrams computed on demand cross the wire head by head ----------------------


def _sent_keys(rec: Recorder) -> set[str]:
    return {key for state in rec.updates() for key in state}


def test_a_head_computed_on_demand_is_sent_alone(model: CircuitModel) -> None:
    w = SkipTrigramTable(model, k=2, profile_k=2, heads=[(0, 0)])
    rec = Recorder()
    w._send = rec  # type: ignore[method-assign]
    from_view(w, selected_layer=1, selected_head=1)
    assert not _sent_keys(rec) & {"rows", "row_values", "profile_sources", "profile_tokens", "profile_values", "ready"}
    ((content, buffers),) = rec.custom()
    assert content["type"] == "trigram_update" and content["heads"] == [[1, 1]]
    per_head = [
        w.rows[1, 1],
        w.row_values[1, 1],
        w.profile_sources[1, 1],
        w.profile_tokens[1, 1],
        w.profile_values[1, 1],
    ]
    assert [bytes(b) for b in buffers] == [a.tobytes() for a in per_head]
    assert content["token_strs"] == w.token_strs[content["tokens_from"] :]
    # the kernel's state holds the head (for saving and exporting) ...
    assert w.ready[1, 1] == 1 and w.get_state("ready")["ready"]["view"].tobytes() == w.ready.tobytes()
    assert max(int(w.rows[1, 1].max()), int(w.profile_tokens[1, 1].max())) < len(w.token_strs) == len(w.token_ids)
    # ... and a view that renders again asks for what it has not seen
    from _comm import custom_from_view

    custom_from_view(w, {"type": "want_trigram_update"})
    content, buffers = rec.custom()[-1]
    assert content["heads"] == [[1, 1]] and len(buffers) == 5


def test_the_explorer_sends_a_computed_head_without_resending_the_others(model: CircuitModel) -> None:
    w = CircuitExplorer(
        model, TEXT, k=2, profile_k=2, max_tokens=8, trigram_heads=[(0, 0)], selected_layer=0, selected_head=0
    )
    rec = Recorder()
    w._send = rec  # type: ignore[method-assign]
    from_view(w, selected_layer=1, selected_head=0)
    assert "trigram_data" not in _sent_keys(rec)
    assert [c["heads"] for c, _ in rec.custom()] == [[[1, 0]]]
    assert w.trigram_data["ready"][1, 0] == 1 and w.trigram_n_rows > 0


def test_the_kernel_owns_the_order_of_a_sources_triples(model: CircuitModel) -> None:
    from circuitwidgets.widgets.skip_trigrams.data import profile_order

    # (js/tests/weightspace-fixtures.ts holds this order for P = 2)
    assert profile_order(2).ravel().tolist() == [0, 0, 0, 1, 1, 0, 1, 1]
    ranks = profile_order(3).tolist()
    assert ranks == sorted(ranks, key=lambda ij: (ij[0] + ij[1], ij[0])) and len(ranks) == 9
    w = SkipTrigramTable(model, k=2, profile_k=3, selected_layer=1, selected_head=1)
    np.testing.assert_array_equal(w.profile_order, profile_order(3))
    w.source_token = int(w.token_ids[w.rows[1, 1, 0, 0]])
    rows = w.trigrams
    dest = w.token_ids[w.profile_tokens[1, 1, 0, 0]].tolist()
    assert [t.destination for t in rows][:3] == [dest[0], dest[0], dest[1]]  # ranks (0,0), (0,1), (1,0)
