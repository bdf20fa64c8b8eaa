"""QK attribution: why a head attends where it does, as an exact sum of (query term × key term) products.

At layer ``l`` the residual stream at a position is exactly the sum of what
wrote it there: the token embedding, the position embedding, each earlier
head's output and attention bias (through the attention output norm, its scale
frozen, where the model has one), and, for each earlier MLP, each active
transcoder feature's write ``a W_dec``, the transcoder's skip path, its
decoder bias, and the error (the MLP's output minus the transcoder's
prediction). With the norm's per-token scale frozen (its centring is linear),
a head's query and key are linear in the stream, so the attention score
``q · k / scale`` (before any soft-cap) is the sum over every pair of a query
term and a key term, plus the query and key biases' terms. Rotary positions
are rotations at fixed positions, so the split holds for rotary heads too.
QK-normed heads are refused (that norm is not linear).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, UnsupportedArchitectureError
from circuitwidgets.graphs.transcoders import TranscoderLike, check_architecture, check_transcoders, transcoder_input
from circuitwidgets.model import ActivationCache, CircuitModel
from circuitwidgets.model.rotary import rotate


@dataclass
class QKAttribution:
    """``terms[i, j]``: query term ``i`` × key term ``j``'s part of the score; ``terms.sum() == score``.

    The last query row and key column are the query's and key's biases (``b_Q``,
    ``b_K``, which pair with the other side's whole vector); ``score`` is the
    model's own ``q · k / scale`` for the pair (before a soft-cap).
    """

    terms: np.ndarray
    query_labels: list[str]
    key_labels: list[str]
    score: float
    layer: int
    head: int
    query: int
    key: int

    def top(self, k: int = 10) -> list[tuple[str, str, float]]:
        """The ``k`` largest ``|term|`` as ``(query term, key term, value)``."""
        flat = np.argsort(-np.abs(self.terms), axis=None, kind="stable")[:k]
        rows, cols = np.unravel_index(flat, self.terms.shape)
        return [
            (self.query_labels[r], self.key_labels[c], float(self.terms[r, c])) for r, c in zip(rows, cols, strict=True)
        ]


def _check_index(name: str, value: object, n: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name}: expected an int, got {value!r}")
    if not -n <= value < n:
        raise ArgumentError(f"{name}: expected an int in [0, {n}), got {value}")
    return value % n


def stream_terms(
    model: CircuitModel, transcoders: Sequence[TranscoderLike], cache: ActivationCache, layer: int, pos: int
) -> tuple[list[str], torch.Tensor]:
    """``(labels, [n, d_model])``: what wrote the residual stream before ``layer`` at ``pos``, summing to it exactly."""
    cfg = model.cfg
    labels, vectors = ["embed"], [cache["embed"][0, pos]]
    if cfg.positional_embedding_type == "standard":
        labels.append("pos")
        vectors.append(cache["pos_embed"][0, pos])
    post = model.weight("post_attn_norm")
    for earlier in range(layer):
        # with an attention output norm (Gemma 2), each head's write is its share of the normalised output:
        # result · w / s, the scale s frozen at the run's (a linear split of attn_out)
        factor = 1.0 if post is None else post[earlier] / cache["scale_attn_post", earlier][0, pos]
        result = cache["result", earlier][0, pos] * factor
        labels += [f"L{earlier}H{h}" for h in range(cfg.n_heads)]
        vectors += list(result)
        b_O = model.weight("b_O")
        if b_O is not None:
            labels.append(f"L{earlier} b_O")
            vectors.append(b_O[earlier] * factor)
        tc = transcoders[earlier]
        x = transcoder_input(cfg, tc.in_site, cache["resid_mid", earlier], cache["scale_mlp", earlier])[0, pos]
        x = x.to(tc.W_enc.dtype)
        f = tc.encode(x)
        active = torch.nonzero(f)[:, 0]
        writes = f[active, None] * tc.W_dec[active]
        labels += [f"L{earlier} f{int(i)}" for i in active]
        vectors += list(writes)
        skip = x @ tc.W_skip if tc.W_skip is not None else torch.zeros_like(tc.b_dec)
        error = cache["mlp_out", earlier][0, pos].to(writes.dtype) - (writes.sum(0) + tc.b_dec + skip)
        labels += [f"L{earlier} skip", f"L{earlier} b_dec", f"L{earlier} error"]
        vectors += [skip, tc.b_dec, error]
    return labels, torch.stack([v.to(model.dtype) for v in vectors])


def _side(
    model: CircuitModel, terms: torch.Tensor, cache: ActivationCache, layer: int, pos: int, letter: str, head: int
) -> torch.Tensor:
    """Each term's query (``letter`` ``"Q"``) or key (``"K"``) vector ``[n, d_head]`` at ``pos``, rotated; bias last."""
    cfg = model.cfg
    if cfg.normalization == "ln_pre":
        terms = terms - terms.mean(-1, keepdim=True)
    if cfg.normalization in ("ln_pre", "rms_pre"):
        terms = terms / cache["scale", layer][0, pos].to(terms.dtype)
    if cfg.positional_embedding_type == "shortformer":
        terms = torch.cat([terms, cache["pos_embed"][0, pos][None].to(terms.dtype)])
    w_head = head if letter == "Q" else cfg.kv_head(head)
    W = model.weight(f"W_{letter}")
    assert W is not None
    out = terms @ W[layer, w_head].to(terms.dtype)
    b = model.weight(f"b_{letter}")
    bias = b[layer, w_head].to(out.dtype) if b is not None else torch.zeros_like(out[0])
    out = torch.cat([out, bias[None]])
    freq = model.rotary_freq(layer)
    if freq is not None:
        out = rotate(out[:, None, None], freq, torch.tensor([pos], device=out.device), pos_dim=1)[:, 0, 0]
    return out


def qk_attribution(
    model: CircuitModel,
    transcoders: object,
    tokens: torch.Tensor | Sequence[int] | str,
    layer: int,
    head: int,
    query: int = -1,
    key: int = 0,
) -> QKAttribution:
    """Split head ``head`` of ``layer``'s attention score from ``query`` to ``key`` into query-term × key-term parts.

    Terms (module docstring): ``embed``, ``pos``, ``L0H3`` (an earlier head's output),
    ``L0 b_O``, ``L0 f123`` (a transcoder feature's write), ``L0 skip``, ``L0 b_dec``,
    ``L0 error``, and ``bias`` (``b_Q``/``b_K``); for shortformer positions, ``pos``
    is the position embedding added to the query and key inputs.
    """
    check_architecture(model)
    cfg = model.cfg
    if model.weight("q_norm") is not None or model.weight("k_norm") is not None:
        raise UnsupportedArchitectureError(
            f"model: {model.name!r} has QK-norm, which is not linear; its scores do not split"
        )
    checked = check_transcoders(model, transcoders)
    t = model._check_tokens(tokens)
    if t.shape[0] != 1:
        raise ArgumentError(f"tokens: expected one prompt ([pos] or [1, pos]), got {t.shape[0]} prompts")
    n_pos = t.shape[1]
    layer = _check_index("layer", layer, cfg.n_layers)
    head = _check_index("head", head, cfg.n_heads)
    query = _check_index("query", query, n_pos)
    key = _check_index("key", key, n_pos)
    if key > query:
        raise ArgumentError(f"key: a query at position {query} attends to keys 0..{query} (causal), got {key}")
    names = ["embed", "pos_embed", "result", "resid_mid", "mlp_out", "scale", "scale_mlp", "q", "k", "scale_attn_post"]
    _, cache = model.run_with_cache(t, names=names)
    with torch.no_grad():
        q_labels, q_terms = stream_terms(model, checked, cache, layer, query)
        k_labels, k_terms = stream_terms(model, checked, cache, layer, key)
        q = _side(model, q_terms, cache, layer, query, "Q", head)
        k = _side(model, k_terms, cache, layer, key, "K", head)
        terms = (q.double() @ k.double().T) / cfg.scale
        score = float(cache["q", layer][0, query, head].double() @ cache["k", layer][0, key, head].double() / cfg.scale)
    extra = ["pos"] if cfg.positional_embedding_type == "shortformer" else []
    return QKAttribution(
        terms.cpu().numpy(), [*q_labels, *extra, "bias"], [*k_labels, *extra, "bias"], score, layer, head, query, key
    )
