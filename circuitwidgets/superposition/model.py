"""The toy model of *Toy Models of Superposition*: ``x' = ReLU(Wᵀ W x + b)``, and its hand-written gradient.

``W`` is ``[instances, m, n]`` (column ``i`` is feature ``i``'s direction in the
``m`` hidden dimensions), ``b`` is ``[instances, n]``. The loss of an instance is
``mean over batch and features of I_i (x_i − x'_i)²`` and instances add up, as
in the paper's notebook (so each instance trains independently).

:class:`ToyModel` is the plain definition (autograd-ready, any dtype), used to
check :func:`toy_gradient`, the training loop's gradient: it writes the model
as ``z = x M + b`` with ``M = WᵀW``, so a step costs two batched products
(``[x, 1] · [M; b]`` forward and ``[x, 1]ᵀ · g`` backward) and two elementwise
passes, and never builds the ``[batch, m]`` hidden activations.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ToyModel:
    """``instances`` toy models: ``W [instances, m, n]``, ``b [instances, n]``, ``importance [instances, n]``.

    ``feature_probability [instances]`` is ``1 − S``: how often each feature is
    present (uniform in [0, 1] when it is).
    """

    W: torch.Tensor
    b: torch.Tensor
    importance: torch.Tensor
    feature_probability: torch.Tensor

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """``h = W x`` for a batch ``x [instances, batch, n]``: ``[instances, batch, m]``."""
        return torch.einsum("kmn,kbn->kbm", self.W, x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x' = ReLU(Wᵀ h + b)``: ``[instances, batch, n]``."""
        return torch.relu(torch.einsum("kbm,kmn->kbn", self.hidden(x), self.W) + self.b[:, None, :])

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        """Importance-weighted squared error per instance, ``[instances]`` (mean over batch and features)."""
        error = self.importance[:, None, :] * (x - self.forward(x)) ** 2
        return error.mean(dim=(1, 2))

    def sample(self, batch: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """A batch ``[instances, batch, n]`` drawn as the paper does (presence, then value: two draws per entry)."""
        instances, n = self.importance.shape
        dtype = self.W.dtype
        values = torch.rand(instances, batch, n, generator=generator, dtype=dtype)
        present = torch.rand(instances, batch, n, generator=generator, dtype=dtype)
        return torch.where(present < self.feature_probability.to(dtype)[:, None, None], values, 0.0)


def pack(W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Parameters as one tensor ``[instances, m + 1, n]``: rows ``0..m−1`` are ``W``, row ``m`` is ``b``."""
    return torch.cat([W, b[:, None, :]], dim=1)


def toy_gradient(params: torch.Tensor, negated: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Gradient of the summed instance losses with respect to ``pack(W, b)``.

    ``negated`` is a batch ``[instances, batch, n + 1]`` holding ``−x`` and a
    column of ones (:class:`~circuitwidgets.superposition.sampler.NegatedBatches`);
    ``scale [instances, 1, n]`` is ``2 I / (batch · n)``. With ``z = x M + b``:
    ``∂L/∂z = scale · 1[z > 0] (z − x)``, ``∂L/∂M = xᵀ ∂L/∂z``, ``∂L/∂b = Σ ∂L/∂z``
    and ``∂L/∂W = W (∂L/∂M + ∂L/∂Mᵀ)``; the scale is applied to the small
    ``[n + 1, n]`` product rather than to the batch.
    """
    m = params.shape[1] - 1
    W = params[:, :m]
    folded = torch.cat([-(W.transpose(1, 2) @ W), params[:, m:]], dim=1)  # [−M; b]: [−x, 1] · [−M; b] = x M + b
    z = torch.bmm(negated, folded)
    difference = z + negated[..., :-1]  # z − x
    dz = torch.ops.aten.threshold_backward(difference, z, 0.0)  # 1[z > 0] (z − x)
    product = torch.bmm(negated.transpose(1, 2), dz).mul_(scale)  # [−xᵀ ∂L/∂z; Σ ∂L/∂z]
    dM = -product[:, :-1]
    return torch.cat([W @ (dM + dM.transpose(1, 2)), product[:, -1:]], dim=1)


def batch_loss(params: torch.Tensor, negated: torch.Tensor, importance: torch.Tensor) -> torch.Tensor:
    """Each instance's loss on a batch ``[−x, 1]`` (what :meth:`ToyModel.loss` gives for ``x``): ``[instances]``."""
    m = params.shape[1] - 1
    W = params[:, :m]
    folded = torch.cat([-(W.transpose(1, 2) @ W), params[:, m:]], dim=1)
    error = torch.relu(torch.bmm(negated, folded)) + negated[..., :-1]
    return (importance[:, None, :] * error**2).mean(dim=(1, 2))
