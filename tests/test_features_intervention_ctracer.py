"""Feature interventions against circuit-tracer 0.5's ``feature_intervention``, on the same weights.

The tiny model and ReLU transcoders of ``scripts/ctracer_reference.py build`` (see
tests/test_graphs_circuit_tracer.py); circuit-tracer runs in its own environment. Each case (one feature zeroed,
doubled, set to a value; a group of three; attention frozen or free; every layer constrained) gives the same
logits and the same activations (circuit-tracer zeroes position 0's activations: compared from position 1 on).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from _ctracer import NEEDS_CTRACER, run_reference
from safetensors.torch import load_file
from test_graphs_circuit_tracer import _model, _transcoders

from circuitwidgets.features.intervention import intervene

pytestmark = [pytest.mark.slow, NEEDS_CTRACER]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ctracer_intervene")
    run_reference("build", str(out))
    return out


def _cases(out: Path) -> list[dict[str, object]]:
    """Interventions on features active in the clean run (positions ≥ 1), in every freezing mode."""
    spec = json.loads((out / "config.json").read_text())
    model, tcs = _model(out), _transcoders(out)
    clean = intervene(model, tcs, spec["tokens"], []).clean_activations
    active = torch.nonzero(clean[:, 1:] > 0)
    picks = [active[i].tolist() for i in (0, len(active) // 3, len(active) // 2, -1)]
    nodes = [(lay, pos + 1, f, float(clean[lay, pos + 1, f])) for lay, pos, f in picks]
    sets = [
        [(*nodes[0][:3], 0.0)],
        [(*nodes[1][:3], 2 * nodes[1][3])],
        [(*nodes[3][:3], 3.5)],
        [(*n[:3], 0.0) for n in nodes[:3]],
    ]
    modes = [(True, False), (False, False), (True, True)]
    return [{"interventions": s, "freeze_attention": f, "constrained": c} for s in sets for f, c in modes]


def test_same_logits_and_activations_as_circuit_tracer(built: Path) -> None:
    cases = _cases(built)
    run_reference("intervene", str(built), json.dumps(cases))
    theirs = load_file(str(built / "intervene.safetensors"))
    spec = json.loads((built / "config.json").read_text())
    model, tcs = _model(built), _transcoders(built)
    moved, logits = 0.0, []
    for i, case in enumerate(cases):
        ours = intervene(
            model, tcs, spec["tokens"], case["interventions"], freeze_attention=bool(case["freeze_attention"]),
            constrained_layers=range(2) if case["constrained"] else None,
        )  # fmt: skip
        torch.testing.assert_close(ours.logits, theirs[f"logits.{i}"].double(), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(
            ours.activations[:, 1:], theirs[f"activations.{i}"][:, 1:].double(), rtol=1e-4, atol=1e-4
        )
        moved = max(moved, float((ours.logits - ours.clean_logits).abs().max()))
        logits.append(ours.logits)
    assert moved > 0.05  # (interventions that move nothing would agree trivially)
    # and the three modes differ (frozen, free, constrained), so each was checked for itself
    assert min(float((logits[a] - logits[b]).abs().max()) for a, b in ((9, 10), (9, 11), (10, 11))) > 1e-4


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
