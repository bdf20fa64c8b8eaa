"""Choosing a sweep's passes by their measured cost.

A pass's time is modelled as a per-pass overhead plus, for each layer it runs,
one layer's time at the number of rows (sequences × positions) alive there;
one layer's time as a function of its rows is measured once per device, dtype,
model shape and prompt shape (a ladder of row counts, wall clock, best of a few)
and cached, in memory and on disk per machine (:mod:`~circuitwidgets.causal.calibration`), the measurement a
small share of the first sweep it serves. On a CPU small
matrix products run far below the machine's best rate, so fewer, bigger passes
win until the rate stops rising; where it falls again (large tensors on a CPU)
the model prefers smaller passes.

The cells of each layer are split into columns: by the position a pass may start
at (the cell's position, capped by the metric's earliest read one) when passes
skip a prefix, and into sub-columns of a few cells so that pass sizes can vary.
A pass takes a contiguous run of columns across the layers (a staircase through
every layer that has cells there, split where the memory budget's ``most``
variants would be exceeded; one layer per pass for sites a pass resumes), and
the runs are chosen by dynamic programming for the least modelled time.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from circuitwidgets.causal import calibration

#: Most columns a sweep's cells are split into (the choice's own time grows with their square).
COLUMNS = 48
#: Share of the sweep's predicted time the measurement may take (at least :data:`CALIBRATION_SECONDS`).
CALIBRATION_SHARE = 0.15
#: Seconds the measurement may always take.
CALIBRATION_SECONDS = 0.25


@dataclass(frozen=True)
class Curve:
    """One layer's measured seconds at increasing row counts, and a pass's own overhead in seconds."""

    rows: tuple[int, ...]
    seconds: tuple[float, ...]
    overhead: float

    def layer(self, rows: int) -> float:
        """Modelled seconds of one layer on ``rows`` rows: interpolated; flat below the ladder (overhead-bound),
        proportional above it (at the last measured rate)."""
        if rows <= self.rows[0]:
            return self.seconds[0]
        if rows >= self.rows[-1]:
            return self.seconds[-1] * rows / self.rows[-1]
        i = bisect.bisect_left(self.rows, rows)
        r0, r1, s0, s1 = self.rows[i - 1], self.rows[i], self.seconds[i - 1], self.seconds[i]
        return s0 + (s1 - s0) * (rows - r0) / (r1 - r0)


_CURVES: dict[tuple[object, ...], Curve] = {}


def measure_curve(
    key: tuple[object, ...],
    time_pass: Callable[[int, int, int], float],
    batch: int,
    n_pos: int,
    least_len: int,
    most_rows: int,
    work_rows: int,
    two_layers: bool,
) -> Curve:
    """The cost curve under ``key`` (measured once, then cached).

    ``time_pass(n, length, layers)``: wall seconds of a pass of ``n`` variants over
    the last ``length`` positions through the last ``layers`` layers (1 or 2), every
    row of every layer computed. ``least_len``: the shortest suffix a pass may
    compute; ``most_rows``: the most rows a pass may hold; ``work_rows``: the sweep's
    rows × layers, which bound the measurement's share of its time; ``two_layers``: the model has two layers or
    more (else the overhead is not measured apart from the layer).
    """
    if key in _CURVES:
        return _CURVES[key]
    stored = _stored_curve(key)
    if stored is not None:
        _CURVES[key] = stored
        return stored
    time_pass(1, n_pos, 1)  # warm the kernels and the allocator
    points: dict[int, float] = {}
    spent, best = 0.0, math.inf  # best: seconds per row
    ladder = _ladder(batch, n_pos, least_len, most_rows)
    for n, length in ladder:
        rows = n * batch * length
        repeats = 3 if spent < 0.05 else 2
        allowed = max(CALIBRATION_SECONDS, CALIBRATION_SHARE * work_rows * best) if points else math.inf
        if spent + repeats * rows * best > allowed:  # the next point would overrun the measurement's share
            break
        seconds = min(time_pass(n, length, 1) for _ in range(repeats))
        spent += repeats * seconds
        points[rows] = seconds
        best = min(best, seconds / rows)
        if len(points) >= 4 and seconds / rows > best / 0.85:  # past the peak rate
            break
    overhead = 0.0
    if two_layers:  # one layer more at the smallest size: one pass = overhead + layer, two = overhead + 2 layers
        n, length = ladder[0]
        one = points[n * batch * length]
        overhead = min(0.5 * one, max(0.0, 2 * one - min(time_pass(n, length, 2) for _ in range(3))))
    ladder_rows = tuple(sorted(points))
    layer = np.maximum.accumulate([points[r] - overhead for r in ladder_rows])  # more rows never cost less (noise)
    curve = Curve(ladder_rows, tuple(float(s) for s in layer), overhead)
    _CURVES[key] = curve
    calibration.store("curve", key, {"rows": list(curve.rows), "seconds": list(curve.seconds), "overhead": overhead})
    return curve


def _stored_curve(key: tuple[object, ...]) -> Curve | None:
    """The curve under ``key`` measured by an earlier process on this machine (:mod:`~circuitwidgets.causal.calibration`),
    or ``None``."""
    entry = calibration.load("curve", key)
    if not isinstance(entry, dict):
        return None
    try:
        rows = tuple(int(r) for r in entry["rows"])
        seconds = tuple(float(s) for s in entry["seconds"])
        curve = Curve(rows, seconds, float(entry["overhead"]))
    except (KeyError, TypeError, ValueError):
        return None
    return curve if rows and len(rows) == len(seconds) else None


def _ladder(batch: int, n_pos: int, least_len: int, most_rows: int) -> list[tuple[int, int]]:
    """``(variants, length)`` pairs of roughly doubling rows, from the smallest pass to ``most_rows``."""
    out: list[tuple[int, int]] = []
    target = batch * least_len
    while True:
        if target <= batch * n_pos:
            point = (1, min(n_pos, max(least_len, -(-target // batch))))
        else:
            point = (max(1, round(target / (batch * n_pos))), n_pos)
        if not out or point != out[-1]:
            out.append(point)
        if point[0] * batch * point[1] >= most_rows:
            return out
        target *= 2


def wall(fn: Callable[[], object]) -> float:
    """Wall seconds ``fn()`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass(frozen=True)
class Plan:
    """Chosen passes: each a run of columns ``[start, stop)`` and, within it, runs of layer indices ``[a, b)``."""

    passes: tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]
    seconds: float


def choose(
    counts: np.ndarray,
    row_len: Sequence[int],
    restarts: Sequence[int],
    n_layers: int,
    curve: Curve,
    most: int,
    staircase: bool,
    narrow: Sequence[float] | None = None,
    last_hooked: bool = True,
) -> Plan:
    """The passes of least modelled time (cached: a sweep called again plans nothing).

    ``counts[i, q]``: cells of the ``i``-th swept layer (ascending, restart layers
    ``restarts[i]``, non-decreasing; the last row the model's last layer when
    ``last_hooked``) in column ``q``; ``row_len[q]``: rows per variant of a pass
    starting at column ``q`` (prompts × the positions it computes). A pass holds at
    most ``most`` variants; ``staircase``: a pass may hold several layers (else one
    layer each). ``narrow[q]``: the share of a whole last layer that a pass from
    column ``q`` computes when nothing hooks its last layer (the keys and values of
    every row, the rest at the metric's positions only; 1 when it cannot narrow);
    ``last_hooked``: cells of the last layer hook inside it in a way that cannot narrow
    (frozen norms' replayed scales; the engine's mixers take the narrowed rows), so a
    pass holding them runs its last layer whole for every variant, and the plan may
    give them passes of their own.
    """
    shares = tuple(narrow) if narrow is not None else (1.0,) * counts.shape[1]
    key = (counts.tobytes(), counts.shape, tuple(row_len), tuple(restarts), n_layers, curve, most, staircase, shares,
           last_hooked)  # fmt: skip
    if key not in _PLANS:

        def cost(start: int, group: list[int]) -> tuple[float, tuple[tuple[int, int], ...]]:
            return _group_cost(
                group, restarts, n_layers, row_len[start], curve, most, staircase, shares[start], last_hooked
            )

        _PLANS[key] = _cheapest_runs(counts, cost)
    return _PLANS[key]


_PLANS: dict[tuple[object, ...], Plan] = {}

#: ``cost(start, group)``: seconds and layer runs of one pass over columns from ``start`` holding ``group[i]`` cells of
#: the ``i``-th swept layer.
GroupCost = Callable[[int, list[int]], tuple[float, tuple[tuple[int, int], ...]]]


def _cheapest_runs(counts: np.ndarray, cost: GroupCost) -> Plan:
    """The split of ``counts``' columns into contiguous runs of least total ``cost`` (dynamic programming)."""
    n_cols = counts.shape[1]
    cum = np.concatenate([np.zeros((counts.shape[0], 1), dtype=np.int64), np.cumsum(counts, axis=1)], axis=1)
    best = [0.0] + [math.inf] * n_cols
    back: list[tuple[int, tuple[tuple[int, int], ...]]] = [(0, ())] * (n_cols + 1)
    for j in range(1, n_cols + 1):
        for i in range(j):
            if best[i] == math.inf:
                continue
            seconds, runs = cost(i, [int(c) for c in cum[:, j] - cum[:, i]])
            if best[i] + seconds < best[j]:
                best[j], back[j] = best[i] + seconds, (i, runs)
    passes: list[tuple[int, int, tuple[tuple[int, int], ...]]] = []
    j = n_cols
    while j > 0:
        i, runs = back[j]
        passes.append((i, j, runs))
        j = i
    return Plan(tuple(reversed(passes)), best[n_cols])


def _group_cost(
    group: list[int],
    restarts: Sequence[int],
    n_layers: int,
    row_len: int,
    curve: Curve,
    most: int,
    staircase: bool,
    narrow: float,
    last_hooked: bool,
) -> tuple[float, tuple[tuple[int, int], ...]]:
    """Modelled seconds of a run of columns whose per-layer counts are ``group``, and its runs of layers: a staircase
    (split where ``most`` would be exceeded), or the same with the last layer's cells apart, whichever is cheaper."""
    present = [i for i, c in enumerate(group) if c]
    if not present or max(group) > most:
        return (0.0, ()) if not present else (math.inf, ())
    if not staircase:
        options = [[(i, i + 1) for i in present]]
    else:
        options = [_fill(present, group, most)]
        last = len(group) - 1
        if last_hooked and len(present) > 1 and present[-1] == last:  # the last layer's cells in passes of their own
            options.append([*_fill(present[:-1], group, most), (last, last + 1)])
    priced = [(sum(_pass_cost(a, b, group, restarts, n_layers, row_len, curve, narrow, last_hooked)
                   for a, b in runs), runs) for runs in options]  # fmt: skip
    seconds, runs = priced[0]
    if len(priced) > 1 and priced[1][0] < 0.99 * seconds:  # apart only when clearly cheaper (fewer passes on a tie)
        seconds, runs = priced[1]
    return seconds, tuple(runs)


def _fill(present: list[int], group: list[int], most: int) -> list[tuple[int, int]]:
    """Runs of consecutive layers holding at most ``most`` variants each (greedy, in layer order)."""
    runs: list[tuple[int, int]] = []
    first, size = present[0], 0
    for i in present:
        if size + group[i] > most:
            runs.append((first, i))
            first, size = i, 0
        size += group[i]
    runs.append((first, present[-1] + 1))
    return runs


def _pass_cost(
    a: int,
    b: int,
    group: list[int],
    restarts: Sequence[int],
    n_layers: int,
    row_len: int,
    curve: Curve,
    narrow: float,
    last_hooked: bool,
) -> float:
    """Modelled seconds of one pass of the layers ``a … b − 1`` of ``group``: its overhead, and each layer it runs at
    the rows alive there (the last layer narrowed unless the pass hooks inside it)."""
    whole_last = last_hooked and b == len(group) and group[-1] > 0
    total, alive, k = curve.overhead, 0, a
    for layer in range(restarts[a], n_layers):
        while k < b and restarts[k] <= layer:
            alive += group[k]
            k += 1
        share = narrow if layer == n_layers - 1 and not whole_last else 1.0
        total += share * curve.layer(alive * row_len)
    return total
