"""When each ``sync_style`` synchronises: the explorer's sync points and the trainer's
publishing steps (``trinity.sync.weights``), and the Synchronizer's answer to an
``explorer_driven`` request (its asyncio methods, driven here without Ray)."""

from __future__ import annotations

import asyncio

from trinity.config import Config
from trinity.sync.synchronizer import Synchronizer
from trinity.sync.weights import explorer_sync_point, trainer_publishes_at


def _config(style: str, interval: int, mode: str = "both") -> Config:
    cfg = Config()
    cfg.mode = mode
    cfg.synchronizer.sync_style = style
    cfg.synchronizer.sync_interval = interval
    return cfg


def test_explorer_sync_points_follow_interval_and_offset() -> None:
    # interval 2: the explorer asks before steps 3, 5, 7 (after 2, 4, 6 explored steps)
    assert [s for s in range(1, 8) if explorer_sync_point(s, 2, 0)] == [3, 5, 7]
    # offset 1: the first step runs ahead, then every 2 steps
    assert [s for s in range(1, 8) if explorer_sync_point(s, 2, 1)] == [4, 6]
    assert [s for s in range(1, 5) if explorer_sync_point(s, 1, 0)] == [2, 3, 4]


def test_trainer_publishes_on_request_only_when_explorer_driven() -> None:
    driven = _config("explorer_driven", 2)
    # asked or not, interval or not: only the request and the last step count
    assert [s for s in range(1, 6) if trainer_publishes_at(driven, s, 5, requested=False)] == [5]
    assert [s for s in range(1, 6) if trainer_publishes_at(driven, s, 5, requested=True)] == [
        1,
        2,
        3,
        4,
        5,
    ]
    for style in ("fixed", "trainer_driven", "dynamic"):
        cfg = _config(style, 2)
        assert [s for s in range(1, 6) if trainer_publishes_at(cfg, s, 5, requested=True)] == [
            2,
            4,
            5,
        ]
    # two processes: nobody asks, the trainer keeps its interval
    split = _config("explorer_driven", 2, mode="train")
    assert [s for s in range(1, 6) if trainer_publishes_at(split, s, 5, requested=False)] == [
        2,
        4,
        5,
    ]


def test_request_waits_for_the_trainers_answer() -> None:
    async def scenario() -> tuple:
        sync = Synchronizer()
        await sync.publish(2, ["v2"])
        waiting = asyncio.create_task(sync.request(2, timeout=5.0))
        await asyncio.sleep(0.05)
        asked = await sync.sync_requested()
        assert not waiting.done()  # nothing newer than version 2 yet
        await sync.publish(3, ["v3"])
        answer = await waiting
        return asked, answer, await sync.sync_requested()

    asked, answer, still_asked = asyncio.run(scenario())
    assert asked is True
    assert answer == (3, ["v3"])
    assert still_asked is False  # the publish answered the request


def test_unanswered_request_returns_the_current_version() -> None:
    async def scenario() -> tuple:
        sync = Synchronizer()
        await sync.publish(1, ["v1"])
        return await sync.request(1, timeout=0.05)

    assert asyncio.run(scenario()) == (1, ["v1"])
