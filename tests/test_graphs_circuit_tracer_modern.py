"""Attribution graphs of a Gemma 2 against circuit-tracer 0.5 itself, on the same tiny random model and transcoders.

As ``test_graphs_circuit_tracer.py`` (circuit-tracer in its own environment, ``make .venv-peers/ctracer/.installed``,
which ``make test`` builds), with ``scripts/ctracer_reference.py build-gemma2``: a 3-layer model built by
TransformerLens from a config with its gemma-2 flags (RMS norms before and after each sublayer, grouped-query
attention, rotary, attention and final soft-caps, a sliding window on alternate layers, a query scale, gated MLPs)
and random weights, random JumpReLU transcoders reading ``ln2.hook_normalized`` (our ``mlp_in``) and writing
``hook_mlp_out`` (after the MLP's output norm, as circuit-tracer's Gemma 2 sets). We load the same weights
(the input norms' multipliers folded into the weights that read them, the output norms' kept) and compare our
float64 graph with circuit-tracer's float32 one: adjacency, features chosen, logits and their probabilities (after
the final soft-cap), pruned nodes and edges, scores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from _ctracer import NEEDS_CTRACER, assert_same_graph, run_reference
from safetensors.torch import load_file

from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.graphs.attribution import attribution_matrix
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.tokenizer import VocabTokenizer

pytestmark = [pytest.mark.slow, NEEDS_CTRACER]


@pytest.fixture(scope="module", params=["gemma2", "llama"])
def reference(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp(f"ctracer-{request.param}")
    run_reference("build", str(out), request.param)
    return out


def from_transformer_lens(spec: dict[str, Any], s: dict[str, torch.Tensor]) -> CircuitModel:
    """Our model from a TransformerLens Gemma 2 or Llama state dict (circuit-tracer's wrapped MLP and unembedding
    names)."""
    L = spec["n_layers"]
    gemma = bool(spec.get("use_normalization_before_and_after"))

    def stack(name: str, norm: str | None = None) -> torch.Tensor:
        """Layer tensors stacked, the input norm ``norm``'s multiplier folded into their ``d_model`` rows."""
        return torch.stack(
            [s[f"blocks.{i}.{name}"] * (1 if norm is None else s[f"blocks.{i}.{norm}.w"][:, None]) for i in range(L)]
        )

    weights = {
        "W_E": s["embed.W_E"], "W_U": s["ln_final.w"][:, None] * s["unembed.old_unembed.W_U"],
        "b_U": s["unembed.old_unembed.b_U"], "W_Q": stack("attn.W_Q", "ln1"), "W_K": stack("attn._W_K", "ln1"),
        "W_V": stack("attn._W_V", "ln1"), "W_O": stack("attn.W_O"), "b_Q": stack("attn.b_Q"),
        "b_K": stack("attn._b_K"), "b_V": stack("attn._b_V"), "b_O": stack("attn.b_O"),
        "W_in": stack("mlp.old_mlp.W_in", "ln2"), "W_gate": stack("mlp.old_mlp.W_gate", "ln2"),
        "b_in": stack("mlp.old_mlp.b_in"), "W_out": stack("mlp.old_mlp.W_out"), "b_out": stack("mlp.old_mlp.b_out"),
    }  # fmt: skip
    if gemma:
        weights |= {"post_attn_norm": stack("ln1_post.w"), "post_mlp_norm": stack("ln2_post.w")}
    windows = tuple(spec["window_size"] if t == "local" else None for t in spec.get("attn_types", ()))
    cfg = ModelConfig(
        L, spec["n_heads"], spec["d_model"], spec["d_head"], spec["d_vocab"], spec["n_ctx"],
        positional_embedding_type="rotary", normalization="rms_pre", has_mlp=True, d_mlp=spec["d_mlp"],
        act_fn="gelu_tanh" if gemma else "silu", bos_token_id=0, rotary_dim=spec["rotary_dim"],
        rotary_base=spec.get("rotary_base", 10000.0), n_kv_heads=spec["n_key_value_heads"], post_norm=gemma,
        gated_mlp=True, attn_scale=spec.get("attn_scale"), attn_softcap=spec.get("attn_scores_soft_cap"),
        final_softcap=spec.get("output_logits_soft_cap"), ln_eps=spec["eps"], sliding_windows=windows or None,
    )  # fmt: skip
    vocab = VocabTokenizer(["<bos>", *[f"t{i}" for i in range(1, spec["d_vocab"])]], bos_token_id=0)
    return CircuitModel(cfg, weights, tokenizer=vocab, name="ctracer-tiny-" + ("gemma2" if gemma else "llama"))


def _spec(out: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads((out / "config.json").read_text())
    return spec


def _state(out: Path) -> dict[str, torch.Tensor]:
    return {k: v.double() for k, v in load_file(str(out / "model.safetensors")).items()}


def _model(out: Path) -> CircuitModel:
    return from_transformer_lens(_spec(out)["model"], _state(out))


def _transcoders(out: Path) -> list[Dictionary]:
    """circuit-tracer's transcoders as ours; a Llama set's (reading ``mlp.hook_in``) with the MLP input norm's weight
    folded into its encoder rows, as our model folds it into ``W_in``."""
    t = {k: v.double() for k, v in load_file(str(out / "transcoders.safetensors")).items()}
    llama = not _spec(out)["model"].get("use_normalization_before_and_after")
    state = _state(out)
    layers = range(_spec(out)["model"]["n_layers"])
    return [_transcoder(t, i, state[f"blocks.{i}.ln2.w"] if llama else None) for i in layers]


def _transcoder(t: dict[str, torch.Tensor], i: int, norm: torch.Tensor | None) -> Dictionary:
    W_enc = t[f"L{i}.W_enc"].T.contiguous()
    threshold = t.get(f"L{i}.activation_function.threshold")
    return Dictionary(
        "transcoder", "relu" if threshold is None else "jumprelu",
        W_enc=W_enc if norm is None else norm[:, None] * W_enc, b_enc=t[f"L{i}.b_enc"], W_dec=t[f"L{i}.W_dec"],
        b_dec=t[f"L{i}.b_dec"], threshold=threshold, layer=i,
    )  # fmt: skip


def test_same_model(reference: Path) -> None:
    spec = json.loads((reference / "config.json").read_text())
    theirs = load_file(str(reference / "logits.safetensors"))["logits"].double()
    ours = _model(reference)(torch.tensor([spec["tokens"]]))[0]
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    if "output_logits_soft_cap" in spec["model"]:
        assert float(theirs.abs().max()) < spec["model"]["output_logits_soft_cap"]  # soft-capped


@pytest.mark.parametrize("name", ["all", "top40"])
def test_same_graph_pruning_and_scores(reference: Path, name: str) -> None:
    spec = json.loads((reference / "config.json").read_text())
    max_nodes, batch = spec["runs"][name]
    dense = attribution_matrix(
        _model(reference), _transcoders(reference), torch.tensor(spec["tokens"]), max_feature_nodes=max_nodes,
        batch=batch,
    )  # fmt: skip
    assert_same_graph(dense, reference, name, spec)
