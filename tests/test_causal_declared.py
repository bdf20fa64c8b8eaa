"""Metrics that declare what they read: the shipped ones equal their definitions, sweeps with them equal sweeps with
the plain functions (float64), only the declared logits are unembedded, and reading past a declaration is refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from circuitwidgets import causal
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel


@pytest.fixture(scope="module")
def prompts() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    clean = torch.randint(1, 2048, (2, 10), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 4] = torch.randint(1, 2048, (2,), generator=gen)
    return clean, corrupted


def _plain_log_prob(answers: torch.Tensor, pos: list[int]) -> Any:
    def fn(logits: torch.Tensor) -> torch.Tensor:
        lp = logits.log_softmax(-1)[:, pos]
        return lp.gather(-1, answers[:, :, None])[..., 0].mean()

    return fn


def _plain_loss(tokens: torch.Tensor, start: int) -> Any:
    def fn(logits: torch.Tensor) -> torch.Tensor:
        lp = logits[:, start:-1].log_softmax(-1)
        return -lp.gather(-1, tokens[:, start + 1 :, None])[..., 0].mean()

    return fn


def test_shipped_metrics_equal_their_definitions() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 11, generator=gen, dtype=torch.float64)
    tokens = torch.randint(0, 11, (3, 7), generator=gen)
    answers = torch.randint(0, 11, (3, 2), generator=gen)
    assert float(causal.log_prob(answers, pos=[2, 5])(logits)) == pytest.approx(
        float(_plain_log_prob(answers, [2, 5])(logits)), abs=1e-12
    )
    assert float(causal.loss(tokens, pos=slice(3, -1))(logits)) == pytest.approx(
        float(_plain_loss(tokens, 3)(logits)), abs=1e-12
    )
    one = causal.log_prob(answers[:, 0], pos=-1)(logits)  # one id per prompt at one position
    assert float(one) == pytest.approx(float(logits[:, -1].log_softmax(-1)[torch.arange(3), answers[:, 0]].mean()))


@pytest.mark.parametrize("kind", ["log_prob", "loss", "reads"])
def test_sweeps_with_declared_metrics_equal_the_plain_functions(
    gelu: CircuitModel, prompts: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean, corrupted = prompts
    answers = clean[:, 6:]
    if kind == "log_prob":
        declared: Any = causal.log_prob(answers, pos=[5, 6, 7, 8])
        plain: Any = _plain_log_prob(answers, [5, 6, 7, 8])
        read, columns = [5, 6, 7, 8], None
    elif kind == "loss":
        declared, plain = causal.loss(clean, pos=slice(4, -1)), _plain_loss(clean, 4)
        read, columns = [4, 5, 6, 7, 8], None
    else:

        def plain(logits: torch.Tensor) -> torch.Tensor:
            return logits[:, -1, 7].mean() - logits[:, -2, 9].mean()

        declared = causal.reads(plain, pos=[-2, -1], tokens=[7, 9])
        read, columns = [8, 9], [7, 9]
    seen: list[tuple[Any, Any]] = []
    real = gelu.run_from

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append((kwargs.get("positions"), kwargs.get("columns")))
        return real(*args, **kwargs)

    monkeypatch.setattr(gelu, "run_from", spy)
    fast = causal.patch(gelu, clean, corrupted, declared, site="z", by=("layer", "head"))
    assert all(p == read for p, _ in seen)
    assert all((c is None) == (columns is None) and (c is None or c.tolist() == columns) for _, c in seen)
    monkeypatch.setattr(gelu, "run_from", real)
    slow = causal.patch(gelu, clean, corrupted, plain, site="z", by=("layer", "head"))
    np.testing.assert_allclose(fast.values, slow.values, atol=1e-9, rtol=0)
    assert fast.clean_value == pytest.approx(slow.clean_value, abs=1e-9)


def test_reading_past_a_declaration_is_refused_by_name(gelu: CircuitModel, prompts: Any) -> None:
    clean, corrupted = prompts

    def greedy(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1].log_softmax(-1)[:, 7].mean()  # reads every id at the last position

    with pytest.raises(ArgumentError, match=r"greedy read logits outside what it declared .*tokens=\[7\]"):
        causal.patch(gelu, clean, corrupted, causal.reads(greedy, pos=-1, tokens=[7]), site="z", by=("layer", "head"))
    with pytest.raises(ArgumentError, match="pos: position 12 is outside a prompt of 10 tokens"):
        causal.patch(gelu, clean, corrupted, causal.log_prob(7, pos=12), site="z", by=("layer", "head"))
    with pytest.raises(ArgumentError, match="no next token"):
        causal.patch(gelu, clean, corrupted, causal.loss(clean, pos=slice(0, None)), site="z", by=("layer", "head"))
