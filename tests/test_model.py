"""CircuitModel: the canonical model's forward pass, its hooks, folding, save/load and its refusals."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest
import torch

from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    NonFiniteError,
    ShapeError,
    UnsupportedArchitectureError,
)
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.sources._convert import RawModel, adjacent_pairs_to_rotate_half, fold_layer_norms
from tests.conftest import make_random_model


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tokens(d_vocab: int, batch: int = 2, n_pos: int = 10, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, d_vocab, (batch, n_pos), generator=_gen(seed))


def make_mlp_model(
    parallel: bool = False, positions: str = "standard", dtype: torch.dtype = torch.float64, seed: int = 1
) -> CircuitModel:
    """A layer-normed model with MLPs and every bias, like a folded GPT-2 or Pythia."""
    g = _gen(seed)
    L, H, d, dh, V, n_ctx, d_mlp = 2, 4, 16, 4, 37, 24, 32

    def r(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    weights = {
        "W_E": r(V, d),
        "W_Q": r(L, H, d, dh, std=0.5),
        "W_K": r(L, H, d, dh, std=0.5),
        "W_V": r(L, H, d, dh, std=0.5),
        "W_O": r(L, H, dh, d, std=0.5),
        "b_Q": r(L, H, dh),
        "b_K": r(L, H, dh),
        "b_V": r(L, H, dh),
        "b_O": r(L, d),
        "W_in": r(L, d, d_mlp, std=0.5),
        "b_in": r(L, d_mlp),
        "W_out": r(L, d_mlp, d, std=0.3),
        "b_out": r(L, d),
        "W_U": r(d, V, std=0.5),
        "b_U": r(V),
    }
    if positions != "rotary":
        weights["W_pos"] = r(n_ctx, d)
    cfg = ModelConfig(
        L,
        H,
        d,
        dh,
        V,
        n_ctx,
        positional_embedding_type=positions,
        normalization="ln_pre",
        has_mlp=True,
        d_mlp=d_mlp,
        act_fn="gelu_new",
        parallel_attn_mlp=parallel,
        rotary_dim=2 if positions == "rotary" else None,
    )
    return CircuitModel(cfg, weights, name="mlp-model")


# --------------------------------------------------------------------- folding
def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    x = x - x.mean(-1, keepdim=True)
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w + b


def _unfolded_forward(raw: RawModel, cfg: ModelConfig, tokens: torch.Tensor) -> torch.Tensor:
    """Reference transformer with explicit layer norms (weights and biases applied, nothing folded)."""
    w = raw.weights
    assert raw.ln1 is not None and raw.ln2 is not None and raw.ln_final is not None
    resid = w["W_E"][tokens] + w["W_pos"][: tokens.shape[1]]
    n = tokens.shape[1]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    for layer in range(cfg.n_layers):
        s1, t1 = raw.ln1[layer]
        assert s1 is not None and t1 is not None
        x = _layer_norm(resid, s1, t1, cfg.ln_eps)
        q = torch.einsum("bpd,hde->bphe", x, w["W_Q"][layer]) + w["b_Q"][layer]
        k = torch.einsum("bpd,hde->bphe", x, w["W_K"][layer]) + w["b_K"][layer]
        v = torch.einsum("bpd,hde->bphe", x, w["W_V"][layer]) + w["b_V"][layer]
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(cfg.d_head)
        pattern = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        z = torch.einsum("bhqk,bkhe->bqhe", pattern, v)
        resid = resid + torch.einsum("bqhe,hed->bqd", z, w["W_O"][layer]) + w["b_O"][layer]
        s2, t2 = raw.ln2[layer]
        assert s2 is not None and t2 is not None
        pre = _layer_norm(resid, s2, t2, cfg.ln_eps) @ w["W_in"][layer] + w["b_in"][layer]
        resid = resid + torch.nn.functional.gelu(pre, approximate="tanh") @ w["W_out"][layer] + w["b_out"][layer]
    sf, tf = raw.ln_final
    assert sf is not None and tf is not None
    return _layer_norm(resid, sf, tf, cfg.ln_eps) @ w["W_U"] + w["b_U"]


def test_folding_layer_norm_changes_no_logits() -> None:
    base = make_mlp_model()
    cfg = base.cfg
    g = _gen(7)

    def norm() -> tuple[torch.Tensor, torch.Tensor]:
        return (
            1 + 0.5 * torch.randn(cfg.d_model, generator=g, dtype=torch.float64),
            0.5 * torch.randn(cfg.d_model, generator=g, dtype=torch.float64),
        )

    raw = RawModel(
        dict(base.weights()),
        ln1=[norm() for _ in range(cfg.n_layers)],
        ln2=[norm() for _ in range(cfg.n_layers)],
        ln_final=norm(),
    )
    tokens = _tokens(cfg.d_vocab)
    expected = _unfolded_forward(raw, cfg, tokens)
    folded = CircuitModel(cfg, fold_layer_norms(raw))
    assert (folded(tokens) - expected).abs().max() < 1e-10
    # and folding really moved something: the weights differ from the unfolded ones
    assert not torch.allclose(folded.W_Q, base.W_Q)


def test_adjacent_pair_rotary_reordered_to_rotate_half_keeps_scores() -> None:
    g = _gen(3)
    rd, dh, n = 4, 6, 5
    q, k = (
        torch.randn(1, n, 1, dh, generator=g, dtype=torch.float64),
        torch.randn(1, n, 1, dh, generator=g, dtype=torch.float64),
    )

    def adjacent(x: torch.Tensor) -> torch.Tensor:  # GPT-J / TL-native convention
        inv = 1.0 / (10_000 ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
        ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None]
        cos, sin = ang.cos().repeat_interleave(2, -1)[None, :, None], ang.sin().repeat_interleave(2, -1)[None, :, None]
        xr = x[..., :rd]
        rot = torch.stack((-xr[..., 1::2], xr[..., 0::2]), dim=-1).flatten(-2)
        return torch.cat([xr * cos + rot * sin, x[..., rd:]], -1)

    from circuitwidgets.model.rotary import default_frequencies, rotate

    def _rotary(x: torch.Tensor, rotary_dim: int, base: float) -> torch.Tensor:
        return rotate(x, default_frequencies(rotary_dim, base, torch.float64), torch.arange(x.shape[1]), pos_dim=1)

    weights = {"W_Q": q.clone(), "W_K": k.clone()}
    adjacent_pairs_to_rotate_half(weights, rd)
    expected = torch.einsum("bqhe,bkhe->bqk", adjacent(q), adjacent(k))
    got = torch.einsum("bqhe,bkhe->bqk", _rotary(weights["W_Q"], rd, 10_000.0), _rotary(weights["W_K"], rd, 10_000.0))
    assert (got - expected).abs().max() < 1e-12


# --------------------------------------------------------------------- forward and hooks
def test_patterns_are_causal_probability_distributions() -> None:
    model = make_random_model()
    _, cache = model.run_with_cache(_tokens(model.cfg.d_vocab))
    for layer in range(model.cfg.n_layers):
        pattern = cache["pattern", layer]
        assert pattern.shape == (2, model.cfg.n_heads, 10, 10)
        assert torch.allclose(pattern.sum(-1), torch.ones(()).double())
        assert (pattern.triu(1) == 0).all()


@pytest.mark.parametrize(
    "build",
    [
        lambda: make_random_model(biases=True),
        lambda: make_mlp_model(),
        lambda: make_mlp_model(parallel=True, positions="rotary"),
    ],
)
def test_frozen_own_patterns_reproduce_logits(build: object) -> None:
    model = build()  # type: ignore[operator]
    tokens = _tokens(model.cfg.d_vocab)
    logits, cache = model.run_with_cache(tokens)
    patterns = [cache["pattern", layer] for layer in range(model.cfg.n_layers)]
    frozen = model.run_with_cache(tokens, patterns=patterns)[0]
    assert torch.equal(frozen, logits)


def test_frozen_patterns_are_used_instead_of_computed_ones() -> None:
    model = make_random_model()
    tokens = _tokens(model.cfg.d_vocab)
    uniform = torch.ones(10, 10, dtype=torch.float64).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(2, model.cfg.n_heads, 10, 10)
    _, cache = model.run_with_cache(tokens, patterns=[uniform, None])
    assert torch.equal(cache["pattern", 0], uniform)
    assert not torch.allclose(cache["pattern", 1], uniform)


def test_zero_head_outputs_leave_the_direct_path_W_E_W_U() -> None:
    model = make_random_model(n_layers=2, positional_embedding_type="shortformer")
    tokens = _tokens(model.cfg.d_vocab)
    zeros = [torch.zeros(2, 10, model.cfg.n_heads, model.cfg.d_model, dtype=torch.float64)] * model.cfg.n_layers
    logits, _ = model.run_with_cache(tokens, head_results=zeros)
    direct = (model.W_E @ model.W_U)[tokens]
    assert (logits - direct).abs().max() < 1e-12


def test_head_results_feed_back_reproduce_the_full_model() -> None:
    model = make_random_model(n_layers=2)
    tokens = _tokens(model.cfg.d_vocab)
    logits, cache = model.run_with_cache(tokens)
    results = [cache["result", layer] for layer in range(model.cfg.n_layers)]
    assert (model.run_with_cache(tokens, head_results=results)[0] - logits).abs().max() < 1e-12


def test_override_with_wrong_shape_is_named() -> None:
    model = make_random_model()
    with pytest.raises(ShapeError, match=r"patterns\[0\]"):
        model.run_with_cache(_tokens(model.cfg.d_vocab), patterns=[torch.zeros(1, 1, 1, 1), None])
    with pytest.raises(ShapeError, match="head_results"):
        model.run_with_cache(_tokens(model.cfg.d_vocab), head_results=[None])


def test_cache_keeps_only_named_activations() -> None:
    model = make_random_model()
    _, cache = model.run_with_cache(_tokens(model.cfg.d_vocab), names=["pattern"])
    assert sorted(cache.keys()) == ["pattern.0", "pattern.1"]


# --------------------------------------------------------------------- dtype and device
def test_to_float64_runs_and_agrees_with_float32() -> None:
    model32 = make_mlp_model(positions="rotary", dtype=torch.float32)
    tokens = _tokens(model32.cfg.d_vocab)
    logits32 = model32(tokens)
    model64 = model32.to(torch.float64)
    assert model64.dtype == torch.float64 and model64.W_Q.dtype == torch.float64
    logits64 = model64(tokens)
    assert logits64.dtype == torch.float64
    assert (logits64 - logits32.double()).abs().max() < 1e-4


def test_model_reports_its_device_and_moves_tokens_there() -> None:
    model = make_random_model()
    assert model.device == torch.device("cpu")
    assert model(torch.tensor([1, 2, 3])).device == model.device


# --------------------------------------------------------------------- typed refusals
def test_nan_weight_is_named() -> None:
    model = make_random_model()
    weights = dict(model.weights())
    weights["W_Q"] = weights["W_Q"].clone()
    weights["W_Q"][0, 1, 2, 3] = float("nan")
    with pytest.raises(NonFiniteError, match="W_Q"):
        CircuitModel(model.cfg, weights)


def test_inf_weight_is_named() -> None:
    model = make_random_model()
    weights = dict(model.weights())
    weights["W_U"] = weights["W_U"].clone()
    weights["W_U"][0, 0] = float("inf")
    with pytest.raises(NonFiniteError, match="W_U"):
        CircuitModel(model.cfg, weights)


def test_mismatched_shape_is_named() -> None:
    model = make_random_model()
    weights = dict(model.weights())
    weights["W_K"] = weights["W_K"][:, :, :, :-1]
    with pytest.raises(ShapeError, match=r"W_K.*expected shape \(2, 3, 16, 4\)"):
        CircuitModel(model.cfg, weights)


def test_missing_and_unknown_tensors_are_named() -> None:
    model = make_random_model()
    weights = {k: v for k, v in model.weights().items() if k != "W_V"}
    with pytest.raises(ShapeError, match="W_V"):
        CircuitModel(model.cfg, weights)
    with pytest.raises(ShapeError, match="W_mystery"):
        CircuitModel(model.cfg, {**model.weights(), "W_mystery": torch.zeros(1, dtype=torch.float64)})


def test_mixed_dtypes_are_named() -> None:
    model = make_random_model()
    weights = {**model.weights(), "W_O": model.W_O.float()}
    with pytest.raises(ArgumentTypeError, match=r"W_O.*float64"):
        CircuitModel(model.cfg, weights)


def test_unknown_positional_scheme_is_an_unsupported_architecture() -> None:
    with pytest.raises(UnsupportedArchitectureError, match="alibi"):
        ModelConfig(1, 1, 4, 4, 5, 5, positional_embedding_type="alibi")


# --------------------------------------------------------------------- save and load
def _assert_same_model(a: CircuitModel, b: CircuitModel) -> None:
    assert a.cfg == b.cfg
    assert sorted(a.weights()) == sorted(b.weights())
    for name, tensor in a.weights().items():
        assert torch.equal(tensor, b.weights()[name]), name
        assert tensor.dtype == b.weights()[name].dtype


@pytest.mark.parametrize(
    "build",
    [
        lambda: make_random_model(biases=True, dtype=torch.float32),
        lambda: make_mlp_model(dtype=torch.float32, parallel=True, positions="rotary"),
    ],
)
def test_save_load_round_trips_exactly(build: object, tmp_path: Path) -> None:
    model = build()  # type: ignore[operator]
    model.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors", "vocab.json"]
    loaded = CircuitModel.load(tmp_path / "m")
    _assert_same_model(model, loaded)
    tokens = _tokens(model.cfg.d_vocab)
    assert torch.equal(model(tokens), loaded(tokens))
    assert loaded.to_str_tokens(tokens[0]) == model.to_str_tokens(tokens[0])


def test_save_load_keeps_float64(tmp_path: Path) -> None:
    model = make_random_model(dtype=torch.float64)
    model.save(tmp_path)
    _assert_same_model(model, CircuitModel.load(tmp_path, dtype=torch.float64))


class _Payload:
    """Unpickling this runs code: it creates the file at ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (Path.touch, (self.marker,))


def _write_config(root: Path, model: CircuitModel) -> None:
    (root / "config.json").write_text(json.dumps(model.cfg.to_dict()))


@pytest.mark.parametrize("filename", ["pytorch_model.bin", "model.pt"])
def test_pickled_weights_are_refused_and_never_unpickled(tmp_path: Path, filename: str) -> None:
    marker = tmp_path / "code-ran"
    (tmp_path / filename).write_bytes(pickle.dumps({"W_E": _Payload(marker)}))
    _write_config(tmp_path, make_random_model())
    with pytest.raises(ArgumentError, match=rf"pickle.*{filename}|{filename}.*pickle"):
        CircuitModel.load(tmp_path)
    assert not marker.exists()


def test_a_pickle_named_safetensors_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    (tmp_path / "model.safetensors").write_bytes(pickle.dumps(_Payload(marker)))
    _write_config(tmp_path, make_random_model())
    with pytest.raises(ArgumentError, match="not a valid safetensors file"):
        CircuitModel.load(tmp_path)
    assert not marker.exists()


def test_loading_a_missing_directory_says_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(ArgumentError, match=r"model\.safetensors"):
        CircuitModel.load(tmp_path / "nowhere")
