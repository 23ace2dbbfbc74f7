"""Each row's log-probs at the temperature its rollout was sampled at.

Tasksets sample at their own ``rollout_args.temperature``, so one train batch can mix
rows sampled at 1.0 and at 0.3: the trainer divides each row's logits by its own
``TrainBatch.temperatures`` entry, on the plain PyTorch path and on the fused kernel
path alike (``TRINITY_CPU_KERNELS=0`` forces the plain one).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from trainer_testing import grouped_rollouts, make_config

from trinity import kernels
from trinity.algorithm import utils
from trinity.algorithm.utils import (
    entropy_from_logits,
    logprobs_and_entropy,
    logprobs_from_logits,
)
from trinity.trainer.actor import forward_logprobs
from trinity.trainer.batch import collate
from trinity.trainer.trainer import Trainer

LN3 = math.log(3.0)


@pytest.fixture(params=["kernels", "plain"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which log-prob path bf16 logits take: the fused kernels (when built) or PyTorch's."""
    if request.param == "plain":
        monkeypatch.setenv("TRINITY_CPU_KERNELS", "0")
    elif kernels.load() is None:
        pytest.skip("kernels not built (or off)")
    return request.param


def test_each_row_is_scaled_by_its_own_temperature() -> None:
    # row 0 at T = 1: logits (0, ln 3) -> softmax (1/4, 3/4)
    # row 1 at T = 0.3: logits (0, 0.3 ln 3) / 0.3 = (0, ln 3) -> the same (1/4, 3/4)
    # (at one T = 1 for both, row 1 would give 1 / (1 + 3^-0.3) = 0.582 for token 1)
    logits = torch.tensor([[[0.0, LN3]], [[0.0, 0.3 * LN3]]], requires_grad=True)
    labels = torch.tensor([[1], [1]])
    temperatures = torch.tensor([1.0, 0.3])
    logprobs = logprobs_from_logits(logits, labels, temperatures)
    # log 3/4 = -0.2877 in both rows
    torch.testing.assert_close(logprobs, torch.full((2, 1), math.log(0.75)))
    # d log p_1 / d z = (onehot(1) - p) / T: (-1/4, 1/4) in row 0, (-1/4, 1/4) / 0.3 in row 1
    (grad,) = torch.autograd.grad(logprobs.sum(), logits)
    expected = torch.tensor([[[-0.25, 0.25]], [[-0.25 / 0.3, 0.25 / 0.3]]])
    torch.testing.assert_close(grad, expected)
    # entropy -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623 in both rows, from either function
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    _, metric = logprobs_and_entropy(logits, labels, temperatures)
    torch.testing.assert_close(metric, torch.full((2, 1), entropy))
    torch.testing.assert_close(
        entropy_from_logits(logits, temperature=temperatures), torch.full((2, 1), entropy)
    )


def test_a_temperature_per_row_must_be_positive_and_one_per_row() -> None:
    logits, labels = torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"temperature must be > 0, got 0\.0 in row 1"):
        logprobs_from_logits(logits, labels, torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"one temperature per row: 3 for 2 rows"):
        logprobs_from_logits(logits, labels, torch.tensor([1.0, 0.3, 0.3]))


def test_bf16_rows_match_their_own_scalar_temperature(path: str) -> None:
    # rows at 1.0, 0.3, 0.3 and 0.7: runs of one temperature and changes between them
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(4, 5, 50, generator=gen)).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 50, (4, 5), generator=gen)
    weights = torch.randn(4, 5, generator=gen)
    temperatures = torch.tensor([1.0, 0.3, 0.3, 0.7])
    assert utils._use_kernel(logits, None) == (path == "kernels")
    logprobs, entropy = logprobs_and_entropy(logits, labels, temperatures)
    (grad,) = torch.autograd.grad((logprobs * weights).sum(), logits)
    alone = logprobs_from_logits(logits, labels, temperatures)
    torch.testing.assert_close(alone, logprobs, atol=0, rtol=0)
    for row, temperature in enumerate(temperatures.tolist()):
        one = slice(row, row + 1)
        expected, expected_entropy = logprobs_and_entropy(logits[one], labels[one], temperature)
        (expected_grad,) = torch.autograd.grad((expected * weights[one]).sum(), logits)
        torch.testing.assert_close(logprobs[one], expected, atol=0, rtol=0)
        torch.testing.assert_close(entropy[one], expected_entropy, atol=0, rtol=0)
        torch.testing.assert_close(grad[one], expected_grad[one], atol=0, rtol=0)
        torch.testing.assert_close(
            entropy_from_logits(logits[one].detach(), temperature=temperature),
            entropy_from_logits(logits.detach(), temperature=temperatures)[one],
            atol=0,
            rtol=0,
        )


@pytest.fixture
def bf16_trainer(path: str, tiny_model_dir: Path, tmp_path: Path) -> Trainer:
    """A bf16 trainer built on ``path``: with the kernels its layers are fused too."""
    cfg = make_config(tiny_model_dir, tmp_path, "grpo", model={"dtype": "bfloat16"})
    return Trainer(cfg, model_dir=tiny_model_dir, total_steps=1)


def test_the_trainers_forward_takes_each_rows_temperature(bf16_trainer: Trainer) -> None:
    # three prompts of four rollouts: the first two prompts' at 0.3, the last one's at 1.0
    experiences = grouped_rollouts()
    for exp in experiences[:8]:
        exp.temperature = 0.3
    batch = collate(experiences, bf16_trainer.pad_token_id)
    assert batch.temperatures.tolist() == pytest.approx([0.3] * 8 + [1.0] * 4)
    mask = batch.action_mask.bool()
    with torch.no_grad():
        mixed, entropy = forward_logprobs(
            bf16_trainer.model, batch, compute_entropy=True, compute_dtype=torch.bfloat16
        )
        for temperature, rows in ((0.3, slice(0, 8)), (1.0, slice(8, 12))):
            part = collate(experiences[rows], bf16_trainer.pad_token_id)
            expected, expected_entropy = forward_logprobs(
                bf16_trainer.model,
                part,
                temperature=temperature,
                compute_entropy=True,
                compute_dtype=torch.bfloat16,
            )
            width = part.response_width
            # a batch's bf16 forward rounds alike whatever rows are beside it, to about 1e-2
            torch.testing.assert_close(
                mixed[rows, :width][mask[rows, :width]],
                expected[mask[rows, :width]],
                atol=2e-2,
                rtol=0,
            )
            torch.testing.assert_close(
                entropy[rows, :width][mask[rows, :width]],
                expected_entropy[mask[rows, :width]],
                atol=2e-2,
                rtol=0,
            )
    # at 0.3 the distribution is far sharper than at 1.0: the rows did not share one T
    assert float(entropy[:8][mask[:8]].mean()) < float(entropy[8:][mask[8:]].mean()) - 1.0


def test_collate_takes_each_experiences_temperature_or_the_configured_one() -> None:
    experiences = grouped_rollouts(groups=2, per_group=2)
    experiences[0].temperature = 0.3
    experiences[1].temperature = 1.0
    experiences[2].info["taskset"] = "cold"  # written before the field: its taskset's T
    batch = collate(experiences, 0, temperature=0.9, taskset_temperatures={"cold": 0.5})
    assert batch.temperatures.dtype == torch.float32
    assert batch.temperatures.tolist() == pytest.approx([0.3, 1.0, 0.5, 0.9])


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_collate_refuses_a_temperature_the_logits_cannot_be_divided_by(bad: float) -> None:
    experiences = grouped_rollouts(groups=1, per_group=2)
    experiences[1].temperature = bad
    with pytest.raises(ValueError, match=rf"experience 0/0/1/0: temperature {bad}; .* > 0"):
        collate(experiences, 0)
