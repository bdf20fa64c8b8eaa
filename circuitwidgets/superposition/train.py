"""Train many toy models at once: ``train_toy`` and its result.

One batched loop trains ``instances`` models (each its own sparsity and
importance), as the paper's notebook does, with Adam written out on one packed
parameter tensor and the gradient of :func:`~circuitwidgets.superposition.model.toy_gradient`.
The loop runs on one thread (torch's intra-op threads are set to 1 for its
duration: the products are too small to split, and a second thread draws the
batches); results are the same for a seed whether the batches are drawn on
that thread or inline.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from circuitwidgets.errors import NonFiniteError
from circuitwidgets.superposition import _args
from circuitwidgets.superposition.model import ToyModel, batch_loss, pack, toy_gradient
from circuitwidgets.superposition.sampler import NegatedBatches

__all__ = ["ToyResult", "importance_decay", "snapshot_steps", "train_toy"]


@dataclass
class ToyResult:
    """Trained toy models and their trajectory (numpy arrays, float32 for weights).

    ``W [instances, m, n]``, ``b [instances, n]``; ``sparsity [instances]``,
    ``importance [instances, n]``; ``steps`` taken (fewer than asked when the
    run was stopped: ``stopped``); ``snapshot_steps [T]`` with the weights
    ``snapshot_W [T, instances, m, n]``, ``snapshot_b [T, instances, n]`` and
    the loss on that step's batch ``snapshot_loss [T, instances]``.
    """

    W: np.ndarray
    b: np.ndarray
    sparsity: np.ndarray
    importance: np.ndarray
    steps: int
    snapshot_steps: np.ndarray
    snapshot_W: np.ndarray  # noqa: N815 — the paper's W
    snapshot_b: np.ndarray
    snapshot_loss: np.ndarray
    seconds: float
    stopped: bool = False
    settings: dict[str, object] = field(default_factory=dict)

    @property
    def feature_probability(self) -> np.ndarray:
        """``1 − S`` per instance."""
        probability: np.ndarray = 1.0 - self.sparsity
        return probability

    @property
    def loss(self) -> np.ndarray:
        """Loss per instance at the last snapshot."""
        last: np.ndarray = self.snapshot_loss[-1]
        return last

    def model(self, dtype: torch.dtype = torch.float64) -> ToyModel:
        """The trained models as a :class:`ToyModel` (float64 by default, for exact checks)."""
        return ToyModel(
            W=torch.as_tensor(self.W, dtype=dtype),
            b=torch.as_tensor(self.b, dtype=dtype),
            importance=torch.as_tensor(self.importance, dtype=dtype),
            feature_probability=torch.as_tensor(self.feature_probability, dtype=dtype),
        )


def importance_decay(n: int, decay: float) -> np.ndarray:
    """The paper's importances ``decay ** i`` for ``i = 0 .. n − 1`` (``decay = 1``: all equal)."""
    return float(_args.positive_float("decay", decay)) ** np.arange(_args.positive_int("n", n), dtype=np.float64)


def snapshot_steps(steps: int, snapshots: int) -> np.ndarray:
    """``snapshots`` steps from 0 to ``steps``, closer together early (where the geometry forms), always both ends."""
    steps = _args.positive_int("steps", steps)
    snapshots = _args.positive_int("snapshots", snapshots)
    if snapshots <= 1:
        return np.array([steps])
    snapshots = min(snapshots, steps + 1)  # (more would repeat steps: the same unique set)
    spaced = np.round(steps * np.linspace(0.0, 1.0, snapshots) ** 2).astype(np.int64)
    return np.unique(spaced)


def train_toy(
    n: int,
    m: int,
    *,
    sparsity: object = 0.0,
    importance: object = None,
    instances: int | None = None,
    steps: int = 10_000,
    batch: int = 1024,
    lr: float = 1e-3,
    seed: int = 0,
    snapshots: int = 40,
    stop: threading.Event | None = None,
    on_snapshot: Callable[[int, int], None] | None = None,
    threaded: bool | None = None,
    feature_sets: str = "independent",
    set_size: int = 2,
    memory_budget: int | None = None,
) -> ToyResult:
    """Train ``instances`` toy models ``ReLU(WᵀW x + b)`` with ``n`` features and ``m`` hidden dimensions.

    ``sparsity`` (a number, or one per instance, each in ``[0, 1)``) sets the
    feature probability ``1 − S``; ``importance`` is ``None`` (all 1), ``[n]``
    or ``[instances, n]``. ``instances`` defaults to the length of a
    per-instance ``sparsity`` or ``importance`` (else 1). Adam (``lr``, betas
    0.9/0.999) for ``steps`` steps of ``batch`` samples; ``W`` starts Xavier
    normal, ``b`` at zero, all from ``seed`` (the same seed gives the same
    result). ``snapshots`` weight snapshots are kept for replay
    (:func:`snapshot_steps`). Setting ``stop`` ends the run at the next step
    (the result says ``stopped``); ``on_snapshot(step, steps)`` is called at each
    snapshot (progress). ``threaded`` draws batches on a second thread (by
    default when a batch has more than 2^17 entries; the result is the same
    either way). ``feature_sets`` groups features ``0..k−1``, ``k..2k−1``, … (``k =
    set_size``) into sets whose features are present all together
    (``"correlated"``) or at most one at a time (``"anticorrelated"``, which
    needs ``k · (1 − S) ≤ 1``); each feature keeps probability ``1 − S``. Bad
    arguments raise typed errors naming them; a run whose parameters, batches and
    snapshots need more than ``memory_budget`` bytes (``None``: this machine's
    memory) is refused before anything is allocated, and a run that diverges (an
    ``lr`` too large) raises :class:`~circuitwidgets.errors.NonFiniteError` naming
    the first step whose weights are not finite.
    """
    n, m = _args.shape_of_model(n, m)
    instances = _args.instance_count(instances, sparsity, importance)
    steps = _args.positive_int("steps", steps)
    batch = _args.positive_int("batch", batch)
    lr = _args.positive_float("lr", lr)
    snapshots = _args.positive_int("snapshots", snapshots)
    if threaded is None:
        threaded = instances * batch * (n + 1) > 2**17
    kept = min(snapshots, steps + 1)
    # refused before any array of the run exists (the importances alone are [instances, n] float64)
    need = _args.training_bytes(instances, n, m, batch, kept, bool(threaded)) + 16 * instances * n
    _args.check_training_budget(need, _args.memory_budget(memory_budget))
    sparsity_ = _args.sparsity_per_instance(sparsity, instances)
    instances = sparsity_.shape[0]
    importance_ = _args.importance_range(_args.importance_per_instance(importance, n, instances))
    seed = (
        _args.positive_int("seed + 1", seed + 1 if isinstance(seed, int) and not isinstance(seed, bool) else seed) - 1
    )
    init_seed, data_seed = np.random.SeedSequence(seed).spawn(2)
    init = np.random.Generator(np.random.PCG64(init_seed))
    W = init.standard_normal((instances, m, n)) * np.sqrt(2.0 / (n + m))
    params = pack(torch.tensor(W, dtype=torch.float32), torch.zeros(instances, n))
    sets, set_size = _args.feature_sets(feature_sets, set_size, n, 1.0 - sparsity_)
    batches = NegatedBatches(
        1.0 - sparsity_, n, batch, data_seed, threaded=bool(threaded), sets=sets, set_size=set_size
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.perf_counter()
    try:
        taken, record = _adam_loop(
            params, batches, importance_, steps, lr, snapshot_steps(steps, kept), stop, on_snapshot
        )
    finally:
        batches.close()
        torch.set_num_threads(threads)
    kept_steps, kept_params, kept_loss = record
    stacked = np.stack(kept_params)
    return ToyResult(
        W=stacked[-1, :, :m].copy(),
        b=stacked[-1, :, m].copy(),
        sparsity=sparsity_,
        importance=importance_,
        steps=taken,
        snapshot_steps=np.array(kept_steps, dtype=np.int64),
        snapshot_W=stacked[:, :, :m].copy(),
        snapshot_b=stacked[:, :, m].copy(),
        snapshot_loss=np.stack(kept_loss),
        seconds=time.perf_counter() - started,
        stopped=taken < steps,
        settings={"n": n, "m": m, "steps": steps, "batch": batch, "lr": lr, "seed": seed, "feature_sets": sets},
    )


Record = tuple[list[int], list[np.ndarray], list[np.ndarray]]


def _adam_loop(
    params: torch.Tensor,
    batches: NegatedBatches,
    importance: np.ndarray,
    steps: int,
    lr: float,
    keep: np.ndarray,
    stop: threading.Event | None,
    on_snapshot: Callable[[int, int], None] | None,
) -> tuple[int, Record]:
    """Adam (as ``torch.optim.Adam``: betas 0.9/0.999, eps 1e-8) on ``params`` in place; returns steps and snapshots."""
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    weight = torch.as_tensor(importance, dtype=torch.float32)
    scale = (2.0 / (batches.batch * batches.n)) * weight[:, None, :]
    first, second = torch.zeros_like(params), torch.zeros_like(params)
    record: Record = ([], [], [])
    wanted = set(int(s) for s in keep)
    for step, negated in enumerate(batches):
        if step in wanted or (stop is not None and stop.is_set()):
            record[0].append(step)
            record[1].append(params.numpy().copy())
            record[2].append(batch_loss(params, negated, weight).numpy())
            if on_snapshot is not None:
                on_snapshot(step, steps)
        if step == steps or (stop is not None and stop.is_set()):
            return step, record
        grad = toy_gradient(params, negated, scale)
        taken = step + 1
        first.lerp_(grad, 1.0 - beta1)
        second.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
        denom = (second.sqrt() / (1.0 - beta2**taken) ** 0.5).add_(eps)
        params.addcdiv_(first, denom, value=-lr / (1.0 - beta1**taken))
        if not math.isfinite(float(params.sum())):  # a few µs on these small tensors; a NaN never ends a run silently
            raise NonFiniteError(
                f"lr: the run diverged: the weights hold NaN or infinity after step {taken} (lr={lr:g}); "
                "a smaller lr (the paper uses 1e-3) or smaller importances train"
            )
    raise AssertionError("the batch stream ended")  # NegatedBatches is endless
