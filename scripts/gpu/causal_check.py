"""The causal engine on CUDA: same numbers as on CPU, and timings at GPT-2-small shape (random weights)."""

import time

import numpy as np
import torch

import circuitwidgets as cw
from circuitwidgets import causal
from circuitwidgets.model import CircuitModel, ModelConfig

print(torch.__version__, torch.cuda.get_device_name(0))
cpu = cw.load_pretrained("gelu-2l", dtype=torch.float64)
gpu = cw.load_pretrained("gelu-2l", dtype=torch.float64, device="cuda")
g = torch.Generator().manual_seed(0)
clean = torch.randint(1, 2048, (2, 10), generator=g)
corr = clean.clone()
corr[:, 3] = torch.randint(1, 2048, (2,), generator=g)
metric = causal.logit_diff(clean[:, -1].tolist(), [5, 6])


def both(fn):
    a = fn(cpu, clean, corr)
    b = fn(gpu, clean.cuda(), corr.cuda())
    return float(np.nanmax(np.abs(np.asarray(a) - np.asarray(b))))


for site, by in [
    ("resid_pre", ("layer", "pos")),
    ("z", ("layer", "head")),
    ("pattern", ("layer", "head")),
    ("mlp_post", ("layer", "neuron")),
]:
    print(
        "patch",
        site,
        by,
        "max|cpu-gpu|",
        both(lambda m, a, b, site=site, by=by: causal.patch(m, a, b, metric, site=site, by=by)),
    )
print("path_patch k", both(lambda m, a, b: causal.path_patch(m, a, b, metric, sender=(0, 3), via="k")))
print("ablate mean", both(lambda m, a, b: causal.ablate(m, a, metric, kind="mean", reference=b)))
print("attribution_patch", both(lambda m, a, b: causal.attribution_patch(m, a, b, metric)))
print(
    "logit_attribution head",
    both(lambda m, a, b: causal.logit_attribution(m, a, (a[:, -1], torch.tensor([5, 6])), by="head")),
)
print("logit_lens", both(lambda m, a, b: causal.logit_lens(m, a, k=3).top_log_probs))
print("per_token_loss", both(lambda m, a, b: causal.per_token_loss(m, a)))

# GPT-2-small shape, random weights, float32
torch.manual_seed(0)
L, H, d, dh, V, P, B = 12, 12, 768, 64, 50257, 12, 2
cfg = ModelConfig(
    L,
    H,
    d,
    dh,
    V,
    1024,
    positional_embedding_type="standard",
    normalization="ln_pre",
    has_mlp=True,
    d_mlp=3072,
    act_fn="gelu_new",
    architecture="gpt2",
)
w = {
    "W_E": torch.randn(V, d) * 0.1,
    "W_pos": torch.randn(1024, d) * 0.02,
    "W_Q": torch.randn(L, H, d, dh) / d**0.5,
    "W_K": torch.randn(L, H, d, dh) / d**0.5,
    "W_V": torch.randn(L, H, d, dh) / d**0.5,
    "W_O": torch.randn(L, H, dh, d) / (H * dh) ** 0.5,
    "W_U": torch.randn(d, V) / d**0.5,
    "W_in": torch.randn(L, d, 3072) / d**0.5,
    "W_out": torch.randn(L, 3072, d) / 3072**0.5,
    "b_in": torch.zeros(L, 3072),
    "b_out": torch.zeros(L, d),
}
m = CircuitModel(cfg, {k: v.cuda() for k, v in w.items()}, name="gpt2-small-shape")
clean = torch.randint(0, V, (B, P), device="cuda")
corr = clean.clone()
corr[:, 5] = torch.randint(0, V, (B,), device="cuda")
met = causal.logit_diff(clean[:, -1].tolist(), [11, 12])
for site, by in [("resid_pre", ("layer", "pos")), ("pattern", ("layer", "head")), ("z", ("layer", "head"))]:
    causal.patch(m, clean, corr, met, site=site, by=by)
    torch.cuda.synchronize()
    t = time.perf_counter()
    r = causal.patch(m, clean, corr, met, site=site, by=by)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    # naive: one forward per cell at batch B (TransformerLens's way) with a hook
    n = int(np.prod(r.shape))
    per = []
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        m.run_with_hooks(corr, {(site, 0): lambda v: v})
        torch.cuda.synchronize()
        per.append(time.perf_counter() - t0)
    print(
        f"gpt2-shape {site} {by}: ours {dt:.3f} s for {n} cells; one forward per cell would take ~{n * min(per):.3f} s ({n * min(per) / dt:.1f}x)"
    )
print("peak cuda MB", torch.cuda.max_memory_allocated() / 2**20)
