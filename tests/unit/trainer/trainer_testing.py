"""Helpers of the trainer tests: small resolved configs and synthetic experiences."""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from trinity.config import Config, config_from_dict, resolve, validate
from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS
from trinity.types import EID, Experience

NOW = datetime(2025, 1, 2, 3, 4, 5)


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` deep-merged in (a new dict)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def make_config(
    model_dir: Path, tmp_path: Path, algorithm_type: str = "grpo", **sections: Any
) -> Config:
    """A resolved, validated float32 config for ``algorithm_type`` on the tiny model.

    Keyword arguments are sections merged into the defaults, e.g.
    ``algorithm={"loss_agg_mode": "seq-mean-token-mean"}``.
    """
    raw: dict[str, Any] = {
        "project": "p",
        "name": "n",
        "mode": "both",
        "checkpoint_root_dir": str(tmp_path / "ckpt"),
        "algorithm": {
            "algorithm_type": algorithm_type,
            "repeat_times": 4,
            "optimizer": {"lr": 1e-3, "weight_decay": 0.0},
        },
        "model": {
            "model_path": str(model_dir),
            "max_prompt_tokens": 32,
            "max_response_tokens": 8,
            "dtype": "float32",
        },
        "buffer": {
            "batch_size": 2,
            "explorer_input": {"taskset": {"name": "tasks", "path": str(tmp_path / "tasks")}},
            "trainer_input": {"experience_buffer": {"name": "exp"}},
        },
        "trainer": {
            "trainer_config": {
                "actor_rollout_ref": {
                    "model": {"enable_gradient_checkpointing": False},
                    "actor": {"ppo_micro_batch_size_per_gpu": 8, "grad_clip": 1.0},
                },
                "critic": {
                    "optim": {"lr": 1e-3, "weight_decay": 0.0},
                    "model": {"enable_gradient_checkpointing": False},
                },
            }
        },
    }
    if ALGORITHM_DEFAULTS[algorithm_type].sample_strategy == "mix":  # mix, mix_chord
        raw["buffer"]["trainer_input"]["auxiliary_buffers"] = {
            "sft_dataset": {"path": str(tmp_path / "sft")}
        }
    cfg = resolve(config_from_dict(merge(raw, sections)), now=NOW)
    validate(cfg)
    return cfg


def rollouts(n: int = 8, group_size: int = 4, seed: int = 0, vocab: int = 1000) -> list[Experience]:
    """``n`` rollouts of n / group_size tasks with varied prompt and response lengths.

    Rewards alternate 1, 0 inside each group; logprobs are plausible values in (-5, 0].
    """
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        # responses of 1, 2, 5, 3, 3, 5, 2, 1 tokens: micro-batches of 2 hold 3 to 8 tokens
        prompt, response = 3 + i % 3, 1 + (i * i) % 7
        tokens = torch.randint(0, vocab, (prompt + response,), generator=gen)
        out.append(
            Experience(
                tokens=tokens,
                prompt_length=prompt,
                logprobs=-5.0 * torch.rand(response, generator=gen),
                reward=float((i + i // group_size) % 2),
                eid=EID(batch=1, task=i // group_size, run=i % group_size),
            )
        )
    return out


def grouped_rollouts(groups: int = 3, per_group: int = 4) -> list[Experience]:
    """Rollouts of ``groups`` prompts (3, 5, 7 tokens), ``per_group`` each, responses of
    1 to 6 tokens: the rows of a group share their prompt tokens exactly."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for task in range(groups):
        prompt = torch.randint(0, 1000, (3 + 2 * task,), generator=gen)
        for run in range(per_group):
            response = torch.randint(0, 1000, (1 + (task + 2 * run) % 6,), generator=gen)
            out.append(
                Experience(
                    tokens=torch.cat([prompt, response]),
                    prompt_length=prompt.numel(),
                    logprobs=-torch.rand(response.numel(), generator=gen),
                    reward=float(run % 2),
                    eid=EID(batch=0, task=task, run=run),
                )
            )
    return out


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> list[str]:
    after = model.state_dict()
    return [k for k, v in before.items() if not torch.equal(v, after[k])]
