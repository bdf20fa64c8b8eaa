"""from_hf: Hugging Face GPT-2 and GPT-NeoX (Pythia) models, built from configs with random weights.

Every model here is built offline from a config; nothing is downloaded. Weights,
layer-norm weights and biases are randomised so that folding is exercised.
Attention weights are compared with ``attn_implementation="eager"`` (the only
implementation that returns them); our own forward pass never depends on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers")

from circuitwidgets.errors import (  # noqa: E402
    ArgumentError,
    ArgumentTypeError,
    NetworkRefusedError,
    NonFiniteError,
    UnsupportedArchitectureError,
)
from circuitwidgets.model import CircuitModel  # noqa: E402
from circuitwidgets.sources.huggingface import SUPPORTED_ARCHITECTURES, from_hf  # noqa: E402

TOL_LOGITS = 1e-4
TOL_PATTERN = 1e-5


def _randomise(model: Any, seed: int) -> Any:
    """Gaussian weights everywhere; layer-norm weights around 1 so they matter but stay sane."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            if p.ndim == 1 and name.endswith("weight"):  # layer-norm weight
                p.copy_(1.0 + 0.3 * noise)
            else:
                p.copy_(0.3 * noise)
    return model.eval()


def gpt2(seed: int = 0, **kw: Any) -> Any:
    cfg = {
        "vocab_size": 53,
        "n_positions": 20,
        "n_embd": 16,
        "n_layer": 2,
        "n_head": 4,
        "bos_token_id": 0,
        "eos_token_id": 0,
    } | kw
    return _randomise(transformers.GPT2LMHeadModel(transformers.GPT2Config(attn_implementation="eager", **cfg)), seed)


def neox(seed: int = 0, **kw: Any) -> Any:
    cfg = {
        "vocab_size": 61,
        "max_position_embeddings": 20,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 40,
        "bos_token_id": 0,
        "eos_token_id": 0,
        "rotary_pct": 0.5,
    } | kw
    return _randomise(
        transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(attn_implementation="eager", **cfg)), seed
    )


def _compare(hf: Any, ours: CircuitModel, n_pos: int = 12) -> tuple[float, float]:
    tokens = torch.randint(0, ours.cfg.d_vocab, (2, n_pos), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        out = hf(input_ids=tokens, output_attentions=True)
    logits, cache = ours.run_with_cache(tokens)
    err_logits = float((out.logits - logits).abs().max())
    err_pattern = max(float((out.attentions[l] - cache["pattern", l]).abs().max()) for l in range(ours.cfg.n_layers))
    return err_logits, err_pattern


GPT2_SHAPES = {
    "2l-4h": {},
    "1l-2h-wide-mlp-relu": {"n_layer": 1, "n_head": 2, "n_embd": 24, "n_inner": 40, "activation_function": "relu"},
    "3l-8h-untied-gelu": {
        "n_layer": 3,
        "n_head": 8,
        "n_embd": 32,
        "tie_word_embeddings": False,
        "activation_function": "gelu",
    },
    "inverse-layer-scale": {"scale_attn_by_inverse_layer_idx": True},
    "unscaled-attention": {"scale_attn_weights": False, "n_embd": 8, "n_head": 2},
}


@pytest.mark.parametrize("kw", GPT2_SHAPES.values(), ids=GPT2_SHAPES.keys())
def test_gpt2_logits_and_patterns_equal_transformers(kw: dict[str, Any]) -> None:
    hf = gpt2(**kw)
    ours = from_hf(hf)
    assert ours.cfg.positional_embedding_type == "standard" and ours.cfg.has_mlp
    err_logits, err_pattern = _compare(hf, ours)
    assert err_logits <= TOL_LOGITS
    assert err_pattern <= TOL_PATTERN


NEOX_SHAPES = {
    "pythia-like-parallel-quarter-rotary": {"rotary_pct": 0.25, "hidden_size": 32, "num_attention_heads": 2},
    "sequential-half-rotary": {"use_parallel_residual": False, "rotary_pct": 0.5},
    "parallel-full-rotary-gelu-new": {"rotary_pct": 1.0, "hidden_act": "gelu_new", "rotary_emb_base": 500},
    "no-attention-bias-3l": {
        "attention_bias": False,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "hidden_size": 32,
    },
    "tied-embeddings-relu": {"tie_word_embeddings": True, "hidden_act": "relu"},
}


@pytest.mark.parametrize("kw", NEOX_SHAPES.values(), ids=NEOX_SHAPES.keys())
def test_neox_logits_and_patterns_equal_transformers(kw: dict[str, Any]) -> None:
    hf = neox(**kw)
    ours = from_hf(hf)
    assert ours.cfg.positional_embedding_type == "rotary"
    assert ours.cfg.parallel_attn_mlp == hf.config.use_parallel_residual
    assert ours.cfg.rotary_dim == int(ours.cfg.d_head * hf.config.rope_parameters["partial_rotary_factor"])
    err_logits, err_pattern = _compare(hf, ours)
    assert err_logits <= TOL_LOGITS
    assert err_pattern <= TOL_PATTERN


def test_our_forward_does_not_need_eager_attention() -> None:
    hf = gpt2()
    hf.config._attn_implementation = "sdpa"
    ours = from_hf(hf)
    tokens = torch.randint(0, 53, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (hf(input_ids=tokens).logits - ours(tokens)).abs().max() <= TOL_LOGITS


def test_layer_norm_is_folded_into_the_reading_weights() -> None:
    hf = gpt2()
    ours = from_hf(hf)
    d = ours.cfg.d_model
    ln_w, ln_b = hf.transformer.h[0].ln_1.weight.detach(), hf.transformer.h[0].ln_1.bias.detach()
    W_Q = hf.transformer.h[0].attn.c_attn.weight.detach()[:, :d].reshape(d, 4, 4).permute(1, 0, 2)
    b_Q = hf.transformer.h[0].attn.c_attn.bias.detach()[:d].reshape(4, 4)
    assert torch.allclose(ours.W_Q[0], ln_w[None, :, None] * W_Q, atol=1e-6)
    assert torch.allclose(ours.weight("b_Q")[0], b_Q + torch.einsum("d,hde->he", ln_b, W_Q), atol=1e-6)  # type: ignore[index]
    assert ours.cfg.normalization == "ln_pre"


def test_float64_conversion_is_tighter() -> None:
    # GPT-2: Hugging Face computes rotary angles in float32 even for a float64 model.
    hf = gpt2().double()
    ours = from_hf(hf, dtype=torch.float64)
    assert ours.dtype == torch.float64
    assert _compare(hf, ours)[0] <= 1e-10


def test_conversion_does_not_alias_the_source_weights() -> None:
    hf = gpt2()
    ours = from_hf(hf)
    before = ours.W_E.clone()
    with torch.no_grad():
        hf.transformer.wte.weight.add_(1.0)
    assert torch.equal(ours.W_E, before)


def test_a_model_left_in_training_mode_is_converted_and_left_as_it_was() -> None:
    hf = gpt2().train()
    from_hf(hf)
    assert hf.training


# ------------------------------------------------------------------ tokenizers
def _tokenizer(vocab_size: int) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers

    raw = Tokenizer(models.WordLevel({"<bos>": 0, **{f"w{i}": i for i in range(1, vocab_size)}}, unk_token="<bos>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<bos>", unk_token="<bos>")


def test_tokenizer_is_wrapped_and_survives_save_load(tmp_path: Path) -> None:
    hf = gpt2()
    ours = from_hf(hf, _tokenizer(40))
    tokens = ours.to_tokens("w3 w7 w1")
    assert tokens.tolist() == [[0, 3, 7, 1]]
    assert ours.to_str_tokens("w3 w7") == ["<bos>", "w3", "w7"]
    ours.save(tmp_path)
    loaded = CircuitModel.load(tmp_path)
    assert torch.equal(loaded.to_tokens("w3 w7 w1"), tokens)
    assert torch.equal(loaded(tokens), ours(tokens))


def test_tokenizer_larger_than_the_vocabulary_is_refused() -> None:
    from circuitwidgets.errors import ShapeError

    with pytest.raises(ShapeError, match="tokenizer"):
        from_hf(gpt2(), _tokenizer(80))


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("name", ["gpt2", "EleutherAI/pythia-70m", Path("/models/gpt2")])
def test_hub_names_and_paths_are_refused_without_network(name: Any) -> None:
    with pytest.raises(NetworkRefusedError, match="load the model yourself"):
        from_hf(name)


def test_tokenizer_name_is_refused() -> None:
    with pytest.raises(NetworkRefusedError, match="tokenizer"):
        from_hf(gpt2(), tokenizer="gpt2")


def test_unsupported_architecture_is_named_with_the_supported_ones() -> None:
    cfg = transformers.MixtralConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=2,
    )
    with pytest.raises(UnsupportedArchitectureError, match="MixtralForCausalLM") as info:
        from_hf(transformers.MixtralForCausalLM(cfg))
    for arch in SUPPORTED_ARCHITECTURES:
        assert arch in str(info.value)


def test_a_model_without_lm_head_is_an_unsupported_architecture() -> None:
    with pytest.raises(UnsupportedArchitectureError, match="GPT2Model"):
        from_hf(transformers.GPT2Model(transformers.GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=10)))


def test_a_non_model_is_a_type_error() -> None:
    with pytest.raises(ArgumentTypeError, match="dict"):
        from_hf({"weights": 1})


def test_nan_weight_is_named() -> None:
    hf = gpt2()
    with torch.no_grad():
        hf.transformer.h[1].mlp.c_fc.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match=r"transformer\.h\.1\.mlp\.c_fc\.weight"):
        from_hf(hf)


def test_inf_layer_norm_is_named() -> None:
    hf = neox()
    with torch.no_grad():
        hf.gpt_neox.final_layer_norm.bias[3] = float("inf")
    with pytest.raises(NonFiniteError, match=r"final_layer_norm\.bias"):
        from_hf(hf)


def test_scaled_rotary_is_refused() -> None:
    hf = neox(rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(UnsupportedArchitectureError, match="linear"):
        from_hf(hf)


def test_a_model_unlike_its_config_is_caught_rather_than_silently_wrong() -> None:
    hf = gpt2()
    hf.config.activation_function = "relu"  # the modules were built with gelu_new
    with pytest.raises(UnsupportedArchitectureError, match="differ from the source"):
        from_hf(hf)
    assert isinstance(from_hf(hf, verify=False), CircuitModel)


# ------------------------------------------------------------------ checkpoint directories (safetensors only)
@pytest.mark.parametrize("build", [gpt2, neox], ids=["gpt2", "neox"])
def test_hugging_face_checkpoint_directory_loads_from_safetensors(build: Any, tmp_path: Path) -> None:
    from circuitwidgets.sources.safetensors_file import load_safetensors

    hf = build()
    hf.save_pretrained(tmp_path)
    assert list(tmp_path.glob("*.safetensors"))
    ours = load_safetensors(tmp_path)
    assert _compare(hf, ours)[0] <= TOL_LOGITS


def test_base_model_checkpoint_without_prefix_or_lm_head_loads(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from circuitwidgets.sources.safetensors_file import load_safetensors

    hf = gpt2()  # tied embeddings: the base model's weights are the whole LM
    save_file({k: v.contiguous() for k, v in hf.transformer.state_dict().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(hf.config.to_json_string())
    assert _compare(hf, load_safetensors(tmp_path))[0] <= TOL_LOGITS


def test_our_own_directory_loads_through_the_same_entry_point(tmp_path: Path) -> None:
    from circuitwidgets.sources.safetensors_file import load_safetensors

    ours = from_hf(gpt2())
    ours.save(tmp_path)
    loaded = load_safetensors(tmp_path)
    assert all(torch.equal(v, loaded.weights()[k]) for k, v in ours.weights().items())


def test_pickled_checkpoint_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    import pickle

    from circuitwidgets.errors import ArgumentError
    from circuitwidgets.sources.safetensors_file import load_safetensors

    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
            return (Path.touch, (marker,))

    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps({"wte.weight": Payload()}))
    (tmp_path / "config.json").write_text(gpt2().config.to_json_string())
    with pytest.raises(ArgumentError, match=r"pickle.*pytorch_model\.bin|pytorch_model\.bin.*pickle"):
        load_safetensors(tmp_path)
    assert not marker.exists()


def test_checkpoint_with_a_mismatched_tensor_names_it(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from circuitwidgets.errors import ShapeError
    from circuitwidgets.sources.safetensors_file import load_safetensors

    hf = gpt2()
    state = {k: v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    state["transformer.h.1.attn.c_proj.weight"] = torch.zeros(3, 3)
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(hf.config.to_json_string())
    with pytest.raises(ShapeError, match=r"transformer\.h\.1\.attn\.c_proj\.weight"):
        load_safetensors(tmp_path)


def test_unsupported_checkpoint_type_is_named(tmp_path: Path) -> None:
    from circuitwidgets.sources.safetensors_file import load_safetensors

    (tmp_path / "config.json").write_text('{"model_type": "mamba", "architectures": ["MambaForCausalLM"]}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(UnsupportedArchitectureError, match="mamba"):
        load_safetensors(tmp_path)


def test_a_corrupt_decoder_checkpoint_is_a_typed_error(tmp_path: Path) -> None:
    from circuitwidgets.sources.safetensors_file import load_safetensors

    (tmp_path / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ArgumentError, match=r"not a readable save_pretrained checkpoint.*header"):
        load_safetensors(tmp_path)


def test_checkpoint_tokenizer_json_is_picked_up(tmp_path: Path) -> None:
    from circuitwidgets.sources.safetensors_file import load_safetensors

    gpt2().save_pretrained(tmp_path)
    _tokenizer(40).backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    ours = load_safetensors(tmp_path)
    assert ours.to_str_tokens("w5 w9", prepend_bos=False) == ["w5", "w9"]
