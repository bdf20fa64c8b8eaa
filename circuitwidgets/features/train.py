"""Train sparse dictionaries on activations streamed from runs of a model (``circuitwidgets train-dictionary``).

Several dictionaries train from the same stream at once (one model pass feeds all
of them: on a CPU the pass is the larger cost). Each is TopK or BatchTopK
(:mod:`circuitwidgets.features.objective`: normalised MSE, unit-norm decoder rows,
the auxiliary loss for dead features), optimised with Adam; the learning rate
warms up over ``warmup_steps`` and decays linearly to 0 over the last
``decay_fraction`` of the run. A BatchTopK dictionary gets an inference
threshold, the running mean of the smallest selected activation per batch
(as dictionary_learning does), so that it encodes one row at a time.

Resumable: ``out_dir/state.json`` (step, tokens, the stream's window counter,
seconds), each dictionary's ``<name>.checkpoint.safetensors`` (weights, Adam's
moments, steps since each feature last fired, the threshold estimate) are
written every ``checkpoint_every`` steps; rerunning the same command continues.
Nothing is pickled. Progress is plain text lines (also in ``log.jsonl``).

``time_limit`` (seconds of this invocation's training) fits a run to a lease (a lent
GPU, a session): after ``calibration_steps`` (or 5 % of the time, if sooner), and again at every progress line until
the learning rate starts to decay, the run measures its own speed and, if ``tokens``
would not finish in time, plans fewer (never more, and never so few that the decay would already have begun),
so that the learning rate still decays to 0 over its share of the run. The planned rows are kept in ``state.json`` (a resumed run keeps them) and
``hardware.json`` says where each stretch of the run trained.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from circuitwidgets._checks import check_choice, check_int
from circuitwidgets.errors import ArgumentError, FileFormatError, NonFiniteError
from circuitwidgets.features._schedule import before_decay, lr_at
from circuitwidgets.features._schedule import fitted as fitted_plan
from circuitwidgets.features._train_args import check_config, check_sizes
from circuitwidgets.features._untrusted import field_of, int_field, read_json
from circuitwidgets.features.dictionary import KINDS, Dictionary
from circuitwidgets.features.files import read_safetensors, save, write_safetensors
from circuitwidgets.features.objective import TrainingDictionary, normalise_decoder, project_decoder_grad, sparse_step
from circuitwidgets.features.sites import site_width
from circuitwidgets.features.stream import ActivationStream, corpus_tokens
from circuitwidgets.model import CircuitModel

#: Share of ``time_limit`` after which a run fits its plan even before ``calibration_steps`` (a short lease).
CALIBRATION_SHARE = 0.05
_clock = time.perf_counter  # the run's clock (a test slows it down to exercise the time limit)


@dataclass(frozen=True)
class DictionarySpec:
    """One dictionary to train: ``kind`` at ``layer`` (an SAE also names its ``site``), ``width`` features, ``k``."""

    kind: str = "transcoder"
    layer: int = 0
    site: str | None = None
    activation: str = "batchtopk"
    width: int = 4096
    k: int = 32
    seed: int = 0


@dataclass
class DictionaryTrainConfig:
    """How to train (shared by every dictionary of a run)."""

    tokens: int = 5_000_000
    batch_size: int = 2048
    lr: float = 8e-4
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 50
    decay_fraction: float = 0.2
    n_ctx: int = 128
    buffer_rows: int = 2**16
    windows_per_run: int = 32
    passes: int = 1
    k_aux: int | None = None  # default d_out // 2
    aux_coefficient: float = 1 / 32
    dead_tokens: int = 500_000
    threshold_momentum: float = 0.99
    threshold_start_fraction: float = 0.1
    seed: int = 0
    threads: int = 2
    device: str = "cpu"
    checkpoint_every: int = 100
    log_every: int = 50
    time_limit: float | None = None  # seconds of training (after loading): plan fewer tokens to finish in time
    calibration_steps: int = 200  # steps measured before a time limit shortens the plan
    specs: list[DictionarySpec] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Optimiser steps for ``tokens`` training rows."""
        return max(1, math.ceil(self.tokens / self.batch_size))


@dataclass
class _Trainee:
    """One dictionary in training, with its optimiser and dead-feature counters."""

    dictionary: TrainingDictionary
    opt: torch.optim.Adam
    since_fired: torch.Tensor  # tokens since each feature last fired
    threshold: float = 0.0


def _check_spec(model: CircuitModel, spec: DictionarySpec) -> DictionarySpec:
    check_choice("kind", spec.kind, KINDS)
    check_choice("activation", spec.activation, ("topk", "batchtopk"))
    check_int("layer", spec.layer, 0, model.cfg.n_layers)
    width = check_int("width", spec.width, 1)
    check_int("k", spec.k, 1, width + 1)
    if spec.kind == "sae":
        if spec.site is None:
            raise ArgumentError("site: an SAE needs the site it reads and writes (e.g. 'resid_post'), got None")
        site_width(model.cfg, spec.site)
    else:
        site_width(model.cfg, "mlp_in", "kind")
        if spec.site not in (None, "mlp_in"):
            raise ArgumentError(f"site: a {spec.kind} reads 'mlp_in' (the MLP's normalised input), got {spec.site!r}")
    return spec


def _name(spec: DictionarySpec) -> str:
    short = {"transcoder": "tc", "skip-transcoder": "stc"}
    return f"L{spec.layer}.{short.get(spec.kind, spec.site)}"


def _sites(spec: DictionarySpec) -> tuple[tuple[str, int], tuple[str, int]]:
    if spec.kind == "sae":
        assert spec.site is not None
        return (spec.site, spec.layer), (spec.site, spec.layer)
    return ("mlp_in", spec.layer), ("mlp_out", spec.layer)


def _resumed_state(out: Path) -> dict[str, Any]:
    """The run's ``state.json`` (read as untrusted: a regular file in ``out``, its counters ints >= 0), or ``{}``."""
    path = out / "state.json"
    if not path.exists():
        return {}
    state = read_json(path, "training state", out)
    where = f"training state {str(path)!r}"
    if not isinstance(state, dict):
        raise FileFormatError(f"{where}: expected a JSON object, got {type(state).__name__}")
    for name in ("step", "tokens", "window", "planned_tokens"):
        if name in state:
            int_field(state, name, where, 0)
    if "seconds" in state:
        field_of(state, "seconds", where, (int, float))
    return state


def _widths(model: CircuitModel, spec: DictionarySpec) -> tuple[int, int, int]:
    return site_width(model.cfg, _sites(spec)[0][0]), spec.width, site_width(model.cfg, _sites(spec)[1][0])


def _new_trainee(
    model: CircuitModel, spec: DictionarySpec, cfg: DictionaryTrainConfig, first: torch.Tensor
) -> _Trainee:
    d_in = site_width(model.cfg, _sites(spec)[0][0])
    d_out = site_width(model.cfg, _sites(spec)[1][0])
    d = Dictionary.random(
        spec.kind, spec.activation, d_in, spec.width, d_out=d_out, layer=spec.layer, in_site=spec.site,
        k=spec.k, seed=spec.seed, model_name=model.name,
    ).to(cfg.device)  # fmt: skip
    with torch.no_grad():
        d.b_dec.copy_(first.mean(0))  # start at the targets' mean: the first steps then fit directions, not an offset
    td = TrainingDictionary(d)
    opt = torch.optim.Adam(td.parameters(), lr=cfg.lr, betas=cfg.betas)
    return _Trainee(td, opt, torch.zeros(spec.width, dtype=torch.float64, device=cfg.device))


def hardware() -> dict[str, object]:
    """Where a run trains: machine, CPU count, torch's threads, the CUDA device's name when one is used."""
    info: dict[str, object] = {
        "machine": platform.machine(), "cpus": os.cpu_count(), "threads": torch.get_num_threads(),
        "torch": torch.__version__, "python": platform.python_version(),
    }  # fmt: skip
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name()
    return info


def _record_hardware(out: Path, cfg: DictionaryTrainConfig, step: int) -> None:
    path = out / "hardware.json"
    stretches = read_json(path, "hardware.json", out) if path.exists() else []
    if not isinstance(stretches, list):
        raise FileFormatError(
            f"hardware.json {str(path)!r}: expected a JSON list of stretches, got {type(stretches).__name__}"
        )
    stretches.append({"from_step": step, "device": cfg.device, **hardware()})
    path.write_text(json.dumps(stretches, indent=1))


def _save_trainee(path: Path, t: _Trainee) -> None:
    tensors = {f"param.{k}": v.detach() for k, v in t.dictionary.named_parameters()}
    for name, p in t.dictionary.named_parameters():
        for key, value in t.opt.state.get(p, {}).items():
            tensors[f"adam.{name}.{key}"] = value if value.ndim else value.reshape(1)
    tensors["since_fired"] = t.since_fired
    meta = {"config": json.dumps(t.dictionary.template.config()), "threshold": repr(t.threshold)}
    write_safetensors(path, tensors, meta)


def _load_trainee(path: Path, t: _Trainee) -> None:
    tensors, meta = read_safetensors(path, "checkpoint")
    with torch.no_grad():
        for name, value in t.dictionary.named_parameters():
            value.copy_(tensors[f"param.{name}"])
    for name, p in t.dictionary.named_parameters():
        state = {key.split(".")[-1]: v for key, v in tensors.items() if key.startswith(f"adam.{name}.")}
        if state:
            state["step"] = state["step"].reshape(())
            t.opt.state[p] = state
    t.since_fired.copy_(tensors["since_fired"])
    t.threshold = float(meta["threshold"])


def _finished(t: _Trainee) -> Dictionary:
    """The trained dictionary; a BatchTopK one carries its fitted inference threshold."""
    return t.dictionary.export(t.threshold if t.dictionary.template.activation == "batchtopk" else None)


def train_dictionaries(
    model: CircuitModel,
    specs: Sequence[DictionarySpec],
    out_dir: str | Path,
    config: DictionaryTrainConfig | None = None,
    corpus: np.ndarray | None = None,
    log: TextIO | None = sys.stdout,
    cache_dir: str | Path | None = None,
) -> dict[str, Dictionary]:
    """Train (or resume) every dictionary of ``specs`` from one activation stream; return them by name.

    ``corpus`` is a 1-D token stream (default: the standard library under the
    model's tokenizer, cached in ``cache_dir``). Finished dictionaries are written
    to ``out_dir/<name>.safetensors`` (float32); see the module docstring for the rest.
    """
    cfg = replace(config or DictionaryTrainConfig(), specs=[_check_spec(model, s) for s in specs])
    if not cfg.specs:
        raise ArgumentError("specs: expected at least one dictionary to train, got none")
    check_config(cfg)
    check_sizes(cfg, [(_name(s), *_widths(model, s)) for s in cfg.specs])
    if cfg.time_limit is not None and not cfg.time_limit > 0:
        raise ArgumentError(f"time_limit: expected a positive number of seconds or None, got {cfg.time_limit!r}")
    check_int("calibration_steps", cfg.calibration_steps, 1)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    if corpus is None:
        corpus = corpus_tokens(model, Path(cache_dir) if cache_dir else out / "cache")[0]
    state = _resumed_state(out)
    keys = [key for spec in cfg.specs for key in _sites(spec)]
    stream = ActivationStream(
        model, keys, corpus, n_ctx=cfg.n_ctx, seed=cfg.seed, window=state.get("window", 0),
        buffer_rows=cfg.buffer_rows, windows_per_run=cfg.windows_per_run, passes=cfg.passes, device=cfg.device,
    )  # fmt: skip
    batch = stream.next(cfg.batch_size)
    trainees = {_name(s): _new_trainee(model, s, cfg, batch[_sites(s)[1]]) for s in cfg.specs}
    for name, t in trainees.items():
        if state and (out / f"{name}.checkpoint.safetensors").exists():
            _load_trainee(out / f"{name}.checkpoint.safetensors", t)
    if "planned_tokens" in state:  # a time-limited run keeps the plan it fitted (and may shorten it further)
        cfg = replace(cfg, tokens=state["planned_tokens"])
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
    step, seconds = state.get("step", 0), state.get("seconds", 0.0)
    _record_hardware(out, cfg, step)
    fitted = "planned_tokens" in state
    start, readings = step, list[tuple[int, float]]()  # (step, seconds) at each refit: the recent speed
    fit_at = step + cfg.calibration_steps if cfg.time_limit is not None else -1
    _log(
        log,
        f"training {', '.join(trainees)} on {model.name}: {cfg.steps} steps of {cfg.batch_size} rows, from step {step}",
    )
    t0, last = _clock(), _clock()
    while step < cfg.steps:
        lr = lr_at(cfg, step)
        records: dict[str, dict[str, float]] = {}
        for spec in cfg.specs:
            name = _name(spec)
            records[name] = _train_step(trainees[name], batch, spec, cfg, lr, step)
        step += 1
        if fit_at > step and cfg.time_limit is not None and last - t0 >= CALIBRATION_SHARE * cfg.time_limit:
            fit_at = (
                step  # a short limit: fit at this progress line, long before calibration_steps lets the decay begin
            )
        if fit_at >= 0 and step >= fit_at and (step == fit_at or step % cfg.log_every == 0) and before_decay(cfg, step):
            # refitted at every progress line until the decay starts: a run slows as its buffer cycles and
            # other work shares the device, and the first steps' speed alone overran a lease by a third
            planned, now = cfg.steps, _clock() - t0
            readings.append((step, now))
            cfg, fitted = (
                fitted_plan(cfg, step, now, readings[max(0, len(readings) - 6)] if step > fit_at else (start, 0.0)),
                True,
            )
            if cfg.steps != planned:
                (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2))
                _log(log, f"time limit {cfg.time_limit:.0f} s: planning {cfg.steps} steps ({cfg.tokens:,} rows)")
        if step % cfg.log_every == 0 or step == cfg.steps:
            now = _clock()
            rate = cfg.log_every * cfg.batch_size / max(now - last, 1e-9) if step % cfg.log_every == 0 else float("nan")
            last = now
            _write_log(out, log, step, step * cfg.batch_size, seconds + now - t0, rate, lr, records)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            for name, t in trainees.items():
                _save_trainee(out / f"{name}.checkpoint.safetensors", t)
            new_state = {"step": step, "tokens": step * cfg.batch_size, "window": stream.window,
                         "seconds": round(seconds + _clock() - t0, 1)}  # fmt: skip
            if fitted:
                new_state["planned_tokens"] = cfg.tokens
            (out / "state.json").write_text(json.dumps(new_state))
        if step < cfg.steps:
            batch = stream.next(cfg.batch_size)
    finished = {name: _finished(t) for name, t in trainees.items()}
    for name, d in finished.items():
        save(d, out / f"{name}.safetensors")
    return finished


def _train_step(
    t: _Trainee,
    batch: dict[tuple[str, int], torch.Tensor],
    spec: DictionarySpec,
    cfg: DictionaryTrainConfig,
    lr: float,
    step: int,
) -> dict[str, float]:
    d = t.dictionary
    (xk, yk) = _sites(spec)
    x, y = batch[xk], batch[yk]
    dead = t.since_fired >= cfg.dead_tokens
    k_aux = cfg.k_aux or max(1, d.template.d_out // 2)
    result = sparse_step(d, x, y, dead, k_aux, cfg.aux_coefficient)
    if not math.isfinite(result.fvu):  # a diverged run stops here, naming the step, instead of training on NaN
        raise NonFiniteError(
            f"config.lr: training {_name(spec)} diverged: its loss is not finite at step {step} (lr {lr:.3g}); "
            "a smaller lr or more warmup_steps train"
        )
    t.opt.zero_grad(set_to_none=True)
    result.loss.backward()  # type: ignore[no-untyped-call]
    project_decoder_grad(d)
    for group in t.opt.param_groups:
        group["lr"] = lr
    t.opt.step()
    normalise_decoder(d)
    t.since_fired += x.shape[0]
    t.since_fired[result.fired] = 0
    if d.template.activation == "batchtopk" and step >= int(cfg.steps * cfg.threshold_start_fraction):
        m = cfg.threshold_momentum if t.threshold > 0 else 0.0
        t.threshold = m * t.threshold + (1 - m) * result.min_active
    return {"fvu": result.fvu, "aux": result.aux, "l0": result.l0, "dead": float(dead.float().mean())}


def _log(log: TextIO | None, line: str) -> None:
    if log is not None:
        print(line, file=log, flush=True)


def _write_log(
    out: Path, log: TextIO | None, step: int, tokens: int, seconds: float, rate: float, lr: float,
    records: dict[str, dict[str, float]],
) -> None:  # fmt: skip
    parts = [f"step {step}", f"{tokens:,} tokens", f"{seconds:.0f} s", f"{rate:,.0f} tok/s", f"lr {lr:.2e}"]
    for name, r in records.items():
        parts.append(f"{name}: fvu {r['fvu']:.3f} l0 {r['l0']:.1f} dead {r['dead']:.1%} aux {r['aux']:.3f}")
    _log(log, " | ".join(parts))
    entry = {"step": step, "tokens": tokens, "seconds": round(seconds, 1), "tokens_per_s": round(rate, 1), "lr": lr}
    with (out / "log.jsonl").open("a") as f:
        f.write(json.dumps({**entry, "dictionaries": records}) + "\n")


def train_dictionary(
    model: CircuitModel,
    layer: int,
    kind: str = "transcoder",
    width: int = 4096,
    k: int = 32,
    *,
    site: str | None = None,
    activation: str = "batchtopk",
    tokens: int = 5_000_000,
    out_dir: str | Path,
    config: DictionaryTrainConfig | None = None,
    corpus: np.ndarray | None = None,
    log: TextIO | None = sys.stdout,
) -> Dictionary:
    """Train (or resume) one dictionary; see :func:`train_dictionaries`. ``tokens`` is the number of training rows."""
    cfg = replace(config or DictionaryTrainConfig(), tokens=check_int("tokens", tokens, 1))
    spec = DictionarySpec(kind=kind, layer=layer, site=site, activation=activation, width=width, k=k)
    return next(iter(train_dictionaries(model, [spec], out_dir, cfg, corpus=corpus, log=log).values()))
