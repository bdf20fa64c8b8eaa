"""Where TransformerLens computes the same quantity, our numbers agree (config-built random models).

TransformerLens 4 builds attention-only models with ``TransformerBridge`` over its
native architecture (no network); we read its weights into a CircuitModel.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from circuitwidgets.circuits import composition_scores, eigenvalues, full_ov, head_scores, repeated_random_tokens
from circuitwidgets.model import CircuitModel, ModelConfig

pytest.importorskip("transformer_lens")
native = pytest.importorskip("transformer_lens.model_bridge.sources.native")
from transformer_lens.config import TransformerBridgeConfig  # noqa: E402
from transformer_lens.head_detector import (  # noqa: E402
    compute_head_attention_similarity_score,
    get_duplicate_token_head_detection_pattern,
    get_induction_head_detection_pattern,
    get_previous_token_head_detection_pattern,
)

N_LAYERS, N_HEADS, D_MODEL, D_HEAD, D_VOCAB, N_CTX = 3, 4, 24, 6, 300, 40


@pytest.fixture(scope="module")
def pair() -> tuple[Any, CircuitModel]:
    cfg = TransformerBridgeConfig(
        d_model=D_MODEL,
        d_head=D_HEAD,
        n_heads=N_HEADS,
        n_layers=N_LAYERS,
        n_ctx=N_CTX,
        d_vocab=D_VOCAB,
        attn_only=True,
        normalization_type=None,
        positional_embedding_type="standard",
        seed=0,
    )
    bridge = native.boot(cfg, dtype=torch.float64)
    names = ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U", "b_Q", "b_K", "b_V", "b_O", "b_U")
    weights = {name: getattr(bridge, name).detach().clone() for name in names}
    ours = CircuitModel(
        ModelConfig(N_LAYERS, N_HEADS, D_MODEL, D_HEAD, D_VOCAB, N_CTX, positional_embedding_type="standard"),
        weights,
    )
    return bridge, ours


def test_both_models_compute_the_same_logits(pair: tuple[Any, CircuitModel]) -> None:
    bridge, ours = pair
    tokens = torch.arange(12)[None] * 7 % D_VOCAB
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), bridge(tokens))


@pytest.mark.parametrize("kind", ["Q", "K", "V"])
def test_composition_scores_agree_with_all_composition_scores(pair: tuple[Any, CircuitModel], kind: str) -> None:
    bridge, ours = pair
    theirs = bridge.all_composition_scores(kind).scores.detach().numpy()
    scores = composition_scores(ours, kind)  # type: ignore[arg-type]
    earlier = ~np.isnan(scores)
    assert earlier.sum() == N_HEADS**2 * N_LAYERS * (N_LAYERS - 1) // 2
    np.testing.assert_allclose(scores[earlier], theirs[earlier], rtol=1e-8)
    assert (theirs[~earlier] == 0).all()  # TransformerLens writes 0 where we write NaN


@pytest.mark.parametrize("circuit", ["ov", "qk"])
def test_full_circuit_eigenvalues_agree_with_factored_matrix(pair: tuple[Any, CircuitModel], circuit: str) -> None:
    bridge, ours = pair
    W_E = bridge.W_E.detach()
    full = W_E @ bridge.OV @ bridge.W_U.detach() if circuit == "ov" else W_E @ bridge.QK @ W_E.T
    theirs = full.eigenvalues.detach().numpy()  # [L, H, d_head]
    mine = eigenvalues(ours, circuit)  # type: ignore[arg-type]
    for l in range(N_LAYERS):
        for h in range(N_HEADS):
            np.testing.assert_allclose(np.sort_complex(mine[l, h]), np.sort_complex(theirs[l, h]), rtol=1e-7, atol=1e-9)


def test_norm_and_singular_values_agree_with_factored_matrix(pair: tuple[Any, CircuitModel]) -> None:
    bridge, ours = pair
    theirs = (bridge.W_E.detach() @ bridge.OV @ bridge.W_U.detach())[1, 2]
    mine = full_ov(ours, 1, 2)
    assert mine.frobenius_norm() == pytest.approx(float(theirs.norm().detach()), rel=1e-10)
    np.testing.assert_allclose(mine.singular_values().numpy(), theirs.S.detach().numpy(), rtol=1e-8)


@pytest.mark.parametrize(
    ("kind", "pattern_fn"),
    [
        ("previous_token", get_previous_token_head_detection_pattern),
        ("duplicate_token", get_duplicate_token_head_detection_pattern),
        ("induction", get_induction_head_detection_pattern),
    ],
)
def test_head_detectors_agree_with_detect_head(pair: tuple[Any, CircuitModel], kind: str, pattern_fn: Any) -> None:
    """detect_head's "mul" score divides by the sequence length; ours by the number of scored positions."""
    bridge, ours = pair
    n, n_seqs = 8, 3
    tokens = repeated_random_tokens(ours, n, n_seqs, seed=2)  # no BOS for this model: length 2n
    seq_len = tokens.shape[1]
    theirs = np.zeros((N_LAYERS, N_HEADS))
    for row in tokens:
        detection = pattern_fn(row[None].cpu())
        scored = int(detection.sum())
        assert scored == (seq_len - 1 if kind == "previous_token" else n)  # no accidental repeats in r_1..r_n
        _, cache = bridge.run_with_cache(row[None])
        for l in range(N_LAYERS):
            for h in range(N_HEADS):
                score = compute_head_attention_similarity_score(
                    cache["pattern", l][0, h].detach(),
                    detection.to(torch.float64),
                    exclude_bos=False,
                    exclude_current_token=False,
                    error_measure="mul",
                )
                theirs[l, h] += score * seq_len / scored / n_seqs
    np.testing.assert_allclose(head_scores(ours, kind, seq_len=n, n_seqs=n_seqs, seed=2), theirs, rtol=1e-8)  # type: ignore[arg-type]


def test_stacks_of_every_head_agree_with_factored_matrix_batched(pair: tuple[Any, CircuitModel]) -> None:
    """``W_E @ OV(model) @ W_U`` is TransformerLens's ``W_E @ model.OV @ W_U``: norms and spectra, all heads at once."""
    from circuitwidgets.circuits import OV, QK

    bridge, ours = pair
    W_E, W_U = bridge.W_E.detach(), bridge.W_U.detach()
    for theirs, mine in (
        (W_E @ bridge.OV @ W_U, ours.W_E @ OV(ours) @ ours.W_U),
        (W_E @ bridge.QK @ W_E.T, ours.W_E @ QK(ours) @ ours.W_E.T),
    ):
        assert mine.shape == tuple(theirs.shape)
        np.testing.assert_allclose(mine.frobenius_norm().numpy(), theirs.norm().detach().numpy(), rtol=1e-9)
        their_eigs = np.sort_complex(theirs.eigenvalues.detach().numpy())
        np.testing.assert_allclose(np.sort_complex(mine.eigenvalues().numpy()), their_eigs, rtol=1e-7, atol=1e-9)
