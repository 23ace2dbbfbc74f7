"""``trinity run``: set up a run, start its actors on Ray, follow it, summarise it.

    setup:   resolve the model (GGUF conversion happens once, here), count steps,
             create the job directory, connect to Ray
    loop:    the explorer and/or trainer actors run their own loops (mode both: both,
             train: the trainer, explore: the explorer); this process polls the
             synchronizer for progress and draws the progress bar
    cleanup: plots, HTML report, summary, ``eval accuracy: <start> -> <end>``

With ``stages`` the stages run one after the other; each stage after the first starts
from the previous stage's final weights, which that stage exports as a Hugging Face
directory (``global_step_<N>/actor/huggingface``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from trinity.config import Config, expand_stages, to_yaml
from trinity.config import job_dir as get_job_dir
from trinity.launch.stage_actors import StageActors, reusable
from trinity.utils.resources import EXPLORER_CPUS, SERVICE_CPUS

logger = logging.getLogger("trinity.launch")

PLUGIN_MODULE_PREFIX = "trinity_plugin_"


class RunError(RuntimeError):
    """The run could not start or one of its actors failed."""


class PluginError(RuntimeError):
    """A ``--plugin-dir`` is not a directory or one of its modules failed to import."""


def load_plugins(plugin_dirs: Sequence[str | Path]) -> list[str]:
    """Import every ``*.py`` module directly inside ``plugin_dirs``; returns their names.

    Importing a module runs its registrations (workflows, reward functions, algorithm
    parts). A module already imported in this process is not imported again, so calling
    this in the driver and again in each actor is safe.
    """
    names = []
    for directory in plugin_dirs:
        path = Path(directory)
        if not path.is_dir():
            raise PluginError(f"--plugin-dir '{directory}' is not a directory")
        if str(path.resolve()) not in sys.path:
            sys.path.insert(0, str(path.resolve()))
        for file in sorted(path.glob("*.py")):
            name = f"{PLUGIN_MODULE_PREFIX}{file.stem}"
            names.append(name)
            if name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(name, file)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise PluginError(f"plugin module {file} failed to import: {exc!r}") from exc
    return names


def load_external_libs(config: Config) -> list[str]:
    """Import the modules ``model.external_lib`` names (the actor's, then the critic's).

    veRL's key: a module that registers custom architectures with transformers' Auto
    classes before a model is built; it may register workflows or reward functions too.
    Called in the driver before the run's names are looked up and first in every actor.
    """
    tc = config.trainer.trainer_config
    if tc is None:
        return []
    names: list[str] = []
    for key, name in (
        ("actor_rollout_ref.model.external_lib", tc.actor_rollout_ref.model.external_lib),
        ("critic.model.external_lib", tc.critic.model.external_lib),
    ):
        if not name or name in names:
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise PluginError(
                f"trainer.trainer_config.{key}: cannot import module '{name}' ({exc!r}); "
                "it must be importable in every process (installed, on PYTHONPATH, or in a "
                "--plugin-dir)"
            ) from exc
        names.append(name)
    return names


def count_steps(config: Config) -> int:
    """Steps of a stage: total_steps if given, else epochs x batches of the data."""
    from trinity.config.algorithm_defaults import trains_on_dataset

    if config.mode == "train" and trains_on_dataset(config):
        from trinity.trainer.train_input import dataset_steps

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


def run(config: Config, plugin_dirs: Sequence[str | Path] = ()) -> list[dict[str, Any]]:
    """Run every stage of ``config`` in order; each starts from the previous stage's weights.

    ``plugin_dirs`` are imported in every actor, as they were in this process.
    """
    plugin_dirs = [str(Path(d).resolve()) for d in plugin_dirs]
    stages = expand_stages(config, now=datetime.now())
    results = []
    previous_model: str | None = None
    kept = StageActors()  # the actors a stage hands on to the next
    try:
        for index, stage in enumerate(stages):
            if previous_model is not None:
                stage = start_from(stage, previous_model)
            result = run_stage(stage, plugin_dirs, export_final=index + 1 < len(stages), kept=kept)
            results.append(result)
            previous_model = result.get("final_model_dir") or previous_model
    finally:
        kept.kill_all()
    return results


def start_from(config: Config, model_dir: str) -> Config:
    """``config`` with the policy (and what followed it) starting from ``model_dir``."""
    old = config.model.model_path
    model = replace(config.model, model_path=model_dir)
    if config.model.critic_model_path == old:
        model = replace(model, critic_model_path=model_dir)
    rollout = config.explorer.rollout_model
    if rollout.model_path == old:
        rollout = replace(rollout, model_path=model_dir)
    return replace(config, model=model, explorer=replace(config.explorer, rollout_model=rollout))


def run_bench(config: Config) -> dict[str, Any]:
    """Mode bench: evaluate the base model and the run's checkpoints, in this process.

    One metric row per evaluated model goes to the monitor run ``<name>_bench`` (see
    ``trinity.explorer.bench``). Ray is started only when extra engines need actors.
    """
    from trinity.config import to_dict
    from trinity.explorer.bench import Bench
    from trinity.launch.process_policy import scoped_environment
    from trinity.models.resolve import resolve_model_path
    from trinity.monitor import make_monitor

    job_dir = get_job_dir(config)
    if not job_dir.is_dir():
        raise RunError(
            f"mode bench evaluates the checkpoints in {job_dir}, which does not exist; "
            "set checkpoint_root_dir, project and name to those of the run to evaluate"
        )
    (job_dir / "log").mkdir(exist_ok=True)
    model_dir = str(resolve_model_path(config.model.model_path))
    if config.explorer.rollout_model.engine_num > 1:
        from trinity.launch.cluster import connect, torch_work_overlaps

        connect(
            config.cluster.ray_address,
            config.ray_namespace,
            overlapping=torch_work_overlaps(config),
        )
    monitor = make_monitor(
        config.monitor.monitor_type,
        project=config.project,
        name=config.name,
        role="bench",
        job_dir=job_dir,
        monitor_args=config.monitor.monitor_args,
        config_dict=to_dict(config),
    )
    try:
        # the bench's runners are threads of this process: explorer.env_vars are set
        # here while it runs, and the environment is restored after
        with scoped_environment(config.explorer.env_vars):
            bench = Bench(config, job_dir, model_dir, monitor)
            try:
                rows = bench.run()
            finally:
                bench.close()
    finally:
        monitor.close()
    for step, metrics in rows.items():
        accuracy = _eval_accuracy(metrics)
        shown = f"{accuracy:.3f}" if accuracy is not None else "n/a"
        print(f"[trinity] bench step {step}: eval accuracy {shown}", file=sys.stderr)
    return {"job_dir": str(job_dir), "bench_steps": list(rows), "bench": rows}


def run_stage(
    config: Config,
    plugin_dirs: Sequence[str] = (),
    *,
    export_final: bool = False,
    kept: StageActors | None = None,
) -> dict[str, Any]:
    """Run one stage (mode both, train or explore); ``export_final`` writes its final
    policy as a Hugging Face directory, reported as ``final_model_dir``, for a next
    stage, to which the stage also hands on its actors through ``kept``
    (``trinity.launch.stage_actors``)."""
    import ray

    from trinity.config.algorithm_defaults import trains_on_dataset
    from trinity.launch.actor_start import deferred_start_errors
    from trinity.launch.cluster import connect, torch_work_overlaps
    from trinity.launch.process_policy import actor_env
    from trinity.launch.resume import resume_step
    from trinity.launch.roles import ExplorerRole, TrainerRole
    from trinity.launch.trainer_group import start_trainer, write_placement
    from trinity.models.resolve import resolve_model_path
    from trinity.sync.synchronizer import Synchronizer

    mode = config.mode
    if mode == "bench":
        return run_bench(config)
    if mode == "serve":  # no Ray: the engine and its server in this process
        from trinity.explorer.serve import run_serve

        if config.buffer.trainer_input.experience_buffer is None:
            raise RunError(
                "mode serve writes rewarded calls to buffer.trainer_input.experience_buffer: "
                "set it (storage_type sql or file, so a trainer elsewhere can read it)"
            )
        run_serve(config, str(resolve_model_path(config.model.model_path)))
        return {"mode": "serve"}
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
    # sync_method memory on one node: the weights travel through one shared-memory file
    hand_on = export_final and kept is not None  # another stage follows
    kept = kept if kept is not None else StageActors()
    with weight_slot(config) as slot:
        # each actor with the key under which a next stage may take it over (None: never)
        actors: list[tuple[Any, Any]] = []
        rebuilding: list[Any] = []  # kept actors building this stage's role

        def start(key, create, *args):
            actor, rebuilt = kept.start(key, create, *args)
            actors.append((actor, key))
            rebuilding.extend([rebuilt] if rebuilt is not None else [])
            return actor

        synchronizer = start(
            ("synchronizer",),
            lambda: ray.remote(reusable(Synchronizer)).options(num_cpus=SERVICE_CPUS),
            slot,
        )
        buffer = None
        if not trains_on_dataset(config):
            exp_buf = config.buffer.trainer_input.experience_buffer
            buffer = start(
                ("buffer", exp_buf.name),
                lambda: ray.remote(reusable(_BufferActor)).options(
                    num_cpus=SERVICE_CPUS, max_concurrency=16, name=exp_buf.name
                ),
                exp_buf,
            )
        explorer = None
        if mode in ("both", "explore"):
            # its workflow runners are threads: they see explorer.env_vars here
            runtime_env = actor_env(config.explorer.env_vars)
            explorer = start(
                ("explorer", config.explorer.name, repr(runtime_env)),
                lambda: ray.remote(deferred_start_errors(reusable(ExplorerRole))).options(
                    num_cpus=EXPLORER_CPUS,
                    max_concurrency=2,
                    name=config.explorer.name,
                    runtime_env=runtime_env,
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
            )
            actors.extend((rank, None) for rank in trainer_actors.ranks[1:])
            actors.append((trainer_actors.lead, trainer_actors.key))
            rebuilding.extend([trainer_actors.rebuilt] if trainer_actors.rebuilt else [])
        ray.get(rebuilding)  # a start error is kept for the first call, as in a new actor
        refs: dict[str, Any] = {}
        if explorer is not None:
            refs["explorer"] = explorer.run.remote(total_steps, start_step)
        if trainer_actors is not None:
            refs["trainer"] = trainer_actors.lead.run.remote(
                total_steps, start_step, export_hf=export_final
            )
        write_placement(job_dir, explorer, trainer_actors)
        results = _follow(
            refs, synchronizer, total_steps, "trainer" if "trainer" in refs else "explorer"
        )
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
        # the next stage names its actors the same way; a name is free once its actor is gone
        rank_names = trainer_actors.release() if trainer_actors is not None else []
        names = [config.explorer.name, config.trainer.name, _experience_buffer_name(config)]
        _wait_until_released([n for n in names if n not in kept_names] + rank_names)
    return _summarise(config, job_dir, results, model_dir)


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


def _experience_buffer_name(config: Config) -> str:
    storage = config.buffer.trainer_input.experience_buffer
    return storage.name if storage is not None else ""


def _wait_until_released(names: list[str], timeout: float = 10.0) -> None:
    import ray

    deadline = time.monotonic() + timeout
    for name in filter(None, names):
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name)
            except ValueError:
                break
            time.sleep(0.05)


class _BufferActor:
    """The experience buffer (queue, priority queue, sql or file) as a threaded actor."""

    def __init__(self, storage) -> None:
        from trinity.buffer import make_experience_buffer

        self.queue = make_experience_buffer(storage)

    def put(self, experiences):
        self.queue.put(experiences)

    def get(self, n: int, timeout: float | None):
        """Up to ``n`` experiences; an empty list once the queue is closed and drained."""
        from trinity.buffer.errors import QueueClosed

        try:
            return self.queue.get(n, timeout)
        except QueueClosed:
            return []

    def close(self) -> None:
        self.queue.close()


@contextlib.contextmanager
def weight_slot(config: Config) -> Iterator[str | None]:
    """The shared-memory file of a one-node ``sync_method: memory`` run (None otherwise),
    removed when the run ends (``trinity.sync.weight_slot``)."""
    import ray

    from trinity.sync.weight_slot import new_slot_path, remove_slot

    path = None
    if config.mode == "both" and config.synchronizer.sync_method == "memory":
        here = ray.get_runtime_context().get_node_id()
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        if nodes == [here]:
            path = new_slot_path()
    try:
        yield path
    finally:
        remove_slot(path)


def _follow(refs: dict[str, Any], synchronizer, total_steps: int, lead: str) -> dict[str, Any]:
    """Wait for the actors, drawing progress (the ``lead`` role's steps) from the synchronizer."""
    import ray

    from trinity.monitor.progress import Progress

    progress = Progress(total_steps, "train" if lead == "trainer" else "explore")
    pending = list(refs.values())
    last_step = 0
    try:
        while pending:
            done, pending = ray.wait(pending, timeout=1.0)
            for ref in done:
                ray.get(ref)  # re-raise an actor's failure at once
            status = ray.get(synchronizer.get_status.remote())
            trainer = status["roles"].get("trainer")
            explorer = status["roles"].get("explorer")
            leader = status["roles"].get(lead)
            step = leader["step"] if leader else 0
            if step != last_step:
                postfix = {}
                if explorer:
                    postfix["reward"] = explorer["metrics"].get("rollout/reward/mean", float("nan"))
                if trainer:
                    metrics = trainer["metrics"]
                    postfix["loss"] = metrics.get(
                        "actor/pg_loss", metrics.get("actor/loss", float("nan"))
                    )
                evals = status["roles"].get("eval")
                if evals:
                    acc = [v for k, v in evals["metrics"].items() if k.endswith("/accuracy/mean")]
                    if acc:
                        postfix["eval_acc"] = acc[0]
                progress.update(step, **postfix)
                last_step = step
    except ray.exceptions.RayError as exc:
        raise RunError(f"an actor failed: {exc}") from exc
    finally:
        progress.close()
    return {name: ray.get(ref) for name, ref in refs.items()}


def _eval_accuracy(metrics: dict[str, float] | None) -> float | None:
    if not metrics:
        return None
    values = [
        v for k, v in metrics.items() if k.startswith("eval/") and k.endswith("/accuracy/mean")
    ]
    return values[0] if values else None


def _summarise(
    config: Config, job_dir: Path, results: dict[str, Any], model_dir: str
) -> dict[str, Any]:
    from trinity.monitor.plots import write_html_report, write_plots
    from trinity.trainer import checkpoint as ckpt

    plots: list[Path] = []
    try:
        plots = write_plots(job_dir)
        plots.append(write_html_report(job_dir, pngs=plots))
    except (FileNotFoundError, ValueError) as exc:
        logger.warning("no plots written: %s", exc)
    explorer = results.get("explorer", {})
    trainer = results.get("trainer", {})
    start, end = (
        _eval_accuracy(explorer.get("first_eval")),
        _eval_accuracy(explorer.get("last_eval")),
    )
    latest = ckpt.read_latest(job_dir)
    summary = {
        "job_dir": str(job_dir),
        "steps": trainer.get("steps", explorer.get("steps")),
        "latest_checkpoint": str(ckpt.step_dir(job_dir, latest)) if latest else None,
        "plots": [str(p) for p in plots],
        "eval_accuracy_start": start,
        "eval_accuracy_end": end,
        "final_model_dir": trainer.get("final_model_dir") or model_dir,
    }
    print(
        f"[trinity] finished {summary['steps']} steps; checkpoints: {summary['latest_checkpoint']}",
        file=sys.stderr,
    )
    if trainer.get("final_model_dir"):
        print(f"[trinity] final policy: {trainer['final_model_dir']}", file=sys.stderr)
    for p in plots:
        print(f"[trinity] wrote {p}", file=sys.stderr)
    for line in _final_metric_lines(job_dir):
        print(f"[trinity] {line}", file=sys.stderr)
    if start is not None and end is not None:
        print(f"eval accuracy: {start:.3f} -> {end:.3f}")
    return summary


# metrics the end-of-run summary shows, when the run logged them
_SUMMARY_KEYS = (
    "rollout/reward/mean",
    "rollout/response_length/mean",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "time/explore_step",
    "time/train_step",
)


def _final_metric_lines(job_dir: Path) -> list[str]:
    """Best eval score (with its step) and the last value of the headline metrics."""
    from trinity.monitor.jsonl import metric_files, read_metrics

    best: dict[str, tuple[float, int]] = {}
    final: dict[str, float] = {}
    for path in metric_files(job_dir / "monitor"):
        for row in read_metrics(path):
            step = int(row.get("step", 0))
            for key, value in row.items():
                if key.startswith("eval/") and key.endswith("/accuracy/mean"):
                    if key not in best or value > best[key][0]:
                        best[key] = (value, step)
                if key in _SUMMARY_KEYS:
                    final[key] = value
    lines = [
        f"best {key}: {value:.4g} at step {step}" for key, (value, step) in sorted(best.items())
    ]
    if final:
        lines.append(
            "final " + ", ".join(f"{k}={final[k]:.4g}" for k in _SUMMARY_KEYS if k in final)
        )
    return lines
