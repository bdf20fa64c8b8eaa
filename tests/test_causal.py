"""The causal engine against its slow definitions: one forward pass per cell with a hook, on the shipped models
and on every family's tiny random model (norms, biases, GQA, rotary, soft-caps, output norms)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from families import CASES, CASES_BY_ID, VOCAB

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.causal.sites import SITE_AXES
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError, UnsupportedArchitectureError
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources.huggingface import from_hf


def _slow_patch(
    model: CircuitModel, clean: torch.Tensor, corrupted: torch.Tensor, metric: Any, site: str, cell: dict[str, int]
) -> float:
    """The definition: the corrupted run with one cell of ``site`` set to the clean run's value."""
    _, cache = model.run_with_cache(clean, names=[site])
    source = cache[site, cell["layer"]]

    def hook(value: torch.Tensor) -> torch.Tensor:
        out = value.clone()
        index: list[Any] = [slice(None)] * value.ndim
        for name, i in cell.items():
            if name != "layer":
                index[1 + SITE_AXES[site].index(name)] = i
        out[tuple(index)] = source[tuple(index)]
        return out

    return float(metric(model.run_with_hooks(corrupted, {(site, cell["layer"]): hook})))


SWEEPS = [
    ("resid_pre", ("layer", "pos")),
    ("resid_mid", ("layer", "pos")),
    ("resid_post", ("pos", "layer")),
    ("attn_out", ("layer", "pos")),
    ("mlp_out", ("layer", "pos")),
    ("z", ("layer", "head")),
    ("z", ("layer", "pos", "head")),
    ("q", ("layer", "head")),
    ("k", ("layer", "pos", "head")),
    ("v", ("layer", "head")),
    ("result", ("layer", "head")),
    ("pattern", ("layer", "head")),
    ("pattern", ("layer", "head", "pos")),
    ("mlp_post", ("layer", "neuron")),
    ("mlp_pre", ("layer", "pos", "neuron")),
]


@pytest.mark.parametrize(("site", "by"), SWEEPS, ids=[f"{s}-{'x'.join(b)}" for s, b in SWEEPS])
def test_every_patch_site_and_dims_equal_one_hooked_run_per_cell(
    gelu: CircuitModel, prompts: Any, site: str, by: tuple[str, ...]
) -> None:
    clean, corrupted = prompts
    metric = causal.logit_diff(clean[:, -1].tolist(), [5, 6])
    result = causal.patch(gelu, clean, corrupted, metric, site=site, by=by)
    assert result.dims == by and np.asarray(result).shape == tuple(
        {"layer": 2, "pos": 10, "head": 8, "neuron": 1024}[d] for d in by
    )
    rng = np.random.default_rng(0)
    for _ in range(3):
        index = tuple(int(rng.integers(0, n)) for n in result.shape)
        expected = _slow_patch(gelu, clean, corrupted, metric, site, dict(zip(by, index, strict=True)))
        assert result.values[index] == pytest.approx(expected, abs=1e-9)
    assert result.clean_value == pytest.approx(float(metric(gelu(clean))), abs=1e-9)
    assert result.corrupted_value == pytest.approx(float(metric(gelu(corrupted))), abs=1e-9)


def test_normalised_patching_restores_one_at_the_last_residual_stream_and_says_so(
    gelu: CircuitModel, prompts: Any
) -> None:
    clean, corrupted = prompts
    result = causal.patch(gelu, clean, corrupted, causal.normalised(causal.logit_diff(clean[:, -1].tolist(), [5, 6])))
    # Patching every position of the stream restores the clean run; the changed position alone does at layer 0.
    assert result.values[0, 3] == pytest.approx(1.0, abs=1e-9)
    assert np.allclose(result.values[0, [0, 1, 2, 4, 5]], 0.0, atol=1e-9)
    assert "normalised" in result.metric and "norms recomputed" in result.describe()


def test_a_plain_callable_metric_works_like_transformer_lens(gelu: CircuitModel, prompts: Any) -> None:
    clean, corrupted = prompts

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1, 7].mean()

    result = causal.patch(gelu, clean, corrupted, metric, site="z", by=("layer", "head"))
    assert result.values[1, 2] == pytest.approx(
        _slow_patch(gelu, clean, corrupted, metric, "z", {"layer": 1, "head": 2}), abs=1e-9
    )
    assert result.metric == "metric (inferred to read position 9 and 1 token id)"  # (the last of 10 positions, id 7)


def test_frozen_norms_replay_the_corrupted_runs_scales(gelu: CircuitModel, prompts: Any) -> None:
    clean, corrupted = prompts
    metric = causal.logit_diff(clean[:, -1].tolist(), [5, 6])
    frozen = causal.patch(gelu, clean, corrupted, metric, site="attn_out", by=("layer", "pos"), freeze_norms=True)
    _, corrupted_cache = gelu.run_with_cache(corrupted)
    _, clean_cache = gelu.run_with_cache(clean, names=["attn_out"])

    def hook(value: torch.Tensor) -> torch.Tensor:
        out = value.clone()
        out[:, 4] = clean_cache["attn_out", 0][:, 4]
        return out

    logits = gelu.run_with_hooks(corrupted, {("attn_out", 0): hook}, freeze_norms=corrupted_cache)
    assert frozen.values[0, 4] == pytest.approx(float(metric(logits)), abs=1e-9)
    assert "frozen" in frozen.convention


def test_path_patching_adds_the_senders_write_to_one_receiver_input_only(gelu: CircuitModel, prompts: Any) -> None:
    clean, corrupted = prompts
    metric = causal.logit_diff(clean[:, -1].tolist(), [5, 6])
    result = causal.path_patch(gelu, clean, corrupted, metric, sender=(0, 3), via="k")
    assert np.isnan(result.values[0]).all() and not np.isnan(result.values[1]).any()
    _, c = gelu.run_with_cache(clean, names=["result"])
    _, k = gelu.run_with_cache(corrupted, names=["result", "resid_pre"])
    delta = c["result", 0][:, :, 3] - k["result", 0][:, :, 3]
    # Definition: layer 1's keys from the stream plus the sender's write; only head 5 gets them.
    _, shifted = gelu.run_with_cache(corrupted, names=["k"], hooks={("resid_pre", 1): lambda v: v + delta})

    def receiver(value: torch.Tensor) -> torch.Tensor:
        out = value.clone()
        out[:, :, 5] = shifted["k", 1][:, :, 5]
        return out

    expected = float(metric(gelu.run_with_hooks(corrupted, {("k", 1): receiver})))
    assert result.values[1, 5] == pytest.approx(expected, abs=1e-9)
    every = causal.path_patch(gelu, clean, corrupted, metric, sender=None, via="v")
    assert every.shape == (2, 8, 2, 8) and np.isnan(every.values[1]).all()


def test_zero_mean_and_resample_ablations_equal_their_definitions(gelu: CircuitModel, prompts: Any) -> None:
    clean, corrupted = prompts
    metric = causal.logit_diff(clean[:, -1].tolist(), [5, 6])
    _, ref = gelu.run_with_cache(corrupted, names=["z"])
    for kind, value in (
        ("zero", lambda v: torch.zeros_like(v)),
        ("mean", lambda v: ref["z", 1].mean(0, keepdim=True).expand_as(v)),
        ("resample", lambda v: ref["z", 1]),
    ):
        result = causal.ablate(gelu, clean, metric, site="z", by=("layer", "head"), kind=kind, reference=corrupted)  # type: ignore[arg-type]

        def hook(v: torch.Tensor, value: Any = value) -> torch.Tensor:
            out = v.clone()
            out[:, :, 6] = value(v)[:, :, 6]
            return out

        expected = float(metric(gelu.run_with_hooks(clean, {("z", 1): hook})))
        assert result.values[1, 6] == pytest.approx(expected, abs=1e-9), kind


def test_attribution_patching_tracks_exact_patching(gelu: CircuitModel, prompts: Any) -> None:
    clean, corrupted = prompts
    metric = causal.logit_diff(clean[:, -1].tolist(), [5, 6])
    exact = causal.patch(gelu, clean, corrupted, metric, site="resid_pre", by=("layer", "pos"))
    approx = causal.attribution_patch(gelu, clean, corrupted, metric, site="resid_pre", by=("layer", "pos"))
    assert approx.dims == exact.dims and approx.shape == exact.shape
    assert np.corrcoef(approx.values.ravel(), (exact.values - exact.corrupted_value).ravel())[0, 1] > 0.8
    heads = causal.attribution_patch(gelu, clean, corrupted, metric, site="z", by=("layer", "pos", "head"))
    assert heads.shape == (2, 10, 8)


@pytest.mark.parametrize("by", ["component", "layer", "head", "neuron"])
def test_logit_attribution_parts_sum_to_the_models_logit(gelu: CircuitModel, prompts: Any, by: str) -> None:
    clean, _ = prompts
    result = causal.logit_attribution(gelu, clean, (clean[:, -1], torch.tensor([5, 6])), by=by, reduce="none")  # type: ignore[arg-type]
    total = result.values.reshape(2, -1).sum(1) + sum(result.extra["rest"].values())
    np.testing.assert_allclose(total, result.extra["model_logits"], atol=1e-9)
    assert "centring applied" in result.convention


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_logit_attribution_sums_exactly_on_every_family(case: Any) -> None:
    model = from_hf(case.build(), dtype=torch.float64)
    tokens = torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))
    for by in ("component", "head") + (("neuron",) if model.cfg.has_mlp else ()):
        result = causal.logit_attribution(model, tokens, 9, by=by, pos=-2, reduce="none")  # type: ignore[arg-type]
        total = result.values.reshape(2, -1).sum(1) + sum(result.extra["rest"].values())
        np.testing.assert_allclose(total, result.extra["logit"], atol=1e-8)
        if model.cfg.final_softcap is None:
            np.testing.assert_allclose(result.extra["logit"], result.extra["model_logits"], atol=1e-8)


@pytest.mark.parametrize("case", [c for c in CASES if c.id.startswith(("llama", "gemma2"))], ids=lambda c: c.id)
def test_patching_equals_its_definition_on_grouped_query_rotary_and_soft_capped_models(case: Any) -> None:
    model = from_hf(case.build(), dtype=torch.float64)
    gen = torch.Generator().manual_seed(2)
    clean = torch.randint(3, VOCAB, (2, 8), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 2] = torch.randint(3, VOCAB, (2,), generator=gen)
    metric = causal.logit_diff(clean[:, -1].tolist(), 4)
    for site, by in (
        ("resid_pre", ("layer", "pos")),
        ("z", ("layer", "head")),
        ("pattern", ("layer", "head")),
        ("k", ("layer", "head")),
    ):
        result = causal.patch(model, clean, corrupted, metric, site=site, by=by)
        cell = {"layer": 1, by[1]: 1}
        assert result.values[1, 1] == pytest.approx(
            _slow_patch(model, clean, corrupted, metric, site, cell), abs=1e-9
        ), site


def test_patching_a_layer_after_shared_keys_and_values_restarts_early_enough() -> None:
    """Gemma 4's sources ``(0, 1, 0, 1)``: a pass that recomputes layer 3 must start at layer 0, not 1, since layer 2,
    on its way, reads layer 0's keys and values (patching layer 3 once failed with a KeyError there)."""
    model = from_hf(CASES_BY_ID["gemma4-e2b-shaped"].build(), dtype=torch.float64)
    assert model.cfg.kv_sources == (0, 1, 0, 1)
    assert [model.restart_layer(layer) for layer in range(4)] == [0, 0, 0, 0]
    gen = torch.Generator().manual_seed(3)
    clean = torch.randint(3, VOCAB, (2, 8), generator=gen)
    corrupted = torch.randint(3, VOCAB, (2, 8), generator=gen)
    metric = causal.logit_diff(clean[:, -1].tolist(), 4)
    result = causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "head"))
    for head in range(model.cfg.n_heads):
        expected = _slow_patch(model, clean, corrupted, metric, "z", {"layer": 3, "head": head})
        assert result.values[3, head] == pytest.approx(expected, abs=1e-9), head


def test_logit_lens_last_row_is_the_models_prediction(gelu: CircuitModel, prompts: Any) -> None:
    clean, _ = prompts
    lens = causal.logit_lens(gelu, clean, k=3)
    assert lens.top_ids.shape == (3, 2, 10, 3) and lens.layer_labels == ["before L0", "before L1", "final"]
    log_probs = gelu(clean).log_softmax(-1)
    np.testing.assert_array_equal(lens.top_ids[-1, :, :, 0], log_probs.argmax(-1).numpy())
    np.testing.assert_allclose(lens.log_prob(7)[-1], log_probs[..., 7].numpy(), atol=1e-9)
    assert lens.log_prob([7, 8]).shape == (3, 2, 10, 2)
    assert (lens.rank(int(lens.top_ids[0, 0, 0, 0]))[0, 0, 0]) == 0


def test_per_token_loss_is_the_cross_entropy_of_the_next_token(gelu: CircuitModel, prompts: Any) -> None:
    clean, _ = prompts
    loss = causal.per_token_loss(gelu, clean)
    expected = torch.nn.functional.cross_entropy(gelu(clean)[:, :-1].transpose(1, 2), clean[:, 1:], reduction="none")
    np.testing.assert_allclose(loss, expected.numpy(), atol=1e-9)


def test_head_patching_finds_the_induction_heads_of_the_12_head_model() -> None:
    """Clean: ``[BOS] r r[:19]`` (induction predicts r[19]); corrupted: the first half replaced by other random
    tokens, so the last token has no earlier occurrence. Restoring one head's output (z, every position) from the
    clean run: only the induction heads bring back the copy; a previous-token head's clean output lets the
    induction heads find the position, but they then copy the corrupted token written there."""
    model = cw.load_pretrained("attn-only-2l-12h")
    gen = torch.Generator().manual_seed(0)
    first = torch.randint(1, 2048, (4, 20), generator=gen)
    other = torch.randint(1, 2048, (4, 20), generator=gen)
    bos = torch.zeros(4, 1, dtype=torch.long)
    clean = torch.cat([bos, first, first[:, :19]], dim=1)
    corrupted = torch.cat([bos, other, first[:, :19]], dim=1)
    metric = causal.normalised(causal.logit_diff(first[:, 19].tolist(), other[:, 19].tolist()))
    result = causal.patch(model, clean, corrupted, metric, site="z", by=("layer", "head"))
    strongest = {labels for labels, _ in result.top(3, absolute=False)}
    assert strongest == {("L1", "H5"), ("L1", "H7"), ("L1", "H9")}, result.top(5)


def test_bad_inputs_name_the_argument_before_any_sweep(gelu: CircuitModel, prompts: Any) -> None:
    clean, corrupted = prompts
    metric = causal.logit_diff(1, 2)
    with pytest.raises(ShapeError, match="corrupted"):
        causal.patch(gelu, clean, corrupted[:, :5], metric)
    with pytest.raises(ArgumentError, match="site"):
        causal.patch(gelu, clean, corrupted, metric, site="nope")
    with pytest.raises(ArgumentError, match="by"):
        causal.patch(gelu, clean, corrupted, metric, site="resid_pre", by=("layer", "head"))
    with pytest.raises(ArgumentError, match="tokens"):
        causal.patch(gelu, clean + 5000, corrupted, metric)
    with pytest.raises(ArgumentError, match="metric"):
        causal.patch(gelu, clean, corrupted, lambda logits: logits[:, -1])
    with pytest.raises(ArgumentError, match="sender"):
        causal.path_patch(gelu, clean, corrupted, metric, sender=(1, 0))
    with pytest.raises(ShapeError, match="reference"):
        causal.ablate(gelu, clean, metric, kind="resample", reference=corrupted[:1])
    with pytest.raises(ArgumentTypeError, match="memory_budget"):
        causal.patch(gelu, clean, corrupted, metric, memory_budget=-1)
    with pytest.raises(ArgumentError, match="site"):
        causal.patch(
            cw.load_pretrained("attn-only-2l"), clean[:, :5] % 100, corrupted[:, :5] % 100, metric, site="mlp_out"
        )


def test_an_exception_inside_a_hook_leaves_nothing_behind(gelu: CircuitModel, prompts: Any) -> None:
    clean, _ = prompts
    before = gelu(clean)

    def broken(value: torch.Tensor) -> torch.Tensor:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        gelu.run_with_hooks(clean, {("z", 0): broken})
    torch.testing.assert_close(gelu(clean), before, atol=0, rtol=0)
    assert not gelu._forward_hooks and not gelu._forward_pre_hooks


def test_the_attention_views_logit_effects_are_exact_direct_logit_attribution(gelu: CircuitModel, prompts: Any) -> None:
    from circuitwidgets.activations.value_paths import logit_effects

    clean, _ = prompts
    _, cache = gelu.run_with_cache(clean, names=["z", "scale_final"])
    effects = logit_effects(gelu, cache, clean[1], seq=1)
    for p in (2, 7):
        exact = causal.logit_attribution(gelu, clean[1:], int(clean[1, p + 1]), by="head", pos=p)
        np.testing.assert_allclose(effects[:, :, p], exact.values, atol=1e-6)
    assert np.isnan(effects[:, :, -1]).all()
    with pytest.raises(ShapeError, match="seq"):
        logit_effects(gelu, cache, clean[0])  # a batched cache names its sequence, never sequence 0 silently
    _, no_scale = gelu.run_with_cache(clean[:1], names=["z"])
    with pytest.raises(ArgumentError, match="scale_final"):
        logit_effects(gelu, no_scale, clean[0])


def test_centred_weights_change_no_prediction_and_centre_every_write() -> None:
    plain = cw.load_pretrained("gelu-2l", dtype=torch.float64)
    centred = cw.load_pretrained("gelu-2l", dtype=torch.float64, center=True)
    tokens = torch.randint(1, 2048, (2, 12), generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(centred(tokens).log_softmax(-1), plain(tokens).log_softmax(-1), atol=1e-9, rtol=0)
    for name in ("W_E", "W_O", "b_O", "W_out", "b_out"):
        assert centred.weight(name).mean(-1).abs().max() < 1e-12, name  # type: ignore[union-attr]
    assert centred.W_U.mean(-1).abs().max() < 1e-12
    attribution = causal.logit_attribution(centred, tokens, (5, 6), by="head")
    assert "centring applied" in attribution.convention
    with pytest.raises(UnsupportedArchitectureError, match="center"):  # RMSNorm keeps the mean: refused
        from_hf(next(c for c in CASES if c.id.startswith("llama")).build()).centered()
