"""Packaging: the sdist carries the built bundle, and a wheel builds from it without Node."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = "circuitwidgets/static/index.js"


@pytest.mark.slow
def test_wheel_built_from_sdist_without_node_contains_the_bundle(tmp_path: Path) -> None:
    if not (ROOT / BUNDLE).is_file():
        pytest.fail(f"{BUNDLE} is not built; run `make setup` (or `npm --prefix js run build`)")

    sdist_dir = tmp_path / "sdist"
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(sdist_dir)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    (sdist,) = sdist_dir.glob("circuitwidgets-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    top = names[0].split("/")[0]
    assert f"{top}/{BUNDLE}" in names
    assert f"{top}/js/package-lock.json" in names
    assert not any("/node_modules/" in n for n in names)

    # No node, npm or anything else on PATH: the build must use the bundle it was given.
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = {**os.environ, "PATH": str(empty_bin)}
    assert shutil.which("node", path=env["PATH"]) is None
    wheel_dir = tmp_path / "wheel"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheel_dir),
            str(sdist),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = wheel_dir.glob("circuitwidgets-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(BUNDLE)
        assert info.file_size > 1000
        assert b"export" in zf.read(BUNDLE)
        names = zf.namelist()
    assert "circuitwidgets/widgets/core/base.py" in names
    assert not any(n.startswith(("js/", "tests/")) for n in names)
