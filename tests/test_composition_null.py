"""The rotation null of composition scores: the fast score equals ‖W_A R W_B‖ with R whole, the sampled stream is
the documented one, its mean square is 1 / d_model, and the threshold is a quantile of it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_random_model

from circuitwidgets.circuits.composition_null import (
    _CHUNK,
    _factors,
    composition_threshold,
    random_frame,
    rotated_score,
    rotation_null,
)
from circuitwidgets.errors import ArgumentError


def _haar(rng: np.random.Generator, d: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return np.asarray(q * np.sign(np.diag(r)))


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
def test_the_fast_score_equals_the_dense_product_with_the_rotation_whole(kind: str) -> None:
    model = make_random_model(n_layers=2, n_heads=2, d_model=12, d_head=3, seed=1)
    left, right = _factors(model, "OV", 0, 1, None), _factors(model, kind, 1, 0, None)
    w_a, w_b = left[0] @ left[1], right[0] @ right[1]
    dense_b = {
        "Q": model.W_Q[1, 0].numpy() @ model.W_K[1, 0].numpy().T,
        "K": model.W_K[1, 0].numpy() @ model.W_Q[1, 0].numpy().T,
        "V": model.W_V[1, 0].numpy() @ model.W_O[1, 0].numpy(),
    }[kind]
    np.testing.assert_allclose(w_b, dense_b, atol=1e-12)  # the factors are the kind's W_B
    rng = np.random.default_rng(3)
    for _ in range(4):
        rotation = _haar(rng, 12)
        u, _t = np.linalg.qr(right[0])
        slow = np.linalg.norm(w_a @ rotation @ w_b) / (np.linalg.norm(w_a) * np.linalg.norm(w_b))
        assert rotated_score(left, right, rotation @ u) == pytest.approx(slow, rel=1e-10)


def test_the_null_is_the_documented_stream_scored_one_sample_at_a_time() -> None:
    model = make_random_model(n_layers=3, n_heads=2, d_model=10, d_head=2, seed=2)
    n, kinds = _CHUNK + 9, ("Q", "K", "V")  # two chunks
    got = rotation_null(model, n_samples=n, seed=5)
    rng = np.random.default_rng(5)
    layer_pairs = [(0, 1), (0, 2), (1, 2)]
    pairs = [layer_pairs[i] for i in rng.integers(3, size=n)]
    heads = rng.integers(2, size=(n, 2))
    kind_of = rng.integers(3, size=n)
    want = []
    for start in range(0, n, _CHUNK):
        z = rng.standard_normal((min(_CHUNK, n - start), 10, 2))
        for j, zi in enumerate(z):
            i = start + j
            q, r = np.linalg.qr(zi)
            frame = q * np.sign(np.diag(r))
            (l1, l2), (h1, h2) = pairs[i], heads[i]
            left = _factors(model, "OV", l1, int(h1), None)
            right = _factors(model, kinds[kind_of[i]], l2, int(h2), None)
            want.append(rotated_score(left, right, frame))
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_its_mean_square_is_one_over_d_model_whatever_the_heads() -> None:
    """E‖A R B‖² = ‖A‖² ‖B‖² / d for a Haar rotation R: the null's mean sits at the random-matrix baseline."""
    model = make_random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, seed=0)
    scores = rotation_null(model, n_samples=4000, seed=0)
    # (the mean of 4,000 squares: its standard error here is under 2 % of 1/16)
    assert (scores**2).mean() * 16 == pytest.approx(1.0, abs=0.05)
    assert np.all((scores >= 0) & (scores <= 1))


def test_a_random_frame_is_orthonormal() -> None:
    frame = random_frame(np.random.default_rng(0), 9, 4)
    np.testing.assert_allclose(frame.T @ frame, np.eye(4), atol=1e-12)


def test_the_threshold_is_the_quantile_of_the_null() -> None:
    model = make_random_model(n_layers=2, n_heads=2, d_model=12, d_head=3, seed=4)
    null = rotation_null(model, n_samples=500, seed=1)
    assert composition_threshold(model, 0.9, n_samples=500, seed=1) == pytest.approx(np.quantile(null, 0.9))
    assert composition_threshold(model, 0.99, n_samples=500, seed=1) > composition_threshold(
        model, 0.9, n_samples=500, seed=1
    )


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda m: composition_threshold(m, 1.0), "quantile"),
        (lambda m: composition_threshold(m, True), "quantile"),
        (lambda m: rotation_null(m, kinds=("X",)), "kinds"),
        (lambda m: rotation_null(m, n_samples=0), "n_samples"),
        (lambda m: rotation_null(make_random_model(n_layers=1)), "model"),
    ],
)
def test_bad_arguments_are_named(call: object, name: str) -> None:
    model = make_random_model(n_layers=2, n_heads=2, d_model=8, d_head=2)
    with pytest.raises((ArgumentError, TypeError, ValueError), match=name):
        call(model)  # type: ignore[operator]


def test_the_docs_figures_are_the_shipped_models_own() -> None:
    """docs/views/composition.md quotes the 12-head model's threshold, baseline and counts: they are these."""
    import re
    import warnings
    from pathlib import Path

    import circuitwidgets as cw

    text = " ".join((Path(__file__).parents[1] / "docs" / "views" / "composition.md").read_text().split())
    quoted = re.search(
        r"threshold is (\d\.\d{3}) above the baseline \((\d\.\d{3})\): (\d+) of the (\d+) pairs clear it.*?"
        r"\((\d+) Q and (\d+) K pairs pass; V-composition's strongest pair, \+(\d\.\d{4}), does not\)",
        text,
    )
    assert quoted, "the docs no longer quote the threshold"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        widget = cw.CompositionMap(cw.load_pretrained("attn-only-2l-12h"))
    threshold = widget.threshold_against_rotations()
    raw = widget.scores[:, 0, :, 1, :].astype(np.float64)
    base = widget.baseline_value
    assert quoted[1] == f"{threshold - base:.3f}" and quoted[2] == f"{base:.3f}"
    assert int(quoted[3]) == int((raw >= threshold).sum()) and int(quoted[4]) == raw.size
    assert [int(quoted[5]), int(quoted[6]), 0] == [int((raw[k] >= threshold).sum()) for k in range(3)]
    assert quoted[7] == f"{raw[2].max() - base:.4f}"
