"""What an attribution graph explains: its logit node(s), each a direction read where the unembedding reads.

A target is a vector ``v`` ``[d_model]`` dotted with the unembedding's input at the last position (the final
residual stream through the final norm, its scale frozen from the run), so that with ``v`` a token's centred
unembedding column the target is that token's logit minus the mean logit, biases aside (circuit-tracer's logit
node). ``target=`` of :func:`~circuitwidgets.graphs.attribution_graph` takes:

- ``None`` (default): the most likely tokens, fewest whose probabilities reach ``logit_prob``, at most
  ``max_logits`` (circuit-tracer's), each weighted by its probability;
- a token (a string that is one token, or an id): that token's logit;
- a pair ``(a, b)`` of tokens: the logit difference ``logit(a) − logit(b)`` (``v = W_U[:, a] − W_U[:, b]``);
- a direction ``[d_model]`` (or ``(name, direction)``): read at the unembedding's input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from circuitwidgets._checks import check_token
from circuitwidgets._text import visible_token
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, NonFiniteError, ShapeError
from circuitwidgets.model import CircuitModel

#: The kinds of target, as a graph's ``extra["target"]["kind"]`` names them.
TARGET_KINDS = ("top", "token", "pair", "direction")


@dataclass
class Target:
    """Logit nodes: ``vectors`` ``[k, d_model]``, influence ``weights`` ``[k]``, token ``ids`` ``[k]`` (the first
    token of a pair; -1 for a direction), ``probabilities`` ``[k]`` (NaN where a node is not one token), node
    ``labels`` (plain text) and a JSON-able ``description`` (kind, tokens, strings, the clean run's value)."""

    vectors: torch.Tensor
    weights: torch.Tensor
    ids: torch.Tensor
    probabilities: torch.Tensor
    labels: list[str]
    description: dict[str, object]


def salient_logits(
    logits: torch.Tensor, W_U: torch.Tensor, max_logits: int, logit_prob: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(token ids [k], probabilities [k], centred unembedding columns [k, d_model])``.

    The most likely tokens, fewest whose probabilities reach ``logit_prob``, at most ``max_logits``.
    """
    probs = torch.softmax(logits, dim=-1)
    top_p, top_idx = torch.topk(probs, min(max_logits, probs.shape[-1]))
    cutoff = (
        int(
            torch.searchsorted(torch.cumsum(top_p, 0), torch.tensor(logit_prob, dtype=top_p.dtype, device=top_p.device))
        )
        + 1
    )
    top_p, top_idx = top_p[:cutoff], top_idx[:cutoff]
    centred = W_U[:, top_idx] - W_U.mean(dim=-1, keepdim=True)
    return top_idx, top_p, centred.T


def _token_label(model: CircuitModel, token: int) -> str:
    return repr(visible_token(model.tokenizer.token_str(token)))


def _direction(model: CircuitModel, name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise ArgumentTypeError(f"target: expected a floating-point direction tensor, got {type(value).__name__}")
    d = model.cfg.d_model
    if tuple(value.shape) != (d,):
        raise ShapeError(f"target: expected a direction of shape ({d},) (d_model), got {tuple(value.shape)}")
    if not bool(torch.isfinite(value).all()):
        raise NonFiniteError(f"target: expected a finite direction, got NaN or inf in {name!r}")
    return value.to(device=model.device, dtype=model.dtype)


def resolve_target(
    model: CircuitModel, target: object, last_logits: torch.Tensor, max_logits: int, logit_prob: float
) -> Target:
    """The logit nodes of ``target`` (module docstring) for a run whose last position's logits are ``last_logits``
    (typed errors name ``target``)."""
    W_U = model.W_U
    probs = torch.softmax(last_logits.double(), dim=-1)
    final = last_logits.double()
    if target is None:
        ids, p, vecs = salient_logits(last_logits, W_U, max_logits, logit_prob)
        labels = [f"logit {_token_label(model, int(t))} ({int(t)})" for t in ids.tolist()]
        desc: dict[str, object] = {"kind": "top", "tokens": ids.tolist()}
        return Target(vecs, p, ids, p.double().cpu(), labels, desc)
    if isinstance(target, (str, int)) and not isinstance(target, bool):
        t = check_token(model, "target", target)
        vec = (W_U[:, t] - W_U.mean(dim=-1))[None]
        label = f"logit {_token_label(model, t)} ({t})"
        desc = {"kind": "token", "tokens": [t], "value": float(final[t] - final.mean())}
        return Target(vec, probs[t : t + 1].to(vec.dtype), torch.tensor([t]), probs[t : t + 1].cpu(), [label], desc)
    if isinstance(target, (tuple, list)) and len(target) == 2 and isinstance(target[1], torch.Tensor):
        name = target[0]
        if not isinstance(name, str):
            raise ArgumentTypeError(f"target: expected (name, direction) with a str name, got {type(name).__name__}")
        return _direction_target(name, _direction(model, name, target[1]))
    if isinstance(target, torch.Tensor):
        return _direction_target("direction", _direction(model, "direction", target))
    if isinstance(target, (tuple, list)) and len(target) == 2:
        a, b = check_token(model, "target[0]", target[0]), check_token(model, "target[1]", target[1])
        if a == b:
            raise ArgumentError(f"target: expected two different tokens for a logit difference, got {a} twice")
        vec = (W_U[:, a] - W_U[:, b])[None]
        label = f"logit {_token_label(model, a)} − {_token_label(model, b)}"
        desc = {"kind": "pair", "tokens": [a, b], "value": float(final[a] - final[b])}
        one = torch.ones(1, dtype=vec.dtype, device=vec.device)
        return Target(vec, one, torch.tensor([a]), torch.tensor([float("nan")]), [label], desc)
    raise ArgumentTypeError(
        "target: expected None (the top logits), a token, a pair of tokens (a logit difference) or a direction "
        f"tensor [d_model], got {type(target).__name__}"
    )


def _direction_target(name: str, vec: torch.Tensor) -> Target:
    one = torch.ones(1, dtype=vec.dtype, device=vec.device)
    desc: dict[str, object] = {"kind": "direction", "name": name, "tokens": []}
    return Target(
        vec[None], one, torch.tensor([-1]), torch.tensor([float("nan")]), [f"target {visible_token(name)!r}"], desc
    )
