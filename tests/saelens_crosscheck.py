"""Run inside an environment with ``sae_lens`` (``.venv-saelens``, built by ``make .venv-saelens/.installed``).

Prints one JSON object comparing, on a small random float64 model:

- dictionaries we write (``save_saelens``) loaded by ``sae_lens.SAE.load_from_disk``: their
  encodings and outputs against ours (max absolute difference);
- SAEs written by ``sae_lens`` (``save_model``) loaded here: the same comparison;
- SAELens's own evaluation functions (``get_recons_loss``,
  ``get_sparsity_and_variance_metrics``, run on our model through a small TransformerLens-like
  adapter, on the same token batches and excluding the same token) against
  ``circuitwidgets.features.evaluation``: every number, both sides.

``tests/test_features_saelens.py`` runs it and checks the tolerances.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from sae_lens import SAE
from sae_lens.evals import get_downstream_reconstruction_metrics, get_sparsity_and_variance_metrics
from sae_lens.training.activation_scaler import ActivationScaler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _features import mlp_model, random_dictionary

from circuitwidgets.features.evaluation import evaluate
from circuitwidgets.features.saelens_format import load_saelens, save_saelens

SITES = {"hook_resid_post": "resid_post", "hook_resid_pre": "resid_pre", "hook_mlp_out": "mlp_out"}


def _site(hook_name: str) -> tuple[str, int]:
    _, layer, name = hook_name.split(".", 2)
    return SITES[name], int(layer)


class Adapter:
    """The slice of HookedTransformer's interface that SAELens's evals call, over a CircuitModel."""

    tokenizer = None

    def __init__(self, model: Any) -> None:
        self.model = model

    @staticmethod
    def _losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)

    def __call__(self, tokens: torch.Tensor, return_type: str = "both", loss_per_token: bool = True, **_: Any) -> Any:
        logits = self.model(tokens)
        return logits, self._losses(logits, tokens)

    def run_with_hooks(self, tokens: torch.Tensor, fwd_hooks: Any = (), **_: Any) -> Any:
        hooks = {_site(name): (lambda v, fn=fn: fn(v, hook=None)) for name, fn in fwd_hooks}
        logits = self.model.run_with_hooks(tokens, hooks)
        return logits, self._losses(logits, tokens)

    def run_with_cache(self, tokens: torch.Tensor, names_filter: Any = (), **_: Any) -> Any:
        wanted = list(names_filter)
        logits, cache = self.model.run_with_cache(tokens, names=sorted({_site(n)[0] for n in wanted}))
        return logits, {n: cache[_site(n)] for n in wanted}


class Store:
    """Hands out the same token rows in order (SAELens's ActivationsStore.get_batch_tokens)."""

    def __init__(self, tokens: torch.Tensor) -> None:
        self.tokens, self.at = tokens, 0

    def get_batch_tokens(self, n: int) -> torch.Tensor:
        rows = self.tokens[self.at : self.at + n]
        self.at += n
        return rows


def _compare_files(tmp: Path) -> dict[str, float]:
    x = torch.randn(6, 12, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    out: dict[str, float] = {}
    cases = [("sae", "topk"), ("sae", "jumprelu"), ("sae", "relu"), ("transcoder", "relu"),
             ("skip-transcoder", "relu"), ("transcoder", "jumprelu"), ("skip-transcoder", "jumprelu")]  # fmt: skip
    for kind, activation in cases:
        ours = random_dictionary(kind, activation, k=5, layer=1)
        theirs = SAE.load_from_disk(
            save_saelens(ours, tmp / f"{kind}-{activation}", dtype=torch.float64), dtype="float64"
        )
        out[f"ours->saelens {kind}/{activation} encode"] = float((theirs.encode(x) - ours.encode(x)).abs().max())
        out[f"ours->saelens {kind}/{activation} forward"] = float((theirs(x) - ours(x)).abs().max())
    # SAELens's TopK training saves rescale_acts_by_decoder_norm: true, its decoder rows of norm 1 ("unit");
    # the flag with other norms is read too (folded as SAELens's fold_W_dec_norm does)
    rescaled = {"k": 4, "rescale_acts_by_decoder_norm": True}
    for name, arch, extra in (("topk", "topk", {"k": 4}), ("standard", "standard", {}), ("jumprelu", "jumprelu", {}),
                              ("topk rescaled", "topk", rescaled), ("topk rescaled unit", "topk", rescaled)):  # fmt: skip
        cfg = {"architecture": arch, "d_in": 12, "d_sae": 30, "dtype": "float64", "apply_b_dec_to_input": True,
               "metadata": {"hook_name": "blocks.0.hook_resid_post"}, **extra}  # fmt: skip
        sae = SAE.from_dict(cfg)
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for p in sae.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)
            if arch == "jumprelu":
                sae.threshold.abs_()
            if name.endswith("unit"):
                sae.W_dec.div_(sae.W_dec.norm(dim=1, keepdim=True))
        folder = tmp / f"theirs-{name.replace(' ', '-')}"
        sae.save_model(folder)
        read = load_saelens(folder, dtype=torch.float64)
        out[f"saelens->ours {name} encode"] = float((read.encode(x) - sae.encode(x)).abs().max())
        out[f"saelens->ours {name} forward"] = float((read(x) - sae(x)).abs().max())
    return out


def _compare_evals(tmp: Path) -> dict[str, dict[str, float]]:
    model = mlp_model(d_vocab=40)
    tokens = torch.randint(1, 40, (8, 10), generator=torch.Generator().manual_seed(1))
    tokens[:, 0] = 0
    tokens[3, 5] = 0
    ours = random_dictionary("sae", "topk", d_sae=40, k=6, layer=0, in_site="resid_post")
    sae = SAE.load_from_disk(save_saelens(ours, tmp / "eval", dtype=torch.float64), dtype="float64")
    adapter, scaler = Adapter(model), ActivationScaler()
    recons = get_downstream_reconstruction_metrics(
        sae, adapter, Store(tokens), scaler, compute_kl=True, compute_ce_loss=True, n_batches=2,  # type: ignore[arg-type]
        eval_batch_size_prompts=4, ignore_tokens=[0],
    )  # fmt: skip
    sparsity, features = get_sparsity_and_variance_metrics(
        sae, adapter, Store(tokens), scaler, n_batches=2, compute_l2_norms=True, compute_sparsity_metrics=True,  # type: ignore[arg-type]
        compute_variance_metrics=True, compute_featurewise_density_statistics=True, eval_batch_size_prompts=4,
        model_kwargs={}, ignore_tokens=[0],
    )  # fmt: skip
    mine = evaluate(ours, model, tokens, batch_size=4, exclude=[0])
    pairs = {
        "l0": sparsity["l0"], "l1": sparsity["l1"], "mse": sparsity["mse"], "cosine": sparsity["cossim"],
        "explained_variance": sparsity["explained_variance"],
        "explained_variance_legacy": sparsity["explained_variance_legacy"],
        "ce_loss_clean": recons["ce_loss_without_sae"], "ce_loss_spliced": recons["ce_loss_with_sae"],
        "ce_loss_ablated": recons["ce_loss_with_ablation"], "ce_loss_recovered": recons["ce_loss_score"],
        "kl_spliced": recons["kl_div_with_sae"], "kl_ablated": recons["kl_div_with_ablation"],
        "kl_score": recons["kl_div_score"],
    }  # fmt: skip
    result = {name: {"saelens": float(v), "ours": float(mine[name])} for name, v in pairs.items()}
    density = torch.tensor(features["feature_density"], dtype=torch.float64)
    result["feature_density_max_difference"] = {
        "saelens": 0.0, "ours": float((density - torch.tensor(mine["feature_density"])).abs().max())
    }  # fmt: skip
    return result


def main() -> None:
    import sae_lens

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        report = {"sae_lens": sae_lens.__version__, "torch": torch.__version__,
                  "files": _compare_files(tmp), "evals": _compare_evals(tmp)}  # fmt: skip
    print(json.dumps(report))


if __name__ == "__main__":
    main()
