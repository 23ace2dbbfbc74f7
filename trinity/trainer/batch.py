"""Collate experiences into a padded, response-aligned training batch.

Prompts are left-padded to P tokens and responses right-padded to R tokens, so every
sequence's response starts at column P. The logits that predict response token j sit
at column P - 1 + j, which lets the actor ask the model for only the last R + 1
positions' logits.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from trinity.types import Experience


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # (B, P + R) int64, pad where attention_mask is 0
    attention_mask: torch.Tensor  # (B, P + R) int64
    position_ids: torch.Tensor  # (B, P + R) int64, 0 at each sequence's first real token
    action_mask: torch.Tensor  # (B, R) float, 1 where the response token is trained on
    old_logprobs: torch.Tensor  # (B, R) log pi_old(a|s) from the rollout engine
    rewards: torch.Tensor  # (B,) scalar reward of each sequence
    group_ids: torch.Tensor  # (B,) int64, equal for rollouts of the same task
    model_versions: torch.Tensor  # (B,) int64, policy version that sampled each sequence
    prompt_width: int  # P
    ref_logprobs: torch.Tensor | None = None  # (B, R)
    advantages: torch.Tensor | None = None  # (B, R)
    returns: torch.Tensor | None = None  # (B, R)

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def response_width(self) -> int:
        return int(self.action_mask.shape[1])

    def select(self, index: slice | torch.Tensor) -> TrainBatch:
        """Rows ``index`` of every per-sequence tensor (micro-batches, ranks)."""
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            values[f.name] = value[index] if isinstance(value, torch.Tensor) else value
        return TrainBatch(**values)

    def split(self, size: int) -> list[TrainBatch]:
        return [self.select(slice(i, i + size)) for i in range(0, self.size, size)]


def collate(experiences: list[Experience], pad_token_id: int) -> TrainBatch:
    """Pad and stack experiences; group ids come from ``eid.group`` (task within a batch)."""
    if not experiences:
        raise ValueError("cannot collate an empty list of experiences")
    prompt_width = max(e.prompt_length for e in experiences)
    response_width = max(max(e.response_length for e in experiences), 1)
    batch_size = len(experiences)
    width = prompt_width + response_width
    input_ids = torch.full((batch_size, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch_size, width), dtype=torch.long)
    action_mask = torch.zeros((batch_size, response_width), dtype=torch.float32)
    old_logprobs = torch.zeros((batch_size, response_width), dtype=torch.float32)
    groups: dict[str, int] = {}
    group_ids = torch.empty(batch_size, dtype=torch.long)
    for i, exp in enumerate(experiences):
        p, r = exp.prompt_length, exp.response_length
        input_ids[i, prompt_width - p : prompt_width + r] = exp.tokens
        attention_mask[i, prompt_width - p : prompt_width + r] = 1
        action_mask[i, :r] = exp.action_mask.float()
        if exp.logprobs is not None:
            old_logprobs[i, :r] = exp.logprobs.float()
        group_ids[i] = groups.setdefault(exp.eid.group, len(groups))
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        action_mask=action_mask,
        old_logprobs=old_logprobs,
        rewards=torch.tensor([float(e.reward or 0.0) for e in experiences]),
        group_ids=group_ids,
        model_versions=torch.tensor([e.model_version for e in experiences], dtype=torch.long),
        prompt_width=prompt_width,
    )
