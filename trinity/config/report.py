"""``trinity run --dry-run``: the resolved config plus the arithmetic it implies.

Shows how many tasks, rollouts and experiences each step handles, how a train step is cut
into micro-batches on each trainer rank, how long the run is, and where each part runs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from trinity.config.colocate import colocate_line
from trinity.config.derived import train_steps
from trinity.config.device_plan import COLOCATED_SHARE, device_plan
from trinity.config.loader import to_yaml
from trinity.config.no_effect import describe
from trinity.config.schema import Config
from trinity.config.train_batch import rollouts_read


def dry_run_report(
    cfg: Config,
    *,
    gpus_available: int | None = None,
    cpus: int | None = None,
    no_effect: Sequence[tuple[str, str]] = (),
) -> str:
    """Human-readable report of a resolved config.

    ``gpus_available`` (GPUs on this machine, if known) turns a GPU cluster config into a
    CPU plan when it is 0; ``cpus`` defaults to this machine's CPU count. ``no_effect``:
    the keys the config sets that do nothing here (``no_effect.set_without_effect``).
    """
    on_cpu = cfg.cluster.gpu_per_node == 0 or gpus_available == 0
    ranks = _trainer_ranks(cfg, on_cpu)
    lines = ["# Resolved configuration", to_yaml(cfg).rstrip(), "", "# Batch arithmetic"]
    if cfg.mode == "bench":
        lines += _bench_lines(cfg)
    elif cfg.mode in ("both", "explore"):
        lines += _explore_lines(cfg)
    lines += _train_lines(cfg, ranks) if cfg.mode in ("both", "train") else []
    lines += ["", "# Resources"]
    if cfg.cluster.colocate:
        lines.append(colocate_line(on_gpu=not on_cpu))
    lines += _cpu_lines(cfg, ranks, cpus or os.cpu_count() or 1) if on_cpu else _gpu_lines(cfg)
    if cfg.stages:
        lines += ["", "# Stages (run in order)"] + _stage_lines(cfg)
    if no_effect:
        lines += ["", "# Keys without effect", describe(list(no_effect))]
    return "\n".join(lines) + "\n"


def _stage_lines(cfg: Config) -> list[str]:
    """Each stage's name, mode and resolved algorithm parts (they may differ per stage)."""
    from datetime import datetime

    from trinity.config.stages import expand_stages

    lines = []
    for stage in expand_stages(cfg, now=datetime.now()):
        algo = stage.algorithm
        lines.append(
            f"{stage.name}: mode {stage.mode}, algorithm {algo.algorithm_type} "
            f"(advantage_fn {algo.advantage_fn}, policy_loss_fn {algo.policy_loss_fn}, "
            f"kl_loss_fn {algo.kl_loss_fn}, kl_penalty_fn {algo.kl_penalty_fn}, "
            f"entropy_loss_fn {algo.entropy_loss_fn}), "
            f"train_batch_size {stage.buffer.train_batch_size}"
        )
    return lines


def _explore_lines(cfg: Config) -> list[str]:
    buffer = cfg.buffer
    tasksets = buffer.explorer_input.tasksets
    rollouts = tasksets[0].repeat_times if tasksets else cfg.algorithm.repeat_times
    assert rollouts is not None  # resolved
    lines = [
        f"tasks per explore step (buffer.batch_size): {buffer.batch_size}",
        f"rollouts per task (repeat_times): {rollouts}",
        f"experiences per explore step: {buffer.batch_size} x {rollouts} = {buffer.batch_size * rollouts}",
    ]
    if len(tasksets) > 1:
        names = ", ".join(t.name for t in tasksets)
        lines.append(f"training tasksets: {names} (batches draw in proportion to their sizes)")
    if buffer.total_steps is not None:
        lines.append(f"explore steps: {buffer.total_steps} (buffer.total_steps)")
    else:
        lines.append(
            f"explore steps: unknown until the taskset is read: {buffer.total_epochs} epoch(s) x "
            f"ceil(tasks / {buffer.batch_size})"
        )
    for taskset in buffer.explorer_input.eval_tasksets:
        lines.append(
            f"eval taskset {taskset.name}: {taskset.repeat_times} rollout(s) per task, "
            f"every {cfg.explorer.eval_interval} explore steps"
        )
    return lines


def _bench_lines(cfg: Config) -> list[str]:
    which = (
        "the latest checkpoint"
        if cfg.explorer.bench_on_latest_checkpoint
        else "every saved checkpoint"
    )
    lines = [f"bench evaluates {which} of {cfg.checkpoint_root_dir}/{cfg.project}/{cfg.name}"]
    for taskset in cfg.buffer.explorer_input.eval_tasksets:
        lines.append(f"eval taskset {taskset.name}: {taskset.repeat_times} rollout(s) per task")
    return lines


def _train_lines(cfg: Config, ranks: int) -> list[str]:
    buffer, trainer = cfg.buffer, cfg.trainer
    train_batch = buffer.train_batch_size
    assert train_batch is not None and trainer.trainer_config is not None  # resolved
    actor = trainer.trainer_config.actor_rollout_ref.actor
    per_rank = math.ceil(train_batch / ranks)
    lines = [f"experiences per train step (buffer.train_batch_size): {train_batch}"]
    reads = rollouts_read(cfg, train_batch)
    if reads != train_batch:
        lines.append(
            f"of which from the experience buffer: {reads}; expert rows: {train_batch - reads}"
        )
    if cfg.mode == "both":
        tasksets = buffer.explorer_input.tasksets
        rollouts = tasksets[0].repeat_times if tasksets and tasksets[0].repeat_times else 1
        produced = buffer.batch_size * rollouts
        ratio = reads / produced
        lines.append(f"explore steps per train step: {reads} / {produced} = {ratio:g}")
        lines.append(
            f"weights synchronised every {cfg.synchronizer.sync_interval} train step(s) "
            f"by {cfg.synchronizer.sync_method}; explorer may run {cfg.synchronizer.sync_offset} step(s) ahead"
        )
    uneven = (
        "" if train_batch % ranks == 0 else f" (uneven: {train_batch} is not a multiple of {ranks})"
    )
    lines.append(f"trainer ranks: {ranks}; experiences per rank per train step: {per_rank}{uneven}")
    if actor.use_dynamic_bsz:
        longest = cfg.model.max_model_len or 1
        worst = math.ceil(per_rank / max(1, actor.ppo_max_token_len_per_gpu // longest))
        lines.append(
            f"micro-batches per rank: packed to {actor.ppo_max_token_len_per_gpu} tokens each "
            f"(use_dynamic_bsz); their number depends on lengths, at most {worst} if every sequence "
            f"is max_model_len ({longest}) long"
        )
        accumulation = f"one per packed micro-batch (at most {worst})"
    else:
        micro = min(actor.ppo_micro_batch_size_per_gpu, per_rank)
        count = math.ceil(per_rank / micro)
        lines.append(
            f"micro-batch size per rank: {micro}; micro-batches per rank per train step: {count}"
        )
        accumulation = str(count)
    lines.append(f"gradient accumulation steps per optimizer step: {accumulation}")
    lines.append(f"optimizer steps per train step (ppo_epochs): {actor.ppo_epochs}")
    steps = train_steps(cfg)
    if steps is not None:
        lines.append(f"total train steps: {steps}")
    else:
        lines.append(
            "total train steps: unknown until the taskset size is known (set buffer.total_steps to fix it)"
        )
    return lines


def _trainer_ranks(cfg: Config, on_cpu: bool) -> int:
    from trinity.config.trainer_ranks import trainer_layout

    return trainer_layout(cfg, on_gpu=not on_cpu).world_size


def _gpu_lines(cfg: Config) -> list[str]:
    total = cfg.cluster.node_num * cfg.cluster.gpu_per_node
    rollout = cfg.explorer.rollout_model
    lines = [f"GPUs: {cfg.cluster.node_num} node(s) x {cfg.cluster.gpu_per_node} = {total}"]
    if cfg.mode != "train":
        lines.append(
            f"explorer rollout model: {rollout.engine_num} engine(s) x {rollout.tensor_parallel_size} GPU(s) = "
            f"{rollout.engine_num * rollout.tensor_parallel_size}"
        )
        for i, aux in enumerate(cfg.explorer.auxiliary_models):
            lines.append(
                f"auxiliary model {i} ({aux.model_path}): {aux.engine_num} x {aux.tensor_parallel_size} = "
                f"{aux.engine_num * aux.tensor_parallel_size}"
            )
    plan = device_plan(cfg)
    if plan.kind == "colocate":
        if cfg.mode == "both":
            lines.append("trainer: shares the one GPU with the explorer (colocated)")
        requests = (
            f"{COLOCATED_SHARE} GPU per actor, so the explorer and the trainer fit on the one "
            "GPU together"
        )
    else:
        trainer = sum(len(a.gpus) for a in plan.actors if a.role == "trainer")
        lines.append(f"trainer: {trainer} GPU(s)" + (" (the rest)" if cfg.mode == "both" else ""))
        requests = "whole GPUs: tensor_parallel_size per engine, one per trainer rank"
    lines.append("device plan (Ray picks the GPU ids; placement.json records them):")
    lines += plan.lines()
    lines.append(f"Ray GPU requests: {requests}")
    return lines


def _cpu_lines(cfg: Config, ranks: int, cpus: int) -> list[str]:
    lines = ["no GPU: everything runs on CPU"]
    if cfg.cluster.gpu_per_node:
        lines[0] += (
            f" (cluster.gpu_per_node is {cfg.cluster.gpu_per_node} but this machine has none)"
        )
    compute = 0
    if cfg.mode != "train":
        rollout = cfg.explorer.rollout_model
        engines = rollout.engine_num * rollout.tensor_parallel_size
        aux = sum(m.engine_num * m.tensor_parallel_size for m in cfg.explorer.auxiliary_models)
        runners = cfg.explorer.runner_per_model * rollout.engine_num
        compute += engines + aux
        lines.append(f"rollout engine processes: {engines}; auxiliary model processes: {aux}")
        lines.append(
            f"workflow runners: {runners} ({cfg.explorer.runner_per_model} per engine; they wait on the engines)"
        )
    if cfg.mode in ("both", "train"):
        compute += ranks
        lines.append(
            f"trainer processes: {ranks} (trainer.trainer_config.trainer.nnodes x n_gpus_per_node)"
        )
    from trinity.utils.resources import EXPLORER_CPUS, SERVICE_CPUS, TRAINER_CPUS

    lines.append(
        f"Ray CPU requests: explorer {EXPLORER_CPUS} (runners are its threads), trainer rank "
        f"{TRAINER_CPUS} each, buffer and synchronizer {SERVICE_CPUS}; torch in each process "
        f"uses all {cpus} core(s) of its node, and in synchronous mode they take turns"
    )
    return lines
