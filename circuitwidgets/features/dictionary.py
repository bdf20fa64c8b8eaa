"""A sparse dictionary: an SAE, a transcoder or a skip-transcoder over one layer of a model.

``encode(x) = act(x W_enc + b_enc)`` with ``act`` one of
:data:`~circuitwidgets.features.activation.ACTIVATIONS`; ``decode(f, x) = f W_dec + b_dec``
(``+ x W_skip`` for a skip-transcoder). The encoder never subtracts ``b_dec`` from its
input: a file that does (SAELens's ``apply_b_dec_to_input``) is loaded with
``b_enc - b_dec W_enc`` instead, which is the same map.

A feature is a unit like a neuron: ``(dictionary name, index)``, labelled
``"<name>/<index>"``, where the name is ``L<layer>.tc`` (transcoder),
``L<layer>.stc`` (skip-transcoder) or ``L<layer>.<site>`` (SAE), e.g. ``"L1.tc/123"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from circuitwidgets._checks import check_budget, check_choice, check_int, count_non_finite, device_memory
from circuitwidgets.errors import (
    ArgumentError,
    ArgumentTypeError,
    IncompleteCheckpointError,
    MemoryBudgetError,
    NonFiniteError,
    ShapeError,
)
from circuitwidgets.features.activation import ACTIVATIONS, apply_activation
from circuitwidgets.features.sites import SITE_WIDTHS, read_sites, site_width
from circuitwidgets.model import CircuitModel

#: The kinds of dictionary: what it reads and what it writes.
KINDS = ("sae", "transcoder", "skip-transcoder")
_SHORT = {"transcoder": "tc", "skip-transcoder": "stc"}


def _tensor(name: str, value: object, shape: tuple[int, ...], source: str) -> torch.Tensor:
    """``value`` as a finite floating tensor of ``shape`` (typed errors naming ``source`` and ``name``)."""
    if not isinstance(value, torch.Tensor):
        raise ArgumentTypeError(f"{source}{name}: expected a torch.Tensor, got {type(value).__name__}")
    if not value.dtype.is_floating_point:
        raise ArgumentTypeError(f"{source}{name}: expected a floating-point tensor, got {value.dtype}")
    if tuple(value.shape) != shape:
        raise ShapeError(f"{source}{name}: expected shape {shape}, got {tuple(value.shape)}")
    bad = count_non_finite(value)  # in blocks: no mask the size of the tensor (a 2 GiB file loads in 1.2x)
    if bad:
        raise NonFiniteError(f"{source}{name}: expected finite values, got {bad:,} NaN or infinite entries")
    return value


class Dictionary(nn.Module):
    """A sparse dictionary over one layer of a model (see the module docstring for the maps and names).

    Parameters
    ----------
    kind
        ``"sae"`` (reads and writes ``in_site``), ``"transcoder"`` (reads ``mlp_in``,
        predicts ``mlp_out``) or ``"skip-transcoder"`` (a transcoder plus ``x W_skip``).
    activation
        ``"topk"``, ``"batchtopk"``, ``"jumprelu"`` or ``"relu"``.
    W_enc, b_enc, W_dec, b_dec, W_skip
        ``[d_in, d_sae]``, ``[d_sae]``, ``[d_sae, d_out]``, ``[d_out]``, ``[d_in, d_out]`` (skip-transcoders only).
    layer, in_site, out_site
        Where it reads and writes (sites of :mod:`circuitwidgets.features.sites`); ``out_site``
        defaults to ``in_site`` for an SAE and ``mlp_out`` for a transcoder.
    k
        Active features per row (``topk``; ``batchtopk``: on average over a batch), ``1 <= k <= d_sae``.
    threshold
        ``[d_sae]`` thresholds ``>= 0`` (``jumprelu``; ``batchtopk``'s inference threshold, optional).
    model_name
        The model it was trained on (free text, kept in files).
    source
        What the tensors came from (a file), named in errors.
    """

    threshold: torch.Tensor | None

    def __init__(
        self,
        kind: str,
        activation: str,
        *,
        W_enc: torch.Tensor,
        b_enc: torch.Tensor,
        W_dec: torch.Tensor,
        b_dec: torch.Tensor,
        W_skip: torch.Tensor | None = None,
        layer: int,
        in_site: str | None = None,
        out_site: str | None = None,
        k: int | None = None,
        threshold: torch.Tensor | None = None,
        model_name: str | None = None,
        source: str = "",
    ) -> None:
        super().__init__()
        where = f"{source}: " if source else ""
        self.kind = check_choice(f"{where}kind", kind, KINDS)
        self.activation = check_choice(f"{where}activation", activation, ACTIVATIONS)
        self.layer = check_int(f"{where}layer", layer, 0)
        self.in_site, self.out_site = _sites(self.kind, in_site, out_site, where)
        if not isinstance(W_enc, torch.Tensor) or W_enc.ndim != 2:
            raise ShapeError(f"{where}W_enc: expected a [d_in, d_sae] tensor, got {_describe(W_enc)}")
        d_in, d_sae = W_enc.shape
        check_int(f"{where}width (d_sae)", d_sae, 1)
        if not isinstance(W_dec, torch.Tensor) or W_dec.ndim != 2:
            raise ShapeError(f"{where}W_dec: expected a [d_sae, d_out] tensor, got {_describe(W_dec)}")
        d_out = W_dec.shape[1]
        if self.kind == "sae" and d_out != d_in:
            raise ShapeError(
                f"{where}W_dec: an SAE writes what it reads, expected d_out == d_in == {d_in}, got {d_out}"
            )
        self.W_enc = nn.Parameter(_tensor("W_enc", W_enc, (d_in, d_sae), where))
        self.b_enc = nn.Parameter(_tensor("b_enc", b_enc, (d_sae,), where))
        self.W_dec = nn.Parameter(_tensor("W_dec", W_dec, (d_sae, d_out), where))
        self.b_dec = nn.Parameter(_tensor("b_dec", b_dec, (d_out,), where))
        self.W_skip: nn.Parameter | None = None
        if self.kind == "skip-transcoder":
            if W_skip is None:
                raise ArgumentError(f"{where}W_skip: a skip-transcoder needs W_skip [{d_in}, {d_out}], got None")
            self.W_skip = nn.Parameter(_tensor("W_skip", W_skip, (d_in, d_out), where))
        elif W_skip is not None:
            raise ArgumentError(f"{where}W_skip: only a skip-transcoder has one, got one for kind {self.kind!r}")
        self.k: int | None = None
        if self.activation in ("topk", "batchtopk"):
            if k is None:
                raise ArgumentError(f"{where}k: activation {self.activation!r} needs k in [1, {d_sae}], got None")
            self.k = check_int(f"{where}k", k, 1, d_sae + 1)
        self.register_buffer("threshold", None)
        if threshold is not None:
            if self.activation not in ("jumprelu", "batchtopk"):
                raise ArgumentError(
                    f"{where}threshold: only jumprelu and batchtopk use one, got one for {activation!r}"
                )
            t = _tensor("threshold", threshold, (d_sae,), where)
            if bool((t < 0).any()):
                raise ArgumentError(f"{where}threshold: expected thresholds >= 0, got minimum {float(t.min()):.4g}")
            self.register_buffer("threshold", t.detach().clone())
        elif self.activation == "jumprelu":
            raise ArgumentError(f"{where}threshold: activation 'jumprelu' needs a [{d_sae}] threshold, got None")
        if model_name is not None and not isinstance(model_name, str):
            raise ArgumentTypeError(f"{where}model_name: expected a str or None, got {type(model_name).__name__}")
        self.model_name = model_name

    # ----------------------------------------------------------------- shape
    @property
    def d_in(self) -> int:
        """Width of what it reads."""
        return int(self.W_enc.shape[0])

    @property
    def d_sae(self) -> int:
        """Number of features."""
        return int(self.W_enc.shape[1])

    @property
    def d_out(self) -> int:
        """Width of what it writes."""
        return int(self.W_dec.shape[1])

    @property
    def name(self) -> str:
        """``L<layer>.tc``, ``L<layer>.stc`` or ``L<layer>.<site>``: the key of :func:`load_pretrained`'s mapping."""
        return f"L{self.layer}.{_SHORT.get(self.kind, self.in_site)}"

    def label(self, index: int) -> str:
        """The unit label of feature ``index``, e.g. ``"L1.tc/123"``."""
        return f"{self.name}/{check_int('index', index, 0, self.d_sae)}"

    # ------------------------------------------------------------------ maps
    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """``x W_enc + b_enc`` ``[..., d_sae]``."""
        self._check_input("x", x, self.d_in)
        rows = x.to(self.W_enc.dtype).reshape(-1, self.d_in)
        # (the bias added inside the product: one pass over the [rows, d_sae] result instead of two, ~20 % faster)
        return torch.addmm(self.b_enc, rows, self.W_enc).view(*x.shape[:-1], self.d_sae)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Feature activations ``[..., d_sae]`` (``>= 0``) of inputs ``x`` ``[..., d_in]``.

        ``batchtopk`` without a fitted threshold takes its top-k over all of ``x``'s rows.
        """
        return apply_activation(self.activation, self.pre_activations(x), self.k, self.threshold)

    def decode(self, f: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """Output ``[..., d_out]`` from feature activations ``f``; a skip-transcoder also needs its input ``x``."""
        self._check_input("f", f, self.d_sae)
        out = f.to(self.W_dec.dtype) @ self.W_dec + self.b_dec
        if self.W_skip is not None:
            if x is None:
                raise ArgumentError("x: a skip-transcoder's decode needs its input x (it adds x W_skip), got None")
            self._check_input("x", x, self.d_in)
            out = out + x.to(self.W_skip.dtype) @ self.W_skip
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``decode(encode(x), x)``: the reconstruction (SAE) or prediction (transcoder) ``[..., d_out]``."""
        return self.decode(self.encode(x), x)

    # ------------------------------------------------------------ on a model
    def check_model(self, model: CircuitModel) -> None:
        """Raise a typed error unless this dictionary's layer and sites fit ``model``."""
        if not isinstance(model, CircuitModel):
            raise ArgumentTypeError(f"model: expected a circuitwidgets.CircuitModel, got {type(model).__name__}")
        check_int(f"dictionary {self.name}: layer", self.layer, 0, model.cfg.n_layers)
        for what, site, width in (("in_site", self.in_site, self.d_in), ("out_site", self.out_site, self.d_out)):
            expected = site_width(model.cfg, site, f"dictionary {self.name}: {what}")
            if expected != width:
                dim = "d_in" if what == "in_site" else "d_out"
                raise ShapeError(
                    f"dictionary {self.name}: {dim}: site {site!r} of model {model.name!r} has width {expected}, "
                    f"the dictionary's {dim} is {width}"
                )

    def inputs(self, model: CircuitModel, tokens: torch.Tensor | Sequence[int] | str) -> torch.Tensor:
        """What it reads, ``[batch, pos, d_in]``, from a run of ``model`` on ``tokens``."""
        self.check_model(model)
        t = model._check_tokens(tokens)
        return read_sites(model, t, self.layer, [self.in_site])[self.in_site]

    @torch.no_grad()
    def features(self, model: CircuitModel, tokens: torch.Tensor | Sequence[int] | str) -> torch.Tensor:
        """Feature activations ``[batch, pos, d_sae]`` on a run of ``model`` on ``tokens``."""
        x = self.inputs(model, tokens)
        return self.encode(x.to(self.W_enc.device))

    def config(self) -> dict[str, Any]:
        """Plain description (kind, activation, k, layer, sites, widths, model): what files keep beside the tensors."""
        return {
            "kind": self.kind,
            "activation": self.activation,
            "k": self.k,
            "layer": self.layer,
            "in_site": self.in_site,
            "out_site": self.out_site,
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "d_out": self.d_out,
            "model_name": self.model_name,
        }

    def tensors(self) -> dict[str, torch.Tensor]:
        """The tensors by name (``W_skip`` and ``threshold`` only when present), detached."""
        out = {n: getattr(self, n).detach() for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
        if self.W_skip is not None:
            out["W_skip"] = self.W_skip.detach()
        if self.threshold is not None:
            out["threshold"] = self.threshold.detach()
        return out

    @classmethod
    def random(
        cls,
        kind: str,
        activation: str,
        d_in: int,
        d_sae: int,
        *,
        layer: int,
        in_site: str | None = None,
        d_out: int | None = None,
        k: int | None = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        model_name: str | None = None,
        memory_budget: int | None = None,
    ) -> Dictionary:
        """A freshly initialised dictionary: decoder rows random unit vectors, ``W_enc = W_decᵀ``, biases 0.

        That is the usual start of training (SAELens's and OpenAI's tied initialisation);
        jumprelu and batchtopk thresholds start at 0. A size whose tensors (and the float64
        draw they start from) need more than ``memory_budget`` bytes (``None``: this machine's
        memory) is refused before anything is allocated.
        """
        d_in = check_int("d_in", d_in, 1)
        d_sae = check_int("width (d_sae)", d_sae, 1)
        d_out = d_in if d_out is None else check_int("d_out", d_out, 1)
        check_choice("kind", kind, KINDS)
        size = torch.empty((), dtype=dtype).element_size()
        need = (
            d_sae * d_out * (8 + size) + d_in * d_sae * size + (d_in * d_out * size if kind == "skip-transcoder" else 0)
        )
        limit = (
            device_memory(torch.device("cpu"))
            if memory_budget is None
            else check_budget("memory_budget", memory_budget)
        )
        if need > limit:
            raise MemoryBudgetError(
                f"width (d_sae): a {kind} of {d_sae:,} features over d_in={d_in:,} needs about {need:,} bytes, more "
                f"than {'memory_budget' if memory_budget is not None else 'this machine'} ({limit:,} bytes)"
            )
        g = torch.Generator().manual_seed(seed)
        W_dec = torch.randn(d_sae, d_out, generator=g, dtype=torch.float64)
        W_dec = (W_dec / W_dec.norm(dim=1, keepdim=True)).to(dtype)
        W_enc = W_dec.T.clone() if d_out == d_in else torch.randn(d_in, d_sae, generator=g).to(dtype) / d_in**0.5
        return cls(
            kind,
            activation,
            W_enc=W_enc.contiguous(),
            b_enc=torch.zeros(d_sae, dtype=dtype),
            W_dec=W_dec,
            b_dec=torch.zeros(d_out, dtype=dtype),
            W_skip=torch.zeros(d_in, d_out, dtype=dtype) if kind == "skip-transcoder" else None,
            threshold=torch.zeros(d_sae, dtype=dtype) if activation == "jumprelu" else None,
            layer=layer,
            in_site=in_site,
            k=k,
            model_name=model_name,
        )

    @classmethod
    def from_tensors(
        cls, config: Mapping[str, Any], tensors: Mapping[str, torch.Tensor], source: str = ""
    ) -> Dictionary:
        """Inverse of :meth:`config` and :meth:`tensors` (``source``, e.g. a file, is named in errors)."""
        where = f"{source}: " if source else ""
        missing = [n for n in ("W_enc", "b_enc", "W_dec", "b_dec") if n not in tensors]
        if missing:
            raise IncompleteCheckpointError(f"{where}tensors: expected W_enc, b_enc, W_dec, b_dec, missing {missing}")
        absent = [n for n in ("kind", "activation", "layer") if n not in config]
        if absent:
            raise ArgumentError(f"{where}config: expected kind, activation and layer, missing {absent}")
        return cls(
            config["kind"],
            config["activation"],
            W_enc=tensors["W_enc"],
            b_enc=tensors["b_enc"],
            W_dec=tensors["W_dec"],
            b_dec=tensors["b_dec"],
            W_skip=tensors.get("W_skip"),
            threshold=tensors.get("threshold"),
            layer=config["layer"],
            in_site=config.get("in_site"),
            out_site=config.get("out_site"),
            k=config.get("k"),
            model_name=config.get("model_name"),
            source=source,
        )

    def extra_repr(self) -> str:
        k = f", k={self.k}" if self.k is not None else ""
        return f"{self.name}: {self.kind} {self.in_site}->{self.out_site}, {self.activation}{k}, d_in={self.d_in}, d_sae={self.d_sae}"

    def _check_input(self, name: str, x: object, width: int) -> None:
        if not isinstance(x, torch.Tensor):
            raise ArgumentTypeError(f"{name}: expected a torch.Tensor [..., {width}], got {type(x).__name__}")
        if x.ndim < 1 or x.shape[-1] != width:
            raise ShapeError(f"{name}: expected shape [..., {width}], got {tuple(x.shape)}")


def _sites(kind: str, in_site: str | None, out_site: str | None, where: str) -> tuple[str, str]:
    """Checked ``(in_site, out_site)`` with the kind's defaults."""
    if kind == "sae":
        site = in_site or out_site
        if site is None:
            raise ArgumentError(f"{where}in_site: an SAE needs the site it reads and writes, got None")
        check_choice(f"{where}in_site", site, tuple(SITE_WIDTHS))
        if out_site is not None and out_site != site:
            raise ArgumentError(f"{where}out_site: an SAE writes where it reads ({site!r}), got {out_site!r}")
        return site, site
    pair = (in_site or "mlp_in", out_site or "mlp_out")
    if pair != ("mlp_in", "mlp_out"):
        raise ArgumentError(f"{where}in_site/out_site: a {kind} reads 'mlp_in' and writes 'mlp_out', got {pair}")
    return pair


def _describe(value: object) -> str:
    return f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
