"""What a run will look up, checked before it starts: registered names and data paths.

``trinity run`` (and ``--dry-run``) calls ``check_lookups`` after ``load_config`` and the
``--plugin-dir`` imports, so a workflow, reward function, pipeline operator or monitor
the run could not find, a dataset path that holds nothing, or a ``checkpoint_root_dir``
the run cannot create, fails in one line naming the key instead of when the explorer or
trainer starts. These checks depend on this machine (its files, the plugins imported,
the modules installed), so they are not part of ``validate``, which judges the config
alone.

A name is valid when it is built in, registered by a plugin, or a dotted path
``pkg.module.Name`` that imports. Built-in names are known from ``BUILTIN_NAMES`` without
importing the registries (which import torch); a test compares it with them.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from trinity.config.agentscope_needs import AGENTSCOPE_WORKFLOWS, check_agentscope
from trinity.config.derived import job_dir as job_dir_of
from trinity.config.errors import ConfigError, closest
from trinity.config.media_rows import check_media_model, check_media_rows
from trinity.config.schema import Config, ExperienceBufferConfig, TasksetConfig
from trinity.config.upstream.external_envs import EXTERNAL_WORKFLOWS, check_external_env

# registry kind -> (module whose import registers the built-ins, registry attribute)
REGISTRIES = {
    "workflow": ("trinity.workflows", "WORKFLOWS"),
    "reward function": ("trinity.rewards", "REWARD_FNS"),
    "experience operator": ("trinity.pipeline", "EXPERIENCE_OPERATORS"),
    "task operator": ("trinity.pipeline", "TASK_OPERATORS"),
    "monitor": ("trinity.monitor", "MONITORS"),
}
BUILTIN_NAMES: dict[str, frozenset[str]] = {
    "workflow": frozenset(
        {
            *EXTERNAL_WORKFLOWS,
            *AGENTSCOPE_WORKFLOWS,
            "async_math_boxed_workflow",
            "async_math_eval_workflow",
            "async_math_rm_workflow",
            "async_math_ruler_workflow",
            "async_math_workflow",
            "async_simple_mm_workflow",
            "async_simple_workflow",
            "countdown_workflow",
            "env_workflow",
            "frozen_lake_workflow",
            "llm_judge_workflow",
            "math_boxed_workflow",
            "math_eval_workflow",
            "math_rm_workflow",
            "math_ruler_workflow",
            "math_trainable_ruler_workflow",
            "math_workflow",
            "multi_turn_tool_workflow",
            "on_policy_distill_math_workflow",
            "on_policy_distill_workflow",
            "rubric_judge_openai_workflow",
            "rubric_judge_workflow",
            "sciworld_workflow",
            "simple_mm_workflow",
            "simple_workflow",
            "step_wise_env_workflow",
            "sudoku_workflow",
            "thinking_budget_workflow",
            "tool_call_workflow",
            "toolcall_workflow",
        }
    ),
    "reward function": frozenset(
        {
            "accuracy_reward",
            "countdown_reward",
            "format_reward",
            "math_boxed_reward",
            "math_dapo_reward",
            "math_format_reward",
            "math_reward",
            "rlcr_reward",
        }
    ),
    "experience operator": frozenset(
        {
            "dapo_dynamic_sampling",
            "data_juicer",
            "invalid_reward_filter",
            "mask_response_truncated",
            "pass_rate_calculator",
            "pass_rate_stats",
            "reward_filter",
            "reward_shaping_mapper",
            "reward_std_filter",
            "zero_variance_filter",
        }
    ),
    "task operator": frozenset({"data_juicer", "dedupe", "value_filter"}),
    "monitor": frozenset({"console", "jsonl", "mlflow", "swanlab", "tensorboard", "wandb"}),
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
_STEP_DIR = re.compile(r"^global_step_(\d+)$")  # trinity/trainer/checkpoint.py's layout
RESUME_FROM_PATH = "trainer.trainer_config.trainer.resume_from_path"


def check_lookups(cfg: Config, *, now: datetime | None = None) -> None:
    """Raise ``ConfigError`` for the first name or data path the run could not find.

    ``cfg`` is resolved (``load_config``); with ``stages`` every stage is checked.
    """
    if not cfg.stages:
        _check_stage(cfg)
        return
    from trinity.config.stages import expand_stages

    stages = expand_stages(cfg, now=now or datetime.now())
    for stage, staged in zip(cfg.stages, stages, strict=True):
        try:
            _check_stage(staged)
        except ConfigError as err:
            raise err.within(f"stage '{stage.stage_name}'") from err


def check_name(path: str, kind: str, name: str) -> None:
    """``name`` is a built-in, plugin-registered or importable ``kind``; else ConfigError."""
    if name in BUILTIN_NAMES[kind]:
        return
    module, attr = REGISTRIES[kind]
    registry = getattr(importlib.import_module(module), attr)
    try:
        registry.get(name)
    except Exception as exc:  # a dotted path's module may fail to import in any way
        known = registry.names()
        valid = "registered: " + ", ".join(known) + "; or a dotted path pkg.module.Name"
        if "." in name:
            cause = exc.__cause__ or exc  # the registry wraps the import's own error
            problem = f"cannot import {kind} ({type(cause).__name__}: {_first_line(cause)})"
            raise ConfigError(path, problem, value=name, valid=valid) from None
        raise ConfigError(
            path, f"unknown {kind}", value=name, valid=valid, suggestion=closest(name, known)
        ) from None


def check_data_path(path: str, given: str) -> None:
    """``given`` names a local file or directory; else ConfigError saying what to do."""
    if os.path.exists(os.path.expanduser(given)):
        return
    where = "" if os.path.isabs(given) else f" (relative to {os.getcwd()})"
    valid = "the path of an existing data file or dataset directory"
    if _HUB_ID.match(given):  # owner/name: datasets are never downloaded (buffer/file_reader.py)
        where += ", and datasets are never downloaded from a hub"
        valid += (
            f"; for a hub dataset: huggingface-cli download --repo-type dataset {given} "
            "--local-dir DIR, then set the path to DIR"
        )
    raise ConfigError(path, f"no such file or directory{where}", value=given, valid=valid)


def check_job_dir(cfg: Config) -> None:
    """The run can make ``<checkpoint_root_dir>/<project>/<name>`` or write in it, judged
    without creating anything: the nearest part of it that exists must be a directory this
    process may write in (``os.access``; root may write in any, but never under a file)."""
    target = os.path.abspath(job_dir_of(cfg))  # relative: to the working directory, as the run
    found = target
    while not os.path.lexists(found):  # ends at "/", which exists
        found = os.path.dirname(found)
    valid = "a directory this process can create or write in"
    if not os.path.isdir(found):  # a regular file, or a symlink to nothing or to a file
        problem = f"cannot be created: {found} is not a directory"
    elif not os.access(found, os.W_OK | os.X_OK):
        problem = f"cannot be created or written: {found} is not writable"
    else:
        return
    raise ConfigError("checkpoint_root_dir", problem, value=cfg.checkpoint_root_dir, valid=valid)


def checkpoint_step(path: str, given: str, job_dir: Path) -> int:
    """The step of the full checkpoint ``given`` names: ``<job_dir>/global_step_<N>``
    (or a path inside it); else ConfigError."""
    job_dir = Path(job_dir).resolve()
    candidate = Path(given).expanduser().resolve()
    found = next((p for p in (candidate, *candidate.parents) if _STEP_DIR.match(p.name)), None)
    valid = f"a global_step_<N> directory of this run's job dir {job_dir}"
    if found is None or found.parent != job_dir:
        raise ConfigError(path, "is not a checkpoint of this run", value=given, valid=valid)
    if not _is_full_checkpoint(found / "actor"):
        raise ConfigError(
            path,
            "holds no full checkpoint (only weights for checkpoint sync)",
            value=given,
            valid=valid,
        )
    match = _STEP_DIR.match(found.name)
    assert match is not None
    return int(match.group(1))


def _is_full_checkpoint(actor: Path) -> bool:
    """As trinity/trainer/checkpoint.py marks it: ``"full"`` in ``fsdp_config.json`` (the
    optimizer's shards may be left out by save_contents), else optimizer shards."""
    try:
        layout = json.loads((actor / "fsdp_config.json").read_text())
    except (OSError, ValueError):
        layout = {}
    if isinstance(layout, dict) and "full" in layout:
        return bool(layout["full"])
    return any(actor.glob("optim_world_size_*.pt"))


def _check_stage(cfg: Config) -> None:
    check_job_dir(cfg)
    for path, kind, name in _names(cfg):
        check_name(path, kind, name)
    for prefix, taskset in _tasksets(cfg):
        _check_tool_call_meaning(prefix, taskset)
        # a workflow whose environment is downloaded by hand: what to get and where
        name = taskset.default_workflow_type or ""
        check_external_env(f"{prefix}.default_workflow_type", name, taskset.workflow_args)
        judge = bool(cfg.explorer.auxiliary_models)
        check_agentscope(f"{prefix}.default_workflow_type", name, taskset.workflow_args, judge)
    for path, given in _data_paths(cfg):
        check_data_path(path, given)
    for prefix, storage in [*_tasksets(cfg), *_datasets(cfg)]:
        check_media_model(prefix, storage, cfg.model.model_path)
        check_media_rows(prefix, storage)
    tc = cfg.trainer.trainer_config
    if (
        cfg.mode in ("both", "train")
        and cfg.continue_from_checkpoint
        and tc is not None
        and tc.trainer.resume_mode == "resume_path"
    ):
        checkpoint_step(RESUME_FROM_PATH, tc.trainer.resume_from_path, job_dir_of(cfg))


def _check_tool_call_meaning(prefix: str, taskset: TasksetConfig) -> None:
    """``tool_call_workflow`` is Trinity-RFT's ToolACE workflow; ``max_turns`` belongs to
    the multi-turn one that runs tools, which had that name here before."""
    if taskset.default_workflow_type == "tool_call_workflow" and "max_turns" in (
        taskset.workflow_args or {}
    ):
        raise ConfigError(
            f"{prefix}.default_workflow_type",
            "is Trinity-RFT's ToolACE workflow (one reply of function calls, no tool is "
            "run), which takes no workflow_args.max_turns",
            value="tool_call_workflow",
            valid="multi_turn_tool_workflow to run registered tools for up to max_turns "
            "replies, or no max_turns",
        )


def _names(cfg: Config) -> Iterator[tuple[str, str, str]]:
    """``(key path, registry kind, name)`` of every name the run will look up."""
    # every mode logs metrics; make_monitor splits the names the same way
    for name in cfg.monitor.monitor_type.split(","):
        if name.strip():
            yield "monitor.monitor_type", "monitor", name.strip()
    buffer, ei = cfg.buffer, cfg.buffer.explorer_input
    if cfg.mode in ("both", "explore", "bench"):
        levels = [("buffer", buffer), ("buffer.explorer_input", ei)]
        for prefix, owner in levels:
            yield from _task_names(prefix, owner)
        if ei.default_eval_workflow_type:
            yield (
                "buffer.explorer_input.default_eval_workflow_type",
                "workflow",
                ei.default_eval_workflow_type,
            )
        for prefix, storage in _tasksets(cfg):
            yield from _task_names(prefix, storage)
    pipelines = cfg.data_processor
    if cfg.mode in ("both", "explore"):
        for i, op in enumerate(pipelines.experience_pipeline.operators):
            path = f"data_processor.experience_pipeline.operators[{i}].name"
            yield path, "experience operator", op.name
        if pipelines.task_pipeline is not None:
            for i, op in enumerate(pipelines.task_pipeline.operators):
                yield f"data_processor.task_pipeline.operators[{i}].name", "task operator", op.name


def _task_names(prefix: str, owner: object) -> Iterator[tuple[str, str, str]]:
    workflow = getattr(owner, "default_workflow_type", None)
    reward = getattr(owner, "default_reward_fn_type", None)
    if workflow:
        yield f"{prefix}.default_workflow_type", "workflow", workflow
    if reward:
        yield f"{prefix}.default_reward_fn_type", "reward function", reward


def _tasksets(cfg: Config) -> Iterator[tuple[str, TasksetConfig]]:
    """The tasksets the explorer reads in this mode, with their key paths."""
    ei = cfg.buffer.explorer_input
    if cfg.mode in ("both", "explore"):
        for i, taskset in enumerate(ei.tasksets):
            yield f"buffer.explorer_input.tasksets[{i}]", taskset
    if cfg.mode in ("both", "explore", "bench"):
        for i, taskset in enumerate(ei.eval_tasksets):
            yield f"buffer.explorer_input.eval_tasksets[{i}]", taskset


def _datasets(cfg: Config) -> Iterator[tuple[str, ExperienceBufferConfig]]:
    """The SFT / DPO datasets the trainer reads in this mode, with their key paths."""
    from trinity.config.algorithm_defaults import trains_on_dataset

    if cfg.mode not in ("both", "train"):
        return
    ti = cfg.buffer.trainer_input
    for key, storage in ti.auxiliary_buffers.items():
        yield f"buffer.trainer_input.auxiliary_buffers.{key}", storage
    if trains_on_dataset(cfg) and ti.experience_buffer is not None:
        storage = ti.experience_buffer
        if storage.format.image_key or storage.format.video_key:
            if cfg.algorithm.algorithm_type == "cpt" or cfg.algorithm.policy_loss_fn == "dpo":
                raise ConfigError(
                    "buffer.trainer_input.experience_buffer.format.image_key",
                    "images are read by SFT datasets only, not by DPO or CPT rows",
                    value=storage.format.image_key or storage.format.video_key,
                )
        yield "buffer.trainer_input.experience_buffer", storage


def _data_paths(cfg: Config) -> Iterator[tuple[str, str]]:
    """``(key path, path)`` of every local dataset the run will read."""
    pipeline = cfg.data_processor.task_pipeline
    piped = pipeline is not None and cfg.mode in ("both", "explore")
    storages = [
        (prefix, storage)
        for prefix, storage in _tasksets(cfg)
        # the task pipeline writes the first training taskset's data
        if not (piped and prefix == "buffer.explorer_input.tasksets[0]")
    ]
    ti = cfg.buffer.trainer_input
    if cfg.mode in ("both", "train"):
        storages += [
            (f"buffer.trainer_input.auxiliary_buffers.{key}", storage)
            for key, storage in ti.auxiliary_buffers.items()
        ]
    if cfg.mode == "train" and ti.experience_buffer is not None:
        storages.append(("buffer.trainer_input.experience_buffer", ti.experience_buffer))
    for prefix, storage in storages:
        if storage.storage_type in ("file", "task_dir") and storage.path:
            yield f"{prefix}.path", storage.path
    if piped:
        assert pipeline is not None
        for i, given in enumerate(pipeline.inputs):
            yield f"data_processor.task_pipeline.inputs[{i}]", given


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
