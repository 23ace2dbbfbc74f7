"""mode colocate's memory hand-over on the CPU: the rollout engine gives its KV memory up
after its rollouts, while the trainer steps, and takes it again before the next ones,
after the new weights are in (the events record the policy version of each)."""

from __future__ import annotations

from pathlib import Path

from trinity.explorer.engines import MemoryHandover
from trinity.rollout.engine import TransformersEngine
from trinity.rollout.sampling import SamplingParams


def test_release_after_rollouts_and_retake_before_the_next(tiny_model_dir: Path) -> None:
    with TransformersEngine(str(tiny_model_dir), dtype="float32", max_model_len=64) as engine:
        handover = MemoryHandover([engine])
        params = SamplingParams(max_tokens=2, seed=0)
        first = engine.generate([[1, 2, 3]], params)
        handover.release()  # the step's rollouts are done: the trainer steps now
        assert engine.memory_released and engine.kv_budget == 0
        weights = {k: v.clone() for k, v in engine.model.state_dict().items()}
        engine.load_state_dict(weights, 1)  # the trainer's new version, loaded while released
        handover.retake()  # before the next step's rollouts
        assert not engine.memory_released and engine.kv_budget is None  # CPU: unbounded
        assert engine.memory_events == [("release", 0), ("retake", 1)]
        # the same weights decode the same tokens after the hand-over
        again = engine.generate([[1, 2, 3]], params)
        assert again[0][0].token_ids == first[0][0].token_ids
        # a request that arrives while released takes the memory back first
        handover.release()
        engine.generate([[1, 2, 3]], params)
        assert engine.memory_events[-2:] == [("release", 1), ("retake", 1)]
        assert not engine.memory_released
