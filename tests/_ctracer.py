"""circuit-tracer 0.5's environment for the cross-checks: where it is, the marks that skip a test without it, and
one way to run scripts/ctracer_reference.py in it (its own interpreter, none of our environment's paths)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = Path(os.environ.get("CW_CTRACER_PYTHON", ROOT / ".venv-peers" / "ctracer" / "bin" / "python"))
SCRIPT = ROOT / "scripts" / "ctracer_reference.py"

#: Skips a test where the environment is absent (make test builds it, so CI runs these).
NEEDS_CTRACER = pytest.mark.skipif(
    not PYTHON.exists(),
    reason=f"circuit-tracer 0.5's environment is absent ({PYTHON}); `make .venv-peers/ctracer/.installed` builds it "
    "(make test does)",
)


def run_reference(*args: str) -> str:
    """Run ``scripts/ctracer_reference.py ARGS`` in circuit-tracer's environment; its standard output."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(PYTHON), str(SCRIPT), *args], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
