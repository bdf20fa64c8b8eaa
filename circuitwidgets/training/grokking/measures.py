"""The progress measures of Nanda et al., read from a checkpoint's weights.

- :func:`fourier_norms`: the norm of the embedding ``W_E`` (the ``p`` number
  tokens) along each frequency ``k`` of the Fourier basis over the token,
  ``sqrt(|cos_k · W_E|² + |sin_k · W_E|²)`` with unit basis vectors
  (frequency 0 is the constant direction).
- :func:`key_frequencies`: the few frequencies the embedding concentrates on:
  the largest norms, cut at the widest gap between consecutive sorted norms.
- :func:`restricted_loss` and :func:`excluded_loss`: the logits over all
  ``p²`` pairs, projected. Restricted keeps only the logits' components along
  ``1, cos(w_k (a + b)), sin(w_k (a + b))`` for the key frequencies (per answer);
  excluded removes the key ``cos``/``sin`` components and keeps the rest. Both
  are the cross-entropy on the training pairs, as in the paper: restricted loss
  falls when the Fourier circuit forms, excluded loss rises as the model comes
  to rely on it.
- :func:`neuron_frequency_map`: per MLP neuron, the fraction of its activation's
  variance over the ``p × p`` grid that lies in the 2-D Fourier terms of one
  frequency (``cos/sin(w_k a)``, ``cos/sin(w_k b)`` and their products).
- :func:`sum_squared_weights`: the sum of squares of every weight.

The fast paths use FFTs; ``tests/test_grokking_measures.py`` checks each one
against its definition written with explicit basis vectors in float64.
"""

from __future__ import annotations

import torch

from circuitwidgets.errors import ArgumentError
from circuitwidgets.training.grokking.model import Weights, forward, forward_parts, pairs


def n_frequencies(p: int) -> int:
    """Number of non-constant frequencies of the Fourier basis over ``p`` values: ``p // 2``."""
    return p // 2


def _modulus(w: Weights) -> int:
    return int(w["W_U"].shape[1])


def fourier_norms(w: Weights) -> torch.Tensor:
    """Norm of the number tokens' embedding along each frequency ``0 .. p // 2`` (float64, ``[p // 2 + 1]``)."""
    p = _modulus(w)
    spectrum = torch.fft.rfft(w["W_E"][:p].double(), dim=0)  # [p // 2 + 1, d]
    power = spectrum.abs().square().sum(dim=-1)
    # A unit cos/sin pair carries 2/p of |X_k|²; the constant and (p even) the Nyquist term carry 1/p.
    weight = torch.full_like(power, 2.0 / p)
    weight[0] = 1.0 / p
    if p % 2 == 0:
        weight[-1] = 1.0 / p
    norms: torch.Tensor = (power * weight).sqrt()
    return norms


def key_frequencies(norms: torch.Tensor, max_keys: int | None = None) -> list[int]:
    """The frequencies (>= 1) with the largest norms, cut where the sorted norms drop most (in ratio).

    ``max_keys`` bounds how many are taken (default: a quarter of the frequencies, at least 1).
    """
    values = norms[1:].double()
    n = values.numel()
    if n == 0:
        raise ArgumentError("norms: expected the norms of at least one frequency besides the constant")
    limit = max(1, n // 4) if max_keys is None else max(1, min(int(max_keys), n))
    order = torch.argsort(values, descending=True)
    ranked = values[order].clamp_min(1e-300).log()
    if limit >= n:
        return sorted(int(i) + 1 for i in order)
    gaps = ranked[:limit] - ranked[1 : limit + 1]
    count = int(torch.argmax(gaps)) + 1
    return sorted(int(i) + 1 for i in order[:count])


def grid_logits(w: Weights) -> torch.Tensor:
    """Logits for every pair, ``[p, p, p]`` (``a``, ``b``, answer), float64."""
    p = _modulus(w)
    a, b = pairs(p)
    with torch.no_grad():
        return forward(w, a, b).double().reshape(p, p, p)


def _sum_components(logits: torch.Tensor, keys: list[int], constant: bool) -> torch.Tensor:
    """The logits' projection onto ``cos/sin(w_k (a + b))`` for ``k`` in ``keys`` (and the constant), per answer."""
    p = logits.shape[0]
    _check_keys(keys, p)
    s = (torch.arange(p)[:, None] + torch.arange(p)[None, :]) % p  # [a, b] -> a + b mod p
    # Functions of a + b: each residue class holds p pairs, so the projection is the class mean ...
    by_sum = torch.zeros(p, p, dtype=logits.dtype).index_add_(0, s.reshape(-1), logits.reshape(p * p, p)) / p
    # ... and keeping frequencies of that function of one variable is a truncation of its Fourier series.
    spectrum = torch.fft.fft(by_sum, dim=0)
    keep = torch.zeros(p, dtype=torch.bool)
    for k in keys:
        keep[k] = keep[(p - k) % p] = True
    keep[0] = constant
    kept = torch.fft.ifft(spectrum * keep[:, None], dim=0).real
    out: torch.Tensor = kept[s]
    return out


def _check_keys(keys: list[int], p: int) -> None:
    bad = [k for k in keys if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= p // 2]
    if bad or not keys:
        raise ArgumentError(f"keys: expected a non-empty list of frequencies in [1, {p // 2}], got {keys!r}")


def _train_loss_of(logits: torch.Tensor, train_idx: torch.Tensor) -> float:
    p = logits.shape[0]
    a, b = pairs(p)
    flat = logits.reshape(p * p, p)[train_idx]
    return float(torch.nn.functional.cross_entropy(flat, (a[train_idx] + b[train_idx]) % p))


def restricted_loss(w: Weights, keys: list[int], train_idx: torch.Tensor, logits: torch.Tensor | None = None) -> float:
    """Loss on the training pairs of the logits restricted to the key frequencies (module docstring).

    ``logits``: :func:`grid_logits` of ``w`` when already computed.
    """
    logits = grid_logits(w) if logits is None else logits
    return _train_loss_of(_sum_components(logits, keys, constant=True), train_idx)


def excluded_loss(w: Weights, keys: list[int], train_idx: torch.Tensor, logits: torch.Tensor | None = None) -> float:
    """Loss on the training pairs of the logits with the key frequencies' components removed."""
    logits = grid_logits(w) if logits is None else logits
    return _train_loss_of(logits - _sum_components(logits, keys, constant=False), train_idx)


def grid_pass(w: Weights) -> tuple[torch.Tensor, torch.Tensor]:
    """One pass over every pair: ``(neurons [p, p, d_mlp]`` in the weights' dtype, ``logits [p, p, p]`` float64)."""
    p = _modulus(w)
    a, b = pairs(p)
    with torch.no_grad():
        neurons, logits = forward_parts(w, a, b)
    return neurons.reshape(p, p, -1), logits.double().reshape(p, p, p)


def neuron_activations(w: Weights) -> torch.Tensor:
    """Every MLP neuron's activation at the last position over the grid, ``[p, p, d_mlp]``, in the weights' dtype."""
    p = _modulus(w)
    a, b = pairs(p)
    with torch.no_grad():
        return forward(w, a, b, return_neurons=True).reshape(p, p, -1)


def neuron_frequency_map(w: Weights, acts: torch.Tensor | None = None) -> torch.Tensor:
    """``[d_mlp, p // 2 + 1]`` float64: fraction of each neuron's variance in the 2-D terms of frequency ``k``
    (column 0: 0; a neuron constant over the grid: a row of 0)."""
    acts = neuron_activations(w) if acts is None else acts  # (acts: :func:`neuron_activations` of ``w``)
    p = acts.shape[0]
    # Neurons first, so each 2-D transform runs over contiguous memory (several times faster than over dims 0, 1).
    power = torch.fft.fft2(acts.permute(2, 0, 1).contiguous()).abs().square()  # [m, p, p]
    total = power.sum(dim=(1, 2)) - power[:, 0, 0]
    out = torch.zeros(acts.shape[-1], p // 2 + 1, dtype=power.dtype)
    for k in range(1, p // 2 + 1):
        idx = torch.tensor(sorted({0, k, (p - k) % p}))
        out[:, k] = power[:, idx][:, :, idx].sum(dim=(1, 2)) - power[:, 0, 0]
    # (float32 weights give a float32 transform: a share of variance needs no more, and it is twice as fast)
    fractions: torch.Tensor = (out / total.clamp_min(torch.finfo(total.dtype).tiny)[:, None]).double()
    return fractions


def sum_squared_weights(w: Weights) -> float:
    """Sum of the squares of every weight (what weight decay shrinks)."""
    return float(sum(t.detach().double().square().sum() for t in w.values()))
