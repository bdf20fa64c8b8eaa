"""Checkpoint directories that name their own code are refused, never prompted for, never run.

Every checkpoint is a tiny model built offline from a config and written with
``save_pretrained``; its ``config.json`` (or ``tokenizer_config.json``) is then
given an ``auto_map`` pointing at Python files that would leave a marker file
if they ran.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from families import CASES_BY_ID

from circuitwidgets.errors import CustomCodeError
from circuitwidgets.sources.huggingface import from_hf
from circuitwidgets.sources.safetensors_file import load_safetensors

ROOT = Path(__file__).resolve().parent.parent

_CONFIG_CODE = """
from pathlib import Path
Path(__file__).with_name("code-ran").touch()
from transformers import LlamaConfig
class EvilConfig(LlamaConfig):
    model_type = "evil_llama"
"""

_MODEL_CODE = """
from pathlib import Path
Path(__file__).with_name("code-ran").touch()
from transformers import LlamaForCausalLM
class EvilModel(LlamaForCausalLM):
    pass
"""

_TOKENIZER_CODE = """
from pathlib import Path
Path(__file__).with_name("code-ran").touch()
from transformers import PreTrainedTokenizerFast
class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


def _checkpoint(root: Path) -> Path:
    """A tiny Llama saved with save_pretrained (no custom code yet)."""
    CASES_BY_ID["llama-mha-tied"].build().save_pretrained(root)
    return root


def _name_custom_code(root: Path) -> Path:
    """Give ``root``'s config an unknown model type and an auto_map onto its own Python files."""
    config = json.loads((root / "config.json").read_text())
    config["model_type"] = "evil_llama"
    config["auto_map"] = {
        "AutoConfig": "configuration_evil.EvilConfig",
        "AutoModelForCausalLM": "modeling_evil.EvilModel",
    }
    (root / "config.json").write_text(json.dumps(config))
    (root / "configuration_evil.py").write_text(_CONFIG_CODE)
    (root / "modeling_evil.py").write_text(_MODEL_CODE)
    return root


@pytest.fixture
def custom_code_dir(tmp_path: Path) -> Path:
    return _name_custom_code(_checkpoint(tmp_path / "ckpt"))


@pytest.mark.parametrize("load", [from_hf, load_safetensors], ids=["from_hf", "load_safetensors"])
def test_config_naming_custom_code_is_refused_before_transformers(load: Any, custom_code_dir: Path) -> None:
    with pytest.raises(CustomCodeError, match=r"auto_map.*configuration_evil\.py.*never runs"):
        load(custom_code_dir)
    assert not (custom_code_dir / "code-ran").exists()


def test_refused_with_mlp_false_too(custom_code_dir: Path) -> None:
    with pytest.raises(CustomCodeError, match="auto_map"):
        from_hf(custom_code_dir, mlp=False)
    assert not (custom_code_dir / "code-ran").exists()


def test_tokenizer_config_naming_custom_code_is_refused(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "ckpt")
    (root / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "EvilTokenizer",
                "auto_map": {"AutoTokenizer": [None, "tokenization_evil.EvilTokenizer"]},
            }
        )
    )
    (root / "tokenization_evil.py").write_text(_TOKENIZER_CODE)
    with pytest.raises(CustomCodeError, match=r"tokenizer_config\.json.*tokenization_evil\.py"):
        from_hf(root)
    assert not (root / "code-ran").exists()


def test_directory_without_auto_map_still_loads(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "ckpt")
    (root / "helper.py").write_text("raise SystemExit('never imported')\n")  # a .py nobody names is harmless
    assert from_hf(root).cfg.n_layers == 2


_LOAD = """
import sys
from circuitwidgets.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("how", ["from_hf", "cli"])
def test_a_terminal_is_never_asked_and_a_yes_runs_nothing(how: str, custom_code_dir: Path, tmp_path: Path) -> None:
    """With stdin a pseudo-terminal that answers "y", nothing prompts, nothing runs, and the load fails typed."""
    if how == "cli":
        argv = ["-c", _LOAD, "report", "--model", str(custom_code_dir), "-o", str(tmp_path / "r.html")]
    else:
        argv = ["-c", "import sys, circuitwidgets as cw; cw.from_hf(sys.argv[1])", str(custom_code_dir)]
    primary, secondary = pty.openpty()
    try:
        os.write(primary, b"y\n" * 4)  # what a user typing "yes" would send
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(
            [sys.executable, *argv], stdin=secondary, capture_output=True, text=True, cwd=ROOT, env=env, timeout=180
        )
    finally:
        os.close(primary)
        os.close(secondary)
    assert not (custom_code_dir / "code-ran").exists(), "the checkpoint's code ran"
    assert "Do you wish to run the custom code" not in done.stdout + done.stderr
    assert done.returncode != 0
    assert "CustomCodeError" in done.stderr or "custom code" in done.stderr
