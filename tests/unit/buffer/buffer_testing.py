"""Shared test helpers: a storage config with the config guide's field names, experiences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from trinity.types import EID, Experience


@dataclass
class FormatConfig:
    prompt_type: str = "plaintext"
    prompt_key: str = "prompt"
    response_key: str = "response"
    system_prompt_key: str | None = None
    system_prompt: str | None = None
    messages_key: str = "messages"
    tools_key: str = "tools"
    chosen_key: str = "chosen"
    rejected_key: str = "rejected"
    enable_concatenated_multi_turn: bool = False
    chat_template: str = ""


@dataclass
class RolloutArgs:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    logprobs: int = 0
    max_tokens: int | None = None


@dataclass
class StorageConfig:
    name: str = "tasks"
    storage_type: str = "file"
    path: str = ""
    subset_name: str | None = None
    split: str = "train"
    repeat_times: int | None = None
    format: FormatConfig = field(default_factory=FormatConfig)
    rollout_args: RolloutArgs = field(default_factory=RolloutArgs)
    default_workflow_type: str | None = None
    default_reward_fn_type: str | None = None
    workflow_args: dict[str, Any] = field(default_factory=dict)
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    max_read_timeout: float = 1800.0
    use_priority_queue: bool = False
    reuse_cooldown_time: float | None = None
    capacity: int = 10000
    is_eval: bool = False


def storage_config(prompt_key: str = "prompt", **fields: Any) -> StorageConfig:
    return StorageConfig(format=FormatConfig(prompt_key=prompt_key), **fields)


def full_experience(i: int = 0) -> Experience:
    """An experience with every field set, of several dtypes, values depending on ``i``."""
    return Experience(
        tokens=torch.tensor([101, 7, 8, 9000 + i, 2], dtype=torch.int64),
        prompt_length=2,
        logprobs=torch.tensor([-0.125, -1.0e-8, -3.3333333], dtype=torch.float32),
        action_mask=torch.tensor([True, False, True]),
        reward=0.5 + i,
        advantages=torch.tensor([0.1, -0.2, 0.3], dtype=torch.bfloat16),
        returns=torch.tensor([1.0 / 3.0, 2.0, -0.0], dtype=torch.float64),
        eid=EID(batch=f"eval_{i}", task=i, run=3, step=1),
        info={"model_version": 4 + i, "task": {"q": "1+1", "a": [2]}},
        metrics={"accuracy": 1.0, "format": 0.25},
        prompt_text=f"question {i}",
        response_text=f"answer {i} \u00e9\u4e2d",
        messages=[{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}],
        chosen=torch.tensor([5, 6], dtype=torch.int32),
        rejected=torch.tensor([[1, 2], [3, 4]], dtype=torch.int16),
    )


def assert_same_experience(a: Experience, b: Experience) -> None:
    """Field-by-field equality; tensors must match in dtype, shape and bits.

    NaN only has to be NaN in both: JSON writes every NaN as ``NaN``, dropping its
    sign and payload bits.
    """
    for name in (
        "tokens",
        "logprobs",
        "action_mask",
        "advantages",
        "returns",
        "chosen",
        "rejected",
    ):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
            continue
        assert x.dtype == y.dtype, name
        assert x.shape == y.shape, name
        if x.dtype.is_floating_point:
            nan = x.isnan()
            assert torch.equal(nan, y.isnan()), name
            x, y = x[~nan], y[~nan]
        # bit patterns, so that -0.0 and 0.0 differ
        assert _raw(x) == _raw(y), name
    for name in ("prompt_length", "reward", "eid", "info", "metrics", "messages"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.prompt_text == b.prompt_text
    assert a.response_text == b.response_text


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
