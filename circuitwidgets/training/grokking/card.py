"""The shipped grokking run's measured figures, written as its card's "Measured" section.

The card (``pretrained/grokking-p113/README.md``) embeds :func:`card_measured`'s text as it was
at publication; ``tests/test_grokking_pretrained.py`` computes it again from the shipped files and
finds it in the card, so every figure there is checked.
"""

from __future__ import annotations

import numpy as np

from circuitwidgets.training.grokking.progress import Phases, ProgressMeasures
from circuitwidgets.training.grokking.train import GrokHistory


def _row(history: GrokHistory, measures: ProgressMeasures, step: int, label: str) -> str:
    j = int(np.searchsorted(history.steps, step))
    i = min(int(np.searchsorted(measures.steps, step)), len(measures.steps) - 1)
    return (
        f"| {step:,} | {label} | {history.train_accuracy[j]:.3f} | {history.test_accuracy[j]:.3f} | "
        f"{history.test_loss[j]:.3f} | {int(measures.steps[i]):,} | {measures.restricted_loss[i]:.3f} | "
        f"{measures.excluded_loss[i]:.3f} | {measures.sum_squared_weights[i]:,.0f} |"
    )


def card_measured(history: GrokHistory, measures: ProgressMeasures, phases: Phases) -> str:
    """The phase table and the key-frequency paragraph of the card (markdown), from the run and its measures.

    The accuracies and the test loss are the curves' values at the step; the restricted and excluded loss and
    the sum of squared weights are measured at the first shipped checkpoint at or after it (its step is given).
    """
    final = history.final_step
    rows = [(0, "memorisation")]
    for step, label in (
        (phases.memorised, "circuit formation (train accuracy 100 %)"),
        (phases.cleanup, "cleanup (restricted < excluded)"),
        (phases.grokked, "grokked (test accuracy ≥ 99 %)"),
    ):
        if step is not None:
            rows.append((step, label))
    rows.append((final, "end"))
    lines = [
        "| step | phase starts | train acc | test acc | test loss | checkpoint | restricted loss | excluded loss "
        "| Σ w² |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_row(history, measures, step, label) for step, label in rows),
    ]
    keys = measures.key_frequencies
    power = measures.fourier_norms**2
    share = power[:, keys].sum(axis=1) / power[:, 1:].sum(axis=1)
    last = measures.neuron_frequency[-1]
    live = last.sum(axis=1) > 0
    on_key = int(np.isin(last[live].argmax(axis=1), keys).sum())
    peak_at = int(np.argmax(measures.sum_squared_weights))
    text = (
        f"Key frequencies (read from the embedding's Fourier norms at step {final:,}): "
        f"{', '.join(str(k) for k in keys)}; they carry {share[0]:.0%} of the embedding's norm² at step 0 and "
        f"{share[-1]:.0%} at step {final:,}. At step {final:,}, {on_key} of {int(live.sum())} neurons have a key "
        f"frequency as their strongest, and the median neuron has {np.median(last[live].max(axis=1)):.0%} of its "
        f"variance in it. The sum of squared weights peaks at {measures.sum_squared_weights[peak_at]:,.0f} "
        f"(step {int(measures.steps[peak_at]):,}) and falls to {measures.sum_squared_weights[-1]:,.0f}."
    )
    return "\n".join(lines) + "\n\n" + text + "\n"
