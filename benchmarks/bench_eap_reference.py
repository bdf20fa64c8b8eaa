"""Edge attribution against the reference implementation, hannamw/EAP-IG, on the same GPT-2-small-shaped weights.

The reference runs as a peer in its own environment (``scripts/eap_ig_reference.py``): it is not on PyPI, and it
needs TransformerLens < 4 (``HookedTransformer``), which ours excludes. So ``make test`` cannot build it and no
test runs it; the float64 re-derivation in ``tests/test_graphs_eap.py`` is CI's check of the definitions, this
benchmark the check against the reference's own code. Build the environment once (torch first, pinned)::

    python3.11 -m venv /work/venvs/eapig
    /work/venvs/eapig/bin/pip install torch==2.13.0
    /work/venvs/eapig/bin/pip install "transformer-lens>=2.15,<4" ./EAP-IG     # a checkout of hannamw/EAP-IG

1. **Scores**: the peer builds a ``HookedTransformer`` from GPT-2-small's config (12 layers, 12 heads, d_model 768,
   d_mlp 3,072, vocabulary 50,257) with random weights in float64 and random prompt pairs, and runs its
   ``attribute`` (``EAP``, ``EAP-IG-inputs``); we load the same state dict (folding the norms as every loader here
   does) and run ``edge_attribution`` (``eap``, ``eap-ig-inputs``) on the same pairs. Every one of the reference's
   edges is matched by name (``input``→``embed``, ``a3.h5``→``L3H5``, ``<k>``→``.k``, ``m3``→``MLP3``) and the
   scores compared. The reference divides by the number of prompts once more than we do (its metric is a batch mean
   and it divides the summed scores by the number of prompts again), so ours = batch size × the reference's; the
   signs are the same (corrupted − clean, EAP-IG's).
2. **Speed and memory**: each implementation in a fresh process of its own (float32, ``--threads`` threads), the
   same weights and ``--time-pairs`` pairs: wall time per 100 pairs and peak resident memory (the process's, and
   above the loaded model).

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/bench_eap_reference.py --peer /work/venvs/eapig/bin/python

Measured (2026-11-28, quiet: load 0.3 before, 1.0 after, nothing else running; one thread each)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_eap_reference.py --time-pairs 20 --threads 1

Scores over all 32,491 edges (8 pairs, float64) agree to a relative 6.1e-15 (eap) and 4.7e-15 (eap-ig-inputs),
same top-20, every sign. Per 100 pairs (20 timed, float32, wall seconds; CPU seconds within 4%): plain EAP, reference
254.4 s, ours 23.2 s (0.09×); EAP-IG inputs, 5 steps, reference 930.6 s, ours 91.8 s (0.10×). Memory, the most each
call added to its process's resident set (``scripts/live_rss.py``, sampled every 5 ms, the same code in both): plain
EAP 3,905 MiB for the reference against 1,338 MiB for ours; EAP-IG 5,815 against 972 MiB; the processes' peaks
4,993 and 6,903 MiB against 3,908 MiB (ours: the weights' loading). Earlier that day, on a loaded machine (CPU
seconds): 258.5 / 21.7 and 938.0 / 97.8 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

# (scripts/live_rss.py: standard library only, so the reference's own script measures memory the same way)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from live_rss import LiveRSS

from circuitwidgets import causal
from circuitwidgets.graphs import edge_attribution
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.sources._convert import RawModel, fold_layer_norms

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "eap_ig_reference.py"
METHODS = {"EAP": "eap", "EAP-IG-inputs": "eap-ig-inputs"}


def load_hooked(out: Path, dtype: torch.dtype) -> CircuitModel:
    """The peer's ``HookedTransformer`` state dict as a :class:`CircuitModel` (norms folded into the readers)."""
    spec = json.loads((out / "scores.json").read_text())["shape"]
    s = {k: v.to(dtype) for k, v in load_file(str(out / "model.safetensors")).items()}
    n_layers = spec["n_layers"]

    def stack(name: str) -> torch.Tensor:
        return torch.stack([s[f"blocks.{layer}.{name}"] for layer in range(n_layers)])

    weights = {"W_E": s["embed.W_E"], "W_pos": s["pos_embed.W_pos"], "W_U": s["unembed.W_U"], "b_U": s["unembed.b_U"]}
    for letter in "QKVO":
        weights[f"W_{letter}"], weights[f"b_{letter}"] = stack(f"attn.W_{letter}"), stack(f"attn.b_{letter}")
    for name in ("W_in", "b_in", "W_out", "b_out"):
        weights[name] = stack(f"mlp.{name}")
    norms = [[(s[f"blocks.{i}.{n}.w"], s[f"blocks.{i}.{n}.b"]) for i in range(n_layers)] for n in ("ln1", "ln2")]
    raw = RawModel(weights, norms[0], norms[1], (s["ln_final.w"], s["ln_final.b"]))
    cfg = ModelConfig(
        n_layers, spec["n_heads"], spec["d_model"], spec["d_head"], spec["d_vocab"], spec["n_ctx"],
        positional_embedding_type="standard", normalization="ln_pre", has_mlp=True, d_mlp=spec["d_mlp"],
        act_fn=spec["act_fn"],
    )  # fmt: skip
    return CircuitModel(cfg, fold_layer_norms(raw), name="gpt2-small-shape-random")


def our_edge(name: str) -> tuple[str, str]:
    """The reference's edge name (``a0.h3->a2.h1<k>``) as our (sender, receiver) labels (``L0H3``, ``L2H1.k``)."""

    def node(x: str) -> str:
        if x == "input":
            return "embed"
        if x.startswith("m"):
            return f"MLP{x[1:]}"
        if x.startswith("a"):
            layer, head = x[1:].split(".h")
            return f"L{layer}H{head}"
        return x  # logits

    sender, receiver = name.split("->")
    qkv = ""
    if receiver.endswith(">"):
        receiver, qkv = receiver[:-3], "." + receiver[-2]
    return node(sender), node(receiver) + qkv


def inputs(out: Path, pairs: int = 0) -> tuple[torch.Tensor, torch.Tensor, object]:
    """The peer's prompt pairs (the first ``pairs``, or all) and their logit-difference metric."""
    data = load_file(str(out / "data.safetensors"))
    if pairs:
        data = {k: v[:pairs] for k, v in data.items()}
    answers = data["answers"]
    return data["clean"], data["corrupted"], causal.logit_diff(answers[:, 0].tolist(), answers[:, 1].tolist())


def compare_scores(out: Path) -> None:
    meta = json.loads((out / "scores.json").read_text())
    model = load_hooked(out, torch.float64)
    clean, corrupted, metric = inputs(out)
    theirs_logits = torch.tensor(meta["logits"], dtype=torch.float64)
    ours_logits = model(clean[:2])[:, -1, :50]
    print(f"same model: largest logit difference {float((ours_logits - theirs_logits).abs().max()):.2e} "
          f"(logits up to {float(theirs_logits.abs().max()):.2f})\n")  # fmt: skip
    print("| method | edges | largest |score| | largest difference | relative | same top-20 | same signs |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for ref_method, method in METHODS.items():
        graph = edge_attribution(model, clean, corrupted, metric, method=method, steps=meta["steps"])  # type: ignore[arg-type]
        pairs = meta["scores"][ref_method]
        theirs = np.array([w for _, w in pairs]) * meta["batch"]  # (the reference's extra division by the batch)
        ours = np.array([graph.edges.weight[graph.edge_index(*our_edge(name))] for name, _ in pairs])
        assert len(pairs) == len(graph.edges), (len(pairs), len(graph.edges))
        scale = float(np.abs(theirs).max())
        diff = float(np.abs(ours - theirs).max())
        top_theirs = {pairs[i][0] for i in np.argsort(-np.abs(theirs))[:20]}
        top_ours = {pairs[i][0] for i in np.argsort(-np.abs(ours))[:20]}
        signs = float(np.mean(np.sign(ours) == np.sign(theirs)))
        print(f"| {method} | {len(pairs)} | {scale:.3e} | {diff:.2e} | {diff / scale:.1e} | "
              f"{len(top_theirs & top_ours)}/20 | {signs:.4f} |")  # fmt: skip


def ours_worker(out: Path, method: str, pairs: int, steps: int, threads: int) -> None:
    """In a fresh process: time ``edge_attribution`` in float32 and print JSON like the peer's ``time``."""
    torch.set_num_threads(threads)
    model = load_hooked(out, torch.float32)
    clean, corrupted, metric = inputs(out, pairs)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with LiveRSS() as live:
        t0, c0 = time.perf_counter(), time.process_time()
        edge_attribution(model, clean, corrupted, metric, method=method, steps=steps)  # type: ignore[arg-type]
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_rss": peak, "rss_before": before, "pairs": int(clean.shape[0]),
                      "live_above": live.above, "threads": torch.get_num_threads()}))  # fmt: skip


def _json_line(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[1]} failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare_speed(out: Path, peer: str, pairs: int, steps: int, threads: int, batch: int) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    ours_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"\n### Time per 100 pairs and peak memory ({pairs} pairs × 16 tokens, float32, {threads} thread(s); "
          f"reference batch {batch}, EAP-IG {steps} steps)\n")  # fmt: skip
    print("| method | reference (s / 100 pairs) | ours (s / 100 pairs) | ours / reference | CPU s: reference, ours, "
          "ratio | reference peak RSS (most added by the call) | ours peak RSS (most added by the call) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for ref_method, method in METHODS.items():
        theirs = _json_line([peer, str(SCRIPT), "time", str(out), ref_method, "--pairs", str(pairs), "--steps",
                             str(steps), "--threads", str(threads), "--batch", str(batch)], env)  # fmt: skip
        ours = _json_line([sys.executable, __file__, "--ours-worker", str(out), method, str(pairs), str(steps),
                           str(threads)], ours_env)  # fmt: skip
        t, o = theirs["seconds"] * 100 / pairs, ours["seconds"] * 100 / pairs

        def mib(r: dict[str, float]) -> str:
            return f"{r['peak_rss'] / 2**20:,.0f} MiB ({r['live_above'] / 2**20:,.0f})"

        ct, co = theirs["cpu_seconds"] * 100 / pairs, ours["cpu_seconds"] * 100 / pairs
        print(f"| {method} | {t:.2f} | {o:.2f} | {o / t:.2f} | {ct:.2f}, {co:.2f}, {co / ct:.2f} | {mib(theirs)} | "
              f"{mib(ours)} |")  # fmt: skip


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ours-worker":
        out, method, pairs, steps, threads = sys.argv[2:7]
        ours_worker(Path(out), method, int(pairs), int(steps), int(threads))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", default="/work/venvs/eapig/bin/python", help="the reference environment's python")
    parser.add_argument("--shape", default="{}", help="JSON overriding GPT-2-small's config entries")
    parser.add_argument("--pairs", type=int, default=8, help="pairs whose scores are compared (float64)")
    parser.add_argument("--batch", type=int, default=4, help="the reference's batch size for the compared scores")
    parser.add_argument("--time-pairs", type=int, default=100)
    parser.add_argument("--time-batch", type=int, default=25, help="the reference's batch size when timed")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"load average before: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        n = max(args.pairs, args.time_pairs)
        build = [args.peer, str(SCRIPT), "build", tmp, "--shape", args.shape, "--pairs", str(args.pairs), "--batch",
                 str(args.batch), "--steps", str(args.steps)]  # fmt: skip
        done = subprocess.run(build, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the reference failed:\n{done.stderr[-3000:]}")
        print(f"\n### Scores against hannamw/EAP-IG ({args.pairs} pairs × 16 tokens, float64, batch {args.batch}, "
              f"EAP-IG {args.steps} steps)\n")  # fmt: skip
        compare_scores(out)
        if not args.skip_speed:
            if n > args.pairs:  # more pairs for timing, drawn as the first ones were
                subprocess.run([args.peer, str(SCRIPT), "pairs", tmp, "--pairs", str(n)], check=True, env=env)
            compare_speed(out, args.peer, args.time_pairs, args.steps, args.threads, args.time_batch)
    print(f"\nload average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
