"""A deliberately broken bundle: ``render`` throws. The suite must fail on it.

Two uses:

- ``test_e2e_broken_bundle.py`` puts the broken bundle in an exported page and
  checks that the page checks every test relies on reject it (runs each time).
- ``python tests/e2e/broken_bundle.py`` runs the whole e2e suite against a copy
  of the package whose bundle is broken, in every host (exported pages,
  JupyterLab, Notebook 7, marimo), and expects it to fail.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

BROKEN_MESSAGE = "circuitwidgets: deliberately broken bundle (render throws)"

_EXPORTS = re.compile(r"export\s*\{([^}]*)\}\s*;?\s*$")
_DEFAULT = re.compile(r"[\w$]+\s+as\s+default\b")


def break_bundle(source: str) -> str:
    """The bundle with its default export replaced by one whose ``render`` throws."""
    source = source.rstrip()
    if "__cwBroken" in source:
        return source  # already broken (the suite is running against a broken copy)
    exports = _EXPORTS.search(source)
    if exports is None or not _DEFAULT.search(exports.group(1)):
        raise ValueError("cannot find `export { X as default }` at the end of the bundle; update tests/e2e/_broken.py")
    names = _DEFAULT.sub("__cwBroken as default", exports.group(1))
    broken = f"const __cwBroken={{render(){{throw new Error({BROKEN_MESSAGE!r})}}}};export{{{names}}};\n"
    return source[: exports.start()] + broken


def broken_package_copy(package: Path, target: Path) -> Path:
    """Copy the ``circuitwidgets`` package directory to ``target/circuitwidgets`` with a broken bundle."""
    dest = target / "circuitwidgets"
    shutil.copytree(package, dest, ignore=shutil.ignore_patterns("__pycache__"))
    bundle = dest / "static" / "index.js"
    bundle.write_text(break_bundle(bundle.read_text(encoding="utf-8")), encoding="utf-8")
    return dest
