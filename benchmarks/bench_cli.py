"""Command-line start-up: wall time of ``circuitwidgets --help`` and the subcommands' help.

Runs the installed console script (``<venv>/bin/circuitwidgets``, next to the
Python running this file) as a new process, ``--repeat`` times per command
after one warm-up run, and prints a markdown table of the median and range.
The goal of issue 18 is a median ≤ 0.3 s: help imports neither torch nor the
widgets (``tests/test_cli.py`` checks the imports; this script the time).

Run from the repository root::

    .venv/bin/python benchmarks/bench_cli.py
    .venv/bin/python benchmarks/bench_cli.py --repeat 9

Exits non-zero when a median exceeds ``--limit`` (default 0.3 s). Not part of
the test suite.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--help"], ["report", "--help"], ["train", "--help"])


def console_script() -> str:
    here = Path(sys.executable).parent / "circuitwidgets"
    found = str(here) if here.exists() else shutil.which("circuitwidgets")
    if found is None:
        raise SystemExit("no circuitwidgets console script: install the package (make setup)")
    return found


def time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (default: 5)")
    parser.add_argument("--limit", type=float, default=0.3, help="largest acceptable median in seconds (default: 0.3)")
    args = parser.parse_args()
    script = console_script()
    print(f"`{script}`, {args.repeat} runs each after one warm-up\n")
    print("| command | median (s) | min (s) | max (s) |")
    print("|---|---|---|---|")
    slow = []
    for command in COMMANDS:
        argv = [script, *command]
        time_once(argv)
        times = [time_once(argv) for _ in range(args.repeat)]
        median = statistics.median(times)
        print(f"| `circuitwidgets {' '.join(command)}` | {median:.3f} | {min(times):.3f} | {max(times):.3f} |")
        if median > args.limit:
            slow.append(" ".join(command))
    if slow:
        print(f"\nslower than {args.limit} s: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
