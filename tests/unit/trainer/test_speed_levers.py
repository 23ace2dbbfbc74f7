"""The trainer's speed levers give the same numbers as the slow paths they replace.

- the rollout engine's logprobs serve as ``old_logprobs`` (no recompute pass): in sync
  mode they equal the trainer's own forward pass on the same weights, each row at the
  temperature it was sampled at;
- short batches run attention through the grouped attention (matmuls in the inputs'
  dtype, grouped-query heads batched, no repeated K/V): same logprobs and gradients as
  SDPA's math backend and fused kernel in fp32, within bf16 rounding in bf16; models
  that cannot switch attention take the math SDPA backend instead;
- rows that share a prompt run it once (its KV cache repeated): same logprobs and
  gradients as the full forward of every row;
- AdamW runs fused: same parameters as the per-tensor loop;
- the entropy metric comes from the log-probs' own log-softmax pass.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from trainer_testing import grouped_rollouts, make_config, rollouts

from trinity.algorithm.utils import (
    entropy_from_logits,
    logprobs_and_entropy,
    logprobs_from_logits,
)
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.wrapper import ModelWrapper
from trinity.trainer import actor
from trinity.trainer.actor import (
    GROUPED_ATTENTION,
    MATH_ATTENTION_MAX_SCORES,
    attention_backend,
    forward_logprobs,
    grouped_attention,
    response_logits,
    shared_prompt_rows,
)
from trinity.trainer.batch import collate
from trinity.trainer.critic import enable_checkpointing
from trinity.trainer.optim import build_optimizer
from trinity.trainer.trainer import Trainer
from trinity.types import EID, Experience


@pytest.fixture(scope="module")
def trainer(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Trainer:
    cfg = make_config(tiny_model_dir, tmp_path_factory.mktemp("levers"), "grpo")
    return Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)


# each question's rollouts at its own temperature: (1.0, 0.3) is two tasksets' batch
@pytest.mark.parametrize("temperatures", [(1.0, 1.0), (0.7, 0.7), (1.0, 0.3)])
def test_rollout_logprobs_equal_the_trainers_recompute(
    tiny_model_dir: Path, trainer: Trainer, temperatures: tuple[float, float]
) -> None:
    questions = ["What is 2 + 3?", "Name a colour, then count to five."]
    with TransformersEngine(str(tiny_model_dir), dtype="float32", seed=3) as engine:
        model = ModelWrapper(engine, max_response_tokens=8)
        experiences = []
        for task, (question, t) in enumerate(zip(questions, temperatures, strict=True)):
            exps = model.chat([{"role": "user", "content": question}], n=4, temperature=t)
            for run, exp in enumerate(exps):
                exp.eid = EID(batch=0, task=task, run=run)
            experiences += exps
    assert [e.temperature for e in experiences] == [t for t in temperatures for _ in range(4)]
    # prompts of different lengths and responses of 1..8 tokens: padding on both sides
    assert len({e.prompt_length for e in experiences}) == 2
    # the trainer's first-taskset temperature (1.0) is no row's unless the row says so
    batch = collate(experiences, trainer.pad_token_id, trainer.temperature)
    with torch.no_grad():
        recomputed, _ = forward_logprobs(trainer.model, batch, compute_dtype=torch.float32)
    mask = batch.action_mask.bool()
    assert mask.sum() > len(experiences)
    for row in range(batch.size):
        torch.testing.assert_close(
            recomputed[row][mask[row]], batch.old_logprobs[row][mask[row]], atol=2e-4, rtol=0
        )


def _logprobs_and_grads(trainer: Trainer, batch, backend: SDPBackend | None):
    trainer.model.zero_grad(set_to_none=True)
    context = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()
    with context:
        logprobs, _ = forward_logprobs(trainer.model, batch, compute_dtype=torch.float32)
    (logprobs * batch.action_mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    trainer.model.zero_grad(set_to_none=True)
    return logprobs.detach(), grads


@contextlib.contextmanager
def _sdpa(model: torch.nn.Module):
    model.set_attn_implementation("sdpa")
    try:
        yield
    finally:
        model.set_attn_implementation(GROUPED_ATTENTION)


@pytest.mark.parametrize("shared", [False, True])
def test_grouped_attention_matches_sdpa_in_fp32(trainer: Trainer, shared: bool) -> None:
    assert trainer.model.config._attn_implementation == GROUPED_ATTENTION
    # distinct prompts: full forward; grouped prompts: queries after a cached prefix
    batch = collate(grouped_rollouts() if shared else rollouts(8), trainer.pad_token_id)
    assert (shared_prompt_rows(batch) is not None) == shared
    assert isinstance(attention_backend(trainer.model, batch), type(sdpa_kernel([])))
    grouped_logprobs, grouped_grads = _logprobs_and_grads(trainer, batch, None)
    mask = batch.action_mask.bool()
    assert grouped_grads and len(grouped_grads) > 10
    for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
        with _sdpa(trainer.model):
            logprobs, grads = _logprobs_and_grads(trainer, batch, backend)
        torch.testing.assert_close(grouped_logprobs[mask], logprobs[mask], atol=1e-5, rtol=1e-5)
        assert grads.keys() == grouped_grads.keys()
        for name, grad in grouped_grads.items():
            # float32 summation order differs between the kernels (and between CPUs):
            # the absolute tolerance scales with the tensor's largest entry
            scale = max(1.0, float(grads[name].abs().max()))
            torch.testing.assert_close(grad, grads[name], atol=1e-5 * scale, rtol=1e-4, msg=name)


def _attention_inputs(dtype: torch.dtype, queries: int, length: int):
    """Llama-shaped inputs: 6 query heads on 2 key/value heads, rows 1 and 2 left-padded."""
    gen = torch.Generator().manual_seed(0)
    query = 2 * torch.randn(3, queries, 6, 16, generator=gen)
    key, value = torch.randn(2, 3, 2, length, 16, generator=gen)
    padding = torch.ones(3, length, dtype=torch.bool)
    padding[1, :3] = padding[2, :5] = False
    causal = torch.ones(queries, length, dtype=torch.bool).tril(length - queries)
    mask = causal[None, None] & padding[:, None, None, :]
    inputs = [query.to(dtype).transpose(1, 2), key.to(dtype), value.to(dtype)]
    return [t.requires_grad_() for t in inputs], mask


class _Module(torch.nn.Module):
    """What the attention interface reads from the calling layer."""

    num_key_value_groups = 3
    is_causal = True


def _attention(implementation, dtype, queries, length, mask_kind="bool"):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    (query, key, value), mask = _attention_inputs(dtype, queries, length)
    # queries that see only padding: no output that anything reads, none compared
    live = mask.any(-1).transpose(1, 2)[..., None]  # (B, Q, 1, 1)
    if mask_kind == "additive":
        mask = torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))
    elif mask_kind == "none":
        mask = None
    if implementation == "math":
        with sdpa_kernel([SDPBackend.MATH]):
            out, _ = sdpa_attention_forward(_Module(), query, key, value, mask, scaling=0.25)
    else:
        out, _ = grouped_attention(_Module(), query, key, value, mask, scaling=0.25)
    if mask is None:
        live = torch.ones_like(live)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)) * live
    out.backward(grad_out.to(dtype))
    return [(out.detach() * live).float()] + [t.grad.float() for t in (query, key, value)]


@pytest.mark.parametrize("mask_kind", ["bool", "additive", "none"])
@pytest.mark.parametrize("shape", [(12, 12), (5, 12)])  # full sequence; after a cached prefix
def test_grouped_attention_is_sdpa_math_in_fp32_and_within_bf16_rounding(
    mask_kind: str, shape: tuple[int, int]
) -> None:
    exact = _attention("math", torch.float32, *shape, mask_kind)
    for got, want in zip(
        _attention("grouped", torch.float32, *shape, mask_kind), exact, strict=True
    ):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # bf16: matmuls in bf16 with the softmax in fp32; output and gradients of q, k, v
    # within 1% (relative norm, a few bf16 roundings) of the fp32 result, and at most
    # 1.5 times the error of SDPA's math backend (fp32 inside) on the same bf16 inputs
    grouped = _attention("grouped", torch.bfloat16, *shape, mask_kind)
    math = _attention("math", torch.bfloat16, *shape, mask_kind)
    for got, reference, want in zip(grouped, math, exact, strict=True):
        error = float((got - want).norm() / want.norm())
        assert want.norm() > 0 and error < 1e-2, error
        assert error < 1.5 * float((reference - want).norm() / want.norm()), error


def test_grouped_attention_leaves_large_batches_to_sdpa() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    (query, key, value), mask = _attention_inputs(torch.float32, 12, 12)
    module = _Module()
    module.config = type("Config", (), {"num_hidden_layers": MATH_ATTENTION_MAX_SCORES})
    # over the score budget: SDPA's own result, bit for bit (grouped differs in rounding)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
        got, _ = grouped_attention(module, query, key, value, mask, scaling=0.25)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)
    grouped, _ = grouped_attention(_Module(), query, key, value, mask, scaling=0.25)
    assert not torch.equal(grouped, expected)


def test_long_batches_and_checkpointing_keep_the_fused_kernel(trainer: Trainer) -> None:
    config = trainer.model.config
    per_row = config.num_attention_heads * config.num_hidden_layers
    width = int((MATH_ATTENTION_MAX_SCORES / (8 * per_row)) ** 0.5) + 8  # just over budget
    long = collate(rollouts(8), trainer.pad_token_id)
    long.input_ids = torch.zeros((8, width), dtype=torch.long)
    assert isinstance(attention_backend(trainer.model, long), contextlib.nullcontext)
    short = collate(rollouts(8), trainer.pad_token_id)
    enable_checkpointing(trainer.model)
    try:
        assert isinstance(attention_backend(trainer.model, short), contextlib.nullcontext)
    finally:
        disable = getattr(trainer.model, "activation_checkpointing_disable", None)
        (disable or trainer.model.gradient_checkpointing_disable)()
    assert not isinstance(attention_backend(trainer.model, short), contextlib.nullcontext)


def test_fused_adamw_matches_the_loop() -> None:
    torch.manual_seed(0)
    start = [torch.randn(64, 32), torch.randn(32)]
    fused_params = [torch.nn.Parameter(t.clone()) for t in start]
    loop_params = [torch.nn.Parameter(t.clone()) for t in start]
    fused, _ = build_optimizer(
        fused_params, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.99), total_steps=3
    )
    assert fused.defaults["fused"] is True
    loop = torch.optim.AdamW(loop_params, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.99))
    for step in range(3):
        grads = [torch.randn_like(t) * (step + 1) for t in start]
        for params, optimizer in ((fused_params, fused), (loop_params, loop)):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            optimizer.step()
    for a, b, s in zip(fused_params, loop_params, start, strict=True):
        assert not torch.equal(a, s)
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_no_kl_means_no_reference_model(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = make_config(tiny_model_dir, tmp_path, "grpo", algorithm={"kl_loss_fn": "none"})
    assert cfg.algorithm.use_reference is False
    assert Trainer(cfg, model_dir=tiny_model_dir, total_steps=1).ref_model is None


def _full_forward_logits(model: torch.nn.Module, batch) -> torch.Tensor:
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=batch.response_width + 1,
        use_cache=False,
    )
    return out.logits[:, :-1, :]


def _value_and_grads(trainer: Trainer, batch, forward) -> tuple[torch.Tensor, dict]:
    trainer.model.zero_grad(set_to_none=True)
    logits = forward(trainer.model, batch)
    labels = batch.input_ids[:, batch.prompt_width :]
    logprobs = logits.float().log_softmax(-1).gather(-1, labels[..., None]).squeeze(-1)
    (logprobs * batch.action_mask).sum().backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    trainer.model.zero_grad(set_to_none=True)
    return logprobs.detach(), grads


@pytest.mark.parametrize("packed", [True, False])
def test_shared_prompts_match_the_full_forward(
    trainer: Trainer, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # packed: prompts and responses in one sequence; else the prompt pass, then responses
    monkeypatch.setattr(actor, "PACK_SHARED_PROMPTS", packed)
    calls = []
    packed_hidden = actor._packed_hidden
    monkeypatch.setattr(
        actor, "_packed_hidden", lambda *args: calls.append(1) or packed_hidden(*args)
    )
    batch = collate(grouped_rollouts(), trainer.pad_token_id)
    first, inverse = shared_prompt_rows(batch)
    assert first.tolist() == [0, 4, 8]
    assert inverse.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    shared, shared_grads = _value_and_grads(trainer, batch, response_logits)
    assert len(calls) == packed
    full, full_grads = _value_and_grads(trainer, batch, _full_forward_logits)
    mask = batch.action_mask.bool()
    torch.testing.assert_close(shared[mask], full[mask], atol=1e-5, rtol=1e-5)
    assert shared_grads.keys() == full_grads.keys() and len(shared_grads) > 10
    for name, grad in shared_grads.items():
        # the rows' contributions to the shared prompt are summed in another order
        error = (grad - full_grads[name]).norm() / full_grads[name].norm()
        assert full_grads[name].norm() > 0 and error < 1e-5, (name, float(error))


def test_rows_with_distinct_prompts_take_the_full_forward(trainer: Trainer) -> None:
    # rollouts() draws every row's prompt at random: nothing to share
    assert shared_prompt_rows(collate(rollouts(8), trainer.pad_token_id)) is None
    # one response token per row: the prompt pass alone gives the logits
    single = [e for e in grouped_rollouts() if e.response_length == 1]
    batch = collate(single + single, trainer.pad_token_id)
    assert shared_prompt_rows(batch) is not None and batch.response_width == 1
    with torch.no_grad():
        torch.testing.assert_close(
            response_logits(trainer.model, batch), _full_forward_logits(trainer.model, batch)
        )


def test_weights_for_sync_are_copies_in_the_engine_dtype(trainer: Trainer) -> None:
    # float32 config: .to() alone would hand out the live parameters
    weights = trainer.weights_for_sync()
    params = dict(trainer.model.named_parameters())
    assert weights.keys() >= params.keys() - {"lm_head.weight"}
    for name, tensor in weights.items():
        assert tensor.dtype == trainer.compute_dtype
        if name in params:
            assert tensor.data_ptr() != params[name].data_ptr(), name
            assert torch.equal(tensor, params[name].detach()), name


@pytest.mark.parametrize("checkpointing", [False, True])
def test_reference_and_actor_agree_at_the_start_in_bf16(
    tiny_model_dir: Path, tmp_path: Path, checkpointing: bool
) -> None:
    # both models must take the same attention kernel, with or without checkpointing
    cfg = make_config(
        tiny_model_dir,
        tmp_path,
        "grpo",
        model={"dtype": "bfloat16"},
        algorithm={"kl_loss_fn": "k2", "use_reference": True},
        trainer={
            "trainer_config": {
                "actor_rollout_ref": {"model": {"enable_gradient_checkpointing": checkpointing}}
            }
        },
    )
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)
    batch, _ = trainer.prepare(grouped_rollouts())
    logprobs, _ = forward_logprobs(trainer.model, batch, compute_dtype=torch.bfloat16)
    mask = batch.action_mask.bool()
    assert logprobs.requires_grad
    torch.testing.assert_close(logprobs.detach()[mask], batch.ref_logprobs[mask], atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_one_pass_logprobs_and_entropy_match_the_separate_passes(
    dtype: torch.dtype, temperature: float
) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(3, 5, 50, generator=gen)).to(dtype).requires_grad_()
    labels = torch.randint(0, 50, (3, 5), generator=gen)
    weights = torch.randn(3, 5, generator=gen)
    # chunk_size 4 splits the 15 positions unevenly
    logprobs, entropy = logprobs_and_entropy(logits, labels, temperature, chunk_size=4)
    assert not entropy.requires_grad and logprobs.requires_grad
    (grad,) = torch.autograd.grad((logprobs * weights).sum(), logits)
    expected = logprobs_from_logits(logits, labels, temperature, chunk_size=4)
    (expected_grad,) = torch.autograd.grad((expected * weights).sum(), logits)
    torch.testing.assert_close(logprobs, expected, atol=0, rtol=0)
    torch.testing.assert_close(grad, expected_grad, atol=0, rtol=0)
    torch.testing.assert_close(
        entropy, entropy_from_logits(logits.detach(), temperature=temperature), atol=0, rtol=0
    )
    assert float(entropy.min()) > 0


NO_KL = {"kl_loss_fn": "none", "use_reference": False}


def _tied_groups(n: int = 8, group_size: int = 4) -> list[Experience]:
    """``rollouts`` with the rewards of every group but the first tied (zero advantage)."""
    batch = rollouts(n, group_size)
    for exp in batch[group_size:]:
        exp.reward = 1.0
    return batch


@pytest.mark.parametrize("tie_all", [False, True])
def test_rows_without_gradient_are_skipped_with_the_same_update(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tie_all: bool
) -> None:
    batch = _tied_groups()
    if tie_all:
        for exp in batch:
            exp.reward = 0.5
    cfg = make_config(
        tiny_model_dir, tmp_path, "grpo", model={"dtype": "bfloat16"}, algorithm=NO_KL
    )
    results = []
    for skip in (True, False):
        trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=3)
        if not skip:
            monkeypatch.setattr(trainer, "rows_with_gradient", lambda batch: None)
        trainer.train_step(rollouts(8, seed=3))  # moments, so a tied step still moves
        before = {k: v.clone() for k, v in trainer._model_state().items()}
        metrics = trainer.train_step(batch)
        results.append((trainer, metrics, before))
    (fast, fast_metrics, before), (slow, slow_metrics, _) = results
    assert fast_metrics["actor/skipped_rows"] == (7.0 if tie_all else 4.0)
    assert slow_metrics["actor/skipped_rows"] == 0.0
    assert fast_metrics["actor/pg_loss"] == pytest.approx(slow_metrics["actor/pg_loss"], abs=1e-6)
    assert fast_metrics["actor/grad_norm"] == pytest.approx(
        slow_metrics["actor/grad_norm"], rel=1e-2
    )
    if tie_all:
        assert fast_metrics["actor/grad_norm"] == 0.0
    after = fast._model_state()
    for name, weight in slow._model_state().items():
        torch.testing.assert_close(after[name], weight, atol=1e-7, rtol=1e-4, msg=name)
    # the step moved the weights (momentum, even when nothing was trained)
    assert any(not torch.equal(after[k], v) for k, v in before.items())


def test_rows_are_kept_when_a_loss_term_has_gradient_everywhere(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    entropy_loss = {"entropy_loss_fn": "default", "entropy_loss_fn_args": {"entropy_coef": 0.01}}
    for algorithm, extra in (
        ("grpo", {**NO_KL, **entropy_loss}),  # an entropy loss
        ("opmd", NO_KL),  # a loss not linear in the advantages
        ("grpo", {}),  # a KL loss
    ):
        cfg = make_config(tiny_model_dir, tmp_path, algorithm, algorithm=extra)
        trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
        batch, _ = trainer.prepare(_tied_groups())
        assert trainer.rows_with_gradient(batch) is None, (algorithm, extra)
    cfg = make_config(tiny_model_dir, tmp_path, "grpo", algorithm=NO_KL)
    grpo = Trainer(cfg, model_dir=tiny_model_dir, total_steps=2)
    batch, _ = grpo.prepare(_tied_groups())
    assert grpo.rows_with_gradient(batch).tolist() == [0, 1, 2, 3]
