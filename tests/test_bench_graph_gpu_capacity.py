"""The GPU capacity benchmark (``benchmarks/bench_graph_gpu_capacity.py``): its search, and its tiny CPU path.

The search (doubling, then bisecting between the longest length that completed and the shortest that ran out of
memory, stopping at a timeout) is checked with a stand-in for the attempts. The tiny path runs the real script on
the CPU, both sides (circuit-tracer 0.5 in its environment, as ``test_graphs_circuit_tracer.py``), in float32:
the two sides must find the same active features, so they hold the same model and transcoders.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _ctracer import NEEDS_CTRACER
from _ctracer import PYTHON as PYTHON

ROOT = Path(__file__).resolve().parents[1]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_graph_gpu_capacity", ROOT / "benchmarks" / "bench_graph_gpu_capacity.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_search_doubles_then_bisects(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    asked: list[int] = []

    def fake(args: Any, side: str, length: int, timeout: float) -> dict[str, Any]:
        asked.append(length)
        ok = length <= 3000
        return {"side": side, "length": length, "ok": ok, "peak_gb": length / 100, **({} if ok else {"error": "oom"})}

    monkeypatch.setattr(bench, "run_attempt", fake)
    args = bench.parse(["--start", "1024", "--resolution", "128"])
    results = bench.search(args, "ours", deadline=float("inf"))
    assert asked == [1024, 2048, 4096, 3072, 2560, 2816, 2944]
    assert bench.summary(results)["ours"] == {"longest_completed": 2944, "shortest_oom": 3072}
    printed = capsys.readouterr().out.splitlines()  # one table row per attempt, as it ends
    assert len(printed) == 7 and printed[2].split()[:3] == ["ours", "4,096", "oom"]


def test_search_stops_at_a_timeout_and_at_the_longest_length(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    asked: list[int] = []

    def slow(args: Any, side: str, length: int, timeout: float) -> dict[str, Any]:
        asked.append(length)
        return {"side": side, "length": length, "ok": None if length > 32 else True, "error": "timeout (1 s)"}

    monkeypatch.setattr(bench, "run_attempt", slow)
    bench.search(bench.parse(["--tiny"]), "ctracer", deadline=float("inf"))
    assert asked == [16, 32, 64]
    asked.clear()

    def fast(args: Any, side: str, length: int, timeout: float) -> dict[str, Any]:
        asked.append(length)
        return {"side": side, "length": length, "ok": True}

    monkeypatch.setattr(bench, "run_attempt", fast)
    bench.search(bench.parse(["--tiny", "--max-length", "48"]), "ours", deadline=float("inf"))
    assert asked == [16, 32, 48]


@pytest.mark.slow
@NEEDS_CTRACER
def test_tiny_path_on_the_cpu(tmp_path: Path) -> None:
    bench = _bench()
    out = tmp_path / "capacity.json"
    argv = ["--tiny", "--device", "cpu", "--dtype", "float32", "--budget-s", "300", "--start", "24",
            "--max-length", "24", "--ctracer-python", str(PYTHON), "--out", str(out)]  # fmt: skip
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    attempts = report["attempts"]
    assert [(a["side"], a["length"], a["ok"]) for a in attempts] == [("ours", 24, True), ("ctracer", 24, True)]
    ours, theirs = attempts
    assert ours["active"] == theirs["active"] > 0  # the same model and transcoders on both sides
    assert ours["peak_gb"] > 0 and theirs["peak_gb"] > 0 and ours["seconds"] > 0
    assert report["summary"] == {
        "ours": {"longest_completed": 24, "shortest_oom": None},
        "ctracer": {"longest_completed": 24, "shortest_oom": None},
    }


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
