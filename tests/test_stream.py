"""from_hf(path, mlp=False): a sharded save_pretrained directory read layer by layer, without its MLPs.

Every decoder family of ``tests/families.py`` (Gemma 4 excepted, refused) is
saved in 20 KB shards (several per model) and loaded both ways: the streamed model holds exactly
the whole load's tensors less the MLPs', its weight-space analyses agree, its
forward pass refuses, and no MLP tensor is ever read from the shards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from families import CASES, CASES_BY_ID

import circuitwidgets as cw
from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    NonFiniteError,
    ShapeError,
    UnsupportedArchitectureError,
    WeightsAbsentError,
)
from circuitwidgets.model import CircuitModel, ModelConfig
from circuitwidgets.sources import hf_stream

pytestmark = pytest.mark.filterwarnings("ignore::circuitwidgets.circuits.MLPPathsExcludedWarning")

MLP_NAMES = {"W_in", "b_in", "W_gate", "b_gate", "W_out", "b_out"}
STREAMED = [case for case in CASES if not case.model.startswith("Gemma4")]


def _save(model: Any, root: Path) -> Path:
    model.save_pretrained(root, max_shard_size="20KB")
    assert (root / hf_stream.INDEX).is_file() and len(list(root.glob("*.safetensors"))) >= 3
    return root


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of every tensor the streaming reader takes from a shard."""
    names: list[str] = []
    real = hf_stream.safe_open

    class Recording:
        def __init__(self, file: str, framework: str) -> None:
            self.inner = real(file, framework=framework)

        def __enter__(self) -> Recording:
            self.inner.__enter__()
            return self

        def __exit__(self, *exc: Any) -> None:
            self.inner.__exit__(*exc)

        def keys(self) -> list[str]:
            return list(self.inner.keys())

        def get_tensor(self, name: str) -> torch.Tensor:
            names.append(name)
            return self.inner.get_tensor(name)  # type: ignore[no-any-return]

    monkeypatch.setattr(hf_stream, "safe_open", Recording)
    return names


@pytest.mark.parametrize("case", STREAMED, ids=lambda c: c.id)
def test_streamed_equals_whole_less_mlps(case: Any, tmp_path: Path, reads: list[str]) -> None:
    root = _save(case.build(seed=3), tmp_path / case.id)
    whole = cw.from_hf(str(root))
    part = cw.from_hf(str(root), mlp=False)
    assert part.cfg.mlp_weights_absent and not whole.cfg.mlp_weights_absent
    assert part.cfg.d_mlp == whole.cfg.d_mlp and part.cfg.has_mlp
    held = part.weights()
    assert set(whole.weights()) - set(held) == set(whole.weights()) & MLP_NAMES
    assert not set(held) & MLP_NAMES
    for name, tensor in held.items():
        assert torch.equal(tensor, whole.weight(name)), name
    assert (part.W_Q.equal(whole.W_Q), part.W_K.equal(whole.W_K), part.W_O.equal(whole.W_O)) == (True, True, True)
    # Nothing of an MLP was read; every layer's attention was.
    assert reads and not [n for n in reads if ".mlp." in n]
    layers = {int(n.split(".")[2]) for n in reads if n.startswith("model.layers.") and ".self_attn." in n}
    assert layers == set(range(whole.cfg.n_layers))


@pytest.mark.parametrize(
    "case_id", ["llama-gqa2-biases-llama3rope", "gemma2-softcaps-window", "qwen3-qknorm-wide-heads"]
)
def test_streamed_analyses_and_refusals(case_id: str, tmp_path: Path) -> None:
    root = _save(CASES_BY_ID[case_id].build(seed=1), tmp_path / case_id)
    whole = cw.from_hf(str(root))
    part = cw.from_hf(str(root), mlp=False)
    np.testing.assert_array_equal(
        cw.circuits.copying_scores(part, circuit="ov"), cw.circuits.copying_scores(whole, circuit="ov")
    )
    for kind in "QKV":
        np.testing.assert_array_equal(
            cw.circuits.composition_scores(part, kind, offset=0), cw.circuits.composition_scores(whole, kind, offset=0)
        )
    top_part = cw.circuits.full_qk(part, 1, 0, offset=2).topk(5)
    top_whole = cw.circuits.full_qk(whole, 1, 0, offset=2).topk(5)
    assert torch.equal(top_part.values, top_whole.values)
    tokens = torch.tensor([[1, 5, 7, 9]])
    for run in (lambda: part(tokens), lambda: part.run_with_cache(tokens, names=["pattern"])):
        with pytest.raises(WeightsAbsentError, match=r"without its MLP weights.*from_hf\(path\)"):
            run()
    assert whole(tokens).shape == (1, 4, whole.cfg.d_vocab)


def test_bfloat16_checkpoint_stays_bfloat16(tmp_path: Path) -> None:
    root = _save(CASES_BY_ID["llama-mha-tied"].build(seed=2).to(torch.bfloat16), tmp_path / "bf16")
    whole = cw.from_hf(str(root))
    part = cw.from_hf(str(root), mlp=False)
    assert part.dtype == torch.bfloat16 == whole.dtype
    for name, tensor in part.weights().items():
        assert torch.equal(tensor, whole.weight(name)), name
    as_float = cw.from_hf(str(root), mlp=False, dtype=torch.float32)
    whole_float = cw.from_hf(str(root), dtype=torch.float32)
    assert as_float.dtype == torch.float32
    for name, tensor in as_float.weights().items():
        assert torch.equal(tensor, whole_float.weight(name)), name


def test_saved_and_reloaded_keeps_the_refusal(tmp_path: Path) -> None:
    root = _save(CASES_BY_ID["mistral-window"].build(), tmp_path / "src")
    part = cw.from_hf(str(root), mlp=False)
    part.save(tmp_path / "saved")
    again = CircuitModel.load(tmp_path / "saved")
    assert again.cfg.mlp_weights_absent and torch.equal(again.W_V, part.W_V.float())
    with pytest.raises(WeightsAbsentError):
        again(torch.tensor([[1, 2]]))
    assert "mlp=absent" in repr(again)


def _poison(root: Path, name: str) -> None:
    """Write NaN into tensor ``name`` of its shard."""
    from safetensors.torch import load_file, save_file

    file = root / json.loads((root / hf_stream.INDEX).read_text())["weight_map"][name]
    tensors = load_file(str(file))
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(file), metadata={"format": "pt"})


def test_non_finite_attention_is_named_and_mlp_is_never_looked_at(tmp_path: Path) -> None:
    root = _save(CASES_BY_ID["llama-gqa2-biases-llama3rope"].build(), tmp_path / "nan")
    _poison(root, "model.layers.1.mlp.down_proj.weight")
    part = cw.from_hf(str(root), mlp=False)  # the MLP's NaN is never read
    assert part.cfg.mlp_weights_absent
    with pytest.raises(NonFiniteError):
        cw.from_hf(str(root))
    _poison(root, "model.layers.1.self_attn.k_proj.weight")
    with pytest.raises(NonFiniteError, match=r"model\.layers\.1\.self_attn\.k_proj\.weight.*safetensors"):
        cw.from_hf(str(root), mlp=False)
    # verify=False skips the per-tensor check; the model's own validation still refuses.
    with pytest.raises(NonFiniteError, match="W_K"):
        cw.from_hf(str(root), mlp=False, verify=False)


def test_bad_directories_are_refused_naming_the_file(tmp_path: Path) -> None:
    case = CASES_BY_ID["llama-mha-tied"]
    root = _save(case.build(), tmp_path / "sharded")
    shards = sorted(root.glob("*.safetensors"))
    shards[1].rename(tmp_path / "aside.safetensors")
    with pytest.raises(ArgumentError, match=f"shard .*{shards[1].name}.* is missing"):
        cw.from_hf(str(root), mlp=False)
    (tmp_path / "aside.safetensors").rename(shards[1])
    (root / hf_stream.INDEX).rename(tmp_path / "index.json")
    with pytest.raises(ArgumentError, match=f"{len(shards)} safetensors files .*no model.safetensors.index.json"):
        cw.from_hf(str(root), mlp=False)
    (tmp_path / "index.json").rename(root / hf_stream.INDEX)
    saved = (root / hf_stream.INDEX).read_text()
    index = json.loads(saved)
    del index["weight_map"]["model.layers.1.self_attn.q_proj.weight"]
    (root / hf_stream.INDEX).write_text(json.dumps(index))
    with pytest.raises(ArgumentError, match=r"missing 1 \(model\.layers\.1\.self_attn\.q_proj\.weight\)"):
        cw.from_hf(str(root), mlp=False)
    (root / hf_stream.INDEX).write_text(saved)
    shards[0].write_bytes(shards[0].read_bytes()[:100])
    with pytest.raises(ArgumentError, match=shards[0].name):
        cw.from_hf(str(root), mlp=False)

    other = _save(case.build(), tmp_path / "reshaped")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"num_key_value_heads": 2}))
    with pytest.raises(ShapeError, match=r"k_proj\.weight.*safetensors: expected shape \(16, 32\)"):
        cw.from_hf(str(other), mlp=False)


def test_bad_arguments(tmp_path: Path) -> None:
    model = CASES_BY_ID["llama-mha-tied"].build()
    with pytest.raises(ArgumentError, match="mlp=False reads a save_pretrained directory"):
        cw.from_hf(model, mlp=False)
    with pytest.raises(ArgumentTypeError, match="mlp: expected a bool"):
        cw.from_hf(model, mlp="no")  # type: ignore[arg-type]
    root = _save(CASES_BY_ID["gemma4-local-global"].build(), tmp_path / "gemma4")
    with pytest.raises(UnsupportedArchitectureError, match=r"Gemma 4.*from_hf\(path\)"):
        cw.from_hf(str(root), mlp=False)
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "config.json").write_text((root / "config.json").read_text())
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(ArgumentError, match="pickled"):
        cw.from_hf(str(tmp_path / "pickled"), mlp=False)


def test_config_and_weights_state_the_absence() -> None:
    base = dict(n_layers=1, n_heads=2, d_model=8, d_head=4, d_vocab=10, n_ctx=6)
    with pytest.raises(ArgumentError, match="mlp_weights_absent"):
        ModelConfig(**base, mlp_weights_absent=True)
    cfg = ModelConfig(**base, has_mlp=True, d_mlp=12, act_fn="gelu", mlp_weights_absent=True)
    g = torch.Generator().manual_seed(0)
    weights = {
        name: torch.randn(shape, generator=g)
        for name, shape in (
            ("W_E", (10, 8)),
            ("W_pos", (6, 8)),
            ("W_Q", (1, 2, 8, 4)),
            ("W_K", (1, 2, 8, 4)),
            ("W_V", (1, 2, 8, 4)),
            ("W_O", (1, 2, 4, 8)),
            ("W_U", (8, 10)),
        )
    }
    model = CircuitModel(cfg, weights)
    assert cw.circuits.copying_scores(model).shape == (1, 2)
    with pytest.raises(ShapeError, match="W_in"):
        CircuitModel(cfg, weights | {"W_in": torch.zeros(1, 8, 12)})
