"""Causal benchmark: the issue's table — activation-patching sweeps against TransformerLens 4.3 and against their floor.

One command makes the whole table (rows, TransformerLens's seconds, ours, the ratio, the issue's goal, whether it is
met, the floor and the ratio to it, the largest difference from TransformerLens's numbers) and writes it as JSON
(every call's CPU and wall seconds, the machine's load before and after, the versions)::

    .venv/bin/python benchmarks/bench_causal.py --device cpu --threads 2            # CPU, 2 threads
    .venv/bin/python benchmarks/bench_causal.py --device cuda --threads 2           # the GPU (TL timed there too)
    .venv/bin/python benchmarks/bench_causal.py --shapes gpt2 --sweeps resid_pre --forward ""   # one row
    .venv/bin/python benchmarks/bench_causal.py --first-call --shapes gpt2,medium   # Python metrics, first calls

``--device cuda`` refuses clearly where torch sees no CUDA device. On CUDA every timed call is synchronised
(``torch.cuda.synchronize``) before and after, each model runs one untimed forward first, and the clock is wall
time; on CPU it is this process's CPU time (``--clock wall`` to change), which other processes on a shared machine
disturb far less than wall time. A measurement repeats its call up to ``--repeats`` times (3) until its calls took
``--budget`` seconds (10) and reports the median of the calls after the first (a warm-up for both libraries:
kernels, caches, and our one-off measurement of one layer's cost by rows that the passes are chosen by, cached per
shape); a call that alone spends the budget is reported as it is, marked "1 call" in the table (TransformerLens's
longer sweeps, whose first call ran up to a quarter slower than its second here; ours then include that
measurement, about 15% of the sweep or 0.25 s). A quick call goes on past ``--repeats`` (up to 100 calls) until the
calls after the warm-up took 0.25 s, the rule the floor's layer is timed by (since 2026-12-02; before, a tiny sweep
was the median of two calls). JSON keeps every call.

Shapes (random Hugging Face GPT-2 weights built offline, float32, read by ``circuitwidgets.from_hf`` and bridged
by TransformerLens ``TransformerBridge.boot_transformers`` from the same object, on the same device):

- ``tiny``: 2 layers × 4 heads, d_model 64, d_vocab 512, 8 prompts × 20 tokens: every site and ``by`` that
  TransformerLens's ``patching`` module has (13 sweeps);
- ``medium``: 4 layers × 8 heads, d_model 256, d_vocab 2,048, 8 prompts × 32 tokens: ``z`` by layer × pos × head and
  ``resid_pre`` by layer × pos; and the induction study: 8 prompts of 25 random tokens repeated (50), ``z`` by
  layer × head under a corruption of the first half, the metric the mean log-prob of the next token over 49
  positions written as a Python function (TransformerLens: the same function through its ``patching`` hook loop;
  ours: the function as given, and the same metric declared, ``causal.loss``);
- ``gpt2``: GPT-2-small, 12 layers × 12 heads, d_model 768, d_vocab 50,257, 2 prompts × 12 tokens:
  ``resid_pre`` by layer × pos, ``pattern`` and ``z`` by layer × head;
- forward rows: a plain forward pass over 200 × 64 tokens at the tiny and medium shapes.

Every sweep runs with default settings, the metric ``causal.logit_diff`` at the last position unless stated.

**The floor** of a sweep is the least work any exact patching must do, counted in FLOPs and timed at the rate this
machine runs one Hugging Face decoder layer of the same model (the median of at least 5 calls after a warm-up, more
until they took 0.25 s, as each sweep's time is a median; until 2026-12-02 the fastest of them, and until 2026-12-01
the best of 3; the last column and the JSON keep the ratio to the fastest call's floor; measured in the same run
on the sweep's own token count): for each cell at layer ``l`` whose patch starts at position ``p`` (``p = 0`` for
cells that do not split positions), ``batch`` prompts through layers ``l … L−1`` at positions ``p … P−1`` only
(earlier positions are unchanged by causal attention), attending to every earlier key; in the last layer the keys
and values of those positions and the rest of the layer only at the positions the metric reads; then the
unembedding of the ids the metric reads there (2 for a logit difference, the whole vocabulary for the induction
study's log-probs); and once per sweep the two runs no exact patching can do without, the base run (the same work as
a cell at layer 0, position 0) and the source run through every layer but the last (``base_run_flops``; until
2026-11-28 the floor counted the cells only, and on the tiny sweeps those two runs alone took 3.4–4.1 ms of ours
against floors of 6–17 ms). A ratio to the floor above 1 is overhead (Python, hooks, the per-pass set-up, tensors
below the machine's best size); the floor's rate is Hugging Face's layer, which ours can outrun (the forward rows' ratios
below 1).

**The allocator** is glibc's as a user's process has it (its defaults). Until 2026-12-01 this benchmark imported
``bench_engine``, whose import sets ``M_MMAP_THRESHOLD`` to 64 KiB so that its own RSS figures follow each call:
every tensor above 64 KiB was then mapped from the system and returned on free, and each new one page-faulted (5.5
million minor faults in one induction study with TransformerLens, against 0.18 million with the defaults). That
slowed TransformerLens's hook loop about 2.4× and ours about 1.5× in the induction study, and the floor's Hugging
Face layer too, so every ratio measured before that date flatters us against both. The peak extra memory column
is now resident memory above the level before the call under the default allocator: memory already in the heap
from earlier calls is reused and not counted, so it can read lower than a call's own allocations.

The measured tables, newest first, with the load each was measured under: ``benchmarks/causal_results.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _causal_common import (
    FLOOR_GOAL,
    MIN_SECONDS,
    SHAPES,
    TL_FUNCTIONS,
    Clock,
    Counts,
    Measurement,
    Rate,
    Row,
    Shape,
    base_run_flops,
    bridge_of,
    build,
    floor_flops,
    induction_prompts,
    layer_rate,
    measure,
    next_token_log_prob,
    starts_of,
)  # fmt: skip

import circuitwidgets as cw
from circuitwidgets import causal

#: ``--sweeps``: the site names (and ``induction``) to run; empty for all.
ONLY: set[str] = set()


def tl_metric(correct: torch.Tensor, wrong: torch.Tensor) -> Any:
    """The logit difference at the last position, written as a TransformerLens user writes it."""

    def logit_diff(logits: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(correct.shape[0], device=logits.device)
        return (logits[rows, -1, correct] - logits[rows, -1, wrong]).mean()

    return logit_diff


def tl_sweep(bridge: Any, fn: str, clean: torch.Tensor, corrupted: torch.Tensor, metric: Any) -> np.ndarray:
    """TransformerLens's patching function ``fn`` on ``clean`` and ``corrupted`` (its hook loop, one run per cell)."""
    from transformer_lens import patching

    with torch.no_grad():
        _, cache = bridge.run_with_cache(clean)
        return getattr(patching, fn)(bridge, corrupted, cache, metric).float().cpu().numpy()  # type: ignore[no-any-return]


def delta(ours: Measurement, theirs: Measurement | None) -> float | None:
    """Largest absolute difference between the two results (``None`` without TransformerLens)."""
    return None if theirs is None else float(np.abs(np.asarray(ours.result) - np.asarray(theirs.result)).max())


def run_shape(key: str, use_tl: bool, clock: Clock) -> list[Row]:
    """Every sweep of shape ``key`` (and its induction study), ours against TransformerLens and the floor."""
    shape = SHAPES[key]
    print(f"{shape.name}: building", file=sys.stderr, flush=True)
    device = clock.device
    hf = build(shape, device)
    ours = cw.from_hf(hf)
    bridge = bridge_of(hf, device) if use_tl else None
    counts = Counts.of(hf)
    gen = torch.Generator().manual_seed(0)
    B, P, L, H = shape.batch, shape.n_pos, shape.layers, shape.heads
    clean = torch.randint(1, shape.vocab, (B, P), generator=gen)
    corrupted = clean.clone()
    corrupted[:, P // 2] = torch.randint(1, shape.vocab, (B,), generator=gen)
    correct, wrong = clean[:, -1], torch.full((B,), 17)
    metric = causal.logit_diff(correct.tolist(), wrong.tolist())
    clean, corrupted, correct, wrong = (t.to(device) for t in (clean, corrupted, correct, wrong))
    warm_up(ours, bridge, clean, clock)
    rate = layer_rate(hf, clock, B * P, P, counts)
    rows: list[Row] = []
    for site, by in shape.sweeps:
        if ONLY and site not in ONLY:
            continue
        floor = rate.seconds(
            floor_flops(hf, counts, starts_of(site, by, L, H, P), B, P, 1) + base_run_flops(hf, counts, B, P, 1)
        )
        mine = measure(clock, lambda s=site, b=by: causal.patch(ours, clean, corrupted, metric, site=s, by=b).values,
                       f"ours {site} {by}")  # fmt: skip
        theirs = None
        if bridge is not None:
            fn = TL_FUNCTIONS[(site, by)]
            theirs = measure(
                clock, lambda f=fn: tl_sweep(bridge, f, clean, corrupted, tl_metric(correct, wrong)), f"TL {fn}"
            )
        sweep = f"`{site}` by {' × '.join(by)}"
        rows.append(Row(shape.name, sweep, mine, floor, theirs, delta(mine, theirs), shape.goal(site)))
        gc.collect()
    if shape.induction and (not ONLY or "induction" in ONLY):
        rows += induction_rows(shape, hf, ours, bridge, counts, rate, clock)
    return rows


def warm_up(ours: Any, bridge: Any, tokens: torch.Tensor, clock: Clock) -> None:
    """One forward of each model, untimed (kernels, allocator and, on CUDA, the libraries' handles)."""
    with torch.no_grad():
        clock.once(lambda: ours(tokens))
        if bridge is not None:
            clock.once(lambda: bridge(tokens))


def induction_rows(
    shape: Shape, hf: Any, ours: Any, bridge: Any, counts: Counts, rate: Rate, clock: Clock
) -> list[Row]:
    """The induction study: repeated random tokens, ``z`` by layer × head, a Python-function metric over 49 positions."""
    tokens, corrupted = induction_prompts(shape, clock.device)
    mean_log_prob = next_token_log_prob(tokens)  # the user's function: 49 positions, all ids
    L, H = shape.layers, shape.heads
    starts = starts_of("z", ("layer", "head"), L, H, 50)
    flops = floor_flops(hf, counts, starts, shape.batch, 50, 49, shape.vocab)
    floor = rate.seconds(flops + base_run_flops(hf, counts, shape.batch, 50, 49, shape.vocab))
    plain = measure(
        clock, lambda: causal.patch(ours, tokens, corrupted, mean_log_prob, site="z", by=("layer", "head")).values,
        "ours induction, function",
    )  # fmt: skip
    declared = measure(
        clock, lambda: -causal.patch(ours, tokens, corrupted, causal.loss(tokens), site="z", by=("layer", "head")).values,
        "ours induction, declared",
    )  # fmt: skip
    theirs = None
    if bridge is not None:
        theirs = measure(
            clock, lambda: tl_sweep(bridge, "get_act_patch_attn_head_out_all_pos", tokens, corrupted, mean_log_prob),
            "TL induction",
        )  # fmt: skip
    name = shape.name.split(" ")[0] + " (8 × 50, induction)"
    text = "≥ 3× faster than hand-written TL hooks"
    return [
        Row(name, "`z` by layer × head, Python-function metric over 49 positions", plain, floor, theirs,
            delta(plain, theirs), 3.0, text),
        Row(name, "the same, metric declared (`causal.loss`)", declared, floor, theirs, delta(declared, theirs), 3.0, text),
    ]  # fmt: skip


def forward_rows(use_tl: bool, keys: list[str], clock: Clock) -> list[Row]:
    """A plain forward over 200 × 64 tokens at each of ``keys``' shapes, against TransformerLens's."""
    rows = []
    for key in keys:
        shape = SHAPES[key]
        hf = build(shape, clock.device)
        ours = cw.from_hf(hf)
        bridge = bridge_of(hf, clock.device) if use_tl else None
        tokens = torch.randint(1, shape.vocab, (200, 64)).to(clock.device)
        warm_up(ours, bridge, tokens[:8], clock)
        with torch.no_grad():
            mine = measure(clock, lambda m=ours, t=tokens: m(t), f"ours forward {key}")
            theirs = None if bridge is None else measure(clock, lambda b=bridge, t=tokens: b(t), f"TL forward {key}")
        diff = None if theirs is None else float((mine.result - theirs.result).abs().max())
        mine.result = None  # the logits (200 × 64 × V) are not kept
        if theirs is not None:
            theirs.result = None
        counts = Counts.of(hf)
        flops = 200 * shape.layers * sum(counts.kv + counts.rest + counts.per_key * (t + 1) for t in range(64))
        flops += 200 * 64 * 2 * shape.d_model * shape.vocab
        floor = layer_rate(hf, clock, 200, 64, counts).seconds(flops)
        rows.append(Row(f"{key}, 200 × 64 tokens", "forward pass", mine, floor, theirs, diff, 1.0))
    return rows


def goal_text(row: Row) -> str:
    """The goal as the issue states it."""
    return row.goal_text or (f"≥ {row.goal:g}× faster" if row.goal > 1 else "≥ 1×")


def print_table(rows: list[Row], meta: dict[str, Any]) -> None:
    """The table in markdown, with the run's conditions above it."""
    print(f"\n{meta['device_name']}, {meta['threads']} torch thread(s), float32; clock: {meta['clock']} seconds "
          f"(median of the calls after the first: up to {meta['repeats']}, or more until they took {MIN_SECONDS} s); load before: {meta['load_before']}, after: {meta['load_after']}\n")  # fmt: skip
    print(
        "| shape | sweep | ours | TL 4.3 | TL / ours | goal | met | floor | ours / floor | "
        "ours / floor at its fastest call | max abs Δ | peak extra |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r.ratio()
        tl = "—" if r.tl is None else f"{r.tl.seconds:.3f} s" + (" (1 call)" if len(r.tl.cpu) == 1 else "")
        met = "—" if ratio is None else ("yes" if ratio >= r.goal else "**no**")
        d = "—" if r.delta is None else f"{r.delta:.1e}"
        print(
            f"| {r.shape} | {r.sweep} | {r.ours.seconds:.3f} s{' (1 call)' if len(r.ours.cpu) == 1 else ''} | {tl} | {'—' if ratio is None else f'{ratio:.2f}×'} | "
            f"{goal_text(r)} | {met} | {r.floor.seconds:.3f} s | {r.ours.seconds / r.floor.seconds:.2f}× | "
            f"{r.ours.seconds / r.floor.best:.2f}× | {d} | "
            f"{r.ours.peak_bytes / 2**20:,.0f} MB |"
        )


def as_json(rows: list[Row], meta: dict[str, Any]) -> dict[str, Any]:
    """The run as JSON: its conditions and every row with every call's CPU and wall seconds."""

    def m(x: Measurement | None) -> dict[str, Any] | None:
        return None if x is None else {"seconds": x.seconds, "cpu": x.cpu, "wall": x.wall, "peak_bytes": x.peak_bytes}

    return {
        "meta": meta,
        "rows": [
            {
                "shape": r.shape, "sweep": r.sweep, "ours": m(r.ours), "tl": m(r.tl), "ratio": r.ratio(),
                "goal": r.goal, "met": None if r.ratio() is None else bool(r.ratio() >= r.goal),  # type: ignore[operator]
                "floor": r.floor.seconds, "floor_ratio": r.ours.seconds / r.floor.seconds, "floor_goal": FLOOR_GOAL,
                "floor_at_fastest_call": r.floor.best, "floor_ratio_at_fastest_call": r.ours.seconds / r.floor.best,
                "max_abs_delta": r.delta,
            }
            for r in rows
        ],
    }  # fmt: skip


def load() -> str:
    """The 1, 5 and 15-minute load averages."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def device_of(parser: argparse.ArgumentParser, name: str) -> torch.device:
    """``--device`` checked: ``cuda`` only where this torch sees a CUDA device (else a clear error)."""
    if name == "cuda" and not torch.cuda.is_available():
        built = torch.version.cuda or "no CUDA (a CPU-only build)"
        parser.error(f"--device cuda: no CUDA device is available to this torch {torch.__version__} (built with "
                     f"{built}); run with --device cpu, or on a machine with a GPU and a CUDA build of torch")  # fmt: skip
    return torch.device(name)


def versions() -> dict[str, str]:
    """The versions that decide the numbers."""
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("transformers", "transformer-lens", "circuitwidgets"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = "not installed"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="where both libraries run (default cpu)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default torch's choice)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default=None,
                        help="seconds reported: this process's CPU time (default on cpu) or wall time (default on cuda)")  # fmt: skip
    parser.add_argument(
        "--json", default=None, help="write the run here (default benchmarks/results/causal-DEVICE.json)"
    )
    parser.add_argument("--shapes", default="tiny,medium,gpt2", help="comma-separated: tiny, medium, gpt2")
    parser.add_argument("--sweeps", default="", help="only these sites (and 'induction'), comma-separated")
    parser.add_argument("--forward", default="tiny,medium", help="shapes of the forward rows ('' for none)")
    parser.add_argument("--no-tl", action="store_true", help="skip TransformerLens")
    parser.add_argument("--repeats", type=int, default=3, help="most calls per measurement (default 3)")
    parser.add_argument("--budget", type=float, default=10.0,
                        help="seconds (the clock's) after which a measurement stops repeating (default 10)")  # fmt: skip
    parser.add_argument("--first-call", action="store_true", help="instead: the rows users see, Python-function and "
                        "declared metrics, first call in a fresh process and warm median (bench_causal_first_call.py)")  # fmt: skip
    args = parser.parse_args()
    if args.first_call:
        import bench_causal_first_call as first

        shapes = ",".join(k for k in args.shapes.split(",") if k in first.ROWS)
        first.main(["--shapes", shapes, "--sweeps", args.sweeps, "--threads", str(args.threads or 2)]
                   + (["--no-tl"] if args.no_tl else []) + (["--json", args.json] if args.json else []))  # fmt: skip
        return
    device = device_of(parser, args.device)
    keys = [k for k in args.shapes.split(",") if k]
    unknown = sorted(set(keys) - set(SHAPES))
    if unknown:
        parser.error(f"--shapes: expected some of {', '.join(SHAPES)}, got {', '.join(unknown)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    ONLY.update(x for x in args.sweeps.split(",") if x)
    clock = Clock(device, args.clock or ("cpu" if device.type == "cpu" else "wall"), max(1, args.repeats), args.budget)
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    )
    meta: dict[str, Any] = {
        "device": device.type, "device_name": name, "threads": torch.get_num_threads(), "clock": clock.kind,
        "repeats": clock.repeats, "budget": clock.budget, "load_before": load(), "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "versions": versions(),
    }  # fmt: skip
    start, cpu_start = time.perf_counter(), time.process_time()
    rows: list[Row] = []
    for key in keys:
        rows += run_shape(key, not args.no_tl, clock)
    rows += forward_rows(not args.no_tl, [k for k in args.forward.split(",") if k in SHAPES], clock)
    meta["load_after"] = load()
    meta["total_wall_seconds"] = time.perf_counter() - start
    meta["total_cpu_seconds"] = time.process_time() - cpu_start
    print_table(rows, meta)
    print(f"\nwhole run: {meta['total_wall_seconds']:.0f} s wall, {meta['total_cpu_seconds']:.0f} s CPU")
    path = Path(args.json or Path(__file__).parent / "results" / f"causal-{device.type}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(as_json(rows, meta), indent=1) + "\n", encoding="utf-8")
    print(f"written: {path}")


if __name__ == "__main__":
    main()
