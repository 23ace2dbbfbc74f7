"""How a train batch splits into rollouts and expert rows, and whether the explorer fills it.

``buffer.train_batch_size`` counts every row of a train step. With ``sample_strategy:
mix`` that includes the expert rows, as in Trinity-RFT: ceil(expert_data_ratio x
train_batch_size) of them come from the auxiliary dataset, and only the rest is read from
the experience buffer. Unset, it is the smallest size whose rollout part is one explore
step's ``batch_size * repeat_times``.

In mode both with ``sync_style: fixed`` the explorer waits for the trainer's weights, so a
train step that needs more rollouts than the explorer may write before that sync can never
fill: ``first_unfilled_step`` finds it, for the validation to refuse the config.
"""

from __future__ import annotations

import math
from typing import Any

from trinity.config.errors import ConfigError
from trinity.config.part_args.sample_strategy import MixSampleStrategyArgs
from trinity.config.schema import Config

MIX = "mix"


def expert_rows(train_batch_size: int, expert_data_ratio: float) -> int:
    """Expert rows of one train step: ceil(expert_data_ratio x train_batch_size)."""
    # rounded first: 0.07 x 100 is 7.000000000000001 in floating point, 7 rows not 8
    return math.ceil(round(expert_data_ratio * train_batch_size, 9))


def mix_ratio(cfg: Config) -> float | None:
    """The run's ``expert_data_ratio`` when its sample strategy is ``mix`` and the ratio
    leaves room for rollouts ([0, 1)); None otherwise (validation names a bad one)."""
    algo = cfg.algorithm
    if algo.sample_strategy != MIX:
        return None
    args: dict[str, Any] = dict(algo.sample_strategy_args or {})
    ratio = args.get("expert_data_ratio", MixSampleStrategyArgs.expert_data_ratio)
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio < 1:
        return None
    return float(ratio)


def rollouts_read(cfg: Config, train_batch_size: int) -> int:
    """Experiences a train step of ``train_batch_size`` rows reads from the experience buffer."""
    ratio = mix_ratio(cfg)
    if ratio is None:
        return train_batch_size
    return train_batch_size - expert_rows(train_batch_size, ratio)


def default_train_batch_size(cfg: Config) -> int:
    """``batch_size * repeat_times``; with ``mix`` the smallest size whose rollout part is
    that many (the expert rows come on top)."""
    rollouts = cfg.buffer.batch_size * cfg.algorithm.repeat_times
    ratio = mix_ratio(cfg)
    if ratio is None or rollouts < 1:
        return rollouts
    # the rollout part grows by 0 or 1 per added row, so it meets every count on the way
    size = rollouts
    while rollouts_read(cfg, size) < rollouts:
        size += 1
    return size


def first_unfilled_step(cfg: Config, per_explore: int, train_steps: int | None) -> int | None:
    """The first train step (1-based) that ``per_explore`` experiences per explore step
    cannot fill before the explorer waits for that step's weights (``sync_style: fixed``);
    None when every step fills.

    Explore step s waits for version ((s-1-sync_offset)//sync_interval)*sync_interval, so
    while train step t runs the explorer can finish ((t-1)//k)*k + k + sync_offset steps.
    ``train_steps`` None: the run's length is unknown, any step may come.
    """
    buffer, sync = cfg.buffer, cfg.synchronizer
    if not buffer.train_batch_size:
        return None
    per_train = rollouts_read(cfg, buffer.train_batch_size)
    if per_explore < 1 or per_train <= per_explore or sync.sync_interval < 1:
        return None  # the explorer keeps ahead; a bad size is validation's to name
    # per_train > per_explore: the shortfall grows each step, so the loop ends soon
    step = 1
    while train_steps is None or step <= train_steps:
        if step * per_train > explore_steps_before(cfg, step) * per_explore:
            return step
        step += 1
    return None


def explore_steps_before(cfg: Config, train_step: int) -> int:
    """Explore steps the explorer may finish (``sync_style: fixed``) before it waits for
    the weights of ``train_step``."""
    k, offset = cfg.synchronizer.sync_interval, max(cfg.synchronizer.sync_offset, 0)
    return ((train_step - 1) // k) * k + k + offset


def largest_fillable(cfg: Config, per_explore: int) -> int:
    """The largest ``train_batch_size`` whose buffer part is at most ``per_explore``."""
    size = per_explore
    while rollouts_read(cfg, size + 1) <= per_explore:
        size += 1
    return size


def check_batch_fills(cfg: Config, train_steps: int | None) -> None:
    """Refuse a run whose trainer waits for rollouts the explorer never writes first.

    Only where both are known: mode both, ``sync_style: fixed``, and every training
    taskset's workflow writes one experience per rollout.
    """
    if cfg.mode != "both" or cfg.synchronizer.sync_style != "fixed":
        return
    tasksets = cfg.buffer.explorer_input.tasksets
    if not tasksets:
        return
    repeat = max(t.repeat_times or cfg.algorithm.repeat_times for t in tasksets)
    per_explore = cfg.buffer.batch_size * repeat
    step = first_unfilled_step(cfg, per_explore, train_steps)
    if step is None or not all(_one_per_rollout(t.default_workflow_type) for t in tasksets):
        return
    size, sync = cfg.buffer.train_batch_size, cfg.synchronizer
    ratio = mix_ratio(cfg)
    reads = f"{rollouts_read(cfg, size)} rollouts" + (
        f" (expert rows, expert_data_ratio {ratio:g}, fill the rest)" if ratio is not None else ""
    )
    written = explore_steps_before(cfg, step) * per_explore
    raise ConfigError(
        "buffer.train_batch_size",
        f"train step {step} cannot fill{_stall(cfg)}: a train step reads {reads}, an explore "
        f"step writes {per_explore} (buffer.batch_size {cfg.buffer.batch_size} x "
        f"repeat_times {repeat}), and with synchronizer.sync_style fixed (sync_interval "
        f"{sync.sync_interval}, sync_offset {sync.sync_offset}) the explorer writes {written} "
        f"before it waits for the weights of train step {step}",
        value=size,
        valid=f"train_batch_size <= {largest_fillable(cfg, per_explore)}, a larger "
        "batch_size or repeat_times, or another sync_style",
    )


def _stall(cfg: Config) -> str:
    """How long a step that cannot fill waits, as the queue reads it."""
    buffer = cfg.buffer.trainer_input.experience_buffer
    timeout = getattr(buffer, "max_read_timeout", None)
    if timeout is None:
        return ""
    return (
        f" (each such step waits experience_buffer.max_read_timeout {timeout:g} s, then "
        "trains on fewer)"
    )


def _one_per_rollout(workflow: str | None) -> bool:
    """Whether the registered workflow ``workflow`` declares one experience per rollout."""
    if not workflow:
        return False
    from trinity.workflows import WORKFLOWS  # the registry; only asked when a batch is large

    # a dotted name or a plugin's workflow is not imported to check a config: unknown
    if workflow not in WORKFLOWS:
        return False
    return bool(getattr(WORKFLOWS.get(workflow), "one_experience_per_rollout", False))
