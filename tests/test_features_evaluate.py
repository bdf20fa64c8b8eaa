"""evaluate() against plain definitions (float64, written out differently) on a small random model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from _features import mlp_model, random_dictionary

from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.evaluation import evaluate


@torch.no_grad()
def _reference(d: Dictionary, model, tokens: torch.Tensor, bos: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The metrics from their definitions: one clean cache, explicit hooks, torch's own losses."""
    _, cache = model.run_with_cache(tokens, names=["resid_mid", "mlp_out", "resid_post", "scale_mlp"])
    if d.kind == "sae":
        x = y = cache[d.in_site, d.layer]
    else:
        r = cache["resid_mid", d.layer]
        x = (r - r.mean(-1, keepdim=True)) / (r.var(-1, unbiased=False, keepdim=True) + model.cfg.ln_eps).sqrt()
        y = cache["mlp_out", d.layer]
    keep = tokens != bos
    pred = torch.where(keep[..., None], d(x), y)
    clean = model(tokens)
    spliced = model.run_with_hooks(tokens, {(d.out_site, d.layer): lambda v: pred})
    ablated = model.run_with_hooks(tokens, {(d.out_site, d.layer): lambda v: torch.zeros_like(v)})

    def ce(logits: torch.Tensor) -> float:
        losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
        return float(losses[keep[:, :-1]].mean())

    def kl(other: torch.Tensor) -> float:
        k = F.kl_div(F.log_softmax(other, -1), F.softmax(clean, -1), reduction="none").sum(-1)
        return float(k[keep].mean())

    ys, yh, f = y[keep], d(x)[keep], d.encode(x)[keep]
    mse = ((ys - yh) ** 2).sum(-1).mean()
    total = ((ys - ys.mean(0)) ** 2).sum(-1).mean()  # population variance summed over dimensions
    c, s, a = ce(clean), ce(spliced), ce(ablated)
    return {
        "l0": float((f > 0).sum(-1).double().mean()),
        "mse": float(mse),
        "explained_variance": float(1 - mse / total),
        "cosine": float(F.cosine_similarity(ys, yh, dim=-1).mean()),
        "ce_loss_clean": c,
        "ce_loss_spliced": s,
        "ce_loss_ablated": a,
        "ce_loss_recovered": (a - s) / (a - c),
        "kl_spliced": kl(spliced),
        "kl_score": (kl(ablated) - kl(spliced)) / kl(ablated),
        "dead_fraction": float(((f > 0).sum(0) == 0).double().mean()),
    }


@pytest.mark.parametrize(
    ("kind", "activation"), [("transcoder", "topk"), ("skip-transcoder", "relu"), ("sae", "jumprelu")]
)
def test_evaluate_matches_definitions(kind: str, activation: str) -> None:
    model = mlp_model()
    tokens = torch.randint(1, 40, (5, 9), generator=torch.Generator().manual_seed(3))
    tokens[:, 0] = 0
    tokens[2, 4] = 0  # a BOS inside a row: kept clean and not counted
    d = random_dictionary(kind, activation, d_in=12, d_sae=40, k=5, layer=1)
    got = evaluate(d, model, tokens, batch_size=2, exclude=[0])
    want = _reference(d, model, tokens, bos=0)
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_a_perfect_dictionary_scores_one() -> None:
    model = mlp_model()
    eye = torch.eye(12, dtype=torch.float64)
    w = torch.cat([eye, -eye], 1)
    d = Dictionary("sae", "relu", W_enc=w, b_enc=torch.zeros(24, dtype=torch.float64), W_dec=w.T.contiguous(),
                   b_dec=torch.zeros(12, dtype=torch.float64), layer=0, in_site="resid_post")  # fmt: skip
    tokens = torch.randint(0, 40, (3, 8), generator=torch.Generator().manual_seed(0))
    got = evaluate(d, model, tokens, exclude=())
    assert got["explained_variance"] == pytest.approx(1.0, abs=1e-12)
    assert got["ce_loss_recovered"] == pytest.approx(1.0, abs=1e-9)
    assert got["kl_spliced"] == pytest.approx(0.0, abs=1e-12)
    assert got["n_tokens"] == 24
