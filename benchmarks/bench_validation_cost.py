"""What issue 58's validation costs a dashboard build and an attribution graph (goal: ≤ 2 % of either).

Timed in one process on ``gelu-2l`` with its shipped dictionaries, each check run on its own (first call, nothing
cached) next to the work it guards:

- a dashboard build: ``max_activating`` over ``--tokens`` corpus tokens of the dictionary's features, and the
  checks it gained (argument ranges, the memory estimate) plus ``check_dictionary`` (the finite scan ``evaluate``
  makes);
- an attribution graph of a 64-token prompt, and ``check_attribution_inputs`` (the tokens again, the
  transcoders' finite scan: the one real cost, paid once per tensor version).

Wall seconds are medians of ``--repeats``; the machine's load is printed (a shared machine's noise is larger
than the checks, which is why they are timed apart). Run:
``nice .venv/bin/python benchmarks/bench_validation_cost.py`` (a minute or two; not part of CI).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

import circuitwidgets as cw
from circuitwidgets import features, graphs
from circuitwidgets.features import _args as feature_args
from circuitwidgets.graphs import _args as graph_args


def seconds(call: Callable[[], object], repeats: int, before: Callable[[], None] | None = None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def forget() -> None:
    """Drop the finite scans' memory, so each check runs as on a first call."""
    feature_args._SCANNED.clear()
    graph_args._SCANNED.clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2**16, help="corpus tokens of the dashboard build")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.1f}, torch threads 1")
    model = cw.load_pretrained("gelu-2l")
    shipped = features.load_pretrained("gelu-2l")
    tcs = {d.layer: d for name, d in shipped.items() if name.endswith(".tc")}
    rows = []

    d = tcs[1]
    rng = torch.Generator().manual_seed(0)
    corpus = torch.randint(1, model.cfg.d_vocab, (args.tokens // 128, 128), generator=rng)
    units = features.dictionary_features(model, d)
    t_dash = seconds(lambda: features.max_activating(model, corpus, units, progress=False), 1)
    t_dash_checks = seconds(lambda: feature_args.check_dictionary("dictionary", d), args.repeats, forget)
    rows.append(("dashboard build (max_activating)", t_dash, t_dash_checks, "check_dictionary (finite scan, uncached)"))

    prompt = torch.randint(1, model.cfg.d_vocab, (64,), generator=rng)
    tc_list = [tcs[layer] for layer in sorted(tcs)]
    t_graph = seconds(lambda: graphs.attribution_graph(model, tc_list, prompt), 1)
    t_graph_checks = seconds(
        lambda: graph_args.check_attribution_inputs(model, tc_list, prompt, max_logits=10, max_feature_nodes=7500,
                                                    progress=False), args.repeats, forget)  # fmt: skip
    rows.append(("attribution graph (64 tokens)", t_graph, t_graph_checks, "check_attribution_inputs (uncached)"))
    print("| work | its seconds | the check's seconds | share | the check |")
    print("|---|---|---|---|---|")
    for work, total, check, what in rows:
        print(f"| {work} | {total:.3f} | {check:.4f} | {100 * check / total:.2f} % | {what} |")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
