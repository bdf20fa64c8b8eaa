"""The two linear probes' fits, in float64, with scikit-learn's objectives so the numbers can be compared.

Logistic regression minimises ``Σ_i −log p(y_i | x_i) + (l2 / 2) ‖W‖²`` (the
intercept unpenalised; scikit-learn's ``LogisticRegression(C=1 / l2)``, softmax
over the classes, one logit for two classes); ridge regression minimises
``Σ_i (y_i − x_i·w − b)² + l2 ‖w‖²`` (``Ridge(alpha=l2)``). Both objectives are
strictly convex, so any solver that converges finds the same weights: logistic
regression runs Newton's method, ridge the normal equations on centred data.
"""

from __future__ import annotations

import torch

from circuitwidgets.errors import ArgumentError


def fit_ridge(x: torch.Tensor, y: torch.Tensor, l2: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights ``[1, d]`` and intercept ``[1]`` of ridge regression of ``y`` ``[n]`` on ``x`` ``[n, d]``."""
    mean_x, mean_y = x.mean(0), y.mean()
    xc, yc = x - mean_x, y - mean_y
    gram = xc.T @ xc + l2 * torch.eye(x.shape[1], dtype=x.dtype)
    w = torch.linalg.solve(gram, xc.T @ yc)
    return w[None], (mean_y - mean_x @ w)[None]


def fit_logistic(
    x: torch.Tensor, y: torch.Tensor, n_classes: int, l2: float, max_iter: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights ``[1 or K, d]`` and intercepts of L2-regularised logistic regression of classes ``y`` on ``x``.

    Damped Newton steps on the weights and intercepts together (one logit for two classes, K for more: the
    Hessian is ``K(d + 1)`` square, built from ``K²`` products of the data), to a gradient of ~1e-11 of the loss.
    """
    n, d = x.shape
    k = 1 if n_classes == 2 else n_classes
    xb = torch.cat([x, torch.ones(n, 1, dtype=x.dtype)], dim=1)
    onehot = y.double()[:, None] if k == 1 else torch.nn.functional.one_hot(y, k).double()
    theta = torch.zeros(k, d + 1, dtype=x.dtype)
    penalty = torch.full((d + 1,), l2, dtype=x.dtype)
    penalty[-1] = 0.0  # the intercept is not penalised

    def probs(t: torch.Tensor) -> torch.Tensor:
        z = xb @ t.T
        return torch.sigmoid(z) if k == 1 else torch.softmax(z, dim=1)

    def objective(t: torch.Tensor) -> float:
        z = xb @ t.T
        if k == 1:
            nll = torch.nn.functional.softplus(z).sum() - (onehot * z).sum()
        else:
            nll = -(torch.log_softmax(z, dim=1) * onehot).sum()
        return float(nll + 0.5 * (penalty * t * t).sum())

    for _ in range(max_iter):
        p = probs(theta)
        grad = (p - onehot).T @ xb + penalty * theta  # [k, d + 1]
        hess = torch.zeros(k, d + 1, k, d + 1, dtype=x.dtype)
        for a in range(k):
            for b in range(a, k):
                w = p[:, a] * ((1.0 if a == b else 0.0) - p[:, b]) if k > 1 else p[:, 0] * (1 - p[:, 0])
                block = (xb * w[:, None]).T @ xb
                hess[a, :, b] = block
                hess[b, :, a] = block.T
            hess[a, :, a] += torch.diag(penalty)
        size = k * (d + 1)
        flat = hess.reshape(size, size) + 1e-12 * torch.eye(size, dtype=x.dtype)  # (softmax: intercepts' shift)
        step = torch.linalg.solve(flat, grad.reshape(size)).reshape(k, d + 1)
        scale, before = 1.0, objective(theta)
        while objective(theta - scale * step) > before and scale > 1e-10:  # damped: a step never raises the loss
            scale /= 2
        theta = theta - scale * step
        if float((scale * step).abs().max()) < 1e-12 * max(1.0, float(theta.abs().max())):
            break  # Newton converges quadratically: a step this small leaves the weights exact to rounding
    if not bool(torch.isfinite(theta).all()):
        raise ArgumentError("labels: the probe's fit diverged; raise l2")
    return theta[:, :d], theta[:, d]
