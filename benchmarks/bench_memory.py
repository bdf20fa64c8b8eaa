"""Memory benchmark: the engine's V×V operations on a 50K-vocabulary model stay bounded.

A random attention-only model built from a config (GPT-2-small shaped: d_vocab
50257, d_model 768, 12 heads of d_head 64, n_ctx 1024, float32; 1 layer by
default to keep the run short: the V×V work is per head). One dense ``[d_vocab,
d_vocab]`` float32 matrix would be 10.1 GB; none is ever formed. Each operation
runs in a fresh subprocess, which reports

- ``model RSS``: resident memory (``VmRSS``) after imports and building the
  model (its weights are ~0.32 GB);
- ``peak RSS``: the peak resident memory (``VmHWM``) during the operation; the
  peak is reset to the current RSS just before it (``/proc/self/clear_refs``),
  so the model build's transients do not hide it (on systems without that
  file it is the lifetime peak, ``ru_maxrss``);
- ``above model``: the difference, checked against :data:`BOUND_BYTES` (1 GiB).

Operations: top-k entries of one head's full QK circuit (chunked tiles,
running top-k), the diagonal of a full OV circuit, the top-k copying
rate of every head over a ``tokens=`` sample, diagonal positivity over all
tokens, the skip-trigrams of one head (global view, by OV and by QK), the
eigenvalue copying scores, and two refusals that must be cheap (``dense()`` of
a full circuit and ``run_with_cache`` on a batch whose cache would need tens of
GB: both raise :class:`~circuitwidgets.errors.MemoryBudgetError` with the bytes).

Run from the repository root::

    .venv/bin/python benchmarks/bench_memory.py             # 1 layer, about 3 minutes on 2 busy cores
    .venv/bin/python benchmarks/bench_memory.py --layers 12 # full GPT-2-small depth (slower, same bound)

Prints a markdown table. Not part of the test suite (``tests/test_bad_inputs.py``
checks one operation the same way).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

#: The stated bound: extra peak resident memory of one V×V operation above the model's own.
BOUND_BYTES = 2**30

V, H, D, DH, N_CTX = 50257, 12, 768, 64, 1024

#: name → (description, code run after the model is built; ``model`` is in scope)
OPERATIONS: dict[str, tuple[str, str]] = {
    "full_qk top-k": (
        "top-100 entries of head 0.0's full QK circuit [V, V]",
        "from circuitwidgets.circuits import full_qk\nfull_qk(model, 0, 0).topk(100, progress_bar=False)",
    ),
    "full_ov diagonal": (
        "diag(W_E W_OV W_U) of head 0.0 [V]",
        "from circuitwidgets.circuits import full_ov\nfull_ov(model, 0, 0).diagonal()",
    ),
    "copying top-k (tokens=)": (
        "top-5 copying rate of every head over 256 sampled tokens",
        "import torch\nfrom circuitwidgets.circuits import copying_scores\n"
        "ids = torch.randperm(model.cfg.d_vocab, generator=torch.Generator().manual_seed(0))[:256]\n"
        "copying_scores(model, 'ov', 'topk', k=5, tokens=ids, progress_bar=False)",
    ),
    "copying diagonal": (
        "diagonal positivity of every head's full OV circuit over all tokens",
        "from circuitwidgets.circuits import copying_scores\ncopying_scores(model, 'ov', 'diagonal', progress_bar=False)",
    ),
    "copying eigen": (
        "eigenvalue copying score of every head (W_U W_E [d, d] once)",
        "from circuitwidgets.circuits import copying_scores\ncopying_scores(model, 'ov', 'eigen')",
    ),
    "skip_trigrams one head": (
        "top-20 skip-trigrams of head 0.0 (top-k of its full OV circuit, best destination of each source)",
        "from circuitwidgets.circuits import skip_trigrams\nskip_trigrams(model, 0, 0, k=20, by='ov', progress_bar=False)",
    ),
    "dense() refused": (
        "full_ov(...).dense(): refused with the bytes",
        "from circuitwidgets.circuits import full_ov\nfrom circuitwidgets.errors import MemoryBudgetError\n"
        "try:\n    full_ov(model, 0, 0).dense()\n    note = 'formed'\nexcept MemoryBudgetError as exc:\n    note = str(exc)",
    ),
    "run_with_cache refused": (
        "run_with_cache on [64, 1024] tokens keeping everything: refused with the bytes",
        "import torch\nfrom circuitwidgets.errors import MemoryBudgetError\n"
        "try:\n    model.run_with_cache(torch.zeros(64, 1024, dtype=torch.long))\n    note = 'ran'\n"
        "except MemoryBudgetError as exc:\n    note = str(exc)",
    ),
}

_CHILD = """
import json, resource, sys, time
import torch
torch.manual_seed(0)
from circuitwidgets.model import CircuitModel, ModelConfig
V, L, H, D, DH, N_CTX = {V}, {L}, {H}, {D}, {DH}, {N_CTX}
g = torch.Generator().manual_seed(0)
def r(*shape, std=1.0):
    return torch.randn(*shape, generator=g).mul_(std)
weights = {{
    "W_E": r(V, D, std=0.1), "W_pos": r(N_CTX, D, std=0.01),
    "W_Q": r(L, H, D, DH, std=D ** -0.5), "W_K": r(L, H, D, DH, std=D ** -0.5),
    "W_V": r(L, H, D, DH, std=D ** -0.5), "W_O": r(L, H, DH, D, std=(H * DH) ** -0.5),
    "W_U": r(D, V, std=D ** -0.5),
}}
model = CircuitModel(ModelConfig(L, H, D, DH, V, N_CTX), weights, name="gpt2-shaped-random")
model_bytes = sum(t.numel() * t.element_size() for t in weights.values())
del weights
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
base = status("VmRSS")
try:  # reset the peak (VmHWM) to the current RSS, so the build's transients do not hide the operation's
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
note = ""
t0 = time.perf_counter()
{code}
seconds = time.perf_counter() - t0
peak = max(status("VmHWM"), base)
print(json.dumps({{"model_bytes": model_bytes, "base": base, "peak": peak, "seconds": seconds, "note": note}}))
"""


def measure(code: str, layers: int, threads: int) -> dict[str, object]:
    """Run ``code`` after building the model in a fresh interpreter; return its measurements."""
    child = _CHILD.format(V=V, L=layers, H=H, D=D, DH=DH, N_CTX=N_CTX, code=code)
    env_code = (f"import torch; torch.set_num_threads({threads})\n" if threads > 0 else "") + child
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True, cwd=root, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child failed:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=1, help="layers of the GPT-2-shaped model (default 1)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per run (default: torch's)")
    parser.add_argument("--only", nargs="*", default=None, help="names of operations to run (default all)")
    args = parser.parse_args()
    names = [n for n in OPERATIONS if args.only is None or n in args.only]
    print(
        f"d_vocab {V}, {args.layers} layer{'s' if args.layers != 1 else ''} × {H} heads, d_model {D}, d_head {DH}, float32; "
        f"a dense [V, V] float32 would be {V * V * 4 / 1e9:.1f} GB. Bound: peak RSS ≤ model RSS + {BOUND_BYTES / 2**30:.0f} GiB.\n"
    )
    print("| operation | what | seconds | model RSS (GB) | peak RSS (GB) | above model (MB) | within bound | note |")
    print("|---|---|---:|---:|---:|---:|:---:|---|")
    failures = []
    started = time.perf_counter()
    for name in names:
        what, code = OPERATIONS[name]
        m = measure(code, args.layers, args.threads)
        base, peak = int(m["base"]), int(m["peak"])  # type: ignore[call-overload]
        extra = peak - base
        ok = extra <= BOUND_BYTES
        if not ok:
            failures.append(name)
        note = str(m["note"])
        note = (note[:110] + "…") if len(note) > 110 else note
        print(
            f"| {name} | {what} | {float(m['seconds']):.1f} | {base / 1e9:.2f} | {peak / 1e9:.2f} | "  # type: ignore[arg-type]
            f"{extra / 1e6:.0f} | {'yes' if ok else '**NO**'} | {note} |",
            flush=True,
        )
    print(f"\nTotal {time.perf_counter() - started:.0f} s (each row includes a fresh interpreter and model build).")
    if failures:
        raise SystemExit(f"over the bound: {failures}")


if __name__ == "__main__":
    main()
