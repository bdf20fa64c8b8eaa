"""Peak memory of loading a large dictionary file: ours, SAELens's folder and a circuit-tracer layer file.

Goal (issue 58): loading a 2 GiB dictionary peaks at ≤ 1.2 × its size (it was 3.6 × for ``load_saelens``: the
memory map's pages, a float64 copy and the cast back). The loaders now check the header, then read each tensor
straight into its final buffer (no memory map, no float64 copy; the SAELens ``b_dec`` fold runs a block of
columns at a time).

The benchmark writes, without ever holding it in memory, a float32 SAE of ``d_in × d_sae`` (``W_enc`` and
``W_dec`` each ``d_in · d_sae · 4`` bytes; ``--gib 2`` gives 2 GiB) in the three formats, then loads each in a
fresh process and reports ``peak RSS above the process's level before the call / file bytes`` (sampled every
millisecond by ``benchmarks/_rss.PeakRSS``; the file's pages in the page cache are not this process's memory).
``--code DIR`` loads with another checkout's ``circuitwidgets`` (e.g. ``main``, extracted with ``git archive``)
for the before figure. Run: ``.venv/bin/python benchmarks/bench_dictionary_load.py [--gib 2]`` (about a minute
and 3 × the size of disk; not part of CI).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
import torch
from _rss import PeakRSS
from circuitwidgets import features

kind, path = sys.argv[1], sys.argv[2]
load = {"own": features.load, "saelens": features.load_saelens, "circuit-tracer": features.load_circuit_tracer}[kind]
with PeakRSS() as rss:
    d = load(path)
import circuitwidgets
print(json.dumps({"peak": rss.peak, "d_sae": d.d_sae, "d_in": d.d_in, "code": circuitwidgets.__file__}))
"""


def _write(path: Path, tensors: dict[str, tuple[int, ...]], metadata: dict[str, str], seed: int = 0) -> int:
    """A float32 safetensors file of random tensors, streamed in blocks (never whole in memory); its size."""
    header: dict[str, object] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, shape in tensors.items():
        size = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    rng = np.random.default_rng(seed)
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for shape in tensors.values():
            left = int(np.prod(shape))
            while left:
                n = min(left, 2**24)
                f.write((rng.standard_normal(n, dtype=np.float32) * 0.02).tobytes())
                left -= n
    return path.stat().st_size


def write_all(root: Path, d_in: int, d_sae: int) -> dict[str, tuple[Path, int]]:
    """The same random SAE (transcoder for circuit-tracer) in our format, SAELens's folder and circuit-tracer's."""
    ours = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    config = {"kind": "sae", "activation": "relu", "k": None, "layer": 0, "in_site": "resid_post",
              "out_site": "resid_post", "d_in": d_in, "d_sae": d_sae, "d_out": d_in, "model_name": "bench"}  # fmt: skip
    out = {"own": (root / "own.safetensors", _write(root / "own.safetensors", ours,
                                                    {"circuitwidgets_dictionary": json.dumps(config)}))}  # fmt: skip
    folder = root / "saelens"
    folder.mkdir()
    cfg = {"architecture": "standard", "d_in": d_in, "d_sae": d_sae, "apply_b_dec_to_input": True,
           "normalize_activations": "none", "metadata": {"hook_name": "blocks.0.hook_resid_post"}}  # fmt: skip
    (folder / "cfg.json").write_text(json.dumps(cfg))
    out["saelens"] = (folder, _write(folder / "sae_weights.safetensors", ours, {}))
    ct = {"W_enc": (d_sae, d_in), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
    out["circuit-tracer"] = (root / "layer_0.safetensors", _write(root / "layer_0.safetensors", ct, {}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="size of each file (W_enc + W_dec, float32)")
    parser.add_argument("--d-in", type=int, default=2048)
    parser.add_argument("--code", default=str(ROOT), help="the checkout whose circuitwidgets loads the files")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    d_sae = int(args.gib * 2**30 / (8 * args.d_in))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{args.code}{os.pathsep}{ROOT / 'benchmarks'}"
    results = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        files = write_all(Path(tmp), args.d_in, d_sae)
        for kind, (path, size) in files.items():
            done = subprocess.run(
                [sys.executable, "-c", CHILD, kind, str(path), str(ROOT / "benchmarks")],
                capture_output=True, text=True, env=env, timeout=1800, cwd=tmp,  # (not this checkout: -c puts cwd first)
            )  # fmt: skip
            if done.returncode != 0:
                results[kind] = {"error": done.stderr.strip().splitlines()[-1][:300], "file_bytes": size}
                print(f"{kind:15s} failed: {results[kind]['error']}")
                continue
            child = json.loads(done.stdout.strip().splitlines()[-1])
            peak = child["peak"]
            results[kind] = {"file_bytes": size, "peak_bytes": peak, "ratio": peak / size, "code": child["code"]}
            print(
                f"{kind:15s} file {size / 2**30:.2f} GiB  peak {peak / 2**30:.2f} GiB  = {peak / size:.2f} x "
                f"({child['code']})"
            )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"d_in": args.d_in, "d_sae": d_sae, "code": args.code, **results}, indent=1)
        )


if __name__ == "__main__":
    main()
