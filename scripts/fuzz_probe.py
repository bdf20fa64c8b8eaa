"""Issue 58's probe re-run: every bad input of tests/_fuzz_cases.py, classed typed / untyped / silent / hang.

    PYTHONPATH=$PWD .venv/bin/python scripts/fuzz_probe.py [--show untyped,silent,hang]

Prints one row per area and, with ``--show``, each case of the named classes with what it raised.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _fuzz_cases import all_cases, classify


def limit_memory(gib: float) -> None:
    """Cap this process's address space, so that a case that would allocate without bound fails with an
    allocation error instead of drawing on a shared machine's memory (a refusal up front is what is tested)."""
    import resource

    cap = int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", default="untyped,silent,hang", help="classes whose cases to list")
    parser.add_argument("--memory-gib", type=float, default=6.0, help="address-space limit of this process")
    parser.add_argument("--verbose", action="store_true", help="print each case as it runs")
    parser.add_argument("--json", action="store_true", help="print every case's class as one JSON line instead")
    args = parser.parse_args()
    limit_memory(args.memory_gib)
    counts: dict[str, Counter[str]] = {}
    shown: list[str] = []
    rows: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for area, label, call in all_cases(Path(tmp)):
            if args.verbose:
                print(f"... {area}: {label}", file=sys.stderr, flush=True)
            kind, detail = classify(call)
            rows.append({"area": area, "label": label, "class": kind, "detail": detail})
            counts.setdefault(area, Counter())[kind] += 1
            if kind in args.show.split(","):
                shown.append(f"{kind:8s} {area}: {label}: {detail}")
    if args.json:
        print(json.dumps(rows))
        return
    print("| area | tried | typed | untyped | silently wrong or accepted | hang |")
    print("|---|---|---|---|---|---|")
    for area, c in counts.items():
        print(f"| {area} | {sum(c.values())} | {c['typed']} | {c['untyped']} | {c['silent']} | {c['hang']} |")
    total = sum((c for c in counts.values()), Counter())
    print(
        f"| all | {sum(total.values())} | {total['typed']} | {total['untyped']} | {total['silent']} | {total['hang']} |"
    )
    print("\n".join(shown))


if __name__ == "__main__":
    main()
