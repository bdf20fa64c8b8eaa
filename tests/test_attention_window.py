"""A text longer than the model's context: refused early with what to do, or shown in overlapping windows.

Each query row must be exactly the row a direct forward pass of its window gives:
the earliest window containing it (the one with the most left context), BOS first.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from circuitwidgets import AttentionPatterns
from circuitwidgets.activations.value_paths import value_norms, value_weighted
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.tokenizer import VocabTokenizer
from circuitwidgets.widgets.core.context import ContextLengthError

ONE_STEP = 0.5 / 255 + 1e-6
N_CTX = 16


@pytest.fixture
def model(random_model: Callable[..., CircuitModel]) -> CircuitModel:
    m = random_model(n_layers=2, n_heads=3, d_model=16, d_head=4, d_vocab=30, n_ctx=N_CTX, biases=True)
    m.tokenizer = VocabTokenizer(["<bos>", *(f"w{i}" for i in range(1, 30))], bos_token_id=0)
    return m


def long_ids(n: int, seed: int = 0, bos: bool = True) -> list[int]:
    body = torch.randint(1, 30, (n - int(bos),), generator=torch.Generator().manual_seed(seed)).tolist()
    return [0, *body] if bos else body


def direct_rows(model: CircuitModel, ids: list[int], window: int, stride: int, bos: bool) -> dict[str, np.ndarray]:
    """Every row computed from its own window's forward pass, by the documented rule (written out again here)."""
    n, b = len(ids), int(bos)
    m = window - b
    starts = []
    a = b
    while True:
        starts.append(min(a, n - m))
        if a + m >= n:
            break
        a += stride
    L, H = model.cfg.n_layers, model.cfg.n_heads
    A = np.zeros((L, H, n, n))
    V = np.zeros((L, H, n, n))
    effect = np.full((L, H, n), np.nan)
    loss = np.full(n, np.nan)
    left = np.zeros(n, dtype=int)
    for i in range(n):
        k = 0 if i < b else next(k for k, s in enumerate(starts) if s <= i < s + m)
        s = starts[k]
        positions = [0] * b + list(range(s, s + m))
        feed = torch.tensor([ids[p] for p in positions])
        logits, cache = model.run_with_cache(feed[None])
        r = positions.index(i) if i >= b else 0
        if i + 1 < n:  # the row's own window predicting the text's next token (past the window at its last row)
            loss[i] = -float(logits[0, r].double().log_softmax(-1)[ids[i + 1]])
        left[i] = i - s
        norms = value_norms(model, cache)
        for l in range(L):
            pattern = cache["pattern", l][0].numpy()
            for h in range(H):
                A[l, h, i, positions] = pattern[h, r]
                V[l, h, i, positions] = value_weighted(pattern[h].astype(np.float32), norms[l, h])[r]
            if i + 1 < n:
                effect[l, :, i] = (cache["result", l][0][r] @ model.W_U[:, ids[i + 1]]).numpy()
    return {"A": A, "V": V, "effect": effect, "loss": loss, "left": left, "starts": np.array(starts)}


@pytest.mark.parametrize(("n", "window", "stride", "bos"), [(41, 16, 5, True), (40, 16, 8, False), (23, 9, 8, True)])
def test_each_row_is_its_earliest_windows_row_as_a_direct_forward_pass_computes_it(
    model: CircuitModel, n: int, window: int, stride: int, bos: bool
) -> None:
    ids = long_ids(n, bos=bos)
    w = AttentionPatterns(model, ids, window=window, stride=stride)
    want = direct_rows(model, ids, window, stride, bos)
    assert w.n_tokens == n and w.windows == {"size": window, "stride": stride, "starts": want["starts"].tolist()}
    assert np.abs(w.attention - want["A"]).max() <= ONE_STEP
    assert w.value_attention is not None and np.abs(w.value_attention - want["V"]).max() <= ONE_STEP
    assert w.logit_effect is not None
    np.testing.assert_allclose(w.logit_effect[..., :-1], want["effect"][..., :-1], rtol=1e-5, atol=1e-5)
    assert np.isnan(w.logit_effect[..., -1]).all() and w.value_norms is None
    assert w.per_token_loss is not None
    np.testing.assert_allclose(w.per_token_loss, want["loss"], rtol=0, atol=1e-5)  # (NaN at the last position in both)
    # the promise of the rule: past the first window, every row has at least m − S tokens of left context
    m = window - int(bos)
    first = m + int(bos)
    assert (want["left"][first:] >= m - stride).all()
    # rows are distributions, with nothing before their window's start but the BOS
    np.testing.assert_allclose(w.attention.sum(-1), 1.0, atol=n * ONE_STEP)


def test_a_text_that_fits_one_window_is_shown_whole(model: CircuitModel) -> None:
    ids = long_ids(12)
    w = AttentionPatterns(model, ids, window=N_CTX)
    np.testing.assert_array_equal(w.attention, AttentionPatterns(model, ids).attention)
    assert w.windows == {} and w.value_norms is not None


def test_a_text_longer_than_the_context_is_refused_before_any_work_saying_how_to_proceed(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model, "run_with_cache", lambda *a, **k: pytest.fail("ran the model"))
    text = " ".join(f"w{1 + i % 29}" for i in range(30))
    with pytest.raises(
        ContextLengthError,
        match=r"text_or_tokens: expected at most n_ctx=16 tokens .*got 31\. .*window=16\) \(each query row from the window that gives it the most left context",
    ):
        AttentionPatterns(model, text)
    with pytest.raises(ContextLengthError, match=r"got 40"):
        AttentionPatterns.from_model(model, long_ids(40))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"window": 17}, ArgumentError, r"window: expected 2\.\.16 \(the model's context, n_ctx\) tokens, got 17"),
        ({"window": 1}, ArgumentError, r"window: expected 2\.\.16"),
        ({"window": 8.0}, ArgumentTypeError, r"window: expected an int"),
        (
            {"window": 16, "stride": 16},
            ArgumentError,
            r"stride: expected 1\.\.15 \(windows of 15 text tokens must overlap or touch",
        ),
        ({"window": 16, "stride": 0}, ArgumentError, r"stride: expected 1\.\.15"),
        ({"stride": 4}, ArgumentError, r"stride: the step between windows needs window= too"),
        ({"window": 16, "long": True}, ArgumentError, r"long: computes a whole long text on demand"),
    ],
)
def test_bad_windows_name_the_argument(
    model: CircuitModel, kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        AttentionPatterns(model, long_ids(40), **kwargs)  # type: ignore[arg-type]


def test_windows_need_a_model() -> None:
    with pytest.raises(ArgumentTypeError, match=r"model: expected a CircuitModel when window is given"):
        AttentionPatterns(window=16)


def test_windows_show_a_progress_bar_when_slow(
    model: CircuitModel, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("circuitwidgets.widgets.attention.source.BAR_DELAY_S", 0.0)  # (every build is "slow")
    AttentionPatterns(model, long_ids(41), window=16, stride=5, progress_bar=True)
    err = capsys.readouterr().err
    assert "AttentionPatterns windows" in err and "/6 " in err, err[-300:]  # 1 + ceil((41 - 1 - 15) / 5) windows
