"""Trait values of the feature views, compact enough to hold every feature of a dictionary in one offline page.

A dashboard carries every unit of a layer at once (the picker switches units
in the browser, with no kernel). Per unit:

- its examples (the top ``k`` and the random sample, in one array): token
  indices into a ``vocab`` of the token strings used (uint16 where it fits), and
  the unit's activation over each window quantised to uint8 against the unit's
  largest activation (the exact centre activations are float32 beside them);
- its histogram (uint32 counts on shared log-spaced edges) and density;
- its promoted and suppressed tokens (``circuitwidgets.features.effects``)
  and nearby units by decoder cosine, where the unit has an output direction.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.effects import logit_effects, output_directions, top_tokens
from circuitwidgets.features.examples import Examples
from circuitwidgets.model import CircuitModel
from circuitwidgets.widgets.core.arrays import quantise_unit

__all__ = ["DENSE_SHARE", "dashboard_data", "dense_units", "nearby_units", "prompt_data", "vocab_strings"]

#: A unit active on more than this share of the tokens read is called dense and marked so in the feature views
#: (it fires almost everywhere, so its presence at one token says little about that token).
DENSE_SHARE = 0.1


def dense_units(density: np.ndarray | torch.Tensor, share: float = DENSE_SHARE) -> np.ndarray:
    """int32 indices of the units whose ``density`` (share of tokens where they are positive) exceeds ``share``."""
    values = density.detach().cpu().numpy() if isinstance(density, torch.Tensor) else np.asarray(density)
    return np.flatnonzero(values.astype(np.float64) > share).astype(np.int32)


def vocab_strings(model: CircuitModel, ids: np.ndarray) -> list[str]:
    """Display strings of token ``ids`` (untrusted text; the view escapes it)."""
    text = model.tokenizer.token_str
    return [str(text(int(i))) for i in ids]


def nearby_units(directions: torch.Tensor, n: int, block: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """``(indices [n_units, n], cosines [n_units, n])``: each direction's ``n`` most similar others, in blocks."""
    unit = directions.double() / directions.double().norm(dim=1, keepdim=True).clamp_min(1e-30)
    n = min(n, len(unit) - 1)
    idx = np.zeros((len(unit), max(n, 0)), np.int32)
    cos = np.zeros((len(unit), max(n, 0)), np.float32)
    if n <= 0:
        return idx, cos
    for first in range(0, len(unit), block):
        sims = unit[first : first + block] @ unit.T
        rows = torch.arange(sims.shape[0])
        sims[rows, rows + first] = -torch.inf  # (not itself)
        best = sims.topk(n, dim=1)
        idx[first : first + block] = best.indices.numpy()
        cos[first : first + block] = best.values.numpy()
    return idx, cos


def typical_scale(model: CircuitModel, tokens: torch.Tensor, rows: int = 8) -> float:
    """The final norm's mean per-token scale over the first ``rows`` rows of ``tokens`` (the logit effects' divisor)."""
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens[:rows].to(model.device), names=["scale_final"])
    return float(cache["scale_final"].double().mean())


def _directions(model: CircuitModel, examples: Examples, dictionary: Dictionary | None) -> torch.Tensor | None:
    if examples.kind == "feature":
        if not isinstance(dictionary, Dictionary):
            raise ArgumentTypeError(
                f"dictionary: expected the Dictionary whose features the examples show, got {type(dictionary).__name__}"
            )
        if dictionary.d_sae != examples.n_units:
            raise ArgumentError(
                f"dictionary: expected {examples.n_units} features like the examples, got {dictionary.name} "
                f"with {dictionary.d_sae}"
            )
        return output_directions(model, dictionary) if dictionary.out_site != "mlp_post" else None
    if examples.kind == "neuron":
        return output_directions(model, examples.layer)
    return None  # (a head writes a subspace, not one direction)


def dashboard_data(
    model: CircuitModel,
    examples: Examples,
    dictionary: Dictionary | None = None,
    *,
    n_logits: int = 10,
    n_nearby: int = 8,
) -> dict[str, Any]:
    """Trait values of a :class:`~circuitwidgets.FeatureDashboard` showing every unit of ``examples``."""
    if not isinstance(examples, Examples):
        raise ArgumentTypeError(
            f"examples: expected a features.max_activating result (Examples), got {type(examples).__name__}"
        )
    directions = _directions(model, examples, dictionary)
    ex_index = np.concatenate([examples.top_index, examples.sample_index], axis=1)  # [n_units, n_ex]
    ex_value = np.concatenate([examples.top_value, examples.sample_value], axis=1).astype(np.float32)
    context = np.concatenate([examples.top_context, examples.sample_context], axis=1).astype(np.float32)
    window_ids = examples.window_tokens(ex_index)  # [n_units, n_ex, width], -1 where none
    if directions is not None:
        effects = logit_effects(model, directions, scale=typical_scale(model, examples.tokens))
        up, up_v, down, down_v = top_tokens(effects, min(n_logits, model.cfg.d_vocab))
        near, near_cos = nearby_units(directions, n_nearby)
    else:
        up = down = torch.zeros(examples.n_units, 0, dtype=torch.long)
        up_v = down_v = torch.zeros(examples.n_units, 0)
        near, near_cos = np.zeros((examples.n_units, 0), np.int32), np.zeros((examples.n_units, 0), np.float32)
    used = np.unique(np.concatenate([window_ids[window_ids >= 0], up.numpy().ravel(), down.numpy().ravel()]))
    pad = len(used)  # (the index of "no token": one past the vocabulary)
    wire = np.uint16 if pad < 2**16 - 1 else np.uint32
    remap = np.full(model.cfg.d_vocab + 1, pad, dtype=np.int64)
    remap[used] = np.arange(len(used))
    ctx_tokens = remap[np.where(window_ids >= 0, window_ids, model.cfg.d_vocab)].astype(wire)
    with np.errstate(invalid="ignore"):
        unit_max = np.nanmax(np.where(np.isnan(ex_value), -np.inf, ex_value), axis=1)
    unit_max = np.where(np.isfinite(unit_max) & (unit_max > 0), unit_max, 1.0).astype(np.float32)
    shade = quantise_unit(np.nan_to_num(context / unit_max[:, None, None], nan=0.0))
    quantile = np.full(ex_value.shape, np.nan, np.float32)
    for unit in range(examples.n_units):
        quantile[unit, examples.top_value.shape[1] :] = examples.quantiles(unit)
    return {
        "model_name": model.name,
        "site": examples.labels[0].rsplit("/", 1)[0]
        if examples.kind == "feature"
        else f"L{examples.layer} {examples.kind}s",
        "unit_prefix": _prefix(examples),
        "kind": examples.kind,
        "vocab": vocab_strings(model, used),
        "ctx_tokens": ctx_tokens,
        "ctx_shade": shade,
        "ex_value": ex_value,
        "ex_quantile": quantile,
        "n_top": int(examples.top_value.shape[1]),
        "centre": int(examples.before),
        "unit_max": unit_max,
        "density": examples.density.astype(np.float32),
        "hist": examples.hist_counts.astype(np.uint32),
        "hist_edges": examples.hist_edges.astype(np.float32),
        "logit_up": remap[up.numpy()].astype(np.int32),
        "logit_up_value": up_v.float().numpy(),
        "logit_down": remap[down.numpy()].astype(np.int32),
        "logit_down_value": down_v.float().numpy(),
        "nearby": near,
        "nearby_cos": near_cos,
        "n_tokens_read": int(examples.n_tokens),
        "dense_share": DENSE_SHARE,
    }


def _prefix(examples: Examples) -> str:
    """The label prefix shared by every unit (``L1.tc/``, ``L1N``, ``L0H``)."""
    first = examples.labels[0]
    return first[: len(first) - 1] if first.endswith("0") else first


def prompt_data(model: CircuitModel, tokens: torch.Tensor, activations: torch.Tensor, k: int) -> dict[str, Any]:
    """Trait values of a :class:`~circuitwidgets.PromptFeatures`: per token, its ``k`` strongest active units."""
    acts = activations.reshape(activations.shape[-2], activations.shape[-1]).double()  # [pos, n_units]
    k = min(k, acts.shape[1])
    best = acts.topk(k, dim=1)
    ids = torch.where(best.values > 0, best.indices, torch.full_like(best.indices, -1))
    return {
        "model_name": model.name,
        "tokens": [str(s) for s in model.to_str_tokens(tokens.reshape(-1), prepend_bos=False)],
        "active": ids.numpy().astype(np.int32),
        "active_value": torch.where(best.values > 0, best.values, torch.zeros_like(best.values)).float().numpy(),
    }
