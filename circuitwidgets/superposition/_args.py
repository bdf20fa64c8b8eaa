"""Argument checks of the toy-model engine: typed errors naming the argument, the expected and the received.

Kept apart from :mod:`circuitwidgets._checks` (which reads the transformer
model) so this package imports nothing above :mod:`circuitwidgets.errors`.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings

import numpy as np

from circuitwidgets.errors import ArgumentError, ArgumentTypeError, MemoryBudgetError, NonFiniteError, ShapeError


class MoreDimensionsThanFeaturesWarning(UserWarning):
    """``m > n``: a toy model with more hidden dimensions than features has no need for superposition."""


def positive_int(name: str, value: object) -> int:
    """``value`` as a positive ``int``; bools and floats (even integral ones) are refused."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(f"{name}: expected a positive integer, got {value!r} ({type(value).__name__})")
    if int(value) <= 0:
        raise ArgumentError(f"{name}: expected a positive integer, got {int(value)}")
    return int(value)


def positive_float(name: str, value: object) -> float:
    """``value`` as a finite positive ``float``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name}: expected a positive number, got {value!r} ({type(value).__name__})")
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise NonFiniteError(f"{name}: expected a finite positive number, got {number}")
    if number <= 0:
        raise ArgumentError(f"{name}: expected a positive number, got {number}")
    return number


def shape_of_model(n: object, m: object) -> tuple[int, int]:
    """``(n, m)`` checked; ``m > n`` is accepted with a :class:`MoreDimensionsThanFeaturesWarning`."""
    n_ = positive_int("n", n)
    m_ = positive_int("m", m)
    if m_ > n_:
        warnings.warn(
            f"m={m_} > n={n_}: more hidden dimensions than features, so every feature can have its own "
            "dimension and no superposition is expected",
            MoreDimensionsThanFeaturesWarning,
            stacklevel=3,
        )
    return n_, m_


def _as_float_array(name: str, value: object, expected: str) -> np.ndarray:
    if isinstance(value, bool | np.bool_ | str | bytes):
        raise ArgumentTypeError(f"{name}: expected {expected}, got {value!r} ({type(value).__name__})")
    try:
        array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"{name}: expected {expected}, got {type(value).__name__}") from None
    bad = int((~np.isfinite(array)).sum())
    if bad:
        raise NonFiniteError(f"{name}: expected {expected} with finite values, got {bad} NaN/Inf value(s)")
    return array


def sparsity_per_instance(value: object, instances: int | None) -> np.ndarray:
    """Sparsity ``S`` per instance (``[instances]``), each in ``[0, 1)``; a number applies to every instance."""
    expected = "a sparsity in [0, 1) or one per instance"
    array = _as_float_array("sparsity", value, expected)
    if array.ndim > 1:
        raise ShapeError(f"sparsity: expected {expected}, got an array of shape {array.shape}")
    if array.ndim == 1 and instances is not None and array.shape[0] != instances:
        raise ShapeError(f"sparsity: expected {instances} values (one per instance), got {array.shape[0]}")
    outside = array[(array < 0) | (array >= 1)]
    if outside.size:
        raise ArgumentError(
            f"sparsity: expected values in [0, 1) (feature probability 1 − S > 0), got {float(outside.flat[0])}"
        )
    return array if array.ndim == 1 else np.full(instances or 1, float(array))


def importance_per_instance(value: object, n: int, instances: int) -> np.ndarray:
    """Importance ``[instances, n]``, non-negative; ``None`` is 1 for every feature, a ``[n]`` vector is shared."""
    if value is None:
        return np.ones((instances, n))
    expected = f"{n} non-negative feature importances, or [{instances}, {n}] (one row per instance)"
    array = _as_float_array("importance", value, expected)
    if array.ndim == 1 and array.shape[0] == n:
        array = np.broadcast_to(array, (instances, n)).copy()
    if array.shape != (instances, n):
        raise ShapeError(f"importance: expected {expected}, got shape {array.shape}")
    if (array < 0).any():
        raise ArgumentError(f"importance: expected non-negative values, got {float(array.min())}")
    return array


def instance_count(instances: object, sparsity: object, importance: object) -> int:
    """``instances`` checked, or when ``None`` the length of a per-instance ``sparsity`` or ``[K, n]`` ``importance`` (else 1)."""
    if instances is not None:
        return positive_int("instances", instances)
    for value, rank in ((sparsity, 1), (importance, 2)):
        shape: tuple[int, ...] = ()
        if value is not None and not isinstance(value, str | bytes):
            try:
                shape = tuple(np.shape(value))  # type: ignore[call-overload]
            except (TypeError, ValueError):
                shape = ()
        if len(shape) == rank and shape[0] > 0:
            return int(shape[0])
    return 1


#: How features are drawn together (:func:`~circuitwidgets.superposition.train_toy`'s ``feature_sets``).
FEATURE_SETS = ("independent", "correlated", "anticorrelated")


def feature_sets(value: object, set_size: object, n: int, probability: np.ndarray) -> tuple[str, int]:
    """``(feature_sets, set_size)`` checked against ``n`` and the feature probabilities."""
    if value not in FEATURE_SETS:
        raise ArgumentError(f"feature_sets: expected one of {', '.join(FEATURE_SETS)}, got {value!r:.80}")
    size = positive_int("set_size", set_size)
    if value != "independent" and (size < 2 or n % size):
        raise ArgumentError(f"set_size: expected at least 2 and a divisor of n = {n}, got {size}")
    if value == "anticorrelated" and float(probability.max()) * size > 1 + 1e-12:
        raise ArgumentError(
            f"sparsity: anticorrelated sets of {size} need 1 − S ≤ 1/{size} (at most one feature present), "
            f"got 1 − S = {float(probability.max()):g}"
        )
    return str(value), size


def memory_budget(value: object) -> int:
    """A positive byte budget, or this machine's physical memory for ``None``."""
    total = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    if value is None:
        return total
    budget = positive_int("memory_budget", value)
    if budget > total:
        raise MemoryBudgetError(f"memory_budget: expected at most the {total:,} bytes of this machine, got {budget:,}")
    return budget


def training_bytes(instances: int, n: int, m: int, batch: int, snapshots: int, threaded: bool) -> int:
    """Bytes a :func:`~circuitwidgets.superposition.train_toy` run holds: the float64 initial draw, the packed
    parameters with Adam's two moments, the batch buffers (four when threaded) and every snapshot (three copies)."""
    params = instances * (m + 1) * n
    return (
        8 * instances * m * n
        + 4 * 3 * params
        + 4 * (4 if threaded else 1) * instances * batch * (n + 1)
        + (4 * 3 * snapshots * params + 4 * snapshots * instances)
    )


def check_training_budget(need: int, budget: int) -> None:
    """Refuse a run needing more than ``budget`` bytes, before allocating any of it."""
    if need > budget:
        raise MemoryBudgetError(
            f"memory_budget: this run holds about {need:,} bytes (parameters, Adam state, batches and snapshots), "
            f"more than the {budget:,} allowed; fewer instances, features, a smaller batch or fewer snapshots fit"
        )


#: Largest importance accepted: its square times a batch must stay inside float32 (the training dtype).
MAX_IMPORTANCE = 1e12


def importance_range(importance: np.ndarray) -> np.ndarray:
    """``importance`` unless a value is past :data:`MAX_IMPORTANCE` (float32 training would overflow to NaN)."""
    top = float(importance.max()) if importance.size else 0.0
    if top > MAX_IMPORTANCE:
        raise ArgumentError(
            f"importance: expected values of at most {MAX_IMPORTANCE:g} (float32 training), got {top:g}"
        )
    return importance
