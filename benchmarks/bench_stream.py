"""Weight-space analyses of a model larger than memory, read from disk without its MLPs.

Goal (issue 20): every weight-space analysis of a Llama-3-8B-shaped model
stored in bfloat16 (32 layers, d_model 4096, 32 query heads, 8 key/value heads,
d_head 128, MLP 14336, vocabulary 128,256, untied: 16 GB of weights) runs with
peak RSS ≤ 6 GB.

The benchmark writes a random checkpoint of that shape to a temporary directory
under /tmp (:func:`benchmarks._random_checkpoint.write_random_checkpoint`: shards
of 2 GiB and their index, as ``save_pretrained`` writes them; deleted at the
end), then in a fresh process:

1. ``from_hf(path, mlp=False)``: the attention, norm and embedding tensors are
   read layer by layer from the memory-mapped shards; the MLPs (11 GB) never;
2. ``copying_scores(model, circuit="ov")``: eigenvalue copying of every head;
3. ``all_composition_scores(model, offset=0)``: Q, K and V for every pair, in one pass;
4. the top 50 entries of one head's full QK circuit ``[V, V]`` (layer 0, head 0,
   offset 0), tiled.

For each step: seconds, and the peak ``VmRSS``, ``RssAnon`` (our own memory)
and ``RssFile`` (mapped file pages, which the kernel can drop) sampled every
2 ms from ``/proc/self/status``; the figure checked against the goal is the
peak ``VmRSS`` over the whole run. Not part of CI. Run:
``nice -n 10 .venv/bin/python benchmarks/bench_stream.py`` (16 GB of disk; on a
2-core machine about 15 minutes). Smaller: ``--layers 8``; some analyses only:
``--steps copying,topk``; an existing checkpoint (kept): ``--checkpoint DIR``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, threading, time
import torch
import circuitwidgets as cw

def status():
    fields = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields

peaks = status()
overall = dict(peaks)
done = False
def sample():
    while not done:
        for key, value in status().items():
            peaks[key] = max(peaks[key], value)
            overall[key] = max(overall[key], value)
        time.sleep(0.002)

thread = threading.Thread(target=sample, daemon=True)
thread.start()
steps = {"imports": {"seconds": 0.0, **{"peak_" + k: v for k, v in status().items()}}}

def step(name, fn):
    for key, value in status().items():
        peaks[key] = value
    t0 = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t0
    steps[name] = {"seconds": round(seconds, 2), **{"peak_" + k: v for k, v in peaks.items()}}
    print(f"{name}: {seconds:.1f} s, peak VmRSS {peaks['VmRSS'] / 2**30:.2f} GiB", file=sys.stderr, flush=True)
    return result

path, wanted = sys.argv[1], sys.argv[2].split(",")
model = step("load from_hf(path, mlp=False)", lambda: cw.from_hf(path, mlp=False))
steps["load from_hf(path, mlp=False)"]["model_bytes"] = sum(t.numel() * t.element_size() for t in model.weights().values())
if "copying" in wanted:
    step("copying_scores(circuit='ov'), every head", lambda: cw.circuits.copying_scores(model, circuit="ov"))
if "composition" in wanted:
    step("all_composition_scores: Q, K and V, every pair", lambda: cw.circuits.all_composition_scores(model, offset=0))
if "topk" in wanted:
    step("top-50 of full_qk(0, 0, offset=0) [V, V]", lambda: cw.circuits.full_qk(model, 0, 0, offset=0).topk(50))
done = True
thread.join()
print(json.dumps({"steps": steps, "overall": {"peak_" + k: v for k, v in overall.items()}}))
"""


def _config(layers: int) -> object:
    import transformers

    return transformers.LlamaConfig(
        vocab_size=128_256,
        hidden_size=4096,
        intermediate_size=14_336,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=131_072,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500_000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        architectures=["LlamaForCausalLM"],
    )


def main() -> None:
    """Write the checkpoint, analyse it in a fresh process, print one JSON line and a summary."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._random_checkpoint import write_random_checkpoint

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--steps", default="copying,composition,topk", help="analyses to run after the load")
    parser.add_argument("--checkpoint", type=Path, help="analyse this existing directory (kept) instead of writing one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="bench_stream_") as tmp:
        path = args.checkpoint or Path(tmp) / "llama3-8b-shape"
        t0 = time.perf_counter()
        if args.checkpoint is None:
            write_random_checkpoint(_config(args.layers), path, torch.bfloat16)
        weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        written = time.perf_counter() - t0
        print(f"{weights / 1e9:.2f} GB of bfloat16 weights (written in {written:.0f} s)", file=sys.stderr, flush=True)
        command = [sys.executable, "-c", CHILD, str(path), args.steps]
        child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    result = json.loads(child.stdout.strip().splitlines()[-1])
    result |= {
        "shape": f"Llama 3 8B shape: {args.layers} layers, d_model 4096, 32/8 heads, d_head 128, MLP 14336, "
        "vocab 128256, untied, bfloat16",
        "weights_bytes": weights,
        "write_s": round(written, 1),
    }
    print(json.dumps(result))
    peak = result["overall"]["peak_VmRSS"]
    print(
        f"{weights / 1e9:.1f} GB checkpoint analysed without its MLPs: peak RSS {peak / 1e9:.2f} GB "
        f"({peak / 2**30:.2f} GiB; goal ≤ 6 GB), of which file-backed at most "
        f"{result['overall']['peak_RssFile'] / 1e9:.2f} GB"
    )
    for name, step in result["steps"].items():
        print(
            f"  {name}: {step['seconds']:.1f} s, peak VmRSS {step['peak_VmRSS'] / 1e9:.2f} GB "
            f"(anon {step['peak_RssAnon'] / 1e9:.2f}, file {step['peak_RssFile'] / 1e9:.2f})"
        )


if __name__ == "__main__":
    main()
