"""How good a dictionary is, with SAELens's definitions (``sae_lens/evals.py``), on a model's runs.

For each batch of sequences, three runs: clean, spliced (the dictionary's output
written at ``out_site``: an SAE's reconstruction replaces the site, a
transcoder's prediction replaces the MLP's output) and zero-ablated (``out_site``
set to 0 at every position). Positions holding an excluded token (default: the
model's BOS, as SAELens's ``exclude_special_tokens``) keep their clean value
when spliced and count in no metric. Metrics (means over counted tokens):

- ``l0`` (features ``!= 0``), ``l1``;
- ``mse`` ``‖y − ŷ‖²`` summed over dimensions; ``cosine`` of ``y`` and ``ŷ``;
- ``explained_variance`` ``1 − mse / (E‖y‖² − ‖E y‖²)`` over all tokens (SAELens's
  streaming form), and ``explained_variance_legacy`` (its per-batch form);
- ``ce_loss_clean``, ``ce_loss_spliced``, ``ce_loss_ablated`` (next-token loss per
  position) and ``ce_loss_recovered`` ``(ablated − spliced) / (ablated − clean)``
  (SAELens's ``ce_loss_score``);
- ``kl_spliced``, ``kl_ablated`` (``KL(clean ‖ ·)`` per position) and ``kl_score``
  ``(kl_ablated − kl_spliced) / kl_ablated``;
- ``dead_fraction``: features that never fire on these tokens; ``dense_fraction``:
  features firing on more than ``dense_density`` (default 10 %) of them
  (SAELens gives the per-feature densities, returned as ``feature_density``).

``y`` is what the dictionary predicts (an SAE: its input; a transcoder: ``mlp_out``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentTypeError, ShapeError
from circuitwidgets.features._args import check_dictionary, check_number
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.sites import splice_hooks, zero_hooks
from circuitwidgets.features.stream import read_until
from circuitwidgets.model import CircuitModel


@dataclass
class _Sums:
    """Running sums over counted tokens (float64)."""

    tokens: int = 0
    ce_tokens: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    sum_y: torch.Tensor | None = None
    sum_y2: float = 0.0
    legacy: list[torch.Tensor] = field(default_factory=list)
    fires: torch.Tensor | None = None

    def add(self, name: str, values: torch.Tensor) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + float(values.double().sum())


def _token_losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token loss ``[batch, pos - 1]``."""
    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)


def _kl(clean: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``KL(clean ‖ other)`` per position ``[batch, pos]``."""
    p = torch.log_softmax(clean.double(), -1)
    q = torch.log_softmax(other.double(), -1)
    return (p.exp() * (p - q)).sum(-1)


@torch.no_grad()
def evaluate(
    dictionary: Dictionary,
    model: CircuitModel,
    tokens: torch.Tensor | Sequence[Sequence[int]],
    *,
    batch_size: int = 16,
    exclude: Sequence[int] | None = None,
    dense_density: float = 0.1,
) -> dict[str, Any]:
    """SAELens's evaluation of ``dictionary`` on ``model``'s runs over ``tokens`` ``[batch, pos]`` (see the module docstring).

    ``exclude`` lists token ids left out (default: the BOS id, if the model has one;
    ``()`` counts every position). Returns floats, plus ``feature_density`` (a list,
    per feature) and ``n_tokens``.
    """
    check_dictionary("dictionary", dictionary).check_model(model)
    batch_size = check_int("batch_size", batch_size, 1)
    check_number("dense_density", dense_density, 0.0, 1.0, low_open=True)
    t = model._check_tokens(_as_ids(tokens))
    if t.ndim != 2 or t.shape[1] < 2:
        raise ShapeError(f"tokens: expected [batch, pos] with pos >= 2 (next-token losses), got {tuple(t.shape)}")
    bos = model.tokenizer.bos_token_id if exclude is None else None
    excluded = _excluded(exclude, model.cfg.d_vocab) if exclude is not None else ([bos] if bos is not None else [])
    acc = _Sums()
    for start in range(0, t.shape[0], batch_size):
        _evaluate_batch(dictionary, model, t[start : start + batch_size], excluded, acc)
    return _summary(acc, dictionary, dense_density)


def _as_ids(tokens: object) -> torch.Tensor:
    if isinstance(tokens, torch.Tensor):
        return tokens
    if isinstance(tokens, (str, bytes)):
        raise ArgumentTypeError(f"tokens: expected token ids [batch, pos], got {type(tokens).__name__}")
    try:
        return torch.as_tensor(tokens)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ArgumentTypeError(
            f"tokens: expected token ids [batch, pos], got {type(tokens).__name__} ({exc})"
        ) from None


def _excluded(exclude: object, d_vocab: int) -> list[int]:
    if isinstance(exclude, (str, bytes)) or not isinstance(exclude, Sequence):
        raise ArgumentTypeError(f"exclude: expected a sequence of token ids, got {type(exclude).__name__}")
    return [check_int(f"exclude[{i}]", v, 0, d_vocab) for i, v in enumerate(exclude)]


def _evaluate_batch(d: Dictionary, model: CircuitModel, t: torch.Tensor, excluded: list[int], acc: _Sums) -> None:
    keep = torch.ones_like(t, dtype=torch.bool)
    for token in excluded:
        keep &= t != token
    sites = ((d.in_site, d.layer), (d.out_site, d.layer))
    got = read_until(model, t, sites)
    x, y = got[sites[0]].to(d.W_enc.dtype), got[sites[1]].to(d.W_enc.dtype)
    f = d.encode(x)
    y_hat = d.decode(f, x)

    def replace(inp: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        out = d(inp.to(d.W_enc.dtype)).to(current.dtype)
        return torch.where(keep[..., None], out, current)

    clean = model.run_with_hooks(t, {})
    spliced = model.run_with_hooks(t, splice_hooks(model.cfg, d.layer, d.in_site, d.out_site, replace))
    ablated = model.run_with_hooks(t, zero_hooks(d.layer, d.out_site))
    ce_keep = keep[:, :-1]
    for name, logits in (("ce_loss_clean", clean), ("ce_loss_spliced", spliced), ("ce_loss_ablated", ablated)):
        acc.add(name, _token_losses(logits, t)[ce_keep])
    acc.add("kl_spliced", _kl(clean, spliced)[keep])
    acc.add("kl_ablated", _kl(clean, ablated)[keep])
    acc.ce_tokens += int(ce_keep.sum())
    ys, yh, fs = y[keep].double(), y_hat[keep].double(), f[keep]
    acc.tokens += ys.shape[0]
    residual = (ys - yh).pow(2).sum(-1)
    acc.add("l0", (fs != 0).sum(-1))
    acc.add("l1", fs.abs().sum(-1))
    acc.add("mse", residual)
    cos = (ys / ys.norm(dim=-1, keepdim=True) * (yh / yh.norm(dim=-1, keepdim=True))).sum(-1)
    acc.add("cosine", cos)
    acc.sum_y = ys.sum(0) if acc.sum_y is None else acc.sum_y + ys.sum(0)
    acc.sum_y2 += float(ys.pow(2).sum())
    acc.legacy.append(1 - residual / (ys - ys.mean(0)).pow(2).sum(-1))
    fired = (fs != 0).sum(0).double()
    acc.fires = fired if acc.fires is None else acc.fires + fired


def _summary(acc: _Sums, d: Dictionary, dense_density: float) -> dict[str, Any]:
    n, m = max(acc.tokens, 1), max(acc.ce_tokens, 1)
    out: dict[str, Any] = {
        name: acc.sums[name] / n for name in ("l0", "l1", "mse", "cosine", "kl_spliced", "kl_ablated")
    }
    for name in ("ce_loss_clean", "ce_loss_spliced", "ce_loss_ablated"):
        out[name] = acc.sums[name] / m
    assert acc.sum_y is not None and acc.fires is not None
    variance = acc.sum_y2 / n - float((acc.sum_y / n).pow(2).sum())
    out["explained_variance"] = 1 - out["mse"] / variance if variance > 1e-10 else float(out["mse"] < 1e-10)
    out["explained_variance_legacy"] = float(torch.cat(acc.legacy).mean())
    gap = out["ce_loss_ablated"] - out["ce_loss_clean"]
    out["ce_loss_recovered"] = (out["ce_loss_ablated"] - out["ce_loss_spliced"]) / gap if gap else float("nan")
    out["kl_score"] = (out["kl_ablated"] - out["kl_spliced"]) / out["kl_ablated"] if out["kl_ablated"] else float("nan")
    density = acc.fires / n
    out["dead_fraction"] = float((density == 0).double().mean())
    out["dense_fraction"] = float((density > dense_density).double().mean())
    out["feature_density"] = density.tolist()
    out["n_tokens"] = acc.tokens
    out["dictionary"] = d.name
    return out
