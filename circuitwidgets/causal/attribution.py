"""Attribution patching (the gradient approximation of activation patching) and exact direct logit attribution."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import torch

from circuitwidgets.causal import nnsight_attribution, nnsight_backend
from circuitwidgets.causal.answers import Answers, answer_logit, attribution_dims, check_attribution, parse_answers
from circuitwidgets.causal.components import component_labels, components_at
from circuitwidgets.causal.engine import check_pair, normalise, run_base
from circuitwidgets.causal.labels import dim_labels, prompts_of
from circuitwidgets.causal.metrics import as_metric, scalar
from circuitwidgets.causal.precision import full_precision
from circuitwidgets.causal.result import Sweep
from circuitwidgets.causal.sites import SITE_AXES, check_site, site_alias
from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.cache import Hook, Recorder


def attribution_patch(
    model: CircuitModel,
    clean: torch.Tensor | Sequence[int] | str,
    corrupted: torch.Tensor | Sequence[int] | str,
    metric: object,
    site: str = "resid_pre",
    by: Sequence[str] = ("layer", "pos"),
) -> Sweep:
    """Attribution patching: ``(clean − corrupted) · ∂metric/∂activation`` at the corrupted run, for every cell at once.

    The first-order estimate of :func:`~circuitwidgets.causal.patch` with the
    same ``site`` and ``by`` (same dims), from one forward and one backward pass
    (norms recomputed, as in the patched runs). Exact where the metric is linear
    in the activation; check it against :func:`patch` on the cells that matter.
    """
    site = site_alias(site)  # TransformerLens's layerless spelling ("hook_z") read as ours
    if nnsight_backend.dispatch(model):  # cw.from_nnsight(lm): one trace, one backward pass to the site
        return nnsight_attribution.attribution_patch(model, clean, corrupted, metric, site, by)
    model, upcast = full_precision(model)
    a, b = check_pair(model, clean, corrupted)
    cells = check_site(model, site, by, a.shape[1])
    m = as_metric(metric, model.cfg.d_vocab)
    source = run_base(model, a, m, [site])
    base = run_base(model, b, m, [site])
    L = model.cfg.n_layers
    deltas = {layer: torch.zeros_like(base.cache[site, layer], requires_grad=True) for layer in range(L)}
    hooks: dict[tuple[str, int | None], Hook] = {(site, layer): _adder(delta) for layer, delta in deltas.items()}
    positions = m.positions_at(b.shape[1])
    columns = m.columns.to(model.device) if m.columns is not None else None
    with torch.enable_grad():
        logits = model.run_from(b, 0, None, Recorder({}, set(), hooks), positions=positions, columns=columns)
        value = scalar(m.batched(logits[None], b.shape[0])[0], m.name)
        check_differentiable(value, m.name)
        value.backward()  # type: ignore[no-untyped-call]
    axes = SITE_AXES[site]
    rest = [d for d in cells.by if d != "layer"]
    per_layer = []
    for layer in range(L):
        grad = deltas[layer].grad
        assert grad is not None
        product = ((source.cache[site, layer] - base.cache[site, layer]) * grad).double()
        keep = [1 + axes.index(d) for d in rest]
        summed = product.sum(dim=[i for i in range(product.ndim) if i not in keep])
        order = sorted(keep)
        per_layer.append(summed.permute([order.index(1 + axes.index(d)) for d in rest]) if rest else summed)
    stacked = torch.stack(per_layer).cpu().numpy()
    layer_axis = cells.by.index("layer")
    values = np.moveaxis(stacked, 0, layer_axis)
    # (the values are estimated changes of the metric: normalised, a change is divided by clean − corrupted, and
    # not shifted by the corrupted value as a patched run's metric value is)
    _, clean_value, corrupted_value = normalise(values, m, source.value, base.value)
    if m.normalise:
        values = values / (clean_value - corrupted_value)
    return Sweep(
        values, cells.by, dim_labels(model, cells, a), "attribution patching", m.name, clean_value, corrupted_value,
        site, "gradient at the corrupted run, norms recomputed" + upcast, model.name, prompts_of(model, clean=a, corrupted=b),
    )  # fmt: skip


def check_differentiable(value: torch.Tensor, name: str) -> None:
    """A metric's value must carry the gradient back to the logits: a Python float (``.item()``, ``float(...)``)
    or a detached tensor has none, and autograd's own error would not say which metric or why."""
    if not value.requires_grad:
        raise ArgumentTypeError(
            f"metric: attribution patching differentiates the metric, so {name} must return a torch tensor computed "
            "from the logits (drop .item() / float(...) / .detach() at its end); it returned a value with no gradient"
        )


def _adder(delta: torch.Tensor) -> Hook:
    """A hook adding ``delta`` (a zero leaf whose gradient is the activation's)."""

    def add(value: torch.Tensor) -> torch.Tensor:
        return value + delta

    return add


def _directions(model: CircuitModel, answers: Answers, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``([batch, d_model] unembedding directions, [batch] bias terms)`` of checked ``answers``."""
    b_U = model.weight("b_U")
    if answers.direction is not None:
        d = answers.direction.to(model.device, model.dtype)
        return d[None].expand(batch, -1), torch.zeros(batch, device=model.device, dtype=model.dtype)
    c, w = answers.correct, answers.wrong
    assert c is not None
    direction = model.W_U[:, c].T
    bias = b_U[c] if b_U is not None else torch.zeros(batch, device=model.device, dtype=model.dtype)
    if w is not None:
        direction = direction - model.W_U[:, w].T
        if b_U is not None:
            bias = bias - b_U[w]
    return direction, bias


def logit_attribution(
    model: CircuitModel,
    tokens: torch.Tensor | Sequence[int] | str,
    answers: object,
    by: Literal["component", "layer", "head", "neuron"] = "component",
    pos: int = -1,
    *,
    reduce: Literal["mean", "none"] = "mean",
) -> Sweep:
    """Exact direct logit attribution: each component's write, through the final norm, onto the answer's logit.

    The final norm's per-token scale is frozen from the run and its centring
    applied, so the map from the residual stream to the logit is linear and the
    parts sum exactly to the logit the model computed (before a final soft-cap,
    which is not linear; ``extra["logit"]`` is that pre-cap logit).

    Parameters
    ----------
    answers
        a token id (or one per prompt): its logit; a pair ``(correct, wrong)`` or a
        ``[batch, 2]`` tensor of ``(correct, wrong)`` rows: the logit difference; strings
        (``" the"``, one token each under the model's tokenizer) wherever an id goes;
        a float tensor ``[d_model]``: any direction read after the final norm.
    by
        ``"component"``: embedding, positions, each layer's attention (heads and
        ``b_O``) and MLP, the unembedding's bias; ``"layer"``: each layer's
        attention + MLP; ``"head"``: each head ``[layer, head]``; ``"neuron"``: each
        MLP neuron ``[layer, neuron]``. What ``values`` leaves out is in
        ``extra["rest"]``; ``values.sum() + sum(rest.values())`` is the logit.
    pos
        the position read.
    reduce
        ``"mean"`` over prompts, or ``"none"``: a leading ``batch`` dim.
    """
    if nnsight_backend.dispatch(model):  # cw.from_nnsight(lm): one trace, only the projections come back
        return nnsight_attribution.logit_attribution(model, tokens, answers, by, pos, reduce=reduce)
    model, upcast = full_precision(model)
    t = model._check_tokens(tokens)
    check_attribution(by, reduce, pos, t.shape[1])
    if by == "neuron" and not model.cfg.has_mlp:
        raise ArgumentError(f"by: 'neuron' needs a model with MLPs; {model.name!r} has none")
    batch, n_pos = t.shape
    parsed = parse_answers(answers, batch, model.cfg.d_vocab, model.cfg.d_model, model.tokenizer.encode)
    direction, bias = _directions(model, parsed, batch)
    names = ["embed", "pos_embed", "result", "mlp_out", "mlp_post", "per_layer_out", "resid_final", "scale_final"]
    logits, cache = model.run_with_cache(t, names=names)
    parts = components_at(model, cache, pos % n_pos, by)  # name -> [batch, *shape, d_model]
    scale = cache["scale_final"][:, pos % n_pos]  # [batch, 1]
    centred = model.cfg.normalization == "ln_pre"
    out: dict[str, torch.Tensor] = {}
    for key, part in parts.items():
        x = part - part.mean(-1, keepdim=True) if centred else part
        x = x / scale.double().view(batch, *([1] * (x.ndim - 1)))
        out[key] = torch.einsum("b...d,bd->b...", x, direction.double())
    values = out.pop("values")
    rest = dict(out)
    rest["unembed bias"] = bias.double()
    final = cache["resid_final"][:, pos % n_pos].double()
    normed = final - final.mean(-1, keepdim=True) if centred else final
    logit = ((normed / scale.double()) * direction.double()).sum(-1) + bias.double()

    def reduced(x: torch.Tensor) -> np.ndarray:
        x = x.double()
        return (x.mean(0) if reduce == "mean" else x).cpu().numpy()

    cfg = model.cfg
    dims, labels = attribution_dims(
        by, reduce, component_labels(model), (cfg.n_layers, cfg.n_heads, cfg.d_mlp or 0), batch
    )
    convention = (
        "final norm's scale frozen from the run, centring applied"
        if centred
        else ("final norm's scale frozen from the run" if model.cfg.normalization != "none" else "model has no norms")
    )
    return Sweep(
        reduced(values), dims, labels, "direct logit attribution", parsed.name, site=None,
        convention=convention + upcast, model=model.name, prompts=prompts_of(model, tokens=t),
        extra={
            "rest": {k: reduced(v) for k, v in rest.items()},
            "logit": reduced(logit),
            "pos": pos,
            "softcap": model.cfg.final_softcap,
            "model_logits": reduced(answer_logit(logits[:, pos % n_pos], parsed)),
        },
    )  # fmt: skip
