"""Gemma 4 (text) against transformers, on tiny random models, and its weight-space circuits against their definitions.

Gemma 4's per-layer features (wider heads on global layers, keys reused as
values, layers sharing an earlier layer's keys and values, a value norm,
per-layer input embeddings, layer scalars) are each represented exactly: the
forward pass equals the source's, and the padded, folded weights give the
circuits the source's own weights define.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from families import CASES_BY_ID, GEMMA4_E2B_SHAPED, VOCAB, Case, captured_scores

from circuitwidgets import circuits
from circuitwidgets.errors import ArgumentError, UnsupportedArchitectureError
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.sources.huggingface import from_hf

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::circuitwidgets._checks.MLPPathsExcludedWarning")

N_POS = 12


def _tokens(seed: int, batch: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, N_POS), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def hf() -> Any:
    """The E2B-shaped case in float64: two head widths, one global key/value head, keys as values, two sharing layers."""
    return CASES_BY_ID["gemma4-e2b-shaped"].build().double()


@pytest.fixture(scope="module")
def ours(hf: Any) -> CircuitModel:
    return from_hf(hf)


def _scalars_before(hf: Any, layer: int) -> float:
    """``c_l``: the product of the layer scalars of the layers before ``layer``."""
    return float(np.prod([float(block.layer_scalar) for block in hf.model.layers[:layer]]))


def _source_circuits(hf: Any, layer: int, head: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W_Q R(offset) W_Kᵀ, W_V W_O)`` ``[d_model, d_model]`` of one head, from the source's own modules at its own width.

    Norm multipliers folded by hand; keys and values from the layer whose
    keys and values this one uses; the rotation by transformers' own
    ``apply_rotary_pos_emb`` on the identity (a query at position ``offset``).
    """
    from transformers.models.gemma4.modeling_gemma4 import apply_rotary_pos_emb

    layers = hf.model.layers
    attn = layers[layer].self_attn
    w = attn.head_dim
    first_shared = hf.config.num_hidden_layers - hf.config.num_kv_shared_layers
    kind = hf.config.layer_types[layer]
    source = (
        layer
        if not attn.is_kv_shared_layer
        else max(j for j in range(first_shared) if hf.config.layer_types[j] == kind)
    )
    kv = layers[source].self_attn
    group = head // (hf.config.num_attention_heads // (kv.k_proj.weight.shape[0] // w))
    cols = slice(head * w, (head + 1) * w)
    kv_cols = slice(group * w, (group + 1) * w)
    pre, pre_kv = layers[layer].input_layernorm.weight, layers[source].input_layernorm.weight
    W_q = pre[:, None] * attn.q_proj.weight.T[:, cols] * attn.q_norm.weight
    W_k = pre_kv[:, None] * kv.k_proj.weight.T[:, kv_cols] * kv.k_norm.weight
    W_v = pre_kv[:, None] * (kv.v_proj if kv.v_proj is not None else kv.k_proj).weight.T[:, kv_cols]
    W_o = attn.o_proj.weight.T[cols] * layers[layer].post_attention_layernorm.weight / _scalars_before(hf, layer)
    freq = getattr(hf.model.rotary_emb, f"{kind}_inv_freq").double()
    angles = torch.cat([offset * freq, offset * freq])
    R = apply_rotary_pos_emb(torch.eye(w, dtype=torch.float64), angles.cos()[None], angles.sin()[None], unsqueeze_dim=0)
    return (W_q @ R @ W_k.T).detach(), (W_v @ W_o).detach()


@pytest.mark.parametrize(("layer", "head"), [(0, 1), (1, 3), (2, 2), (3, 0)])
@pytest.mark.parametrize("offset", [0, 3])
def test_padded_heads_give_the_circuits_of_the_source_weights(
    hf: Any, ours: CircuitModel, layer: int, head: int, offset: int
) -> None:
    """Narrow (8) and wide (16) heads, the global layer's one key/value head, keys as values, shared keys and values."""
    qk, ov = _source_circuits(hf, layer, head, offset)
    with torch.no_grad():
        assert torch.allclose(circuits.W_QK(ours, layer, head, offset=offset).dense(), qk, atol=1e-10)
        assert torch.allclose(circuits.W_OV(ours, layer, head).dense(), ov, atol=1e-10)
    assert ours.cfg.scale == 1.0 / hf.model.layers[layer].self_attn.scaling


def test_source_score_is_the_qk_circuit_at_the_offset_over_the_qk_norm_scalars() -> None:
    """The score between positions i and j, captured from transformers, is ``x_i W_QK(i − j) x_jᵀ / (rms_q rms_k) / scale``.

    ``x_j`` is the normalised residual stream at the layer whose keys this layer
    uses; ``rms_q``, ``rms_k`` are QK-norm's per-token scalars over the head's own width.
    """
    hf = CASES_BY_ID["gemma4-e2b-shaped"].build()
    ours = from_hf(hf)
    tokens = _tokens(seed=5)
    captured = captured_scores(hf, tokens)
    _, cache = ours.run_with_cache(tokens, names=["resid_pre", "scale"])
    cfg = ours.cfg
    g = torch.Generator().manual_seed(7)
    for _ in range(24):
        layer = int(torch.randint(0, cfg.n_layers, (1,), generator=g))
        head = int(torch.randint(0, cfg.n_heads, (1,), generator=g))
        i = int(torch.randint(0, N_POS, (1,), generator=g))
        j = int(torch.randint(max(0, i - (cfg.window(layer) or N_POS) + 1), i + 1, (1,), generator=g))
        source, width = cfg.kv_source(layer), cfg.head_width(layer)
        x = cache["resid_pre", layer][0] / cache["scale", layer][0]
        y = cache["resid_pre", source][0] / cache["scale", source][0]
        raw_q = x[i] @ ours.weight("W_Q")[layer, head]  # type: ignore[index]
        raw_k = y[j] @ ours.weight("W_K")[source, cfg.kv_head(head)]  # type: ignore[index]
        rms_q = (raw_q.pow(2).sum() / width + cfg.ln_eps).sqrt()
        rms_k = (raw_k.pow(2).sum() / width + cfg.ln_eps).sqrt()
        circuit = circuits.W_QK(ours, layer, head, offset=i - j)
        predicted = (x[i] @ circuit.A) @ (circuit.B @ y[j]) / (rms_q * rms_k) / cfg.scale
        assert torch.isclose(predicted, captured[layer][0, head, i, j], atol=1e-4, rtol=1e-4), (layer, head, i, j)


def test_the_residual_stream_is_the_scaled_sum_that_w_o_folds(hf: Any, ours: CircuitModel) -> None:
    """``resid_pre[l] = c_l (embed + Σ_{m<l} out_m / c_m)``: so the analysis ``W_O`` of layer ``m`` carries ``1 / c_m``."""
    _, cache = ours.run_with_cache(_tokens(seed=2))
    outputs = torch.zeros_like(cache["embed"])
    post = ours.weight("post_attn_norm")
    assert post is not None
    for layer in range(ours.cfg.n_layers):
        c = _scalars_before(hf, layer)
        assert torch.allclose(cache["resid_pre", layer], c * (cache["embed"] + outputs), atol=1e-10)
        for name in ("attn_out", "mlp_out", "per_layer_out"):
            outputs = outputs + cache[name, layer] / c
        stored = ours.weight("W_O")[layer]  # type: ignore[index]
        assert torch.allclose(ours.W_O[layer], stored * post[layer] / c, atol=1e-12)
    assert not torch.allclose(torch.tensor([_scalars_before(hf, layer) for layer in range(4)]), torch.ones(4))


def test_shared_layers_hold_their_source_keys_and_values(ours: CircuitModel) -> None:
    assert ours.cfg.kv_sources == (0, 1, 0, 1)
    for name in ("W_K", "W_V", "k_norm"):
        stored = ours.weight(name)
        assert stored is not None
        assert torch.equal(stored[2], stored[0]) and torch.equal(stored[3], stored[1]), name
    # the global layer reuses its keys as values: W_V is W_K before QK-norm
    assert torch.equal(ours.weight("W_V")[1], ours.weight("W_K")[1])  # type: ignore[index]


def test_weight_space_analyses_say_what_they_leave_out(ours: CircuitModel) -> None:
    left_out = " | ".join(ours.weight_space_exclusions)
    for phrase in ("value norms", "MLP", "per-layer input", "layer 2 reads layer 0's", "layer 3 reads layer 1's"):
        assert phrase in left_out, phrase


def test_composition_into_a_shared_layer_from_before_its_source_is_the_definition(ours: CircuitModel) -> None:
    """Layer 3 attends with layer 1's keys, which read layer 0's output: K-composition 0 → 3 is defined and exact."""
    scores = circuits.composition_scores(ours, "K", offset=1)
    for h1, h2 in ((0, 0), (2, 3)):
        ov = circuits.W_OV(ours, 0, h1).dense()
        qk = circuits.W_QK(ours, 3, h2, offset=1).dense()
        expected = (ov @ qk.T).norm() / (ov.norm() * qk.norm())
        assert scores[0, h1, 3, h2] == pytest.approx(float(expected), rel=1e-9)


def test_no_k_or_v_composition_into_a_shared_layer_from_between_its_source_and_itself(ours: CircuitModel) -> None:
    """Layer 2 reuses layer 0's keys and values, computed before layers 0 and 1 wrote anything: no path, score 0."""
    for kind in ("K", "V"):
        scores = (
            circuits.composition_scores(ours, kind, offset=1)
            if kind == "K"
            else circuits.composition_scores(ours, kind)
        )
        assert np.all(scores[0:2, :, 2, :] == 0.0), kind  # layer 2 reads layer 0's keys: layers 0, 1 cannot feed them
        assert np.all(scores[1:3, :, 3, :] == 0.0), kind  # layer 3 reads layer 1's
        assert np.all(scores[0, :, 3, :] > 0.0), kind  # layer 0 wrote before layer 1 computed them: a real path
    eigs = circuits.kcomp_eigenvalues(ours, offset=1)
    assert np.all(eigs[0:2, :, 2] == 0) and np.all(eigs[1:3, :, 3] == 0)
    assert np.all(np.abs(eigs[0, :, 3]).max(axis=-1) > 0)
    q = circuits.composition_scores(ours, "Q", offset=1)
    assert np.all(q[0:2, :, 2, :] > 0.0)  # queries are the layer's own: Q-composition is untouched


def test_every_analysis_runs_or_names_what_it_cannot_do(ours: CircuitModel) -> None:
    tokens = _tokens(seed=11, batch=2)
    results = [
        circuits.copying_scores(ours),
        circuits.copying_scores(ours, circuit="qk", offset=1),
        circuits.composition_scores(ours, "Q", offset=0),
        circuits.composition_scores(ours, "V"),
        circuits.head_scores(ours, "previous_token"),
        circuits.term_importance(ours, tokens).losses,
    ]
    for result in results:
        values = torch.as_tensor(result)
        assert torch.isfinite(values[~values.isnan()]).all() and (~values.isnan()).any()
    assert len(circuits.skip_trigrams(ours, 1, 2, k=5, offset=0)) == 5
    with pytest.raises(UnsupportedArchitectureError, match="path_expansion needs logits linear in each head's output"):
        circuits.path_expansion(ours, tokens[0])


# ------------------------------------------------------------------ refused configurations
def _build(**overrides: Any) -> Any:
    return Case("gemma4", "Gemma4TextConfig", "Gemma4ForCausalLM", {**GEMMA4_E2B_SHAPED, **overrides}).build()


def test_a_mixture_of_experts_block_is_refused_by_name() -> None:
    hf = _build(enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=8)
    with pytest.raises(UnsupportedArchitectureError, match=r"Gemma4ForCausalLM with enable_moe_block=True .* router"):
        from_hf(hf)


def test_bidirectional_attention_is_refused_by_name() -> None:
    hf = _build(use_bidirectional_attention="all")
    with pytest.raises(UnsupportedArchitectureError, match="use_bidirectional_attention='all'"):
        from_hf(hf)


# ------------------------------------------------------------------ the canonical form's own checks
def test_config_refuses_bad_head_widths_and_kv_sources() -> None:
    shape = dict(n_layers=3, n_heads=2, d_model=8, d_head=8, d_vocab=10, n_ctx=16)
    with pytest.raises(ArgumentError, match=r"cfg\.head_dims\[1\]: expected an even int in \[2, d_head=8\], got 3"):
        ModelConfig(**shape, head_dims=(8, 3, 8))
    with pytest.raises(
        ArgumentError, match=r"cfg\.kv_sources\[2\]: expected the index of a layer ≤ 2 that computes its own"
    ):
        ModelConfig(**shape, kv_sources=(0, 0, 1))  # layer 1 reuses layer 0's, so layer 2 cannot read layer 1's
    with pytest.raises(ArgumentError, match=r"cfg\.head_dims: expected 3 entries"):
        ModelConfig(**shape, head_dims=(8, 8))
    with pytest.raises(ArgumentError, match=r"cfg\.rotary_dim: heads of several widths .* got 4"):
        ModelConfig(**shape, head_dims=(8, 4, 8), positional_embedding_type="rotary", rotary_dim=4)


def test_weights_outside_a_narrow_head_or_unlike_the_shared_source_are_refused(ours: CircuitModel) -> None:
    weights = {k: v.clone() for k, v in ours.weights().items()}
    weights["W_Q"][0, 1, :, 5] = 1.0  # a column between the narrow head's two halves (its width is 8 of 16)
    with pytest.raises(
        ArgumentError, match=r"weights\['W_Q'\]\[0\]: a head of width 8 .* zero outside columns \[0, 4\) and \[8, 12\)"
    ):
        CircuitModel(ours.cfg, weights)
    weights = {k: v.clone() for k, v in ours.weights().items()}
    weights["W_V"][3] += 1.0
    with pytest.raises(ArgumentError, match=r"weights\['W_V'\]\[3\]: layer 3 attends with layer 1's keys and values"):
        CircuitModel(ours.cfg, weights)


def test_a_saved_model_loads_with_its_per_layer_features(ours: CircuitModel, tmp_path: Path) -> None:
    ours.save(tmp_path)
    back = CircuitModel.load(tmp_path, dtype=torch.float64)
    assert back.cfg == ours.cfg
    tokens = _tokens(seed=4)
    assert torch.equal(back(tokens), ours(tokens))


# ------------------------------------------------------------------ stored dtypes and other sources
def test_a_bfloat16_checkpoint_stays_bfloat16_and_verifies(tmp_path: Path) -> None:
    CASES_BY_ID["gemma4-e2b-shaped"].build().to(torch.bfloat16).save_pretrained(tmp_path)
    ours = from_hf(tmp_path)  # verify=True: logits within bfloat16's tolerance of the source's
    assert ours.dtype == ours.weight("W_E_per_layer").dtype == torch.bfloat16  # type: ignore[union-attr]
    assert ours.weight("rotary_freq").dtype == torch.float32  # type: ignore[union-attr]


def test_a_transformer_lens_bridge_over_gemma4_loads() -> None:
    from circuitwidgets import from_transformer_lens

    tl_builder = pytest.importorskip("transformer_lens.model_bridge.sources._bridge_builder")
    hf = CASES_BY_ID["gemma4-e2b-shaped"].build()
    bridge = tl_builder.build_bridge_from_module(hf, "Gemma4ForCausalLM", hf_config=hf.config)
    ours = from_transformer_lens(bridge)  # verify=True: logits equal the bridge's
    tokens = _tokens(seed=9, batch=2)
    with torch.no_grad():
        assert (ours(tokens) - hf(tokens).logits).abs().max() <= 1e-4
