"""The attention view's per-token loss strip: the model's loss predicting the next token at each position.

From a model it must be exactly ``causal.per_token_loss`` and a direct cross-entropy of the
model's logits, for one text, a batch, windows and a long text; from arrays it is checked and
named like ``logit_effect``; ``strip`` chooses it only when it is there; pages carry it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import traitlets
from _comm import from_view
from ipywidgets.widgets.widget import _remove_buffers

import circuitwidgets as cw
from circuitwidgets import AttentionPatterns, causal
from circuitwidgets.activations.loss import next_token_loss
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.attention.tiles import LongText

TEXT = "def add(self, other):\n    return self.value + other.value"


@pytest.fixture(scope="module")
def gelu() -> CircuitModel:
    return cw.load_pretrained("gelu-2l")


def direct_loss(model: CircuitModel, ids: torch.Tensor) -> np.ndarray:
    """Cross-entropy of the model's own logits against the next token, written out with torch's function."""
    with torch.no_grad():
        logits = model(ids[None])[0].double()
    return torch.nn.functional.cross_entropy(logits[:-1], ids[1:], reduction="none").numpy()


def causal_patterns(n_heads: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.tril(rng.random((n_heads, n, n)) + 0.05)
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


# --- values ----------------------------------------------------------------------


def test_a_models_loss_is_per_token_loss_and_the_cross_entropy_of_its_logits(gelu: CircuitModel) -> None:
    ids = gelu.to_tokens(TEXT)[0]
    w = AttentionPatterns(gelu, TEXT)
    assert (
        w.per_token_loss is not None and w.per_token_loss.dtype == np.float32 and w.per_token_loss.shape == (len(ids),)
    )
    # float32 through two paths (the view's run keeps every activation: the written-out steps; per_token_loss keeps
    # none: fused kernels), equal to a few float32 ulps of losses near 10
    np.testing.assert_allclose(w.per_token_loss[:-1], causal.per_token_loss(gelu, ids)[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(w.per_token_loss[:-1], direct_loss(gelu, ids), rtol=0, atol=1e-5)
    assert np.isnan(w.per_token_loss[-1]), "the last position has no next token"
    assert (w.per_token_loss[:-1] > 0).all()


def test_the_loss_comes_from_the_same_forward_pass(gelu: CircuitModel, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = CircuitModel._run  # (every pass: forward, run_with_cache, run_with_hooks)

    def counting(self: CircuitModel, *args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CircuitModel, "_run", counting)
    AttentionPatterns(gelu, TEXT)
    assert len(calls) == 1, f"expected one forward pass for patterns, logit effects and loss, got {len(calls)}"


def test_a_batch_carries_each_prompts_loss_padded_with_nan(gelu: CircuitModel) -> None:
    prompts = [TEXT, "x = 1", "The cat sat on the mat"]
    w = AttentionPatterns(gelu, prompts)
    width = max(w.prompt_lengths)
    assert w.per_token_loss is not None and w.per_token_loss.shape == (3, width)
    for p, text in enumerate(prompts):
        ids = gelu.to_tokens(text)[0]
        n = len(ids)
        np.testing.assert_allclose(
            w.per_token_loss[p, : n - 1], causal.per_token_loss(gelu, ids)[0], rtol=1e-6, atol=1e-6
        )
        assert np.isnan(w.per_token_loss[p, n - 1 :]).all(), f"prompt {p}: its last position and padding are NaN"


def test_a_long_text_computed_on_demand_carries_the_loss(gelu: CircuitModel) -> None:
    ids = gelu.to_tokens(TEXT)[0]
    w = AttentionPatterns(gelu, TEXT, long=True)
    assert w.tile_block > 0, "expected the long-context path"
    assert w.per_token_loss is not None
    np.testing.assert_allclose(w.per_token_loss[:-1], causal.per_token_loss(gelu, ids)[0], atol=1e-6)


def test_next_token_loss_names_logits_that_do_not_fit() -> None:
    with pytest.raises(ShapeError, match=r"^logits: expected \[pos=3, d_vocab\] for 3 token ids, got shape \(2, 5\)"):
        next_token_loss(torch.zeros(2, 5), torch.tensor([0, 1, 2]))
    assert np.isnan(next_token_loss(torch.zeros(1, 5), torch.tensor([3]))).all()


# --- from arrays -----------------------------------------------------------------


def test_from_arrays_accepts_a_loss_per_position() -> None:
    loss = np.array([1.0, 0.5, 2.0, np.nan], dtype=np.float64)
    w = AttentionPatterns.from_arrays(list("abcd"), causal_patterns(2, 4), per_token_loss=loss, strip="loss")
    assert w.strip == "loss" and w.per_token_loss is not None and w.per_token_loss.dtype == np.float32
    np.testing.assert_array_equal(w.per_token_loss, loss.astype(np.float32))
    w2 = AttentionPatterns.from_arrays(list("abcd"), causal_patterns(2, 4), per_token_loss=torch.tensor(loss[None]))
    np.testing.assert_array_equal(w2.per_token_loss, w.per_token_loss)  # [1, n] and torch too


@pytest.mark.parametrize(
    ("loss", "error", "message"),
    [
        (
            np.ones((2, 4)),
            ShapeError,
            r"^per_token_loss: expected shape \(4,\) \[n_tokens\], one loss per position \(not per head\), got \(2, 4\)",
        ),
        (np.ones(3), ShapeError, r"^per_token_loss: expected shape \(4,\) .* got \(3,\)"),
        (
            [1.0, np.inf, 1.0, 1.0],
            NonFiniteError,
            r"^per_token_loss: expected finite values \(or NaN\), got 1 infinite entries",
        ),
        ([1.0, -0.5, 1.0, np.nan], ArgumentError, r"^per_token_loss: expected losses ≥ 0 .* got minimum -0\.5"),
        ("high", ArgumentTypeError, r"^per_token_loss: expected an array of numbers, got str"),
    ],
)
def test_a_bad_loss_is_refused_naming_the_argument(loss: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        AttentionPatterns.from_arrays(list("abcd"), causal_patterns(2, 4), per_token_loss=loss)


def test_a_batch_from_arrays_reads_each_prompts_loss_and_names_the_prompt() -> None:
    tokens = [list("abcd"), list("ab")]
    attention = np.zeros((2, 2, 4, 4), dtype=np.float32)
    attention[0] = causal_patterns(2, 4)
    attention[1, :, :2, :2] = causal_patterns(2, 2, seed=1)
    loss = np.array([[1.0, 2.0, 3.0, np.nan], [4.0, np.nan, 0.0, 0.0]])
    w = AttentionPatterns.from_arrays(tokens, attention, per_token_loss=loss)
    assert w.per_token_loss is not None
    np.testing.assert_array_equal(w.per_token_loss[1], [4.0, np.nan, np.nan, np.nan])  # its own 2 tokens, then padding
    with pytest.raises(ArgumentError, match=r"^per_token_loss\[1\]: expected losses ≥ 0"):
        AttentionPatterns.from_arrays(tokens, attention, per_token_loss=[loss[0], [-1.0, 0.0]])
    with pytest.raises(ShapeError, match=r"^per_token_loss: expected one entry per prompt \(2 prompts in tokens\)"):
        AttentionPatterns.from_arrays(tokens, attention, per_token_loss=loss[:1])
    with pytest.raises(ShapeError, match=r"^per_token_loss\[0\]: expected \[\.\.\., 4\]"):
        AttentionPatterns.from_arrays(tokens, attention, per_token_loss=[np.ones(3), np.ones(2)])


def test_from_qk_takes_the_loss_and_an_export_counts_its_bytes() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 64, 8, generator=g), torch.randn(1, 2, 64, 8, generator=g)
    loss = torch.rand(64, generator=g) * 3
    w = AttentionPatterns.from_qk([f"t{i}" for i in range(64)], q, k, per_token_loss=loss, strip="loss")
    assert w.strip == "loss"
    np.testing.assert_array_equal(w.per_token_loss, loss.numpy())
    with pytest.raises(ShapeError, match=r"^per_token_loss: expected shape \(64,\)"):
        AttentionPatterns.from_qk([f"t{i}" for i in range(64)], q, k, per_token_loss=loss[:10])
    assert w.qk is not None
    text = LongText([f"t{i}" for i in range(64)], w.qk, None, loss.numpy())
    assert text.per_position_bytes == 64 * 4


# --- the strip setting, the wire and pages -----------------------------------------


def test_strip_chooses_the_loss_only_when_it_is_there() -> None:
    bare = AttentionPatterns.from_arrays(list("abcd"), causal_patterns(2, 4))
    assert bare.strip == "logit_effect" and bare.per_token_loss is None
    with pytest.raises(
        traitlets.TraitError,
        match=r"'strip' trait of AttentionPatterns expected 'logit_effect': the loss strip needs per_token_loss",
    ):
        bare.strip = "loss"
    with pytest.raises(traitlets.TraitError, match=r"expected one of \('logit_effect', 'loss'\), got 'entropy'"):
        bare.strip = "entropy"
    with_loss = AttentionPatterns.from_arrays(
        list("abcd"), causal_patterns(2, 4), per_token_loss=[1.0, 1.0, 1.0, np.nan]
    )
    with_loss.strip = "loss"
    with pytest.raises(
        traitlets.TraitError,
        match=r"'per_token_loss' trait of AttentionPatterns expected shape \[4\] \[n_tokens\], got \[5\]",
    ):
        with_loss.per_token_loss = np.ones(5, dtype=np.float32)
    with_loss.set_data(list("abc"), causal_patterns(2, 3))
    assert with_loss.per_token_loss is None and with_loss.strip == "logit_effect", "new data without a loss drops it"


def test_the_loss_crosses_as_a_buffer_and_a_saved_page_keeps_it(gelu: CircuitModel, tmp_path: Path) -> None:
    w = AttentionPatterns(gelu, TEXT, strip="loss")
    state, paths, buffers = _remove_buffers(w.get_state())
    assert ["per_token_loss", "view"] in paths and state["strip"] == "loss"
    sent = next(b for p, b in zip(paths, buffers, strict=True) if p[0] == "per_token_loss")
    np.testing.assert_array_equal(np.frombuffer(bytes(sent), dtype=np.float32), w.per_token_loss)
    page = cw.save_html(w, tmp_path / "loss.html").read_text(encoding="utf-8")
    assert "per_token_loss" in page


def test_the_view_chooses_the_loss_and_is_refused_it_without_one(gelu: CircuitModel) -> None:
    w = AttentionPatterns(gelu, TEXT)
    from_view(w, strip="loss")
    assert w.strip == "loss"
    bare = AttentionPatterns.from_arrays(list("abcd"), causal_patterns(2, 4))
    from_view(bare, strip="loss")  # (a view cannot choose what the kernel did not send; it is put back)
    assert bare.strip == "logit_effect"
