"""Metrics that say which logits they read, so that a sweep unembeds only those.

A sweep's variants cost their layers plus the unembedding of whatever the metric
reads. A plain Python function of ``[batch, pos, d_vocab]`` logits is probed for
what it reads before a ``patch`` sweep (:mod:`circuitwidgets.causal.inferred`),
and read whole where the probe cannot be trusted. Three declared metrics ship
(:func:`log_prob`, :func:`loss`, and :func:`~circuitwidgets.causal.logit_diff`),
each evaluating all variants in one tensor operation; :func:`reads` declares what
any function reads, for every technique and without a probe.

A declared function is still called on full-shaped logits, but the entries
outside its declaration are NaN: a function that reads past what it declared
gets NaN, and the sweep refuses it by name instead of returning a wrong number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from circuitwidgets.causal.metrics import LazyPositions, Metric, Positions, scalar, token_ids
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError


class Declared:
    """A metric function with the positions (and optionally token ids) of the logits it reads; see :func:`reads`."""

    def __init__(
        self, fn: Callable[[torch.Tensor], object], pos: Positions, tokens: Sequence[int] | None = None
    ) -> None:
        if not callable(fn):
            raise ArgumentTypeError(f"fn: expected a function of the logits, got {type(fn).__name__}")
        self.fn, self.pos = fn, pos
        self.tokens = None if tokens is None else _token_ids("tokens", tokens)
        self.__name__ = str(getattr(fn, "__name__", type(fn).__name__))

    def __call__(self, logits: torch.Tensor) -> object:
        return self.fn(logits)

    def metric(self, vocab: int) -> Metric:
        """This function as a sweep evaluates it: the declared logits, NaN elsewhere, one call per variant."""
        columns = None if self.tokens is None else torch.tensor(sorted(set(self.tokens)))
        if columns is not None and not bool(((columns >= 0) & (columns < vocab)).all()):
            raise ArgumentError(f"tokens: expected ids in [0, {vocab}), got {self.tokens}")
        declared = Metric(self.__name__, lambda sub, batch: sub, positions=None, columns=columns)
        name = self.__name__

        def batched(sub: torch.Tensor, batch: int) -> torch.Tensor:
            n = sub.shape[0]
            total = declared.extra["n_pos"]
            assert isinstance(total, int)
            rows = torch.tensor(declared.positions or [], device=sub.device)
            values = []
            for i in range(n):  # a fresh buffer each time: the function may write into its logits
                full = torch.full((batch, total, vocab), float("nan"), dtype=sub.dtype, device=sub.device)
                if columns is None:
                    full[:, rows] = sub[i]
                else:
                    full[:, rows[:, None], columns.to(sub.device)[None, :]] = sub[i]
                try:
                    values.append(scalar(self.fn(full), name))
                except NonFiniteError:
                    raise ArgumentError(
                        f"metric: {name} read logits outside what it declared (pos={self.pos!r}, tokens="
                        f"{'all' if self.tokens is None else self.tokens}); widen reads(...) to every position and "
                        "token id it reads, or pass the plain function"
                    ) from None
            return torch.stack(values)

        declared.batched = batched
        declared.positions = LazyPositions(self.pos, declared)
        return declared


def reads(fn: Callable[[torch.Tensor], object], pos: Positions, tokens: Sequence[int] | None = None) -> Declared:
    """``fn`` (a function of ``[batch, pos, d_vocab]`` logits) declared to read only positions ``pos`` (and, if
    given, only token ids ``tokens``), so sweeps unembed only those.

    ``fn`` keeps its TransformerLens form: it is called on full-shaped logits whose
    undeclared entries are NaN, so reading past the declaration is refused by name,
    never silently wrong. A function that normalises over the vocabulary (a
    log-softmax) reads every id at its positions: declare ``pos`` only.
    """
    return Declared(fn, pos, tokens)


def _token_ids(arg: str, ids: object) -> list[int]:
    return token_ids(arg, ids, "token ids (an int, a list of ints or a tensor)")


class LogProb:
    """The mean log-probability of ``answers`` at positions ``pos`` (a declared metric: reads those positions)."""

    def __init__(self, answers: object, pos: Positions = -1) -> None:
        self.answers = answers if isinstance(answers, torch.Tensor) else torch.tensor(_token_ids("answers", answers))
        if self.answers.is_floating_point() or self.answers.ndim > 2:
            raise ArgumentTypeError(
                f"answers: expected integer ids [batch, n_positions], [batch] or one id, got {self.answers.dtype} "
                f"of shape {tuple(self.answers.shape)}"
            )
        self.pos = pos
        self.__name__ = f"log_prob(pos={pos!r})"

    def _ids(self, batch: int, k: int, device: torch.device) -> torch.Tensor:
        a = self.answers.to(device)
        a = a.reshape(1, 1) if a.ndim == 0 or a.numel() == 1 else (a[:, None] if a.ndim == 1 else a)
        try:
            return a.expand(batch, k)
        except RuntimeError:
            raise ArgumentError(
                f"answers: expected one id, one per prompt ({batch}) or [batch, {k}] (one per position read), "
                f"got shape {tuple(self.answers.shape)}"
            ) from None

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        rows = _positions(self.pos, logits.shape[1])
        return self._value(logits[None, :, rows])[0]

    def _value(self, sub: torch.Tensor) -> torch.Tensor:
        work = sub if sub.dtype == torch.float64 else sub.float()
        ids = self._ids(sub.shape[1], sub.shape[2], sub.device)
        picked = work.gather(-1, ids[None, ..., None].expand(sub.shape[0], -1, -1, 1))[..., 0]
        return (picked - torch.logsumexp(work, dim=-1)).mean(dim=(1, 2))

    def for_prompts(self, start: int, stop: int, batch: int) -> LogProb | None:
        """This metric on prompts ``start:stop`` of ``batch`` (ids shared by every prompt stay shared), or ``None``
        when its answers are not shared or one row per prompt. A mean over prompts, as ``logit_diff`` is."""
        answers = self.answers
        if answers.numel() == 1 or (answers.ndim == 2 and answers.shape[0] == 1):
            return LogProb(answers, self.pos)
        return LogProb(answers[start:stop], self.pos) if answers.shape[0] == batch else None

    def metric(self, vocab: int) -> Metric:
        """This metric as a sweep evaluates it (every variant in one tensor operation)."""
        if bool(((self.answers < 0) | (self.answers >= vocab)).any()):
            raise ArgumentError(f"answers: expected ids in [0, {vocab}), got {self.answers.tolist()}")
        metric = Metric(self.__name__, lambda sub, batch: self._value(sub))
        metric.positions = LazyPositions(self.pos, metric)
        return metric


def log_prob(answers: object, pos: Positions = -1) -> LogProb:
    """Mean log-probability of ``answers`` at ``pos`` (ids: one, one per prompt, or ``[batch, positions]``)."""
    return LogProb(answers, pos)


class Loss:
    """Mean next-token cross-entropy of ``tokens`` predicted at positions ``pos`` (default every position but the last)."""

    def __init__(self, tokens: torch.Tensor, pos: Positions = slice(None, -1)) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.is_floating_point():
            raise ArgumentTypeError("tokens: expected the prompts' integer token ids [batch, pos]")
        self.tokens, self.pos = tokens, pos
        self.__name__ = f"loss(pos={pos!r})"

    def _targets(self, rows: list[int]) -> torch.Tensor:
        if rows and rows[-1] + 1 >= self.tokens.shape[1]:
            raise ArgumentError(f"pos: the last position ({self.tokens.shape[1] - 1}) has no next token to predict")
        return self.tokens[:, [r + 1 for r in rows]]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        rows = _positions(self.pos, logits.shape[1])
        return self._value(logits[None, :, rows], rows)[0]

    def _value(self, sub: torch.Tensor, rows: list[int]) -> torch.Tensor:
        work = sub if sub.dtype == torch.float64 else sub.float()
        ids = self._targets(rows).to(sub.device)
        picked = work.gather(-1, ids[None, ..., None].expand(sub.shape[0], -1, -1, 1))[..., 0]
        return (torch.logsumexp(work, dim=-1) - picked).mean(dim=(1, 2))

    def for_prompts(self, start: int, stop: int, batch: int) -> Loss | None:
        """This metric on prompts ``start:stop`` of ``batch`` (their own tokens), or ``None`` when its tokens are not
        one row per prompt. A mean over prompts, as ``logit_diff`` is."""
        return Loss(self.tokens[start:stop], self.pos) if self.tokens.shape[0] == batch else None

    def metric(self, vocab: int) -> Metric:
        """This metric as a sweep evaluates it (every variant in one tensor operation)."""
        metric = Metric(self.__name__, lambda sub, batch: sub)
        positions = LazyPositions(self.pos, metric)
        metric.positions = positions
        metric.batched = lambda sub, batch: self._value(sub, list(positions))
        return metric


def loss(tokens: torch.Tensor, pos: Positions = slice(None, -1)) -> Loss:
    """Mean next-token loss of ``tokens`` predicted at positions ``pos`` (a slice, list or int)."""
    return Loss(tokens, pos)


def _positions(pos: Positions, n_pos: int) -> list[int]:
    return LazyPositions(pos, Metric("", lambda sub, batch: sub)).resolve(n_pos)
