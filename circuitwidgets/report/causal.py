"""The report's "Testing the circuit" sections: the induction circuit tested by intervening on runs.

Every section reads one quantity on one prompt set, both computed once by
:func:`circuitwidgets.causal.induction.induction_test` (the function the README and notebook 04 quote too):
the **logit difference at the last position between the answer and a control token**. Head patching and
path patching normalise it (0: corrupted, 1: clean); the (layer, position) map restores the residual stream at
one cell; the direct logit attribution splits the clean run's difference by head and by component; the logit
lens reads the same difference before each layer. Each figure is a mean over the prompts with its standard
deviation over them, and every number the text quotes is formatted from the computed result, so
``induction_test(cw.load_pretrained(name))`` in one notebook cell gives them all back.

This module sits beside :mod:`circuitwidgets.report.paper` (which imports it, never the reverse) and returns plain
``(title, explanation HTML, widget)`` triples.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import numpy as np

from circuitwidgets._text import visible_label
from circuitwidgets.causal import Sweep
from circuitwidgets.causal.induction import InductionTest
from circuitwidgets.model import CircuitModel

__all__ = ["causal_sections", "strongest_heads"]

#: Below this (normalised), a receiver's share of the path is called small in the text.
SMALL_PATH = 0.1

#: One section of the page: its title, its explanation (HTML) and its view.
Triple = tuple[str, str, Any]

#: The one cell that recomputes every number of these sections.
RECOMPUTE = (
    "<code>from circuitwidgets.causal.induction import induction_test; "
    "t = induction_test(cw.load_pretrained({name!r}))</code>"
)


def strongest_heads(sweep: Sweep, k: int = 3) -> list[tuple[str, float]]:
    """The ``k`` heads of a ``(layer, head)`` sweep with the largest (signed) values, as ``("L1H5", value)``."""
    return [("".join(labels), value) for labels, value in sweep.top(k, absolute=False)]


def _head_index(name: str) -> tuple[int, int]:
    """``"L1H5"`` → ``(1, 5)``."""
    layer, head = name[1:].split("H")
    return int(layer), int(head)


def _named(heads: list[tuple[str, float]], sd: np.ndarray | None = None) -> str:
    """``L1H9 (+0.38 ± 0.12), L1H5 (+0.36 ± 0.91) and L1H7 (+0.29 ± 0.62)``, for the text (± the s.d. over prompts)."""
    parts = []
    for name, value in heads:
        spread = f" ± {sd[_head_index(name)]:.2f}" if sd is not None else ""
        parts.append(f"<b>{html.escape(name)}</b> ({value:+.2f}{spread})")
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _most_negative(sweep: Sweep) -> tuple[str, float]:
    """The head of a ``(layer, head)`` sweep with the smallest value, as ``("L1H3", value)``."""
    values = np.nan_to_num(sweep.values, nan=np.inf)
    layer, head = np.unravel_index(int(np.argmin(values)), values.shape)
    return f"{sweep.labels['layer'][layer]}{sweep.labels['head'][head]}", float(values[layer, head])


def _convention(model: CircuitModel, sweep: Sweep) -> str:
    """`` <b>Convention</b>: norms recomputed.`` where the model has norms (a model without has nothing to state)."""
    if model.cfg.normalization == "none" or not sweep.convention:
        return ""
    return f" <b>Convention</b>: {html.escape(sweep.convention)}."


def _metric_html(t: InductionTest, sweep: Sweep) -> str:
    half = t.prompts.half
    return (
        f"<b>Metric</b> (every section of this part of the page): at the last position, the logit of the answer "
        f"<code>r{half}</code> minus that of a control token (the last token of the other random sequence, the same "
        f"in every run), averaged over the prompts and here normalised: 0 is the corrupted run (logit difference "
        f"{sweep.corrupted_value:.2f}), 1 the clean run ({sweep.clean_value:.2f}). ± is the standard deviation over "
        f"the {t.prompts.clean.shape[0]} prompts of each prompt's value on the same scale"
    )


def _prompts_html(t: InductionTest, model: CircuitModel) -> str:
    p = t.prompts
    return (
        f"<b>Prompts</b>: {html.escape(p.describe())}: <code>r1 … r{p.half}</code> then <code>r1 … r{p.half - 1}</code>, "
        f"so that at the last position (the token <code>r{p.half - 1}</code>) induction predicts <code>r{p.half}</code>. "
        f"The attention view above shows the first prompt. Recompute: "
        + RECOMPUTE.format(name=visible_label(model.name)).replace("'", "&#x27;")
    )


def _head_patching(model: CircuitModel, t: InductionTest) -> Triple:
    """Head patching under corruption A, as a map."""
    from circuitwidgets.widgets import PatchingMap

    heads = t.heads_a
    top = strongest_heads(heads)
    text = (
        "<p>The views above read the circuit from weights and attention patterns; here it is tested on runs. "
        f"{_prompts_html(t, model)}.</p>"
        "<p><b>Corruption A</b>: the whole first copy replaced by other random tokens, so the last token has no "
        "earlier occurrence: nothing to find and nothing to copy. Each cell runs the corrupted prompts with one head's "
        "output (<code>z</code>, at every position) restored from the clean run "
        '(<code>causal.patch(site="z", by=("layer", "head"))</code>; <code>t.heads_a</code>).</p>'
        f"<p>{_metric_html(t, heads)}.{_convention(model, heads)} "
        f"The three strongest heads: {_named(top, t.heads_a_sd)}.</p>"
    )
    if t.previous is not None and t.heads_b is not None:
        prev = t.previous
        under_a, under_b = float(heads.values[0, prev]), float(t.heads_b.values[0, prev])
        text += (
            f"<p>Restoring the previous-token head L0H{prev} alone gives {under_a:+.2f} under corruption A and "
            f"{under_b:+.2f} under corruption B (below)"
            + (
                ". Its output tells the later heads where the token after the earlier occurrence is; under corruption "
                "A a different token is written there, so that address alone cannot restore the answer. Corruption B "
                "keeps the answer in place and changes only the token before it, which is what this head reports"
                if under_a < SMALL_PATH <= under_b
                else ""
            )
            + ".</p>"
        )
    title = "Testing the circuit: which heads carry the answer (activation patching)"
    return title, text, PatchingMap(heads, title="head patching, corruption A: each head's output restored")


def _position_patching(t: InductionTest) -> Triple:
    """The residual stream restored at one (layer, position) under corruption B, as a map."""
    from circuitwidgets.widgets import PatchingMap

    sweep = t.positions_b
    cells = sweep.top(2, absolute=False)
    named = " and ".join(
        f"<b>{html.escape(visible_label(layer))}, position {html.escape(visible_label(pos))}</b> ({value:+.2f})"
        for (layer, pos), value in cells
    )
    text = (
        f"<p><b>Corruption B</b>: only the earlier occurrence of the last token (<code>r{t.prompts.half - 1}</code> in "
        "the first copy) replaced; the answer is still written where it was. Each cell restores the residual stream "
        "before one layer at one position from the clean run "
        '(<code>causal.patch(site="resid_pre", by=("layer", "pos"))</code>; <code>t.positions_b</code>), same metric, '
        f"mean over the prompts (corrupted {sweep.corrupted_value:.2f}, clean {sweep.clean_value:.2f}). "
        f"The two cells that restore most: {named}. Before layer 0 the only position that matters is the one that "
        "was corrupted; before layer 1 it is the next one, the answer's place in the first copy: layer 0's "
        "previous-token head has moved the information one position on, where the induction heads' keys read it. "
        "Click a cell to select its token in the attention view and the logit lens.</p>"
    )
    title = "Testing the circuit: where the information sits, layer by position (activation patching)"
    return title, text, PatchingMap(sweep, title="residual stream patching, corruption B: one (layer, position)")


def _path_patching(model: CircuitModel, t: InductionTest, score: float) -> Triple:
    """Path patching from the previous-token head into every later head's keys, under corruption B."""
    from circuitwidgets.widgets import PatchingMap

    assert t.paths_k is not None and t.previous is not None and t.heads_b is not None
    paths, prev = t.paths_k, t.previous
    restored = float(t.heads_b.values[0, prev])
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
            + (" (here through the layer-0 MLP, which the weight-space views leave out)" if model.cfg.has_mlp else "")
            + "."
        )
    text = (
        f"<p>Corruption B again. The sender is the previous-token head L0H{prev}, the strongest of layer 0 by the "
        f"previous-token detector above ({score:.2f}). Path patching adds only its clean-minus-corrupted write to the "
        "<em>keys</em> of one later head at a time; nothing else sees the change, and everything after that head is "
        f'recomputed (<code>causal.path_patch(sender=(0, {prev}), via="k")</code>; <code>t.paths_k</code>; layer 0 '
        "cannot read it: n/a).</p>"
        f"<p>{_metric_html(t, paths)}.{_convention(model, paths)} The strongest receivers: "
        f"{_named(top)}. {verdict}</p>"
    )
    title = "Testing the circuit: the previous-token head's write into the induction heads' keys (path patching)"
    return title, text, PatchingMap(paths, title=f"path patching from L0H{prev} into each receiver's keys (k)")


def _components_table(t: InductionTest) -> str:
    """The logit difference by component at the last position and at the same place of the first copy."""
    labels = [*t.components.labels["component"], "unembedding bias"]

    def per_prompt(s: Sweep) -> np.ndarray:
        rest = sum(np.asarray(v, dtype=np.float64) for v in s.extra["rest"].values())
        return np.column_stack([s.values, rest])  # [prompts, components + 1]

    one, two = per_prompt(t.components_first), per_prompt(t.components)
    columns = [one, two, two - one]
    rows = [
        f"<tr><th>{html.escape(label)}</th>"
        + "".join(f"<td>{c[:, i].mean():+.2f} ± {c[:, i].std():.2f}</td>" for c in columns)
        + "</tr>"
        for i, label in enumerate(labels)
    ]
    totals = [c.sum(1) for c in columns]
    rows.append(
        "<tr><th>total: the logit difference</th>"
        + "".join(f"<td>{c.mean():+.2f} ± {c.std():.2f}</td>" for c in totals)
        + "</tr>"
    )
    return (
        '<table class="cw-table"><tr><th>component</th><th>first copy (same next token)</th><th>last position '
        "(second copy)</th><th>change</th></tr>" + "".join(rows) + "</table>"
    )


def _lens_table(t: InductionTest) -> str:
    """The logit difference read at each row of the logit lens, at the last position."""
    rows = [
        f"<tr><th>{html.escape(label)}</th><td>{t.lens[r].mean():+.2f} ± {t.lens[r].std():.2f}</td></tr>"
        for r, label in enumerate(t.lens_labels)
    ]
    return (
        '<table class="cw-table"><tr><th>stream read</th><th>logit difference, answer − control</th></tr>'
        + "".join(rows)
        + "</table>"
    )


def _attribution(model: CircuitModel, t: InductionTest) -> Triple:
    """The clean run's logit difference by head as a view, after the tables by component and of the lens."""
    from circuitwidgets.widgets import LogitAttribution

    by_head = t.attribution_mean()
    sd = t.attribution_sd()
    top = strongest_heads(by_head)
    against = _most_negative(by_head)
    mlp = " In a model with MLPs this is where their share shows: the weight-space views leave every MLP path out."
    text = (
        "<p>The clean run's logit difference (answer − control, the quantity the patching above normalises) split "
        "into each component's direct write"
        + (
            f" through the final norm ({html.escape(by_head.convention)})"
            if model.cfg.normalization != "none"
            else " (this model has no norms: the map from the stream to the logits is linear)"
        )
        + "; the parts sum to the model's logit difference. A difference of two "
        "logits ignores any shift applied to every token's logit, so no head gets credit for moving them all. "
        "At the same place of the first copy the next token is also the answer, but nothing has repeated yet: the "
        "change column is what repetition adds"
        + (f".{mlp}" if model.cfg.has_mlp else ".")
        + ' (<code>causal.logit_attribution(by="component", reduce="none")</code>; <code>t.components</code>, '
        "<code>t.components_first</code>; mean ± s.d. over the prompts.)</p>"
        + _components_table(t)
        + "<p>The logit lens reads the residual stream before each layer and after the last through the final norm "
        "and the unembedding; here, the same logit difference at the last position (<code>t.lens</code>).</p>"
        + _lens_table(t)
        + "<p>The view splits the clean logit difference by head "
        '(<code>causal.logit_attribution(by="head")</code>, <code>t.attribution</code>, mean over the prompts): bars '
        f"in the model's order, as a running sum that ends at the mean logit difference ({by_head.extra['logit']:.2f}, "
        f"± {float(np.std(t.clean)):.2f} over the prompts). The heads that write the most: {_named(top, sd)}"
        + (f"; the one that writes most against it: {_named([against], sd)}" if against[1] < 0 else "")
        + ". Click a head's bar to choose it in every view of the page.</p>"
    )
    title = "Testing the circuit: what each head writes to the answer (direct logit attribution)"
    return title, text, LogitAttribution(by_head)


def causal_sections(
    model: CircuitModel,
    test: InductionTest,
    previous_token: np.ndarray,
    log: Callable[[str], None] = lambda s: None,
) -> list[Triple]:
    """The "Testing the circuit" sections of a model with at least one layer, as ``(title, HTML, widget)``.

    ``test`` is :func:`~circuitwidgets.causal.induction.induction_test` of ``model``; ``previous_token``
    ``[n_layers, n_heads]`` the previous-token detector's scores (the path patching's sender is its strongest
    head of layer 0; a model of one layer has no later head to receive it, and no path patching section).
    """
    log("causal sections")
    sections = [_head_patching(model, test), _position_patching(test)]
    if test.paths_k is not None and test.previous is not None:
        sections.append(_path_patching(model, test, float(previous_token[0, test.previous])))
    sections.append(_attribution(model, test))
    return sections
