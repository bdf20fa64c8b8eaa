"""Per-head circuits equal their dense definitions (DESIGN.md §3, row-vector convention)."""

from __future__ import annotations

import pytest
import torch
from conftest import make_random_model
from hypothesis import given, settings
from hypothesis import strategies as st

from circuitwidgets.circuits import W_OV, W_QK, direct_path, full_ov, full_qk, full_qk_kcomp, positional_qk
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, UnsupportedArchitectureError

SETTINGS = settings(max_examples=15, deadline=None)


@st.composite
def models(draw: st.DrawFn, min_layers: int = 1) -> object:
    return make_random_model(
        n_layers=draw(st.integers(min_layers, 3)),
        n_heads=draw(st.integers(1, 3)),
        d_model=draw(st.integers(2, 10)),
        d_head=draw(st.integers(1, 5)),
        d_vocab=draw(st.integers(2, 25)),
        seed=draw(st.integers(0, 1000)),
    )


@SETTINGS
@given(model=models(), data=st.data())
def test_head_circuits_equal_the_dense_products(model: object, data: st.DataObject) -> None:
    from circuitwidgets.model import CircuitModel

    assert isinstance(model, CircuitModel)
    layer = data.draw(st.integers(0, model.cfg.n_layers - 1))
    head = data.draw(st.integers(0, model.cfg.n_heads - 1))
    W_Q, W_K, W_V, W_O = (w[layer, head] for w in (model.W_Q, model.W_K, model.W_V, model.W_O))
    torch.testing.assert_close(W_QK(model, layer, head).dense(), W_Q @ W_K.T)
    torch.testing.assert_close(W_OV(model, layer, head).dense(), W_V @ W_O)
    torch.testing.assert_close(full_qk(model, layer, head).dense(), model.W_E @ W_Q @ W_K.T @ model.W_E.T)
    torch.testing.assert_close(full_ov(model, layer, head).dense(), model.W_E @ W_V @ W_O @ model.W_U)
    assert model.W_pos is not None
    torch.testing.assert_close(positional_qk(model, layer, head).dense(), model.W_pos @ W_Q @ W_K.T @ model.W_pos.T)


@SETTINGS
@given(model=models(min_layers=2), data=st.data())
def test_kcomp_term_is_the_query_against_the_earlier_heads_output(model: object, data: st.DataObject) -> None:
    """Key built from the earlier head's output x W_OV^{h1}: score e_q W_QK^{h2} (e_t W_OV^{h1})ᵀ."""
    from circuitwidgets.model import CircuitModel

    assert isinstance(model, CircuitModel)
    l2 = data.draw(st.integers(1, model.cfg.n_layers - 1))
    l1 = data.draw(st.integers(0, l2 - 1))
    h1, h2 = data.draw(st.integers(0, model.cfg.n_heads - 1)), data.draw(st.integers(0, model.cfg.n_heads - 1))
    W_QK2 = model.W_Q[l2, h2] @ model.W_K[l2, h2].T
    W_OV1 = model.W_V[l1, h1] @ model.W_O[l1, h1]
    expected = model.W_E @ W_QK2 @ (model.W_E @ W_OV1).T
    torch.testing.assert_close(full_qk_kcomp(model, l2, h2, l1, h1).dense(), expected)


def test_direct_path_includes_the_unembedding_bias() -> None:
    model = make_random_model(biases=True)
    b_U = model.weight("b_U")
    assert b_U is not None
    torch.testing.assert_close(direct_path(model).dense(), model.W_E @ model.W_U + b_U)
    torch.testing.assert_close(
        direct_path(make_random_model()).dense(), make_random_model().W_E @ make_random_model().W_U
    )


def test_circuit_arguments_are_checked() -> None:
    model = make_random_model(n_layers=2, n_heads=3)
    with pytest.raises(ArgumentError, match=r"layer: expected an int in \[0, 2\), got 2"):
        full_ov(model, 2, 0)
    with pytest.raises(ArgumentError, match=r"head: expected an int in \[0, 3\), got -1"):
        full_qk(model, 0, -1)
    with pytest.raises(ArgumentError, match="earlier_layer: expected a layer before layer=1, got 1"):
        full_qk_kcomp(model, 1, 0, 1, 0)
    with pytest.raises(ArgumentTypeError, match=r"model: expected a circuitwidgets\.CircuitModel, got str"):
        full_ov("gpt2", 0, 0)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedArchitectureError, match="W_pos"):
        positional_qk(make_random_model(positional_embedding_type="rotary"), 0, 0)
