"""The trainer's fused RMS norm, SwiGLU and rotary embedding (trainer/fused_layers.py)
against transformers' own modules: the same bf16 forward, gradients as close to float32
as the bf16 ops' own, and the modules' arithmetic unchanged wherever the kernels do not
apply."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama

from trinity import kernels
from trinity.trainer import fused_layers
from trinity.trainer.fused_layers import fuse_layers

# the tests of the fused path; the plain path (load() returning None) runs everywhere
needs_kernels = pytest.mark.skipif(kernels.load() is None, reason="kernels not built (or off)")


@pytest.fixture(autouse=True)
def _modeling_module_unchanged():
    """fuse_layers changes the model it is given and nothing else: after every test the
    modeling module and its classes are as transformers defined them."""
    before = dict(vars(modeling_llama))
    forwards = {name: vars(cls)["forward"] for name, cls in _llama_classes().items()}
    yield
    assert vars(modeling_llama) == before
    assert {name: vars(cls)["forward"] for name, cls in _llama_classes().items()} == forwards


def _llama_classes() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(modeling_llama).items()
        if isinstance(value, type)
        and value.__module__ == modeling_llama.__name__
        and "forward" in vars(value)
    }


def _model(dtype: torch.dtype) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=96,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # norm weights other than ones, so their scaling is tested
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model.to(dtype)


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor, weights: torch.Tensor):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    (logits.float() * weights).sum().backward()
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters()}
    return logits.detach().float(), grads


def _inputs():
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 300, (3, 17), generator=gen)
    return ids, torch.randn(3, 17, 300, generator=gen)


@needs_kernels
def test_fused_modules_give_the_bf16_forward_and_gradients_within_its_rounding() -> None:
    plain = _model(torch.bfloat16)
    fused = copy.deepcopy(plain)
    reference = copy.deepcopy(plain).float()  # the same bf16 weights, float32 arithmetic
    ids, weights = _inputs()
    plain_logits, plain_grads = _loss_and_grads(plain, ids, weights)  # before the patch
    # 2 layers x (2 norms + 1 MLP + 1 attention's rotary embedding) + the final norm
    assert fuse_layers(fused) == 9
    assert not hasattr(modeling_llama.apply_rotary_pos_emb, "fused_original")
    fused_logits, fused_grads = _loss_and_grads(fused, ids, weights)
    true_logits, true_grads = _loss_and_grads(reference, ids, weights)
    # the forward rounds as the bf16 ops do
    assert (fused_logits - plain_logits).abs().max() <= 0.02 * plain_logits.abs().max()
    torch.testing.assert_close(fused_logits, plain_logits, atol=0.05, rtol=0.02)
    assert fused_grads.keys() == plain_grads.keys()
    for name, true in true_grads.items():
        plain_error = (plain_grads[name] - true).norm() / true.norm()
        fused_error = (fused_grads[name] - true).norm() / true.norm()
        assert true.norm() > 0 and fused_grads[name].norm() > 0, name
        # no further from float32 than the bf16 ops themselves (plus a little slack)
        assert fused_error <= 1.5 * plain_error + 2e-3, (
            name,
            float(fused_error),
            float(plain_error),
        )


@needs_kernels
def test_fused_forward_is_the_modules_own_outside_bf16() -> None:
    plain = _model(torch.float32)
    fused = copy.deepcopy(plain)
    assert fuse_layers(fused) == 9
    ids, weights = _inputs()
    plain_logits, plain_grads = _loss_and_grads(plain, ids, weights)
    fused_logits, fused_grads = _loss_and_grads(fused, ids, weights)
    assert torch.equal(fused_logits, plain_logits)
    for name, grad in plain_grads.items():
        assert torch.equal(fused_grads[name], grad), name


@needs_kernels
def test_fused_modules_survive_a_deepcopy_and_a_state_dict_round_trip() -> None:
    fused = _model(torch.bfloat16)
    fuse_layers(fused)
    twin = copy.deepcopy(fused)
    norm = twin.model.layers[0].input_layernorm
    assert norm.forward.__self__ is norm  # bound to the copy, not to the original
    with torch.no_grad():
        norm.weight.mul_(2)
    ids, _ = _inputs()
    with torch.no_grad():
        assert not torch.equal(twin(input_ids=ids).logits, fused(input_ids=ids).logits)
        twin.load_state_dict(fused.state_dict())
        assert torch.equal(twin(input_ids=ids).logits, fused(input_ids=ids).logits)


def test_without_kernels_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fused_layers.kernels, "load", lambda: None)
    model = _model(torch.bfloat16)
    twin = copy.deepcopy(model)
    assert fuse_layers(model) == 0
    assert all("forward" not in vars(module) for module in model.modules())
    assert not hasattr(modeling_llama.apply_rotary_pos_emb, "fused_original")
    ids, weights = _inputs()  # the modules' own bf16 arithmetic, so the same bits
    got, want = _loss_and_grads(model, ids, weights), _loss_and_grads(twin, ids, weights)
    assert torch.equal(got[0], want[0])
    assert all(torch.equal(got[1][name], grad) for name, grad in want[1].items())


def _count_rotary_kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    apply = fused_layers._Rotary.apply
    monkeypatch.setattr(fused_layers._Rotary, "apply", lambda *a: calls.append(1) or apply(*a))
    return calls


@needs_kernels
def test_fused_rotary_gives_the_bf16_model_its_own_logits_and_gradients_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = _model(torch.bfloat16)
    ids, weights = _inputs()
    expected = _loss_and_grads(plain, ids, weights)
    # the rotary embedding alone: only the attention layers get the fused forward
    forward = fused_layers._fused_attention_forward(modeling_llama.LlamaAttention, {})
    attentions = [m for m in plain.modules() if isinstance(m, modeling_llama.LlamaAttention)]
    for attention in attentions:
        attention.forward = forward.__get__(attention)
    calls = _count_rotary_kernel_calls(monkeypatch)
    got = _loss_and_grads(plain, ids, weights)
    assert len(calls) == 2  # one per layer: the kernel ran
    assert torch.equal(got[0], expected[0])
    for name, grad in expected[1].items():
        assert torch.equal(got[1][name], grad), name
    # fusing again wraps transformers' function, not the fused one
    fuse_layers(plain)
    # (transformers wraps forward in deprecate_kwarg in some releases, not in others)
    rotary = inspect.unwrap(attentions[0].forward.__func__).__globals__["apply_rotary_pos_emb"]
    assert rotary.fused_original is modeling_llama.apply_rotary_pos_emb


@needs_kernels
def test_another_model_in_the_process_keeps_transformers_rotary_embedding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = _model(torch.bfloat16)
    ids, weights = _inputs()
    expected = _loss_and_grads(other, ids, weights)
    fused = _model(torch.bfloat16)
    assert fuse_layers(fused) == 9
    calls = _count_rotary_kernel_calls(monkeypatch)
    _loss_and_grads(fused, ids, weights)
    assert len(calls) == 2
    # a model built after the fused one, and one built before it, run transformers' code
    later = _model(torch.bfloat16)
    for model in (other, later):
        calls.clear()
        logits, grads = _loss_and_grads(model, ids, weights)
        assert calls == []
        assert all("forward" not in vars(m) for m in model.modules())
        assert torch.equal(logits, expected[0])
        for name, grad in expected[1].items():
            assert torch.equal(grads[name], grad), name
