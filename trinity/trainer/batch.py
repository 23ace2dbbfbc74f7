"""Collate experiences into a padded, response-aligned training batch.

Prompts are left-padded to P tokens and responses right-padded to R tokens, so every
sequence's response starts at column P. The logits that predict response token j sit
at column P - 1 + j, which lets the actor ask the model for only the last R + 1
positions' logits.

Each row keeps the temperature its rollout sampled at (``temperatures``): the trainer
divides that row's logits by it wherever it computes log-probs.

A DPO experience (``rejected`` set) becomes two rows, the chosen response then the
rejected one, so rows 2k and 2k + 1 form a pair (``paired``); micro-batches then keep
pairs together.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch

from trinity.types import Experience

if TYPE_CHECKING:
    from trinity.rollout.multimodal import MediaInputs

logger = logging.getLogger(__name__)
# budgets already warned about: a sequence over the budget is reported once per run
_WARNED_BUDGETS: set[int] = set()


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
    is_expert: torch.Tensor  # (B,) bool, demonstrations (mix) rather than rollouts
    temperatures: torch.Tensor  # (B,) float32 T of each row's log-probs, log_softmax(z / T)
    prompt_width: int  # P
    paired: bool = False  # rows 2k, 2k + 1 are a (chosen, rejected) pair
    ref_logprobs: torch.Tensor | None = None  # (B, R) log pi_ref(a|s)
    values: torch.Tensor | None = None  # (B, R) critic values V(s_t) before the update
    advantages: torch.Tensor | None = None  # (B, R)
    returns: torch.Tensor | None = None  # (B, R)
    # multi-step rollouts: one row per step (step_wise_grpo, gigpo)
    trajectory_ids: torch.Tensor | None = None  # (B,) int64 eid.run: the trajectory in its group
    step_ids: torch.Tensor | None = None  # (B,) int64 eid.step: the step's turn index
    anchor_ids: torch.Tensor | None = None  # (B,) int64 info["anchor_id"], -1 when unset
    step_rewards: torch.Tensor | None = None  # (B,) info["step_reward"]; None when no row has one
    # (B, R) log pi_teacher(a|s) of the response tokens (on-policy distillation); None
    # when no experience carries them
    teacher_logprobs: torch.Tensor | None = None
    # rollout correction (bypass_mode false): the engine's log-probs, which old_logprobs
    # then replaces with the trainer's own, and the truncated importance weights
    rollout_logprobs: torch.Tensor | None = None  # (B, R) log pi_rollout(a|s)
    rollout_is_weights: torch.Tensor | None = None  # (B, R) detached, 0 on masked tokens
    # vision-language rows: each row's prompt images (None: text only; rows of one prompt
    # share one object); None when no row has images
    media: list[MediaInputs | None] | None = None

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def response_width(self) -> int:
        return int(self.action_mask.shape[1])

    @property
    def rl_mask(self) -> torch.Tensor:
        """(B, R) ``action_mask`` of the rollout rows only (expert rows zeroed)."""
        return self.action_mask * (~self.is_expert).to(self.action_mask.dtype)[:, None]

    def select(self, index: slice | torch.Tensor) -> TrainBatch:
        """Rows ``index`` of every per-sequence tensor (micro-batches, ranks)."""
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            values[f.name] = value[index] if isinstance(value, torch.Tensor) else value
        if self.media is not None:
            if isinstance(index, slice):
                picked = list(range(self.size)[index])
            else:
                rows = index.nonzero().flatten() if index.dtype == torch.bool else index
                picked = rows.reshape(-1).tolist()
            values["media"] = [self.media[i] for i in picked]
        return TrainBatch(**values)

    def to(self, device: torch.device) -> TrainBatch:
        """Every tensor of the batch on ``device`` (the model's); the batch itself when
        it is there already (the CPU trainer never copies)."""
        if self.input_ids.device == torch.device(device):
            return self
        values = {}
        for f in fields(self):
            value = getattr(self, f.name)
            values[f.name] = value.to(device) if isinstance(value, torch.Tensor) else value
        return TrainBatch(**values)

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) real tokens of each row, prompt plus response without padding."""
        return self.attention_mask.sum(dim=1)

    def micro_slices(self, size: int, max_tokens: int | None = None) -> list[slice]:
        """Row ranges of the micro-batches: ``size`` rows each (rounded up to even when
        rows are paired), or with ``max_tokens`` packed by ``pack_by_tokens``."""
        unit = 2 if self.paired else 1
        if max_tokens is not None:
            return pack_by_tokens(self.lengths.tolist(), max_tokens, unit)
        size += size % unit
        return [slice(i, min(i + size, self.size)) for i in range(0, self.size, size)]

    def split(self, size: int, max_tokens: int | None = None) -> list[TrainBatch]:
        """Micro-batches of ``micro_slices(size, max_tokens)``."""
        return [self.select(s) for s in self.micro_slices(size, max_tokens)]


def pack_by_tokens(lengths: list[int], max_tokens: int, unit: int = 1) -> list[slice]:
    """Consecutive runs of rows whose ``lengths`` add up to at most ``max_tokens``.

    Rows are taken in order, ``unit`` at a time (2 keeps DPO pairs together), and a run
    closes when the next unit would overflow the budget. A unit longer than the budget
    on its own forms a run of its own (logged once per budget). Keeping the order keeps
    the rollouts of one prompt together, which the actor's shared-prompt forward uses.

    >>> pack_by_tokens([4, 6, 10, 3], 10)
    [slice(0, 2, None), slice(2, 3, None), slice(3, 4, None)]
    >>> pack_by_tokens([4, 5, 1, 12, 3], 10)
    [slice(0, 3, None), slice(3, 4, None), slice(4, 5, None)]
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    runs: list[slice] = []
    start, used = 0, 0
    for i in range(0, len(lengths), unit):
        tokens = sum(lengths[i : i + unit])
        if tokens > max_tokens:
            _warn_over_budget(tokens, max_tokens)
        if i > start and used + tokens > max_tokens:
            runs.append(slice(start, i))
            start, used = i, 0
        used += tokens
    if start < len(lengths):
        runs.append(slice(start, len(lengths)))
    return runs


def _warn_over_budget(tokens: int, max_tokens: int) -> None:
    if max_tokens in _WARNED_BUDGETS:
        return
    _WARNED_BUDGETS.add(max_tokens)
    logger.warning(
        "a sequence of %d tokens exceeds the micro-batch token budget %d "
        "(max_token_len_per_gpu): it runs alone in its micro-batch; raise the budget to at "
        "least the longest sequence (prompt + response) to bound a forward pass's memory",
        tokens,
        max_tokens,
    )


@dataclass
class _Row:
    tokens: torch.Tensor
    prompt_length: int
    action_mask: torch.Tensor
    logprobs: torch.Tensor | None
    exp: Experience


def _rows(exp: Experience) -> list[_Row]:
    if exp.rejected is None:
        return [_Row(exp.tokens, exp.prompt_length, exp.action_mask, exp.logprobs, exp)]
    prompt = exp.tokens[: exp.prompt_length]
    chosen = exp.chosen if exp.chosen is not None else exp.response_tokens
    return [
        _Row(
            torch.cat([prompt, chosen]),
            exp.prompt_length,
            torch.ones(chosen.numel(), dtype=torch.bool),
            None,
            exp,
        ),
        _Row(
            torch.cat([prompt, exp.rejected]),
            exp.prompt_length,
            torch.ones(exp.rejected.numel(), dtype=torch.bool),
            None,
            exp,
        ),
    ]


def collate(
    experiences: list[Experience],
    pad_token_id: int,
    temperature: float = 1.0,
    taskset_temperatures: Mapping[str, float] | None = None,
) -> TrainBatch:
    """Pad and stack experiences; group ids come from ``eid.group`` (task within a batch).

    Each row's temperature is its experience's; one without (written before experiences
    kept it, or a dataset row) takes its taskset's from ``taskset_temperatures`` (by
    ``info["taskset"]``), else ``temperature``.
    """
    if not experiences:
        raise ValueError("cannot collate an empty list of experiences")
    paired = [e.rejected is not None for e in experiences]
    if any(paired) and not all(paired):
        raise ValueError("cannot mix DPO pairs (rejected set) and single sequences in one batch")
    rows = [row for exp in experiences for row in _rows(exp)]
    prompt_width = max(r.prompt_length for r in rows)
    response_width = max(max(r.tokens.numel() - r.prompt_length for r in rows), 1)
    batch_size = len(rows)
    width = prompt_width + response_width
    input_ids = torch.full((batch_size, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch_size, width), dtype=torch.long)
    action_mask = torch.zeros((batch_size, response_width), dtype=torch.float32)
    old_logprobs = torch.zeros((batch_size, response_width), dtype=torch.float32)
    groups: dict[str, int] = {}
    group_ids = torch.empty(batch_size, dtype=torch.long)
    teacher_logprobs = _teacher_logprobs(rows, response_width)
    for i, row in enumerate(rows):
        p = row.prompt_length
        r = row.tokens.numel() - p
        input_ids[i, prompt_width - p : prompt_width + r] = row.tokens
        attention_mask[i, prompt_width - p : prompt_width + r] = 1
        action_mask[i, :r] = row.action_mask.float()
        if row.logprobs is not None:
            old_logprobs[i, :r] = row.logprobs.float()
        group_ids[i] = groups.setdefault(row.exp.eid.group, len(groups))
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        action_mask=action_mask,
        old_logprobs=old_logprobs,
        rewards=torch.tensor([float(r.exp.reward or 0.0) for r in rows]),
        group_ids=group_ids,
        model_versions=torch.tensor([r.exp.model_version for r in rows], dtype=torch.long),
        is_expert=torch.tensor([bool(r.exp.info.get("is_expert", False)) for r in rows]),
        temperatures=torch.tensor(
            [_temperature(r.exp, temperature, taskset_temperatures or {}) for r in rows],
            dtype=torch.float32,
        ),
        prompt_width=prompt_width,
        paired=all(paired),
        **_step_fields(rows),
        teacher_logprobs=teacher_logprobs,
        media=[r.exp.media for r in rows] if any(r.exp.media is not None for r in rows) else None,
    )


def _temperature(exp: Experience, default: float, tasksets: Mapping[str, float]) -> float:
    """The temperature of ``exp``'s log-probs (see :func:`collate`), checked."""
    value = exp.temperature
    if value is None:
        value = tasksets.get(str(exp.info.get("taskset")), default)
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(
            f"experience {exp.eid}: temperature {value!r}; the trainer divides the logits "
            "by it, so it must be a finite number > 0"
        )
    return float(value)


def _teacher_logprobs(rows: list[_Row], response_width: int) -> torch.Tensor | None:
    """(B, R) the rows' ``teacher_logprobs``, 0 on padding; None when no row has them.

    Rollouts without them next to rollouts with them would be distilled toward a
    teacher log-prob of 0 (probability 1), so that mix is refused.
    """
    if all(r.exp.teacher_logprobs is None for r in rows):
        return None
    out = torch.zeros((len(rows), response_width), dtype=torch.float32)
    for i, row in enumerate(rows):
        values = row.exp.teacher_logprobs
        if values is None:
            if bool(row.exp.info.get("is_expert", False)):
                continue  # demonstrations take no part in the advantages
            raise ValueError(
                f"experience {row.exp.eid} has no teacher_logprobs while others in the batch "
                "do; every rollout of an on-policy distillation batch needs the teacher's"
            )
        r = row.tokens.numel() - row.prompt_length
        if values.numel() != r:
            raise ValueError(
                f"experience {row.exp.eid}: {values.numel()} teacher_logprobs for {r} "
                "response tokens"
            )
        out[i, :r] = values.float()
    return out


def _step_fields(rows: list[_Row]) -> dict[str, torch.Tensor | None]:
    """The multi-step fields of ``TrainBatch``: trajectory and step from ``eid``, the
    anchor state and the immediate reward from ``info`` (see ``Experience``)."""
    exps = [r.exp for r in rows]
    step_rewards = None
    if any("step_reward" in e.info for e in exps):
        step_rewards = torch.tensor([float(e.info.get("step_reward", 0.0)) for e in exps])
    return {
        "trajectory_ids": torch.tensor([int(e.eid.run) for e in exps], dtype=torch.long),
        "step_ids": torch.tensor([int(e.eid.step) for e in exps], dtype=torch.long),
        "anchor_ids": torch.tensor([int(e.info.get("anchor_id", -1)) for e in exps]),
        "step_rewards": step_rewards,
    }
