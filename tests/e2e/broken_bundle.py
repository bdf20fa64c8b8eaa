"""Show that the e2e suite fails when the bundle is broken (issue 10's "can it fail?").

    .venv/bin/python tests/e2e/broken_bundle.py            # whole e2e suite
    .venv/bin/python tests/e2e/broken_bundle.py -k lab     # extra pytest arguments

Copies the installed-from-source package to a temporary directory with a
bundle whose ``render`` throws (see ``_broken.py``), puts that copy first on
``PYTHONPATH`` (so pytest, the Jupyter kernels, nbconvert and marimo all load
it), runs ``pytest tests/e2e`` from that directory, and exits 0 only when the
suite FAILED. Nothing in the working tree is touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

from _broken import broken_package_copy  # noqa: E402


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="cw-broken-") as tmp:
        package = broken_package_copy(REPO / "circuitwidgets", Path(tmp))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(REPO / "pyproject.toml"),
            "--rootdir",
            str(REPO),
            str(HERE),
            "-q",
            "-p",
            "no:cacheprovider",
            *argv,
        ]
        print(f"broken bundle: {package / 'static' / 'index.js'}", flush=True)
        # cwd = the copy's parent: "" on sys.path then finds the broken package, never the checkout's
        result = subprocess.run(cmd, cwd=tmp, env=env, check=False)
    if result.returncode == 0:
        print("UNEXPECTED: the e2e suite passed with a broken bundle", file=sys.stderr)
        return 1
    print(f"as expected, the e2e suite failed with a broken bundle (pytest exit code {result.returncode})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
