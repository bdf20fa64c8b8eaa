"""An attribution graph checked by intervention: for its most influential features, the change of the target the
graph predicts beside the change measured in the model.

Zeroing feature ``i`` (activation ``a``) changes its write by ``−a W_dec[i]``; the graph's edge ``i → target`` is
the target's change per unit of that write in the local replacement model, so the graph predicts a direct change
of ``−edge``. Measured three ways with :func:`circuitwidgets.features.intervene`:

- ``direct``: attention, every MLP output (but for the intervention's write) and the norms frozen: the direct
  effect, which must equal the prediction to float tolerance (the graph is exact);
- ``frozen``: attention frozen, the MLPs free (circuit-tracer's default): indirect paths through later features
  count too;
- ``free``: nothing frozen.

The prediction is only the direct part, so against ``frozen`` and ``free`` the agreement is a rank correlation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from circuitwidgets._checks import check_int
from circuitwidgets.features.intervention import intervene
from circuitwidgets.graphs.attribution import attribution_matrix
from circuitwidgets.graphs.dense import DenseAttribution
from circuitwidgets.graphs.influence import node_influence
from circuitwidgets.model import CircuitModel

__all__ = ["InterventionCheck", "check_by_intervention", "target_value"]


def target_value(target: dict[str, Any], logit_tokens: Sequence[int], logits: torch.Tensor) -> float:
    """The graph's target (its ``extra["target"]``) read off ``logits`` ``[pos, d_vocab]`` at the last position:
    the first logit node's token (centred), or a pair's difference; NaN for a direction."""
    last = logits[-1].double()
    kind = target.get("kind", "top")
    tokens = [int(t) for t in target.get("tokens") or logit_tokens]
    if kind == "pair" and len(tokens) == 2:
        return float(last[tokens[0]] - last[tokens[1]])
    if kind == "direction" or not tokens:
        return math.nan
    return float(last[tokens[0]] - last.mean())


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    def ranks(x: Sequence[float]) -> torch.Tensor:
        return torch.argsort(torch.argsort(torch.tensor(x, dtype=torch.float64))).double()

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(ra.norm() * rb.norm())
    return float((ra * rb).sum()) / den if den > 0 else math.nan


@dataclass
class InterventionCheck:
    """Rows ``(label, activation, influence, predicted, direct, frozen, free)`` for the features checked, and:
    ``direct_error`` (largest ``|predicted − direct|`` over the largest ``|predicted|``), ``rank_frozen`` and
    ``rank_free`` (Spearman correlation of predicted with measured)."""

    rows: list[tuple[str, float, float, float, float, float, float]] = field(default_factory=list)
    direct_error: float = math.nan
    rank_frozen: float = math.nan
    rank_free: float = math.nan
    target: str = ""

    def table(self) -> str:
        """The rows as a plain-text table (labels are text)."""
        head = f"{'feature':<14} {'act':>7} {'infl':>6} {'predicted':>10} {'direct':>10} {'frozen':>10} {'free':>10}"
        lines = [f"target: {self.target}", head]
        for label, a, inf, p, d, fz, fr in self.rows:
            lines.append(f"{label:<14} {a:7.2f} {inf:6.3f} {p:+10.4f} {d:+10.4f} {fz:+10.4f} {fr:+10.4f}")
        lines.append(
            f"direct vs predicted: largest error {self.direct_error:.1e} (relative); rank correlation with "
            f"frozen-attention {self.rank_frozen:.2f}, free {self.rank_free:.2f}"
        )
        return "\n".join(lines)


def check_by_intervention(
    model: CircuitModel,
    transcoders: object,
    tokens: torch.Tensor | Sequence[int] | str,
    *,
    n: int = 20,
    dense: DenseAttribution | None = None,
    target: object = None,
    max_feature_nodes: int | None = 7500,
) -> InterventionCheck:
    """Zero each of the ``n`` most influential features of ``tokens``' graph (``dense``, or built here with
    ``target`` and ``max_feature_nodes``) and compare the target's change with the graph's (module docstring)."""
    n = check_int("n", n, 1)
    if dense is None:
        dense = attribution_matrix(model, transcoders, tokens, target=target, max_feature_nodes=max_feature_nodes)
    influence = node_influence(dense)[: dense.n_features]
    top = torch.argsort(influence, descending=True)[:n].tolist()
    goal = dict(dense.extra.get("target") or {"kind": "top"})
    logit_tokens = dense.logit_tokens.tolist()
    out = InterventionCheck(target=str((dense.extra.get("target_labels") or ["logit"])[0]))
    L = int(dense.n_layers)
    for i in top:
        layer, pos, feature = dense.features[i].tolist()
        todo = [(layer, pos, feature, 0.0)]
        changes = []
        for frozen, constrained in ((True, range(L)), (True, None), (False, None)):
            run = intervene(
                model, transcoders, dense.tokens, todo, freeze_attention=frozen, constrained_layers=constrained
            )
            changes.append(
                target_value(goal, logit_tokens, run.logits) - target_value(goal, logit_tokens, run.clean_logits)
            )
        predicted = -float(dense.adjacency[dense.logit_start, i])
        label = f"L{layer} f{feature} @{pos}"
        out.rows.append((label, float(dense.activations[i]), float(influence[i]), predicted, *changes))  # type: ignore[arg-type]
    scale = max((abs(r[3]) for r in out.rows), default=0.0)
    out.direct_error = max((abs(r[3] - r[4]) for r in out.rows), default=0.0) / scale if scale > 0 else math.nan
    out.rank_frozen = _spearman([r[3] for r in out.rows], [r[5] for r in out.rows])
    out.rank_free = _spearman([r[3] for r in out.rows], [r[6] for r in out.rows])
    return out
