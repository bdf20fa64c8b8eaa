"""Metrics of a causal sweep: a function of the logits, evaluated for many patched variants at once.

A metric is what TransformerLens takes: ``metric(logits [batch, pos, d_vocab]) -> scalar``.
Ours (:func:`logit_diff`, and :mod:`circuitwidgets.causal.declared`'s ``log_prob``,
``loss`` and ``reads``) also declare the positions and token ids they read, so a
sweep computes only those logits (the unembedding at one position and two ids
instead of ``pos × d_vocab``), and evaluate every variant in one call. The
protocol: any object with a method ``metric(vocab) -> Metric`` declares itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError

LogitsMetric = Callable[[torch.Tensor], "torch.Tensor | float"]


@dataclass
class Metric:
    """A metric as a sweep uses it.

    ``positions`` and ``columns`` are the logits it reads (``None``: all);
    ``batched(logits [n, batch, len(positions), len(columns)]) -> [n]`` evaluates
    ``n`` variants at once; ``name`` says what it is, in results and views.
    """

    name: str
    batched: Callable[[torch.Tensor, int], torch.Tensor]
    positions: Sequence[int] | None = None
    columns: torch.Tensor | None = None
    normalise: bool = False
    clean: float | None = None
    corrupted: float | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def positions_at(self, n_pos: int) -> list[int] | None:
        """``positions`` as non-negative indices into ``n_pos`` positions (checked)."""
        if self.positions is None:
            return None
        if isinstance(self.positions, LazyPositions):
            return self.positions.resolve(n_pos)
        out = []
        for p in self.positions:
            if not -n_pos <= p < n_pos:
                raise ArgumentError(f"metric: reads position {p}, outside a prompt of {n_pos} tokens")
            out.append(p % n_pos)
        return out


Positions = int | slice | Sequence[int]


class LazyPositions(list[int]):
    """Positions a metric reads, given as an int, list or slice and resolved once the prompt length is known
    (:meth:`Metric.positions_at`); ``owner.extra["n_pos"]`` records that length."""

    def __init__(self, pos: Positions, owner: Metric) -> None:
        super().__init__()
        self.pos, self.owner = pos, owner

    def resolve(self, n_pos: int) -> list[int]:
        """The positions as indices into ``n_pos`` positions, in the order given (checked, naming ``pos``)."""
        self.owner.extra["n_pos"] = n_pos
        if isinstance(self.pos, slice):
            out: list[object] = [*range(n_pos)[self.pos]]
        elif isinstance(self.pos, int) and not isinstance(self.pos, bool):
            out = [self.pos]
        elif isinstance(self.pos, Sequence) and not isinstance(self.pos, str):
            out = list(self.pos)
        else:
            out = []
        if not out or not all(isinstance(p, int) and not isinstance(p, bool) for p in out):
            raise ArgumentError(f"pos: expected positions (an int, a list of ints or a slice), got {self.pos!r}")
        resolved = []
        for p in out:
            assert isinstance(p, int)
            if not -n_pos <= p < n_pos:
                raise ArgumentError(f"pos: position {p} is outside a prompt of {n_pos} tokens")
            resolved.append(p % n_pos)
        self[:] = resolved
        return resolved


class LogitDiff:
    """``mean over prompts of logits[b, pos, correct_b] − logits[b, pos, wrong_b]`` (a TransformerLens-style metric).

    Call it on ``[batch, pos, d_vocab]`` logits like any metric; sweeps read only
    the two ids at ``pos`` of each prompt.
    """

    def __init__(self, correct: int | Sequence[int], wrong: int | Sequence[int], pos: int = -1) -> None:
        self.correct = token_ids("correct", correct)
        self.wrong = token_ids("wrong", wrong)
        if isinstance(pos, bool) or not isinstance(pos, int):
            raise ArgumentTypeError(f"pos: expected an int position (negative counts from the end), got {pos!r}")
        if len(self.correct) != len(self.wrong) and 1 not in (len(self.correct), len(self.wrong)):
            raise ArgumentError(
                f"wrong: expected one id or one per prompt like correct ({len(self.correct)}), got {len(self.wrong)}"
            )
        self.pos = pos
        self.__name__ = f"logit_diff(pos={pos})"

    def _pairs(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        c, w = self.correct, self.wrong
        if len(c) == 1:
            c = c * batch
        if len(w) == 1:
            w = w * batch
        if len(c) != batch or len(w) != batch:
            raise ArgumentError(f"correct: expected one id or one per prompt ({batch}), got {len(c)} and {len(w)}")
        return torch.tensor(c), torch.tensor(w)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        c, w = self._pairs(logits.shape[0])
        rows = torch.arange(logits.shape[0])
        at = logits[:, self.pos]
        return (at[rows, c.to(at.device)] - at[rows, w.to(at.device)]).mean()

    def for_prompts(self, start: int, stop: int, batch: int) -> LogitDiff | None:
        """This metric on prompts ``start:stop`` of ``batch`` (ids given once stay shared), or ``None`` when its ids
        are not one or one per prompt. It is a mean over prompts, so chunks' values weighted by size give the whole's.
        """
        if {len(self.correct), len(self.wrong)} - {1, batch}:
            return None

        def part(ids: list[int]) -> list[int]:
            return ids if len(ids) == 1 else ids[start:stop]

        return LogitDiff(part(self.correct), part(self.wrong), self.pos)

    def metric(self, vocab: int) -> Metric:
        """This metric as a sweep evaluates it."""
        ids = sorted({*self.correct, *self.wrong})
        for i in ids:
            if not 0 <= i < vocab:
                raise ArgumentError(f"correct/wrong: expected ids in [0, {vocab}), got {i}")
        column = {t: j for j, t in enumerate(ids)}

        def batched(sub: torch.Tensor, batch: int) -> torch.Tensor:
            c, w = self._pairs(batch)
            ci = torch.tensor([column[int(t)] for t in c], device=sub.device)
            wi = torch.tensor([column[int(t)] for t in w], device=sub.device)
            rows = torch.arange(batch, device=sub.device)
            at = sub[:, :, 0]  # [n, batch, columns]
            return (at[:, rows, ci] - at[:, rows, wi]).mean(dim=1)

        return Metric(self.__name__, batched, positions=[self.pos], columns=torch.tensor(ids))


def token_ids(arg: str, ids: object, expected: str = "a token id or one id per prompt") -> list[int]:
    """``ids`` (an int, a sequence of ints or a tensor) as a list, or an error naming ``arg`` and ``expected``."""
    if isinstance(ids, torch.Tensor):
        ids = ids.flatten().tolist()
    if isinstance(ids, int) and not isinstance(ids, bool):
        return [ids]
    if isinstance(ids, Sequence) and ids and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return list(ids)
    raise ArgumentTypeError(f"{arg}: expected {expected}, got {ids!r:.80}")


def logit_diff(correct: int | Sequence[int], wrong: int | Sequence[int], pos: int = -1) -> LogitDiff:
    """The logit difference ``correct − wrong`` at ``pos``, averaged over prompts (ids: one, or one per prompt)."""
    return LogitDiff(correct, wrong, pos)


@dataclass
class Normalised:
    """``(m − m_corrupted) / (m_clean − m_corrupted)``: 0 is the corrupted behaviour, 1 the clean one restored."""

    metric: object
    clean: float | None = None
    corrupted: float | None = None

    def for_prompts(self, start: int, stop: int, batch: int) -> Normalised | None:
        """The inner metric on prompts ``start:stop`` of ``batch``, rescaled by the same clean and corrupted values
        (``None`` when the inner metric cannot be cut by prompt)."""
        cut = getattr(self.metric, "for_prompts", None)
        inner = cut(start, stop, batch) if callable(cut) else None
        return None if inner is None else Normalised(inner, self.clean, self.corrupted)


def normalised(metric: object, clean: float | None = None, corrupted: float | None = None) -> Normalised:
    """``metric`` rescaled so that the corrupted run scores 0 and the clean run 1.

    ``clean`` and ``corrupted`` default to the values the sweep measures on its
    own clean and corrupted runs; pass them to rescale against other references.
    """
    for arg, v in (("clean", clean), ("corrupted", corrupted)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise ArgumentTypeError(f"{arg}: expected a finite number or None, got {v!r}")
    return Normalised(metric, clean, corrupted)


def as_metric(metric: object, vocab: int) -> Metric:
    """Any metric argument (a callable, :func:`logit_diff`, :func:`normalised`) as a :class:`Metric`."""
    if isinstance(metric, Normalised):
        inner = as_metric(metric.metric, vocab)
        inner.normalise, inner.clean, inner.corrupted = True, metric.clean, metric.corrupted
        inner.name = f"normalised {inner.name}"
        return inner
    declare = getattr(metric, "metric", None)
    if callable(
        declare
    ):  # the protocol: metric(vocab) -> Metric says what it reads (logit_diff, log_prob, loss, reads)
        declared = declare(vocab)
        if isinstance(declared, Metric):
            return declared
    if not callable(metric):
        raise ArgumentTypeError(
            f"metric: expected a function of the logits returning a scalar, got {type(metric).__name__}"
        )
    name = str(getattr(metric, "__name__", type(metric).__name__))
    # (marked as a plain function: a patch sweep infers what it reads, circuitwidgets.causal.inferred)
    return Metric(name, one_by_one(metric, name), extra={"function": metric, "fn_name": name})


def one_by_one(
    fn: LogitsMetric | Callable[[torch.Tensor], object], name: str
) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """A function of ``[batch, pos, d_vocab]`` logits as a metric's ``batched``: called once per variant."""

    def batched(logits: torch.Tensor, batch: int) -> torch.Tensor:
        return torch.stack([scalar(fn(logits[i]), name) for i in range(logits.shape[0])])

    return batched


def scalar(value: object, name: str) -> torch.Tensor:
    """A metric's value as a 0-d float tensor, or a typed error naming the metric."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = torch.tensor(float(value))
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ArgumentError(f"metric: {name} must return a scalar (a number or a 1-element tensor), got {got}")
    if value.dtype.is_complex:
        raise ArgumentTypeError(f"metric: {name} must return a real number, got a complex {value.dtype} value")
    v = value.reshape(()).double()
    if not bool(torch.isfinite(v)):
        raise NonFiniteError(f"metric: {name} returned {float(v)}, expected a finite number")
    return v
