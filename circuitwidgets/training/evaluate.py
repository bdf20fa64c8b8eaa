"""What ``circuitwidgets train`` measures at each evaluation: held-out loss, in-context learning, head scores,
K-composition and (with MLPs or norms) each component's direct logit attribution."""

from __future__ import annotations

import numpy as np
import torch

from circuitwidgets.circuits import composition_baseline, eigen_score
from circuitwidgets.training.batches import batch_at
from circuitwidgets.training.transformer import ToyTransformer

#: Token windows of the in-context-learning score (0-based positions of the predicted
#: token in a 256-token held-out window). Olsson et al. (2022) use the 500th and
#: 50th tokens of a longer context; our context is 256, so the late window ends
#: near its end and both are ten tokens wide to tame noise.
ICL_EARLY = (45, 55)
ICL_LATE = (195, 205)


@torch.no_grad()
def val_losses(model: ToyTransformer, tokens: np.ndarray, n_ctx: int, n_batches: int = 8) -> tuple[float, float]:
    """``(validation loss, in-context-learning score)`` on the same held-out batches.

    The in-context-learning score is the mean loss on predicted tokens
    ``ICL_LATE`` minus that on ``ICL_EARLY`` (negative: later tokens are easier,
    as a model that reads its context finds them).
    """
    per_position = []
    for i in range(n_batches):
        batch = batch_at(tokens, n_ctx, 16, 10_000, i).to(model.W_E.device)
        logits = model(batch)
        per_position.append(
            torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), batch[:, 1:], reduction="none").mean(
                dim=0
            )
        )
    losses = torch.stack(per_position).mean(dim=0)  # [n_ctx - 1], position p predicts token p + 1
    late = losses[ICL_LATE[0] - 1 : ICL_LATE[1] - 1].mean() if n_ctx > ICL_LATE[1] else losses[-10:].mean()
    early = losses[ICL_EARLY[0] - 1 : ICL_EARLY[1] - 1].mean() if n_ctx > ICL_EARLY[1] else losses[:10].mean()
    return float(losses.mean()), float(late - early)


@torch.no_grad()
def k_composition(model: ToyTransformer) -> list[list[list[float]]]:
    """Baseline-subtracted K-composition of each earlier head into each head of the next layer.

    ``[n_layers - 1][n_heads (earlier)][n_heads (later)]``: the score of
    :func:`circuitwidgets.circuits.composition_scores` (``‖W_OV^{h1} (W_QK^{h2})ᵀ‖_F /
    (‖W_OV^{h1}‖_F ‖W_QK^{h2}‖_F)`` minus :func:`~circuitwidgets.circuits.composition_baseline`),
    dense at training scale (d_model × d_model per head).
    """
    cfg = model.cfg
    w = model.canonical_weights()  # norms folded: the weights the engine analyses
    ov = w["W_V"].double() @ w["W_O"].double()  # [L, H, d, d]
    qk = w["W_Q"].double() @ w["W_K"].double().transpose(-1, -2)
    baseline = composition_baseline(cfg.d_model, cfg.d_head)
    out = []
    for layer in range(cfg.n_layers - 1):
        a, b = ov[layer], qk[layer + 1]  # [H, d, d]
        product = torch.einsum("ide,jfe->ijdf", a, b)  # W_OV^{h1} (W_QK^{h2})ᵀ
        norms = product.flatten(2).norm(dim=-1) / (a.flatten(1).norm(dim=-1)[:, None] * b.flatten(1).norm(dim=-1)[None])
        out.append([[round(float(x), 5) for x in row] for row in norms - baseline])
    return out


@torch.no_grad()
def head_scores(model: ToyTransformer, bos: int, seed: int = 0) -> dict[str, list[list[float]]]:
    """Previous-token and induction scores on ``[BOS] r r`` (same definition as the engine)."""
    cfg = model.cfg
    n = (cfg.n_ctx - 1) // 2
    gen = torch.Generator().manual_seed(seed)
    rand = torch.randint(1, cfg.d_vocab, (16, n), generator=gen)
    tokens = torch.cat([torch.full((16, 1), bos), rand, rand], dim=1).to(model.W_E.device)
    _, patterns = model(tokens, return_patterns=True)
    prev, ind = [], []
    for pattern in patterns:
        dest = torch.arange(2, 2 * n + 1, device=tokens.device)
        prev.append(pattern[:, :, dest, dest - 1].mean(dim=(0, 2)).tolist())
        dest = torch.arange(n + 1, 2 * n + 1, device=tokens.device)
        ind.append(pattern[:, :, dest, dest - n + 1].mean(dim=(0, 2)).tolist())
    return {"previous_token": prev, "induction": ind, "ov_copying": ov_copying_scores(model)}


@torch.no_grad()
def ov_copying_scores(model: ToyTransformer) -> list[list[float]]:
    """Eigenvalue copying score of each head's full OV circuit, per layer.

    The nonzero eigenvalues of ``W_E W_V W_O W_U`` are those of the small
    ``W_O W_U W_E W_V`` [d_head, d_head], so this costs almost nothing per evaluation.
    The score is the engine's (:func:`circuitwidgets.circuits.eigen_score`).
    """
    w = model.canonical_weights()
    small = w["W_O"].double() @ w["W_U"].double() @ w["W_E"].double() @ w["W_V"].double()
    scores: list[list[float]] = eigen_score(torch.linalg.eigvals(small).cpu().numpy()).tolist()
    return scores


@torch.no_grad()
def direct_logit_attribution(model: ToyTransformer, tokens: np.ndarray, n_ctx: int) -> dict[str, object]:
    """Each component's direct effect on the correct next token's logit, on held-out batches.

    Through the final LayerNorm with each token's scale frozen and its centring
    applied: component ``c`` contributes ``((c − mean c) / s) · w_f · W_U[:, next]``
    and the norm's bias ``b_f · W_U[:, next]``; they sum to the logit. Recorded:
    the mean contribution of the embedding, each attention layer and each MLP
    (logit units), and each one's *share*, its mean absolute contribution over
    the sum of all components' (so an MLP layer's share says how much of the
    direct path it carries).
    """
    batch = batch_at(tokens, n_ctx, 16, 10_000, 0).to(model.W_E.device)
    parts: dict[str, torch.Tensor] = {}
    model(batch, components=parts)
    resid = parts.pop("resid_final")
    normed = model.cfg.norm != "none"
    scale = (resid.var(-1, keepdim=True, unbiased=False) + 1e-5).sqrt() if normed else resid.new_ones(1)
    gain = model.lnf_w[:, None] if normed else 1.0
    directions = (gain * model.W_U)[:, batch[:, 1:]]  # [d, b, p - 1]
    values = {}
    for name, part in parts.items():
        centred = ((part - part.mean(-1, keepdim=True)) if normed else part) / scale
        values[name] = torch.einsum("bpd,dbp->bp", centred[:, :-1], directions)
    total = sum(v.abs().mean() for v in values.values())
    L = model.cfg.n_layers

    def listed(kind: str, stat: str) -> list[float]:
        out = []
        for layer in range(L):
            v = values.get(f"{kind}.{layer}")
            if v is None:
                continue
            out.append(round(float(v.mean() if stat == "mean" else v.abs().mean() / total), 4))
        return out

    return {
        "mean": {
            "embed": round(float(values["embed"].mean()), 4),
            "attn": listed("attn", "mean"),
            "mlp": listed("mlp", "mean"),
        },
        "share": {
            "embed": round(float(values["embed"].abs().mean() / total), 4),
            "attn": listed("attn", "share"),
            "mlp": listed("mlp", "share"),
        },
    }
