"""Metrics of explore steps and evaluations, computed from experiences."""

from __future__ import annotations

import statistics
from collections import defaultdict

from trinity.types import Experience


def score(exp: Experience) -> float:
    """A rollout's accuracy: its ``reward/accuracy`` component, else its total reward."""
    return float(exp.metrics.get("reward/accuracy", exp.reward or 0.0))


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        f"{prefix}/mean": statistics.fmean(values),
        f"{prefix}/std": statistics.pstdev(values),
        f"{prefix}/max": max(values),
        f"{prefix}/min": min(values),
    }


def reward_errors(experiences: list[Experience]) -> int:
    """Experiences whose reward function raised (the workflow set ``info["reward_error"]``)."""
    return sum("reward_error" in e.info for e in experiences)


def rollout_metrics(experiences: list[Experience]) -> dict[str, float]:
    """``rollout/reward/*``, ``rollout/accuracy/*``, ``rollout/response_length/*``,
    components, ``rollout/reward_errors``."""
    metrics = _stats("rollout/reward", [float(e.reward or 0.0) for e in experiences])
    metrics["rollout/reward_errors"] = float(reward_errors(experiences))
    metrics.update(_stats("rollout/accuracy", [score(e) for e in experiences]))
    metrics.update(
        _stats("rollout/response_length", [float(e.response_length) for e in experiences])
    )
    components: dict[str, list[float]] = defaultdict(list)
    for exp in experiences:
        for key, value in exp.metrics.items():
            components[key].append(float(value))
    for key, values in components.items():
        metrics[f"rollout/{key}/mean"] = statistics.fmean(values)
    return metrics


def eval_metrics(taskset: str, experiences: list[Experience], k: int) -> dict[str, float]:
    """mean@k, best@k and worst@k of accuracy and reward over the tasks of one taskset."""
    by_task: dict[str, list[Experience]] = defaultdict(list)
    for exp in experiences:
        by_task[str(exp.eid.task)].append(exp)
    if not by_task:
        return {}
    prefix = f"eval/{taskset}"
    metrics: dict[str, float] = {}
    for name, fn in (("accuracy", score), ("reward", lambda e: float(e.reward or 0.0))):
        per_task = [[fn(e) for e in exps] for exps in by_task.values()]
        metrics[f"{prefix}/{name}/mean"] = statistics.fmean(statistics.fmean(v) for v in per_task)
        metrics[f"{prefix}/{name}/mean@{k}"] = metrics[f"{prefix}/{name}/mean"]
        metrics[f"{prefix}/{name}/best@{k}"] = statistics.fmean(max(v) for v in per_task)
        metrics[f"{prefix}/{name}/worst@{k}"] = statistics.fmean(min(v) for v in per_task)
    metrics[f"{prefix}/response_length/mean"] = statistics.fmean(
        e.response_length for e in experiences
    )
    metrics[f"{prefix}/num_tasks"] = float(len(by_task))
    if reward_errors(experiences):
        metrics[f"{prefix}/reward_errors"] = float(reward_errors(experiences))
    return metrics
