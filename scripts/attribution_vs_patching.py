"""Correlation of attribution patching with exact activation patching on attn-only-2l-12h (session 9 note),
on notebook 04's corruption A prompts."""

import numpy as np
import torch

import circuitwidgets as cw
from circuitwidgets import causal

m = cw.load_pretrained("attn-only-2l-12h")
g = torch.Generator().manual_seed(0)
B, n = 8, 20
first = torch.randint(1, 2048, (B, n), generator=g)
other = torch.randint(1, 2048, (B, n), generator=g)
bos = torch.zeros(B, 1, dtype=torch.long)
clean = torch.cat([bos, first, first[:, : n - 1]], 1)
corr = torch.cat([bos, other, first[:, : n - 1]], 1)
met = causal.logit_diff(first[:, n - 1].tolist(), other[:, n - 1].tolist())
for site, by in [("resid_pre", ("layer", "pos")), ("z", ("layer", "head")), ("pattern", ("layer", "head"))]:
    e = causal.patch(m, clean, corr, met, site=site, by=by)
    a = causal.attribution_patch(m, clean, corr, met, site=site, by=by)
    print(
        site,
        by,
        "corr(attribution, exact - corrupted) =",
        round(float(np.corrcoef(a.values.ravel(), (e.values - e.corrupted_value).ravel())[0, 1]), 3),
    )
