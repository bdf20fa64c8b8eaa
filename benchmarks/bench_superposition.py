"""Toy models of superposition: our batched trainer against the reference notebook's plain loop, same run.

The sweep (the paper's notebook's intro sweep, issue 40's target): 10 instances
of ``n = 20`` features in ``m = 5`` dimensions, feature probability
``20^(−t)`` for ``t = 0 … 1`` (one per instance), importance ``0.7^i``, Adam
lr 1e-3, 10,000 steps of batch 1,024.

- *ours*: :func:`circuitwidgets.superposition.train_toy` (hand-written gradient
  and Adam, one uniform number per entry, batches drawn on a second thread when
  large), and the same with the batches drawn inline;
- *reference*: the plain loop of Anthropic's toy-models notebook, re-implemented
  here only as a baseline (autograd, ``torch.optim.Adam``, two ``torch.rand`` per
  entry, einsum forward), run with torch's thread count set as given.

Also timed: the 5→2 retrain a slider asks for (one instance, feature
probability 1/100, importance ``0.9^i``) with the paper's recipe (10,000 steps,
lr 1e-3) and with the widget's interactive recipe (2,000 steps, lr 5e-3), and the
phase diagram's default grid. Both trainers' final mean loss is printed, as a
check that they solve the same problem. The machine is shared: the load average
is printed with each row, and each row's CPU seconds (this process, all its
threads), which load inflates far less than wall time: on an idle machine a
one-thread run's wall time is about its CPU time.

Run::

    nice -n 10 .venv/bin/python benchmarks/bench_superposition.py
    nice -n 10 .venv/bin/python benchmarks/bench_superposition.py --steps 2000 --reference-threads 1 2
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from circuitwidgets.superposition import importance_decay, train_toy
from circuitwidgets.superposition.measure import angle_gaps, angles
from circuitwidgets.superposition.phase import phase_diagram


def reference_loop(
    n: int, m: int, probability: np.ndarray, importance: np.ndarray, steps: int, batch: int, lr: float, seed: int
) -> tuple[torch.Tensor, float]:
    """The notebook's training loop (baseline only): returns ``W [instances, n, m]`` and the last batch's mean loss."""
    torch.manual_seed(seed)
    instances = len(probability)
    W = torch.nn.Parameter(torch.nn.init.xavier_normal_(torch.empty(instances, n, m)))
    b = torch.nn.Parameter(torch.zeros(instances, n))
    p = torch.tensor(probability, dtype=torch.float32)[:, None]
    weight = torch.tensor(importance, dtype=torch.float32)
    optimiser = torch.optim.Adam([W, b], lr=lr)
    loss = torch.zeros(())
    for _ in range(steps):
        values = torch.rand(batch, instances, n)
        x = torch.where(torch.rand(batch, instances, n) <= p, values, torch.zeros(()))
        hidden = torch.einsum("bif,ifh->bih", x, W)
        out = torch.relu(torch.einsum("bih,ifh->bif", hidden, W) + b)
        loss = (weight * (x - out) ** 2).mean(dim=(0, 2)).sum()
        optimiser.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimiser.step()
    return W.detach(), float(loss.detach()) / instances


def _row(name: str, seconds: float, cpu: float, extra: str = "") -> None:
    print(f"| {name:<50} | {seconds:8.2f} | {cpu:8.2f} | {os.getloadavg()[0]:5.1f} | {extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--reference-threads", type=int, nargs="*", default=[1], help="torch threads for the baseline")
    args = parser.parse_args()
    n, m, instances = 20, 5, 10
    probability = 20.0 ** -np.linspace(0, 1, instances)
    importance = importance_decay(n, 0.7)
    print(
        f"sweep: {instances} instances, n={n}, m={m}, {args.steps:,} steps, batch {args.batch:,}; {os.cpu_count()} CPUs"
    )
    print(f"| {'what':<50} | {'wall s':>8} | {'CPU s':>8} | {'load':>5} | notes")
    print(f"|{'-' * 52}|{'-' * 10}|{'-' * 10}|{'-' * 7}|------")
    timings: dict[str, float] = {}
    for threaded in (None, False):
        label = "ours, batches on a second thread" if threaded is None else "ours, batches drawn inline"
        cpu = time.process_time()
        result = train_toy(
            n, m, sparsity=1 - probability, importance=importance, steps=args.steps, batch=args.batch, threaded=threaded
        )
        timings[label] = result.seconds
        _row(label, result.seconds, time.process_time() - cpu, f"final mean loss {result.loss.mean():.5f}")
    default_threads = torch.get_num_threads()
    for threads in args.reference_threads:
        torch.set_num_threads(threads)
        started, cpu = time.perf_counter(), time.process_time()
        _, loss = reference_loop(n, m, probability, importance, args.steps, args.batch, 1e-3, 0)
        seconds = time.perf_counter() - started
        best = min(timings.values())
        _row(
            f"reference loop, torch threads = {threads}",
            seconds,
            time.process_time() - cpu,
            f"final mean loss {loss:.5f}; {seconds / best:.1f}× ours (wall)",
        )
    torch.set_num_threads(default_threads)
    decay = importance_decay(5, 0.9)
    for steps, lr in ((10_000, 1e-3), (2_000, 5e-3)):
        cpu = time.process_time()
        result = train_toy(5, 2, sparsity=0.99, importance=decay, steps=steps, lr=lr)
        cpu = time.process_time() - cpu
        gaps = angle_gaps(angles(result.W)[0])
        _row(
            f"5→2 retrain, {steps:,} steps, lr {lr:g}",
            result.seconds,
            cpu,
            f"pentagon gaps {np.round(gaps).astype(int)}",
        )
    started, cpu = time.perf_counter(), time.process_time()
    diagram = phase_diagram()
    _row(
        f"phase diagram, {diagram.phase.size} cells × 2 tries (n=2, m=1)",
        time.perf_counter() - started,
        time.process_time() - cpu,
    )


if __name__ == "__main__":
    main()
