"""What ``bench_causal.py`` shares: the shapes, the models, the floor and a device-aware clock.

Models are random Hugging Face GPT-2 weights built offline (float32, eval, eager attention), read by
``circuitwidgets.from_hf`` and bridged by TransformerLens ``TransformerBridge.boot_transformers`` from the same
object, so both libraries run the same numbers on the same device.
"""

from __future__ import annotations

import gc
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from _rss import PeakRSS  # (not bench_engine's: its import sets an allocator policy that page-faults every tensor)

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach a hub

#: TransformerLens's patching function for each (site, by) it has.
TL_FUNCTIONS = {
    ("resid_pre", ("layer", "pos")): "get_act_patch_resid_pre",
    ("resid_mid", ("layer", "pos")): "get_act_patch_resid_mid",
    ("attn_out", ("layer", "pos")): "get_act_patch_attn_out",
    ("mlp_out", ("layer", "pos")): "get_act_patch_mlp_out",
    ("z", ("layer", "head")): "get_act_patch_attn_head_out_all_pos",
    ("z", ("layer", "pos", "head")): "get_act_patch_attn_head_out_by_pos",
    ("q", ("layer", "head")): "get_act_patch_attn_head_q_all_pos",
    ("k", ("layer", "head")): "get_act_patch_attn_head_k_all_pos",
    ("v", ("layer", "head")): "get_act_patch_attn_head_v_all_pos",
    ("q", ("layer", "pos", "head")): "get_act_patch_attn_head_q_by_pos",
    ("k", ("layer", "pos", "head")): "get_act_patch_attn_head_k_by_pos",
    ("pattern", ("layer", "head")): "get_act_patch_attn_head_pattern_all_pos",
    ("pattern", ("layer", "head", "pos")): "get_act_patch_attn_head_pattern_by_pos",
}


@dataclass(frozen=True)
class Shape:
    """A benchmark shape: the model, the prompts, the sweeps run on it and the issue's goal for each."""

    name: str
    layers: int
    heads: int
    d_model: int
    vocab: int
    batch: int
    n_pos: int
    sweeps: tuple[tuple[str, tuple[str, ...]], ...]
    goals: dict[str, float] = field(default_factory=dict)  # site -> TL / ours goal (default: "*")
    induction: bool = False

    def goal(self, site: str) -> float:
        """The issue's goal for ``site``'s sweep: how many times faster than TransformerLens."""
        return self.goals.get(site, self.goals.get("*", 1.0))


SHAPES = {
    "tiny": Shape("tiny (2L, 4H, d 64, 8 × 20)", 2, 4, 64, 512, 8, 20, tuple(TL_FUNCTIONS), {"*": 3.0}),
    "medium": Shape(
        "medium (4L, 8H, d 256, 8 × 32)", 4, 8, 256, 2048, 8, 32,
        (("z", ("layer", "pos", "head")), ("resid_pre", ("layer", "pos"))), {"*": 4.0}, induction=True,
    ),
    "gpt2": Shape(
        "GPT-2-small (12L, 12H, d 768, V 50,257, 2 × 12)", 12, 12, 768, 50257, 2, 12,
        (("resid_pre", ("layer", "pos")), ("pattern", ("layer", "head")), ("z", ("layer", "head"))),
        {"resid_pre": 8.0, "*": 5.0},
    ),
}  # fmt: skip

#: The issue's bound on every sweep's time over its floor.
FLOOR_GOAL = 1.3


def build(shape: Shape, device: torch.device) -> Any:
    """The random GPT-2-style Hugging Face model of ``shape`` on ``device`` (float32, eval, eager attention)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=shape.vocab, n_positions=64, n_embd=shape.d_model, n_layer=shape.layers, n_head=shape.heads,
        n_inner=4 * shape.d_model, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    model.config._attn_implementation = "eager"
    return model.to(device).eval()


def bridge_of(hf: Any, device: torch.device) -> Any:
    """TransformerLens's bridge over the same Hugging Face object (a word-level tokenizer stands in)."""
    import transformers
    from tokenizers import Tokenizer, models
    from transformer_lens import TransformerBridge

    raw = Tokenizer(models.WordLevel({"w0": 0}, unk_token="w0"))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="w0", unk_token="w0")
    bridge = TransformerBridge.boot_transformers("local-bench", hf_model=hf, tokenizer=tokenizer, device=device)
    return bridge.to(device).eval()


def induction_prompts(shape: Shape, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The induction study's prompts on ``shape``'s vocabulary: ``batch`` random halves of 25 tokens, each repeated
    (clean), and the same second halves after fresh first halves (corrupted), 8 × 50 at the medium shape."""
    gen = torch.Generator().manual_seed(1)
    half = torch.randint(1, shape.vocab, (shape.batch, 25), generator=gen)
    tokens = torch.cat([half, half], dim=1)
    corrupted = torch.cat([torch.randint(1, shape.vocab, (shape.batch, 25), generator=gen), half], dim=1)
    return tokens.to(device), corrupted.to(device)


def next_token_log_prob(tokens: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The study's metric as a user writes it: the mean log-prob of each position's next token (49 positions, every
    id read by the log-softmax)."""

    def mean_log_prob(logits: torch.Tensor) -> torch.Tensor:
        lp = logits[:, :-1].log_softmax(-1)
        return lp.gather(-1, tokens[:, 1:, None])[..., 0].mean()

    return mean_log_prob


# ---------------------------------------------------------------------------------------------------------- clock
#: Seconds of timed calls (after the warm-up) that a quick measurement reaches: the sweeps' rule and the floor's layer's.
MIN_SECONDS = 0.25


def keep_timing(calls: int, timed: float, least: int, most: int) -> bool:
    """Whether to time another call: fewer than ``least`` calls so far, or fewer than ``most`` whose timed seconds are
    still short of :data:`MIN_SECONDS`."""
    return calls < least or (timed < MIN_SECONDS and calls < most)


@dataclass
class Clock:
    """Times calls on ``device``: CUDA work is synchronised before and after; ``kind`` ``cpu`` (this process's CPU
    seconds, which other processes on a shared machine disturb far less than wall time) or ``wall``."""

    device: torch.device
    kind: str
    repeats: int = 3  # most calls per measurement
    budget: float = 10.0  # seconds (the clock's kind) after which a measurement stops repeating

    def sync(self) -> None:
        """Wait for the device's queued work (a no-op on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def once(self, fn: Callable[[], Any]) -> tuple[Any, float, float]:
        """``fn()``'s result, CPU seconds and wall seconds (device work included)."""
        self.sync()
        cpu, wall = time.process_time(), time.perf_counter()
        result = fn()
        self.sync()
        return result, time.process_time() - cpu, time.perf_counter() - wall


@dataclass
class Measurement:
    """Result, the seconds of every call (CPU and wall), the median on the clock's kind, peak extra memory."""

    result: Any
    cpu: list[float]
    wall: list[float]
    seconds: float
    peak_bytes: int


def calls_text(cpu: list[float], wall: list[float]) -> str:
    """Each call's seconds, or for many calls the first and the spread of the rest."""
    if len(cpu) <= 6:
        return f"CPU {', '.join(f'{c:.3f}' for c in cpu)} s; wall {', '.join(f'{w:.3f}' for w in wall)} s"

    def spread(xs: list[float]) -> str:
        rest = xs[1:]
        return f"{xs[0]:.3f} then {len(rest)} calls {min(rest):.4f} / {float(np.median(rest)):.4f} / {max(rest):.4f}"

    return f"CPU {spread(cpu)} s; wall {spread(wall)} s (min / median / max)"


def measure(clock: Clock, fn: Callable[[], Any], label: str) -> Measurement:
    """Call ``fn`` up to ``clock.repeats`` times (fewer once its calls took ``clock.budget`` seconds): the median of the
    calls after the first (a warm-up: kernels, caches, our one-off choice of pass size) or, when one call spent the
    budget, that call. A call that is quick goes on (up to 100 calls) until the calls after the warm-up took
    ``MIN_SECONDS``, the rule the floor's layer is timed by: until 2026-12-02 a sweep of a few milliseconds was the
    median of two calls against a floor timed over 0.25 s of calls, and on a quiet machine those two calls read 2.2×
    a median of thirty (tiny ``q`` by layer × head: 7.3 ms and 5.9 ms against 2.96 ms).

    Peak memory is that of the first call: resident set above the level before it on CPU (sampled every 10 ms),
    ``torch.cuda.max_memory_allocated`` above the allocated bytes before it on CUDA.
    """
    gc.collect()
    cpu: list[float] = []
    wall: list[float] = []
    if clock.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(clock.device)
        before = torch.cuda.memory_allocated(clock.device)
        result, c, w = clock.once(fn)
        peak = torch.cuda.max_memory_allocated(clock.device) - before
    else:
        with PeakRSS(interval=0.01) as rss:
            result, c, w = clock.once(fn)
        peak = rss.peak
    cpu.append(c)
    wall.append(w)
    times = cpu if clock.kind == "cpu" else wall  # the clock's kind: the list the loop appends to
    while sum(times) < clock.budget and keep_timing(len(times), sum(times[1:]), clock.repeats, 100):
        _, c, w = clock.once(fn)
        cpu.append(c)
        wall.append(w)
    seconds = float(np.median(times[1:] if len(times) > 1 else times))  # the first of several calls warms up
    print(f"  {label}: {calls_text(cpu, wall)}", file=sys.stderr, flush=True)
    return Measurement(result, cpu, wall, seconds, peak)


# ---------------------------------------------------------------------------------------------------------- floor
@dataclass(frozen=True)
class Counts:
    """FLOPs per token of one GPT-2-style decoder layer's parts (a multiply-add is 2 FLOPs)."""

    kv: float  # key and value projections
    rest: float  # query and output projections, the MLP
    per_key: float  # scores and mixing, per key attended

    @staticmethod
    def of(hf: Any) -> Counts:
        """The counts of ``hf``'s decoder layer."""
        c = hf.config
        d = c.hidden_size
        inner = getattr(c, "n_inner", None) or getattr(c, "intermediate_size", None) or 4 * d
        gated = 3 if hasattr(c, "intermediate_size") else 2
        return Counts(kv=2 * 2 * d * d, rest=2 * 2 * d * d + 2 * gated * d * inner, per_key=2 * 2 * d)


def floor_flops(
    hf: Any, counts: Counts, starts: dict[int, list[int]], batch: int, n_pos: int, read: int, columns: int = 2
) -> float:
    """The floor's FLOPs: ``starts[l]`` holds each cell of layer ``l``'s first recomputed position; the metric reads
    ``read`` positions and ``columns`` token ids there (bench_causal's docstring)."""
    L = hf.config.num_hidden_layers if hasattr(hf.config, "num_hidden_layers") else hf.config.n_layer
    d = hf.config.hidden_size
    total = 0.0
    for layer, firsts in starts.items():
        for p in firsts:
            for j in range(layer, L):
                tokens = range(p, n_pos)
                if j == L - 1:  # keys and values of the suffix; the rest only where the metric reads
                    total += len(tokens) * counts.kv + read * (counts.rest + counts.per_key * n_pos)
                else:
                    total += sum(counts.kv + counts.rest + counts.per_key * (t + 1) for t in tokens)
            total += read * 2 * d * columns
    return batch * total


def base_run_flops(hf: Any, counts: Counts, batch: int, n_pos: int, read: int, columns: int = 2) -> float:
    """The FLOPs of the two runs every exact patching needs before any cell: the base run, whole, its last layer at
    the metric's ``read`` positions and ``columns`` ids (a cell at layer 0 that starts at position 0), and the source
    run through every layer but the last (the values of the last layer's earliest site, its input)."""
    L = hf.config.num_hidden_layers if hasattr(hf.config, "num_hidden_layers") else hf.config.n_layer
    source = batch * (L - 1) * sum(counts.kv + counts.rest + counts.per_key * (t + 1) for t in range(n_pos))
    return floor_flops(hf, counts, {0: [0]}, batch, n_pos, read, columns) + source


@dataclass(frozen=True)
class Rate:
    """FLOPs per second (the clock's kind) of one Hugging Face decoder layer: at the median of its calls (the
    statistic our sweeps are reported at) and at its fastest call."""

    median: float
    best: float

    def seconds(self, flops: float) -> Floor:
        """The floor of ``flops`` at either rate."""
        return Floor(flops / self.median, flops / self.best)


@dataclass(frozen=True)
class Floor:
    """A floor's seconds at the layer's median rate (the table's) and at its fastest call's."""

    seconds: float
    best: float


def layer_rate(hf: Any, clock: Clock, n: int, n_pos: int, counts: Counts, repeats: int = 5) -> Rate:
    """The rate of one Hugging Face decoder layer on ``n`` sequences of ``n_pos`` tokens over at least ``repeats``
    calls after a warm-up, and more (up to 10,000) until they took :data:`MIN_SECONDS` (a tiny layer's sub-millisecond calls: a
    best of 3 moved the tiny floor by half between two runs on one machine). Until 2026-12-02 at most 100 calls: the
    tiny layer's 0.1 ms calls then stopped at 10 ms of timing, and one run's tiny floor read 6× the run before's
    (0.045 s against 0.007 s for the same sweeps, the sweeps' own times unchanged).

    The table's floor takes the median call, as each sweep's time is the median of its calls: until 2026-12-02 it took
    the fastest, which on a machine whose identical calls spread by ±20% put a typical sweep against the luckiest
    layer call (GPT-2's layer: best 39.5 ms, median 45.9 ms in one measurement). The fastest stays in the JSON."""
    layer = hf.transformer.h[0] if hasattr(hf, "transformer") else hf.model.layers[0]
    x = torch.randn(n, n_pos, hf.config.hidden_size, device=clock.device)
    kwargs: dict[str, Any] = {}
    if not hasattr(hf, "transformer"):
        kwargs["position_embeddings"] = hf.model.rotary_emb(x, torch.arange(n_pos, device=clock.device)[None])
        kwargs["attention_mask"] = torch.full((n_pos, n_pos), -math.inf, device=clock.device).triu(1)[None, None]
    flops = n * sum(counts.kv + counts.rest + counts.per_key * (t + 1) for t in range(n_pos))
    times: list[float] = []
    with torch.no_grad():
        clock.once(lambda: layer(x, **kwargs))
        while keep_timing(len(times), sum(times), repeats, 10_000):
            _, cpu, wall = clock.once(lambda: layer(x, **kwargs))
            times.append(cpu if clock.kind == "cpu" else wall)
    return Rate(flops / float(np.median(times)), flops / min(times))


def starts_of(site: str, by: tuple[str, ...], L: int, H: int, n_pos: int) -> dict[int, list[int]]:
    """Each cell's first position that must be recomputed, by layer."""
    per_pos = "pos" in by
    heads = H if "head" in by else 1
    return {layer: [p for p in range(n_pos) for _ in range(heads)] if per_pos else [0] * heads for layer in range(L)}


@dataclass
class Row:
    """One row of the table."""

    shape: str
    sweep: str
    ours: Measurement
    floor: Floor
    tl: Measurement | None
    delta: float | None
    goal: float
    goal_text: str = ""

    def ratio(self) -> float | None:
        """TransformerLens's seconds over ours."""
        return None if self.tl is None else self.tl.seconds / self.ours.seconds
