"""The induction test on one stated prompt set: every causal number the README, the report and notebook 04 quote.

One metric runs through every part, so that the parts can be compared: the **logit difference at the last
position between the answer and a control token** (the same control in every run). Patching normalises it (0:
the corrupted run, 1: the clean run); the direct logit attribution splits the clean run's logit difference by
head; the logit lens reads the same difference off the residual stream before each layer and after the last.
A difference of two logits is unchanged by any shift applied to every token's logit, so the attribution reads
no share of the common shift that dominates a head's raw-logit bar.

Each figure comes with its spread over the prompts (the standard deviation of the per-prompt values), and
``induction_test(cw.load_pretrained("attn-only-2l-12h"))`` recomputes all of them in one cell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray

from circuitwidgets import circuits
from circuitwidgets.causal.attribution import logit_attribution
from circuitwidgets.causal.lens import logit_lens
from circuitwidgets.causal.metrics import LogitDiff, logit_diff, normalised
from circuitwidgets.causal.patching import patch, path_patch
from circuitwidgets.causal.result import Sweep
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel

__all__ = ["InductionPrompts", "InductionTest", "induction_prompts", "induction_test"]

#: The stated prompt set: ``N_PROMPTS`` sequences of ``HALF`` random tokens, from ``torch.Generator().manual_seed(SEED)``.
HALF, N_PROMPTS, SEED = 20, 8, 0


@dataclass(frozen=True)
class InductionPrompts:
    """Clean prompts ``[BOS] r r[:-1]``, their two corruptions, the answers ``r[-1]`` and the control tokens.

    ``corrupt_a`` replaces the whole first copy by other random tokens (nothing to find, nothing to copy);
    ``corrupt_b`` replaces only the earlier occurrence of the last token (the answer stays where it was, the
    token before it differs). ``control`` is the last token of the other random sequence, the same in every run.
    """

    clean: torch.Tensor
    corrupt_a: torch.Tensor
    corrupt_b: torch.Tensor
    answer: torch.Tensor
    control: torch.Tensor
    half: int
    seed: int

    @property
    def metric(self) -> LogitDiff:
        """The logit difference, answer minus control, at the last position (unnormalised)."""
        return logit_diff(self.answer.tolist(), self.control.tolist())

    def describe(self) -> str:
        """The prompt set in one sentence, for captions."""
        return (
            f"{self.clean.shape[0]} prompts of {self.half} random tokens repeated, the second copy one token short "
            f"(torch.Generator().manual_seed({self.seed}))"
        )


def induction_prompts(
    model: CircuitModel, half: int = HALF, n_prompts: int = N_PROMPTS, seed: int = SEED
) -> InductionPrompts:
    """The stated prompt set for ``model``: two draws of ``[n_prompts, half]`` ids uniform over the non-BOS ids
    (first the sequences ``r``, then the others), a BOS token first where the model has one.

    On the shipped models (BOS id 0) the draws equal ``torch.randint(1, d_vocab, ...)`` from the same generator,
    notebook 04's prompts.
    """
    if isinstance(half, bool) or not isinstance(half, int) or half < 3:
        raise ArgumentError(f"half: expected an int >= 3 (the corruptions need two earlier tokens), got {half!r}")
    full = circuits.repeated_random_tokens(model, seq_len=half, n_seqs=2 * n_prompts, seed=seed).cpu()
    start = full.shape[1] - 2 * half  # 1 with a BOS token, else 0
    prefix = full[:n_prompts, :start]
    first, other = full[:n_prompts, start : start + half], full[n_prompts:, start : start + half]
    first_b = first.clone()
    first_b[:, half - 2] = other[:, 0]  # the earlier occurrence of the last token
    device = model.device
    return InductionPrompts(
        clean=torch.cat([prefix, first, first[:, : half - 1]], dim=1).to(device),
        corrupt_a=torch.cat([prefix, other, first[:, : half - 1]], dim=1).to(device),
        corrupt_b=torch.cat([prefix, first_b, first[:, : half - 1]], dim=1).to(device),
        answer=first[:, half - 1],
        control=other[:, half - 1],
        half=half,
        seed=seed,
    )


@dataclass(frozen=True)
class InductionTest:
    """Every causal figure of the induction circuit on one prompt set, with its spread over the prompts.

    ``heads_a``/``heads_b``: head patching (``z``) under corruption A/B, normalised, mean over the prompts
    (``heads_a_sd``: the standard deviation over the prompts of each prompt's value, normalised by the batch's clean
    and corrupted values so that the prompts' values average to the sweep's). ``paths_k``: path patching from the
    previous-token head ``previous`` into each later head's keys, under corruption B (``None`` in a one-layer
    model). ``attribution``: the clean logit difference by head, one row per prompt (``reduce="none"``).
    ``components``/``components_first``: the same logit difference by component (``reduce="none"``) at the last
    position and at the same place of the first copy (where the next token is also the answer, but nothing has
    repeated yet). ``positions_b``: the residual stream restored at one (layer, position) under corruption B.
    ``lens``: the logit difference read at each row of the logit lens ``[rows, prompts]``, ``lens_labels`` its
    rows. ``clean``: the model's logit difference per prompt.
    """

    prompts: InductionPrompts
    previous: int | None
    heads_a: Sweep
    heads_a_sd: NDArray[np.float64]
    heads_b: Sweep | None
    paths_k: Sweep | None
    attribution: Sweep
    components: Sweep
    components_first: Sweep
    positions_b: Sweep
    lens: NDArray[np.float64]
    lens_labels: list[str]
    clean: NDArray[np.float64]

    def attribution_mean(self) -> Sweep:
        """The attribution by head averaged over the prompts (a ``(layer, head)`` sweep, for the view)."""
        values = self.attribution.values.mean(0)
        labels = {d: self.attribution.labels[d] for d in ("layer", "head")}
        extra = dict(self.attribution.extra)
        extra["rest"] = {k: np.asarray(v).mean(0) for k, v in extra["rest"].items()}
        extra["logit"] = float(np.mean(extra["logit"]))
        extra["model_logits"] = float(np.mean(extra["model_logits"]))
        return Sweep(
            values, ("layer", "head"), labels, self.attribution.technique,
            f"logit difference (answer − control), mean over {self.attribution.values.shape[0]} prompts",
            site=None, convention=self.attribution.convention, model=self.attribution.model,
            prompts=self.attribution.prompts, extra=extra,
        )  # fmt: skip

    def attribution_sd(self) -> NDArray[np.float64]:
        """Each head's attribution's standard deviation over the prompts ``[layer, head]``."""
        sd: NDArray[np.float64] = self.attribution.values.std(0)
        return sd


def _per_prompt(model: CircuitModel, corrupted: torch.Tensor, p: InductionPrompts, whole: Sweep) -> np.ndarray:
    """Each prompt's head patching ``[prompts, layer, head]``, normalised by the whole batch's clean and corrupted
    values, so that the prompts' values average exactly to ``whole``'s (a prompt's own normalisation would divide
    by its own, sometimes tiny, clean-minus-corrupted difference)."""
    assert whole.clean_value is not None and whole.corrupted_value is not None
    out = []
    for i in range(p.clean.shape[0]):
        metric = normalised(
            logit_diff(int(p.answer[i]), int(p.control[i])), clean=whole.clean_value, corrupted=whole.corrupted_value
        )
        sweep = patch(model, p.clean[i : i + 1], corrupted[i : i + 1], metric, site="z", by=("layer", "head"))
        out.append(sweep.values)
    return np.stack(out)


def _lens_difference(model: CircuitModel, p: InductionPrompts) -> tuple[np.ndarray, list[str]]:
    """The logit difference (answer − control) at the last position read at each row of the logit lens."""
    lens = logit_lens(model, p.clean, k=1)
    ids = torch.cat([p.answer, p.control])
    lp = lens.log_prob(ids)[:, :, -1, :]  # [rows, prompts, 2 * prompts]
    n = p.answer.shape[0]
    rows = np.arange(n)
    return lp[:, rows, rows] - lp[:, rows, n + rows], list(lens.layer_labels)


def induction_test(model: CircuitModel, prompts: InductionPrompts | None = None) -> InductionTest:
    """Head patching under corruptions A and B, path patching into the keys, the direct logit attribution and the
    logit lens of the induction circuit, all on ``prompts`` (default: :func:`induction_prompts`) with one metric."""
    p = induction_prompts(model) if prompts is None else prompts
    metric = normalised(p.metric)
    heads_a = patch(model, p.clean, p.corrupt_a, metric, site="z", by=("layer", "head"))
    heads_a_sd = _per_prompt(model, p.corrupt_a, p, heads_a).std(0)
    previous = None
    heads_b = paths_k = None
    if model.cfg.n_layers >= 2:
        previous = int(np.argmax(circuits.head_scores(model, kind="previous_token")[0]))
        heads_b = patch(model, p.clean, p.corrupt_b, metric, site="z", by=("layer", "head"))
        paths_k = path_patch(model, p.clean, p.corrupt_b, metric, sender=(0, previous), via="k")
    pair = (p.answer, p.control)
    attribution = logit_attribution(model, p.clean, pair, by="head", reduce="none")
    components = logit_attribution(model, p.clean, pair, by="component", reduce="none")
    earlier = p.clean.shape[1] - 1 - p.half  # the first copy's place of the last token, r[half - 2]
    components_first = logit_attribution(model, p.clean, pair, by="component", pos=earlier, reduce="none")
    positions_b = patch(model, p.clean, p.corrupt_b, metric, site="resid_pre", by=("layer", "pos"))
    lens, labels = _lens_difference(model, p)
    clean = np.asarray(attribution.extra["model_logits"], dtype=np.float64)
    return InductionTest(
        p, previous, heads_a, heads_a_sd, heads_b, paths_k, attribution, components, components_first,
        positions_b, lens, labels, clean,
    )  # fmt: skip
