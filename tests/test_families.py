"""Modern decoder families (DESIGN.md §3a) against the source library, on tiny random models.

For every family and several shapes: our logits and attention patterns equal
transformers' (eager attention, float32), conversion folds every norm without
changing a logit, ``save_pretrained`` directories load to the same model, and
the rotary QK circuit at offset ``i − j`` is exactly the score the model
computes between positions ``i`` and ``j``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from families import CASES, CASES_BY_ID, VOCAB, Case, captured_scores

from circuitwidgets import circuits
from circuitwidgets.errors import ArgumentError, OffsetRequiredError, UnsupportedArchitectureError
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources.huggingface import SUPPORTED_ARCHITECTURES, from_hf

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::circuitwidgets._checks.MLPPathsExcludedWarning")

TOL_LOGITS = 1e-4
TOL_PATTERNS = 1e-5
N_POS = 12  # longer than the sliding windows (4) of the windowed cases


def _tokens(seed: int = 1, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, N_POS), generator=torch.Generator().manual_seed(seed))


def _source(hf: Any, tokens: torch.Tensor) -> Any:
    with torch.no_grad():
        return hf(tokens, output_attentions=True)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_logits_and_patterns_equal_the_source(case: Case) -> None:
    hf = case.build()
    ours = from_hf(hf)
    tokens = _tokens()
    expected = _source(hf, tokens)
    logits, cache = ours.run_with_cache(tokens)
    assert (logits - expected.logits).abs().max() <= TOL_LOGITS
    for layer in range(ours.cfg.n_layers):
        assert (cache["pattern", layer] - expected.attentions[layer]).abs().max() <= TOL_PATTERNS


def test_every_supported_family_has_a_case() -> None:
    tested = {case.model for case in CASES}
    decoders = set(SUPPORTED_ARCHITECTURES) - {"GPT2LMHeadModel", "GPTNeoXForCausalLM"}
    assert decoders <= tested


@pytest.mark.parametrize(
    ("case_id", "features"),
    [
        ("llama-gqa2-biases-llama3rope", {"n_kv_heads": 2, "normalization": "rms_pre", "gated_mlp": True}),
        ("llama-mha-tied", {"n_kv_heads": None}),
        ("llama-mqa-linear-rope", {"n_kv_heads": 1}),
        ("mistral-window", {"sliding_windows": (4, 4)}),
        ("qwen2-biases-window", {"sliding_windows": (None, 4)}),
        ("qwen3-qknorm-wide-heads", {"qk_norm": "head", "d_head": 16}),
        (
            "gemma2-softcaps-window",
            {"attn_softcap": 5.0, "final_softcap": 3.0, "post_norm": True, "act_fn": "gelu_tanh"},
        ),
        ("gemma3-local-global", {"qk_norm": "head", "post_norm": True, "sliding_windows": (4, None)}),
        ("phi3-partial-rotary", {"rotary_dim": 4}),
        ("olmo2-postnorm", {"normalization": "rms_post", "qk_norm": "all"}),
        (
            "gemma4-e2b-shaped",
            {
                "head_dims": (8, 16, 8, 16),
                "d_head": 16,
                "n_kv_heads": 2,
                "v_norm": True,
                "kv_sources": (0, 1, 0, 1),
                "d_per_layer": 8,
                "qk_norm": "head",
                "attn_scale": 1.0,
                "sliding_windows": (4, None, 4, None),
                "final_softcap": 30.0,
            },
        ),
        ("gemma4-mha-biases", {"head_dims": (8, 16), "n_kv_heads": None, "kv_sources": None, "d_per_layer": 4}),
    ],
)
def test_each_feature_is_represented_not_refused(case_id: str, features: dict[str, Any]) -> None:
    cfg = from_hf(CASES_BY_ID[case_id].build()).cfg
    for name, value in features.items():
        assert getattr(cfg, name) == value, name


def test_keys_and_values_stay_per_group_under_grouped_query_attention() -> None:
    ours = from_hf(CASES_BY_ID["llama-mqa-linear-rope"].build())
    assert ours.W_K.shape[1] == ours.W_V.shape[1] == 1
    assert ours.W_Q.shape[1] == 4
    assert ours.kv_index.tolist() == [0, 0, 0, 0]


def test_gemma_norm_offset_and_embedding_scale_are_folded() -> None:
    hf = CASES_BY_ID["gemma"].build()
    ours = from_hf(hf, verify=False)
    embed = hf.model.embed_tokens.weight.detach()
    assert torch.allclose(ours.W_E, embed * torch.tensor(32**0.5), atol=1e-6)
    final = 1.0 + hf.model.norm.weight.detach()
    assert torch.allclose(ours.W_U, final[:, None] * hf.lm_head.weight.detach().T, atol=1e-6)


def test_smollm3_nope_layers_have_no_rotation() -> None:
    ours = from_hf(CASES_BY_ID["smollm3-nope"].build())
    rotating = [ours.rotary_freq(layer) is not None for layer in range(ours.cfg.n_layers)]
    assert rotating == [True, False]


# ------------------------------------------------------------------ loading from disk
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_save_pretrained_directory_loads_to_the_same_model(case: Case, tmp_path: Path) -> None:
    hf = case.build()
    hf.save_pretrained(tmp_path)
    from_disk = from_hf(tmp_path)
    in_memory = from_hf(hf)
    tokens = _tokens(seed=3)
    assert from_disk.name == tmp_path.name
    assert (from_disk(tokens) - in_memory(tokens)).abs().max() == 0.0
    assert hf.model.layers[0].self_attn.o_proj.weight.numel() > 0  # an in-memory source is never consumed


def test_bfloat16_checkpoint_stays_bfloat16(tmp_path: Path) -> None:
    hf = CASES_BY_ID["llama-gqa2-biases-llama3rope"].build().to(torch.bfloat16)
    hf.save_pretrained(tmp_path)
    ours = from_hf(tmp_path)
    assert ours.dtype == torch.bfloat16
    assert ours.W_E.dtype == torch.bfloat16
    assert ours.weight("rotary_freq") is not None and ours.weight("rotary_freq").dtype == torch.float32  # type: ignore[union-attr]


def test_pickled_weights_are_refused_unopened(tmp_path: Path) -> None:
    CASES_BY_ID["llama-mha-tied"].build().config.save_pretrained(tmp_path)
    marker = tmp_path / "ran"
    (tmp_path / "pytorch_model.bin").write_bytes(
        b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."  # a pickle that would run a command
    )
    with pytest.raises(ArgumentError, match="never unpickles"):
        from_hf(tmp_path)
    assert not marker.exists()


def test_a_directory_of_an_unsupported_family_is_refused_before_loading(tmp_path: Path) -> None:
    cfg = transformers.MixtralConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=2,
    )
    transformers.MixtralForCausalLM(cfg).save_pretrained(tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match="MixtralForCausalLM"):
        from_hf(tmp_path)


def test_dynamic_rotary_is_refused_with_the_supported_types() -> None:
    case = Case(
        "llama-dynamic",
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(rope_parameters={"rope_type": "dynamic", "rope_theta": 10_000.0, "factor": 2.0}),
    )
    with pytest.raises(UnsupportedArchitectureError, match="dynamic"):
        from_hf(case.build())


# ------------------------------------------------------------------ the rotary QK circuit
@pytest.mark.parametrize(
    "case_id", ["llama-gqa2-biases-llama3rope", "phi3-partial-rotary", "smollm3-nope", "qwen2-yarn-tied"]
)
def test_source_score_is_the_qk_circuit_at_the_offset(case_id: str) -> None:
    case = CASES_BY_ID[case_id]
    hf = case.build()
    if case_id.startswith("llama") or case_id.startswith("qwen2"):
        with torch.no_grad():  # the identity is about the bilinear form: no query/key biases
            for layer in hf.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                    if proj.bias is not None:
                        proj.bias.zero_()
    ours = from_hf(hf)
    tokens = _tokens(seed=5, batch=1)
    captured = captured_scores(hf, tokens)
    _, cache = ours.run_with_cache(tokens, names=["resid_pre", "scale"])
    g = torch.Generator().manual_seed(7)
    for _ in range(12):
        layer = int(torch.randint(0, ours.cfg.n_layers, (1,), generator=g))
        head = int(torch.randint(0, ours.cfg.n_heads, (1,), generator=g))
        i = int(torch.randint(0, N_POS, (1,), generator=g))
        j = int(torch.randint(0, i + 1, (1,), generator=g))
        x = cache["resid_pre", layer][0] / cache["scale", layer][0]  # the normalised residual
        circuit = circuits.W_QK(ours, layer, head, offset=i - j)
        predicted = (x[i] @ circuit.A) @ (circuit.B @ x[j]) / ours.cfg.scale
        assert torch.isclose(predicted, captured[layer][0, head, i, j], atol=1e-4, rtol=1e-4), (layer, head, i, j)


def test_qk_circuit_of_a_rotary_model_needs_an_offset() -> None:
    ours = from_hf(CASES_BY_ID["llama-mha-tied"].build())
    with pytest.raises(OffsetRequiredError, match="offset=0"):
        circuits.W_QK(ours, 0, 0)
    with pytest.raises(OffsetRequiredError):
        circuits.copying_scores(ours, circuit="qk")
    with pytest.raises(OffsetRequiredError):
        circuits.composition_scores(ours, "K")
    circuits.composition_scores(ours, "V")  # values do not rotate
    circuits.copying_scores(ours, circuit="ov")


@pytest.mark.parametrize("offset", ["1", 1.0, -1, N_POS * 100, True])
def test_bad_offsets_are_named(offset: Any) -> None:
    ours = from_hf(CASES_BY_ID["llama-mha-tied"].build())
    with pytest.raises((ArgumentError, TypeError), match="offset"):
        circuits.W_QK(ours, 0, 0, offset=offset)


def test_offset_zero_is_the_unrotated_circuit_and_offsets_differ() -> None:
    ours = from_hf(CASES_BY_ID["llama-gqa2-biases-llama3rope"].build())
    at0 = circuits.W_QK(ours, 1, 3, offset=0).dense()
    plain = ours.W_Q[1, 3] @ ours.W_K[1, ours.cfg.kv_head(3)].T
    assert torch.allclose(at0, plain, atol=1e-6)
    assert not torch.allclose(circuits.W_QK(ours, 1, 3, offset=1).dense(), at0, atol=1e-3)


def test_a_nope_layer_needs_no_offset() -> None:
    ours = from_hf(CASES_BY_ID["smollm3-nope"].build())
    circuits.W_QK(ours, 1, 0)  # layer 1 has no positional encoding
    with pytest.raises(OffsetRequiredError, match="layer 0"):
        circuits.W_QK(ours, 0, 0)


# ------------------------------------------------------------------ weight-space analyses
@pytest.mark.parametrize(
    "case_id", ["llama-gqa2-biases-llama3rope", "gemma2-softcaps-window", "qwen3-qknorm-wide-heads"]
)
def test_analyses_equal_their_dense_definitions(case_id: str) -> None:
    ours = from_hf(CASES_BY_ID[case_id].build(), dtype=torch.float64)
    offset = 2
    g = ours.cfg.kv_head
    for layer, head in ((0, 0), (1, 3)):
        W_Q = ours.W_Q[layer, head]
        freq = ours.rotary_freq(layer)
        if freq is not None:
            from circuitwidgets.model.rotary import rotation_matrix

            W_Q = W_Q @ rotation_matrix(freq, offset, ours.cfg.d_head)
        dense_qk = ours.W_E @ W_Q @ ours.W_K[layer, g(head)].T @ ours.W_E.T
        assert torch.allclose(circuits.full_qk(ours, layer, head, offset=offset).dense(), dense_qk, atol=1e-9)
        dense_ov = ours.W_E @ ours.W_V[layer, g(head)] @ ours.W_O[layer, head] @ ours.W_U
        assert torch.allclose(circuits.full_ov(ours, layer, head).dense(), dense_ov, atol=1e-9)
    scores = circuits.composition_scores(ours, "K", offset=offset)
    ov = ours.W_V[0, g(1)] @ ours.W_O[0, 1]
    qk = circuits.W_QK(ours, 1, 2, offset=offset).dense()
    expected = (ov @ qk.T).norm() / (ov.norm() * qk.norm())
    assert scores[0, 1, 1, 2] == pytest.approx(float(expected), rel=1e-9)
    eigen = circuits.copying_scores(ours, circuit="qk", offset=offset)
    dense = circuits.full_qk(ours, 1, 2, offset=offset).dense()
    eigs = torch.linalg.eigvals(dense)
    assert eigen[1, 2] == pytest.approx(float(eigs.real.sum() / eigs.abs().sum()), abs=1e-8)


def test_qk_norm_and_output_norm_multipliers_are_folded_for_analyses() -> None:
    ours = from_hf(CASES_BY_ID["gemma3-local-global"].build())
    q_norm, post = ours.weight("q_norm"), ours.weight("post_attn_norm")
    assert q_norm is not None and post is not None
    assert torch.allclose(ours.W_Q, ours.weight("W_Q") * q_norm[:, :, None, :])  # type: ignore[operator]
    assert torch.allclose(ours.W_O, ours.weight("W_O") * post[:, None, None, :])  # type: ignore[operator]


def test_folded_views_follow_the_model_to_another_dtype() -> None:
    ours = from_hf(CASES_BY_ID["qwen3-qknorm-wide-heads"].build())
    assert ours.W_Q.dtype == torch.float32
    ours = ours.to(torch.float64)
    assert isinstance(ours, CircuitModel) and ours.W_Q.dtype == torch.float64


# ------------------------------------------------------------------ TransformerLens's bridge
def _bridge(hf: Any, architecture: str) -> Any:
    tl_builder = pytest.importorskip("transformer_lens.model_bridge.sources._bridge_builder")
    return tl_builder.build_bridge_from_module(hf, architecture, hf_config=hf.config)


@pytest.mark.parametrize(
    "case_id", ["llama-gqa2-biases-llama3rope", "gemma2-softcaps-window", "qwen3-qknorm-wide-heads"]
)
def test_a_transformer_lens_bridge_loads_and_matches_its_logits(case_id: str) -> None:
    from circuitwidgets import from_transformer_lens

    case = CASES_BY_ID[case_id]
    hf = case.build()
    ours = from_transformer_lens(_bridge(hf, case.model))  # verify=True: logits equal the bridge's
    tokens = _tokens(seed=9)
    with torch.no_grad():
        assert (ours(tokens) - hf(tokens).logits).abs().max() <= TOL_LOGITS


def test_engine_agrees_with_transformer_lens_on_a_gqa_llama() -> None:
    """Where TransformerLens computes the same thing: QK at offset 0 (it ignores rotary), OV eigen-copying, composition.

    TransformerLens's bridge reads the raw projections (no norm folding), so the
    model keeps unit norm weights here, where folding is the identity.
    """
    from circuitwidgets import from_transformer_lens

    case = CASES_BY_ID["llama-gqa2-biases-llama3rope"]
    torch.manual_seed(0)
    cfg = getattr(transformers, case.config)(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    cfg._attn_implementation = "eager"
    hf = transformers.LlamaForCausalLM(cfg).eval()
    bridge = _bridge(hf, "LlamaForCausalLM")
    ours = from_transformer_lens(bridge, dtype=torch.float64)
    for layer in range(2):
        for head in range(4):
            tl_qk = bridge.QK[layer, head].AB.double()
            assert torch.allclose(circuits.W_QK(ours, layer, head, offset=0).dense(), tl_qk, atol=1e-6)
    with torch.no_grad():
        tl_full_ov = bridge.W_E.double() @ bridge.OV.AB.double() @ bridge.W_U.double()  # [L, H, V, V]
    eigs = torch.linalg.eigvals(tl_full_ov)  # V eigenvalues, all but d_head of them zero up to rounding
    tl_copying = (eigs.real.sum(-1) / eigs.abs().sum(-1)).numpy()
    assert circuits.copying_scores(ours, circuit="ov") == pytest.approx(tl_copying, abs=1e-4)
    for kind in ("Q", "K", "V"):
        tl_scores = bridge.all_composition_scores(kind).detach().double().numpy()  # [L, H, L, H], zeros where undefined
        ours_scores = circuits.composition_scores(ours, kind, offset=0)
        assert ours_scores[0, :, 1, :] == pytest.approx(tl_scores[0, :, 1, :], abs=1e-6)


def test_every_analysis_runs_on_a_bfloat16_model() -> None:
    """A checkpoint kept in bfloat16 (no float32 copy) is usable by every weight-space and forward analysis."""
    ours = from_hf(CASES_BY_ID["llama-gqa2-biases-llama3rope"].build().to(torch.bfloat16))
    assert ours.dtype == torch.bfloat16
    tokens = _tokens(seed=11, batch=1)
    results = [
        circuits.copying_scores(ours),
        circuits.copying_scores(ours, circuit="qk", offset=0),
        circuits.copying_scores(ours, circuit="qk_kcomp", offset=0),
        circuits.composition_scores(ours, "K", offset=1),
        circuits.head_scores(ours, "induction"),
        circuits.path_expansion(ours, tokens[0]).heads,
        circuits.term_importance(ours, tokens).losses,
    ]
    for result in results:
        assert torch.isfinite(torch.as_tensor(result)[~torch.as_tensor(result).isnan()]).all()
    assert len(circuits.skip_trigrams(ours, 0, 0, offset=0)) == 10
