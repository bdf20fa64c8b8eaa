"""Checks on a local checkpoint directory made before transformers opens any of it.

A checkpoint whose stored tensors are not the ones its ``config.json``
declares (a tensor missing, more or fewer layers stored than declared) is
refused with :class:`~circuitwidgets.errors.IncompleteCheckpointError`:
transformers would fill what is missing with random weights and drop what is
unexpected, silently.

A ``config.json`` or ``tokenizer_config.json`` with an ``auto_map`` names
Python files of the directory that transformers would import (after asking
"Do you wish to run the custom code? [y/N]" on a terminal): circuitwidgets
refuses such a directory with :class:`~circuitwidgets.errors.CustomCodeError`
and passes ``trust_remote_code=False`` to every transformers loader, so
nothing is ever asked nor run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from circuitwidgets.errors import CustomCodeError, IncompleteCheckpointError

__all__ = ["CODE_FILES", "ignored_unexpected", "is_circuit_model_dir", "refuse_custom_code", "refuse_incomplete"]

#: The JSON files of a checkpoint that can name custom code.
CODE_FILES = ("config.json", "tokenizer_config.json")


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or ``{}`` when it is absent or not an object (read errors come later)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _references(auto_map: object) -> list[str]:
    """The ``module.Class`` references of an ``auto_map`` (values are strings or lists of them)."""
    if isinstance(auto_map, str):
        return [auto_map]
    if isinstance(auto_map, dict):
        return [ref for value in auto_map.values() for ref in _references(value)]
    if isinstance(auto_map, (list, tuple)):
        return [ref for value in auto_map for ref in _references(value)]
    return []


def _code_files(root: Path, references: list[str]) -> list[str]:
    """The ``*.py`` files of ``root`` the references point to (``repo--module.Class`` names a hub repo's module)."""
    names = {ref.split("--")[-1].rsplit(".", 1)[0].replace(".", "/") + ".py" for ref in references if "." in ref}
    return sorted(name for name in names if (root / name).is_file())


def refuse_custom_code(root: Path, argument: str = "model") -> None:
    """Raise :class:`~circuitwidgets.errors.CustomCodeError` if ``root`` names custom code to run.

    Checks ``config.json`` and ``tokenizer_config.json`` for an ``auto_map``
    (any non-empty one is refused: it tells transformers to import the
    directory's, or a hub repository's, Python modules).
    """
    for name in CODE_FILES:
        auto_map = _json_object(root / name).get("auto_map")
        if not auto_map:
            continue
        references = _references(auto_map)
        files = _code_files(root, references)
        shown = ", ".join(references[:4]) + (" ..." if len(references) > 4 else "")
        raise CustomCodeError(
            f"{argument}: expected a checkpoint that needs no code of its own, got {root / name} whose auto_map "
            f"names custom code ({shown}{'; files ' + ', '.join(files) if files else ''}). circuitwidgets never "
            "runs a checkpoint's Python files (they could do anything); remove auto_map if the model is one of "
            "the supported architectures, or load it yourself and pass the model object"
        )


def _shown(names: list[str]) -> str:
    return f"{len(names)} ({', '.join(names[:6])}{' ...' if len(names) > 6 else ''})"


def refuse_incomplete(root: Path, missing: Iterable[str], unexpected: Iterable[str], argument: str = "model") -> None:
    """Raise :class:`~circuitwidgets.errors.IncompleteCheckpointError` naming tensors missing from, or unexpected in, ``root``.

    ``missing``: tensors the model built from ``config.json`` has and the
    checkpoint lacks (transformers would draw them at random); ``unexpected``:
    tensors the checkpoint stores and that model has no place for (they would
    be dropped, e.g. layers beyond the declared count).
    """
    lacking, extra = sorted(set(missing)), sorted(set(unexpected))
    if not lacking and not extra:
        return
    parts = ([f"missing {_shown(lacking)}"] if lacking else []) + ([f"unexpected {_shown(extra)}"] if extra else [])
    raise IncompleteCheckpointError(
        f"{argument}: expected the tensors {root / 'config.json'} declares, got a checkpoint with "
        f"{'; '.join(parts)}. Loading it would fill missing weights at random and drop unexpected ones; check the "
        "layer count and sizes in config.json against the saved weights, or save the model again"
    )


#: Stored buffers of older checkpoints that current transformers computes instead (never weights).
_LEGACY_BUFFERS = (
    r"rotary_emb\.inv_freq$",
    r"(^|\.)position_ids$",
    r"\.attn\.masked_bias$",
    r"\.attention\.masked_bias$",
)


def ignored_unexpected(model: Any) -> re.Pattern[str]:
    """The stored names ``model`` ignores on loading (its ``_keys_to_ignore_on_load_unexpected``, legacy buffers)."""
    patterns = [str(p) for p in (getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])]
    return re.compile("|".join(f"({p})" for p in [*patterns, *_LEGACY_BUFFERS]))


def is_circuit_model_dir(root: Path) -> bool:
    """Whether ``root`` was written by :meth:`CircuitModel.save <circuitwidgets.CircuitModel.save>` (our ``config.json``)."""
    config = _json_object(root / "config.json")
    return "n_layers" in config and "d_model" in config and "model_type" not in config
