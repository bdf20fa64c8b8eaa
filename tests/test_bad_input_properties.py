"""Property-based sweep of the public API with malformed arguments (issue 11).

Whatever a user passes, a public function either works or raises one of our
typed errors (subclasses of ``ValueError``/``TypeError`` whose message names
the argument). No other exception type may escape.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from circuitwidgets import circuits
from circuitwidgets.errors import CircuitWidgetsError
from circuitwidgets.widgets import AttentionPatterns
from tests.conftest import make_random_model

MODEL = make_random_model(n_layers=2, n_heads=2, d_model=8, d_head=4, d_vocab=20, n_ctx=16)

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-5, max_value=40), max_size=5),
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _works_or_typed_error(fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except CircuitWidgetsError as exc:
        assert str(exc), "typed errors carry a message"


@SETTINGS
@given(circuit=junk | st.sampled_from(["ov", "qk", "qk_kcomp"]), method=junk | st.sampled_from(["eigen", "diagonal", "topk"]), k=junk)
def test_copying_scores_accepts_or_names_the_bad_argument(circuit: Any, method: Any, k: Any) -> None:
    _works_or_typed_error(circuits.copying_scores, MODEL, circuit=circuit, method=method, k=k)


@SETTINGS
@given(kind=junk | st.sampled_from(["Q", "K", "V"]), baseline=junk)
def test_composition_scores_accepts_or_names_the_bad_argument(kind: Any, baseline: Any) -> None:
    _works_or_typed_error(circuits.composition_scores, MODEL, kind=kind, baseline=baseline)


@SETTINGS
@given(kind=junk | st.sampled_from(["previous_token", "induction", "duplicate_token"]), seq_len=junk, n_seqs=junk, seed=junk)
def test_head_scores_accepts_or_names_the_bad_argument(kind: Any, seq_len: Any, n_seqs: Any, seed: Any) -> None:
    _works_or_typed_error(circuits.head_scores, MODEL, kind=kind, seq_len=seq_len, n_seqs=n_seqs, seed=seed)


@SETTINGS
@given(layer=junk, head=junk, k=junk, source=junk)
def test_skip_trigrams_accepts_or_names_the_bad_argument(layer: Any, head: Any, k: Any, source: Any) -> None:
    _works_or_typed_error(circuits.skip_trigrams, MODEL, layer, head, k=k, source=source)


@SETTINGS
@given(tokens=junk, max_order=junk)
def test_term_importance_accepts_or_names_the_bad_argument(tokens: Any, max_order: Any) -> None:
    _works_or_typed_error(circuits.term_importance, MODEL, tokens, max_order=max_order)


@SETTINGS
@given(tokens=junk)
def test_forward_pass_accepts_or_names_the_bad_argument(tokens: Any) -> None:
    _works_or_typed_error(MODEL.run_with_cache, tokens)


shapes = st.lists(st.integers(min_value=0, max_value=6), min_size=0, max_size=5)


@SETTINGS
@given(shape=shapes, fill=st.sampled_from(["uniform", "nan", "negative", "random"]), n_tokens=st.integers(0, 7))
def test_attention_from_arrays_accepts_or_names_the_bad_argument(shape: list[int], fill: str, n_tokens: int) -> None:
    rng = np.random.default_rng(0)
    values = {"uniform": np.full(shape, 0.5), "nan": np.full(shape, np.nan), "negative": -np.ones(shape), "random": rng.random(shape)}[fill]
    _works_or_typed_error(AttentionPatterns.from_arrays, [f"t{i}" for i in range(n_tokens)], values)


def test_a_model_with_nan_weights_is_refused_naming_the_tensor() -> None:
    weights = {k: v.clone() for k, v in MODEL.weights().items()}
    weights["W_V"][0, 0, 0, 0] = float("nan")
    with pytest.raises(CircuitWidgetsError, match="W_V"):
        type(MODEL)(MODEL.cfg, weights)


def test_wrong_shaped_weights_are_refused_naming_the_tensor() -> None:
    weights = dict(MODEL.weights())
    weights["W_O"] = torch.zeros(2, 2, 3, 8, dtype=MODEL.dtype)
    with pytest.raises(CircuitWidgetsError, match="W_O"):
        type(MODEL)(MODEL.cfg, weights)
