"""Running the notebooks for their tests: each once per session, in a kernel of this interpreter, or read
from the docs build's execution of the same notebook on the same package sources (see ``test_notebooks.py``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
NAMES = (
    "01_zero_and_one_layer",
    "02_two_layer_induction",
    "03_bring_your_own_model",
    "04_causal_induction",
    "05_superposition",
    "06_features",
    "07_attribution_graph",
    "08_circuit_discovery",
    "09_testing_hypotheses",
    "10_training_dynamics",
)
#: The induction heads of attn-only-2l-12h, as several notebooks print them.
INDUCTION_12H = ["L1H5", "L1H7", "L1H9"]
KERNEL = "circuitwidgets-notebooks"
CELL_TIMEOUT_S = 300


# ----------------------------------------------------------------------------- running


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding one kernelspec: this interpreter, offline for hubs."""
    pytest.importorskip("ipykernel")
    from ipykernel.kernelspec import write_kernel_spec

    root = tmp_path_factory.mktemp("kernels")
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # the notebooks never reach a hub; make sure
    write_kernel_spec(root / KERNEL, overrides={"display_name": "circuitwidgets tests", "env": offline})
    return root


@pytest.fixture(scope="session")
def executed(kernel_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], nbformat.NotebookNode]:
    """``executed(name)``: the notebook run top to bottom (once per session), with its outputs.

    The kernel manager looks for kernelspecs in :func:`kernel_dir` only, so no user
    or system kernelspec named like ours can run another Python.
    """
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    done: dict[str, nbformat.NotebookNode] = {}
    executions = docs_executions()

    def run(name: str) -> nbformat.NotebookNode:
        if name not in done and (reused := executions.get(name)) is not None:
            # the docs build ran this very notebook on these very sources, top to bottom, in a kernel of this
            # interpreter (its cache key hashes both): its outputs are what running it again would print
            sys.stderr.write(f"\n{name}.ipynb: the docs build's execution reused ({reused.name})\n")
            done[name] = nbformat.read(reused, as_version=4)
        if name not in done:
            nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
            km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
            workdir = tmp_path_factory.mktemp(name)
            started = time.monotonic()
            NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(workdir)}}).execute()
            elapsed = time.monotonic() - started
            sys.stderr.write(f"\n{name}.ipynb executed in {elapsed:.0f}s\n")
            done[name] = nb
        return done[name]

    return run


def docs_executions() -> dict[str, Path]:
    """``{name: path}`` of the notebooks the docs build executed on the current notebook and package sources.

    ``make test`` builds the docs (executing every notebook, cached in ``docs/_build/.executed/`` under a key of
    the notebook's bytes and the package's sources) before pytest; a notebook whose key matches is not run twice.
    None when the docs extension cannot be loaded (no Sphinx) or ``CW_NOTEBOOKS_EXECUTE=1`` asks for fresh runs.
    """
    if os.environ.get("CW_NOTEBOOKS_EXECUTE") == "1":
        return {}
    spec = importlib.util.spec_from_file_location("cw_docs_for_tests", REPO / "docs" / "_ext" / "cw_docs.py")
    if spec is None or spec.loader is None:
        return {}
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:
        return {}
    found = {}
    digest = module._sources_digest()  # (once: it reads the package and its shipped weights)
    for name in NAMES:
        path = module.cached_execution(NOTEBOOKS / f"{name}.ipynb", digest)
        if path.is_file():
            found[name] = path
    return found


def printed(nb: nbformat.NotebookNode, tag: str) -> str:
    """Everything the cell tagged ``tag`` wrote to stdout."""
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"expected one cell tagged {tag!r}, found {len(cells)}"
    return "".join(o.get("text", "") for o in cells[0].outputs if o.output_type == "stream" and o.name == "stdout")


def find(pattern: str, text: str) -> re.Match[str]:
    match = re.search(pattern, text)
    assert match, f"expected output matching {pattern!r}, got:\n{text}"
    return match


def number(pattern: str, text: str) -> float:
    return float(find(pattern, text).group(1))
