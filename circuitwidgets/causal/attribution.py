"""Attribution patching (the gradient approximation of activation patching) and exact direct logit attribution."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

import numpy as np
import torch

from circuitwidgets.causal import nnsight_attribution, nnsight_backend
from circuitwidgets.causal.answers import Answers, answer_logit, attribution_dims, check_attribution, parse_answers
from circuitwidgets.causal.base_runs import run_base
from circuitwidgets.causal.components import component_labels, components_at
from circuitwidgets.causal.engine import check_pair, normalise
from circuitwidgets.causal.labels import dim_labels, prompts_of
from circuitwidgets.causal.metrics import as_metric, scalar
from circuitwidgets.causal.precision import full_precision
from circuitwidgets.causal.result import Sweep
from circuitwidgets.causal.sites import SITE_AXES, check_site, site_alias
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NotCoveredError
from circuitwidgets.model import ActivationCache, CircuitModel
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
    pos: int | slice | Sequence[int] | str = -1,
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
        With several positions, also integer ids ``[batch, n_positions]``: one answer per prompt and
        position (with exactly two positions, such a tensor is read this way, not as pairs).
    by
        ``"component"``: embedding, positions, each layer's attention (heads and
        ``b_O``) and MLP, the unembedding's bias; ``"layer"``: each layer's
        attention + MLP; ``"head"``: each head ``[layer, head]``; ``"neuron"``: each
        MLP neuron ``[layer, neuron]``. What ``values`` leaves out is in
        ``extra["rest"]``; ``values.sum() + sum(rest.values())`` is the logit.
    pos
        the position read; or several (a list, a slice, or ``"all"``), read from one
        forward pass: the result gains a ``pos`` dim (after ``batch``).
    reduce
        ``"mean"`` over prompts, or ``"none"``: a leading ``batch`` dim.
    """
    if nnsight_backend.dispatch(model):  # cw.from_nnsight(lm): one trace, only the projections come back
        if not isinstance(pos, int):
            raise NotCoveredError("pos: several positions in one call run natively only; call once per position")
        return nnsight_attribution.logit_attribution(model, tokens, answers, by, pos, reduce=reduce)
    model, upcast = full_precision(model)
    t = model._check_tokens(tokens)
    batch, n_pos = t.shape
    positions = read_positions(pos, n_pos)
    check_attribution(by, reduce, -1 if positions is not None else pos, n_pos)
    if by == "neuron" and not model.cfg.has_mlp:
        raise ArgumentError(f"by: 'neuron' needs a model with MLPs; {model.name!r} has none")
    per_position = (
        isinstance(answers, torch.Tensor) and positions is not None and answers.ndim == 2
        and not answers.is_floating_point() and answers.shape == (batch, len(positions))
    )  # fmt: skip
    columns = [answers[:, j] for j in range(len(positions or []))] if per_position else None  # type: ignore[index]
    parsed = [
        parse_answers(
            answers if columns is None else columns[j],
            batch,
            model.cfg.d_vocab,
            model.cfg.d_model,
            model.tokenizer.encode,
        )
        for j in range(1 if positions is None else len(positions))
    ]
    names = ["embed", "pos_embed", "result", "mlp_out", "mlp_post", "per_layer_out", "resid_final", "scale_final"]
    logits, cache = model.run_with_cache(t, names=names)
    read = positions if positions is not None else [cast(int, pos) % n_pos]
    parts = [_attribute_at(model, cache, logits, p, parsed[min(j, len(parsed) - 1)], by) for j, p in enumerate(read)]
    if positions is None:
        values, rest, logit, model_logit = parts[0]
    else:  # a pos dim after batch
        values = torch.stack([part[0] for part in parts], dim=1)
        rest = {key: torch.stack([part[1][key] for part in parts], dim=1) for key in parts[0][1]}
        logit = torch.stack([part[2] for part in parts], dim=1)
        model_logit = torch.stack([part[3] for part in parts], dim=1)

    def reduced(x: torch.Tensor) -> np.ndarray:
        x = x.double()
        return (x.mean(0) if reduce == "mean" else x).cpu().numpy()

    cfg = model.cfg
    dims, labels = attribution_dims(
        by, reduce, component_labels(model), (cfg.n_layers, cfg.n_heads, cfg.d_mlp or 0), batch
    )
    if positions is not None:
        at = 1 if reduce == "none" else 0
        dims = (*dims[:at], "pos", *dims[at:])
        labels = {**labels, "pos": [f"{p}" for p in positions]}
    centred = model.cfg.normalization == "ln_pre"
    convention = (
        "final norm's scale frozen from the run, centring applied"
        if centred
        else ("final norm's scale frozen from the run" if model.cfg.normalization != "none" else "model has no norms")
    )
    return Sweep(
        reduced(values), dims, labels, "direct logit attribution", parsed[0].name, site=None,
        convention=convention + upcast, model=model.name, prompts=prompts_of(model, tokens=t),
        extra={
            "rest": {k: reduced(v) for k, v in rest.items()},
            "logit": reduced(logit),
            "pos": pos if positions is None else positions,
            "softcap": model.cfg.final_softcap,
            "model_logits": reduced(model_logit),
        },
    )  # fmt: skip


def read_positions(pos: object, n_pos: int) -> list[int] | None:
    """Several positions (a list, a slice or ``"all"``) as indices, or ``None`` for one int position (checked later)."""
    if isinstance(pos, int) and not isinstance(pos, bool):
        return None
    if pos == "all":
        return list(range(n_pos))
    if isinstance(pos, slice):
        out = list(range(n_pos))[pos]
    elif isinstance(pos, (list, tuple)) and all(isinstance(p, int) and not isinstance(p, bool) for p in pos):
        out = list(pos)
    else:
        raise ArgumentError(f"pos: expected a position, a list of positions, a slice or 'all', got {pos!r:.80}")
    bad = [p for p in out if not -n_pos <= p < n_pos]
    if not out or bad:
        raise ArgumentError(f"pos: expected positions in [{-n_pos}, {n_pos}), got {pos!r:.80}")
    return [p % n_pos for p in out]


def _attribute_at(
    model: CircuitModel, cache: ActivationCache, logits: torch.Tensor, p: int, parsed: Answers, by: str
) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """At position ``p``: the parts' values ``[batch, ...]``, the rest by name, the pre-cap logit and the model's."""
    batch = logits.shape[0]
    direction, bias = _directions(model, parsed, batch)
    parts = components_at(model, cache, p, by)  # name -> [batch, *shape, d_model]
    scale = cache["scale_final"][:, p]  # [batch, 1]
    centred = model.cfg.normalization == "ln_pre"
    out: dict[str, torch.Tensor] = {}
    for key, part in parts.items():
        x = part - part.mean(-1, keepdim=True) if centred else part
        x = x / scale.double().view(batch, *([1] * (x.ndim - 1)))
        out[key] = torch.einsum("b...d,bd->b...", x, direction.double())
    values = out.pop("values")
    rest = dict(out)
    rest["unembed bias"] = bias.double()
    final = cache["resid_final"][:, p].double()
    normed = final - final.mean(-1, keepdim=True) if centred else final
    logit = ((normed / scale.double()) * direction.double()).sum(-1) + bias.double()
    return values, rest, logit, answer_logit(logits[:, p], parsed).double()
