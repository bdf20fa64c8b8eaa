"""The report's walk through the paper: its sections, in order, and the head and position every view starts on.

Sections follow *A Mathematical Framework for Transformer Circuits*: the direct
path's bigrams, copying heads by eigenvalues, skip-trigrams, composition,
induction heads on repeated random tokens, the circuit tested on runs there
(head patching, path patching, direct logit attribution: :mod:`circuitwidgets.report.causal`;
the logit lens: :mod:`circuitwidgets.report.lens`), the features of the induction answer where the model has
dictionaries (:mod:`circuitwidgets.report.features`), and term importance. Every number
is computed from the model when the page is made; every view is a live widget
that stays interactive in the saved file, with no kernel and no network.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from circuitwidgets import circuits
from circuitwidgets._text import visible_label, visible_token
from circuitwidgets.causal.induction import induction_test
from circuitwidgets.errors import ArgumentError
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.model import CircuitModel
from circuitwidgets.report.causal import causal_sections
from circuitwidgets.report.features import features_sections
from circuitwidgets.report.lens import lens_section

DEFAULT_TEXT = '''class Stack:
    """A last-in, first-out stack."""

    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()
'''

#: Traits kept equal across the report's views: choosing a head in one moves the others, offline; token positions
#: (``selected_dest``, a (layer, position) map's ``selected_pos``) are linked between the views of the same prompt.
LINKED = ("selected_layer", "selected_head", "selected_dest")

BIGRAM_SOURCES = [" def", "(", "self", "import", " return", "class", " for", " in"]


@dataclass(frozen=True)
class Section:
    """One step of the walkthrough: a heading, a short explanation (HTML), and a widget."""

    title: str
    explanation: str
    widget: Any


def _bigram_table(model: CircuitModel, k: int = 6) -> str:
    rows = []
    for text in BIGRAM_SOURCES:
        try:
            ids = model.tokenizer.encode(text)
        except (ArgumentError, ValueError, KeyError):  # a vocabulary without this word (no text tokenizer)
            continue
        if len(ids) != 1:
            continue
        logits = model.W_E[ids[0]] @ model.W_U
        top = logits.topk(k).indices.tolist()
        cells = "".join(
            f"<td><code>{html.escape(visible_token(model.tokenizer.token_str(int(t))))}</code></td>" for t in top
        )
        rows.append(f"<tr><th><code>{html.escape(visible_token(text))}</code></th>{cells}</tr>")
    header = "<tr><th>token</th>" + "".join(f"<th>#{i + 1}</th>" for i in range(k)) + "</tr>"
    return f'<table class="cw-table">{header}{"".join(rows)}</table>'


def _strongest_by_detector(scores: dict[str, np.ndarray]) -> str:
    """``previous token: L0H11 (0.62); induction: L1H5 (0.45); …``: each detector's strongest head, for the text
    (the heatmaps below show every head)."""
    parts = []
    for name, values in scores.items():
        layer, head = np.unravel_index(int(np.argmax(values)), values.shape)
        label = html.escape(visible_label(name.replace("_", " ")))
        parts.append(f"{label}: <b>L{int(layer)}H{int(head)}</b> ({float(values[layer, head]):.2f})")
    return "; ".join(parts)


def build_sections(
    model: CircuitModel,
    text: str = DEFAULT_TEXT,
    log: Callable[[str], None] = lambda s: None,
    card: dict[str, Any] | None = None,
    dictionaries: Mapping[str, Dictionary] | None = None,
) -> list[Section]:
    """Compute every section of the report for ``model`` (with ``card``, a shipped model's, also its training history;
    with ``dictionaries``, ``{name: Dictionary}`` of the model, the features of the induction answer)."""
    from circuitwidgets.widgets import (
        AttentionPatterns,
        CompositionMap,
        EigenScatter,
        HeadScores,
        SkipTrigramTable,
        TermImportance,
        TrainingHistory,
    )

    cfg = model.cfg
    sections: list[Section] = []
    log("bigrams")
    sections.append(
        Section(
            "The direct path: bigram statistics",
            "<p>With no attention at all, a transformer is the product <code>W_E W_U</code>: each token predicts the next "
            "from itself alone. The table shows, for a few tokens, the next tokens this product ranks highest"
            + (" (this model's MLPs, which also act on each token alone, are left out)" if cfg.has_mlp else "")
            + ".</p>"
            + _bigram_table(model),
            None,
        )
    )
    if cfg.n_layers == 0:
        return sections
    log("copying scores")
    ov = circuits.copying_scores(model, circuit="ov")
    sections.append(
        Section(
            "Copying heads: eigenvalues of the OV and QK circuits",
            "<p>A head whose OV circuit <code>W_E W_OV W_U</code> has mostly positive eigenvalues increases the logit of "
            "the token it attends to: it copies. The score Σλ/Σ|λ| is +1 for pure copying and −1 for anti-copying. "
            "Each point is a head at (OV score, QK score); induction heads sit in the top-right corner, copying what they "
            "match. Click a head to see its eigenvalues in the complex plane.</p>",
            EigenScatter(model),
        )
    )
    layer, head = np.unravel_index(int(np.nanargmax(ov)), ov.shape)
    log("skip-trigrams")
    sections.append(
        Section(
            "Skip-trigrams",
            "<p>One-layer heads implement skip-trigrams <code>[source] … [destination] → [out]</code>: the QK circuit says "
            "which sources a destination attends to, the OV circuit what attending to them predicts. The table shows "
            "the head selected on the page (its name is above the table), its strongest skip-trigrams first; a flagged "
            "row is one whose out token is its source token (the head copies it there), and other rows are not. "
            "Values are the skip-trigram's logit effect through this head alone (W_E W_OV W_U, in logits"
            + (", before the MLPs, which can rescale it" if cfg.has_mlp else "")
            + "). Choose another head anywhere on the page, or search a source token (tokens not precomputed here "
            "need a live kernel).</p>",
            SkipTrigramTable(model, selected_layer=int(layer), selected_head=int(head)),
        )
    )
    if cfg.n_layers >= 2:
        log("composition")
        composition = CompositionMap(model)
        threshold = composition.threshold_against_rotations()
        sections.append(
            Section(
                "Composition between layers",
                "<p>A later head can read an earlier head's output through its queries (Q-composition), keys "
                "(K-composition) or values (V-composition). The score ‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F) measures how much; "
                "the baseline-subtracted view removes the score that random matrices of the same shapes would get "
                f"({composition.baseline_value:.3f}). The graph draws only edges that clear what chance gives "
                "these very heads: with the residual stream between two heads rotated at random, 99 % of pairs score "
                f"under {threshold:.3f}, {threshold - composition.baseline_value:+.3f} above that baseline (its legend "
                "says how many edges pass). Induction heads are formed by K-composition with a previous-token head.</p>",
                composition,
            )
        )
    log("head detectors")
    heads = HeadScores.from_model(model, "all", progress_bar=False)
    kinds = list(circuits.HEAD_KINDS)  # (the maps of kind="all", in this order)
    detectors = {kind: heads.scores[kinds.index(kind)] for kind in ("previous_token", "induction", "duplicate_token")}
    test = induction_test(model)
    tokens = test.prompts.clean[:1]  # the patching sections' first prompt: the views' positions line up
    attention = AttentionPatterns(model, tokens)
    ind = detectors["induction"]
    best = np.unravel_index(int(np.argmax(ind)), ind.shape)
    attention.selected_layer, attention.selected_head = int(best[0]), int(best[1])
    sections.append(
        Section(
            "Induction heads on repeated random tokens",
            "<p>On a sequence of random tokens repeated twice, an induction head at a token of the second copy attends to "
            "the token that followed the same token in the first copy (an off-diagonal stripe), and a previous-token head "
            "attends to the token just before. The view shows the first prompt of the causal tests below. Each "
            "detector's strongest head, by mean attention to its targets (every head's score is in the heatmaps "
            "below): " + _strongest_by_detector(detectors) + ". Under the prompt, the selected token's ten strongest "
            "sources in the selected head, with their weights. The strip right of the pattern is the selected head's "
            "effect on the next token's logit; its <b>Loss</b> switch shows the model's per-token loss instead (each "
            "copy's mean loss is in the table of the logit-lens section below).</p>",
            attention,
        )
    )
    sections.append(
        Section(
            "Every head's detector scores",
            "<p>The same detectors as heatmaps of layers × heads, with the current-token and first-token (BOS) scores "
            "besides: each cell is one head's mean attention to the detector's targets on repeated random tokens. Switch "
            "the detector above the grid; click a head to choose it in every view of this page.</p>",
            heads,
        )
    )
    for title, explanation, widget in causal_sections(model, test, detectors["previous_token"], log=log):
        sections.append(Section(title, explanation, widget))
    log("logit lens and repetition")
    sections.append(Section(*lens_section(model, test)))
    if dictionaries:
        log("features of the induction answer")
        for title, explanation, widget in features_sections(model, test, dictionaries, log=log):
            sections.append(Section(title, explanation, widget))
    log("term importance")
    sections.append(
        Section(
            "Which path terms matter",
            "<p>Expanding the logits into paths gives terms of order 0 (the direct path), 1 (through one head) and 2 "
            "(through two heads: virtual heads). Freezing attention patterns and adding the terms order by order shows "
            "how much of the loss each order explains.</p>",
            TermImportance(model, text),
        )
    )
    history = TrainingHistory.from_card(card, model_name=model.name) if card else None
    if history is not None and not history.absent:
        sections.append(
            Section(
                "How the heads formed during training",
                "<p>circuitwidgets trained this model and logged, at every evaluation, each head's scores and the "
                "in-context-learning score (loss late in a held-out window minus loss early in it; Olsson et al., 2022). "
                "Induction heads form in a phase change: the induction and K-composition scores rise together, and "
                "in-context learning improves at the same steps (shaded). Choose a head here or in any view above to see "
                "its curves.</p>",
                history,
            )
        )
    _start_on_one_head(sections, detectors, ov, tokens.shape[1])
    return sections


def _start_on_one_head(
    sections: list[Section], detectors: dict[str, np.ndarray], ov: np.ndarray, n_tokens: int
) -> None:
    """Every view of the page starts on the same head: the strongest induction head (the strongest copying head in a
    one-layer model), with the composition map's edge from the strongest previous-token head into it; the views
    of the page's prompt (``n_tokens`` tokens) start on its last token."""
    layers = detectors["induction"].shape[0]
    score = detectors["induction"] if layers >= 2 else np.nan_to_num(ov, nan=-np.inf)
    layer, head = (int(i) for i in np.unravel_index(int(np.argmax(score)), score.shape))
    prev = int(np.argmax(detectors["previous_token"][0]))
    for section in sections:
        widget = section.widget
        if widget is None:
            continue
        _start_on_the_last_position(widget, n_tokens)
        if not getattr(widget, "_links_heads", True):  # (a map of positions, the lens's rows: no head to choose)
            continue
        if hasattr(widget, "select_edge") and layer > 0:
            widget.select_edge((0, prev), (layer, head), kind="K")
            continue
        with widget.hold_trait_notifications():
            if widget.has_trait("selected_layer"):
                widget.selected_layer = layer
            if widget.has_trait("selected_head"):
                widget.selected_head = head


def _start_on_the_last_position(widget: Any, n_tokens: int) -> None:
    """A view of the page's prompt starts on its last token (where induction predicts the answer), so that the
    views that link positions agree at load; views of other texts keep theirs."""
    if not getattr(widget, "_links_positions", True):
        return
    for name in ("selected_dest", "selected_pos"):
        n = getattr(widget, "n_tokens", 0) or len(getattr(widget, "tokens", []) or [])
        if widget.has_trait(name) and n == n_tokens:
            setattr(widget, name, n - 1)
