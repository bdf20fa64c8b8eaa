"""What a user sees: a patch sweep's first call in a fresh process, with the metric written as a Python function.

``bench_causal.py --first-call`` runs this (or run it alone)::

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_causal_first_call.py --shapes gpt2,medium --threads 2

For each row, each side in its own fresh process (``--worker``; the model built there, untimed, and one untimed
forward of it, as a user's notebook has run its model before a sweep):

- **first call, cold cache**: a fresh process with an empty calibration folder (``CIRCUITWIDGETS_CACHE_DIR`` a new
  temporary folder): the first sweep this machine ever runs at this shape, its cost curve measured inside it;
- **first call**: a second fresh process on the calibration the first one stored: what every later session sees;
- **warm**: the median of that second process's calls 2 … ``--calls``;
- **TransformerLens**: its ``patching`` function with the same Python metric, one call in a fresh process after one
  untimed forward (its first and only call: a user runs a sweep once).

Wall clock, ``torch.set_num_threads(--threads)`` in every process. The metrics (as a TransformerLens user writes
them): at GPT-2 shape the normalised logit difference at the last position, ``(ld − ld_corrupted) / (ld_clean −
ld_corrupted)`` with the two references computed once beforehand; at the medium shape the mean log-prob of the next
token over 21 positions (10 … 30). The declared rows use ``causal.normalised(causal.logit_diff(...))`` and
``causal.log_prob(...)``: the same numbers. ``max abs Δ`` is against TransformerLens's values.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _causal_common import SHAPES, TL_FUNCTIONS, bridge_of, build

#: (shape, site, by) of the issue's rows.
ROWS = {
    "gpt2": (("resid_pre", ("layer", "pos")), ("z", ("layer", "head")), ("pattern", ("layer", "head"))),
    "medium": (("z", ("layer", "pos", "head")), ("resid_pre", ("layer", "pos"))),
}
#: The positions the medium shape's metric reads (21 of 32).
READ = slice(10, 31)


def prompts(key: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``bench_causal.py``'s clean prompts and their corruption at the middle position."""
    shape = SHAPES[key]
    gen = torch.Generator().manual_seed(0)
    clean = torch.randint(1, shape.vocab, (shape.batch, shape.n_pos), generator=gen)
    corrupted = clean.clone()
    corrupted[:, shape.n_pos // 2] = torch.randint(1, shape.vocab, (shape.batch,), generator=gen)
    return clean, corrupted


def metric_of(key: str, kind: str, model: Any, clean: torch.Tensor, corrupted: torch.Tensor) -> Any:
    """The row's metric: ``python`` (a function as a TransformerLens user writes it) or ``declared``."""
    from circuitwidgets import causal

    if key == "medium":
        targets = clean[:, READ.start + 1 : READ.stop + 1]
        if kind == "declared":
            return causal.log_prob(targets, pos=READ)

        def mean_next_log_prob(logits: torch.Tensor) -> torch.Tensor:
            return logits[:, READ].log_softmax(-1).gather(-1, targets[..., None]).mean()

        return mean_next_log_prob
    correct, wrong = clean[:, -1], torch.full((clean.shape[0],), 17)
    if kind == "declared":
        return causal.normalised(causal.logit_diff(correct.tolist(), wrong.tolist()))
    rows = torch.arange(clean.shape[0])

    def logit_diff(logits: torch.Tensor) -> torch.Tensor:
        return (logits[rows, -1, correct] - logits[rows, -1, wrong]).mean()

    with torch.no_grad():
        ld_clean, ld_corrupted = float(logit_diff(model(clean))), float(logit_diff(model(corrupted)))

    def normalised_logit_diff(logits: torch.Tensor) -> torch.Tensor:
        return (logit_diff(logits) - ld_corrupted) / (ld_clean - ld_corrupted)

    return normalised_logit_diff


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One side's calls in this (fresh) process: wall seconds of each, and the last call's values."""
    torch.set_num_threads(spec["threads"])
    key, site, by = spec["shape"], spec["site"], tuple(spec["by"])
    hf = build(SHAPES[key], torch.device("cpu"))
    clean, corrupted = prompts(key)
    if spec["side"] == "tl":
        from transformer_lens import patching

        bridge = bridge_of(hf, torch.device("cpu"))
        metric = metric_of(key, "python", bridge, clean, corrupted)
        with torch.no_grad():
            bridge(clean)
            start = time.perf_counter()
            _, cache = bridge.run_with_cache(clean)
            values = getattr(patching, TL_FUNCTIONS[(site, by)])(bridge, corrupted, cache, metric)
            seconds = [time.perf_counter() - start]
        return {"seconds": seconds, "values": values.float().tolist(), "metric": metric.__name__}
    import circuitwidgets as cw
    from circuitwidgets import causal

    ours = cw.from_hf(hf)
    metric = metric_of(key, spec["side"], ours, clean, corrupted)
    with torch.no_grad():
        ours(clean)
    seconds, result = [], None
    for _ in range(spec["calls"]):
        start = time.perf_counter()
        result = causal.patch(ours, clean, corrupted, metric, site=site, by=by)
        seconds.append(time.perf_counter() - start)
    assert result is not None
    return {"seconds": seconds, "values": result.values.tolist(), "metric": result.metric}


def spawn(spec: dict[str, Any], cache: str) -> dict[str, Any]:
    """:func:`worker` in a fresh Python process whose calibration folder is ``cache``."""
    env = {**os.environ, "CIRCUITWIDGETS_CACHE_DIR": cache}
    out = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode:
        raise RuntimeError(f"worker {spec} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def row(
    key: str, site: str, by: tuple[str, ...], threads: int, calls: int, tl: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The row's Python and declared sides: first call (cold cache, then calibrated) and warm median."""
    out = []
    for side in ("python", "declared"):
        spec = {"shape": key, "site": site, "by": list(by), "side": side, "threads": threads}
        with tempfile.TemporaryDirectory() as cache:
            cold = spawn({**spec, "calls": 1}, cache)
            warm = spawn({**spec, "calls": calls}, cache)
        delta = None
        if tl is not None:
            delta = float((torch.tensor(warm["values"]) - torch.tensor(tl["values"])).abs().max())
        out.append({
            "shape": SHAPES[key].name, "sweep": f"`{site}` by {' × '.join(by)}", "side": side, "metric": warm["metric"],
            "first_cold": cold["seconds"][0], "first": warm["seconds"][0],
            "warm": statistics.median(warm["seconds"][1:]) if calls > 1 else None,
            "tl": None if tl is None else tl["seconds"][0], "delta": delta, "calls": warm["seconds"],
        })  # fmt: skip
    return out


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None else f"{a / b:.2f}×"


def _seconds(s: float | None) -> str:
    return "" if s is None else f"{s:.2f} s"


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| shape | sweep | metric | TL 4.3 (1 call) | ours, first call, cold cache | ours, first call | ours, warm median "
        "| TL / first call | TL / warm | first / warm | max abs Δ |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tl, first, warm, delta = r["tl"], r["first"], r["warm"], r["delta"]
        lines.append(
            f"| {r['shape']} | {r['sweep']} | {r['side']}: {r['metric']} | {_seconds(tl)} | {_seconds(r['first_cold'])} "
            f"| {_seconds(first)} | {_seconds(warm)} | {_ratio(tl, first)} | {_ratio(tl, warm)} | {_ratio(first, warm)} "
            f"| {'' if delta is None else f'{delta:.1e}'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--shapes", default="gpt2,medium")
    parser.add_argument("--sweeps", default="", help="site names to run (default all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=3, help="calls in the calibrated process (first + warm)")
    parser.add_argument("--no-tl", action="store_true", help="skip TransformerLens")
    parser.add_argument("--json", type=Path, help="write every call's seconds here")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    rows, before = [], load()
    for key in args.shapes.split(","):
        for site, by in ROWS[key]:
            if args.sweeps and site not in args.sweeps.split(","):
                continue
            print(f"{key} {site} {by} (load {load()})", file=sys.stderr, flush=True)
            tl = None
            if not args.no_tl:
                spec = {"shape": key, "site": site, "by": list(by), "side": "tl", "threads": args.threads}
                with tempfile.TemporaryDirectory() as cache:
                    tl = spawn(spec, cache)
            rows += row(key, site, by, args.threads, args.calls, tl)
    print(f"load average before {before}, after {load()}; {args.threads} threads; wall clock")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"load_before": before, "load_after": load(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
