"""``trinity run``: set up a run, start its actors on Ray, follow it, summarise it.

    setup:   resolve the config into its stages (one without ``stages``)
    loop:    each stage runs in turn (``stage.run_stage``: the job directory, the actors,
             the progress bar, the summary); each stage after the first starts from the
             previous stage's final weights, which that stage exports as a Hugging Face
             directory (``global_step_<N>/actor/huggingface``) and hands its actors on
             (``stage_actors``); mode bench (``bench_mode``) and mode serve run in this process
    cleanup: a stage that fails (or is interrupted) stops every actor it started, those
             still starting included; the actors kept for a next stage stop when the
             run ends or fails, so a program calling ``run()`` is left holding none

The pieces: ``plugins`` (user code every process imports), ``stage`` (one stage on Ray),
``buffer_actor``, ``follow`` (progress), ``summary``, ``bench_mode``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from trinity.config import Config, expand_stages
from trinity.launch.errors import RunError
from trinity.launch.plugins import PluginError, load_external_libs, load_plugins
from trinity.launch.stage import count_steps, prepare_taskset, run_stage
from trinity.launch.stage_actors import StageActors

# importers of the names this module held before it was split keep working
__all__ = [
    "PluginError",
    "RunError",
    "count_steps",
    "load_external_libs",
    "load_plugins",
    "prepare_taskset",
    "run",
    "start_from",
]


def run(config: Config, plugin_dirs: Sequence[str | Path] = ()) -> list[dict[str, Any]]:
    """Run every stage of ``config`` in order; each starts from the previous stage's weights.

    ``plugin_dirs`` are imported in every actor, as they were in this process. When a
    stage fails, its error is raised once every actor of the run has been killed.
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
            if stage.mode == "bench":
                from trinity.launch.bench_mode import run_bench

                result = run_bench(stage)
            elif stage.mode == "serve":
                result = _serve(stage)
            else:
                result = run_stage(
                    stage, plugin_dirs, export_final=index + 1 < len(stages), kept=kept
                )
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


def _serve(config: Config) -> dict[str, Any]:
    """Mode serve: no Ray, the engine and its OpenAI-compatible server in this process."""
    from trinity.explorer.serve import run_serve
    from trinity.rollout.model_path import resolve_model_path

    if config.buffer.trainer_input.experience_buffer is None:
        raise RunError(
            "mode serve writes rewarded calls to buffer.trainer_input.experience_buffer: "
            "set it (storage_type sql or file, so a trainer elsewhere can read it)"
        )
    run_serve(config, str(resolve_model_path(config.model.model_path)))
    return {"mode": "serve"}
