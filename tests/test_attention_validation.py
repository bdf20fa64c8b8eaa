"""AttentionPatterns: bad input gets a typed error naming the argument, what was expected and what was received."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from _attention_data import causal_patterns
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from circuitwidgets import AttentionPatterns
from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    CircuitWidgetsError,
    MemoryBudgetError,
    NonFiniteError,
    ShapeError,
)
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.attention.widget import _upper_max


@pytest.fixture
def model(random_model: Callable[..., CircuitModel]) -> CircuitModel:
    return random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=20, n_ctx=32, biases=True)


# --- validation: typed errors naming argument, expected, received -----------------


@pytest.mark.parametrize(
    ("tokens", "attention", "error", "message"),
    [
        (
            list("abc"),
            np.ones((3, 3)) / 3,
            ShapeError,
            r"attention: expected \[n_heads, dest, src\].*got shape \(3, 3\)",
        ),
        (list("abc"), np.ones((2, 3, 4)) / 4, ShapeError, r"dest == src == 3 .*got shape \(1, 2, 3, 4\)"),
        (list("abc"), np.ones((1, 2, 2, 3, 3)), ShapeError, r"got shape \(1, 2, 2, 3, 3\)"),
        (list("abc"), np.ones((0, 3, 3)), ShapeError, r"at least one layer and one head"),
        (list("abc"), np.full((1, 3, 3), np.nan), NonFiniteError, r"attention: expected finite weights, got NaN"),
        (list("abc"), np.full((1, 3, 3), np.inf), NonFiniteError, r"infinite"),
        (list("abc"), np.full((1, 3, 3), 2.0), ArgumentError, r"expected weights in \[0, 1\].*got a row summing to 6"),
        (
            list("abc"),
            np.array([[[1.5, 0, 0], [0, 1, 0], [1.5, -0.5, 0]]]),
            ArgumentError,
            r"expected weights in \[0, 1\].*got values in \[-0.5, 1.5\]",
        ),
        (list("abc"), np.full((1, 3, 3), -0.5), ArgumentError, r"not scores"),
        (list("abc"), np.full((1, 3, 3), 0.2), ArgumentError, r"summing to 1.*got a row summing to 0\.6"),
        (list("abc"), np.array([["a"]]), ArgumentTypeError, r"attention: expected real numbers"),
        ([], np.zeros((1, 0, 0)), ShapeError, r"tokens: expected at least one token, got an empty sequence"),
        ("abc", np.ones((1, 3, 3)) / 3, ArgumentTypeError, r"tokens: expected a list of token strings, got str"),
        ([1, 2, 3], np.ones((1, 3, 3)) / 3, ArgumentTypeError, r"tokens: expected str entries, got int at index 0"),
    ],
)
def test_bad_arrays_raise_typed_errors_that_say_what_was_expected(
    tokens: Any, attention: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        AttentionPatterns.from_arrays(tokens, attention)


def test_causal_claim_is_checked() -> None:
    a = np.full((1, 3, 3), 1 / 3)
    with pytest.raises(
        ArgumentError, match=r"causal=True but head 0 attends above the diagonal.*destination 0 → source 1"
    ):
        AttentionPatterns.from_arrays(list("abc"), a, causal=True)
    assert AttentionPatterns.from_arrays(list("abc"), a).causal is False


@pytest.mark.parametrize("n", [1, 2, 127, 128, 129, 300])
def test_weight_above_the_diagonal_is_found_wherever_it_is(n: int) -> None:
    a = np.tri(n, dtype=np.float32) / np.arange(1, n + 1, dtype=np.float32)[:, None]
    assert _upper_max(a) == 0.0
    for dest, src in [(0, n - 1), (n // 2, n // 2 + 1), (n - 2, n - 1), (0, 1)]:
        if 0 <= dest < src < n:
            b = a.copy()
            b[dest, src] = 0.25
            assert _upper_max(b) == 0.25


def test_float16_rounding_is_tolerated_but_not_mistakes() -> None:
    a = torch.softmax(torch.randn(2, 64, 64), dim=-1).half()
    assert AttentionPatterns.from_arrays([str(i) for i in range(64)], a).n_heads == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"value_norms": np.ones((2, 4))}, ShapeError, r"value_norms: expected shape \(1, 2, 5\).*got \(2, 4\)"),
        ({"value_norms": -np.ones((2, 5))}, ArgumentError, r"value_norms: expected norms ≥ 0"),
        ({"value_norms": np.full((2, 5), np.nan)}, NonFiniteError, r"value_norms: expected finite values"),
        ({"logit_effect": np.full((2, 5), np.inf)}, NonFiniteError, r"logit_effect: expected finite values \(or NaN\)"),
    ],
)
def test_bad_optional_arrays_are_refused(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        AttentionPatterns.from_arrays(list("abcde"), causal_patterns(1, 2, 5), **kwargs)


@pytest.mark.parametrize(
    ("text_or_tokens", "error", "message"),
    [
        ("", ShapeError, r"text_or_tokens: expected a non-empty text"),
        ([], ShapeError, r"text_or_tokens: expected at least one token, got 0"),
        (
            torch.zeros(2, 2, 2, dtype=torch.long),
            ShapeError,
            r"expected token ids \[pos\] or \[1, pos\], got shape \(2, 2, 2\)",
        ),
        ([1.5, 2.0], ArgumentTypeError, r"expected integer token ids, got dtype torch.float"),
        (["a", 1], ArgumentTypeError, r"a list mixing str and other values; .*from_arrays"),
        ([1, 99], ArgumentError, r"tokens: expected ids in \[0, 20\)"),
        # refused before any work, saying how to proceed
        (
            list(range(40)),
            ShapeError,
            r"text_or_tokens: expected at most n_ctx=32 tokens .*got 40.*window=32.*Nothing was computed",
        ),
    ],
)
def test_bad_model_inputs_raise_typed_errors(
    model: CircuitModel, text_or_tokens: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        AttentionPatterns(model, text_or_tokens)


def test_a_state_too_large_is_refused_from_the_shapes_before_reading_a_weight() -> None:
    huge = np.broadcast_to(np.float32(1e-5), (1, 1, 100_000, 100_000))  # no memory behind it
    with pytest.raises(MemoryBudgetError, match=r"100000 tokens would put 5,000,050,000 bytes .* over the limit"):
        # (the dense view's state; by default so many tokens are a long context, summarised from the array)
        AttentionPatterns.from_arrays([f"t{i}" for i in range(100_000)], huge, long=False)


def test_a_model_of_another_library_is_refused_plainly() -> None:
    with pytest.raises(ArgumentTypeError, match=r"model: expected a circuitwidgets.CircuitModel, got dict"):
        AttentionPatterns({"W_Q": 1}, [1, 2])  # type: ignore[arg-type]


@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=5, max_side=5),
    fill=st.sampled_from(["softmax", "random", "nan", "negative", "ones"]),
    n=st.integers(0, 5),
)
@settings(max_examples=80, deadline=None)
def test_random_inputs_raise_only_our_typed_errors(shape: tuple[int, ...], fill: str, n: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.random(shape)
    if fill == "softmax":
        a = np.exp(a) / np.exp(a).sum(-1, keepdims=True)
    elif fill == "nan":
        a.flat[0] = np.nan
    elif fill == "negative":
        a = -a
    elif fill == "ones":
        a = np.ones(shape)
    error: CircuitWidgetsError | None = None
    try:
        w = AttentionPatterns.from_arrays([f"t{i}" for i in range(n)], a)
    except CircuitWidgetsError as exc:  # anything else fails the test
        error = exc
    if error is not None:
        assert isinstance(error, (ValueError, TypeError)) and str(error)
    else:
        assert w.n_tokens == n and np.abs(w.attention.sum(-1) - 1).max() < 0.5
