"""Bad inputs for the features, graphs and superposition packages, one call each, classed as issue 58's probe was.

Each case is ``(area, label, call)``; the call must end in a typed error (a
:class:`~circuitwidgets.errors.CircuitWidgetsError`). :func:`classify` runs one with a deadline and says which
class it fell in: ``typed``, ``untyped`` (another exception), ``silent`` (it returned) or ``hang``. Shared by
``tests/test_fuzz_inputs.py`` (which asserts every case typed) and ``scripts/fuzz_probe.py`` (which prints the
table). Everything is tiny: the whole list runs in seconds.
"""

from __future__ import annotations

import json
import math
import os
import signal
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _features import mlp_model as feature_model
from _features import random_dictionary
from _graphs import mlp_model, random_transcoders
from safetensors.torch import save_file

from circuitwidgets.errors import CircuitWidgetsError

Case = tuple[str, str, Callable[[], object]]


def classify(call: Callable[[], object], seconds: int = 20) -> tuple[str, str]:
    """``(class, detail)`` of one call: typed, untyped, silent or hang (``seconds`` of wall clock, by SIGALRM)."""

    def _alarm(signum: int, frame: object) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        call()
        return "silent", "returned"
    except TimeoutError:
        return "hang", f"over {seconds} s"
    except CircuitWidgetsError as exc:
        return "typed", f"{type(exc).__name__}: {str(exc)[:160]}"
    except Exception as exc:
        return "untyped", f"{type(exc).__name__}: {str(exc)[:160]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def naming(name: str, call: Callable[[], object]) -> Callable[[], object]:
    """``call``, whose typed error must name the argument ``name`` first (else it counts as untyped)."""

    def checked() -> object:
        try:
            return call()
        except CircuitWidgetsError as exc:
            if not str(exc).startswith(f"{name}:"):
                raise AssertionError(f"the error names the wrong argument (expected {name!r}): {exc}") from None
            raise

    return checked


# ------------------------------------------------------------------------------------------------------ files
def _saelens_folder(
    root: Path, name: str, cfg_patch: dict[str, Any] | None = None, cfg_text: str | None = None
) -> Path:
    from circuitwidgets.features import save_saelens

    folder = save_saelens(random_dictionary("sae", "topk", k=4, in_site="resid_post"), root / name)
    cfg = json.loads((folder / "cfg.json").read_text())
    if cfg_patch is not None:
        cfg.update(cfg_patch)
    (folder / "cfg.json").write_text(cfg_text if cfg_text is not None else json.dumps(cfg))
    return folder


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def saelens_cases(root: Path) -> Iterator[Case]:
    from circuitwidgets.features import load_saelens

    bad_cfgs: dict[str, dict[str, Any]] = {
        "d_in string": {"d_in": "12"}, "d_in negative": {"d_in": -12}, "d_in zero": {"d_in": 0},
        "d_in 10**12": {"d_in": 10**12}, "d_sae disagrees": {"d_sae": 31}, "d_sae bool": {"d_sae": True},
        "d_sae float": {"d_sae": 30.0}, "apply_b_dec 'no'": {"apply_b_dec_to_input": "no"},
        "architecture 5": {"architecture": 5}, "architecture unknown": {"architecture": "gelu"},
        "normalize layer_norm": {"normalize_activations": "layer_norm"}, "k 2.7": {"k": 2.7}, "k True": {"k": True},
        "k 0": {"k": 0}, "k past d_sae": {"k": 31}, "metadata a list": {"metadata": []},
        "hook_name number": {"metadata": {"hook_name": 3}}, "hook_name huge layer": {"metadata": {"hook_name":
        "blocks.99999999999999999999.hook_resid_post"}}, "rescale on a jumprelu": {"architecture": "jumprelu",
        "rescale_acts_by_decoder_norm": True}, "rescale 'yes'": {"rescale_acts_by_decoder_norm": "yes"},
        "model_name a dict": {"model_name": {"a": 1}, "metadata": {"hook_name": "blocks.0.hook_resid_post",
        "model_name": {"a": 1}}},
    }  # fmt: skip
    for i, (label, patch) in enumerate(bad_cfgs.items()):
        folder = _saelens_folder(root, f"sl{i}", patch)
        yield "features", f"SAELens cfg {label}", lambda f=folder: load_saelens(f)
    for j, text in enumerate(("[]", "null", "1", '"x"', _nested(100_000), "{", "\xff", '{"d_in": NaN}')):
        folder = _saelens_folder(root, f"slt{j}", cfg_text=text)
        yield "features", f"SAELens cfg.json {text[:12]!r}", lambda f=folder: load_saelens(f)
    outside = _saelens_folder(root, "outside")
    linked = _saelens_folder(root, "linked")
    (linked / "sae_weights.safetensors").unlink()
    (linked / "sae_weights.safetensors").symlink_to(outside / "sae_weights.safetensors")
    yield "features", "SAELens weights symlinked out of the folder", lambda: load_saelens(linked)
    fifo = _saelens_folder(root, "fifo")
    (fifo / "sae_weights.safetensors").unlink()
    os.mkfifo(fifo / "sae_weights.safetensors")
    yield "features", "SAELens weights a FIFO", lambda: load_saelens(fifo)
    fifo_cfg = _saelens_folder(root, "fifocfg")
    (fifo_cfg / "cfg.json").unlink()
    os.mkfifo(fifo_cfg / "cfg.json")
    yield "features", "SAELens cfg.json a FIFO", lambda: load_saelens(fifo_cfg)
    dev = _saelens_folder(root, "dev")
    (dev / "sae_weights.safetensors").unlink()
    (dev / "sae_weights.safetensors").symlink_to("/dev/zero")
    yield "features", "SAELens weights /dev/zero", lambda: load_saelens(dev)
    nan = _saelens_folder(root, "nan")
    tensors = _read(nan / "sae_weights.safetensors")
    tensors["W_dec"][3, 2] = math.nan
    save_file(tensors, str(nan / "sae_weights.safetensors"))
    yield "features", "SAELens NaN weights", lambda: load_saelens(nan)
    big = _saelens_folder(root, "budget")
    yield "features", "SAELens over memory_budget", lambda: load_saelens(big, memory_budget=100)
    yield "features", "SAELens memory_budget 0", lambda: load_saelens(big, memory_budget=0)
    yield "features", "SAELens folder missing", lambda: load_saelens(root / "nowhere")


def _read(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return {k: v.clone() for k, v in load_file(str(path)).items()}


def _header_file(path: Path, header: object, data: bytes = b"") -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def circuit_tracer_cases(root: Path) -> Iterator[Case]:
    from circuitwidgets.features import load_circuit_tracer, save_circuit_tracer

    good = save_circuit_tracer([random_dictionary("transcoder", "relu", layer=0)], root / "ct")
    base = _read(good / "layer_0.safetensors")
    variants: dict[str, dict[str, torch.Tensor]] = {
        "k 2.7": {**base, "k": torch.tensor(2.7)}, "k True": {**base, "k": torch.tensor(True)},
        "k 0": {**base, "k": torch.tensor(0)}, "k 10**6": {**base, "k": torch.tensor(10**6)},
        "k a vector": {**base, "k": torch.tensor([2, 3])}, "NaN b_enc": {**base, "b_enc": base["b_enc"] * math.nan},
        "inf W_dec": {**base, "W_dec": base["W_dec"] * math.inf}, "W_enc transposed": {**base,
        "W_enc": base["W_enc"].t().contiguous()}, "W_dec narrower": {**base, "W_dec": base["W_dec"][:, :5].contiguous()},
        "extra tensor": {**base, "junk": torch.zeros(3)}, "W_enc integer": {**base,
        "W_enc": base["W_enc"].long()}, "no b_dec": {k: v for k, v in base.items() if k != "b_dec"},
    }  # fmt: skip
    for i, (label, tensors) in enumerate(variants.items()):
        path = root / f"ct{i}" / "layer_0.safetensors"
        path.parent.mkdir()
        save_file(tensors, str(path))
        yield "features", f"circuit-tracer {label}", lambda p=path: load_circuit_tracer(p)
    twice = root / "twice"
    twice.mkdir()
    for name in ("layer_0.safetensors", "layer_00.safetensors"):
        save_file(base, str(twice / name))
    yield "features", "circuit-tracer layer_0 and layer_00", lambda: load_circuit_tracer(twice)
    fifo = root / "ctfifo"
    fifo.mkdir()
    os.mkfifo(fifo / "layer_0.safetensors")
    yield "features", "circuit-tracer FIFO layer", lambda: load_circuit_tracer(fifo)
    out = root / "ctout"
    out.mkdir()
    (out / "layer_0.safetensors").symlink_to(good / "layer_0.safetensors")
    yield "features", "circuit-tracer layer symlinked out", lambda: load_circuit_tracer(out)
    headers: dict[str, object] = {
        "header length past file": None, "header a list": [],
        "offsets past the file": {"W_enc": {"dtype": "F32", "shape": [10**6, 10**6], "data_offsets": [0, 4 * 10**12]}},
        "dtype unknown": {"W_enc": {"dtype": "F128", "shape": [2], "data_offsets": [0, 32]}},
        "negative shape": {"W_enc": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 0]}},
        "overlapping tensors": {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
    }  # fmt: skip
    for i, (label, header) in enumerate(headers.items()):
        path = root / f"hdr{i}" / "layer_0.safetensors"
        path.parent.mkdir()
        if header is None:
            path.write_bytes(struct.pack("<Q", 10**15) + b"{}")
        else:
            _header_file(path, header, bytes(16))
        yield "features", f"safetensors {label}", lambda p=path: load_circuit_tracer(p)
    yield "features", "circuit-tracer k=2.7 argument", lambda: load_circuit_tracer(good, k=2.7)  # type: ignore[arg-type]
    yield "features", "circuit-tracer k past d_sae", lambda: load_circuit_tracer(good, k=10**6)


def own_file_cases(root: Path) -> Iterator[Case]:
    from circuitwidgets.features import load, save
    from circuitwidgets.features.files import META_KEY

    path = save(random_dictionary("transcoder", "topk", k=4), root / "own.safetensors")
    base = _read(path)
    config = random_dictionary("transcoder", "topk", k=4).config()
    metas: dict[str, str] = {
        "config []": "[]", "config null": "null", "config deep": _nested(50_000), "d_in string":
        json.dumps({**config, "d_in": "12"}), "d_sae disagrees": json.dumps({**config, "d_sae": 29}),
        "k 2.7": json.dumps({**config, "k": 2.7}), "k True": json.dumps({**config, "k": True}),
        "layer -1": json.dumps({**config, "layer": -1}), "kind unknown": json.dumps({**config, "kind": "crosscoder"}),
    }  # fmt: skip
    for i, (label, meta) in enumerate(metas.items()):
        p = root / f"own{i}.safetensors"
        save_file(base, str(p), metadata={META_KEY: meta})
        yield "features", f"dictionary file {label}", lambda p=p: load(p)
    truncated = root / "truncated.safetensors"
    truncated.write_bytes(path.read_bytes()[:-64])
    yield "features", "dictionary file truncated", lambda: load(truncated)
    yield "features", "dictionary file /dev/zero", lambda: load("/dev/zero")
    yield "features", "dictionary file a folder", lambda: load(root)


# ------------------------------------------------------------------------------------------------- features API
def features_api_cases(root: Path) -> Iterator[Case]:
    from circuitwidgets import features as ft
    from circuitwidgets.features import Dictionary, DictionaryTrainConfig

    model = feature_model()
    d = random_dictionary("transcoder", "topk", k=4, layer=0)
    tokens = torch.randint(1, 40, (3, 8), generator=torch.Generator().manual_seed(0))
    corpus = np.random.default_rng(0).integers(1, 40, 4_000).astype(np.int32)
    yield "features", "Dictionary.random d_sae=10**12", lambda: Dictionary.random("sae", "relu", 12, 10**12, layer=0,
                                                                               in_site="resid_post")  # fmt: skip
    yield "features", "Dictionary.random d_in='12'", lambda: Dictionary.random("sae", "relu", "12", 30, layer=0)  # type: ignore[arg-type]
    yield "features", "Dictionary.random kind 5", lambda: Dictionary.random(5, "relu", 12, 30, layer=0)  # type: ignore[arg-type]
    for label, kwargs in {
        "batch_size 0": {"batch_size": 0}, "batch_size -1": {"batch_size": -1}, "batch_size 1.5": {"batch_size": 1.5},
        "batch_size True": {"batch_size": True}, "exclude 'a'": {"exclude": "a"}, "exclude 10**9": {"exclude": [10**9]},
        "dense_density nan": {"dense_density": math.nan}, "dense_density -1": {"dense_density": -1.0},
    }.items():  # fmt: skip
        yield "features", f"evaluate {label}", lambda kw=kwargs: ft.evaluate(d, model, tokens, **kw)
    for label, bad in {"empty tokens": [], "tokens [[]]": [[]], "one position": [[1]], "float tokens":
                       tokens.double(), "tokens past vocab": tokens + 100, "tokens a string": "abc"}.items():  # fmt: skip
        yield "features", f"evaluate {label}", lambda b=bad: ft.evaluate(d, model, b)
    yield "features", "evaluate dictionary a string", lambda: ft.evaluate("L0.tc", model, tokens)  # type: ignore[arg-type]
    yield "features", "evaluate model None", lambda: ft.evaluate(d, None, tokens)  # type: ignore[arg-type]
    nan_d = random_dictionary("transcoder", "topk", k=4, layer=0)
    with torch.no_grad():
        nan_d.W_dec[0, 0] = math.nan
    yield "features", "evaluate a dictionary made NaN in place", lambda: ft.evaluate(nan_d, model, tokens)
    units = ft.dictionary_features(model, d)
    for label, kwargs in {
        "k 10**8": {"k": 10**8}, "k 0": {"k": 0}, "samples -1": {"samples": -1}, "before -1": {"before": -1},
        "batch_size 0": {"batch_size": 0}, "workers 0": {"workers": 0}, "seed 'a'": {"seed": "a"},
        "samples 10**9": {"samples": 10**9}, "before 10**9": {"before": 10**9},
    }.items():  # fmt: skip
        yield "features", f"max_activating {label}", lambda kw=kwargs: ft.max_activating(model, tokens, units,
                                                                                        progress=False, **kw)  # fmt: skip
    yield "features", "max_activating empty tokens", lambda: ft.max_activating(model, torch.zeros(0, 8, dtype=torch.long),
                                                                               units, progress=False)  # fmt: skip
    yield "features", "max_activating units 'x'", lambda: ft.max_activating(model, tokens, "x", progress=False)  # type: ignore[arg-type]
    yield "features", "neurons layer 99", lambda: ft.neurons(model, 99)
    yield "features", "head_outputs layer -1", lambda: ft.head_outputs(model, -1)
    yield "features", "output_directions units True", lambda: ft.output_directions(model, True)
    yield "features", "logit_effects scale nan", lambda: ft.logit_effects(model, torch.randn(3, 12, dtype=torch.float64),
                                                                        math.nan)  # fmt: skip
    yield "features", "logit_effects NaN directions", lambda: ft.logit_effects(model, torch.full((3, 12), math.nan,
                                                                               dtype=torch.float64))  # fmt: skip
    yield "features", "top_tokens k -1", lambda: ft.top_tokens(torch.randn(3, 40), -1)
    yield "features", "top_tokens k 10**9", lambda: ft.top_tokens(torch.randn(3, 40), 10**9)
    yield "features", "top_tokens NaN effects", lambda: ft.top_tokens(torch.full((3, 40), math.nan), 2)
    yield (
        "features",
        "feature_to_feature layers reversed",
        lambda: ft.feature_to_feature(
            model, random_dictionary("transcoder", "relu", layer=1), random_dictionary("transcoder", "relu", layer=0)
        ),
    )
    train = {"width 10**12": {"width": 10**12}, "k 0": {"k": 0}, "k past width": {"k": 50, "width": 40},
             "layer 99": {"layer": 99}, "tokens -1": {"tokens": -1}, "kind 'crosscoder'": {"kind": "crosscoder"}}  # fmt: skip
    for label, kwargs in train.items():
        args: dict[str, Any] = {"layer": 0, "width": 40, "k": 4, "tokens": 64, **kwargs}
        yield "features", f"train_dictionary {label}", lambda a=args: ft.train_dictionary(
            model, out_dir=root / "train", corpus=corpus, log=None,
            config=DictionaryTrainConfig(batch_size=32, n_ctx=8, buffer_rows=256, threads=1), **a)  # fmt: skip
    configs = {"lr nan": {"lr": math.nan}, "lr -1": {"lr": -1.0}, "batch_size 0": {"batch_size": 0},
               "decay_fraction 2": {"decay_fraction": 2.0}, "n_ctx 0": {"n_ctx": 0}, "betas (2, 0)": {"betas": (2.0, 0.0)},
               "lr 1e30 diverges": {"lr": 1e30}}  # fmt: skip
    for i, (label, patch) in enumerate(configs.items()):
        cfg_args: dict[str, Any] = {"batch_size": 32, "n_ctx": 8, "buffer_rows": 256, "threads": 1, "warmup_steps": 1,
                                    **patch}  # fmt: skip
        yield "features", f"train_dictionary {label}", lambda c=cfg_args, i=i: ft.train_dictionary(
            model, 0, width=40, k=4, tokens=320, out_dir=root / f"train{i}", corpus=corpus, log=None,
            config=DictionaryTrainConfig(**c))  # fmt: skip


# --------------------------------------------------------------------------------------------------------- graphs
def _ct_graph_file(root: Path, name: str, mutate: Callable[[dict[str, Any]], None]) -> Path:
    prompt = ["<bos>", "t1", "t2"]
    nodes = [
        {"node_id": "E_1_1", "feature": 1, "layer": "E", "ctx_idx": 1, "feature_type": "embedding", "jsNodeId": "E_1-1"},
        {"node_id": "0_5_2", "feature": 5, "layer": "0", "ctx_idx": 2, "feature_type": "cross layer transcoder",
         "jsNodeId": "0_5-0", "activation": 1.5, "influence": 0.4},
        {"node_id": "3_7_2", "feature": 7, "layer": "3", "ctx_idx": 2, "feature_type": "logit", "jsNodeId": "L_7-2",
         "token_prob": 0.5, "clerp": 'Output " t7" (p=0.500)'},
    ]  # fmt: skip
    links = [
        {"source": "E_1_1", "target": "0_5_2", "weight": 0.5},
        {"source": "0_5_2", "target": "3_7_2", "weight": 1.0},
    ]
    data: dict[str, Any] = {"metadata": {"slug": "g", "scan": "s", "transcoder_list": [], "prompt_tokens": prompt,
                                         "prompt": "".join(prompt)}, "qParams": {}, "nodes": nodes, "links": links}  # fmt: skip
    mutate(data)
    path = root / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def graph_cases(root: Path) -> Iterator[Case]:
    from circuitwidgets import graphs as gr

    model = mlp_model()
    tcs = random_transcoders(model)
    tokens = torch.tensor([0, 5, 9, 3, 7, 2])
    for label, kwargs in {"max_logits 10**9": {"max_logits": 10**9}, "max_logits -1": {"max_logits": -1},
                          "logit_prob nan": {"logit_prob": math.nan}, "max_feature_nodes 0": {"max_feature_nodes": 0},
                          "batch 0": {"batch": 0}, "node_threshold nan": {"node_threshold": math.nan},
                          "edge_threshold 2": {"edge_threshold": 2.0}, "progress 'yes'": {"progress": "yes"},
                          "batch 2.5": {"batch": 2.5}}.items():  # fmt: skip
        # (a batch past the rows there are is an upper bound, met by fewer: valid, so not a case)
        yield "graphs", f"attribution_graph {label}", lambda kw=kwargs: gr.attribution_graph(model, tcs, tokens, **kw)
    for label, bad in {"empty prompt": torch.zeros(0, dtype=torch.long), "BOS-only prompt": torch.tensor([0]),
                       "empty string": "", "tokens past vocab": torch.tensor([0, 99]), "float tokens":
                       torch.tensor([0.0, 1.0]), "tokens past n_ctx": torch.zeros(40, dtype=torch.long)}.items():  # fmt: skip
        yield "graphs", f"attribution_graph {label}", lambda b=bad: gr.attribution_graph(model, tcs, b)
    nan_tcs = random_transcoders(model)
    nan_tcs[1].W_dec[0, 0] = math.nan
    yield "graphs", "attribution_graph NaN transcoder", lambda: gr.attribution_graph(model, nan_tcs, tokens)
    yield "graphs", "attribution_graph transcoders None", lambda: gr.attribution_graph(model, None, tokens)
    for label, kwargs in {"layer 99": {"layer": 99, "head": 0}, "head 99": {"layer": 0, "head": 99},
                          "query 10**6": {"layer": 1, "head": 0, "query": 10**6}, "key -10**6":
                          {"layer": 1, "head": 0, "key": -(10**6)}, "key after query": {"layer": 1, "head": 0,
                          "query": 2, "key": 4}, "layer True": {"layer": True, "head": 0}}.items():  # fmt: skip
        yield "graphs", f"qk_attribution {label}", lambda kw=kwargs: gr.qk_attribution(model, tcs, tokens, **kw)
    mutations: dict[str, Callable[[dict[str, Any]], None]] = {
        "node index past int32": lambda d: d["nodes"][1].update(node_id="0_99999999999_2"),
        "position past the prompt": lambda d: [n.update(ctx_idx=9, node_id=n["node_id"][:-1] + "9") for n in d["nodes"][1:]],
        "NaN token_prob": lambda d: d["nodes"][2].update(token_prob=math.nan),
        "token_prob 7": lambda d: d["nodes"][2].update(token_prob=7),
        "layer past the logits": lambda d: d["nodes"][1].update(node_id="5_5_2"),
        "NaN activation": lambda d: d["nodes"][1].update(activation=math.nan),
        "link weight inf": lambda d: d["links"][0].update(weight=math.inf),
        "link to a missing node": lambda d: d["links"][0].update(target="0_6_2"),
        "nodes an object": lambda d: d.update(nodes={}),
        "prompt_tokens numbers": lambda d: d["metadata"].update(prompt_tokens=[1, 2, 3]),
        "duplicate node ids": lambda d: d["nodes"].append(dict(d["nodes"][1])),
        "ctx_idx a bool": lambda d: d["nodes"][1].update(ctx_idx=True),
    }  # fmt: skip
    for i, (label, mutate) in enumerate(mutations.items()):
        path = _ct_graph_file(root, f"g{i}", mutate)
        yield "graphs", f"graph JSON {label}", lambda p=path: gr.from_circuit_tracer_json(p)
    for j, text in enumerate(("[]", "null", _nested(100_000), "{", "\xff\xfe")):
        path = root / f"gt{j}.json"
        path.write_text(text, encoding="latin-1")
        yield "graphs", f"graph JSON text {text[:10]!r}", lambda p=path: gr.from_circuit_tracer_json(p)
    yield "graphs", "graph JSON /dev/zero", lambda: gr.from_circuit_tracer_json("/dev/zero")
    fifo = root / "graph.fifo"
    os.mkfifo(fifo)
    yield "graphs", "graph JSON a FIFO", lambda: gr.from_circuit_tracer_json(fifo)
    big = _ct_graph_file(root, "big", lambda d: None)
    yield "graphs", "graph JSON over max_bytes", lambda: gr.from_circuit_tracer_json(big, max_bytes=10)
    yield "graphs", "Graph.load a FIFO", lambda: gr.Graph.load(fifo)
    yield "graphs", "Graph.load /dev/zero", lambda: gr.Graph.load("/dev/zero")
    deep = root / "deep.graph"
    raw = json.dumps({"__metadata__": {"graph": _nested(50_000)}}).encode()
    deep.write_bytes(struct.pack("<Q", len(raw)) + raw)
    yield "graphs", "Graph.load deep metadata", lambda: gr.Graph.load(deep)
    yield from edge_cases(model)


def edge_cases(model: Any) -> Iterator[Case]:
    from circuitwidgets import graphs as gr

    clean = torch.tensor([[0, 5, 9, 3, 7, 2]])
    corrupted = torch.tensor([[0, 6, 9, 3, 8, 2]])

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1, 3] - logits[:, -1, 4]

    for label, kwargs in {"steps 10**6": {"method": "eap-ig-inputs", "steps": 10**6}, "steps 0": {"steps": 0},
                          "method 'x'": {"method": "x"}, "memory_budget 1": {"memory_budget": 1},
                          "memory_budget True": {"memory_budget": True}, "steps 2.5": {"steps": 2.5}}.items():  # fmt: skip
        yield "edge attribution", f"edge_attribution {label}", lambda kw=kwargs: gr.edge_attribution(
            model, clean, corrupted, metric, **kw)  # fmt: skip
    for label, (c, x) in {"clean empty": (torch.zeros(1, 0, dtype=torch.long), corrupted),
                          "corrupted longer": (clean, torch.zeros(1, 9, dtype=torch.long)),
                          "clean past vocab": (clean + 100, corrupted), "corrupted float": (clean, corrupted.double()),
                          "clean a string": ("abc", corrupted), "corrupted past vocab": (clean, corrupted + 100),
                          "corrupted 3-D": (clean, corrupted[None])}.items():  # fmt: skip
        call = naming(label.split()[0], lambda c=c, x=x: gr.edge_attribution(model, c, x, metric))
        yield "edge attribution", f"edge_attribution {label}", call
        call = naming(label.split()[0], lambda c=c, x=x: gr.edge_patch(model, c, x, metric, ("embed", "logits")))
        yield "edge attribution", f"edge_patch {label}", call
    yield "edge attribution", "edge_attribution metric None", lambda: gr.edge_attribution(model, clean, corrupted, None)
    yield "edge attribution", "edge_attribution metric NaN", lambda: gr.edge_attribution(
        model, clean, corrupted, lambda lg: lg[:, -1, 0] * math.nan)  # fmt: skip
    yield "edge attribution", "edge_patch edges 'x'", lambda: gr.edge_patch(model, clean, corrupted, metric, edges="x")  # type: ignore[arg-type]
    yield "edge attribution", "edge_patch ablation 'x'", lambda: gr.edge_patch(model, clean, corrupted, metric,
                                                                                ("embed", "logits"), ablation="x")  # fmt: skip


# --------------------------------------------------------------------------------------------------- superposition
def superposition_cases() -> Iterator[Case]:
    from circuitwidgets import superposition as sp

    for label, kwargs in {"n 10**9": {"n": 10**9, "m": 2}, "lr 1e30": {"n": 5, "m": 2, "lr": 1e30, "steps": 30},
                          "importance 1e308": {"n": 5, "m": 2, "importance": [1e308] * 5, "steps": 30},
                          "sparsity 1": {"n": 5, "m": 2, "sparsity": 1.0}, "sparsity nan": {"n": 5, "m": 2,
                          "sparsity": math.nan}, "batch 10**9": {"n": 5, "m": 2, "batch": 10**9},
                          "instances 10**9": {"n": 5, "m": 2, "instances": 10**9}, "steps 0": {"n": 5, "m": 2,
                          "steps": 0}, "memory_budget 10": {"n": 5, "m": 2, "memory_budget": 10},
                          "importance negative": {"n": 3, "m": 2, "importance": [1, -1, 1]}}.items():  # fmt: skip
        yield "superposition", f"train_toy {label}", lambda kw=kwargs: sp.train_toy(**kw)
    bad_W: dict[str, object] = {"NaN W": np.full((2, 3), math.nan), "inf W": np.full((1, 2, 3), math.inf),
                                "empty W": np.zeros((0, 2, 3)), "bool W": np.ones((2, 3), dtype=bool),
                                "W a string": "W", "W 4-D": np.ones((1, 1, 2, 3)), "object W": np.array([[None, 1]]),
                                "complex W": np.ones((2, 3), dtype=complex)}  # fmt: skip
    for fn in (
        sp.feature_norms,
        sp.superposition,
        sp.dimensions_per_feature,
        sp.feature_dimensionality,
        sp.interference,
    ):
        for label, W in bad_W.items():
            yield "superposition", f"{fn.__name__} {label}", lambda f=fn, w=W: f(w)
    yield "superposition", "represented threshold nan", lambda: sp.represented(np.ones((2, 3)), math.nan)
    yield "superposition", "angles m = 3", lambda: sp.angles(np.ones((3, 4)))
    yield "superposition", "angle_gaps NaN", lambda: sp.angle_gaps(np.array([math.nan, 1.0]))
    for label, kwargs in {"densities 2": {"densities": [2.0]}, "ratios -1": {"ratios": [-1.0]},
                          "tries 0": {"tries": 0}, "n 1": {"n": 1}}.items():  # fmt: skip
        yield "superposition", f"phase_diagram {label}", lambda kw=kwargs: sp.phase_diagram(steps=5, **kw)
    yield "superposition", "importance_decay decay 0", lambda: sp.importance_decay(5, 0.0)
    yield "superposition", "snapshot_steps snapshots -1", lambda: sp.snapshot_steps(10, -1)
    yield "superposition", "snapshot_steps steps 'a'", lambda: sp.snapshot_steps("a", 3)  # type: ignore[arg-type]


def all_cases(root: Path) -> Iterator[Case]:
    """Every case, built under ``root`` (a fresh temporary folder)."""
    for make in (
        saelens_cases,
        circuit_tracer_cases,
        own_file_cases,
        features_api_cases,
        graph_cases,
        more_api_cases,
        resume_cases,
    ):
        yield from make(root)
    yield from superposition_cases()


def more_api_cases(root: Path) -> Iterator[Case]:
    """The rest of the public functions' arguments: files written, graphs pruned and compared, curves."""
    from circuitwidgets import features as ft
    from circuitwidgets import graphs as gr

    d = random_dictionary("transcoder", "relu", layer=0)
    yield "features", "save dictionary a string", lambda: ft.save("L0.tc", root / "x.safetensors")  # type: ignore[arg-type]
    yield "features", "save dtype 'half'", lambda: ft.save(d, root / "x.safetensors", dtype="half")  # type: ignore[arg-type]
    yield "features", "save_saelens dtype int", lambda: ft.save_saelens(d, root / "sl-int", dtype=torch.int64)
    yield "features", "save_circuit_tracer an SAE", lambda: ft.save_circuit_tracer(
        [random_dictionary("sae", "relu", in_site="resid_post")], root / "ct-sae")  # fmt: skip
    yield "features", "save_circuit_tracer layers 1, 0", lambda: ft.save_circuit_tracer(
        [random_dictionary("transcoder", "relu", layer=1), d], root / "ct-order")  # fmt: skip
    good = ft.save(d, root / "good.safetensors")
    yield "features", "load dtype int64", lambda: ft.load(good, dtype=torch.int64)
    yield "features", "load dtype 'float'", lambda: ft.load(good, dtype="float")  # type: ignore[arg-type]
    yield (
        "features",
        "load_circuit_tracer layer -1",
        lambda: ft.load_circuit_tracer(root / "good.safetensors", layer=-1),
    )
    yield "features", "train_dictionaries no specs", lambda: ft.train_dictionaries(feature_model(), [], root / "none",
                                                                                   log=None)  # fmt: skip
    model = mlp_model()
    tcs = random_transcoders(model)
    graph = gr.attribution_graph(model, tcs, torch.tensor([0, 5, 9, 3, 7, 2]))
    for label, kwargs in {"edges -1": {"edges": -1}, "threshold nan": {"threshold": math.nan}, "nodes 2.5":
                          {"nodes": 2.5}, "two at once": {"edges": 3, "nodes": 2}, "none": {},
                          "connected 'yes'": {"edges": 3, "connected": "yes"}}.items():  # fmt: skip
        yield "graphs", f"prune {label}", lambda kw=kwargs: gr.prune(graph, **kw)
    yield "graphs", "agreement k 0", lambda: gr.agreement(graph, graph, k=0)
    yield "graphs", "agreement reference a dict", lambda: gr.agreement(graph, {}, k=3)  # type: ignore[arg-type]
    yield "graphs", "to_circuit_tracer_json transcoders 'x'", lambda: gr.to_circuit_tracer_json(graph, root / "g.json",
                                                                                                transcoders="x")  # fmt: skip
    yield "graphs", "Graph.load missing", lambda: gr.Graph.load(root / "missing.graph")
    clean = torch.tensor([[0, 5, 9, 3, 7, 2]])
    corrupted = torch.tensor([[0, 6, 9, 3, 8, 2]])

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1, 3] - logits[:, -1, 4]

    eap = gr.edge_attribution(model, clean, corrupted, metric)
    for label, fractions in {"fractions [2.0]": [2.0], "fractions [nan]": [math.nan], "fractions 0": 0,
                             "fractions 'all'": "all", "fractions []": []}.items():  # fmt: skip
        yield "edge attribution", f"faithfulness_curve {label}", lambda f=fractions: gr.faithfulness_curve(
            model, eap, clean, corrupted, metric, f)  # fmt: skip
    yield (
        "edge attribution",
        "faithfulness circuit None",
        lambda: gr.faithfulness(model, None, clean, corrupted, metric),
    )  # type: ignore[arg-type]
    yield "edge attribution", "faithfulness ablation 'zero'", lambda: gr.faithfulness(model, eap, clean, corrupted,
                                                                                       metric, ablation="zero")  # fmt: skip


def resume_cases(root: Path) -> Iterator[Case]:
    """A training folder's own files, read on resume: state.json of the wrong shape, or a FIFO."""
    from circuitwidgets import features as ft
    from circuitwidgets.features import DictionaryTrainConfig

    model = feature_model()
    corpus = np.random.default_rng(0).integers(1, 40, 4_000).astype(np.int32)
    config = DictionaryTrainConfig(batch_size=32, n_ctx=8, buffer_rows=256, threads=1)
    for i, (label, text) in enumerate({"state.json []": "[]", "state.json step -3": '{"step": -3}',
                                       "state.json step '2'": '{"step": "2"}', "state.json deep": _nested(50_000)}.items()):  # fmt: skip
        out = root / f"resume{i}"
        out.mkdir()
        (out / "state.json").write_text(text)
        yield "features", f"train_dictionary resumed, {label}", lambda o=out: ft.train_dictionary(
            model, 0, width=40, k=4, tokens=64, out_dir=o, corpus=corpus, log=None, config=config)  # fmt: skip
    fifo = root / "resume-fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "state.json")
    yield "features", "train_dictionary resumed, state.json a FIFO", lambda: ft.train_dictionary(
        model, 0, width=40, k=4, tokens=64, out_dir=fifo, corpus=corpus, log=None, config=config)  # fmt: skip
