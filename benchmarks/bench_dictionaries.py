"""Training speed of our dictionary trainer against SAELens's, on the same activations, width and thread count.

Goal (issue 39): tokens per second of our trainer ≥ SAELens's (CPU, same thread count).

One run:

1. ``rows`` activations of ``gelu-2l``'s residual stream after layer 0 are streamed
   from the model over the standard library (our :class:`ActivationStream`) and
   written to a temporary safetensors file, so both trainers read the same rows;
2. ours: a TopK SAE (width ``--width``, k 32) trained with our step
   (:func:`circuitwidgets.features.objective.sparse_step`, the decoder-gradient
   projection, Adam, the unit-norm decoder), one step per ``--batch`` rows;
3. SAELens (in ``.venv-saelens``, built by ``make .venv-saelens/.installed``): its
   ``TopKTrainingSAE`` with the same width and k, one step as its ``SAETrainer._train_step``
   does (``training_forward_pass``, fired-feature counts, backward, gradient clipping,
   Adam), with dense and with sparse activations (``use_sparse_activations``).

Each side runs in its own process with ``torch.set_num_threads(--threads)``, after one
warm-up step; the figure is rows per second over the timed steps. Not part of CI. Run:
``nice -n 10 .venv/bin/python benchmarks/bench_dictionaries.py`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_SAELENS_SIDE = r"""
import json, sys, time, torch
from safetensors.torch import load_file
from sae_lens.saes.sae import TrainStepInput
from sae_lens.saes.topk_sae import TopKTrainingSAE, TopKTrainingSAEConfig
path, width, batch, threads, sparse = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
torch.set_num_threads(threads)
rows = load_file(path)["x"]
sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=rows.shape[1], d_sae=width, k=32, use_sparse_activations=sparse))
opt = torch.optim.Adam(sae.parameters(), lr=1e-3)
since = torch.zeros(width)
def step(i):
    x = rows[i * batch:(i + 1) * batch]
    out = sae.training_forward_pass(TrainStepInput(sae_in=x, coefficients={}, dead_neuron_mask=since > 10_000,
                                                   n_training_steps=i, is_logging_step=False))
    with torch.no_grad():
        fired = out.feature_acts.bool().float().sum(-2).bool()
        fired = fired.to_dense() if fired.is_sparse else fired
        since.add_(1); since[fired] = 0
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(sae.parameters(), 1.0)
    opt.step(); opt.zero_grad()
step(0)
n = rows.shape[0] // batch
t0 = time.perf_counter()
for i in range(1, n):
    step(i)
print(json.dumps({"rows_per_s": (n - 1) * batch / (time.perf_counter() - t0), "steps": n - 1}))
"""

_OUR_SIDE = r"""
import json, sys, time, torch
from safetensors.torch import load_file
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.features.objective import TrainingDictionary, normalise_decoder, project_decoder_grad, sparse_step
path, width, batch, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
rows = load_file(path)["x"]
d = TrainingDictionary(Dictionary.random("sae", "topk", rows.shape[1], width, layer=0, in_site="resid_post", k=32))
opt = torch.optim.Adam(d.parameters(), lr=1e-3)
since = torch.zeros(width)
def step(i):
    x = rows[i * batch:(i + 1) * batch]
    r = sparse_step(d, x, x, since > 10_000, 128, 1 / 32)
    opt.zero_grad(set_to_none=True)
    r.loss.backward()
    project_decoder_grad(d)
    opt.step()
    normalise_decoder(d)
    since.add_(1); since[r.fired] = 0
step(0)
n = rows.shape[0] // batch
t0 = time.perf_counter()
for i in range(1, n):
    step(i)
print(json.dumps({"rows_per_s": (n - 1) * batch / (time.perf_counter() - t0), "steps": n - 1}))
"""


def _collect(path: Path, rows: int) -> None:
    """Write ``rows`` activations of gelu-2l's resid_post at layer 0 to ``path`` (key ``x``)."""
    import torch
    from safetensors.torch import save_file

    import circuitwidgets as cw
    from circuitwidgets.features.stream import ActivationStream, corpus_tokens

    torch.set_num_threads(1)
    model = cw.load_pretrained("gelu-2l")
    stream = ActivationStream(
        model, [("resid_post", 0)], corpus_tokens(model, ROOT / "runs" / "cache")[0], buffer_rows=rows
    )
    save_file({"x": stream.next(rows // 2)[("resid_post", 0)].contiguous()}, str(path))


def _run(python: str, code: str, *args: object) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([python, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Run both trainers on the same rows and print a table (and JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=65_536, help="activations collected (half are trained on)")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--saelens-python", default=str(ROOT / ".venv-saelens" / "bin" / "python"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.safetensors"
        t0 = time.perf_counter()
        _collect(path, args.rows)
        collect_s = time.perf_counter() - t0
        common = (path, args.width, args.batch, args.threads)
        results = {
            "circuitwidgets (sparse TopK step)": _run(sys.executable, _OUR_SIDE, *common),
            "SAELens TopKTrainingSAE (dense)": _run(args.saelens_python, _SAELENS_SIDE, *common, 0),
            "SAELens TopKTrainingSAE (sparse)": _run(args.saelens_python, _SAELENS_SIDE, *common, 1),
        }
    ours = results["circuitwidgets (sparse TopK step)"]["rows_per_s"]
    print(f"{args.rows // 2:,} rows of gelu-2l resid_post (collected in {collect_s:.0f} s), width {args.width}, "
          f"k 32, batch {args.batch}, {args.threads} thread(s), load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| trainer | rows/s | ours / it |\n|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['rows_per_s']:,.0f} | {ours / r['rows_per_s']:.2f}× |")
    print(json.dumps({"config": vars(args), "results": results}))


if __name__ == "__main__":
    main()
