"""Edge attribution with ``log_prob`` and ``loss`` runs its prompts in chunks, with the scores of one pass (float64).

Both are means over prompts (and the positions they read), as ``logit_diff`` is, so each chunk's scores weighted by
its share of prompts sum to the whole set's. Before, only ``logit_diff`` was sliced and these ran every prompt and
variant in one pass (1,000 pairs × 5 steps × 20 tokens: 100,000 token rows at once). Each chunked result is checked
against the same metric written as a plain Python function (which cannot be sliced: one pass) and against the
declared metric in one chunk.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from circuitwidgets.causal import log_prob, loss
from circuitwidgets.causal.declared import LogProb, Loss
from circuitwidgets.graphs import edge_attribution
from circuitwidgets.graphs.components import components_of
from circuitwidgets.graphs.runs import bytes_per_sequence, sliced
from circuitwidgets.model import CircuitModel

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_random_model
from test_graphs_eap import _model_with_mlp, _pair

N, POS = 5, 7


def _prompts(model: CircuitModel) -> tuple[torch.Tensor, torch.Tensor]:
    clean, corrupted, _ = _pair(model, n=N, n_pos=POS)
    return clean, corrupted


def _log_prob_fn(ids: torch.Tensor, rows: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The mean log-probability of ``ids`` ``[batch, len(rows)]`` at ``rows``, as a plain function."""

    def fn(logits: torch.Tensor) -> torch.Tensor:
        lp = logits[:, rows].log_softmax(-1)
        return lp.gather(-1, ids[..., None])[..., 0].mean()

    return fn


def _metrics(model: CircuitModel, clean: torch.Tensor) -> dict[str, tuple[object, object]]:
    """Declared metric and its plain-function twin, for each way of giving the ids."""
    g = torch.Generator().manual_seed(5)
    V = model.cfg.d_vocab
    per_prompt = torch.randint(0, V, (N,), generator=g)
    per_position = torch.randint(0, V, (N, 2), generator=g)
    one = int(torch.randint(0, V, (1,), generator=g))
    row = torch.randint(0, V, (1, 3), generator=g)
    return {
        "one id per prompt, last position": (log_prob(per_prompt.tolist()), _log_prob_fn(per_prompt[:, None], [6])),
        "[batch, 2] ids at two positions": (log_prob(per_position, pos=[2, 5]), _log_prob_fn(per_position, [2, 5])),
        "one id for every prompt": (log_prob(one, pos=-2), _log_prob_fn(torch.full((N, 1), one), [5])),
        "[1, 3] ids shared by the prompts": (log_prob(row, pos=[0, 3, 6]), _log_prob_fn(row.expand(N, 3), [0, 3, 6])),
        "loss at every position but the last": (
            loss(clean),
            lambda logits: -_log_prob_fn(clean[:, 1:], list(range(POS - 1)))(logits),
        ),
        "loss at three positions": (loss(clean, pos=[1, 2, 4]), lambda logits: -_log_prob_fn(clean[:, [2, 3, 5]], [1, 2, 4])(logits)),
    }  # fmt: skip


MODELS = {"attn-only, biases": lambda: make_random_model(biases=True), "LayerNorm + GELU MLPs": _model_with_mlp}


@pytest.mark.parametrize("model_name", sorted(MODELS))
@pytest.mark.parametrize("method", ["eap", "eap-ig-inputs"])
def test_declared_log_prob_and_loss_in_chunks_equal_one_pass(model_name: str, method: str) -> None:
    model = MODELS[model_name]()
    clean, corrupted = _prompts(model)
    one_prompt = 2 * bytes_per_sequence(model, POS, components_of(model))  # 2 variants (steps) of one prompt
    for label, (declared, plain) in _metrics(model, clean).items():
        kw = {"method": method, "steps": 2}
        chunked = edge_attribution(model, clean, corrupted, declared, memory_budget=one_prompt, **kw)  # type: ignore[arg-type]
        whole = edge_attribution(model, clean, corrupted, declared, **kw)  # type: ignore[arg-type]
        fn = edge_attribution(model, clean, corrupted, plain, **kw)  # type: ignore[arg-type]
        scale = np.abs(fn.edges.weight).max()
        assert scale > 0, label
        for got in (chunked, whole):
            np.testing.assert_allclose(got.edges.weight, fn.edges.weight, rtol=0, atol=1e-12 * scale, err_msg=label)
        for key in ("clean_value", "corrupted_value"):
            assert chunked.extra[key] == pytest.approx(fn.extra[key], rel=1e-12, abs=1e-12), (label, key)


def test_sliced_cuts_per_prompt_ids_and_keeps_shared_ones() -> None:
    ids = torch.arange(10).reshape(5, 2)
    part = sliced(LogProb(ids, pos=[1, 2]), 1, 3, 5)
    assert isinstance(part, LogProb) and part.pos == [1, 2]
    assert torch.equal(part.answers, ids[1:3])
    for shared in (torch.tensor(4), torch.tensor([4]), torch.tensor([[1, 2, 3]])):
        kept = sliced(LogProb(shared), 1, 3, 5)
        assert isinstance(kept, LogProb) and torch.equal(kept.answers, shared)
    assert sliced(LogProb(torch.arange(4)), 0, 2, 5) is None  # 4 ids for 5 prompts: refused by the whole metric
    tokens = torch.arange(35).reshape(5, 7)
    cut = sliced(Loss(tokens, pos=[0, 3]), 2, 5, 5)
    assert isinstance(cut, Loss) and cut.pos == [0, 3] and torch.equal(cut.tokens, tokens[2:5])
    assert sliced(Loss(tokens[:4]), 0, 2, 5) is None


def test_edge_patching_with_log_prob_in_chunks_equals_the_plain_function() -> None:
    from circuitwidgets.graphs import edge_patch

    model = _model_with_mlp()
    clean, corrupted = _prompts(model)
    ((declared, plain),) = [v for k, v in _metrics(model, clean).items() if k.startswith("[batch, 2]")]
    one_prompt = bytes_per_sequence(model, POS, components_of(model)) // 3  # edge_patch's per-prompt estimate
    edges = [("embed", "L1H0.q"), ("L0H1", "logits"), ("MLP0", "L1H1.v"), ("L0H0", "MLP1")]
    chunked = edge_patch(model, clean, corrupted, declared, edges, memory_budget=one_prompt)
    fn = edge_patch(model, clean, corrupted, plain, edges)
    assert np.abs(fn.edges.weight).max() > 0
    np.testing.assert_allclose(chunked.edges.weight, fn.edges.weight, rtol=1e-12, atol=1e-12)
