"""The GPU path on one CUDA device: a run through ``trinity run``, logprob parity of engine
and trainer, FSDP2 against a plain model, and checkpoint and resume.

Marker ``gpu``; every test is skipped, saying why, where CUDA is absent (CPU CI reports
them skipped). Run them on a GPU machine with ``pytest -n 0 -m gpu tests/gpu``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="needs a CUDA device (torch.cuda.is_available() is False here)",
    ),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trainer"))
from trainer_testing import make_config, rollouts  # noqa: E402

from trinity.trainer.batch import collate  # noqa: E402

GPU = {"cluster": {"gpu_per_node": 1, "node_num": 1}}


def _gpu_config(model_dir: Path, tmp_path: Path, **sections):
    return make_config(model_dir, tmp_path, **{**GPU, **sections})


def _trainer(model_dir: Path, tmp_path: Path, **sections):
    from trinity.trainer.trainer import Trainer

    config = _gpu_config(model_dir, tmp_path, **sections)
    return Trainer(config, model_dir=model_dir, total_steps=4)


def test_two_step_grpo_run_on_one_gpu(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``trinity run`` of the demo on the tiny model with ``cluster.gpu_per_node: 1``:
    it finishes, trains two steps, the explorer takes both versions, and the saved
    shards hold CPU tensors that changed."""
    from cli_testing import run_demo
    from safetensors.torch import load_file

    result = run_demo(
        tiny_model_dir,
        tmp_path,
        "name=gpu",
        # the job directory without the demo's timestamp suffix, so the test finds it
        "continue_from_checkpoint=true",
        "cluster.gpu_per_node=1",
        "buffer.total_steps=2",
        "trainer.save_interval=2",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    job = tmp_path / "trinity-demo" / "gpu"
    explorer_log = (job / "log/explorer.log").read_text()
    taken = [v for v in (1, 2) if f"synchronized to policy version {v}" in explorer_log]
    assert taken == [1, 2], explorer_log[-2000:]
    trained = torch.load(
        job / "global_step_2/actor/model_world_size_1_rank_0.pt", weights_only=True
    )
    assert {t.device.type for t in trained.values()} == {"cpu"}
    initial = load_file(tiny_model_dir / "model.safetensors")
    assert [k for k, v in initial.items() if not torch.equal(v.float(), trained[k].float())]


def test_engine_and_trainer_logprobs_agree_on_cuda(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The engine's sampled logprobs (its torch decode path on CUDA) equal the trainer's
    forward on CUDA for the same tokens, in float32."""
    from trinity.rollout.engine import TransformersEngine
    from trinity.rollout.sampling import SamplingParams
    from trinity.trainer.actor import forward_logprobs
    from trinity.types import EID, Experience

    trainer = _trainer(tiny_model_dir, tmp_path)
    assert trainer.device.type == "cuda"
    assert next(trainer.model.parameters()).device.type == "cuda"
    with TransformersEngine(str(tiny_model_dir), dtype="float32", device="cuda") as engine:
        assert engine.decode_path == "fused-llama"
        assert engine._fast is not None and engine._fast.kernels is None  # no CPU kernels
        assert engine._fast.device.type == "cuda" and engine.kv_budget is not None
        prompts = [[1, 2, 3, 4, 5], [7, 8, 9]]
        samples = engine.generate(prompts, SamplingParams(n=3, max_tokens=8, seed=1))
    experiences = []
    for i, (prompt, group) in enumerate(zip(prompts, samples, strict=True)):
        for j, s in enumerate(group):
            experiences.append(
                Experience(
                    tokens=torch.tensor(prompt + s.token_ids),
                    prompt_length=len(prompt),
                    logprobs=torch.tensor(s.logprobs),
                    reward=0.0,
                    eid=EID(batch=0, task=i, run=j),
                )
            )
    batch = collate(experiences, trainer.pad_token_id).to(trainer.device)
    with torch.no_grad():
        logprobs, _ = forward_logprobs(trainer.model, batch)
    mask = batch.action_mask > 0
    assert torch.allclose(logprobs[mask], batch.old_logprobs[mask], atol=1e-4), (
        (logprobs[mask] - batch.old_logprobs[mask]).abs().max()
    )


@pytest.mark.parametrize("offload", [False, True])
def test_fsdp2_on_one_gpu_equals_a_plain_model(
    tiny_model_dir: Path, tmp_path: Path, offload: bool
) -> None:
    """A one-rank FSDP2 policy over NCCL (with and without CPU offload) gives the plain
    model's log-probs and, after one backward, its gradients."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from trinity.trainer import distributed
    from trinity.trainer.actor import forward_logprobs

    if not dist.is_initialized():
        distributed.start_group("127.0.0.1", 1, lambda info: None, timeout_s=120)
    assert "nccl" in str(dist.get_backend())
    device = torch.device("cuda", torch.cuda.current_device())

    def load() -> torch.nn.Module:
        return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).to(device)

    plain, sharded = load(), load()
    distributed.shard_model(sharded, offload=offload)
    batch = collate(rollouts(8), 0).to(device)
    grads = []
    for model in (plain, sharded):
        logprobs, _ = forward_logprobs(model, batch)
        (logprobs * batch.action_mask).sum().backward()
        grads.append(
            {
                k: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).cpu()
                for k, p in model.named_parameters()
            }
        )
        grads[-1]["logprobs"] = logprobs.detach().cpu()
    for name, value in grads[0].items():
        assert torch.allclose(value, grads[1][name], atol=1e-5, rtol=1e-4), name


def test_checkpoint_and_resume_on_cuda(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A CUDA trainer's checkpoint holds CPU tensors; a fresh CUDA trainer resumed from it
    has the same weights and takes the same next step."""
    from trinity.trainer import checkpoint as ckpt

    first = _trainer(tiny_model_dir, tmp_path)  # saves model, optimizer and extra state
    first.train_step(rollouts(8))
    job = tmp_path / "job"
    first.save_checkpoint(job, 1)
    actor = ckpt.step_dir(job, 1) / "actor"
    for kind in ("model", "optim", "extra_state"):
        saved = torch.load(actor / ckpt.shard_name(kind, 1, 0), weights_only=True)
        stack = [saved]
        while stack:
            value = stack.pop()
            if isinstance(value, torch.Tensor):
                assert value.device.type == "cpu", kind
            elif isinstance(value, dict):
                stack.extend(value.values())
            elif isinstance(value, (list, tuple)):
                stack.extend(value)

    second = _trainer(tiny_model_dir, tmp_path)
    assert second.load_checkpoint(job, 1) == 1
    for (name, a), b in zip(
        first._model_state().items(), second._model_state().values(), strict=True
    ):
        assert a.device.type == b.device.type == "cuda"
        assert torch.equal(a, b), name
    batch = rollouts(8, seed=1)
    loss_a = first.train_step(batch)["actor/loss"]
    loss_b = second.train_step(batch)["actor/loss"]
    assert loss_a == pytest.approx(loss_b, rel=1e-5, abs=1e-6)
    for (name, a), b in zip(
        first._model_state().items(), second._model_state().values(), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-6), name
