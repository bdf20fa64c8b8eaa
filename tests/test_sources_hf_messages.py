"""from_hf's errors say what happened: a folded norm that overflowed, our own directory given to it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import make_random_model
from families import CASES_BY_ID

from circuitwidgets.errors import ArgumentError, NonFiniteError
from circuitwidgets.model import CircuitModel
from circuitwidgets.sources.huggingface import from_hf


def test_a_folded_norm_that_overflows_bfloat16_says_so_and_where() -> None:
    model = CASES_BY_ID["llama-mha-tied"].build().to(torch.bfloat16)
    with torch.no_grad():
        model.model.layers[1].input_layernorm.weight.fill_(3e38)  # finite in bfloat16
        model.model.layers[1].self_attn.q_proj.weight.fill_(100.0)  # and so is this; their product is not
    with pytest.raises(NonFiniteError, match=r"W_Q .*bfloat16 after folding the norms.*overflowed in layer 1\b"):
        from_hf(model)


def test_a_folded_final_norm_that_overflows_names_the_unembedding() -> None:
    model = CASES_BY_ID["llama-mha-tied"].build().to(torch.bfloat16)
    with torch.no_grad():
        model.model.norm.weight.fill_(3e38)
        model.lm_head.weight.fill_(100.0)  # tied: the embedding too
    with pytest.raises(NonFiniteError, match=r"W_U .*overflowed"):
        from_hf(model, verify=False)


def test_a_directory_written_by_circuit_model_save_points_to_load(tmp_path: Path) -> None:
    make_random_model().save(tmp_path)
    for mlp in (True, False):
        with pytest.raises(ArgumentError, match=r"written by CircuitModel\.save; load it with .*CircuitModel\.load"):
            from_hf(tmp_path, mlp=mlp)
    assert isinstance(CircuitModel.load(tmp_path), CircuitModel)
