"""bf16 training weights with fp32 masters in the optimizer (trinity/trainer/precision.py)
against the slow path they replace: fp32 parameters under bf16 autocast.

The tiny model's random weights give gradients of ~1e-4 per element, where bf16 rounding
of activations moves individual updates; the updates of the two paths agree in direction
(cosine similarity of each tensor's update > 0.95), the losses to 1e-4 and the gradient
norms to 5%.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_testing import make_config, rollouts

from trinity import kernels
from trinity.trainer import checkpoint as ckpt
from trinity.trainer.precision import MasterWeights
from trinity.trainer.trainer import Trainer


def bf16_config(model_dir: Path, tmp_path: Path, micro: int = 8):
    return make_config(
        model_dir,
        tmp_path,
        "grpo",
        model={"dtype": "bfloat16"},
        trainer={
            "trainer_config": {
                "actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": micro}}
            }
        },
    )


def fp32_weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().clone() for k, v in trainer._model_state().items()}


def test_bf16_weights_train_like_fp32_weights_under_autocast(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = bf16_config(tiny_model_dir, tmp_path)
    fast = Trainer(cfg, model_dir=tiny_model_dir, total_steps=4)
    slow = Trainer(cfg, model_dir=tiny_model_dir, total_steps=4, bf16_weights=False)
    assert fast.master is not None and slow.master is None
    assert {p.dtype for p in fast.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in slow.model.parameters()} == {torch.float32}
    start = fp32_weights(slow)
    assert all(torch.equal(v, start[k]) for k, v in fp32_weights(fast).items())
    for seed in (1, 2):
        batch = rollouts(8, seed=seed)
        got, expected = fast.train_step(batch), slow.train_step(batch)
        assert got["actor/pg_loss"] == pytest.approx(expected["actor/pg_loss"], abs=1e-4)
        assert got["actor/grad_norm"] == pytest.approx(expected["actor/grad_norm"], rel=5e-2)
    after_fast, after_slow = fp32_weights(fast), fp32_weights(slow)
    for name, before in start.items():
        moved_fast, moved_slow = after_fast[name] - before, after_slow[name] - before
        assert float(moved_slow.abs().max()) > 1e-4, name  # two Adam steps of ~lr
        cosine = torch.nn.functional.cosine_similarity(
            moved_fast.flatten(), moved_slow.flatten(), dim=0
        )
        assert float(cosine) > 0.95, (name, float(cosine))
    # the bf16 parameters are the masters rounded
    params = dict(fast.model.named_parameters())
    for name, master in fast._model_state().items():
        if name in params:
            assert torch.equal(params[name].detach(), master.to(torch.bfloat16)), name


def test_micro_batches_accumulate_in_fp32(tiny_model_dir: Path, tmp_path: Path) -> None:
    whole = Trainer(
        bf16_config(tiny_model_dir, tmp_path, micro=8), model_dir=tiny_model_dir, total_steps=2
    )
    split = Trainer(
        bf16_config(tiny_model_dir, tmp_path, micro=2), model_dir=tiny_model_dir, total_steps=2
    )
    batch, _ = whole.prepare(rollouts(8))
    whole.backward(batch)
    split.backward(batch)
    # four micro-batches: three gradients moved into the fp32 sums, the last one pending
    assert all(m.grad is not None and m.grad.dtype == torch.float32 for m in split.master.masters)
    assert all(p.grad.dtype == torch.bfloat16 for p in split.master.params)
    one = torch.cat([p.grad.float().flatten() for p in whole.master.params])
    summed = torch.cat(
        [
            (m.grad + p.grad).flatten()
            for p, m in zip(split.master.params, split.master.masters, strict=True)
        ]
    )
    cosine = torch.nn.functional.cosine_similarity(one, summed, dim=0)
    assert float(cosine) > 0.999
    assert float(split.master.grad_norm()) == pytest.approx(float(summed.norm()), rel=4e-3)
    for trainer in (whole, split):
        trainer._optimizer_step()
        assert all(p.grad is None for p in trainer.model.parameters())
        assert all(m.grad is None for m in trainer.master.masters)


def test_grad_norm_and_clipping_match_torch(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    grads = None
    results = []
    for fused in (True, False):
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        master = MasterWeights(model)
        optimizer = torch.optim.AdamW(
            master.masters, lr=1e-2, fused=fused, foreach=False if not fused else None
        )
        if grads is None:
            gen = torch.Generator().manual_seed(0)
            grads = [torch.randn(p.shape, generator=gen).to(torch.bfloat16) for p in master.params]
        for p, g in zip(master.params, grads, strict=True):
            p.grad = g.clone()
        expected = torch.nn.utils.get_total_norm([g.float() for g in grads])
        norm = master.step(optimizer, max_norm=1.0)  # clips: the norm is ~600
        assert norm == pytest.approx(float(expected), rel=4e-3)
        results.append([m.clone() for m in master.masters])
    # the fused kernel's grad_scale clips as the multiplication does
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_without_the_kernels_the_optimizer_steps_the_masters(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plain path (kernels.load() returning None): torch's norms and torch's AdamW on
    the fp32 masters, the bf16 parameters their rounding."""
    from transformers import AutoModelForCausalLM

    from trinity.trainer import precision

    monkeypatch.setattr(precision.kernels, "load", lambda: None)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    reference = [p.detach().clone().requires_grad_() for p in model.parameters()]
    master = MasterWeights(model)
    assert master.kernels is None
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=gen).to(torch.bfloat16) for p in master.params]
    for p, g in zip(master.params, grads, strict=True):
        p.grad = g.clone()
    for r, g in zip(reference, grads, strict=True):
        r.grad = g.float()
    options = {"lr": 1e-2, "weight_decay": 0.1, "foreach": False}
    norm = master.step(torch.optim.AdamW(master.masters, **options), max_norm=0.0)
    torch.optim.AdamW(reference, **options).step()
    # each tensor's norm is rounded to bf16 (2^-8), after float32 sums well inside
    # another 2^-8, then combined in float32
    expected = float(torch.nn.utils.get_total_norm([g.float() for g in grads]))
    assert norm == pytest.approx(expected, rel=2**-7)
    for m, r in zip(master.masters, reference, strict=True):
        assert torch.equal(m.detach(), r.detach())  # the same torch AdamW on the same grads
    for p, m in zip(master.params, master.masters, strict=True):
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))


@pytest.mark.skipif(kernels.load() is None, reason="kernels not built (or off)")
def test_grad_norm_with_the_kernels_is_the_float64_norm(tiny_model_dir: Path) -> None:
    """Each tensor's sum of squares is summed in float32 blocks of 4096 in an order that
    depends on the vector width: within 4095 u (u = 2^-24) of the exact sum for any order
    (squares of bf16 values are exact; the fp32 sum plus bf16 gradient is one rounding),
    the norm half that."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    master = MasterWeights(model)
    assert master.kernels is not None
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=gen).to(torch.bfloat16) for p in master.params]
    for p, g in zip(master.params, grads, strict=True):
        p.grad = g.clone()
    # one fp32 sum pending beside a bf16 gradient, as after several micro-batches
    master.masters[0].grad = torch.randn(master.params[0].shape, generator=gen)
    expected = sum(float(g.double().pow(2).sum()) for g in grads[1:])
    expected += float((master.masters[0].grad.double() + grads[0].double()).pow(2).sum())
    assert float(master.grad_norm()) == pytest.approx(expected**0.5, rel=4100 * 2.0**-24)


def test_checkpoint_keeps_fp32_masters_and_resumes_exactly(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    cfg = bf16_config(tiny_model_dir, tmp_path)
    job = tmp_path / "job"
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=4)
    trainer.train_step(rollouts(8, seed=1))
    trainer.save_checkpoint(job, 1)
    saved = ckpt.load_actor_shard(job, 1, "model")
    masters = fp32_weights(trainer)
    assert saved.keys() == trainer.model.state_dict().keys()
    for name, tensor in saved.items():
        assert tensor.dtype == torch.float32, name
        assert torch.equal(tensor, masters[name]), name
    # the Hugging Face export holds the masters and says float32
    export = trainer.export_hf(job, 1)
    exported = AutoModelForCausalLM.from_pretrained(export, dtype="auto")
    assert exported.dtype == torch.float32
    for name, tensor in exported.state_dict().items():
        assert torch.equal(tensor, masters[name]), name
    after = trainer.train_step(rollouts(8, seed=2))

    resumed = Trainer(cfg, model_dir=tiny_model_dir, total_steps=4)
    assert resumed.load_checkpoint(job) == 1
    assert all(torch.equal(v, masters[k]) for k, v in fp32_weights(resumed).items())
    again = resumed.train_step(rollouts(8, seed=2))
    assert again["actor/pg_loss"] == after["actor/pg_loss"]
    final = fp32_weights(trainer)
    assert all(torch.equal(v, final[k]) for k, v in fp32_weights(resumed).items())


def test_weights_for_sync_are_the_bf16_parameters(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = Trainer(
        bf16_config(tiny_model_dir, tmp_path), model_dir=tiny_model_dir, total_steps=1
    )
    weights = trainer.weights_for_sync()
    params = dict(trainer.model.named_parameters())
    assert weights.keys() == trainer.model.state_dict().keys()
    for name, tensor in weights.items():
        assert tensor.dtype == torch.bfloat16
        if name in params:  # no copy: the engine copies them into its own weights
            assert tensor.data_ptr() == params[name].data_ptr(), name
