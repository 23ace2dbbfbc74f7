"""collate: padding and alignment, DPO pairs, expert rows, micro-batch splits."""

from __future__ import annotations

import pytest
import torch

from trinity.trainer.batch import collate
from trinity.types import EID, Experience

PAD = 0


def exp(tokens: list[int], prompt: int, **kw) -> Experience:
    return Experience(tokens=torch.tensor(tokens), prompt_length=prompt, **kw)


def test_prompts_left_padded_responses_right_padded() -> None:
    batch = collate(
        [
            exp([5, 6, 7, 8], 2, reward=1.0, eid=EID(batch=1, task=0)),
            exp([9, 10, 11], 1, reward=0.0, eid=EID(batch=1, task=1)),
            exp([12, 13, 14], 2, eid=EID(batch=1, task=0, run=1)),
        ],
        PAD,
    )
    # P = 2 prompt columns, R = 2 response columns
    assert batch.prompt_width == 2 and batch.response_width == 2
    assert batch.input_ids.tolist() == [[5, 6, 7, 8], [PAD, 9, 10, 11], [12, 13, 14, PAD]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 0]]
    assert batch.position_ids.tolist() == [[0, 1, 2, 3], [0, 0, 1, 2], [0, 1, 2, 2]]
    assert batch.action_mask.tolist() == [[1, 1], [1, 1], [1, 0]]
    assert batch.group_ids.tolist() == [0, 1, 0]  # task 0 of batch 1 twice
    assert batch.rewards.tolist() == [1.0, 0.0, 0.0]  # a missing reward is 0
    assert not batch.paired and not batch.is_expert.any()


def test_expert_rows_are_flagged_and_left_out_of_rl_mask() -> None:
    batch = collate([exp([1, 2, 3], 1), exp([4, 5, 6], 1, info={"is_expert": True})], PAD)
    assert batch.is_expert.tolist() == [False, True]
    assert batch.rl_mask.tolist() == [[1, 1], [0, 0]]
    assert batch.action_mask.tolist() == [[1, 1], [1, 1]]


def test_dpo_experience_becomes_chosen_then_rejected_row() -> None:
    pair = exp(
        [1, 2, 3, 4],
        2,
        chosen=torch.tensor([3, 4]),
        rejected=torch.tensor([7, 8, 9]),
        eid=EID(batch="d", task=5),
    )
    other = exp([1, 5, 6], 2, chosen=torch.tensor([6]), rejected=torch.tensor([7]))
    batch = collate([pair, other], PAD)
    assert batch.paired and batch.size == 4
    assert batch.input_ids.tolist() == [
        [1, 2, 3, 4, PAD],
        [1, 2, 7, 8, 9],
        [1, 5, 6, PAD, PAD],
        [1, 5, 7, PAD, PAD],
    ]
    assert batch.action_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 0, 0]]
    # micro-batches keep pairs together: size 3 is rounded up to 4
    assert [m.size for m in batch.split(3)] == [4]
    assert [m.size for m in batch.split(2)] == [2, 2]


def test_pairs_and_single_sequences_do_not_mix() -> None:
    pair = exp([1, 2, 3], 2, chosen=torch.tensor([3]), rejected=torch.tensor([4]))
    with pytest.raises(ValueError, match="cannot mix DPO pairs"):
        collate([pair, exp([1, 2, 3], 2)], PAD)


def test_select_keeps_every_per_row_tensor() -> None:
    batch = collate([exp([1, 2, 3], 1), exp([4, 5], 1), exp([6, 7, 8], 2)], PAD)
    part = batch.select(slice(1, 3))
    assert part.size == 2 and part.prompt_width == batch.prompt_width
    assert part.input_ids.tolist() == batch.input_ids[1:3].tolist()
    assert part.is_expert.shape == (2,)
