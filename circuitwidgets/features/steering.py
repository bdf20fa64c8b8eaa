"""Steered generation: greedy continuation of a prompt with transcoder features held at values (circuit-tracer
0.5's ``feature_intervention_generate``, without its key-value cache: every step reruns the whole text).

Each step is :func:`~circuitwidgets.features.intervention.intervene` on the text so far; as in circuit-tracer,
``freeze_attention`` and ``constrained_layers`` apply to the first generated token only (later steps have no
clean run of their own length to freeze to). A position ``slice(start, None)`` is open-ended: it covers every
position from ``start`` on, the generated ones included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from circuitwidgets._checks import check_int
from circuitwidgets.errors import ArgumentTypeError
from circuitwidgets.features.intervention import Scale, intervene
from circuitwidgets.model import CircuitModel


@dataclass
class Generated:
    """``text`` (the continuation only, untrusted), its ``tokens``, and ``logits`` ``[new tokens, d_vocab]``: the
    distribution each generated token was chosen from."""

    text: str
    tokens: list[int]
    logits: torch.Tensor


def _expand(interventions: Iterable[Sequence[object]], n_pos: int) -> list[tuple[object, object, object, object]]:
    """Open-ended positions (``slice(start, None)``) as one intervention per position ``start … n_pos − 1``."""
    out: list[tuple[object, object, object, object]] = []
    for item in interventions:
        if not isinstance(item, (tuple, list)) or len(item) != 4:
            raise ArgumentTypeError(f"interventions: expected (layer, position, feature, value) tuples, got {item!r}")
        layer, pos, feature, value = item
        if isinstance(pos, slice):
            start = check_int("interventions position slice start", pos.start or 0, 0, n_pos)
            out.extend((layer, p, feature, value) for p in range(start, n_pos))
        else:
            out.append((layer, pos, feature, value))
    return out


@torch.no_grad()
def generate(
    model: CircuitModel,
    transcoders: object,
    prompt: torch.Tensor | Sequence[int] | str,
    interventions: Iterable[Sequence[object]] = (),
    *,
    max_new_tokens: int = 16,
    freeze_attention: bool = True,
    constrained_layers: Iterable[int] | None = None,
) -> Generated:
    """Greedy continuation of ``prompt`` with ``interventions`` (``(layer, position, feature, value)``, value a
    number or :func:`~circuitwidgets.features.times`; ``slice(start, None)`` positions reach generated tokens).

    Returns
    -------
    Generated
        ``.text``, ``.tokens`` and ``.logits`` of the generated tokens.
    """
    steps = check_int("max_new_tokens", max_new_tokens, 1)
    items = [tuple(i) if isinstance(i, (tuple, list)) else i for i in interventions]
    tokens = model._check_tokens(prompt)[0].tolist()
    new: list[int] = []
    rows = []
    for step in range(steps):
        expanded = _expand(items, len(tokens))
        first = step == 0
        out = intervene(
            model, transcoders, tokens, expanded, freeze_attention=freeze_attention and first,
            constrained_layers=constrained_layers if first else None,
        )  # fmt: skip
        rows.append(out.logits[-1])
        nxt = int(torch.argmax(out.logits[-1]))
        tokens.append(nxt)
        new.append(nxt)
    text = "".join(model.tokenizer.token_str(t) for t in new)
    return Generated(text, new, torch.stack(rows))


__all__ = ["Generated", "Scale", "generate"]
