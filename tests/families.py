"""Tiny random models of every supported decoder family, built offline from configs.

Each case names a family, a config and what it exercises (GQA ratio, partial
rotary, tied or untied embeddings, biases, rotary scaling, soft-caps, sliding
windows, QK-norm, output norms, NoPE layers). Norm weights and biases are drawn
at random so that folding them matters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

transformers = __import__("pytest").importorskip("transformers")

VOCAB, HIDDEN, HEADS, LAYERS, N_CTX = 64, 32, 4, 2, 64


@dataclass(frozen=True)
class Case:
    """One family configuration."""

    id: str
    config: str
    model: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self, seed: int = 0) -> Any:
        """The model, in eval mode with eager attention, its norms and biases randomised."""
        torch.manual_seed(seed)
        config_cls = getattr(transformers, self.config)
        base = dict(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=48,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            max_position_embeddings=N_CTX,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )
        cfg = config_cls(**{**base, **self.kwargs})
        cfg._attn_implementation = "eager"
        model = getattr(transformers, self.model)(cfg).eval()
        randomise_norms_and_biases(model)
        return model


def randomise_norms_and_biases(model: Any) -> None:
    """Norm weights, biases and Gemma 4's layer scalars drawn at random (Gemma 1–3's norms store ``w`` of ``1 + w``)."""
    offset = 0.0 if type(model).__name__ in ("GemmaForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM") else 1.0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(offset + 0.3 * torch.randn_like(param))
            elif param.ndim == 1:
                param.copy_(0.1 * torch.randn_like(param))
        for name, buffer in model.named_buffers():
            if name.endswith("layer_scalar"):
                buffer.uniform_(0.5, 1.5)


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 10_000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
YARN_ROPE = {"rope_type": "yarn", "rope_theta": 10_000.0, "factor": 4.0, "original_max_position_embeddings": 16}

CASES = [
    Case(
        "llama-gqa2-biases-llama3rope",
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(num_key_value_heads=2, attention_bias=True, mlp_bias=True, rope_parameters=LLAMA3_ROPE),
    ),
    Case("llama-mha-tied", "LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=4, tie_word_embeddings=True)),
    Case(
        "llama-mqa-linear-rope",
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(num_key_value_heads=1, rope_parameters={"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}),
    ),
    Case("mistral-window", "MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2, sliding_window=4)),
    Case(
        "qwen2-biases-window",
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(num_key_value_heads=2, use_sliding_window=True, sliding_window=4, max_window_layers=1),
    ),
    Case(
        "qwen2-yarn-tied",
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(num_key_value_heads=1, tie_word_embeddings=True, rope_parameters=YARN_ROPE),
    ),
    Case("qwen3-qknorm-wide-heads", "Qwen3Config", "Qwen3ForCausalLM", dict(num_key_value_heads=2, head_dim=16)),
    Case("gemma", "GemmaConfig", "GemmaForCausalLM", dict(num_key_value_heads=1, head_dim=16)),
    Case(
        "gemma2-softcaps-window",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        dict(
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=4,
            query_pre_attn_scalar=12,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0,
        ),
    ),
    Case(
        "gemma3-local-global",
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(num_key_value_heads=2, head_dim=16, sliding_window=4, sliding_window_pattern=2, query_pre_attn_scalar=12),
    ),
    Case(
        "phi3-partial-rotary", "Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=2, partial_rotary_factor=0.5)
    ),
    Case("phi3-mha", "Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=4)),
    Case("olmo2-postnorm", "Olmo2Config", "Olmo2ForCausalLM", dict(num_key_value_heads=2)),
    Case("olmo3-window", "Olmo3Config", "Olmo3ForCausalLM", dict(num_key_value_heads=4, sliding_window=4)),
    Case(
        "smollm3-nope",
        "SmolLM3Config",
        "SmolLM3ForCausalLM",
        dict(num_key_value_heads=2, no_rope_layer_interval=2, tie_word_embeddings=True),
    ),
    # Gemma 4: the per-layer input table is [vocab_size_per_layer_input, layers · hidden_size_per_layer_input],
    # 262144 × 512 by default, so every case sets both.
    Case(
        "gemma4-local-global",
        "Gemma4TextConfig",
        "Gemma4ForCausalLM",
        dict(
            num_key_value_heads=2,
            head_dim=16,
            global_head_dim=16,
            sliding_window=4,
            hidden_size_per_layer_input=0,
            layer_types=["sliding_attention", "full_attention"],
            vocab_size_per_layer_input=VOCAB,
            tie_word_embeddings=False,
        ),
    ),
    Case(
        "gemma4-e2b-shaped",
        "Gemma4TextConfig",
        "Gemma4ForCausalLM",
        GEMMA4_E2B_SHAPED := dict(
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention"] * 2,
            sliding_window=4,
            num_key_value_heads=2,
            head_dim=8,
            global_head_dim=16,
            num_global_key_value_heads=1,
            attention_k_eq_v=True,
            num_kv_shared_layers=2,
            use_double_wide_mlp=True,
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=VOCAB,
            final_logit_softcapping=30.0,
        ),
    ),
    Case(
        "gemma4-mha-biases",
        "Gemma4TextConfig",
        "Gemma4ForCausalLM",
        dict(
            num_key_value_heads=4,
            head_dim=8,
            global_head_dim=16,
            attention_bias=True,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            hidden_size_per_layer_input=4,
            vocab_size_per_layer_input=VOCAB,
        ),
    ),
]
CASES_BY_ID = {case.id: case for case in CASES}


def family_of(case: Case) -> str:
    """The Hugging Face class a case builds."""
    return case.model


def captured_scores(hf: Any, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Each layer's pre-softmax scores ``[batch, head, dest, src]`` from the queries and keys the model passes on.

    A registered attention function receives no mask when causality is implied
    (sdpa's convention), sliding windows included, so it masks by itself:
    causal, and within ``sliding_window`` when the module passes one.
    """
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import repeat_kv

    scores: list[torch.Tensor] = []

    def capture(
        module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Any, **kwargs: Any
    ) -> Any:
        groups = query.shape[1] // key.shape[1]
        s = query @ repeat_kv(key, groups).transpose(-1, -2) * kwargs["scaling"]
        scores.append(s)
        if kwargs.get("softcap"):
            s = kwargs["softcap"] * torch.tanh(s / kwargs["softcap"])
        dest, src = torch.arange(s.shape[-2])[:, None], torch.arange(s.shape[-1])[None, :]
        allowed = src <= dest
        if kwargs.get("sliding_window"):
            allowed &= src > dest - kwargs["sliding_window"]
        if isinstance(mask, torch.Tensor):
            allowed = allowed & mask if mask.dtype == torch.bool else allowed & (mask == 0)
        pattern = s.masked_fill(~allowed, float("-inf")).softmax(-1)
        return (pattern @ repeat_kv(value, groups)).transpose(1, 2).contiguous(), pattern

    AttentionInterface.register("circuitwidgets_capture", capture)
    hf.set_attn_implementation("circuitwidgets_capture")
    try:
        with torch.no_grad():
            hf(tokens)
    finally:
        hf.set_attn_implementation("eager")
    return scores
