"""What composition score a pair of this model's heads reaches by chance: the rotation null.

The random-matrix baseline (:func:`~circuitwidgets.circuits.composition_baseline`) is the
*mean* score of Gaussian matrices; it says where chance sits, not how far above it a
score must be to mean anything. Trained heads are far from Gaussian (their spectra are
spiky), so their chance scores spread wider than Gaussian ones. This null keeps each
head's own weights and breaks only the alignment between them: it scores
``‖W_A R W_B‖_F / (‖W_A‖_F ‖W_B‖_F)`` for a random pair of one earlier and one later
head of the model, with a Haar-random rotation ``R`` of the residual stream between the
earlier head's write and the later head's read. ``E[score²] = 1 / d_model`` exactly for
any pair (so its mean sits at the random-matrix baseline), while its spread is the
pair's own.

Sampling ``R`` whole costs ``O(d_model³)``; only ``R X_B`` matters, for ``W_B = X_B Y_B``
(``X_B [d_model, r]``), and with ``X_B = U T`` (thin QR) ``R U`` is a uniformly random
orthonormal frame ``V``. So each sample draws ``V`` (QR of a Gaussian ``[d_model, r]``) and
scores ``‖A_A (B_A V T) B_B‖_F`` from ``r × r`` Gram matrices: ``O(d_model r²)``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from circuitwidgets._checks import check_int, check_model
from circuitwidgets.circuits.ov_qk import W_OV, W_QK
from circuitwidgets.errors import ArgumentError
from circuitwidgets.model import CircuitModel

#: Samples the null draws by default: the 99th percentile to about ±5 % of its distance above the mean.
NULL_SAMPLES = 2000

Factors = tuple[NDArray[np.float64], NDArray[np.float64]]


def _factors(model: CircuitModel, kind: str, layer: int, head: int, offset: int | None) -> Factors:
    """``(A, B)`` with ``A @ B`` the matrix a head shows on its side of the pair, float64."""
    if kind == "OV" or kind == "V":
        m = W_OV(model, layer, head)
        return m.A.double().cpu().numpy(), m.B.double().cpu().numpy()
    m = W_QK(model, layer, head, offset)
    a, b = m.A.double().cpu().numpy(), m.B.double().cpu().numpy()
    # Q: the earlier head feeds the queries, W_B = W_QK; K: its keys, W_B = W_QKᵀ
    return (a, b) if kind == "Q" else (b.T, a.T)


def rotated_score(left: Factors, right: Factors, frame: NDArray[np.float64]) -> float:
    """``‖W_A R W_B‖ / (‖W_A‖ ‖W_B‖)`` for ``W_A = A_A B_A``, ``W_B = A_B B_B`` and a rotation ``R`` with
    ``R U = frame``, where ``A_B = U T`` is the thin QR of ``A_B`` (``frame``: ``[d_model, r]``, orthonormal)."""
    (a_a, b_a), (a_b, b_b) = left, right
    _, t = np.linalg.qr(a_b)
    middle = b_a @ frame @ t  # [r_A, r_B]: B_A R A_B
    gram_a, gram_b = a_a.T @ a_a, b_b @ b_b.T
    product = np.einsum("ij,jk,lk,il->", gram_a, middle, gram_b, middle)
    norm_a = np.einsum("ij,ji->", gram_a, b_a @ b_a.T)
    norm_b = np.einsum("ij,ji->", a_b.T @ a_b, gram_b)
    return float(np.sqrt(max(product, 0.0) / (norm_a * norm_b)))


def random_frame(rng: np.random.Generator, d_model: int, rank: int) -> NDArray[np.float64]:
    """A uniformly random ``[d_model, rank]`` orthonormal frame (QR of a Gaussian, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((d_model, rank)))
    return np.asarray(q * np.sign(np.diag(r)), dtype=np.float64)


#: Samples scored at once (their frames ``[chunk, d_model, d_head]`` in memory together).
_CHUNK = 64


def _sides(model: CircuitModel, kinds: tuple[str, ...], offset: int | None) -> tuple[list[Side], list[list[Side]]]:
    """Per earlier head (OV) and per kind and later head, what a rotated score needs of that side."""
    cfg = model.cfg
    heads = [(layer, head) for layer in range(cfg.n_layers) for head in range(cfg.n_heads)]
    left = [_side(_factors(model, "OV", *lh, offset), "left") for lh in heads]
    right = [[_side(_factors(model, kind, *lh, offset), "right") for lh in heads] for kind in kinds]
    return left, right


#: One side of a pair: a Gram matrix, the factor next to the rotation, and the squared Frobenius norm.
Side = tuple[NDArray[np.float64], NDArray[np.float64], float]


def _side(factors: Factors, which: str) -> Side:
    a, b = factors
    if which == "left":  # W_A = A B: keeps Aᵀ A and B (B R comes next)
        return a.T @ a, b, float(np.einsum("ij,ji->", a.T @ a, b @ b.T))
    _, t = np.linalg.qr(a)  # W_B = U T B: keeps B Bᵀ and T (R U is the random frame)
    return b @ b.T, t, float(np.einsum("ij,ji->", a.T @ a, b @ b.T))


def rotation_null(
    model: CircuitModel,
    n_samples: int = NULL_SAMPLES,
    seed: int = 0,
    kinds: tuple[str, ...] = ("Q", "K", "V"),
    offset: int | None = None,
) -> NDArray[np.float64]:
    """``n_samples`` composition scores of random (earlier head, later head, kind) triples of ``model`` with the
    residual stream between them rotated at random (module docstring), float64.

    Pairs are drawn uniformly over every earlier-later pair of heads and over ``kinds``. Draws, from
    ``numpy.random.default_rng(seed)``: the layer pairs, the head pairs and the kinds of every sample, then
    the frames, ``standard_normal((chunk, d_model, d_head))`` per chunk of samples. ``offset``: the QK
    circuits' query-key offset on rotary layers (as :func:`~circuitwidgets.circuits.W_QK`). Cost
    ``O(n_samples d_model d_head²)``; equal to :func:`rotated_score` sample by sample.
    """
    model = check_model(model, "rotation_null")
    n_samples = check_int("n_samples", n_samples, 1, 1_000_001)
    seed = check_int("seed", seed, 0)
    if not kinds or any(k not in ("Q", "K", "V") for k in kinds):
        raise ArgumentError(f"kinds: expected a non-empty tuple of 'Q', 'K', 'V', got {kinds!r:.80}")
    cfg = model.cfg
    if cfg.n_layers < 2:
        raise ArgumentError(f"model: expected at least 2 layers (a pair of heads), got {cfg.n_layers}")
    H = cfg.n_heads
    layer_pairs = np.array([(l1, l2) for l2 in range(1, cfg.n_layers) for l1 in range(l2)])
    rng = np.random.default_rng(seed)
    pairs = layer_pairs[rng.integers(len(layer_pairs), size=n_samples)]
    heads = rng.integers(H, size=(n_samples, 2))
    kind_of = rng.integers(len(kinds), size=n_samples)
    left, right = _sides(model, kinds, offset)
    gram_a, b_a, norm_a = (np.stack([s[i] for s in left]) for i in range(3))
    gram_b, t_b, norm_b = (np.stack([s[i] for row in right for s in row]) for i in range(3))
    i_left = pairs[:, 0] * H + heads[:, 0]
    i_right = kind_of * (cfg.n_layers * H) + pairs[:, 1] * H + heads[:, 1]
    out = np.empty(n_samples)
    rank = t_b.shape[-1]
    for start in range(0, n_samples, _CHUNK):
        part = slice(start, min(start + _CHUNK, n_samples))
        q, r = np.linalg.qr(rng.standard_normal((part.stop - part.start, cfg.d_model, rank)))
        frames = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
        ia, ib = i_left[part], i_right[part]
        middle = b_a[ia] @ frames @ t_b[ib]
        product = np.einsum("nij,njk,nlk,nil->n", gram_a[ia], middle, gram_b[ib], middle)
        out[part] = np.sqrt(np.clip(product, 0, None) / (norm_a[ia] * norm_b[ib]))
    return out


def composition_threshold(
    model: CircuitModel,
    quantile: float = 0.99,
    n_samples: int = NULL_SAMPLES,
    seed: int = 0,
    offset: int | None = None,
) -> float:
    """The score that a fraction ``quantile`` of :func:`rotation_null`'s scores stay below: a composition edge
    above it is unlikely to be chance alignment of these heads' weights."""
    if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) or not 0.5 <= quantile < 1:
        raise ArgumentError(f"quantile: expected a number in [0.5, 1), got {quantile!r:.80}")
    return float(np.quantile(rotation_null(model, n_samples, seed, offset=offset), quantile))
