"""One stage of ``trinity run`` in mode both, train or explore, on Ray.

setup:   the job directory and its resolved ``config.yaml``, the task pipeline's
         taskset, the model directories, the step count and the resume step; Ray
actors:  synchronizer, experience buffer, explorer, trainer (one actor or a group of
         ranks); actors a previous stage handed on are rebuilt instead of started
loop:    the explorer and/or trainer run their own loops; the driver follows them
         (``follow``)
cleanup: the actors stop, or are kept for the next stage (``stage_actors``); the
         summary (``summary``). On a failure every actor the stage started stops and
         nothing is kept
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from trinity.config import Config, to_yaml
from trinity.config import job_dir as get_job_dir
from trinity.launch.errors import RunError
from trinity.launch.stage_actors import (
    StageActors,
    reusable,
    stop_actors,
    wait_until_released,
)
from trinity.utils.resources import EXPLORER_CPUS, SERVICE_CPUS


def count_steps(config: Config) -> int:
    """Steps of a stage: total_steps if given, else epochs x batches of the data."""
    from trinity.config.algorithm_defaults import trains_on_dataset

    if config.mode == "train" and trains_on_dataset(config):
        from trinity.trainer.dataset_steps import dataset_steps

        return dataset_steps(config)
    if config.buffer.total_steps:
        return int(config.buffer.total_steps)
    if config.trainer.total_steps:
        return int(config.trainer.total_steps)
    if config.mode == "train":
        raise RunError(
            "cannot count the train steps of mode train: set buffer.total_steps "
            "(the experience buffer is read as it fills)"
        )
    from trinity.explorer.explorer import make_taskset_mix

    tasksets = make_taskset_mix(config)
    if tasksets is None:
        raise RunError(
            "cannot count steps: set buffer.total_steps or buffer.explorer_input.taskset"
        )
    return len(tasksets)


def run_stage(
    config: Config,
    plugin_dirs: Sequence[str] = (),
    *,
    export_final: bool = False,
    kept: StageActors | None = None,
) -> dict[str, Any]:
    """Run one stage (mode both, train or explore) and summarise it; ``export_final``
    writes its final policy as a Hugging Face directory, reported as ``final_model_dir``,
    for a next stage, to which the stage also hands on its actors through ``kept``
    (``trinity.launch.stage_actors``)."""
    import ray

    from trinity.config.algorithm_defaults import trains_on_dataset
    from trinity.config.colocate import colocate_line
    from trinity.launch.actor_start import deferred_start_errors
    from trinity.launch.buffer_actor import BufferActor
    from trinity.launch.cluster import connect, torch_work_overlaps
    from trinity.launch.follow import follow
    from trinity.launch.gpus import check_cluster, explorer_options, run_plan
    from trinity.launch.process_policy import actor_env
    from trinity.launch.resume import resume_step
    from trinity.launch.roles import ExplorerRole, TrainerRole
    from trinity.launch.summary import summarise
    from trinity.launch.trainer_group import start_trainer, write_placement
    from trinity.rollout.model_path import resolve_model_path
    from trinity.sync.synchronizer import Synchronizer
    from trinity.sync.weight_slot import run_slot

    mode = config.mode
    trainer_actors = None
    if mode not in ("both", "train", "explore"):
        raise RunError(
            f"mode '{mode}' cannot run yet: this version runs modes both, train and explore"
        )
    if trains_on_dataset(config) and mode != "train":
        raise RunError(
            f"algorithm_type {config.algorithm.algorithm_type} trains on a dataset, not on rollouts: "
            "use mode train (e.g. as a stage with `mode: train`)"
        )
    job_dir = get_job_dir(config)
    for sub in ("log", "monitor", "buffer"):
        (job_dir / sub).mkdir(parents=True, exist_ok=True)
    if config.data_processor.task_pipeline is not None and mode in ("both", "explore"):
        config = prepare_taskset(config, job_dir)
    (job_dir / "config.yaml").write_text(to_yaml(config))
    model_dir = str(resolve_model_path(config.model.model_path))
    critic_dir = None
    if config.algorithm.use_critic and mode != "explore":
        critic_dir = str(
            resolve_model_path(config.model.critic_model_path or config.model.model_path)
        )
    total_steps = count_steps(config)
    print(
        f"[trinity] run '{config.project}/{config.name}' (mode {mode}): {total_steps} steps, job dir {job_dir}",
        file=sys.stderr,
    )
    start_step = resume_step(config, job_dir)
    if start_step:
        print(f"[trinity] resuming after step {start_step}", file=sys.stderr)

    how = connect(
        config.cluster.ray_address, config.ray_namespace, overlapping=torch_work_overlaps(config)
    )
    print(
        f"[trinity] ray: {how} ({ray.cluster_resources().get('CPU', 0):.0f} CPUs)", file=sys.stderr
    )
    plan = run_plan(config)
    devices = check_cluster(config, plan)
    if devices is not None:
        print(f"[trinity] {devices}", file=sys.stderr)
    if config.cluster.colocate:
        print(f"[trinity] {colocate_line(on_gpu=plan.kind != 'cpu')}", file=sys.stderr)
    # sync_method memory on one node: the weights travel through one shared-memory file
    hand_on = export_final and kept is not None  # another stage follows
    kept = kept if kept is not None else StageActors()
    with run_slot(config) as slot:
        # each actor with the key under which a next stage may take it over (None: never)
        actors: list[tuple[Any, Any]] = []
        rebuilding: list[Any] = []  # kept actors building this stage's role

        def start(key, create, *args):
            actor, rebuilt = kept.start(key, create, *args)
            actors.append((actor, key))
            if rebuilt is not None:
                rebuilding.append(rebuilt)
            return actor

        try:
            synchronizer = start(
                ("synchronizer",),
                lambda: ray.remote(reusable(Synchronizer)).options(num_cpus=SERVICE_CPUS),
                slot,
            )
            buffer = None
            if not trains_on_dataset(config):
                exp_buf = config.buffer.trainer_input.experience_buffer
                # unnamed, so that the next stage takes it over whatever its buffer's name
                buffer = start(
                    ("buffer",),
                    lambda: ray.remote(reusable(BufferActor)).options(
                        num_cpus=SERVICE_CPUS, max_concurrency=16
                    ),
                    exp_buf,
                )
            explorer = None
            if mode in ("both", "explore"):
                # its workflow runners are threads: they see explorer.env_vars here
                runtime_env = actor_env(config.explorer.env_vars)
                gpus = explorer_options(plan)
                explorer = start(
                    ("explorer", config.explorer.name, repr(runtime_env), gpus["num_gpus"]),
                    lambda: ray.remote(deferred_start_errors(reusable(ExplorerRole))).options(
                        num_cpus=EXPLORER_CPUS,
                        max_concurrency=2,
                        name=config.explorer.name,
                        runtime_env=runtime_env,
                        **gpus,
                    ),
                    *(config, str(job_dir), model_dir, buffer, synchronizer, plugin_dirs),
                )
            if mode in ("both", "train"):
                trainer_actors = start_trainer(
                    config,
                    reusable(TrainerRole),
                    (
                        config,
                        str(job_dir),
                        model_dir,
                        buffer,
                        synchronizer,
                        total_steps,
                        plugin_dirs,
                        critic_dir,
                    ),
                    job_dir=str(job_dir),
                    model_dir=model_dir,
                    total_steps=total_steps,
                    plugin_dirs=plugin_dirs,
                    kept=kept,
                    plan=plan,
                )
                actors.extend((rank, None) for rank in trainer_actors.ranks[1:])
                actors.append((trainer_actors.lead, trainer_actors.key))
                if trainer_actors.rebuilt is not None:
                    rebuilding.append(trainer_actors.rebuilt)
            ray.get(rebuilding)  # a start error is kept for the first call, as in a new actor
            if buffer is not None and start_step and mode != "explore":
                # before the explorer stores anything: the trainer's checkpointed read position
                ray.get(buffer.resume.remote(str(job_dir), start_step, mode == "both"))
            kept.kill_all()  # what the stage before left and this one did not take
            refs: dict[str, Any] = {}
            if explorer is not None:
                refs["explorer"] = explorer.run.remote(total_steps, start_step)
            if trainer_actors is not None:
                refs["trainer"] = trainer_actors.lead.run.remote(
                    total_steps, start_step, export_hf=export_final
                )
            write_placement(job_dir, explorer, trainer_actors)
            lead = "trainer" if "trainer" in refs else "explorer"
            results = follow(refs, synchronizer, total_steps, lead, job_dir)
            if trainer_actors is not None:
                trainer_actors.shutdown()
            if explorer is not None:
                ray.get(explorer.close.remote())
            if config.monitor.enable_ray_timeline:
                from trinity.monitor.timeline import write_ray_timeline

                write_ray_timeline(job_dir)
            retiring, kept_names = [], set()
            for actor, key in reversed(actors):
                if hand_on and key is not None:
                    retiring.append(kept.keep(key, actor))
                    kept_names.add(key[1] if len(key) > 1 else None)
                else:
                    ray.kill(actor)
            ray.get(retiring)
            # the next stage names its actors the same way; a name is free once its actor
            # is gone
            rank_names = trainer_actors.release() if trainer_actors is not None else []
            names = [config.explorer.name, config.trainer.name]
            wait_until_released([n for n in names if n not in kept_names] + rank_names)
        except BaseException:
            # nothing is handed on from a failed (or interrupted) stage: every actor it
            # started stops, so that a program calling run() is not left holding them
            stop_actors(
                [actor for actor, _ in actors],
                [config.explorer.name, config.trainer.name],
                release=trainer_actors.release if trainer_actors is not None else None,
            )
            raise
    return summarise(job_dir, results, model_dir)


def prepare_taskset(config: Config, job_dir: Path) -> Config:
    """Run ``data_processor.task_pipeline``; its output becomes the first training taskset.

    The output is ``<job_dir>/buffer/task_pipeline/<taskset name>.jsonl``; the taskset
    keeps its name, format and rollout settings and reads that file instead of its
    ``path``. A resumed run (``continue_from_checkpoint``) reuses an existing output, so
    its tasks are the ones the interrupted run read.
    """
    from trinity.pipeline import run_task_pipeline

    inputs = config.buffer.explorer_input
    if inputs.taskset is None:
        raise RunError(
            "data_processor.task_pipeline writes the training taskset: set "
            "buffer.explorer_input.taskset (its name, format and rollout_args describe the output)"
        )
    output = job_dir / "buffer" / "task_pipeline" / f"{inputs.taskset.name}.jsonl"
    if config.continue_from_checkpoint and output.exists():
        print(f"[trinity] task pipeline: reusing {output}", file=sys.stderr)
    else:
        _, metrics = run_task_pipeline(
            config.data_processor.task_pipeline, str(output), config.service.data_juicer
        )
        print(
            f"[trinity] task pipeline: {metrics['task_pipeline/input']:.0f} tasks in, "
            f"{metrics['task_pipeline/output']:.0f} out -> {output}",
            file=sys.stderr,
        )
    taskset = replace(inputs.taskset, path=str(output), subset_name=None)
    tasksets = [taskset, *inputs.tasksets[1:]]
    explorer_input = replace(inputs, taskset=taskset, tasksets=tasksets)
    return replace(config, buffer=replace(config.buffer, explorer_input=explorer_input))
