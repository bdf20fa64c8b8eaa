"""circuit-tracer 0.5's environment for the cross-checks: where it is, the marks that skip a test without it, and
one way to run scripts/ctracer_reference.py in it (its own interpreter, none of our environment's paths)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

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


def assert_same_graph(dense: Any, reference: Path, name: str, spec: dict[str, Any]) -> None:
    """Our dense attribution ``dense`` against circuit-tracer's graph ``name`` saved in ``reference``: the same
    features in the same order, activations, logit tokens and probabilities, adjacency within 1e-5 of its largest
    entry, the same pruned nodes and edges, and the same replacement and completeness scores."""
    import numpy as np
    import torch
    from safetensors.torch import load_file

    from circuitwidgets.graphs.influence import graph_scores, prune_by_influence

    ref = load_file(str(reference / f"graph_{name}.safetensors"))
    assert dense.features.tolist() == ref["active"][ref["selected"]].tolist()  # chosen in the same influence order
    torch.testing.assert_close(dense.activations, ref["activations"][ref["selected"]].double(), rtol=1e-5, atol=1e-6)
    assert dense.logit_tokens.tolist() == ref["logit_tokens"].tolist()
    torch.testing.assert_close(dense.logit_probabilities, ref["logit_probabilities"].double(), rtol=1e-5, atol=1e-7)
    theirs = ref["adjacency"].double()
    error = float((dense.adjacency - theirs).abs().max()) / float(theirs.abs().max())
    assert error < 1e-5, f"{name}: adjacency differs by {error:.2e} of its largest entry"
    kept = prune_by_influence(dense)
    np.testing.assert_array_equal(kept.nodes.numpy(), ref["node_mask"].bool().numpy())
    np.testing.assert_array_equal(kept.edges.numpy(), ref["edge_mask"].bool().numpy())
    replacement, completeness = spec["scores"][name]
    scores = graph_scores(dense)
    assert scores["replacement"] == pytest.approx(replacement, abs=1e-5)
    assert scores["completeness"] == pytest.approx(completeness, abs=1e-5)
