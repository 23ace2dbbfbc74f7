"""``algorithm.optimizer.lr_scheduler_type``: the learning rate of each optimizer step,
by hand, and through the real ``Trainer``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from trainer_testing import make_config, rollouts

from trinity.trainer.optim import lr_multiplier
from trinity.trainer.trainer import Trainer


def _factors(style: str, warmup: int = 2, total: int = 6, min_lr_ratio: float = 0.0) -> list:
    return [
        lr_multiplier(s, warmup=warmup, total_steps=total, style=style, min_lr_ratio=min_lr_ratio)
        for s in range(total + 1)
    ]


def test_warmup_then_each_schedule() -> None:
    # warm-up over 2 steps: 1/2, 2/2; then 4 decay steps (total 6 - warmup 2)
    assert _factors("constant") == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    # linear: 1 - progress, progress = (s - 2) / 4
    assert _factors("linear") == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0])
    # cosine: (1 + cos(pi * progress)) / 2 = 1, 0.854, 0.5, 0.146, 0
    c = [(1 + math.cos(math.pi * p)) / 2 for p in (0, 0.25, 0.5, 0.75, 1.0)]
    assert _factors("cosine") == pytest.approx([0.5, 1.0, *c])
    # min_lr_ratio 0.2: decays to 0.2, not 0 (0.2 + 0.8 * 0.5 = 0.6 halfway)
    assert _factors("linear", min_lr_ratio=0.2)[4] == pytest.approx(0.6)
    assert _factors("linear", min_lr_ratio=0.2)[6] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="lr_scheduler_type 'wsd'"):
        _factors("wsd")


@pytest.mark.parametrize(
    ("optimizer", "expected"),
    [
        # lr_scheduler_type wins over warmup_style; 1 warm-up step then linear over 3
        (
            {"lr_scheduler_type": "linear", "warmup_style": "constant", "lr_warmup_steps": 1},
            [1.0, 2 / 3, 1 / 3, 0.0],
        ),
        # unset: the older warmup_style names the schedule
        # (1 + cos(pi * s / 4)) / 2 after optimizer step s = 1..4
        (
            {"warmup_style": "cosine", "lr_warmup_steps": 0},
            [(1 + math.cos(math.pi * s / 4)) / 2 for s in range(1, 5)],
        ),
    ],
)
def test_trainer_lr_per_step(
    tiny_model_dir: Path, tmp_path: Path, optimizer: dict, expected: list[float]
) -> None:
    cfg = make_config(tiny_model_dir, tmp_path, algorithm={"optimizer": {"lr": 1e-3, **optimizer}})
    trainer = Trainer(cfg, model_dir=tiny_model_dir, total_steps=4)
    # actor/lr: the rate the next optimizer step will use (one optimizer step per train step)
    lrs = [trainer.train_step(rollouts(8))["actor/lr"] for _ in range(4)]
    assert lrs == pytest.approx([1e-3 * f for f in expected], abs=1e-12)
