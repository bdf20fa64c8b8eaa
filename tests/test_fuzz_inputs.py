"""Bad input to features/, graphs/ and superposition/ ends in a typed error, never a crash, a silent result or a hang.

Two halves (issue 58):

- every case of ``tests/_fuzz_cases.py`` (hostile files: FIFOs, devices, symlinks out, lying headers, NaN weights,
  configs of the wrong types; sizes past memory; out-of-range arguments), run by ``scripts/fuzz_probe.py`` in a
  child process whose address space is capped, so a case that tried to allocate without bound fails there, not on
  the machine running the tests; each must be typed, and the edge-attribution ones must name the argument passed;
- property-based tests (hypothesis) over the fields those files hold: any JSON value in any SAELens config field,
  any byte string as a safetensors file, any value in a graph JSON node, any array as toy-model weights. Each call
  either succeeds with what the input says or raises a :class:`~circuitwidgets.errors.CircuitWidgetsError`.

A new module reading files or taking sizes is held to this by adding its cases to ``_fuzz_cases.py``.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _features import random_dictionary
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from circuitwidgets.errors import CircuitWidgetsError
from circuitwidgets.features import load_circuit_tracer, load_saelens, save_saelens
from circuitwidgets.graphs import from_circuit_tracer_json
from circuitwidgets.superposition import feature_dimensionality, feature_norms, superposition

ROOT = Path(__file__).resolve().parents[1]
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_every_probe_case_is_a_typed_error() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fuzz_probe.py"), "--json", "--memory-gib", "6"],
        capture_output=True, text=True, timeout=900, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) > 200
    wrong = [f"{r['class']}: {r['area']}: {r['label']}: {r['detail']}" for r in results if r["class"] != "typed"]
    assert not wrong, "\n".join(wrong)
    areas = {r["area"] for r in results}
    assert areas == {"features", "graphs", "edge attribution", "superposition"}


# ---------------------------------------------------------------------------------------------------- properties
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**15), 10**15) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
FIELDS = ("d_in", "d_sae", "k", "architecture", "apply_b_dec_to_input", "normalize_activations",
          "rescale_acts_by_decoder_norm", "metadata", "d_out")  # fmt: skip


@pytest.fixture(scope="module")
def saelens_folder() -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        d = random_dictionary("sae", "topk", k=4, in_site="resid_post", dtype=torch.float32)
        yield save_saelens(d, Path(tmp) / "sl"), d


@FAST
@given(field=st.sampled_from(FIELDS), value=JSON)
def test_any_value_in_a_saelens_config_field_loads_as_it_says_or_is_typed(
    saelens_folder: tuple[Path, Any], field: str, value: object
) -> None:
    folder, d = saelens_folder
    cfg = json.loads((folder / "cfg.json").read_text())
    original = dict(cfg)
    cfg[field] = value
    (folder / "cfg.json").write_text(json.dumps(cfg))
    try:
        loaded = load_saelens(folder)
    except CircuitWidgetsError:
        return
    finally:
        (folder / "cfg.json").write_text(json.dumps(original))
    # accepted: then the value was one the format allows, and the dictionary is the file's
    assert loaded.d_in == d.d_in and loaded.d_sae == d.d_sae
    if field == "k":
        assert type(value) is int and loaded.k == value
    if field in ("apply_b_dec_to_input", "rescale_acts_by_decoder_norm"):
        assert isinstance(value, bool)


@FAST
@given(raw=st.binary(max_size=200), length=st.integers(0, 2**64 - 1) | st.none())
def test_any_bytes_as_a_transcoder_file_are_typed(tmp_path: Path, raw: bytes, length: int | None) -> None:
    path = tmp_path / "layer_0.safetensors"
    path.write_bytes((struct.pack("<Q", length) if length is not None else b"") + raw)
    with pytest.raises(CircuitWidgetsError):
        load_circuit_tracer(path)


@FAST
@given(
    header=st.dictionaries(
        st.sampled_from(["W_enc", "W_dec", "b_enc", "b_dec", "k", "x"]),
        st.fixed_dictionaries({
            "dtype": st.sampled_from(["F32", "F64", "I64", "BOOL", "F8", 3]),
            "shape": st.lists(st.integers(-2, 2**40), max_size=3),
            "data_offsets": st.lists(st.integers(-4, 2**44), min_size=2, max_size=2),
        }),
        max_size=5,
    )
)  # fmt: skip
def test_any_header_is_checked_before_a_tensor_is_allocated(tmp_path: Path, header: dict[str, Any]) -> None:
    raw = json.dumps(header).encode()
    path = tmp_path / "layer_0.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(64))
    with pytest.raises(CircuitWidgetsError):  # 64 data bytes never hold a transcoder
        load_circuit_tracer(path)


def _graph(node: dict[str, Any]) -> dict[str, Any]:
    emb = {"node_id": "E_1_0", "feature": 0, "layer": "E", "ctx_idx": 0, "feature_type": "embedding", "jsNodeId": "x"}
    return {"metadata": {"prompt_tokens": ["a", "b"]}, "nodes": [emb, node], "links": []}


@FAST
@given(
    node_id=st.text(alphabet="0123456789_E", max_size=16),
    ctx_idx=JSON,
    token_prob=JSON,
    activation=JSON,
    ftype=st.sampled_from(["cross layer transcoder", "logit", "embedding", "mlp reconstruction error", "x"]),
)
def test_any_graph_node_is_read_within_range_or_typed(
    tmp_path: Path, node_id: str, ctx_idx: object, token_prob: object, activation: object, ftype: str
) -> None:
    node = {"node_id": node_id, "ctx_idx": ctx_idx, "feature_type": ftype, "token_prob": token_prob,
            "activation": activation, "feature": 0, "layer": "0", "jsNodeId": "y"}  # fmt: skip
    path = tmp_path / "g.json"
    path.write_text(json.dumps(_graph(node)))
    try:
        graph = from_circuit_tracer_json(path)
    except CircuitWidgetsError:
        return
    n = graph.nodes
    assert ((n.pos >= 0) & (n.pos < 2)).all() and (np.abs(n.index) < 2**31).all() and (n.layer < 2**31).all()
    finite = n.activation[~np.isnan(n.activation)]
    assert np.isfinite(finite).all()
    assert all(0 <= p <= 1 for p, k in zip(n.activation, n.kind, strict=True) if k == "logit")


@FAST
@given(
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=0, max_size=12),
    shape=st.sampled_from([(2, 3), (1, 2, 3), (0, 2, 3), (3, 4), (12,)]),
    dtype=st.sampled_from([np.float32, np.float64, np.bool_, np.int64, np.complex64]),
)
def test_any_toy_weights_are_measured_or_typed(values: list[float], shape: tuple[int, ...], dtype: type) -> None:
    size = math.prod(shape)
    data = np.resize(np.array(values or [0.0]), size).reshape(shape)
    with np.errstate(invalid="ignore"):  # (NaN cast to an integer dtype: whatever it becomes is the input)
        W = data.astype(dtype) if dtype is not np.bool_ else data > 0
    for measure in (feature_norms, superposition, feature_dimensionality):
        try:
            out = measure(W)
        except CircuitWidgetsError:
            continue
        assert np.isfinite(out).all(), f"{measure.__name__} returned non-finite values for {W!r}"


# ------------------------------------------------------------------------------------- the causal fuzz's leftovers
def test_the_causal_leftovers_are_typed() -> None:
    from conftest import make_random_model

    import circuitwidgets as cw
    from circuitwidgets.causal import logit_lens, path_patch
    from circuitwidgets.causal.result import Sweep
    from circuitwidgets.errors import ArgumentTypeError

    model = make_random_model()
    lens = logit_lens(model, torch.tensor([[1, 2, 3, 4]]))
    for bad in ("a", b"a", np.array(["x"]), object()):
        with pytest.raises(ArgumentTypeError, match="ids: expected token ids"):
            lens.log_prob(bad)  # type: ignore[arg-type]
    labels = {"layer": ["L0", "L1"], "head": ["H0", "H1"]}
    for values in (np.array([[1, 2], [3, 4]], dtype=object), np.array([["a", "b"], ["c", "d"]]), np.ones((2, 2), bool)):
        with pytest.raises(ArgumentTypeError, match=r"sweep\.values: expected an array of real numbers"):
            cw.PatchingMap(Sweep(values, ("layer", "head"), labels, "activation patching", "m"))
    with pytest.raises(ArgumentTypeError, match=r"sweep\.metric: expected a str"):
        cw.PatchingMap(Sweep(np.zeros((2, 2)), ("layer", "head"), labels, "activation patching", None))  # type: ignore[arg-type]
    component = {"component": ["embed"], "pos": ["0", "1"]}
    with pytest.raises(ArgumentTypeError, match=r"sweep\.values"):
        cw.LogitAttribution(Sweep(np.array([[1, 2]], dtype=object), ("component", "pos"), component,
                                  "direct logit attribution", "m"))  # fmt: skip
    with pytest.raises(CircuitWidgetsError, match="metric"):
        cw.PatchingMap(metric=None)
    from circuitwidgets.causal.metrics import Metric

    class Flaky:
        """A declared metric (the protocol logit_diff follows) whose batched values are NaN for one patched variant.

        The planner may time both pass layouts on a first sweep and keep only the chosen one's values, and a layout
        may run one variant a call, so the NaN is in every call after the first (the clean and corrupted pair), on its
        last row: a patched variant in both layouts.
        """

        calls = 0

        def metric(self, vocab: int) -> Metric:
            def batched(logits: torch.Tensor, batch: int) -> torch.Tensor:
                value = (logits[:, :, -1, 3] - logits[:, :, -1, 4]).mean(dim=1)
                Flaky.calls += 1
                if Flaky.calls > 1:
                    value = value.clone()
                    value[-1] = math.nan
                return value

            return Metric("flaky", batched)

    flaky = Flaky()
    clean, corrupted = torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[1, 6, 3, 7, 5]])
    with pytest.raises(CircuitWidgetsError, match=r"metric: flaky returned a non-finite value for a patched run"):
        path_patch(model, clean, corrupted, flaky)
