"""circuit-tracer 0.5's attribution graph of a tiny random model, for tests/test_graphs_circuit_tracer.py.

Runs in the peer environment (``make .venv-peers/ctracer/.installed``: circuit-tracer 0.5 with its own
TransformerLens 3 and transformers 4, which our environment's pins exclude), never imported by circuitwidgets.

    python scripts/ctracer_reference.py build OUT_DIR   # weights, transcoders, circuit-tracer's graphs and scores
    python scripts/ctracer_reference.py build OUT_DIR gemma2   # the same for a tiny Gemma 2 (or llama)
    python scripts/ctracer_reference.py validate FILE   # FILE parses as circuit-tracer's graph JSON model
    python scripts/ctracer_reference.py intervene OUT_DIR CASES_JSON   # feature_intervention on build's model

``build`` writes ``model.safetensors`` (TransformerLens state dict), ``transcoders.safetensors`` (circuit-tracer's
per-layer keys, prefixed ``L{layer}.``), ``config.json`` and, for each setting in ``RUNS``,
``graph_{name}.safetensors`` (adjacency, selected and active features, activations, logits, pruning masks)
with the scores in ``config.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

CONFIG = {
    "n_layers": 2, "d_model": 16, "n_ctx": 32, "d_head": 4, "n_heads": 4, "d_mlp": 64, "d_vocab": 40,
    "act_fn": "gelu", "normalization_type": "LN", "positional_embedding_type": "standard",
}  # fmt: skip
#: A tiny Gemma 2 (TransformerLens's gemma-2 flags): norms before and after each sublayer, grouped-query attention,
#: rotary, attention and final soft-caps, a sliding window on alternate layers, a query scale other than √d_head,
#: gated tanh-GELU MLPs; JumpReLU transcoders (as GemmaScope's) reading ln2.hook_normalized, writing hook_mlp_out
#: (after the MLP's output norm), as circuit-tracer's Gemma 2 transcoder sets do.
GEMMA2 = {
    "n_layers": 3, "d_model": 16, "n_ctx": 32, "d_head": 8, "n_heads": 4, "n_key_value_heads": 2, "d_mlp": 48,
    "d_vocab": 40, "act_fn": "gelu_pytorch_tanh", "normalization_type": "RMS", "positional_embedding_type": "rotary",
    "rotary_dim": 8, "rotary_base": 10000.0, "use_attn_scale": True, "attn_scale": 3.0, "eps": 1e-6,
    "use_local_attn": True, "window_size": 4, "attn_types": ["local", "global", "local"],
    "attn_scores_soft_cap": 2.0, "output_logits_soft_cap": 5.0, "gated_mlp": True, "final_rms": True,
    "use_normalization_before_and_after": True,
}  # fmt: skip
#: A tiny Llama (TransformerLens's llama flags: RMS pre-norms, grouped-query attention, rotary, gated SiLU MLPs);
#: ReLU transcoders reading mlp.hook_in (the MLP's input: normalised, times the norm's weight) and writing
#: mlp.hook_out, as circuit-tracer's Llama transcoder sets do.
LLAMA = {
    "n_layers": 2, "d_model": 16, "n_ctx": 32, "d_head": 8, "n_heads": 4, "n_key_value_heads": 2, "d_mlp": 48,
    "d_vocab": 40, "act_fn": "silu", "normalization_type": "RMS", "positional_embedding_type": "rotary",
    "rotary_dim": 8, "eps": 1e-5, "gated_mlp": True, "final_rms": True,
}  # fmt: skip
#: family -> (config, (feature_input_hook, feature_output_hook))
FAMILIES = {
    "gelu": (CONFIG, ("ln2.hook_normalized", "hook_mlp_out")),
    "gemma2": (GEMMA2, ("ln2.hook_normalized", "hook_mlp_out")),
    "llama": (LLAMA, ("mlp.hook_in", "mlp.hook_out")),
}
D_TRANSCODER = 32
TOKENS = [0, 5, 7, 9, 5, 7, 3, 11, 4, 9, 12, 5]
#: name -> (max_feature_nodes, batch_size)
RUNS = {"all": (None, 16), "top40": (40, 8)}


def _tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    vocab = {"<bos>": 0, **{f"t{i}": i for i in range(1, CONFIG["d_vocab"])}}
    inner = Tokenizer(WordLevel(vocab, unk_token="t1"))
    inner.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=inner,
        bos_token="<bos>",
        unk_token="t1",
        pad_token="<bos>",
        name_or_path="tiny",
        add_bos_token=True,
    )


def build(out: Path, family: str = "gelu") -> None:
    """Write the tiny model of ``family`` (:data:`FAMILIES`), its transcoders and circuit-tracer's graphs."""
    from circuit_tracer import attribute
    from circuit_tracer.graph import compute_graph_scores, prune_graph
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from circuit_tracer.transcoder.activation_functions import JumpReLU
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet
    from transformer_lens import HookedTransformerConfig

    torch.manual_seed(0)
    config, hooks = FAMILIES[family]
    gemma2 = family == "gemma2"
    cfg = HookedTransformerConfig(**config, seed=0, device="cpu", tokenizer_prepends_bos=False)
    g = torch.Generator().manual_seed(1)
    d = config["d_model"]
    transcoders = {}
    tensors = {}
    for layer in range(config["n_layers"]):
        act = JumpReLU(torch.randn(D_TRANSCODER, generator=g).abs() * 0.2, 0.1) if gemma2 else torch.relu
        tc = SingleLayerTranscoder(d, D_TRANSCODER, act, layer, device=torch.device("cpu"), dtype=torch.float32)
        with torch.no_grad():
            tc.W_enc.copy_(torch.randn(D_TRANSCODER, d, generator=g) / d**0.5)
            tc.b_enc.copy_(torch.randn(D_TRANSCODER, generator=g) * 0.3 - 0.3)
            tc.W_dec.copy_(torch.randn(D_TRANSCODER, d, generator=g) / D_TRANSCODER**0.5)
            tc.b_dec.copy_(torch.randn(d, generator=g) * 0.1)
        transcoders[layer] = tc
        tensors |= {f"L{layer}.{k}": v.detach().clone() for k, v in tc.state_dict().items()}
    tset = TranscoderSet(transcoders, feature_input_hook=hooks[0], feature_output_hook=hooks[1])
    model = TransformerLensReplacementModel.from_config(cfg, tset, tokenizer=_tokenizer())
    with torch.no_grad():  # weights far from TransformerLens's tiny init, so norms, biases and MLPs all matter
        for name, p in model.named_parameters():
            if name.startswith("transcoders"):
                continue
            if name.endswith(".w"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif name.endswith((".b", "b_Q", "b_K", "b_V", "b_O", "b_in", "b_out", "b_U")):
                # TransformerLens's gated MLP adds b_in after the gate's product (Gemma has none): keep it zero
                p.copy_(0.1 * torch.randn(p.shape, generator=g) * (not (cfg.gated_mlp and name.endswith("b_in"))))
            else:
                p.copy_(
                    torch.randn(p.shape, generator=g) / p.shape[-2] ** 0.5
                    if p.ndim > 1
                    else torch.randn(p.shape, generator=g)
                )
    state = {
        k: v.detach().clone().contiguous()
        for k, v in model.state_dict().items()
        if not k.startswith("transcoders") and v.is_floating_point()
    }
    save_file(state, str(out / "model.safetensors"))
    save_file(tensors, str(out / "transcoders.safetensors"))
    with torch.no_grad():
        save_file({"logits": model(torch.tensor([TOKENS]))[0].float().contiguous()}, str(out / "logits.safetensors"))
    scores = {}
    for name, (max_nodes, batch) in RUNS.items():
        graph = attribute(torch.tensor(TOKENS), model, max_feature_nodes=max_nodes, batch_size=batch)
        pruned = prune_graph(graph, 0.8, 0.98)
        scores[name] = compute_graph_scores(graph)
        save_file(
            {
                "adjacency": graph.adjacency_matrix.float().contiguous(),
                "selected": graph.selected_features.long(),
                "active": graph.active_features.long().contiguous(),
                "activations": graph.activation_values.float(),
                "logit_tokens": torch.tensor([int(i) for _, i in graph.logit_targets])
                if graph.logit_targets and isinstance(graph.logit_targets[0], tuple)
                else torch.as_tensor(graph.logit_token_ids).long(),
                "logit_probabilities": graph.logit_probabilities.float(),
                "node_mask": pruned.node_mask.to(torch.uint8),
                "edge_mask": pruned.edge_mask.to(torch.uint8).contiguous(),
            },
            str(out / f"graph_{name}.safetensors"),
        )
    (out / "config.json").write_text(
        json.dumps({"model": config, "d_transcoder": D_TRANSCODER, "tokens": TOKENS, "runs": RUNS, "scores": scores})
    )


def bench(n_tokens: int, batch: int, max_nodes: int, threads: int, device: str = "cpu") -> None:
    """Time circuit-tracer's ``attribute`` on a TransformerLens model of gelu-2l's shape (random weights) with TopK
    transcoders of the shipped width (2,048 features, k = 32), on ``threads`` threads and ``device``; print one
    ``RESULT`` JSON line (wall and CPU seconds of ``attribute``, the process's peak resident memory, and on a GPU
    its peak allocated memory)."""
    import resource
    import time

    from circuit_tracer import attribute
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from circuit_tracer.transcoder.activation_functions import TopK
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet
    from transformer_lens import HookedTransformerConfig

    torch.set_num_threads(threads)
    shape = {"n_layers": 2, "d_model": 256, "n_ctx": max(256, n_tokens), "d_head": 32, "n_heads": 8, "d_mlp": 1024,
             "d_vocab": 2048, "act_fn": "gelu", "normalization_type": "LN", "positional_embedding_type": "shortformer"}  # fmt: skip
    cfg = HookedTransformerConfig(**shape, seed=0, device=device, tokenizer_prepends_bos=False)
    g = torch.Generator().manual_seed(1)
    transcoders = {}
    for layer in range(2):
        tc = SingleLayerTranscoder(256, 2048, TopK(32), layer, device=torch.device(device), dtype=torch.float32)
        with torch.no_grad():
            dec = torch.randn(2048, 256, generator=g).to(device)
            tc.W_dec.copy_(dec / dec.norm(dim=1, keepdim=True))
            tc.W_enc.copy_(tc.W_dec)
        transcoders[layer] = tc
    tset = TranscoderSet(transcoders, feature_input_hook="ln2.hook_normalized", feature_output_hook="hook_mlp_out")
    global CONFIG
    CONFIG = {**CONFIG, "d_vocab": 2048}
    model = TransformerLensReplacementModel.from_config(cfg, tset, tokenizer=_tokenizer())
    tokens = torch.cat([torch.zeros(1, dtype=torch.long), torch.randint(1, 2048, (n_tokens - 1,), generator=g)])
    cuda = device.startswith("cuda")
    cpu0, start = time.process_time(), time.perf_counter()
    graph = attribute(tokens.to(device), model, max_feature_nodes=max_nodes, batch_size=batch)
    if cuda:
        torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    gpu_peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    nodes = int(graph.adjacency_matrix.shape[0])
    found = {"seconds": seconds, "cpu_seconds": cpu, "peak_gb": peak, "gpu_peak_gb": gpu_peak, "nodes": nodes}
    print("RESULT " + json.dumps(found))


def bench_intervene(n_tokens: int, threads: int, repeats: int = 5) -> None:
    """Time ``feature_intervention`` (attention frozen, one feature zeroed) on a TransformerLens model of gelu-2l's
    shape with random weights and TopK transcoders of the shipped width (4,096, k = 32), ``n_tokens`` tokens, ``threads`` threads:
    one ``RESULT`` JSON line with the median and every time (seconds)."""
    import statistics
    import time

    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from circuit_tracer.transcoder.activation_functions import TopK
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet
    from transformer_lens import HookedTransformerConfig

    torch.set_num_threads(threads)
    shape = {"n_layers": 2, "d_model": 256, "n_ctx": max(256, n_tokens), "d_head": 32, "n_heads": 8, "d_mlp": 1024,
             "d_vocab": 2048, "act_fn": "gelu", "normalization_type": "LN", "positional_embedding_type": "shortformer"}  # fmt: skip
    cfg = HookedTransformerConfig(**shape, seed=0, device="cpu", tokenizer_prepends_bos=False)
    g = torch.Generator().manual_seed(1)
    transcoders = {}
    for layer in range(2):
        tc = SingleLayerTranscoder(256, 4096, TopK(32), layer, device=torch.device("cpu"), dtype=torch.float32)
        with torch.no_grad():
            dec = torch.randn(4096, 256, generator=g)
            tc.W_dec.copy_(dec / dec.norm(dim=1, keepdim=True))
            tc.W_enc.copy_(tc.W_dec)
        transcoders[layer] = tc
    tset = TranscoderSet(transcoders, feature_input_hook="ln2.hook_normalized", feature_output_hook="hook_mlp_out")
    global CONFIG
    CONFIG = {**CONFIG, "d_vocab": 2048}
    model = TransformerLensReplacementModel.from_config(cfg, tset, tokenizer=_tokenizer())
    tokens = torch.cat([torch.zeros(1, dtype=torch.long), torch.randint(1, 2048, (n_tokens - 1,), generator=g)])
    _, acts = model.get_activations(tokens)
    pos = n_tokens // 2
    feature = int(acts[0, pos].argmax())
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        model.feature_intervention(tokens, [(0, pos, feature, 0.0)])
        times.append(time.perf_counter() - start)
    print("RESULT " + json.dumps({"median": statistics.median(times[1:]), "times": times[1:]}))


def intervene(out: Path, cases_json: str) -> None:
    """circuit-tracer's ``feature_intervention`` on the model ``build`` wrote to ``out`` (rebuilt from its files):
    for each case of ``cases_json`` (``[{"interventions": [[layer, pos, feature, value]...], "freeze_attention":
    bool, "constrained": bool}]``) the logits and activations, saved as ``out/intervene.safetensors``."""
    from circuit_tracer.replacement_model.replacement_model_transformerlens import TransformerLensReplacementModel
    from circuit_tracer.transcoder.single_layer_transcoder import SingleLayerTranscoder, TranscoderSet
    from safetensors.torch import load_file
    from transformer_lens import HookedTransformerConfig

    config, hooks = FAMILIES["gelu"]
    cfg = HookedTransformerConfig(**config, seed=0, device="cpu", tokenizer_prepends_bos=False)
    tensors = load_file(str(out / "transcoders.safetensors"))
    transcoders = {}
    for layer in range(config["n_layers"]):
        tc = SingleLayerTranscoder(config["d_model"], D_TRANSCODER, torch.relu, layer, device=torch.device("cpu"),
                                   dtype=torch.float32)  # fmt: skip
        tc.load_state_dict({k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"L{layer}.")})
        transcoders[layer] = tc
    tset = TranscoderSet(transcoders, feature_input_hook=hooks[0], feature_output_hook=hooks[1])
    model = TransformerLensReplacementModel.from_config(cfg, tset, tokenizer=_tokenizer())
    missing = model.load_state_dict(load_file(str(out / "model.safetensors")), strict=False)
    assert not [k for k in missing.missing_keys if not k.startswith("transcoders") and "mask" not in k], missing
    saved = {}
    for i, case in enumerate(json.loads(cases_json)):
        todo = [(int(a), int(b), int(c), float(v)) for a, b, c, v in case["interventions"]]
        constrained = range(config["n_layers"]) if case["constrained"] else None
        logits, acts = model.feature_intervention(
            torch.tensor(TOKENS), todo, constrained_layers=constrained, freeze_attention=case["freeze_attention"]
        )
        saved[f"logits.{i}"] = logits[0].float().contiguous()
        saved[f"activations.{i}"] = acts.float().contiguous()
    save_file(saved, str(out / "intervene.safetensors"))


def validate(path: Path) -> None:
    from circuit_tracer.frontend.graph_models import Model

    model = Model.model_validate_json(path.read_text())
    print(f"valid: {len(model.nodes)} nodes, {len(model.links)} links")


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "bench":
        threads = int(sys.argv[5]) if len(sys.argv) > 5 else 1
        device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
        bench(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), threads, device)
    elif command == "bench_intervene":
        bench_intervene(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    elif command == "intervene":
        intervene(Path(sys.argv[2]), sys.argv[3])
    elif command == "build":
        build(Path(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "gelu")
    else:
        validate(Path(sys.argv[2]))
