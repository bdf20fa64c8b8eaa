"""The report's "Testing the circuit" sections: the induction circuit tested by intervening on runs.

On repeated random tokens, three tests (:mod:`circuitwidgets.causal`), each a live view with a text that
states its metric, its corruption and its convention:

- head patching: which heads, restored from a clean run into a corrupted one, bring the answer back;
- path patching from the previous-token head (the strongest by its detector score) into every later head's
  keys: whether the induction heads find the answer through that head's write;
- the direct logit attribution, by head, of the second copy's next tokens, with the tables that compare it
  with the first copy by component and read the stream with the logit lens.

Every number the text quotes is formatted from the computed result. This module sits beside
:mod:`circuitwidgets.report` (which imports it, never the reverse) and returns plain
``(title, explanation HTML, widget)`` triples.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from circuitwidgets import causal, circuits
from circuitwidgets.causal import Sweep
from circuitwidgets.model import CircuitModel

__all__ = ["CausalPrompts", "causal_prompts", "causal_sections", "strongest_heads"]

#: Random tokens in each half of the patching prompts, and how many prompts.
HALF, N_PROMPTS = 30, 8

#: The tables and the attribution view read every ``EVERY``-th position of a copy (a sample: the report stays quick).
EVERY = 4

#: Below this (normalised), a receiver's share of the path is called small in the text.
SMALL_PATH = 0.1

#: One section of the page: its title, its explanation (HTML) and its view.
Triple = tuple[str, str, Any]


@dataclass(frozen=True)
class CausalPrompts:
    """The clean prompts ``[BOS] r r[:-1]`` and their two corruptions, with the metric on them.

    ``corrupt_a`` replaces the whole first copy by other random tokens; ``corrupt_b`` replaces only the earlier
    occurrence of the last token. ``metric`` is the logit difference at the last position between the answer
    (``r[-1]``) and a control token; the sections normalise it (0: the corrupted run, 1: the clean run).
    """

    clean: torch.Tensor
    corrupt_a: torch.Tensor
    corrupt_b: torch.Tensor
    metric: causal.LogitDiff
    half: int


def _other_than(candidates: torch.Tensor, avoid: torch.Tensor) -> torch.Tensor:
    """Per prompt, the first of ``candidates`` ``[batch, 2]`` that differs from ``avoid`` ``[batch]`` (two random
    draws both equal to it are one chance in millions; the second then stands, and the metric still runs)."""
    return torch.where(candidates[:, 0] != avoid, candidates[:, 0], candidates[:, 1])


def causal_prompts(model: CircuitModel, half: int = HALF, n_prompts: int = N_PROMPTS) -> CausalPrompts:
    """The patching prompts of the report: ``n_prompts`` sequences of ``half`` random tokens repeated, the second
    copy one token short, so that induction predicts the first copy's last token at the last position."""
    clean_full = circuits.repeated_random_tokens(model, seq_len=half, n_seqs=n_prompts, seed=0)
    other_full = circuits.repeated_random_tokens(model, seq_len=half, n_seqs=n_prompts, seed=1)
    start = clean_full.shape[1] - 2 * half  # 1 with a BOS token, else 0
    prefix, first = clean_full[:, :start], clean_full[:, start : start + half]
    other = other_full[:, start : start + half]
    clean = torch.cat([prefix, first, first[:, : half - 1]], dim=1)
    corrupt_a = torch.cat([prefix, other, first[:, : half - 1]], dim=1)
    first_b = first.clone()
    first_b[:, half - 2] = _other_than(other[:, :2], first[:, half - 2])  # the earlier occurrence of the last token
    corrupt_b = torch.cat([prefix, first_b, first[:, : half - 1]], dim=1)
    answer = first[:, half - 1]
    control = _other_than(other[:, [half - 1, half - 2]], answer)
    metric = causal.logit_diff(answer.tolist(), control.tolist())
    return CausalPrompts(clean, corrupt_a, corrupt_b, metric, half)


def strongest_heads(sweep: Sweep, k: int = 3) -> list[tuple[str, float]]:
    """The ``k`` heads of a ``(layer, head)`` sweep with the largest (signed) values, as ``("L1H5", value)``."""
    return [("".join(labels), value) for labels, value in sweep.top(k, absolute=False)]


def _most_negative(sweep: Sweep) -> tuple[str, float]:
    """The head of a ``(layer, head)`` sweep with the smallest value, as ``("L1H3", value)``."""
    values = np.nan_to_num(sweep.values, nan=np.inf)
    layer, head = np.unravel_index(int(np.argmin(values)), values.shape)
    return f"{sweep.labels['layer'][layer]}{sweep.labels['head'][head]}", float(values[layer, head])


def _named(heads: list[tuple[str, float]]) -> str:
    """``L1H9 (+0.44), L1H7 (+0.33) and L1H5 (+0.21)``, for the text."""
    parts = [f"<b>{html.escape(name)}</b> ({value:+.2f})" for name, value in heads]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _metric_html(p: CausalPrompts, sweep: Sweep) -> str:
    return (
        f"<b>Metric</b>: at the last position, the logit of the answer <code>r{p.half}</code> minus that of a control "
        f"token (another random token, the same in every run), averaged over the prompts and normalised: 0 is the "
        f"corrupted run (logit difference {sweep.corrupted_value:.2f}), 1 the clean run ({sweep.clean_value:.2f})"
    )


def _previous_token_note(prev: int, under_a: float, under_b: float) -> str:
    """What restoring the previous-token head alone does under each corruption (the reading only where the numbers
    bear it out: little under A, much more under B)."""
    text = (
        f"<p>Restoring the previous-token head L0H{prev} alone gives {under_a:+.2f} under corruption A and "
        f"{under_b:+.2f} under corruption B (below)"
    )
    if under_a < SMALL_PATH <= under_b:
        text += (
            ". Its output tells the later heads where the token after the earlier occurrence is; under corruption A "
            "a different token is written there, so that address alone cannot restore the answer. Corruption B keeps "
            "the answer in place and changes only the token before it, which is what this head reports"
        )
    return text + ".</p>"


def _head_patching(
    model: CircuitModel, p: CausalPrompts, prev: int | None, same_as_view: bool
) -> tuple[Triple, Sweep, Sweep | None]:
    """Head patching under corruption A, as a map; with a previous-token head, its value under corruption B too."""
    from circuitwidgets.widgets import PatchingMap

    normalised = causal.normalised(p.metric)
    heads_a = causal.patch(model, p.clean, p.corrupt_a, normalised, site="z", by=("layer", "head"))
    heads_b = (
        causal.patch(model, p.clean, p.corrupt_b, normalised, site="z", by=("layer", "head"))
        if prev is not None
        else None
    )
    top = strongest_heads(heads_a)
    batch = p.clean.shape[0]
    text = (
        "<p>The views above read the circuit from weights and attention patterns; here it is tested on runs. "
        f"Prompts: {batch} sequences of {p.half} random tokens <code>r1 … r{p.half}</code> repeated, the second copy "
        f"one token short, so that at the last position (the token <code>r{p.half - 1}</code>) induction predicts "
        f"<code>r{p.half}</code>"
        + (" (the first is the attention view's sequence above, less its last token)" if same_as_view else "")
        + ". <b>Corruption A</b>: the whole first copy replaced by other random tokens, so the last token has no "
        "earlier occurrence: nothing to find and nothing to copy. Each cell runs the corrupted prompts with one head's "
        "output (<code>z</code>, at every position) restored from the clean run "
        '(<code>causal.patch(site="z", by=("layer", "head"))</code>).</p>'
        f"<p>{_metric_html(p, heads_a)}. <b>Convention</b>: {html.escape(heads_a.convention)}. "
        f"The three strongest heads: {_named(top)}.</p>"
    )
    if prev is not None and heads_b is not None:
        text += _previous_token_note(prev, float(heads_a.values[0, prev]), float(heads_b.values[0, prev]))
    title = "Testing the circuit: which heads carry the answer (activation patching)"
    return (title, text, PatchingMap(heads_a)), heads_a, heads_b


def _path_patching(model: CircuitModel, p: CausalPrompts, prev: int, score: float, restored: float) -> Triple:
    """Path patching from the previous-token head into every later head's keys, under corruption B."""
    from circuitwidgets.widgets import PatchingMap

    paths = causal.path_patch(model, p.clean, p.corrupt_b, causal.normalised(p.metric), sender=(0, prev), via="k")
    top = strongest_heads(paths)
    total = float(np.nansum(paths.values))
    largest = top[0][1]
    if largest >= SMALL_PATH:
        verdict = (
            f"Summed over every receiver: {total:+.2f} (restoring the head's whole output under this corruption: "
            f"{restored:+.2f}). The previous-token head's effect reaches the answer through these heads' keys: "
            "K-composition, which the composition map above reads from the weights."
        )
    else:
        verdict = (
            f"No receiver's keys carry much of it ({largest:+.2f} at most, against {restored:+.2f} when the head's "
            "whole output is restored): its effect reaches the later heads another way"
            + (
                " (in a model with MLPs, possibly through an MLP, which the weight-space views leave out)"
                if model.cfg.has_mlp
                else ""
            )
            + "."
        )
    text = (
        f"<p><b>Corruption B</b>: only the earlier occurrence of the last token (<code>r{p.half - 1}</code> in the "
        f"first copy) replaced. The answer <code>r{p.half}</code> is still written where it was, but the token before "
        "it differs, so a head that finds the answer by the previous-token information written there no longer finds "
        f"it. The sender is the previous-token head L0H{prev}, the strongest of layer 0 by the previous-token detector "
        f"above ({score:.2f}). Path patching adds only its clean-minus-corrupted write to the <em>keys</em> of one "
        "later head at a time; nothing else sees the change, and everything after that head is recomputed "
        f'(<code>causal.path_patch(sender=(0, {prev}), via="k")</code>; layer 0 cannot read it: n/a).</p>'
        f"<p>{_metric_html(p, paths)}. <b>Convention</b>: {html.escape(paths.convention)}. The strongest receivers: "
        f"{_named(top)}. {verdict}</p>"
    )
    title = "Testing the circuit: the previous-token head's write into the induction heads' keys (path patching)"
    return title, text, PatchingMap(paths)


def _ordinal(n: int) -> str:
    return {2: "second", 3: "third", 4: "fourth"}.get(n, f"{n}th")


def _second_copy_positions(n_tokens: int, half: int) -> range:
    """Every ``EVERY``-th position of the second copy of ``[(BOS) r r]`` from its second token (the first copy's
    same places are ``half`` earlier); a sample that keeps the report quick, the same for the tables and the view."""
    return range(n_tokens - half + 1, n_tokens - 1, EVERY)


def _second_copy_attribution(model: CircuitModel, tokens: torch.Tensor, half: int) -> Sweep:
    """The direct logit attribution by head of the next token at the second copy's sampled positions of ``tokens``
    ``[1, (BOS) r r]`` (``half`` tokens in ``r``), averaged over them (the parts still sum to the mean logit)."""
    positions = _second_copy_positions(tokens.shape[1], half)
    each = [causal.logit_attribution(model, tokens, tokens[:, q + 1], by="head", pos=q) for q in positions]
    rest = {key: np.mean([s.extra["rest"][key] for s in each], axis=0) for key in each[0].extra["rest"]}
    return dataclasses.replace(
        each[0],
        values=np.mean([s.values for s in each], axis=0),
        metric=f"logit of the next token, mean over {len(each)} positions of the second copy",
        extra={"rest": rest, "logit": float(np.mean([s.extra["logit"] for s in each]))},
    )


def _attribution(model: CircuitModel, tokens: torch.Tensor, half: int) -> Triple:
    """The second copy's direct logit attribution by head as a view, after the tables by component and of the lens."""
    from circuitwidgets.widgets import LogitAttribution

    by_head = _second_copy_attribution(model, tokens, half)
    top = strongest_heads(by_head)
    against = _most_negative(by_head)
    tables, lens = _causal_tables(model, tokens, half)
    mlp = (
        " In a model with MLPs this is where their share shows: the weight-space views above leave every path "
        "through an MLP out."
        if model.cfg.has_mlp
        else ""
    )
    text = (
        "<p>On the attention view's sequence (one prompt, no corruption), each component's direct write onto the "
        "logit of the correct next token, through the final norm where the model has one (<b>convention</b>: "
        f"{html.escape(by_head.convention)}); the parts sum to the model's logit (before any final soft-cap). "
        "The second copy's answers are the first copy's, so the change "
        "column is what repetition adds (where the model has an induction circuit, its heads' layer writes most of "
        f"it).{mlp} Mean over every {_ordinal(EVERY)} position of a copy "
        '(<code>causal.logit_attribution(by="component")</code>).</p>'
        + tables
        + "<p>The logit lens reads the residual stream before each layer and after the last through the final norm "
        "and the unembedding: how often the correct next token is already the top prediction there, and its mean "
        "log-probability (<code>causal.logit_lens</code>).</p>"
        + lens
        + "<p>The view splits the second copy's logit by head "
        f'(<code>causal.logit_attribution(by="head")</code>, mean over the same positions of the second copy): '
        "bars in the model's order, as a running sum that ends at the mean logit "
        f"({by_head.extra['logit']:.2f}). The heads that write the most: {_named(top)}"
        + (f"; the one that writes most against it: {_named([against])}" if against[1] < 0 else "")
        + ". Click a head's bar to choose it in every view of the page.</p>"
    )
    title = "Testing the circuit: what each head writes to the answer on the repeated half (direct logit attribution)"
    return title, text, LogitAttribution(by_head)


def _causal_tables(model: CircuitModel, tokens: torch.Tensor, half: int) -> tuple[str, str]:
    """On ``[(BOS) r r]`` (one sequence, ``half`` tokens in ``r``): the direct logit attribution of the correct next
    token by component, and the logit lens, on the first copy of ``r`` and at the same places of the second (same
    answers), as two tables."""
    n = half
    start = tokens.shape[1] - 2 * n  # 1 with a BOS token
    first: list[np.ndarray] = []
    second: list[np.ndarray] = []
    labels: list[str] = []
    for p in _second_copy_positions(tokens.shape[1], n):  # p - n: the same place of the first copy
        for store, q in ((second, p), (first, p - n)):
            a = causal.logit_attribution(model, tokens, tokens[:, q + 1], by="component", pos=q)
            labels = [*a.labels["component"], "unembedding bias"]
            store.append(np.append(a.values, sum(float(v) for v in a.extra["rest"].values())))
    one, two = np.mean(first, axis=0), np.mean(second, axis=0)
    rows = [
        f"<tr><th>{html.escape(label)}</th><td>{x:+.2f}</td><td>{y:+.2f}</td><td>{y - x:+.2f}</td></tr>"
        for label, x, y in zip([*labels, "total: the logit"], [*one, one.sum()], [*two, two.sum()], strict=True)
    ]
    attribution = (
        '<table class="cw-table"><tr><th>component</th><th>first copy</th><th>second copy</th><th>change</th></tr>'
        + "".join(rows)
        + "</table>"
    )
    lens = causal.logit_lens(model, tokens, k=1)
    answers = tokens[0, 1:]  # the answer at position i is token i + 1
    log_probs = lens.log_prob(answers)[:, 0]  # [rows, pos, answer]
    steps = np.arange(len(answers))
    lp = log_probs[:, steps, steps]  # [rows, pos]: each position's own answer
    top = lens.top_ids[:, 0, :-1, 0] == answers.cpu().numpy()[None]  # [rows, pos]
    halves = (np.arange(start, start + n - 1), np.arange(start + n, start + 2 * n - 1))  # each copy's positions
    rows = [
        f"<tr><th>{html.escape(label)}</th>"
        + "".join(f"<td>{top[r, h].mean():.0%}</td>" for h in halves)
        + "".join(f"<td>{lp[r, h].mean():.2f}</td>" for h in halves)
        + "</tr>"
        for r, label in enumerate(lens.layer_labels)
    ]
    table = (
        '<table class="cw-table"><tr><th>stream read</th><th>top-1, first copy</th><th>top-1, second copy</th>'
        "<th>log-prob, first copy</th><th>log-prob, second copy</th></tr>" + "".join(rows) + "</table>"
    )
    return attribution, table


def causal_sections(
    model: CircuitModel,
    tokens: torch.Tensor,
    half: int,
    previous_token: np.ndarray,
    log: Callable[[str], None] = lambda s: None,
) -> list[Triple]:
    """The "Testing the circuit" sections of a model with at least one layer, as ``(title, HTML, widget)``.

    ``tokens`` ``[1, BOS r r]`` is the page's repeated sequence (the attention view's, ``half`` tokens in ``r``),
    also the length of the patching prompts' halves; ``previous_token``
    ``[n_layers, n_heads]`` the previous-token detector's scores, whose strongest head of layer 0 is the sender
    of the path patching (a model of one layer has no later head to receive it: that section is left out).
    """
    prompts = causal_prompts(model, half)
    prev = int(np.argmax(previous_token[0])) if model.cfg.n_layers >= 2 else None
    same = prompts.clean.shape[1] == tokens.shape[1] - 1 and torch.equal(prompts.clean[0], tokens[0, :-1])
    log("head patching")
    head_section, _, heads_b = _head_patching(model, prompts, prev, same)
    sections = [head_section]
    if prev is not None and heads_b is not None:
        log("path patching")
        restored = float(heads_b.values[0, prev])
        sections.append(_path_patching(model, prompts, prev, float(previous_token[0, prev]), restored))
    log("direct logit attribution and logit lens")
    sections.append(_attribution(model, tokens, half))
    return sections
