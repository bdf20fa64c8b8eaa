"""``circuitwidgets.causal`` against TransformerLens 4 on the same weights (float64 on both sides).

Each model is built offline and shared by both libraries:

- ``gpt2-ln-mlp``: a tiny Hugging Face GPT-2 (LayerNorm, MLP, learned positions), its norm weights and every
  bias drawn at random; TransformerLens bridges the same Hugging Face object.
- ``llama-gqa-rotary``: the families case ``llama-gqa2-biases-llama3rope`` (4 query heads, 2 key/value heads,
  llama3 rotary scaling, biases, RMSNorm).
- ``gemma2-softcaps``: the families case ``gemma2-softcaps-window`` (attention and final soft-caps, sliding
  window, sandwich norms, grouped-query attention).
- ``attn-only-2l-12h``: the shipped model. Its positions are shortformer's (added to the queries' and keys'
  input only), which TransformerLens's native bridge does not implement (its legacy loader raises
  ``NotImplementedError``); with no norms, shortformer is exactly a model without positions whose queries and
  keys gain ``W_pos @ W_Q`` and ``W_pos @ W_K``, so the TransformerLens side is a native bridge with our
  weights, zero ``W_pos`` and two permanent hooks per layer that add those terms to ``hook_q`` and ``hook_k``.

Compared: activation patching with ``transformer_lens.patching``'s functions (TransformerLens runs one hooked
forward per cell; its result buffer takes torch's default dtype, so the calls run with float64 as default);
direct logit attribution against ``cache.stack_head_results``/``cache.decompose_resid`` with ``apply_ln=True``
dotted with ``tokens_to_residual_directions`` on a bridge in compatibility mode with the norms folded and
*without* centring (``center_writing_weights=False, center_unembed=False``), which is our convention; the
logit lens against TransformerLens's accumulated residual stream with the final norm applied afresh to each
stream; per-token loss against ``loss_per_token=True``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub
pytest.importorskip("transformer_lens")
transformers = pytest.importorskip("transformers")

from families import CASES_BY_ID, VOCAB, randomise_norms_and_biases  # noqa: E402
from transformer_lens import patching as tl_patching  # noqa: E402

import circuitwidgets as cw  # noqa: E402
from circuitwidgets import causal  # noqa: E402
from circuitwidgets.errors import ArgumentError  # noqa: E402
from circuitwidgets.model import CircuitModel  # noqa: E402

#: Both sides in float64; TransformerLens's bridges over Hugging Face models agree with ours to ~1e-7 on logits.
TOL = 1e-6
#: ``per_token_loss`` takes its log-softmax in float32 even for a float64 model (differences ~4e-7).
TOL_LOSS = 1e-5


@dataclass
class Pair:
    """Our model, a TransformerLens bridge over the same weights, and a clean/corrupted prompt pair."""

    ours: CircuitModel
    bridge: Any
    compat: Any  # a bridge with norms folded, nothing centred (direct logit attribution's coordinates)
    clean: torch.Tensor
    corrupted: torch.Tensor
    wrong: int

    def metric(self) -> causal.LogitDiff:
        return causal.logit_diff(self.clean[:, -1].tolist(), self.wrong)

    def tl_metric(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The same logit difference written as a plain TransformerLens metric."""
        correct, wrong = self.clean[:, -1], self.wrong
        rows = torch.arange(self.clean.shape[0])

        def logit_diff(logits: torch.Tensor) -> torch.Tensor:
            return (logits[rows, -1, correct] - logits[rows, -1, wrong]).mean()

        return logit_diff


def _tokenizer(vocab: int) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers

    raw = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="w0", unk_token="w0")


def _boot(hf: Any, compat: bool) -> Any:
    from transformer_lens import TransformerBridge

    bridge = TransformerBridge.boot_transformers("local-x", hf_model=copy.deepcopy(hf), tokenizer=_tokenizer(VOCAB))
    if compat:
        bridge.enable_compatibility_mode(
            disable_warnings=True,
            fold_ln=True,
            center_writing_weights=False,
            center_unembed=False,
            fold_value_biases=False,
        )
    return bridge.eval()


def _prompts(vocab: int, n_pos: int, changed: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randint(3, vocab, (2, n_pos), generator=gen)
    corrupted = clean.clone()
    corrupted[:, changed] = torch.randint(3, vocab, (2,), generator=gen)
    return clean, corrupted


def _hf_pair(hf: Any) -> Pair:
    hf = hf.double().eval()
    ours = cw.from_hf(hf, dtype=torch.float64)
    clean, corrupted = _prompts(VOCAB, 8, 2, seed=0)
    return Pair(ours, _boot(hf, compat=False), _boot(hf, compat=True), clean, corrupted, wrong=4)


def _gpt2() -> Pair:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0
    )
    hf = transformers.GPT2LMHeadModel(config).eval()
    randomise_norms_and_biases(hf)
    return _hf_pair(hf)


def _shortformer_bridge(model: CircuitModel) -> Any:
    """A native bridge computing ``model`` (attention-only, no norms, shortformer positions): see the module doc."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge.sources.native import boot

    c = model.cfg
    L, H, d, dh, V = c.n_layers, c.n_heads, c.d_model, c.d_head, c.d_vocab
    cfg = TransformerBridgeConfig(
        d_model=d, d_head=dh, n_heads=H, n_layers=L, n_ctx=c.n_ctx, d_vocab=V, attn_only=True,
        normalization_type=None, positional_embedding_type="standard", seed=0,
    )  # fmt: skip
    bridge = boot(cfg, dtype=torch.float64)

    def w(name: str) -> torch.Tensor:
        value = model.weight(name)
        assert value is not None, name
        return value.detach().double()

    f64 = {"dtype": torch.float64}
    state = {
        "tok_embed._original_component.weight": w("W_E"),
        "pos._original_component.weight": torch.zeros(c.n_ctx, d, **f64),
        "head._original_component.weight": w("W_U").T,
        "head._original_component.bias": torch.zeros(V, **f64),
    }
    for layer in range(L):
        prefix = f"layers.{layer}._original_component.attn._original_component."
        for x in "qkv":  # nn.Linear rows are (head, d_head)
            state[f"{prefix}{x}._original_component.weight"] = w(f"W_{x.upper()}")[layer].transpose(1, 2).reshape(-1, d)
            state[f"{prefix}{x}._original_component.bias"] = torch.zeros(H * dh, **f64)
        state[f"{prefix}o._original_component.weight"] = w("W_O")[layer].reshape(H * dh, d).T
        state[f"{prefix}o._original_component.bias"] = torch.zeros(d, **f64)
    with torch.no_grad():
        for name, param in bridge.original_model.named_parameters():  # aliases appear once
            param.copy_(state[name])
    W_pos = w("W_pos")

    def add_positions(W: torch.Tensor) -> Callable[..., torch.Tensor]:
        def hook(value: torch.Tensor, hook: Any) -> torch.Tensor:
            return value + torch.einsum("pd,hde->phe", W_pos[: value.shape[1]], W)[None]

        return hook

    for layer in range(L):
        bridge.add_hook(f"blocks.{layer}.attn.hook_q", add_positions(w("W_Q")[layer]), is_permanent=True)
        bridge.add_hook(f"blocks.{layer}.attn.hook_k", add_positions(w("W_K")[layer]), is_permanent=True)
    return bridge.eval()


def _attn_only() -> Pair:
    ours = cw.load_pretrained("attn-only-2l-12h").to(torch.float64)
    bridge = _shortformer_bridge(ours)
    # an induction pair: [BOS] r r[:7] against [BOS] r' r[:7]
    gen = torch.Generator().manual_seed(0)
    first, other = torch.randint(1, 2048, (2, 2, 8), generator=gen)
    bos = torch.zeros(2, 1, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, :7]], dim=1)
    corrupted = torch.cat([bos, other, first[:, :7]], dim=1)
    return Pair(ours, bridge, bridge, clean, corrupted, wrong=int(other[0, 7]))


def _family(case_id: str) -> Callable[[], Pair]:
    return lambda: _hf_pair(CASES_BY_ID[case_id].build())


BUILDERS: dict[str, Callable[[], Pair]] = {
    "gpt2-ln-mlp": _gpt2,
    "llama-gqa-rotary": _family("llama-gqa2-biases-llama3rope"),
    "gemma2-softcaps": _family("gemma2-softcaps-window"),
    "attn-only-2l-12h": _attn_only,
}


@functools.cache
def _built(key: str) -> Pair | str:
    try:
        return BUILDERS[key]()
    except Exception as error:  # a bridge TransformerLens cannot build offline: the reason, for the skip
        if key == "gpt2-ln-mlp":
            raise
        return f"TransformerLens could not bridge {key}: {type(error).__name__}: {error}"


def pair_for(key: str) -> Pair:
    built = _built(key)
    if isinstance(built, str):
        pytest.skip(built)
    return built


@contextlib.contextmanager
def default_float64() -> Iterator[None]:
    """TransformerLens allocates its patching results with torch's default dtype."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


# --------------------------------------------------------------------------------------------- patching
#: TransformerLens function -> our site and dims (TL's ``head_index``/``dest_pos`` are our ``head``/``pos``).
PATCHES: dict[str, tuple[str, tuple[str, ...]]] = {
    "get_act_patch_resid_pre": ("resid_pre", ("layer", "pos")),
    "get_act_patch_resid_mid": ("resid_mid", ("layer", "pos")),
    "get_act_patch_attn_out": ("attn_out", ("layer", "pos")),
    "get_act_patch_mlp_out": ("mlp_out", ("layer", "pos")),
    "get_act_patch_attn_head_out_all_pos": ("z", ("layer", "head")),
    "get_act_patch_attn_head_out_by_pos": ("z", ("layer", "pos", "head")),
    "get_act_patch_attn_head_q_all_pos": ("q", ("layer", "head")),
    "get_act_patch_attn_head_k_all_pos": ("k", ("layer", "head")),
    "get_act_patch_attn_head_v_all_pos": ("v", ("layer", "head")),
    "get_act_patch_attn_head_q_by_pos": ("q", ("layer", "pos", "head")),
    "get_act_patch_attn_head_k_by_pos": ("k", ("layer", "pos", "head")),
    "get_act_patch_attn_head_pattern_all_pos": ("pattern", ("layer", "head")),
    "get_act_patch_attn_head_pattern_by_pos": ("pattern", ("layer", "head", "pos")),
    "get_act_patch_attn_head_pattern_dest_src_pos": ("pattern", ("layer", "head", "dest", "src")),
}
#: The 12-head model's by-position head sweeps take TransformerLens 2 × 16 × 12 forwards each: all-position ones only.
SLOW_ON_12_HEADS = {name for name, (_, by) in PATCHES.items() if len(by) >= 3}
CASES = [(model, fn) for model in BUILDERS for fn in PATCHES]


@pytest.mark.parametrize(("model", "fn"), CASES, ids=[f"{m}-{f.removeprefix('get_act_patch_')}" for m, f in CASES])
def test_patch_equals_transformer_lens_patching(model: str, fn: str) -> None:
    p = pair_for(model)
    site, by = PATCHES[fn]
    if site in ("resid_mid", "mlp_out") and not p.ours.cfg.has_mlp:
        pytest.skip(f"{model} has no MLP: no {site}")
    if site in ("k", "v") and p.ours.cfg.n_kv_heads not in (None, p.ours.cfg.n_heads):
        # Under grouped-query attention our k/v cells are per *query* head (its copy of the group's key/value:
        # patching it changes that head only) while TransformerLens's are per key/value head (shared by the
        # group); the two sweeps patch different things, so there is nothing to compare.
        pytest.skip(f"{model}: k/v by head is per query head here and per key/value head in TransformerLens")
    if model == "attn-only-2l-12h" and fn in SLOW_ON_12_HEADS:
        pytest.skip("TransformerLens's one forward per cell: 384 cells, left to the smaller models")
    if not hasattr(tl_patching, fn):
        pytest.skip(f"this TransformerLens has no transformer_lens.patching.{fn}")
    with torch.no_grad():
        _, clean_cache = p.bridge.run_with_cache(p.clean)
        with default_float64():
            theirs = getattr(tl_patching, fn)(p.bridge, p.corrupted, clean_cache, p.tl_metric())
        corrupted_value = float(p.tl_metric()(p.bridge(p.corrupted)))
    ours = causal.patch(p.ours, p.clean, p.corrupted, p.metric(), site=site, by=by)
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_allclose(ours.values, theirs.double().numpy(), atol=TOL, rtol=0)
    assert ours.corrupted_value == pytest.approx(corrupted_value, abs=TOL)


# ------------------------------------------------------------------------------ direct logit attribution
def _tl_dla(p: Pair) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """TransformerLens's direct logit attribution at the last position, per prompt: heads ``[batch, L, H]`` and
    the components of ``decompose_resid`` by label, each dotted with the answer's residual direction."""
    bridge, c = p.compat, p.ours.cfg
    answers = p.clean[:, -1]
    with torch.no_grad():
        _, cache = bridge.run_with_cache(p.clean)
        directions = bridge.tokens_to_residual_directions(answers)  # [batch, d_model]
        heads = cache.stack_head_results(layer=-1, pos_slice=-1, apply_ln=True)  # [L·H, batch, d_model]
        heads = heads.view(c.n_layers, c.n_heads, *heads.shape[1:])
        post = [getattr(bridge.blocks[layer], "ln1_post", None) for layer in range(c.n_layers)]
        if post[0] is not None:
            # Gemma 2's sandwich norm: TransformerLens's head results are taken before the post-attention norm,
            # ours after it with its per-token scale frozen (so that heads sum to what the layer wrote): apply
            # that norm, scale from TransformerLens's cache, by hand. Its weight is stored as w of (1 + w).
            hf_layers = bridge.original_model.model.layers
            for layer in range(c.n_layers):
                weight = 1.0 + hf_layers[layer].post_attention_layernorm.weight.double()
                scale = cache[f"blocks.{layer}.ln1_post.hook_scale"][:, -1]  # [batch, 1]
                heads[layer] = heads[layer] * weight / scale
        per_head = torch.einsum("lhbd,bd->blh", heads, directions)
        parts, labels = cache.decompose_resid(layer=None, pos_slice=-1, apply_ln=True, return_labels=True)
        per_part = torch.einsum("cbd,bd->bc", parts, directions)
    return per_head, dict(zip(labels, per_part.T, strict=True))


@pytest.mark.parametrize("model", BUILDERS)
def test_logit_attribution_by_head_and_component_equal_transformer_lens(model: str) -> None:
    p = pair_for(model)
    tl_heads, tl_parts = _tl_dla(p)
    answers = p.clean[:, -1]
    heads = causal.logit_attribution(p.ours, p.clean, answers, by="head", reduce="none")
    np.testing.assert_allclose(heads.values, tl_heads.numpy(), atol=TOL, rtol=0)
    parts = causal.logit_attribution(p.ours, p.clean, answers, by="component", reduce="none")
    ours = dict(zip(parts.labels["component"], parts.values.T, strict=True))
    rename = {"embed": "embed", "pos_embed": "pos_embed"} | {
        f"{layer}_{kind}_out": f"L{layer} {kind}" for layer in range(p.ours.cfg.n_layers) for kind in ("attn", "mlp")
    }
    for label, value in tl_parts.items():
        if rename[label] in ours:
            np.testing.assert_allclose(ours[rename[label]], value.numpy(), atol=TOL, rtol=0, err_msg=label)
        else:  # the shortformer stand-in's zero positional embedding
            np.testing.assert_allclose(value.numpy(), 0.0, atol=TOL, err_msg=label)
    assert set(ours) <= {rename[label] for label in tl_parts}
    # and everything (with the unembedding's bias) sums to TransformerLens's logit, before any final soft-cap
    total = parts.values.sum(1) + sum(parts.extra["rest"].values())
    b_U = p.compat.b_U.double()[answers] if p.compat.b_U is not None else 0.0
    np.testing.assert_allclose(total, (sum(tl_parts.values()) + b_U).numpy(), atol=TOL, rtol=0)


@pytest.mark.parametrize("model", ["gpt2-ln-mlp", "llama-gqa-rotary"])
def test_logit_attribution_at_every_position_in_one_call_equals_transformer_lens(model: str) -> None:
    """``pos=slice(None, -1)`` with each position's next token as its answer ``[batch, pos − 1]``, against
    TransformerLens's head results at every position (``pos_slice=None``) dotted with each answer's direction."""
    p = pair_for(model)
    c, nxt = p.ours.cfg, p.clean[:, 1:]
    with torch.no_grad():
        _, cache = p.compat.run_with_cache(p.clean)
        directions = p.compat.tokens_to_residual_directions(nxt)  # [batch, pos − 1, d_model]
        heads = cache.stack_head_results(layer=-1, pos_slice=None, apply_ln=True)[:, :, :-1]
        heads = heads.view(c.n_layers, c.n_heads, *heads.shape[1:])  # [L, H, batch, pos − 1, d_model]
        theirs = torch.einsum("lhbpd,bpd->bplh", heads, directions)
    ours = causal.logit_attribution(p.ours, p.clean, nxt, by="head", pos=slice(None, -1), reduce="none")
    assert ours.dims == ("batch", "pos", "layer", "head")
    np.testing.assert_allclose(ours.values, theirs.numpy(), atol=TOL, rtol=0)
    one = causal.logit_attribution(p.ours, p.clean, nxt[:, 2], by="head", pos=2, reduce="none")
    np.testing.assert_allclose(ours.values[:, 2], one.values, atol=1e-12, rtol=0)
    every = causal.logit_attribution(p.ours, p.clean, nxt[:, -1], by="component", pos="all")
    assert every.dims == ("pos", "component") and every.values.shape[0] == p.clean.shape[1]
    with pytest.raises(ArgumentError, match="pos: expected a position, a list of positions, a slice or 'all'"):
        causal.logit_attribution(p.ours, p.clean, nxt[:, -1], pos="last")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ logit lens and loss
@pytest.mark.parametrize("model", BUILDERS)
def test_logit_lens_equals_the_final_norm_applied_afresh_to_transformer_lens_streams(model: str) -> None:
    """TransformerLens's ``accumulated_resid(apply_ln=True)`` divides every stream by the *final* stream's cached
    scale; our lens normalises each stream by its own, as the lens is usually drawn: so TransformerLens's
    streams go through ``bridge.ln_final`` afresh here."""
    p = pair_for(model)
    bridge = p.compat
    with torch.no_grad():
        _, cache = bridge.run_with_cache(p.clean)
        streams = cache.accumulated_resid(layer=None, apply_ln=False)  # [L + 1, batch, pos, d_model]
        normed = bridge.ln_final(streams) if p.ours.cfg.normalization != "none" else streams
        logits = normed @ bridge.W_U + (bridge.b_U if bridge.b_U is not None else 0.0)
        cap = p.ours.cfg.final_softcap
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        log_probs = logits.double().log_softmax(-1)
    lens = causal.logit_lens(p.ours, p.clean, k=3)
    every = list(range(p.ours.cfg.d_vocab))
    np.testing.assert_allclose(lens.log_prob(every), log_probs.numpy(), atol=TOL, rtol=0)
    np.testing.assert_array_equal(lens.top_ids[..., 0], log_probs.argmax(-1).numpy())


@pytest.mark.parametrize("model", BUILDERS)
def test_per_token_loss_equals_transformer_lens_loss_per_token(model: str) -> None:
    p = pair_for(model)
    with torch.no_grad():
        theirs = p.bridge(p.clean, return_type="loss", loss_per_token=True)
    np.testing.assert_allclose(causal.per_token_loss(p.ours, p.clean), theirs.double().numpy(), atol=TOL_LOSS, rtol=0)
