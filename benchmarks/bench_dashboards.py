"""Dashboards for every feature of one dictionary over at least 1M tokens of held-out code: time and peak memory.

The dictionary: ``--dictionary NAME``, one of
``circuitwidgets.features.load_pretrained("gelu-2l")`` (by default its
transcoder of layer 1, ``L1.tc``, when shipped, else the first shipped one),
whatever its kind and width; where none is shipped, a randomly initialised
TopK transcoder on layer 1 of ``--width`` features (k = 32), said so in the
output (the pass costs about the same: the encoder runs on every token whatever
its weights). The corpus: held-out code the model never saw, the standard
library's held-out files and then the ``.py`` files of the installed packages
(``site-packages``, never in the training corpus), in rows of 128 tokens each
after a BOS, until ``--tokens``.

Timed: ``features.max_activating`` (one streaming pass: top 16 contexts, a
sample of 8, the histogram, for every feature), the dashboard data (logit
effects, nearby features, quantisation) and writing the offline page; the
page's size. Wall time and the process's CPU time (user + system: the work
done, which a busy shared machine inflates less than the wall time) per step.
Peak memory: the process's peak resident set (``ru_maxrss``), including the
model, the corpus's token ids and Python itself. The load average is printed
before and after: on a shared machine the wall time depends on it.

    nice -n 10 .venv/bin/python benchmarks/bench_dashboards.py --tokens 1048576 --workers 2 --threads 1

Two cores are used as two workers of one thread each (``max_activating(workers=2)``):
on a busy shared machine, one pass with two intra-op threads spends most of its
CPU time with one thread waiting for the other (measured: 4 to 6 times the CPU
time of one thread, for the same work); ``--workers 1 --threads 2`` measures that.
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import runpy
import site
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

import circuitwidgets as cw
from circuitwidgets import features
from circuitwidgets.export import save_html
from circuitwidgets.features.dictionary import Dictionary
from circuitwidgets.training.corpus import load_stdlib_corpus


def held_out_texts() -> Iterator[str]:
    """The standard library's held-out files, then the installed packages' Python files (sorted by path), lazily."""
    yield from load_stdlib_corpus().val
    for root in site.getsitepackages():
        for path in sorted(Path(root).rglob("*.py")):
            try:
                yield path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue


def corpus(model: cw.CircuitModel, n_tokens: int, n_ctx: int = 128) -> torch.Tensor:
    """``[rows, n_ctx]`` held-out tokens, each row after a BOS, at least ``n_tokens`` in all."""
    rows = -(-n_tokens // n_ctx)
    need = rows * (n_ctx - 1)
    pieces: list[np.ndarray] = []  # (int32 pieces: a million ids as Python ints would cost ~36 MB)
    have = 0
    for text in held_out_texts():
        pieces.append(np.asarray(model.tokenizer.encode(text), dtype=np.int32))
        have += len(pieces[-1])
        if have >= need:
            break
    ids = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int32)
    if len(ids) < need:
        sys.exit(f"only {len(ids):,} held-out tokens found, fewer than {need:,}")
    body = torch.from_numpy(ids[:need].astype(np.int64)).view(rows, n_ctx - 1)
    return torch.cat([torch.zeros(rows, 1, dtype=torch.long), body], dim=1)


def dictionary(model: cw.CircuitModel, name: str | None, width: int, random: bool) -> tuple[Dictionary, str]:
    """The shipped dictionary ``name`` (default: ``L1.tc``, else the first shipped), or a random one of ``width``."""
    shipped = (
        features.load_pretrained("gelu-2l") if features.list_pretrained_dictionaries("gelu-2l") and not random else {}
    )
    if name is not None:
        if name not in shipped:
            sys.exit(f"--dictionary: expected one of {sorted(shipped)}, got {name!r}")
        chosen = name
    elif shipped:
        chosen = "L1.tc" if "L1.tc" in shipped else sorted(shipped)[0]
    else:
        d = Dictionary.random("transcoder", "topk", model.cfg.d_model, width, layer=1, k=32, seed=0)
        return d, f"randomly initialised L1 transcoder, {width:,} features, TopK 32"
    d = shipped[chosen]
    return d, f"shipped {chosen}: {d.kind}, {d.activation} k={d.k}, {d.d_sae:,} features"


def open_seconds(path: Path, repeats: int = 3) -> list[float]:
    """Seconds from navigation to the dashboard's first unit drawn (its status), in headless Debian chromium, offline;
    a fresh page each time."""
    from playwright.sync_api import sync_playwright

    browser_cfg = runpy.run_path(str(Path(__file__).resolve().parents[1] / "tests" / "e2e" / "chromium.py"))
    seconds = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(browser_cfg["CHROMIUM"]), args=browser_cfg["CHROMIUM_ARGS"])
        for _ in range(repeats):
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.route("http*://**", lambda route: route.abort())  # offline: nothing may come from the network
            start = time.perf_counter()
            page.goto(path.resolve().as_uri(), wait_until="commit")
            status = page.locator('[data-cw-view="featuredashboard"] [data-cw-status]').first
            page.wait_for_function(
                "el => / selected/.test(el.textContent || '')",
                arg=status.element_handle(timeout=60_000),
                timeout=60_000,
            )
            seconds.append(time.perf_counter() - start)
            page.close()
        browser.close()
    return seconds


def _mark() -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, all threads) and peak resident MiB so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**10  # (KiB on Linux)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2**20)
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    parser.add_argument("--workers", type=int, default=2, help="threads reading batches at once (max_activating)")
    parser.add_argument("--dictionary", default=None, help="a shipped gelu-2l dictionary's name (default L1.tc)")
    parser.add_argument(
        "--width", type=int, default=4096, help="features of the random one (--random, or none shipped)"
    )
    parser.add_argument("--random", action="store_true", help="a random TopK transcoder of --width, not a shipped one")
    parser.add_argument("--batch-size", type=int, default=16, help="rows of 128 tokens per forward pass")
    parser.add_argument(
        "--out", type=Path, default=Path("runs/every-feature.html"), help="the page (default under the ignored runs/)"
    )
    parser.add_argument("--no-open", action="store_true", help="skip timing the page's opening in chromium")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = cw.load_pretrained("gelu-2l")
    d, what = dictionary(model, args.dictionary, args.width, args.random)
    tokens = corpus(model, args.tokens)
    load_before = os.getloadavg()
    print(
        f"{what}; {tokens.numel():,} held-out tokens in {len(tokens):,} rows; {args.workers} workers "
        f"of {args.threads} intra-op thread(s) each; {os.cpu_count()} CPUs"
    )
    units = features.dictionary_features(model, d)
    marks = [_mark()]
    ex = features.max_activating(
        model, tokens, units, k=16, samples=8, batch_size=args.batch_size, workers=args.workers
    )
    marks.append(_mark())
    dash = cw.FeatureDashboard(ex, model, d)
    marks.append(_mark())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_html([dash], args.out)
    marks.append(_mark())
    wall = [b[0] - a[0] for a, b in itertools.pairwise(marks)]
    cpu = [b[1] - a[1] for a, b in itertools.pairwise(marks)]
    steps = [
        f"streaming pass ({tokens.numel() / wall[0]:,.0f} tokens/s)",
        "dashboard data (logit effects, neighbours, quantising)",
        f"offline page ({args.out.stat().st_size / 2**20:.1f} MiB)",
    ]
    print("| step | wall s | CPU s | peak RSS after, MiB |\n|---|---|---|---|")
    print(f"| (before: model, dictionary, corpus loaded) | | | {marks[0][2]:,.0f} |")
    for step, w, c, m in zip(steps, wall, cpu, marks[1:], strict=True):
        print(f"| {step} | {w:.1f} | {c:.1f} | {m[2]:,.0f} |")
    print(f"| **total** | **{sum(wall):.1f}** | **{sum(cpu):.1f}** | **{marks[-1][2]:,.0f}** |")
    peak = marks[-1][2]
    print(f"peak resident memory {peak:,.0f} MiB; dead features (never active): {(ex.n_active == 0).sum():,}")
    print(f"load average (1, 5, 15 min) before {load_before}, after {os.getloadavg()}")
    if not args.no_open:
        opened = open_seconds(args.out)
        print(f"page opened (navigation to the first feature drawn) in {', '.join(f'{s:.2f}' for s in opened)} s")
        print(f"load average (1, 5, 15 min) after opening {os.getloadavg()}")


if __name__ == "__main__":
    main()
