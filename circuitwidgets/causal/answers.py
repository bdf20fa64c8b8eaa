"""What a direct logit attribution reads: the answers' token ids (or a direction), checked once for both engines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError

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


def parse_answers(
    answers: object, batch: int, d_vocab: int, d_model: int, encode: Callable[[str], list[int]] | None = None
) -> Answers:
    """``answers`` of :func:`~circuitwidgets.causal.logit_attribution` checked: one id or one per prompt, a pair
    ``(correct, wrong)``, a ``[batch, 2]`` tensor of ``(correct, wrong)`` rows (TransformerLens's and ARENA's
    convention), strings (``" the"``, each one token of ``encode``, the model's tokenizer), or a float direction
    ``[d_model]`` (errors name the argument, expected and received)."""
    if isinstance(answers, torch.Tensor) and answers.is_floating_point():
        if answers.shape != (d_model,):
            raise ShapeError(f"answers: expected a direction [d_model={d_model}], got {tuple(answers.shape)}")
        if not bool(torch.isfinite(answers).all()):
            raise NonFiniteError("answers: the direction holds NaN or infinity; expected finite values")
        return Answers(None, None, answers, "direction")
    if isinstance(answers, (torch.Tensor, np.ndarray)) and answers.ndim == 2 and answers.shape[-1] == 2:
        pairs = torch.as_tensor(answers)
        c, w = _ids("answers", pairs[:, 0], encode), _ids("answers (wrong)", pairs[:, 1], encode)
    elif isinstance(answers, tuple) and len(answers) == 2:
        c, w = _ids("answers", answers[0], encode), _ids("answers (wrong)", answers[1], encode)
    else:
        c, w = _ids("answers", answers, encode), None
    for arg, ids in (("answers", c), ("answers (wrong)", w)):
        if ids is None:
            continue
        if ids.numel() not in (1, batch):
            raise ShapeError(
                f"{arg}: expected one token id or one per prompt ({batch}), or a [batch, 2] tensor of (correct, wrong) "
                f"pairs, got {ids.numel()} ids"
            )
        if int(ids.min()) < 0 or int(ids.max()) >= d_vocab:
            raise ArgumentError(f"{arg}: expected ids in [0, {d_vocab}), got {ids.tolist()!r:.80}")
    c = c.long().expand(batch) if c.numel() == 1 else c.long()
    if w is None:
        return Answers(c, None, None, "logit of the answer")
    w = w.long().expand(batch) if w.numel() == 1 else w.long()
    return Answers(c, w, None, "logit difference (answer − wrong)")


def _ids(arg: str, value: object, encode: Callable[[str], list[int]] | None) -> torch.Tensor:
    """Token ids ``[n]`` of one answer argument: ints, an int tensor/array, or strings of one token each."""
    if isinstance(value, str) or (
        isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value)
    ):
        texts = [value] if isinstance(value, str) else list(value)
        return torch.tensor([_one_token(arg, text, encode) for text in texts])
    if isinstance(value, np.ndarray) and value.dtype == np.uint64:
        value = value.astype(np.int64) if value.size == 0 or int(value.max()) < 2**63 else value
    try:
        ids = torch.as_tensor(value).flatten()
    except (TypeError, ValueError, RuntimeError) as e:
        raise ArgumentTypeError(
            f"{arg}: expected token ids (an int, one per prompt, a (correct, wrong) pair or a [batch, 2] tensor), "
            f"strings of one token each, or a float direction, got {type(value).__name__}"
        ) from e
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool or ids.numel() == 0:
        raise ArgumentTypeError(f"{arg}: expected integer token ids, got {ids.tolist()!r:.80} ({ids.dtype})")
    return ids


def _one_token(arg: str, text: str, encode: Callable[[str], list[int]] | None) -> int:
    """The one token id of ``text`` under the model's tokenizer, or a typed error saying what it splits into."""
    if encode is None:
        raise ArgumentTypeError(f"{arg}: a string answer ({text!r}) needs a model with a tokenizer; pass token ids")
    try:
        ids = list(encode(text))
    except Exception as error:  # the tokenizer's own error names its own argument: say which one was ours
        raise ArgumentError(f"{arg}: the model's tokenizer cannot encode {text!r}: {error}") from error
    if len(ids) != 1:
        raise ArgumentError(
            f"{arg}: expected a string of exactly one token, got {text!r}, which the model's tokenizer splits into "
            f"{len(ids)} ids {ids!r:.80}; pass a one-token string (mind the leading space) or token ids"
        )
    return int(ids[0])


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
