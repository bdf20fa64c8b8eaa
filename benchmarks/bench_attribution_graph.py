"""Attribution-graph benchmark: a 64-token graph on ``gelu-2l``, long prompts on a ``gelu-2l``-shaped model,
and circuit-tracer 0.5 on the same shapes and CPU.

Transcoders: ``--transcoders random`` (default until the shipped ones exist) draws TopK transcoders of the
shipped width and k (2,048 features, k = 32, one per layer, reading ``mlp_in``: ``Dictionary.random``, unit
decoder rows, encoder = decoderᵀ); ``--transcoders shipped`` uses ``circuitwidgets.features.load_pretrained``.
Every position but the first then has 32 active features per layer: 64 tokens make 4,032 feature nodes.

``gelu-2l`` has ``n_ctx`` 256, so prompts beyond it (1,024 and 4,096 tokens) run on a model of its shape with
random weights and a longer position table; ``max_feature_nodes`` is circuit-tracer's 7,500 there.

Each setting runs in a fresh subprocess; its peak resident memory (``ru_maxrss``, the whole process: Python,
torch, the model) is reported. ``--ctracer PYTHON`` also times circuit-tracer 0.5 (``scripts/ctracer_reference.py
bench``) on a TransformerLens model of ``gelu-2l``'s shape with random weights and TopK transcoders of the same
width, same token count, same ``max_feature_nodes`` and batch.

Run from the repository root::

    nice -n 10 .venv/bin/python benchmarks/bench_attribution_graph.py                    # 64 tokens on gelu-2l
    nice -n 10 .venv/bin/python benchmarks/bench_attribution_graph.py --tokens 64 1024 4096 --ctracer .venv-peers/ctracer/bin/python

Both run on ``--threads`` (default 1) with ``OMP_NUM_THREADS`` set to match: on a shared machine an idle
OpenMP thread spins and a second one waits for a busy core, which made 2-thread timings meaningless here.
Wall seconds and CPU seconds of the call itself are reported (CPU seconds vary less with the machine's load);
the speed-up is circuit-tracer's over ours, both measured in the same run, one after the other.

Prints a markdown table and, for the issue's targets (:data:`GOAL_64_SECONDS`, :data:`GOAL_SPEED_UP`,
:data:`GOAL_1024_GB`), whether this run met them; ``--check`` exits 1 when one is missed. Not part of the test
suite.

Measured 2026-11-28 on the shared 2-core AMD EPYC machine (23 GB, about 7 people's jobs: load average 21 to 23),
torch 2.13.0+cpu, 1 thread each, random transcoders (``--transcoders random``); seconds of the call itself, CPU
seconds in brackets; circuit-tracer 0.5.0 right after ours in the same run (``--tokens 64 256 512 1024 4096
--ctracer .venv-peers/ctracer/bin/python --ctracer-max-tokens 256 --check``):

| tokens | feature nodes (active) | ours s (CPU s) | ours peak RSS | circuit-tracer s (CPU s) | its peak RSS | speed-up wall (CPU) |
|---|---|---|---|---|---|---|
| 64 | 4,032 (4,032) | 3.6 (1.0) | 0.48 GB | 40.6 (10.9) | 1.55 GB | 11.3× (10.6×) |
| 256 | 7,500 (16,320) | 6.0 (1.6) | 0.70 GB | 196.3 (49.9) | 4.49 GB | 32.8× (30.4×) |
| 512 | 7,500 (32,704) | 8.5 (2.3) | 0.76 GB | not run | | |
| 1,024 | 7,500 (65,472) | 18.0 (4.4) | 0.97 GB | killed by the kernel (SIGKILL), run alone | > 12 GB | |
| 4,096 | 7,500 (262,080) | 112.2 (27.3) | 2.91 GB | not run | | |

circuit-tracer at 1,024 tokens alone (``scripts/ctracer_reference.py bench 1024 256 7500 1``) was killed by the
kernel's out-of-memory killer with about 12 GB available, so it is not run beyond 256 tokens here (at 512 its
memory would not have fitted beside the other jobs). Before this engine (autograd over batch copies), a 64-token
run gave ours 19.2 s (6.0 CPU s) against circuit-tracer's 33.9 s (9.7 CPU s), load 13.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _load_gelu_2l():
    """The shipped gelu-2l (numbered tokens where the ``tokenizers`` package is absent, e.g. a bare GPU box)."""
    import circuitwidgets as cw

    try:
        return cw.load_pretrained("gelu-2l")
    except ImportError:
        from safetensors.torch import load_file

        from circuitwidgets.model import CircuitModel, ModelConfig

        where = ROOT / "circuitwidgets" / "pretrained" / "gelu-2l"
        spec = json.loads((where / "config.json").read_text())
        cfg = ModelConfig(**{k: v for k, v in spec.items() if k in ModelConfig.__dataclass_fields__})
        weights = {k: v.float() for k, v in load_file(str(where / "model.safetensors")).items()}
        return CircuitModel(cfg, weights, name="gelu-2l")


def _model(n_tokens: int):
    from circuitwidgets.model import CircuitModel

    model = _load_gelu_2l()
    if n_tokens <= model.cfg.n_ctx:
        return model
    import dataclasses

    g = torch.Generator().manual_seed(0)
    cfg = dataclasses.replace(model.cfg, n_ctx=n_tokens)
    weights = dict(model.weights())
    weights["W_pos"] = torch.randn(n_tokens, cfg.d_model, generator=g) * float(weights["W_pos"].std())
    return CircuitModel(cfg, weights, tokenizer=model.tokenizer, name=f"gelu-2l shape, n_ctx {n_tokens}")


def _transcoders(model, kind: str):
    if kind.startswith("shipped"):
        from circuitwidgets.features import load_pretrained

        # one transcoder per layer: layer 0 ships a plain and a skip-transcoder, and a graph takes one of them
        found = load_pretrained("gelu-2l")
        return [found["L0.stc" if kind == "shipped-skip" else "L0.tc"], found["L1.tc"]]
    from circuitwidgets.features.dictionary import Dictionary

    return [
        Dictionary.random("transcoder", "topk", model.cfg.d_model, 2048, layer=layer, k=32, seed=layer)
        for layer in range(model.cfg.n_layers)
    ]


def one(n_tokens: int, kind: str, batch: int, max_nodes: int, device: str, threads: int) -> dict[str, object]:
    """Build one graph in this process; wall and CPU seconds and the peak resident memory."""
    from circuitwidgets.graphs.attribution import attribution_graph

    torch.set_num_threads(threads)
    model = _model(n_tokens).to(device)
    tcs = [tc.to(device) for tc in _transcoders(model, kind)]
    g = torch.Generator().manual_seed(1)
    tokens = torch.cat(
        [torch.zeros(1, dtype=torch.long), torch.randint(1, model.cfg.d_vocab, (n_tokens - 1,), generator=g)]
    )
    cpu0, start = time.process_time(), time.perf_counter()
    graph = attribution_graph(model, tcs, tokens.to(device), max_feature_nodes=max_nodes, batch=batch, progress=True)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    gpu_gb = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
    return {
        "tokens": n_tokens, "seconds": seconds, "cpu_seconds": cpu, "threads": threads, "device": device,
        "gpu_peak_gb": gpu_gb, "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "active": graph.extra["n_active_features"], "nodes": len(graph.nodes), "edges": len(graph.edges),
        "scores": graph.scores, "model": model.name, "transcoders": kind, "batch": batch, "max_nodes": max_nodes,
    }  # fmt: skip


def _child_env(extra: dict[str, str], threads: int) -> dict[str, str]:
    """The environment of a measured subprocess: OpenMP capped at ``threads`` (no spinning extra threads)."""
    return {**os.environ, **extra, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def _ours(args: argparse.Namespace, n: int) -> dict[str, object]:
    cmd = [sys.executable, __file__, "--one", str(n), "--transcoders", args.transcoders, "--batch", str(args.batch),
           "--max-feature-nodes", str(args.max_feature_nodes), "--device", args.device,
           "--threads", str(args.threads)]  # fmt: skip
    load = os.getloadavg()[0]
    child = subprocess.run(cmd, capture_output=True, text=True, env=_child_env({"PYTHONPATH": str(ROOT)}, args.threads))
    if child.returncode:
        sys.exit(f"{n} tokens failed:\n{child.stderr[-3000:]}")
    found = json.loads(next(line for line in child.stdout.splitlines() if line.startswith("RESULT "))[7:])
    return {**found, "load": load}


def _theirs(args: argparse.Namespace, n: int) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    cmd = [args.ctracer, str(ROOT / "scripts" / "ctracer_reference.py"), "bench", str(n), str(args.batch),
           str(args.max_feature_nodes), str(args.threads), args.device]  # fmt: skip
    load = os.getloadavg()[0]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=_child_env(env, args.threads),
                              timeout=args.ctracer_timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"timeout": args.ctracer_timeout, "load": load}
    line = next((s for s in done.stdout.splitlines() if s.startswith("RESULT ")), None)
    if line:
        return {**json.loads(line[7:]), "load": load}
    if done.returncode in (-9, 137):  # SIGKILL: on Linux, the kernel's out-of-memory killer
        return {"error": "killed (SIGKILL: out of memory)", "load": load}
    return {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}", "load": load}


def _row(ours: dict, theirs: dict | None) -> str:
    """One markdown row: ours, circuit-tracer's, and the ratios (theirs / ours) of wall and CPU seconds."""
    if theirs is None:
        ct_s = ct_m = ratio = "—"
    elif "seconds" in theirs:
        ct_s = f"{theirs['seconds']:.1f} ({theirs['cpu_seconds']:.1f})"
        ct_gpu = theirs.get("gpu_peak_gb")
        ct_m = f"{theirs['peak_gb']:.2f}" + (f" ({ct_gpu:.2f})" if ct_gpu is not None else "")
        ratio = f"{theirs['seconds'] / ours['seconds']:.1f}× ({theirs['cpu_seconds'] / ours['cpu_seconds']:.1f}×)"
    elif "timeout" in theirs:
        ct_s, ct_m = f"> {theirs['timeout']:.0f} (stopped)", "—"
        ratio = f"> {theirs['timeout'] / ours['seconds']:.1f}×"
    else:
        ct_s, ct_m, ratio = str(theirs.get("error")), "—", "—"
    feats = min(ours["active"], ours["max_nodes"])
    gpu = f" ({ours['gpu_peak_gb']:.2f})" if ours.get("gpu_peak_gb") is not None else ""
    load = f"{ours['load']:.1f}" + (f" / {theirs['load']:.1f}" if theirs else "")
    return (f"| {ours['tokens']} | {ours['model']} | {ours['device']}, {ours['threads']} | {load} | {feats} ({ours['active']}) | "
            f"{ours['seconds']:.1f} ({ours['cpu_seconds']:.1f}) | {ours['peak_gb']:.2f}{gpu} | {ct_s} | {ct_m} | {ratio} |")  # fmt: skip


#: The issue's targets: a 64-token graph within a minute on this CPU, at least twice circuit-tracer's speed on it
#: (CPU seconds, same run), and a 1,024-token graph within 8 GB of peak resident memory.
GOAL_64_SECONDS, GOAL_SPEED_UP, GOAL_1024_GB = 60.0, 2.0, 8.0


def _goals(rows: list[tuple[dict, dict | None]]) -> list[tuple[str, bool]]:
    """Each target measured in this run: ``(what was measured, met)``."""
    found = []
    for ours, theirs in rows:
        if ours["tokens"] == 64:
            found.append((f"64 tokens: {ours['seconds']:.1f} s wall <= {GOAL_64_SECONDS:.0f} s",
                          ours["seconds"] <= GOAL_64_SECONDS))  # fmt: skip
            if theirs and "cpu_seconds" in theirs:
                ratio = theirs["cpu_seconds"] / ours["cpu_seconds"]
                found.append((f"64 tokens: {ratio:.1f}x circuit-tracer's speed (CPU s) >= {GOAL_SPEED_UP:.0f}x",
                              ratio >= GOAL_SPEED_UP))  # fmt: skip
        if ours["tokens"] == 1024:
            found.append((f"1,024 tokens: peak RSS {ours['peak_gb']:.2f} GB <= {GOAL_1024_GB:.0f} GB",
                          ours["peak_gb"] <= GOAL_1024_GB))  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[64])
    parser.add_argument(
        "--transcoders",
        choices=["random", "shipped", "shipped-skip"],
        default="random",
        help="random TopK ones, or the shipped L0.tc + L1.tc (shipped-skip: L0.stc + L1.tc)",
    )
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--max-feature-nodes", type=int, default=7500)
    parser.add_argument("--ctracer", type=str, default=None, help="circuit-tracer 0.5 environment's python")
    parser.add_argument("--ctracer-max-tokens", type=int, default=512, help="longest prompt circuit-tracer runs")
    parser.add_argument("--ctracer-timeout", type=float, default=1800, help="seconds before circuit-tracer is stopped")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--check", action="store_true", help="exit 1 when a measured target is missed")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        result = one(args.one, args.transcoders, args.batch, args.max_feature_nodes, args.device, args.threads)
        print("RESULT " + json.dumps(result))
        return
    rows = []
    for n in args.tokens:
        ours = _ours(args, n)
        theirs = _theirs(args, n) if args.ctracer and n <= args.ctracer_max_tokens else None
        rows.append((ours, theirs))
        print(json.dumps({"ours": ours, "circuit-tracer": theirs}), file=sys.stderr, flush=True)
    print(f"torch {torch.__version__}, {args.threads} thread(s) each, load average (1 min) now {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs\n")  # fmt: skip
    print("| tokens | model | device, threads | load at start (ours / theirs) | feature nodes (active) | ours s (CPU s) "
          "| peak RSS GB (GPU GB) | circuit-tracer s (CPU s) | its peak RSS GB | speed-up wall (CPU) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ours, theirs in rows:
        print(_row(ours, theirs))
    goals = _goals(rows)
    print()
    for what, met in goals:
        print(f"- {'met' if met else 'MISSED'}: {what}")
    if args.check and not all(met for _, met in goals):
        sys.exit(1)


if __name__ == "__main__":
    main()
