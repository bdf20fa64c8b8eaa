"""What a direct logit attribution reads: the answers' token ids (or a direction), checked once for both engines."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError

#: What ``logit_attribution`` splits the logit into.
ATTRIBUTION_BY = ("component", "layer", "head", "neuron")


@dataclass(frozen=True)
class Answers:
    """``correct`` (and ``wrong``) token ids ``[batch]``, or a ``direction`` ``[d_model]`` read after the final norm."""

    correct: torch.Tensor | None
    wrong: torch.Tensor | None
    direction: torch.Tensor | None
    name: str


def check_attribution(by: object, reduce: object, pos: object, n_pos: int) -> None:
    """``by``, ``reduce`` and ``pos`` of :func:`~circuitwidgets.causal.logit_attribution` checked (errors name each)."""
    if by not in ATTRIBUTION_BY:
        raise ArgumentError(f"by: expected one of {ATTRIBUTION_BY}, got {by!r}")
    if reduce not in ("mean", "none"):
        raise ArgumentError(f"reduce: expected 'mean' or 'none', got {reduce!r}")
    if isinstance(pos, bool) or not isinstance(pos, int) or not -n_pos <= pos < n_pos:
        raise ArgumentError(f"pos: expected a position in [{-n_pos}, {n_pos}), got {pos!r}")


def attribution_dims(
    by: str, reduce: str, components: list[str], sizes: tuple[int, int, int], batch: int
) -> tuple[tuple[str, ...], dict[str, list[str]]]:
    """The dims of a logit attribution ``by`` (``batch`` first when ``reduce="none"``) and each dim's labels.

    ``components``: the component labels; ``sizes``: ``(n_layers, n_heads, d_mlp)``.
    One definition for the native engine and the nnsight one, so their results read alike.
    """
    n_layers, n_heads, d_mlp = sizes
    shapes = {
        "component": ("component",),
        "layer": ("layer",),
        "head": ("layer", "head"),
        "neuron": ("layer", "neuron"),
    }
    table = {
        "component": components,
        "layer": [f"L{i}" for i in range(n_layers)],
        "head": [f"H{i}" for i in range(n_heads)],
        "neuron": [f"N{i}" for i in range(d_mlp)],
        "batch": [f"prompt {i}" for i in range(batch)],
    }
    dims = ("batch", *shapes[by]) if reduce == "none" else shapes[by]
    return dims, {d: table[d] for d in dims}


def parse_answers(answers: object, batch: int, d_vocab: int, d_model: int) -> Answers:
    """``answers`` of :func:`~circuitwidgets.causal.logit_attribution` checked: one id or one per prompt, a pair
    ``(correct, wrong)``, or a float direction ``[d_model]`` (errors name the argument, expected and received)."""
    if isinstance(answers, torch.Tensor) and answers.is_floating_point():
        if answers.shape != (d_model,):
            raise ShapeError(f"answers: expected a direction [d_model={d_model}], got {tuple(answers.shape)}")
        return Answers(None, None, answers, "direction")
    if isinstance(answers, tuple) and len(answers) == 2:
        c, w = torch.as_tensor(answers[0]).flatten(), torch.as_tensor(answers[1]).flatten()
    else:
        c, w = torch.as_tensor(answers).flatten(), None
    for arg, ids in (("answers", c), ("answers (wrong)", w)):
        if ids is None:
            continue
        if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.numel() not in (1, batch):
            raise ArgumentTypeError(
                f"{arg}: expected one token id or one per prompt ({batch}), got {ids.tolist()!r:.80}"
            )
        if int(ids.min()) < 0 or int(ids.max()) >= d_vocab:
            raise ArgumentError(f"{arg}: expected ids in [0, {d_vocab}), got {ids.tolist()!r:.80}")
    c = c.long().expand(batch) if c.numel() == 1 else c.long()
    if w is None:
        return Answers(c, None, None, "logit of the answer")
    w = w.long().expand(batch) if w.numel() == 1 else w.long()
    return Answers(c, w, None, "logit difference (answer − wrong)")


def answer_logit(logits: torch.Tensor, answers: Answers) -> torch.Tensor:
    """The logit (difference) the model output ``[batch]`` from its logits ``[batch, d_vocab]`` at the position read
    (after any soft-cap); NaN for a direction, which has no logit of its own."""
    if answers.correct is None:
        return torch.full((logits.shape[0],), float("nan"))
    rows = torch.arange(logits.shape[0], device=logits.device)
    out = logits[rows, answers.correct.to(logits.device)]
    if answers.wrong is not None:
        out = out - logits[rows, answers.wrong.to(logits.device)]
    return out


__all__ = ["ATTRIBUTION_BY", "Answers", "answer_logit", "check_attribution", "parse_answers"]
