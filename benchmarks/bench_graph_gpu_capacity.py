"""GPU capacity of attribution graphs: the longest prompt whose graph completes on one device, ours and
circuit-tracer 0.5's, on a Gemma-2-2B-shaped model with random weights and random transcoders.

Shape (``--shape gemma-2-2b``, TransformerLens's gemma-2-2b config): 26 layers, d_model 2,304, 8 heads, 4 key/value
heads, d_head 256, d_mlp 9,216 (gated tanh-GELU), vocabulary 256,000, RMS norms before and after each sublayer,
rotary, soft-caps 50 (attention) and 30 (logits), a 4,096-token window on alternate layers. Transcoders: one
JumpReLU transcoder per layer of circuit-tracer's usual width for it (GemmaScope's 16,384), reading the MLP's
normalised input and writing its output after the output norm (circuit-tracer's ``ln2.hook_normalized`` →
``hook_mlp_out``), encoder entries N(0, 1/d_model) and no encoder bias, so a pre-activation is N(0, 1) and the
threshold ``Φ⁻¹(1 − l0/width)`` makes about ``--l0`` features active per position and layer. Both sides draw the
same tensors from the same seeded generator on the device, in ``--dtype`` (default bfloat16).

Each attempt (one side, one prompt length) runs in its own subprocess, so an out-of-memory error ends only that
attempt: it builds the model and transcoders, resets the peak counter, builds the graph (``--max-feature-nodes``
rows, ``--batch`` per pass, the same for both; the rows live in host memory on both sides, so the GPU peak
depends on the prompt length and the active features, not on the rows computed: a small ``--max-feature-nodes``
keeps the time down), and prints one ``RESULT`` line: seconds, ``torch.cuda.max_memory_allocated`` during the
graph, memory held by the weights, active features. Lengths double from ``--start`` while attempts complete,
then bisect between the longest that completed and the shortest that ran out of memory, until the gap is below
``--resolution`` or the side's share of ``--budget-s`` is spent (an attempt is killed at the end of its side's
share: recorded as a timeout, which stops that side's search). Sides run one after the other, each with half the
budget.

circuit-tracer runs under ``--ctracer-python`` with ``--ctracer-pythonpath`` prepended to ``PYTHONPATH`` (its own
TransformerLens 3 and transformers 4); ours under this interpreter with the repository root on ``PYTHONPATH``
(it needs torch, numpy and tqdm). Prints a plain-text table; ``--out`` writes every attempt as JSON.

On the GPU machine, from the repository root::

    python3 benchmarks/bench_graph_gpu_capacity.py --device cuda --budget-s 240 --out gpu_capacity.json \\
        --ctracer-python python3 --ctracer-pythonpath /tmp/sitect

Here, on the CPU (a smoke test at a tiny shape; peak memory is then the process's resident peak)::

    .venv/bin/python benchmarks/bench_graph_gpu_capacity.py --tiny --device cpu --budget-s 60 \\
        --ctracer-python .venv-peers/ctracer/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]

#: TransformerLens's gemma-2-2b config (``loading_from_pretrained.py``), as HookedTransformerConfig fields.
GEMMA_2_2B: dict[str, Any] = {
    "n_layers": 26, "d_model": 2304, "d_head": 256, "n_heads": 8, "n_key_value_heads": 4, "d_mlp": 9216,
    "d_vocab": 256000, "eps": 1e-6, "act_fn": "gelu_pytorch_tanh", "normalization_type": "RMS",
    "positional_embedding_type": "rotary", "rotary_base": 10000.0, "use_attn_scale": True, "window_size": 4096,
    "use_local_attn": True, "attn_scores_soft_cap": 50.0, "output_logits_soft_cap": 30.0, "gated_mlp": True,
    "final_rms": True, "use_normalization_before_and_after": True,
}  # fmt: skip
#: The same architecture at a size a CPU runs in seconds (``--tiny``).
TINY: dict[str, Any] = {**GEMMA_2_2B, "n_layers": 2, "d_model": 64, "d_head": 16, "n_heads": 4,
                        "n_key_value_heads": 2, "d_mlp": 128, "d_vocab": 512, "window_size": 32}  # fmt: skip
WIDTH, TINY_WIDTH = 16384, 256


def shape(tiny: bool, layers: int | None = None, vocab: int | None = None) -> dict[str, Any]:
    """The model's config (with its per-layer attention kinds: local on even layers, as TransformerLens's);
    ``layers`` and ``vocab`` override its depth and vocabulary (timing a reduced model on a CPU)."""
    cfg = dict(TINY if tiny else GEMMA_2_2B)
    cfg["n_layers"] = layers or cfg["n_layers"]
    cfg["d_vocab"] = vocab or cfg["d_vocab"]
    cfg["attn_types"] = ["global", "local"] * (cfg["n_layers"] // 2) + ["global"] * (cfg["n_layers"] % 2)
    cfg["rotary_dim"] = cfg["d_head"]
    return cfg


def draw(cfg: dict[str, Any], width: int, l0: float, device: str, dtype: torch.dtype) -> dict[str, Any]:
    """Every tensor both sides use, from one seeded generator on ``device`` (the same values on both sides).

    Per layer ``l``: ``W_Q [H, d, dh]``, ``W_K, W_V [G, d, dh]``, ``W_O [H, dh, d]``, ``W_in, W_gate [d, m]``,
    ``W_out [m, d]`` and the transcoder's ``W_enc [d, width]``, ``W_dec [width, d]``, ``b_dec [d]``; norm
    multipliers are 1, biases 0."""
    g = torch.Generator(device=device).manual_seed(0)
    d, H, G, dh, m, V = (cfg[k] for k in ("d_model", "n_heads", "n_key_value_heads", "d_head", "d_mlp", "d_vocab"))

    def r(*dims: int, std: float) -> torch.Tensor:
        return (torch.randn(*dims, generator=g, device=device, dtype=torch.float32) * std).to(dtype)

    layers = []
    for _ in range(cfg["n_layers"]):
        layers.append(
            {
                "W_Q": r(H, d, dh, std=d**-0.5), "W_K": r(G, d, dh, std=d**-0.5), "W_V": r(G, d, dh, std=d**-0.5),
                "W_O": r(H, dh, d, std=(H * dh) ** -0.5), "W_in": r(d, m, std=d**-0.5),
                "W_gate": r(d, m, std=d**-0.5), "W_out": r(m, d, std=m**-0.5), "W_enc": r(d, width, std=d**-0.5),
                "W_dec": r(width, d, std=d**-0.5), "b_dec": r(d, std=0.01),
            }
        )  # fmt: skip
    threshold = float(torch.special.ndtri(torch.tensor(1 - l0 / width, dtype=torch.float64)))
    return {"W_E": r(V, d, std=1.0), "W_U": r(d, V, std=d**-0.5), "layers": layers, "threshold": threshold}


class Transcoder:
    """A JumpReLU transcoder with the attributes our attribution graphs read (``TranscoderLike``)."""

    def __init__(self, layer: int, t: dict[str, torch.Tensor], threshold: float) -> None:
        self.layer, self.in_site, self.out_site = layer, "mlp_in", "mlp_out"
        self.W_enc, self.W_dec, self.b_dec = t["W_enc"], t["W_dec"], t["b_dec"]
        self.b_enc = torch.zeros(t["W_enc"].shape[1], dtype=t["W_enc"].dtype, device=t["W_enc"].device)
        self.W_skip: torch.Tensor | None = None
        self.threshold = threshold

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Activations: pre-activations above the threshold, zero elsewhere."""
        pre = x @ self.W_enc + self.b_enc
        return pre * (pre > self.threshold)


def tokens_of(length: int, vocab: int, device: str) -> torch.Tensor:
    """BOS (0) then random tokens, the same for both sides."""
    g = torch.Generator().manual_seed(1)
    return torch.cat([torch.zeros(1, dtype=torch.long), torch.randint(1, vocab, (length - 1,), generator=g)]).to(device)


def build_ours(cfg: dict[str, Any], t: dict[str, Any], length: int, dtype: torch.dtype) -> tuple[Any, list[Any]]:
    """Our model (norm multipliers 1: nothing to fold) and transcoders."""
    from circuitwidgets.model import CircuitModel, ModelConfig

    def stack(name: str) -> torch.Tensor:
        return torch.stack([layer.pop(name) for layer in t["layers"]])

    ones = torch.ones(cfg["n_layers"], cfg["d_model"], dtype=dtype, device=t["W_E"].device)
    weights = {"W_E": t["W_E"], "W_U": t["W_U"], "post_attn_norm": ones, "post_mlp_norm": ones.clone()}
    weights |= {name: stack(name) for name in ("W_Q", "W_K", "W_V", "W_O", "W_in", "W_gate", "W_out")}
    model_cfg = ModelConfig(
        cfg["n_layers"], cfg["n_heads"], cfg["d_model"], cfg["d_head"], cfg["d_vocab"], max(8192, length),
        positional_embedding_type="rotary", normalization="rms_pre", has_mlp=True, d_mlp=cfg["d_mlp"],
        act_fn="gelu_tanh", bos_token_id=0, rotary_dim=cfg["rotary_dim"], rotary_base=cfg["rotary_base"],
        n_kv_heads=cfg["n_key_value_heads"], post_norm=True, gated_mlp=True, ln_eps=cfg["eps"],
        attn_softcap=cfg["attn_scores_soft_cap"], final_softcap=cfg["output_logits_soft_cap"],
        sliding_windows=tuple(cfg["window_size"] if a == "local" else None for a in cfg["attn_types"]),
    )  # fmt: skip
    model = CircuitModel(model_cfg, weights, name="gemma-2-2b-shaped-random")
    return model, [Transcoder(layer, lt, t["threshold"]) for layer, lt in enumerate(t["layers"])]


def run_ours(cfg: dict[str, Any], t: dict[str, Any], args: argparse.Namespace, dtype: torch.dtype) -> dict[str, Any]:
    """Build our graph; the active feature count."""
    from circuitwidgets.graphs.attribution import attribution_matrix

    model, tcs = build_ours(cfg, t, args.length, dtype)
    t.clear()
    start_memory = _reset_peak(args.device)
    tokens = tokens_of(args.length, cfg["d_vocab"], args.device)
    start = time.perf_counter()
    dense = attribution_matrix(model, tcs, tokens, max_feature_nodes=args.max_feature_nodes, batch=args.batch)
    return {"seconds": time.perf_counter() - start, "weights_gb": start_memory, "active": dense.n_active}


def run_ctracer(cfg: dict[str, Any], t: dict[str, Any], args: argparse.Namespace, dtype: torch.dtype) -> dict[str, Any]:
    """Build circuit-tracer's graph on a TransformerLens model holding the same tensors."""
    from circuit_tracer import attribute  # type: ignore[import-not-found]
    from circuit_tracer.replacement_model.replacement_model_transformerlens import (  # type: ignore[import-not-found]
        TransformerLensReplacementModel,
    )
    from circuit_tracer.transcoder.activation_functions import JumpReLU  # type: ignore[import-not-found]
    from circuit_tracer.transcoder.single_layer_transcoder import (  # type: ignore[import-not-found]
        SingleLayerTranscoder,
        TranscoderSet,
    )
    from transformer_lens import HookedTransformerConfig

    device = torch.device(args.device)
    tcs = {}
    for layer, lt in enumerate(t["layers"]):
        width = lt["W_enc"].shape[1]
        act = JumpReLU(torch.full((width,), t["threshold"], dtype=dtype, device=device), 0.1)
        with torch.device("meta"):
            tc = SingleLayerTranscoder(cfg["d_model"], width, act, layer)
        state = {"W_enc": lt.pop("W_enc").T.contiguous(), "W_dec": lt.pop("W_dec"), "b_dec": lt.pop("b_dec"),
                 "b_enc": torch.zeros(width, dtype=dtype, device=device), "activation_function.threshold": act.threshold}  # fmt: skip
        tc.load_state_dict(state, assign=True)
        tcs[layer] = tc
    tset = TranscoderSet(tcs, feature_input_hook="ln2.hook_normalized", feature_output_hook="hook_mlp_out")
    fields = {k: v for k, v in cfg.items() if k not in ("rotary_dim",)}
    tl_cfg = HookedTransformerConfig(**fields, rotary_dim=cfg["rotary_dim"], n_ctx=max(8192, args.length),
                                     device=args.device, dtype=dtype, init_weights=False, tokenizer_prepends_bos=False)  # fmt: skip
    model = TransformerLensReplacementModel.from_config(tl_cfg, tset, tokenizer=_tokenizer(cfg["d_vocab"]))
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, p in params.items():
            if name.startswith("transcoders"):
                continue
            if name.endswith(".w"):
                p.fill_(1.0)
            elif name.split(".")[-1].lstrip("_").startswith("b_"):
                p.zero_()
        params["embed.W_E"].copy_(t.pop("W_E"))
        params["unembed.old_unembed.W_U"].copy_(t.pop("W_U"))
        for layer, lt in enumerate(t["layers"]):
            for ours, theirs in (("W_Q", "attn.W_Q"), ("W_K", "attn._W_K"), ("W_V", "attn._W_V"), ("W_O", "attn.W_O"),
                                 ("W_in", "mlp.old_mlp.W_in"), ("W_gate", "mlp.old_mlp.W_gate"),
                                 ("W_out", "mlp.old_mlp.W_out")):  # fmt: skip
                params[f"blocks.{layer}.{theirs}"].copy_(lt.pop(ours))
    t.clear()
    start_memory = _reset_peak(args.device)
    tokens = tokens_of(args.length, cfg["d_vocab"], args.device)
    start = time.perf_counter()
    graph = attribute(tokens, model, max_feature_nodes=args.max_feature_nodes, batch_size=args.batch)
    return {"seconds": time.perf_counter() - start, "weights_gb": start_memory,
            "active": int(graph.active_features.shape[0])}  # fmt: skip


def _tokenizer(vocab: int) -> Any:
    """A word-level tokenizer over ``vocab`` ids (circuit-tracer decodes its logit targets with one)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    words = {"<bos>": 0, **{f"t{i}": i for i in range(1, vocab)}}
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=Tokenizer(WordLevel(words, unk_token="t1")), bos_token="<bos>",
                                   unk_token="t1", pad_token="<bos>", name_or_path="random",
                                   add_bos_token=True)  # fmt: skip


def _reset_peak(device: str) -> float:
    """Reset the device's peak counter; the GB allocated now (the weights)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated() / 2**30
    return 0.0


def _peak_gb(device: str) -> float:
    """Peak GB since the reset: the device's allocator, or the process's resident peak on a CPU."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def attempt(args: argparse.Namespace) -> None:
    """One side at one length (in this subprocess): print ``RESULT {json}``."""
    dtype = getattr(torch, args.dtype)
    cfg = shape(args.tiny, args.layers, args.vocab)
    out: dict[str, Any] = {"side": args.attempt, "length": args.length}
    try:
        t = draw(cfg, TINY_WIDTH if args.tiny else args.width, args.l0, args.device, dtype)
        run = run_ours if args.attempt == "ours" else run_ctracer
        out |= {"ok": True, **run(cfg, t, args, dtype)}
    except torch.OutOfMemoryError as error:
        out |= {"ok": False, "error": "out of memory", "detail": str(error).splitlines()[0][:200]}
    out["peak_gb"] = _peak_gb(args.device)
    print("RESULT " + json.dumps(out), flush=True)


def run_attempt(args: argparse.Namespace, side: str, length: int, timeout: float) -> dict[str, Any]:
    """One attempt in its own subprocess, killed after ``timeout`` seconds; its ``RESULT`` or what ended it."""
    python = sys.executable if side == "ours" else args.ctracer_python
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    paths = [str(ROOT)] if side == "ours" else [p for p in (args.ctracer_pythonpath,) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    command = [python, str(Path(__file__).resolve()), "--attempt", side, "--length", str(length)]
    for name in ("device", "dtype", "width", "l0", "max_feature_nodes", "batch", "layers", "vocab"):
        if getattr(args, name) is not None:
            command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    command += ["--tiny"] if args.tiny else []
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(1.0, timeout), env=env)
    except subprocess.TimeoutExpired:
        return {"side": side, "length": length, "ok": None, "error": f"timeout ({timeout:.0f} s)",
                "wall_s": time.perf_counter() - start}  # fmt: skip
    wall = time.perf_counter() - start
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[7:]), "wall_s": wall}
    lines = (done.stderr or done.stdout).strip().splitlines()
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line)]  # the first raised
    tail = errors[:1] or lines[-1:] or [""]
    oom = "out of memory" in done.stderr.lower() or done.returncode in (-9, 137)
    return {"side": side, "length": length, "ok": False if oom else None,
            "error": ("out of memory: " if oom else f"exit {done.returncode}: ") + tail[0][:300], "wall_s": wall}  # fmt: skip


def search(args: argparse.Namespace, side: str, deadline: float) -> list[dict[str, Any]]:
    """Double from ``--start`` while attempts complete, then bisect to ``--resolution``, until ``deadline``."""
    results: list[dict[str, Any]] = []
    good, bad = 0, None
    length = args.start
    while time.perf_counter() < deadline - 1:
        result = run_attempt(args, side, length, deadline - time.perf_counter())
        results.append(result)
        print(_row(result), flush=True)
        if result["ok"] is None:  # timed out or failed for another reason: nothing more to learn here
            break
        if result["ok"]:
            good = length
        else:
            bad = length
        if bad is None:
            if length >= args.max_length:
                break
            length = min(2 * length, args.max_length)
        else:
            if bad - good <= max(args.resolution, 1):
                break
            length = (good + bad) // 2
    return results


def _row(r: dict[str, Any]) -> str:
    status = "ok" if r.get("ok") else r.get("error", "failed")
    peak = f"{r['peak_gb']:.2f}" if "peak_gb" in r else "-"
    weights = f"{r['weights_gb']:.2f}" if "weights_gb" in r else "-"
    seconds = f"{r['seconds']:.1f}" if "seconds" in r else "-"
    active = f"{r['active']:,}" if "active" in r else "-"
    return (f"{r['side']:<8} {r['length']:>7,} {status[:40]:<40} {seconds:>8} {r.get('wall_s', 0):>7.1f} "
            f"{peak:>8} {weights:>8} {active:>11}")  # fmt: skip


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per side: the longest length that completed and the shortest that ran out of memory."""
    out: dict[str, Any] = {}
    for side in ("ours", "ctracer"):
        mine = [r for r in results if r["side"] == side]
        fits = [r["length"] for r in mine if r.get("ok")]
        fails = [r["length"] for r in mine if r.get("ok") is False]
        out[side] = {"longest_completed": max(fits, default=None), "shortest_oom": min(fails, default=None)}
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--tiny", action="store_true", help="the same architecture at a tiny size (a CPU smoke test)")
    p.add_argument("--width", type=int, default=WIDTH, help="transcoder features per layer")
    p.add_argument("--layers", type=int, default=None, help="fewer layers than the shape's (a reduced timing)")
    p.add_argument("--vocab", type=int, default=None, help="a smaller vocabulary than the shape's")
    p.add_argument("--l0", type=float, default=None, help="active features per position and layer (64; 16 tiny)")
    p.add_argument("--max-feature-nodes", type=int, default=256)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--start", type=int, default=None, help="first length (default 1,024; 16 with --tiny)")
    p.add_argument("--max-length", type=int, default=None, help="longest length tried (default 65,536; 128 tiny)")
    p.add_argument("--resolution", type=int, default=None, help="bisect until the gap is this (default start/4)")
    p.add_argument("--budget-s", type=float, default=240.0, help="the whole script's time, both sides")
    p.add_argument("--sides", default="ours,ctracer")
    p.add_argument("--ctracer-python", default=sys.executable)
    p.add_argument("--ctracer-pythonpath", default="")
    p.add_argument("--out", type=Path, default=None, help="write every attempt and the summary as JSON")
    p.add_argument("--attempt", choices=["ours", "ctracer"], help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.l0 = args.l0 or (16.0 if args.tiny else 64.0)
    args.start = args.start or (16 if args.tiny else 1024)
    args.max_length = args.max_length or (128 if args.tiny else 65536)
    args.resolution = args.resolution or max(1, args.start // 4)
    return args


def main(argv: list[str] | None = None) -> int:
    """Search each side's longest length within the budget; print the table, write ``--out``."""
    args = parse(argv)
    if args.attempt:
        attempt(args)
        return 0
    began = time.perf_counter()
    sides = [s for s in args.sides.split(",") if s]
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    print(f"device {args.device} ({device}); {'tiny' if args.tiny else 'gemma-2-2b'} shape, width "
          f"{TINY_WIDTH if args.tiny else args.width}, l0 {args.l0:g}, {args.dtype}, max_feature_nodes "
          f"{args.max_feature_nodes}, batch {args.batch}, budget {args.budget_s:.0f} s", flush=True)  # fmt: skip
    print(f"{'side':<8} {'length':>7} {'status':<40} {'graph_s':>8} {'wall_s':>7} {'peak_gb':>8} {'wts_gb':>8} "
          f"{'active':>11}", flush=True)  # fmt: skip
    results: list[dict[str, Any]] = []
    for i, side in enumerate(sides):
        share = (args.budget_s - (time.perf_counter() - began)) / (len(sides) - i)
        results += search(args, side, time.perf_counter() + share)
    report: dict[str, Any] = {"device": device, "args": {k: str(v) for k, v in vars(args).items()}, "attempts": results,
              "summary": summary(results), "seconds": time.perf_counter() - began}  # fmt: skip
    for side, s in report["summary"].items():
        print(f"{side}: longest completed {s['longest_completed']}, shortest out of memory {s['shortest_oom']}")
    print(f"total {report['seconds']:.1f} s")
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
