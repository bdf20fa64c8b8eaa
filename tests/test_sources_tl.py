"""from_transformer_lens: TransformerBridge (TransformerLens 4) and HookedTransformer (older releases).

Models are built offline from configs (``TransformerBridge.boot_native``, or a
bridge over a config-built Hugging Face model), with random weights including
layer-norm weights and biases, so that folding is exercised.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: nothing here may reach a hub
tl = pytest.importorskip("transformer_lens")

from circuitwidgets.errors import (  # noqa: E402
    ArgumentTypeError,
    NetworkRefusedError,
    NonFiniteError,
    UnsupportedArchitectureError,
)
from circuitwidgets.model import CircuitModel  # noqa: E402
from circuitwidgets.sources.transformer_lens import from_transformer_lens  # noqa: E402

TOL_LOGITS = 1e-4
TOL_PATTERN = 1e-5


def _bridge_api() -> tuple[Any, Any]:
    try:
        from transformer_lens import TransformerBridge
        from transformer_lens.config import TransformerBridgeConfig
    except ImportError:
        pytest.skip("this TransformerLens has no TransformerBridge")
    if not hasattr(TransformerBridge, "boot_native"):
        pytest.skip("this TransformerLens cannot build a bridge offline (no boot_native)")
    return TransformerBridge, TransformerBridgeConfig


def _randomise(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=p.dtype)
            is_norm_weight = p.ndim == 1 and (name.endswith(".w") or ("ln" in name and name.endswith("weight")))
            p.copy_(1.0 + 0.3 * noise if is_norm_weight else 0.3 * noise)


def native_bridge(seed: int = 0, **kw: Any) -> Any:
    TransformerBridge, TransformerBridgeConfig = _bridge_api()
    cfg = {
        "d_model": 16,
        "d_head": 4,
        "n_heads": 4,
        "n_layers": 2,
        "n_ctx": 20,
        "d_vocab": 37,
        "seed": seed,
        "d_mlp": 32,
        "act_fn": "gelu_new",
    } | kw
    bridge = TransformerBridge.boot_native(TransformerBridgeConfig(**cfg))
    _randomise(bridge.original_model, seed)
    return bridge.eval()


def _compare(source: Any, ours: CircuitModel, n_pos: int = 12) -> tuple[float, float]:
    tokens = torch.randint(0, ours.cfg.d_vocab, (2, n_pos), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, cache = source.run_with_cache(tokens)
    ours_logits, ours_cache = ours.run_with_cache(tokens)
    err_logits = float((logits - ours_logits).abs().max())
    err_pattern = max(
        float((cache[f"blocks.{l}.attn.hook_pattern"] - ours_cache["pattern", l]).abs().max())
        for l in range(ours.cfg.n_layers)
    )
    return err_logits, err_pattern


NATIVE_SHAPES = {
    "attn-only-ln-standard": {"attn_only": True},
    "attn-only-lnpre-rotary": {"attn_only": True, "normalization_type": "LNPre", "positional_embedding_type": "rotary"},
    "attn-only-no-norm-1l": {"attn_only": True, "normalization_type": None, "n_layers": 1},
    "mlp-ln-standard-3l": {"n_layers": 3, "d_model": 24, "n_heads": 3, "d_head": 8},
    "mlp-ln-partial-rotary-relu": {"positional_embedding_type": "rotary", "rotary_dim": 2, "act_fn": "relu"},
}


@pytest.mark.parametrize("kw", NATIVE_SHAPES.values(), ids=NATIVE_SHAPES.keys())
def test_native_bridge_logits_and_patterns_equal_transformer_lens(kw: dict[str, Any]) -> None:
    bridge = native_bridge(**kw)
    ours = from_transformer_lens(bridge)
    assert ours.cfg.has_mlp == (not kw.get("attn_only", False))
    err_logits, err_pattern = _compare(bridge, ours)
    assert err_logits <= TOL_LOGITS
    assert err_pattern <= TOL_PATTERN


@pytest.mark.parametrize("positions", ["standard", "rotary"])
def test_processed_bridge_gives_the_same_model(positions: str) -> None:
    bridge = native_bridge(positional_embedding_type=positions)
    raw = from_transformer_lens(bridge)
    bridge.enable_compatibility_mode(disable_warnings=True)  # fold_ln, centring, value-bias folding
    processed = from_transformer_lens(bridge)
    err_logits, err_pattern = _compare(bridge, processed)
    assert err_logits <= TOL_LOGITS and err_pattern <= TOL_PATTERN
    tokens = torch.arange(10)[None]
    # centring the unembedding shifts every logit of a position by the same amount
    diff = raw(tokens) - processed(tokens)
    assert (diff - diff.mean(-1, keepdim=True)).abs().max() <= TOL_LOGITS


# ------------------------------------------------------------------ bridges over Hugging Face models
def _hf_bridge(kind: str, processed: bool) -> Any:
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    TransformerBridge, _ = _bridge_api()
    if kind == "gpt2":
        hf = transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=40, n_positions=16, n_embd=16, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
            )
        )
    else:
        hf = transformers.GPTNeoXForCausalLM(
            transformers.GPTNeoXConfig(
                vocab_size=40,
                max_position_embeddings=16,
                hidden_size=16,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=32,
                rotary_pct=0.5,
                bos_token_id=0,
                eos_token_id=0,
            )
        )
    _randomise(hf, 1)
    raw = Tokenizer(models.WordLevel({f"w{i}": i for i in range(40)}, unk_token="w0"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="w0", unk_token="w0")
    bridge = TransformerBridge.boot_transformers(f"local-{kind}", hf_model=hf.eval(), tokenizer=tokenizer)
    if processed:
        bridge.enable_compatibility_mode(disable_warnings=True)
    return bridge


@pytest.mark.parametrize("processed", [False, True], ids=["raw", "processed"])
@pytest.mark.parametrize("kind", ["gpt2", "neox"])
def test_bridge_over_hugging_face_model_equals_the_bridge(kind: str, processed: bool) -> None:
    bridge = _hf_bridge(kind, processed)
    ours = from_transformer_lens(bridge)
    assert ours.cfg.architecture == ("gpt2" if kind == "gpt2" else "gpt_neox")
    if kind == "neox":
        assert ours.cfg.rotary_dim == 2 and ours.cfg.parallel_attn_mlp
    err_logits, err_pattern = _compare(bridge, ours)
    assert err_logits <= TOL_LOGITS
    assert err_pattern <= TOL_PATTERN
    assert ours.tokenizer.vocab_size == 40


# ------------------------------------------------------------------ HookedTransformer (TransformerLens < 4)
def _hooked(**kw: Any) -> Any:
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError:
        pytest.skip("HookedTransformer was removed in TransformerLens 4")
    cfg = HookedTransformerConfig(
        **({"n_layers": 2, "d_model": 16, "n_ctx": 20, "d_head": 4, "n_heads": 4, "d_vocab": 37, "act_fn": None} | kw)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TransformerLens 3 announces the removal
        model = HookedTransformer(cfg)
    _randomise(model, 2)
    return model.eval()


HOOKED_SHAPES = {
    "attn-only-shortformer-lnpre": {
        "attn_only": True,
        "positional_embedding_type": "shortformer",
        "normalization_type": "LNPre",
    },
    "attn-only-standard-ln": {"attn_only": True, "normalization_type": "LN"},
    "mlp-rotary-parallel": {
        "act_fn": "gelu",
        "d_mlp": 32,
        "positional_embedding_type": "rotary",
        "rotary_dim": 2,
        "parallel_attn_mlp": True,
    },
    "mlp-rotary-adjacent-pairs": {
        "act_fn": "relu",
        "d_mlp": 32,
        "positional_embedding_type": "rotary",
        "rotary_dim": 4,
        "rotary_adjacent_pairs": True,
    },
}


@pytest.mark.parametrize("kw", HOOKED_SHAPES.values(), ids=HOOKED_SHAPES.keys())
def test_hooked_transformer_logits_and_patterns_equal_transformer_lens(kw: dict[str, Any]) -> None:
    model = _hooked(**kw)
    ours = from_transformer_lens(model)
    err_logits, err_pattern = _compare(model, ours)
    assert err_logits <= TOL_LOGITS
    assert err_pattern <= TOL_PATTERN


def test_shortformer_with_weighted_ln1_is_refused() -> None:
    model = _hooked(attn_only=True, positional_embedding_type="shortformer", normalization_type="LN")
    with pytest.raises(UnsupportedArchitectureError, match=r"blocks\[0\]\.ln1.*shortformer"):
        from_transformer_lens(model)


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("name", ["gpt2", "attn-only-2l", "NeelNanda/GELU_1L512W_C4_Code"])
def test_model_names_are_refused_without_network(name: str) -> None:
    with pytest.raises(NetworkRefusedError, match="from_transformer_lens"):
        from_transformer_lens(name)


def test_a_non_transformer_lens_object_is_a_type_error() -> None:
    with pytest.raises(ArgumentTypeError, match="Linear"):
        from_transformer_lens(torch.nn.Linear(2, 2))


def test_rms_norm_is_an_unsupported_architecture() -> None:
    with pytest.raises(UnsupportedArchitectureError, match="RMS"):
        from_transformer_lens(native_bridge(normalization_type="RMS"))


def test_gated_mlp_is_an_unsupported_architecture() -> None:
    with pytest.raises(UnsupportedArchitectureError, match="gated"):
        from_transformer_lens(native_bridge(gated_mlp=True, act_fn="silu"))


def test_nan_weight_is_named() -> None:
    bridge = native_bridge(attn_only=True)
    with torch.no_grad():
        bridge.original_model.layers[1].attn.k.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match=r"1.*attn\.k\.weight"):
        from_transformer_lens(bridge)


def test_float64_conversion() -> None:
    bridge = native_bridge(attn_only=True)
    ours = from_transformer_lens(bridge, dtype=torch.float64)
    assert ours.dtype == torch.float64
    assert _compare(bridge, ours)[0] <= TOL_LOGITS
