"""The forward pass's fast paths compute the same numbers as the plain ones (float64, every family).

- a last layer whose logits are read at a few positions, with nothing hooked or kept there, computes its queries,
  attention output, MLP and final norm at those positions only (keys and values at all): equal to the whole pass's
  logits there, positions in any order and repeated, in a suffix-only pass too;
- the fused kernels (LayerNorm when its scale is neither kept nor hooked, the heads' summed output as one product,
  the bias inside the product, the sigmoid form of the tanh GELU for ``gelu_new``) equal the written-out steps a cached
  run takes; the GELU also in float32 (against torch's fused kernel) and under autograd.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from families import CASES, VOCAB

from circuitwidgets.model import forward, sublayers
from circuitwidgets.model.cache import Recorder
from circuitwidgets.sources.huggingface import from_hf


def _gpt2() -> Any:
    """A tiny random GPT-2 (LayerNorm with random weights, biases, learned positions, gelu_new), float64 eager."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    hf = transformers.GPT2LMHeadModel(config).double().eval()  # type: ignore[no-untyped-call]
    hf.config._attn_implementation = "eager"
    with torch.no_grad():
        for module in hf.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.2)
                module.bias.normal_(0.0, 0.2)
    return hf


BUILDERS = [(c.id, c.build) for c in CASES] + [("gpt2", _gpt2)]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The ``dest`` each attention call was given (``None``: every position asked)."""
    seen: list[Any] = []
    real = forward.chunked_attention

    def spy(*args: Any) -> torch.Tensor:
        seen.append(args[7] if len(args) > 7 else None)
        return real(*args)

    monkeypatch.setattr(sublayers, "chunked_attention", spy)
    return seen


@pytest.mark.parametrize("build", [b for _, b in BUILDERS], ids=[i for i, _ in BUILDERS])
def test_the_last_layer_at_the_read_positions_equals_the_whole_pass(build: Any, asked: list[Any]) -> None:
    model = from_hf(build(), dtype=torch.float64)
    tokens = torch.randint(3, VOCAB, (3, 11), generator=torch.Generator().manual_seed(1))
    full, cache = model.run_with_cache(tokens)
    for read in ([10], [3, 9, 3, 10], [0]):
        asked.clear()
        got = model.run_from(tokens, 0, None, Recorder({}, set()), positions=read)
        assert asked[-1] == sorted(set(read))  # the last layer asked at the read positions only
        torch.testing.assert_close(got, full[:, read], atol=1e-12, rtol=0)
    start = model.restart_layer(1)  # a suffix-only pass from position 4, earlier keys and values from the cache

    def prefix(layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return cache["k", layer][:, :4], cache["v", layer][:, :4]

    asked.clear()
    got = model.run_from(tokens, start, cache["resid_pre", start][:, 4:], Recorder({}, set(), None, prefix, 4),
                         positions=[10, 6])  # fmt: skip
    assert asked[-1] == [6, 10]
    torch.testing.assert_close(got, full[:, [10, 6]], atol=1e-12, rtol=0)


def test_a_hooked_or_kept_last_layer_is_computed_whole(asked: list[Any]) -> None:
    model = from_hf(CASES[0].build(), dtype=torch.float64)
    tokens = torch.randint(3, VOCAB, (2, 6), generator=torch.Generator().manual_seed(2))
    last = model.cfg.n_layers - 1
    model.run_from(tokens, 0, None, Recorder({}, set(), {("z", last): lambda z: z}), positions=[5])
    model.run_from(tokens, 0, None, Recorder({}, {"resid_post"}), positions=[5])
    assert asked[last] is None and asked[2 * model.cfg.n_layers - 1] is None


def test_the_fused_kernels_equal_the_written_out_steps() -> None:
    model = from_hf(_gpt2(), dtype=torch.float64)  # LayerNorm, biases, gelu_new
    tokens = torch.randint(3, VOCAB, (3, 9), generator=torch.Generator().manual_seed(3))
    fast = model(tokens)  # nothing kept: fused LayerNorm, one product for the heads' sum
    slow, _ = model.run_with_cache(tokens)  # everything kept: the steps written out, each head's result
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)
    x = torch.linspace(-12, 12, 100_001, dtype=torch.float64)
    torch.testing.assert_close(forward.activation("gelu_new", x), forward._gelu_new(x), atol=4e-15, rtol=0)


def test_the_tanh_gelu_in_float32_and_under_autograd_is_torchs() -> None:
    x = torch.linspace(-12, 12, 100_001, dtype=torch.float64)
    fused = torch.nn.functional.gelu(x, approximate="tanh")
    ours = forward.gelu_tanh(x.float()).double()
    assert float((ours - fused).abs().max()) < 2e-6  # float32 rounding on values up to 12
    y = x[::97].clone().requires_grad_(True)
    forward.gelu_tanh(y).sum().backward()  # type: ignore[no-untyped-call]
    z = x[::97].clone().requires_grad_(True)
    torch.nn.functional.gelu(z, approximate="tanh").sum().backward()  # type: ignore[no-untyped-call]
    assert y.grad is not None and z.grad is not None
    torch.testing.assert_close(y.grad, z.grad, atol=1e-14, rtol=0)
    special = torch.tensor([0.0, 1e4, -1e4, float("inf")])
    torch.testing.assert_close(forward.gelu_tanh(special), torch.nn.functional.gelu(special, approximate="tanh"))
    big = torch.randn(forward.GELU_SIGMOID_MOST + 1)  # past the caches: torch's fused kernel, to the bit
    assert torch.equal(forward.gelu_tanh(big), torch.nn.functional.gelu(big, approximate="tanh"))
