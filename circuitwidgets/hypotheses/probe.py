"""Linear probes on a site's activations, held out by prompt, with Hewitt & Liang's control task for selectivity.

A probe reads one site at one layer at every labelled position: logistic
regression for classes (integer labels, ``-1`` unlabelled), ridge regression for
values (float labels, NaN unlabelled). Prompts (not positions) are split into a
training and a held-out set, so no prompt's tokens are on both sides. The
control task (:func:`control_task`) gives every token type one label drawn from
the labels' distribution: a probe that only memorises token identities scores as
well on it, and the selectivity (accuracy − control accuracy, both held out) says
how much more the site holds than the token's identity. A probe's ``direction``
is a ``d_model`` vector: :func:`~circuitwidgets.causal.logit_attribution` takes it as
``answers``, and any steering that adds a direction to the stream takes it as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from circuitwidgets._checks import check_int
from circuitwidgets.causal.labels import prompts_of
from circuitwidgets.causal.result import Sweep
from circuitwidgets.errors import ArgumentError, ArgumentTypeError, ShapeError
from circuitwidgets.hypotheses.solvers import fit_logistic, fit_ridge
from circuitwidgets.model import CircuitModel

#: Sites a probe reads (``[pos, width]`` per layer).
PROBE_SITES = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out", "mlp_post")


@dataclass
class Probe:
    """A linear probe of one site at one layer.

    Attributes
    ----------
    weights, intercept
        ``[K, width]`` and ``[K]`` float64 (K = 1 for two classes and for values).
    classes
        the class labels (empty for values); ``accuracy`` is held-out accuracy (classes) or R² (values).
    held_out
        the prompts held out (indices into ``tokens``); ``by_position`` their accuracy at each position.
    control_accuracy, selectivity
        the same probe trained on :func:`control_task` labels, held out; ``accuracy − control_accuracy``.
    """

    site: str
    layer: int
    kind: str
    weights: torch.Tensor
    intercept: torch.Tensor
    classes: list[int]
    accuracy: float
    train_accuracy: float
    control_accuracy: float
    l2: float
    n_train: int
    n_test: int
    held_out: list[int] = field(default_factory=list)
    by_position: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    @property
    def selectivity(self) -> float:
        """Held-out accuracy minus the control task's (Hewitt & Liang, 2019)."""
        return self.accuracy - self.control_accuracy

    @property
    def direction(self) -> torch.Tensor:
        """The probe's weight vector ``[width]`` (two classes: towards the second class; values: the ridge weights)."""
        if self.weights.shape[0] != 1:
            raise ArgumentError(
                f"direction: a probe of {len(self.classes)} classes has one direction per class; "
                "use direction_of(label)"
            )
        return self.weights[0]

    def direction_of(self, label: int) -> torch.Tensor:
        """The weight vector of one class of a probe of more than two classes."""
        if label not in self.classes or self.weights.shape[0] == 1:
            raise ArgumentError(
                f"label: expected one of the classes {self.classes} of a multi-class probe, got {label!r}"
            )
        return self.weights[self.classes.index(label)]

    def predict(self, activations: torch.Tensor) -> torch.Tensor:
        """Predicted classes (or values) of activations ``[..., width]``."""
        z = activations.double() @ self.weights.T + self.intercept
        if self.kind == "ridge":
            return z[..., 0]
        if self.weights.shape[0] == 1:
            return torch.tensor(self.classes)[(z[..., 0] > 0).long()]
        return torch.tensor(self.classes)[z.argmax(-1)]


@dataclass
class Probes:
    """One probe per layer, and their held-out accuracy by layer × position (:attr:`accuracy_map`)."""

    probes: list[Probe]
    accuracy_map: Sweep

    def __getitem__(self, layer: int) -> Probe:
        return self.probes[layer]

    def __len__(self) -> int:
        return len(self.probes)


def control_task(
    tokens: torch.Tensor | Sequence[Sequence[int]], labels: torch.Tensor | Sequence[Sequence[float]], seed: int = 0
) -> torch.Tensor:
    """Hewitt & Liang's control labels: each token type's one label, drawn from the labels' empirical distribution.

    Unlabelled positions (``-1`` classes, NaN values) stay unlabelled.
    """
    t, y = torch.as_tensor(tokens), torch.as_tensor(labels)
    if t.shape != y.shape:
        raise ShapeError(f"labels: expected one label per token, shape {tuple(t.shape)}, got {tuple(y.shape)}")
    mask = _labelled(y)
    pool = y[mask]
    if pool.numel() == 0:
        raise ArgumentError("labels: expected at least one labelled position, got none")
    gen = torch.Generator().manual_seed(check_int("seed", seed))
    types = torch.unique(t[mask])
    drawn = pool[torch.randint(0, pool.numel(), (len(types),), generator=gen)]
    lookup = dict(zip(types.tolist(), drawn.tolist(), strict=True))
    out = y.clone()
    out[mask] = torch.tensor([lookup[i] for i in t[mask].tolist()], dtype=y.dtype)
    return out


def probe(
    model: CircuitModel,
    site: str,
    tokens: torch.Tensor | Sequence[Sequence[int]],
    labels: torch.Tensor | Sequence[Sequence[float]],
    *,
    layer: int | None = None,
    l2: float = 1.0,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> Probe | Probes:
    """Train a linear probe of ``site`` for ``labels``, held out by prompt, with its control task.

    Parameters
    ----------
    site
        ``resid_pre``, ``resid_mid``, ``resid_post``, ``attn_out``, ``mlp_out`` or ``mlp_post``.
    tokens, labels
        ``[N, pos]`` each: integer classes (``-1`` unlabelled) for logistic regression, floats (NaN unlabelled)
        for ridge regression.
    layer
        one layer (a :class:`Probe`), or ``None``: every layer (:class:`Probes`, with the accuracy map).
    l2
        the penalty: logistic ``(l2 / 2)‖W‖²`` (scikit-learn's ``C = 1 / l2``), ridge ``l2‖w‖²`` (``alpha``).
    test_fraction
        the share of prompts held out (at least one prompt on each side).
    seed
        seeds the split and the control task.
    """
    if not isinstance(site, str) or site not in PROBE_SITES:
        raise ArgumentError(f"site: expected one of {PROBE_SITES}, got {site!r}")
    if site in ("resid_mid", "mlp_out", "mlp_post") and not model.cfg.has_mlp:
        raise ArgumentError(f"site: {site!r} needs a model with MLPs; {model.name!r} has none")
    t = model._check_tokens(tokens)  # type: ignore[arg-type]
    y = torch.as_tensor(labels)
    if y.shape != t.shape:
        raise ShapeError(f"labels: expected one label per token, shape {tuple(t.shape)}, got {tuple(y.shape)}")
    kind = "ridge" if y.dtype.is_floating_point else "logistic"
    if y.dtype == torch.bool or y.dtype.is_complex:
        raise ArgumentTypeError(f"labels: expected integer classes or float values, got dtype {y.dtype}")
    layers = range(model.cfg.n_layers) if layer is None else [check_int("layer", layer, 0, model.cfg.n_layers)]
    if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not l2 > 0:
        raise ArgumentError(f"l2: expected a positive number, got {l2!r}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, float) or not 0 < test_fraction < 1:
        raise ArgumentError(f"test_fraction: expected a float in (0, 1), got {test_fraction!r}")
    n = t.shape[0]
    n_test = round(n * test_fraction)
    if not 1 <= n_test <= n - 1:
        raise ShapeError(f"tokens: {n} prompts cannot be split {test_fraction:g} held out with one on each side")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(check_int("seed", seed)))
    test = torch.zeros(n, dtype=torch.bool)
    test[order[:n_test]] = True
    control = control_task(t.cpu(), y, seed)
    _, cache = model.run_with_cache(t, names=[site])
    probes = [_fit(cache[site, i].double().cpu(), y, control, test, kind, site, i, float(l2)) for i in layers]
    if layer is not None:
        return probes[0]
    values = np.stack([p.by_position for p in probes])
    labels_ = {
        "layer": [f"L{i}" for i in range(model.cfg.n_layers)],
        "pos": [f"{i} {s!r}" for i, s in enumerate(model.to_str_tokens(t[0]))],
    }
    measure = "held-out accuracy" if kind == "logistic" else "held-out R²"
    sweep = Sweep(
        values, ("layer", "pos"), labels_, "linear probe", f"{measure} of a {kind} probe of {site}", None, None, site,
        f"{n - n_test} prompts trained, {n_test} held out (seed {seed}); l2 {l2:g}", model.name,
        prompts_of(model, tokens=t[:1]),
        extra={"selectivity": [p.selectivity for p in probes], "control_accuracy": [p.control_accuracy for p in probes]},
    )  # fmt: skip
    return Probes(probes, sweep)


def _labelled(y: torch.Tensor) -> torch.Tensor:
    return ~torch.isnan(y) if y.dtype.is_floating_point else y >= 0


def _fit(
    acts: torch.Tensor, y: torch.Tensor, control: torch.Tensor, test: torch.Tensor, kind: str, site: str,
    layer: int, l2: float,
) -> Probe:  # fmt: skip
    """The probe of one layer's activations ``[N, pos, width]`` and its control probe, held out by prompt."""
    mask = _labelled(y)
    train_rows, test_rows = mask & ~test[:, None], mask & test[:, None]
    if not bool(train_rows.any()) or not bool(test_rows.any()):
        raise ShapeError("labels: expected labelled positions in both the training and the held-out prompts")
    fitted = _train(acts[train_rows], y[train_rows], kind, l2)
    controlled = _train(acts[train_rows], control[train_rows], kind, l2)
    weights, intercept, classes = fitted
    p = Probe(
        site, layer, kind, weights, intercept, classes, 0.0, 0.0, 0.0, l2, int(train_rows.sum()), int(test_rows.sum())
    )
    c = Probe(site, layer, kind, *controlled, 0.0, 0.0, 0.0, l2, 0, 0)
    p.accuracy = _score(p, acts[test_rows], y[test_rows])
    p.train_accuracy = _score(p, acts[train_rows], y[train_rows])
    p.control_accuracy = _score(c, acts[test_rows], control[test_rows])
    by_pos = np.full(acts.shape[1], np.nan)
    for j in range(acts.shape[1]):
        rows = test_rows[:, j]
        if kind == "logistic" and bool(rows.any()):
            by_pos[j] = float((p.predict(acts[:, j][rows]) == y[:, j][rows]).double().mean())
        elif kind == "ridge" and int(rows.sum()) > 1:
            by_pos[j] = _r2(p.predict(acts[:, j][rows]), y[:, j][rows].double())
    p.by_position = by_pos
    p.held_out = [int(i) for i in torch.nonzero(test).flatten()]
    return p


def _train(x: torch.Tensor, y: torch.Tensor, kind: str, l2: float) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    if kind == "ridge":
        w, b = fit_ridge(x, y.double(), l2)
        return w, b, []
    classes = sorted(set(y.tolist()))
    if len(classes) < 2:
        raise ArgumentError(f"labels: expected at least two classes among the training labels, got {classes}")
    index = torch.tensor([classes.index(v) for v in y.tolist()])
    w, b = fit_logistic(x, index, len(classes), l2)
    return w, b, classes


def _score(p: Probe, x: torch.Tensor, y: torch.Tensor) -> float:
    if p.kind == "ridge":
        return _r2(p.predict(x), y.double())
    return float((p.predict(x) == y).double().mean())


def _r2(pred: torch.Tensor, y: torch.Tensor) -> float:
    """The coefficient of determination (scikit-learn's ``r2_score``)."""
    total = float(((y - y.mean()) ** 2).sum())
    return 1.0 - float(((y - pred) ** 2).sum()) / total if total > 0 else float("nan")
