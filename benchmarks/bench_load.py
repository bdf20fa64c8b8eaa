"""Peak memory of loading a ``save_pretrained`` directory with ``circuitwidgets.from_hf(path)``.

Goal (issue 21): converting a checkpoint holds at most 1.3 × its weights (in
their stored dtype), so a model that fits in memory once can be analysed.

The benchmark builds a random Llama-3.2-1B-shaped model (hidden 2048, 16
layers, 32 query heads, 8 key/value heads, MLP 8192, vocabulary 128,256, tied
embeddings: 1.24 B parameters) in bfloat16, writes it with ``save_pretrained``,
and then, each in a fresh process:

1. ``baseline``: imports torch, transformers and circuitwidgets and stops;
2. ``load``: runs ``from_hf(path)`` (verify on: the source's logits are taken
   first, then its layers are freed as they are converted).

The figure is ``(peak anonymous memory of load − that of baseline) / bytes of
the safetensors files``, sampled every 2 ms from ``/proc/self/status``
(``RssAnon``). Peak RSS is reported too: it also counts the checkpoint's
memory-mapped file pages, which the kernel can drop (they are the file, not a
copy of it). Run: ``.venv/bin/python benchmarks/bench_load.py``
(about two minutes and 5 GB of disk on a 2-core machine; not part of CI).
Smaller shapes for a quick try: ``--layers 4 --vocab 32000``.
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
import json, resource, sys, threading, time
import torch, transformers
import circuitwidgets

def status():
    fields = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields

peaks = status()
done = False
def sample():
    while not done:
        for key, value in status().items():
            peaks[key] = max(peaks[key], value)
        time.sleep(0.002)

mode, path = sys.argv[1], sys.argv[2]
thread = threading.Thread(target=sample, daemon=True)
thread.start()
t0 = time.perf_counter()
info = {}
if mode == "load":
    model = circuitwidgets.from_hf(path)
    info = {"dtype": str(model.dtype), "n_params": sum(t.numel() for t in model.weights().values())}
info["seconds"] = time.perf_counter() - t0
done = True
thread.join()
info |= {"peak_" + key: value for key, value in peaks.items()}
info["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(info))
"""


def _build(path: Path, layers: int, vocab: int) -> None:
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=131_072,
        tie_word_embeddings=True,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500_000.0,
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )
    torch.set_default_dtype(torch.bfloat16)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(path)


def _child(mode: str, path: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Build, save, and measure; print one JSON line and a sentence."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=128_256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama"
        t0 = time.perf_counter()
        build = subprocess.run(
            [sys.executable, __file__, "--build", str(path), str(args.layers), str(args.vocab)], check=True
        )
        assert build.returncode == 0
        built = time.perf_counter() - t0
        weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        baseline = _child("baseline", path)
        load = _child("load", path)
    above = load["peak_rss"] - baseline["peak_rss"]
    anon = load["peak_RssAnon"] - baseline["peak_RssAnon"]
    result = {
        "shape": f"Llama, hidden 2048, {args.layers} layers, 32/8 heads, vocab {args.vocab}, tied, bfloat16",
        "parameters": load["n_params"],
        "weights_bytes": weights,
        "build_and_save_s": round(built, 1),
        "load_s": round(load["seconds"], 1),
        "dtype": load["dtype"],
        "peak_rss_above_baseline": above,
        "peak_anonymous_above_baseline": anon,
        "peak_file_backed": load["peak_RssFile"],
        "ratio_rss": round(above / weights, 3),
        "ratio_anonymous": round(anon / weights, 3),
    }
    print(json.dumps(result))
    print(
        f"from_hf(path) on {weights / 2**30:.2f} GiB of weights, {load['seconds']:.0f} s: peak anonymous memory "
        f"{anon / 2**30:.2f} GiB above the imports = {anon / weights:.2f} × the weights (goal ≤ 1.3 ×); peak RSS, "
        f"counting the checkpoint's memory-mapped (clean, evictable) file pages, {above / weights:.2f} ×"
    )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--build":
        _build(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
