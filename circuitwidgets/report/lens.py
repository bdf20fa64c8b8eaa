"""The report's "What the model predicts on the repeated half" section: the linked logit lens, and induction on
repeated random tokens beside repeated held-out code, with the per-copy mean loss.

A shipped model's induction heads attend correctly on repeated random tokens and carry the answer (the patching
sections), yet the model almost never makes the repeated token its top prediction there, while on repeated code it
usually does. :func:`repetition` measures why, on three kinds of sequence of the same length, each repeated once:
uniform random tokens, random tokens from the most frequent tokens of held-out code, and windows of held-out code.
For each it gives the mean loss on each copy, how often the second copy's token is the top prediction, and the
answer's logit on each copy against the strongest competitor's: repetition raises a random token's logit by a few
nats, but a uniformly drawn token is mostly rare in training, starts far below the tokens the model favours, and
stays below them.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np
import torch

from circuitwidgets import circuits
from circuitwidgets.causal.induction import InductionTest
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel

__all__ = ["Repetition", "held_out_code", "lens_section", "repetition", "repetition_markdown"]

#: Held-out files read for code windows and token counts (their first ``CHARS`` characters).
FILES, CHARS = 24, 4000

#: The frequent tokens random tokens are also drawn from: the ``FREQUENT`` most frequent in the held-out sample.
FREQUENT = 256

#: Where a code window starts in its file (after the module's first lines).
SKIP = 32


@dataclass(frozen=True)
class Repetition:
    """Per kind of sequence (``kinds``), mean over positions and sequences of each copy's next-token loss
    (``loss_first``, ``loss_second``), how often the second copy's next token is the top prediction (``top1``),
    the answer's logit on each copy (``logit_first``, ``logit_second``) and the largest logit on the second copy
    (``top_logit``). ``n`` sequences of ``half`` tokens each."""

    kinds: list[str]
    loss_first: list[float]
    loss_second: list[float]
    top1: list[float]
    logit_first: list[float]
    logit_second: list[float]
    top_logit: list[float]
    half: int
    n: int


def _val_token_ids(model: CircuitModel) -> list[list[int]]:
    """Token ids of the first :data:`CHARS` characters of the first :data:`FILES` held-out files of the Python
    standard library (the shipped models' validation split); empty without a text tokenizer or the library."""
    from circuitwidgets.training.corpus import load_stdlib_corpus

    try:
        texts = load_stdlib_corpus().val[:FILES]
        return [list(model.tokenizer.encode(text[:CHARS])) for text in texts]
    except (ArgumentError, ValueError, KeyError, OSError, AttributeError):
        return []


def held_out_code(model: CircuitModel, ids: list[list[int]], half: int, n: int) -> torch.Tensor | None:
    """``[n, half]`` windows of held-out code (one per file, from token :data:`SKIP`), or ``None`` if too few."""
    windows = [row[SKIP : SKIP + half] for row in ids if len(row) >= SKIP + half]
    return torch.tensor(windows[:n], dtype=torch.long) if len(windows) >= n else None


def _measure(model: CircuitModel, halves: torch.Tensor, prefix: torch.Tensor) -> tuple[float, ...]:
    """Loss per copy, top-1 rate, answer logit per copy and top logit of ``[prefix] r r`` for each row ``r``."""
    t = torch.cat([prefix, halves, halves], dim=1).to(model.device)
    start, n = prefix.shape[1], halves.shape[1]
    with torch.no_grad():
        logits = model(t)[:, :-1].double()
    targets = t[:, 1:]
    answer = logits.gather(-1, targets[..., None])[..., 0]
    loss = logits.logsumexp(-1) - answer
    first = torch.arange(start, start + n - 1)  # predicts r2 … r_n of the first copy
    second = first + n  # the same tokens, predicted in the second copy
    top1 = (logits.argmax(-1) == targets).double()
    return (
        float(loss[:, first].mean()),
        float(loss[:, second].mean()),
        float(top1[:, second].mean()),
        float(answer[:, first].mean()),
        float(answer[:, second].mean()),
        float(logits.max(-1).values[:, second].mean()),
    )


def repetition(model: CircuitModel, half: int = 20, n: int = 8, seed: int = 0) -> Repetition:
    """Induction on repeated sequences of three kinds (module docstring), measured on ``model``."""
    random = circuits.repeated_random_tokens(model, seq_len=half, n_seqs=n, seed=seed).cpu()
    prefix = random[:, : random.shape[1] - 2 * half]
    kinds: list[tuple[str, torch.Tensor]] = [("random tokens", random[:, prefix.shape[1] : prefix.shape[1] + half])]
    ids = _val_token_ids(model)
    if ids:
        counts = np.bincount(np.concatenate([np.asarray(r, dtype=np.int64) for r in ids]), minlength=model.cfg.d_vocab)
        if prefix.shape[1]:
            counts[int(prefix[0, 0])] = 0  # never draw the BOS token
        frequent = torch.as_tensor(np.argsort(-counts, kind="stable")[:FREQUENT])
        draw = torch.randint(0, len(frequent), (n, half), generator=torch.Generator().manual_seed(seed))
        kinds.append((f"random tokens from the {FREQUENT} most frequent", frequent[draw]))
        code = held_out_code(model, ids, half, n)
        if code is not None:
            kinds.append(("held-out code", code))
    rows = [_measure(model, h, prefix) for _, h in kinds]
    loss_first, loss_second, top1, logit_first, logit_second, top_logit = ([r[i] for r in rows] for i in range(6))
    return Repetition(
        [k for k, _ in kinds], loss_first, loss_second, top1, logit_first, logit_second, top_logit, half, n
    )


def repetition_markdown(r: Repetition) -> str:
    """The repetition table as Markdown, as the model cards quote it (a test checks each card against it)."""
    lines = [
        "| sequence, repeated once | mean loss, first → second copy | top-1, second copy "
        "| answer's logit, first → second copy | largest logit, second copy |",
        "|---|---|---|---|---|",
    ]
    for i, kind in enumerate(r.kinds):
        lines.append(
            f"| {kind} | {r.loss_first[i]:.2f} → {r.loss_second[i]:.2f} | {r.top1[i]:.0%} "
            f"| {r.logit_first[i]:+.2f} → {r.logit_second[i]:+.2f} | {r.top_logit[i]:+.2f} |"
        )
    return "\n".join(lines) + "\n"


def _table(r: Repetition) -> str:
    head = (
        "<tr><th>sequence, repeated once</th><th>mean loss, first copy</th><th>mean loss, second copy</th>"
        "<th>top-1, second copy</th><th>answer's logit, first → second copy</th><th>largest logit, second copy</th></tr>"
    )
    rows = [
        f"<tr><th>{html.escape(kind)}</th><td>{r.loss_first[i]:.2f}</td><td>{r.loss_second[i]:.2f}</td>"
        f"<td>{r.top1[i]:.0%}</td><td>{r.logit_first[i]:+.2f} → {r.logit_second[i]:+.2f} "
        f"({r.logit_second[i] - r.logit_first[i]:+.2f})</td><td>{r.top_logit[i]:+.2f}</td></tr>"
        for i, kind in enumerate(r.kinds)
    ]
    return f'<table class="cw-table">{head}{"".join(rows)}</table>'


def _why(r: Repetition) -> str:
    """The explanation, with the measured numbers (only the claims the numbers bear out)."""
    gain = r.logit_second[0] - r.logit_first[0]
    gap = r.top_logit[0] - r.logit_second[0]
    text = (
        f"<p>On repeated random tokens the second copy raises the answer's logit by {gain:+.2f} on average, yet it "
        f"stays {gap:.2f} below the largest logit at the same place, so the repeated token is the top prediction only "
        f"{r.top1[0]:.0%} of the time. A token drawn uniformly from the vocabulary is mostly one that is rare in "
        "training, and the model gives it a low logit before any repetition"
    )
    if len(r.kinds) >= 2:
        text += (
            f" ({r.logit_first[0]:+.2f} on the first copy, against {r.logit_first[1]:+.2f} for tokens drawn from the "
            f"{FREQUENT} most frequent; with those, top-1 on the second copy is {r.top1[1]:.0%})"
        )
    text += "."
    if len(r.kinds) >= 3:
        text += (
            f" On held-out code repeated once, the second copy's mean loss falls from {r.loss_first[2]:.2f} to "
            f"{r.loss_second[2]:.2f} and the repeated token is the top prediction {r.top1[2]:.0%} of the time: the "
            "answer is a token the context already favours, and the induction heads' boost lifts it to the top."
        )
    return (
        text + " The induction circuit works (the patching above), but its boost is small beside the unembedding's "
        "prior on rare tokens; a longer training run might change that, which this report does not test "
        "(retraining was out of scope).</p>"
    )


def lens_section(model: CircuitModel, test: InductionTest) -> tuple[str, str, object]:
    """The linked logit lens of the page's first prompt, and the repetition table with its explanation."""
    from circuitwidgets.widgets import LogitLens

    r = repetition(model, half=test.prompts.half, n=test.prompts.clean.shape[0], seed=test.prompts.seed)
    text = (
        "<p>The logit lens of the first prompt (the attention view's sequence): each cell is the top token of the "
        "residual stream before a layer (or after the last) at one position, read through the final norm and the "
        "unembedding, shaded by its probability; hover for the top five. Click a cell to select its token in the "
        "other views; a position chosen elsewhere scrolls into view here.</p>"
        f"<p>Each copy's mean next-token loss, on {r.n} sequences of {r.half} tokens of each kind repeated once "
        "(the first token of each copy, which nothing predicts, left out; <code>circuitwidgets.report.lens."
        "repetition(model)</code>):</p>" + _table(r) + _why(r)
    )
    title = "What the model predicts on the repeated half: the logit lens, random tokens and code"
    return title, text, LogitLens(model, test.prompts.clean[:1])
