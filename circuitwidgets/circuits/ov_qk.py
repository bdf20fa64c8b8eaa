"""Per-head QK and OV circuits, in the residual basis and in token space.

Row-vector convention (DESIGN.md §3): a destination (query) residual ``x_q``
attends to a source (key) residual ``x_k`` with score ``x_q W_QK x_kᵀ / scale``
and moves ``x_k W_OV`` into the destination, where

- ``W_QK = W_Q W_Kᵀ`` and ``W_OV = W_V W_O`` (``[d_model, d_model]``, rank ≤ d_head);
- full QK circuit ``W_E W_QK W_Eᵀ`` ``[query token, key token]``;
- full OV circuit ``W_E W_OV W_U`` ``[source token, out token]``.

Token-space circuits use ``W_E`` only. For shortformer models the positional
embedding is added to queries and keys only, so the token-token term above is
exact and the positional terms are separate (:func:`positional_qk` gives the
position-position term; the token-position cross terms are not returned). For
models whose positions enter the residual stream (``"standard"``) the same
token-only circuits are the paper's token terms. Biases, the attention scale
``1/scale`` and the layer-norm scalar are not part of any circuit here.

Rotary heads (DESIGN.md §3a): the score between a query at position ``i`` and
a key at position ``j`` is ``x_i W_Q R(i − j) W_Kᵀ x_jᵀ``, so their QK circuit is a
family indexed by the offset ``Δ = i − j``: ``W_QK(Δ) = W_Q R(Δ) W_Kᵀ``, still of
rank ≤ d_head. Every QK function takes ``offset``; on a layer that rotates,
``offset=None`` raises :class:`~circuitwidgets.errors.OffsetRequiredError`
instead of silently dropping the rotation (``offset=0`` is what tools that
ignore rotary compute; ``offset=1`` is what a previous-token head uses). On
layers without rotation (learned or no positions, NoPE layers) the circuit does
not depend on the offset and any offset gives the same matrix. Grouped-query
heads read their key/value head's ``W_K``, ``W_V`` (``model.kv_index``).

Every function returns a :class:`~circuitwidgets.circuits.lowrank.LowRankMatrix`
in the weights' dtype; building a token-space circuit costs ``O(d_vocab d_model
d_head)`` and ``O(d_vocab d_head)`` memory.
"""

from __future__ import annotations

import torch

from circuitwidgets._checks import check_head, check_int, check_model
from circuitwidgets.circuits._precision import compute_dtype, lift, matmul
from circuitwidgets.circuits.lowrank import LowRankMatrix
from circuitwidgets.circuits.stack import LowRankStack
from circuitwidgets.errors import ArgumentError, OffsetRequiredError, UnsupportedArchitectureError
from circuitwidgets.model import CircuitModel
from circuitwidgets.model.rotary import rotation_matrix


def rotates(model: CircuitModel) -> bool:
    """Whether any layer of ``model`` rotates queries and keys (so QK circuits need an ``offset``)."""
    return any(model.rotary_freq(layer) is not None for layer in range(model.cfg.n_layers))


def check_offset(model: CircuitModel, offset: object, layer: int | None = None) -> int | None:
    """``offset`` as an int in ``[0, n_ctx)``, or ``None`` where no layer concerned rotates.

    ``layer=None`` checks every layer (for analyses of all heads at once).
    """
    if offset is not None:
        return check_int("offset", offset, 0, model.cfg.n_ctx)
    layers = range(model.cfg.n_layers) if layer is None else (layer,)
    rotating = [lay for lay in layers if model.rotary_freq(lay) is not None]
    if rotating:
        where = (
            f"layer {rotating[0]}"
            if layer is not None
            else f"layers {rotating[:8]}{' ...' if len(rotating) > 8 else ''}"
        )
        raise OffsetRequiredError(
            f"offset: {where} of model {model.name!r} use rotary positions, so the QK circuit depends on the offset "
            "Δ = i − j between query position i and key position j; pass offset=0 (same position) or offset=1 "
            "(previous token), an int in [0, n_ctx), got None"
        )
    return None


def key_weights(model: CircuitModel, layer: int, head: int) -> torch.Tensor:
    """``W_K`` of the key/value head that query head ``head`` reads ``[d_model, d_head]``."""
    return model.W_K[layer, model.cfg.kv_head(head)]


def value_weights(model: CircuitModel, layer: int, head: int) -> torch.Tensor:
    """``W_V`` of the key/value head that query head ``head`` reads ``[d_model, d_head]``."""
    return model.W_V[layer, model.cfg.kv_head(head)]


def _grouped(tensor: torch.Tensor) -> torch.Tensor:
    """A key/value tensor ``[L, G, ...]`` as ``[L, G, 1, ...]`` (a view: broadcast over each group's query heads)."""
    return tensor.unsqueeze(2)


def _per_head(model: CircuitModel, tensor: torch.Tensor) -> torch.Tensor:
    """A query-head tensor ``[L, H, ...]`` as ``[L, G, H/G, ...]`` (a view of contiguous weights)."""
    cfg = model.cfg
    return tensor.reshape(cfg.n_layers, cfg.kv_heads, cfg.group_size, *tensor.shape[2:])


def _rotation_core(model: CircuitModel, offset: int | None) -> torch.Tensor | None:
    """``R(offset)`` of every layer ``[L, 1, 1, d_head, d_head]`` (identity where a layer does not rotate), or ``None``.

    Angles in float32 (float64 for float64 weights), as the forward pass computes them.
    """
    if offset is None:
        return None
    freqs = [model.rotary_freq(layer) for layer in range(model.cfg.n_layers)]
    if all(freq is None for freq in freqs):
        return None
    dh, dtype = model.cfg.d_head, compute_dtype(model.dtype)
    eye = torch.eye(dh, dtype=dtype, device=model.device)
    core = torch.stack(
        [eye if freq is None else rotation_matrix(freq, offset, dh, dtype=dtype).to(model.device) for freq in freqs]
    )
    return core[:, None, None]


def _OV(model: CircuitModel) -> LowRankStack:  # noqa: N802 — the paper's name
    return LowRankStack._trusted(_grouped(model.W_V), _per_head(model, model.W_O), merge=True)


def _QK(model: CircuitModel, offset: int | None) -> LowRankStack:  # noqa: N802 — the paper's name
    W_Q, W_K = _per_head(model, model.W_Q), _grouped(model.W_K)
    return LowRankStack._trusted(W_Q, W_K.transpose(-1, -2), core=_rotation_core(model, offset), merge=True)


def _full_OV(model: CircuitModel) -> LowRankStack:  # noqa: N802 — the paper's name
    return _OV(model)._with_outer(model.W_E, model.W_U)


def _full_QK(model: CircuitModel, offset: int | None) -> LowRankStack:  # noqa: N802 — the paper's name
    return _QK(model, offset)._with_outer(model.W_E, model.W_E.T)


def OV(model: CircuitModel) -> LowRankStack:  # noqa: N802 — the paper's name
    """Every head's ``W_OV = W_V W_O`` as a ``[n_layers, n_heads]`` stack of ``[d_model, d_model]`` low-rank matrices.

    The factors are views of the model's weights (value heads shared under
    grouped-query attention are not copied); cost ``O(1)``. ``model.W_E @ OV(model)
    @ model.W_U`` is every full OV circuit ``[L, H, d_vocab, d_vocab]``, still
    factored: its eigenvalues, norms and diagonals cost ``O(V d²)`` once plus
    ``O(L H d² d_head)`` (:class:`~circuitwidgets.circuits.LowRankStack`).
    TransformerLens: ``model.OV``.
    """
    model = check_model(model)
    return _OV(model)


def QK(model: CircuitModel, offset: int | None = None) -> LowRankStack:  # noqa: N802 — the paper's name
    """Every head's ``W_QK(Δ) = W_Q R(Δ) W_Kᵀ`` as a ``[n_layers, n_heads]`` stack of ``[d_model, d_model]`` matrices.

    ``offset`` (``Δ``, query position minus key position) is required when a
    layer rotates (module docstring); the rotation is the stack's ``d_head ×
    d_head`` core, so the query weights are not copied. Cost ``O(L d_head²)``.
    TransformerLens: ``model.QK`` (which has no rotation).
    """
    model = check_model(model)
    return _QK(model, check_offset(model, offset))


def W_QK(model: CircuitModel, layer: int, head: int, offset: int | None = None) -> LowRankMatrix:  # noqa: N802 — the paper's name
    """``W_Q R(offset) W_Kᵀ`` ``[d_model, d_model]`` (query residual × key residual); cost ``O(d_model d_head)``.

    ``offset`` is the query position minus the key position; needed on rotary layers (module docstring).
    """
    model = check_model(model)
    layer, head = check_head(model, layer, head)
    return _head(_QK(model, check_offset(model, offset, layer)), layer, head)


def W_OV(model: CircuitModel, layer: int, head: int) -> LowRankMatrix:  # noqa: N802 — the paper's name
    """``W_V W_O`` ``[d_model, d_model]`` (source residual → written residual); cost ``O(1)``."""
    model = check_model(model)
    layer, head = check_head(model, layer, head)
    return _head(_OV(model), layer, head)


def _head(stack: LowRankStack, layer: int, head: int) -> LowRankMatrix:
    matrix = stack[layer, head]
    assert isinstance(matrix, LowRankMatrix)
    return matrix


def _full_qk(model: CircuitModel, layer: int, head: int, offset: int | None) -> LowRankMatrix:
    return _head(_full_QK(model, offset), layer, head)


def _full_ov(model: CircuitModel, layer: int, head: int) -> LowRankMatrix:
    return _head(_full_OV(model), layer, head)


def full_qk(model: CircuitModel, layer: int, head: int, offset: int | None = None) -> LowRankMatrix:
    """Full QK circuit ``W_E W_QK(offset) W_Eᵀ`` ``[d_vocab (query token), d_vocab (key token)]``.

    Factors ``(W_E W_Q R) [V, d_head]`` and ``(W_E W_K)ᵀ [d_head, V]`` (in float32
    for half-precision models); cost ``O(V d_model d_head)``. ``offset``: query
    position minus key position, needed on rotary layers (module docstring).
    """
    model = check_model(model, "full_qk")
    layer, head = check_head(model, layer, head)
    return _full_qk(model, layer, head, check_offset(model, offset, layer))


def full_ov(model: CircuitModel, layer: int, head: int) -> LowRankMatrix:
    """Full OV circuit ``W_E W_OV W_U`` ``[d_vocab (source token), d_vocab (out token)]``.

    Factors ``(W_E W_V) [V, d_head]`` and ``(W_O W_U) [d_head, V]`` (in float32 for
    half-precision models); cost ``O(V d_model d_head)``. Entry ``[s, o]`` is the
    direct logit effect on ``o`` of attending to token ``s``.
    """
    model = check_model(model, "full_ov")
    layer, head = check_head(model, layer, head)
    return _full_ov(model, layer, head)


def positional_qk(model: CircuitModel, layer: int, head: int) -> LowRankMatrix:
    """Position-position QK term ``W_pos W_QK W_posᵀ`` ``[n_ctx (query position), n_ctx (key position)]``.

    Raises :class:`UnsupportedArchitectureError` for models without learned
    positional embeddings. Cost ``O(n_ctx d_model d_head)``.
    """
    model = check_model(model, "positional_qk")
    layer, head = check_head(model, layer, head)
    W_pos = model.W_pos
    if W_pos is None:
        raise UnsupportedArchitectureError(
            f"model: expected learned positional embeddings (W_pos), got positional_embedding_type="
            f"{model.cfg.positional_embedding_type!r}"
        )
    return _head(_QK(model, None)._with_outer(W_pos, W_pos.T), layer, head)


def full_qk_kcomp(
    model: CircuitModel, layer: int, head: int, earlier_layer: int, earlier_head: int, offset: int | None = None
) -> LowRankMatrix:
    """K-composition term of a head's QK circuit through an earlier head, in token space.

    ``W_E W_QK^{h2} (W_E W_OV^{h1})ᵀ`` ``[d_vocab (query token), d_vocab (token the
    earlier head read)]`` for ``h2 = (layer, head)`` and ``h1 = (earlier_layer,
    earlier_head)``. It is the ``W`` of the paper's ``Id ⊗ A^{h1} ⊗ W`` term: a key
    vector built from the earlier head's output, which read token ``t`` at the
    position it attended to, against a query built from the destination token's
    embedding. When ``h1`` is a previous-token head, a positive "same matching"
    ``W`` (large positive diagonal, positive eigenvalues) makes ``h2`` an induction
    head. The earlier head's attention pattern and the positional terms are left
    out. Factors ``(W_E W_Q^{h2} R) [V, d_head]`` and ``(W_E W_V^{h1} W_O^{h1} W_K^{h2})ᵀ
    [d_head, V]``; cost ``O(V d_model d_head)``. ``offset``: the later head's query
    position minus its key position, needed when its layer rotates.
    """
    model = check_model(model, "full_qk_kcomp")
    layer, head = check_head(model, layer, head)
    earlier_layer, earlier_head = check_head(model, earlier_layer, earlier_head, prefix="earlier_")
    if earlier_layer >= layer:
        raise ArgumentError(f"earlier_layer: expected a layer before layer={layer}, got {earlier_layer}")
    return _full_qk_kcomp(model, layer, head, earlier_layer, earlier_head, check_offset(model, offset, layer))


def _full_qk_kcomp(
    model: CircuitModel, layer: int, head: int, earlier_layer: int, earlier_head: int, offset: int | None
) -> LowRankMatrix:
    query = matmul(model.W_E, model.W_Q[layer, head])
    core = _rotation_core(model, offset)
    if core is not None:
        query = lift(query) @ core[layer, 0, 0]
    mixing = lift(model.W_O[earlier_layer, earlier_head]) @ lift(key_weights(model, layer, head))  # [d_head, d_head]
    key_side = matmul(model.W_E, value_weights(model, earlier_layer, earlier_head)) @ mixing
    return LowRankMatrix._trusted(lift(query), key_side.T.to(lift(query).dtype))


def direct_path(model: CircuitModel) -> LowRankMatrix:
    """Direct path ``W_E W_U`` ``[d_vocab (current token), d_vocab (next token)]`` plus ``b_U`` when present.

    With an unembedding bias the factors are ``[W_E, 1] [V, d_model + 1]`` and
    ``[W_U; b_U] [d_model + 1, V]``, so each row is the direct-path logits
    exactly. Cost ``O(V d_model)``.
    """
    model = check_model(model, "direct_path")
    return _direct_path(model)


def _direct_path(model: CircuitModel) -> LowRankMatrix:
    b_U = model.weight("b_U")
    if b_U is None:
        return LowRankMatrix._trusted(model.W_E, model.W_U)
    ones = torch.ones(model.cfg.d_vocab, 1, dtype=model.W_E.dtype, device=model.device)
    return LowRankMatrix._trusted(torch.cat([model.W_E, ones], dim=1), torch.cat([model.W_U, b_U[None]], dim=0))
