"""Skip-trigrams ``source … destination → out`` read from one head's QK and OV circuits.

A one-layer attention head implements skip-trigrams: a destination token
attends to an earlier source token (full QK circuit ``[destination, source]``)
and copying the source raises the logit of an out token (full OV circuit
``[source, out]``). Each :class:`SkipTrigram` carries both numbers:

- ``qk``: ``(W_E W_QK W_Eᵀ)[destination, source] / scale``, the token-token part
  of the attention score (``scale`` is the model's attention divisor,
  ``sqrt(d_head)`` by default; positional terms and biases are left out). For
  rotary heads it is the circuit at a chosen ``offset`` (destination position
  minus source position; :func:`~circuitwidgets.circuits.W_QK`);
- ``ov``: ``(W_E W_OV W_U)[source, out]``, the direct logit effect on ``out`` of
  attending to ``source`` with all attention.

Nothing ``[d_vocab, d_vocab]`` is formed: global entries come from chunked
top-k over the factored circuits (cost ``O(V² d_head)``), a single source's
column and row from ``O(V d_head)`` products.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from circuitwidgets._checks import check_budget, check_choice, check_head, check_int, check_model, check_token
from circuitwidgets.circuits._records import RecordList
from circuitwidgets.circuits.lowrank import DEFAULT_MEMORY_BUDGET, LowRankMatrix
from circuitwidgets.circuits.ov_qk import _full_ov, _full_qk, check_offset
from circuitwidgets.model import CircuitModel


@dataclass(frozen=True)
class SkipTrigram:
    """One skip-trigram ``source … destination → out`` of a head."""

    source: int
    destination: int
    out: int
    source_str: str
    destination_str: str
    out_str: str
    qk: float
    """Token-token attention score of the destination on the source (divided by the scale)."""
    ov: float
    """Direct logit effect on ``out`` of attending to ``source``."""
    copying: bool
    """``out == source``: the head copies the token it attends to."""


@dataclass(frozen=True)
class TokenScore:
    """A token with its score in one circuit."""

    token: int
    token_str: str
    score: float


@dataclass(frozen=True)
class SourceProfile:
    """For one source token: the destinations that attend to it most, and the outs it raises most."""

    source: int
    source_str: str
    destinations: RecordList[TokenScore]
    outs: RecordList[TokenScore]


def _token_scores(model: CircuitModel, values: torch.Tensor, ids: torch.Tensor) -> RecordList[TokenScore]:
    return RecordList(
        TokenScore(int(i), model.tokenizer.token_str(int(i)), float(v))
        for v, i in zip(values.tolist(), ids.tolist(), strict=True)
    )


def source_profile(
    model: CircuitModel, layer: int, head: int, source: int | str, k: int = 10, offset: int | None = None
) -> SourceProfile:
    """Top-``k`` destinations attending to ``source`` (QK column) and top-``k`` outs it raises (OV row).

    ``source`` is a token id or a one-token string. Destination scores are
    ``qk`` and out scores ``ov`` as defined in the module docstring. Cost
    ``O(V d_model d_head)``. ``offset``: required on rotary layers (module docstring).
    """
    model = check_model(model, "source_profile")
    layer, head = check_head(model, layer, head)
    src = check_token(model, "source", source)
    k = check_int("k", k, 1, model.cfg.d_vocab + 1)
    return _source_profile(model, layer, head, src, k, check_offset(model, offset, layer))


def _source_profile(model: CircuitModel, layer: int, head: int, src: int, k: int, offset: int | None) -> SourceProfile:
    qk_column = _full_qk(model, layer, head, offset)[:, src]
    ov_row = _full_ov(model, layer, head)[src, :]
    assert isinstance(qk_column, torch.Tensor) and isinstance(ov_row, torch.Tensor)
    dest = torch.topk(qk_column / model.cfg.scale, k)
    outs = torch.topk(ov_row, k)
    return SourceProfile(
        src,
        model.tokenizer.token_str(src),
        _token_scores(model, dest.values, dest.indices),
        _token_scores(model, outs.values, outs.indices),
    )


def _record(model: CircuitModel, source: int, destination: int, out: int, qk: float, ov: float) -> SkipTrigram:
    name = model.tokenizer.token_str
    return SkipTrigram(source, destination, out, name(source), name(destination), name(out), qk, ov, out == source)


def skip_trigrams(
    model: CircuitModel,
    layer: int,
    head: int,
    k: int = 10,
    source: int | str | None = None,
    by: Literal["ov", "qk"] = "ov",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    progress_bar: bool | None = None,
    offset: int | None = None,
) -> RecordList[SkipTrigram]:
    """The head's strongest skip-trigrams as records (``.to_pandas()`` gives a DataFrame).

    Parameters
    ----------
    model, layer, head
        The head.
    k
        Number of entries taken from each circuit.
    source
        ``None`` for the global view; a token id or one-token string for that
        source's skip-trigrams.
    by
        Global view only: ``"ov"`` takes the ``k`` largest OV entries
        ``(source, out)`` and pairs each with its source's top destination (largest
        QK entry in the source's column); ``"qk"`` takes the ``k`` largest QK entries
        ``(destination, source)`` and pairs each with its source's top out.
    memory_budget
        Bytes per dense row block of the chunked global top-k.
    progress_bar
        Show a tqdm bar (``None``: only when interactive).
    offset
        Destination position minus source position at which the QK circuit of a
        rotary head is read; required on rotary layers, ignored elsewhere.

    Returns
    -------
    RecordList[SkipTrigram]
        Global view: ``k`` records, best first. With ``source``: the ``k × k``
        triples of the source's top-``k`` destinations and top-``k`` outs, ordered
        by the sum of the two ranks, then by destination rank (so the best
        destination with the best out comes first).
    """
    model = check_model(model, "skip_trigrams")
    layer, head = check_head(model, layer, head)
    k = check_int("k", k, 1, model.cfg.d_vocab + 1)
    check_choice("by", by, ("ov", "qk"))
    offset = check_offset(model, offset, layer)
    src = None if source is None else check_token(model, "source", source)
    check_budget("memory_budget", memory_budget, model.device)
    return _skip_trigrams(model, layer, head, k, src, by, memory_budget, progress_bar, offset)


def _skip_trigrams(
    model: CircuitModel,
    layer: int,
    head: int,
    k: int,
    source: int | None,
    by: str,
    memory_budget: int,
    progress_bar: bool | None,
    offset: int | None,
) -> RecordList[SkipTrigram]:
    if source is not None:
        profile = _source_profile(model, layer, head, source, k, offset)
        pairs = sorted(
            ((i, j) for i in range(len(profile.destinations)) for j in range(len(profile.outs))),
            key=lambda ij: (ij[0] + ij[1], ij[0]),
        )
        return RecordList(
            _record(
                model,
                profile.source,
                profile.destinations[i].token,
                profile.outs[j].token,
                profile.destinations[i].score,
                profile.outs[j].score,
            )
            for i, j in pairs
        )
    qk = _full_qk(model, layer, head, offset)
    ov = _full_ov(model, layer, head)
    scale = model.cfg.scale
    if by == "ov":
        top = ov.topk(k, memory_budget=memory_budget, progress_bar=progress_bar)
        sources = top.rows
        qk_cols = qk[:, sources]
        assert isinstance(qk_cols, LowRankMatrix)
        best_dest = qk_cols.topk_cols(1, memory_budget=memory_budget, progress_bar=False)
        return RecordList(
            _record(model, int(s), int(d), int(o), float(q) / scale, float(v))
            for s, o, v, d, q in zip(
                sources.tolist(),
                top.cols.tolist(),
                top.values.tolist(),
                best_dest.indices[:, 0].tolist(),
                best_dest.values[:, 0].tolist(),
                strict=True,
            )
        )
    top = qk.topk(k, memory_budget=memory_budget, progress_bar=progress_bar)
    sources = top.cols
    ov_rows = ov[sources, :]
    assert isinstance(ov_rows, LowRankMatrix)
    best_out = ov_rows.topk_rows(1, memory_budget=memory_budget, progress_bar=False)
    return RecordList(
        _record(model, int(s), int(d), int(o), float(q) / scale, float(v))
        for s, d, q, o, v in zip(
            sources.tolist(),
            top.rows.tolist(),
            top.values.tolist(),
            best_out.indices[:, 0].tolist(),
            best_out.values[:, 0].tolist(),
            strict=True,
        )
    )
