"""Dictionary maps against their slow definitions (float64, loops), sites against the model, and bad input."""

from __future__ import annotations

import pytest
import torch
from _features import mlp_model, random_dictionary

from circuitwidgets.errors import ArgumentError, NonFiniteError, ShapeError
from circuitwidgets.features.dictionary import Dictionary


def _slow_encode(d: Dictionary, x: torch.Tensor) -> torch.Tensor:
    """Each row, each feature, by the definition (no vectorised top-k)."""
    rows = x.reshape(-1, d.d_in)
    pre = torch.zeros(rows.shape[0], d.d_sae, dtype=torch.float64)
    for r in range(rows.shape[0]):
        for j in range(d.d_sae):
            pre[r, j] = sum(rows[r, i] * d.W_enc[i, j] for i in range(d.d_in)) + d.b_enc[j]
    out = torch.zeros_like(pre)
    if d.activation == "relu":
        out = pre.clamp(min=0)
    elif d.activation == "jumprelu" or (d.activation == "batchtopk" and d.threshold is not None):
        assert d.threshold is not None
        for r in range(pre.shape[0]):
            for j in range(d.d_sae):
                out[r, j] = pre[r, j] if pre[r, j] > d.threshold[j] else 0.0
    elif d.activation == "topk":
        assert d.k is not None
        for r in range(pre.shape[0]):
            order = sorted(range(d.d_sae), key=lambda j: -float(pre[r, j]))[: d.k]
            for j in order:
                out[r, j] = max(float(pre[r, j]), 0.0)
    else:  # batchtopk over all rows
        assert d.k is not None
        flat = sorted(((float(pre[r, j]), r, j) for r in range(pre.shape[0]) for j in range(d.d_sae)), reverse=True)
        for v, r, j in flat[: d.k * pre.shape[0]]:
            out[r, j] = max(v, 0.0)
    return out.reshape(*x.shape[:-1], d.d_sae)


@pytest.mark.parametrize("activation", ["relu", "topk", "batchtopk", "jumprelu"])
@pytest.mark.parametrize("kind", ["sae", "transcoder", "skip-transcoder"])
def test_encode_decode_match_slow_definitions(kind: str, activation: str) -> None:
    d = random_dictionary(kind, activation, d_in=6, d_sae=9, k=3)
    x = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        f = d.encode(x)
        torch.testing.assert_close(f, _slow_encode(d, x), rtol=0, atol=1e-12)
        assert bool((f >= 0).all())
        expected = torch.einsum("...s,so->...o", f, d.W_dec) + d.b_dec
        if d.W_skip is not None:
            expected = expected + torch.einsum("...i,io->...o", x, d.W_skip)
        torch.testing.assert_close(d.decode(f, x), expected)
        torch.testing.assert_close(d(x), expected)
    if activation == "topk":
        assert bool(((f > 0).sum(-1) <= 3).all())


def test_batchtopk_with_threshold_is_per_row() -> None:
    d = random_dictionary("sae", "batchtopk", d_in=6, d_sae=9, k=3)
    d.threshold = torch.full((9,), 0.2, dtype=torch.float64)
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(d.encode(x), _slow_encode(d, x), rtol=0, atol=1e-12)
        torch.testing.assert_close(d.encode(x[:1]), d.encode(x)[:1])


def test_mlp_in_through_the_real_mlp_gives_mlp_out() -> None:
    model = mlp_model()
    tokens = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(0))
    d = random_dictionary("transcoder", "relu", d_in=12, d_sae=5, layer=1)
    x = d.inputs(model, tokens)
    w = model.weights()
    mlp = torch.nn.functional.gelu(x @ w["W_in"][1] + w["b_in"][1]) @ w["W_out"][1] + w["b_out"][1]
    _, cache = model.run_with_cache(tokens, names=["mlp_out", "resid_mid"])
    torch.testing.assert_close(mlp, cache["mlp_out", 1])
    r = cache["resid_mid", 1]
    slow = (r - r.mean(-1, keepdim=True)) / (r.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    torch.testing.assert_close(x, slow)
    torch.testing.assert_close(d.features(model, tokens), d.encode(x))


def test_sae_inputs_read_the_site() -> None:
    model = mlp_model()
    tokens = torch.randint(0, 40, (1, 5), generator=torch.Generator().manual_seed(0))
    d = random_dictionary("sae", "topk", in_site="resid_post", layer=0)
    _, cache = model.run_with_cache(tokens, names=["resid_post"])
    torch.testing.assert_close(d.inputs(model, tokens), cache["resid_post", 0])
    assert d.name == "L0.resid_post" and d.label(7) == "L0.resid_post/7"
    assert random_dictionary("transcoder", layer=1).label(0) == "L1.tc/0"


def test_bad_input_is_typed_and_named() -> None:
    model = mlp_model()
    base = random_dictionary("transcoder", "topk", d_in=12, d_sae=8, k=2)
    t = base.tensors()
    with pytest.raises(ShapeError, match=r"d_in.*mlp_in.*width 12.*is 10"):
        Dictionary.random("transcoder", "relu", 10, 8, layer=0).check_model(model)
    with pytest.raises(ArgumentError, match="layer: expected an int in \\[0, 2\\), got 5"):
        Dictionary.random("transcoder", "relu", 12, 8, layer=5).check_model(model)
    with pytest.raises(ArgumentError, match="in_site: expected one of"):
        Dictionary.random("sae", "relu", 12, 8, layer=0, in_site="nowhere")
    with pytest.raises(ArgumentError, match=r"activation: expected one of.*got 'gelu'"):
        Dictionary.random("sae", "gelu", 12, 8, layer=0, in_site="resid_post")
    with pytest.raises(ArgumentError, match="k: expected an int in \\[1, 9\\), got 9"):
        Dictionary.random("transcoder", "topk", 12, 8, layer=0, k=9)
    with pytest.raises(ArgumentError, match="width \\(d_sae\\): expected an int in \\[1, inf\\), got 0"):
        Dictionary.random("transcoder", "relu", 12, 0, layer=0)
    bad = dict(t, W_dec=t["W_dec"].clone())
    bad["W_dec"][3, 4] = float("nan")
    with pytest.raises(NonFiniteError, match=r"file.safetensors: W_dec: expected finite values, got 1 NaN"):
        Dictionary.from_tensors(base.config(), bad, source="file.safetensors")
    with pytest.raises(ArgumentError, match="x: a skip-transcoder's decode needs its input"):
        random_dictionary("skip-transcoder").decode(torch.zeros(30, dtype=torch.float64))
    with pytest.raises(ShapeError, match=r"x: expected shape \[\.\.\., 12\], got \(3, 5\)"):
        base.encode(torch.zeros(3, 5))
