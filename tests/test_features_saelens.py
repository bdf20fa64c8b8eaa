"""Against SAELens itself: files both ways and every evaluation number (tests/saelens_crosscheck.py, run in .venv-saelens).

``make test`` builds ``.venv-saelens`` (``make .venv-saelens/.installed``: torch 2.13.0, then sae-lens), so CI
runs this; ``CW_SAELENS_PYTHON`` points at another interpreter with ``sae_lens``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(os.environ.get("CW_SAELENS_PYTHON", ROOT / ".venv-saelens" / "bin" / "python"))


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    if not PYTHON.exists():
        pytest.skip(f"no sae_lens environment at {PYTHON}: `make .venv-saelens/.installed` builds it (make test does)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [str(PYTHON), str(ROOT / "tests" / "saelens_crosscheck.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=1), file=sys.stderr)
    return result


@pytest.mark.slow
def test_files_load_both_ways_with_the_same_maps(report: dict[str, object]) -> None:
    files = report["files"]
    assert isinstance(files, dict) and len(files) == 24
    for name, difference in files.items():
        assert difference < 1e-12, name


@pytest.mark.slow
def test_every_evaluation_number_agrees_with_saelens(report: dict[str, object]) -> None:
    evals = report["evals"]
    assert isinstance(evals, dict) and len(evals) == 14
    for name, pair in evals.items():
        assert pair["ours"] == pytest.approx(pair["saelens"], rel=1e-10, abs=1e-12), name
