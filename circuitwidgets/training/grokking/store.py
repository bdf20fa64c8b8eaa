"""Files of a grokking run: checkpoints (safetensors), the resumable state, and reading them back.

Everything is read with safetensors or ``torch.load(weights_only=True)``;
nothing is unpickled. Every file names its task (``modular_addition``) and
configuration, so a checkpoint of another task, or of another configuration
given to a resumed run, is refused with a typed error.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from circuitwidgets.errors import ArgumentError
from circuitwidgets.training.grokking.model import TASK, GrokConfig, Weights


def _metadata(cfg: GrokConfig, step: int) -> dict[str, str]:
    return {"task": TASK, "config": json.dumps(cfg.to_dict()), "step": str(step)}


def checkpoint_path(directory: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` lives under a run's directory."""
    return directory / "checkpoints" / f"step_{step:06d}.safetensors"


def save_checkpoint(directory: Path, cfg: GrokConfig, step: int, weights: Weights, dtype: torch.dtype) -> None:
    """Write the weights after ``step`` updates (in ``dtype``) with the task and config in the metadata."""
    path = checkpoint_path(directory, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in weights.items()}
    save_file(tensors, str(path.with_suffix(".tmp")), metadata=_metadata(cfg, step))
    path.with_suffix(".tmp").replace(path)


def load_checkpoint(path: str | Path) -> tuple[GrokConfig, int, Weights]:
    """Read one checkpoint: its config, step and weights (float32).

    Raises
    ------
    ArgumentError
        The file is not a safetensors file of a modular-addition run (another task's checkpoint, a model).
    """
    path = Path(path)
    if not path.is_file():
        raise ArgumentError(
            f"checkpoint: expected a safetensors file of a {TASK} run, got {str(path)!r} (no such file)"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as exc:  # safetensors raises its own error types for a file that is not one
        raise ArgumentError(f"checkpoint: expected a safetensors file, got {str(path)!r} ({exc})") from None
    if meta.get("task") != TASK:
        raise ArgumentError(
            f"checkpoint: expected a checkpoint of task {TASK!r}, got one of task {meta.get('task')!r} ({path})"
        )
    cfg = GrokConfig.from_dict(json.loads(meta["config"]), source="checkpoint")
    weights = {k: v.float() for k, v in load_file(str(path)).items()}
    return cfg, int(meta["step"]), weights


def save_resume_state(
    directory: Path,
    cfg: GrokConfig,
    step: int,
    seconds: float,
    weights: Weights,
    opt: torch.optim.Optimizer,
    records: dict[str, list[float]],
) -> None:
    """The exact state to continue from (float32 weights, optimizer moments, the curves so far)."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().contiguous() for k, v in weights.items()},
        str(directory / "resume.tmp"),
        metadata=_metadata(cfg, step),
    )
    torch.save(opt.state_dict(), directory / "optim.tmp")
    (directory / "records.tmp").write_text(json.dumps({"seconds": seconds, "records": records}))
    (directory / "resume.tmp").replace(directory / "resume.safetensors")
    (directory / "optim.tmp").replace(directory / "optim.pt")
    (directory / "records.tmp").replace(directory / "records.json")


def load_resume_state(
    directory: Path, cfg: GrokConfig, weights: Weights, opt: torch.optim.Optimizer
) -> tuple[int, float, dict[str, list[float]], dict[int, Weights]] | None:
    """Load a run's state into ``weights`` and ``opt``; ``None`` if ``directory`` holds no run.

    Returns the step, the seconds spent, the curves (cut at that step) and the checkpoints on disk up to it.
    """
    state = directory / "resume.safetensors"
    if not state.exists():
        return None
    saved, step, tensors = load_checkpoint(state)
    if saved != cfg:
        raise ArgumentError(
            f"out_dir: {directory} holds a run of another configuration ({saved}); expected {cfg}. "
            "Pass another out_dir, or the same settings to resume it"
        )
    try:
        opt_state = torch.load(directory / "optim.pt", weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        raise ArgumentError(f"out_dir: {directory / 'optim.pt'} is not a plain tensor file and was refused") from exc
    with torch.no_grad():
        for name, t in weights.items():
            t.copy_(tensors[name])
    opt.load_state_dict(opt_state)
    data = json.loads((directory / "records.json").read_text())
    records = data["records"]
    keep = [i for i, s in enumerate(records["step"]) if s < step]
    records = {k: [v[i] for i in keep] for k, v in records.items()}
    checkpoints: dict[int, Weights] = {}
    for path in sorted((directory / "checkpoints").glob("step_*.safetensors")):
        _, s, w = load_checkpoint(path)
        if s <= step:
            checkpoints[s] = w
    return step, float(data["seconds"]), records, checkpoints
