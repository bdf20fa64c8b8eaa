"""The shipped grokking run: publish a run directory into the package, and load it back as a history.

The package carries ``pretrained/grokking-p113/``: ``checkpoints.safetensors``
(every published checkpoint in float16, keys ``"{step}/{weight}"``, the task
and config in its metadata), ``run.json`` (the curves, the command, the train
time) and ``README.md`` (the card). Published with
``python -m circuitwidgets.training.grokking.shipped RUN_DIR``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from circuitwidgets.errors import ArgumentError
from circuitwidgets.training.grokking.model import TASK, GrokConfig, Weights
from circuitwidgets.training.grokking.store import load_checkpoint
from circuitwidgets.training.grokking.train import HISTORY_FIELDS, GrokHistory, _history

PRETRAINED = Path(__file__).resolve().parents[2] / "pretrained"
#: The shipped run's folder name.
RUN_NAME = "grokking-p113"


def publish(
    run_dir: Path, command: str, every: int = 100, dest: Path = PRETRAINED / RUN_NAME, steps: int | None = None
) -> Path:
    """Write the run in ``run_dir`` (its checkpoints every ``every`` steps, float16) into ``dest``.

    ``steps``: publish the run as it was after that many steps (a run stopped later is cut there: its curves
    and checkpoints past it are left out); default, all of it.
    """
    data = json.loads((run_dir / "records.json").read_text())
    records, seconds = data["records"], float(data["seconds"])
    if steps is not None:
        if steps not in records["step"]:
            raise ArgumentError(f"steps: expected a measured step of the run in {run_dir}, got {steps!r}")
        keep = [i for i, s in enumerate(records["step"]) if s <= steps]
        records = {k: [v[i] for i in keep] for k, v in records.items()}
    tensors: dict[str, torch.Tensor] = {}
    cfg: GrokConfig | None = None
    for path in sorted((run_dir / "checkpoints").glob("step_*.safetensors")):
        cfg, step, w = load_checkpoint(path)
        if step <= records["step"][-1] and (step % every == 0 or step == records["step"][-1]):
            tensors |= {f"{step}/{k}": v.half().contiguous() for k, v in w.items()}
    if cfg is None:
        raise ArgumentError(f"run_dir: expected checkpoints under {run_dir / 'checkpoints'}, found none")
    dest.mkdir(parents=True, exist_ok=True)
    save_file(
        tensors, str(dest / "checkpoints.safetensors"), metadata={"task": TASK, "config": json.dumps(cfg.to_dict())}
    )
    # 7 significant figures, not decimals: the train loss reaches 1e-7 and would keep one digit
    rounded = {k: [float(f"{float(x):.7g}") for x in v] if k != "step" else v for k, v in records.items()}
    meta = {"config": cfg.to_dict(), "command": command, "train_seconds": round(seconds, 1), "records": rounded}
    (dest / "run.json").write_text(json.dumps(meta))
    return dest


def load_pretrained(name: str = RUN_NAME, root: Path = PRETRAINED) -> GrokHistory:
    """The shipped grokking run: its curves at every measured step and its checkpoints (float32).

    Parameters
    ----------
    name : str
        The run's name (the one shipped: ``"grokking-p113"``).

    Returns
    -------
    GrokHistory
    """
    if name != RUN_NAME:
        raise ArgumentError(f"name: expected {RUN_NAME!r} (the shipped grokking run), got {name!r}")
    folder = root / name
    meta = json.loads((folder / "run.json").read_text())
    cfg = GrokConfig.from_dict(meta["config"], source=str(folder / "run.json"))
    history = _history(cfg, {k: meta["records"][k] for k in ("step", *HISTORY_FIELDS)})
    history.checkpoints = _read_checkpoints(folder / "checkpoints.safetensors", cfg)
    history.train_seconds = float(meta["train_seconds"])
    return history


def _read_checkpoints(path: Path, cfg: GrokConfig) -> dict[int, Weights]:
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if meta.get("task") != TASK:
            raise ArgumentError(f"checkpoint: expected a checkpoint of task {TASK!r}, got task {meta.get('task')!r}")
        out: dict[int, Weights] = {}
        for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            step, name = key.split("/")
            out.setdefault(int(step), {})[name] = f.get_tensor(key).float()
    return dict(sorted(out.items()))


def card_command(run_dir: Path) -> str:
    """The command that trains the run in ``run_dir`` (from its config)."""
    cfg = load_checkpoint(sorted((run_dir / "checkpoints").glob("step_*.safetensors"))[-1])[0]
    return (
        f"nice -n 19 python -m circuitwidgets.training.grokking --out {run_dir.name} --p {cfg.p} "
        f"--fraction {cfg.fraction} --d-model {cfg.d_model} --n-heads {cfg.n_heads} --d-head {cfg.d_head} "
        f"--d-mlp {cfg.d_mlp} --lr {cfg.lr} --weight-decay {cfg.weight_decay} --seed {cfg.seed}"
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m circuitwidgets.training.grokking.shipped RUN_DIR --steps N --every K``."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--steps", type=int, required=True, help="the --steps the run was trained with (for the card)")
    ap.add_argument("--every", type=int, default=100)
    args = ap.parse_args(argv)
    with safe_open(str(sorted((args.run_dir / "checkpoints").glob("step_*.safetensors"))[-1]), framework="pt") as f:
        fp16 = " --fp16" if f.get_slice(next(iter(f.keys()))).get_dtype() == "F16" else ""  # as the run wrote them
    command = (
        f"{card_command(args.run_dir)} --steps {args.steps} --eval-every 10 --checkpoint-every 100{fp16} --threads 1"
    )
    print(publish(args.run_dir, command, args.every, steps=args.steps))


if __name__ == "__main__":
    main()
