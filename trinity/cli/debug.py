"""``trinity debug``: try a workflow on a few tasks without running an experiment.

    trinity debug --config FILE --module inference_model      # terminal 1: serve the model
    trinity debug --config FILE --module workflow \\
        --output-file debug.jsonl --plugin-dir my_plugins      # terminal 2: run the workflow

``inference_model`` loads the config's rollout model (and its auxiliary models), serves
each on the OpenAI-compatible API (:mod:`trinity.rollout.server`, at
``explorer.rollout_model.openai_api_host``/``openai_api_port``; port 0 picks a free
one), prints the addresses, and runs until interrupted (Ctrl-C). The addresses are also
written to ``<job_dir>/debug/inference_model.json``, which is how the ``workflow``
command finds the served models. The model stays loaded, so the workflow can be edited
and re-run in seconds.

``workflow`` imports the ``--plugin-dir`` modules, reads ``--num-tasks`` tasks from
the config's taskset, runs each task's workflow against the served models (or, when
none is being served, against an engine it starts in its own process, and says so),
prints each task's rewards and writes the experiences to ``--output-file``: SQLite
when it ends in ``.db``/``.sqlite`` (readable with ``trinity view`` and the SQLAlchemy
snippet in the docs), JSON lines otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trinity.cli.command import EXIT_CONFIG_ERROR, load_external_libs, load_plugins

if TYPE_CHECKING:
    from trinity.config import Config, InferenceModelConfig
    from trinity.rollout.wrapper import ModelWrapper
    from trinity.types import Experience

MODULES = ("inference_model", "workflow")
ADDRESS_FILE = Path("debug") / "inference_model.json"
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


class DebugError(RuntimeError):
    """A debug command cannot go on; the message says why and what to do."""


def add_debug_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "debug",
        help="serve the config's model, or run its workflow on a few tasks against it",
        description="Debug a workflow without running an experiment: '--module inference_model' "
        "serves the model on an OpenAI-compatible API until interrupted; '--module workflow' runs "
        "the workflow on a few tasks against it and writes the experiences to --output-file.",
    )
    parser.add_argument("--config", required=True, help="path to the YAML config file")
    parser.add_argument(
        "--module",
        required=True,
        choices=MODULES,
        help="inference_model: serve the model; workflow: run the workflow against it",
    )
    parser.add_argument(
        "--output-file",
        default=None,
        metavar="FILE",
        help="where --module workflow writes the experiences: SQLite if it ends in .db or "
        ".sqlite, JSON lines otherwise (default <job_dir>/debug/experiences.jsonl)",
    )
    parser.add_argument(
        "--plugin-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="import the Python modules in DIR first (custom workflows, rewards); repeatable",
    )
    parser.add_argument(
        "--num-tasks", type=int, default=2, help="tasks of the taskset to run (--module workflow)"
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")
    parser.set_defaults(func=_cmd_debug)


def _cmd_debug(args: argparse.Namespace) -> int:
    from trinity.config import ConfigError, load_config

    load_plugins(args.plugin_dir)
    try:
        config = load_config(args.config, args.overrides)
    except (ConfigError, FileNotFoundError) as err:
        print(f"trinity: config error: {err}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    load_external_libs(config.trainer)
    if args.num_tasks < 1:
        print(f"trinity: --num-tasks must be at least 1, got {args.num_tasks}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    try:
        if args.module == "inference_model":
            serve_inference_model(config)
            return 0
        output = Path(args.output_file or _job_dir(config) / "debug" / "experiences.jsonl")
        return 0 if run_workflow(config, output, args.num_tasks) else 1
    except DebugError as err:
        print(f"trinity: {err}", file=sys.stderr)
        return 1


# ---- inference_model ----------------------------------------------------------------------


def serve_inference_model(config: Config, stop: threading.Event | None = None) -> None:
    """Serve the rollout and auxiliary models until SIGINT/SIGTERM (or ``stop`` is set)."""
    from trinity.rollout.openai_admission import AdmissionLimits
    from trinity.rollout.server import OpenAIServer

    stop = stop or _stop_on_signals()
    roles = _model_configs(config)
    address_file = _job_dir(config) / ADDRESS_FILE
    servers: list[OpenAIServer] = []
    models: list[ModelWrapper] = []
    try:
        served: dict[str, Any] = {"pid": os.getpid(), "models": {}}
        for role, cfg in roles.items():
            # history is kept by the workflow process's wrappers, never here (it would only grow)
            model = _local_model(config, cfg, history=False)
            models.append(model)
            try:
                server = OpenAIServer(
                    {model.name: model},
                    host=cfg.openai_api_host,
                    port=cfg.openai_api_port,
                    api_key=cfg.openai_api_key,
                    limits=AdmissionLimits.from_config(cfg, f"explorer.{role}"),
                ).start()
            except OSError as err:
                raise DebugError(
                    str(err).replace("explorer.rollout_model", f"explorer.{role}")
                ) from None
            servers.append(server)
            served["models"][role] = {"base_url": server.base_url, "model": model.name}
            print(f"[trinity] serving {role} '{model.name}' at {server.base_url}", flush=True)
        address_file.parent.mkdir(parents=True, exist_ok=True)
        address_file.write_text(json.dumps(served, indent=2))
        print(
            f"[trinity] addresses written to {address_file}; run the workflow with "
            "'trinity debug --config <same config> --module workflow'. Ctrl-C stops.",
            flush=True,
        )
        stop.wait()
    finally:
        _remove_own_address_file(address_file)
        for server in servers:
            server.stop()
        for model in models:
            model.engine.close()
        print("[trinity] inference model stopped", flush=True)


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _remove_own_address_file(path: Path) -> None:
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


# ---- workflow -----------------------------------------------------------------------------


def run_workflow(config: Config, output: Path, num_tasks: int) -> bool:
    """Run the workflow on ``num_tasks`` tasks, write their experiences; True if all ran."""
    import trinity.rewards  # noqa: F401  (registers the built-ins)
    import trinity.workflows  # noqa: F401
    from trinity.workflows.registry import WORKFLOWS

    tasks = _read_tasks(config, num_tasks)
    model, auxiliary = _connect(config) or _start_local(config)
    experiences: list[Experience] = []
    failed = 0
    for task in tasks:
        try:
            workflow = WORKFLOWS.get(task.workflow)(task, model, auxiliary)
            produced = workflow.run()
        except Exception:
            failed += 1
            print(
                f"[trinity] task {task.index} ({task.workflow}) failed:\n{traceback.format_exc()}",
                file=sys.stderr,
                flush=True,
            )
            continue
        from trinity.types import EID

        for exp in produced:
            exp.eid = EID(batch="debug", task=task.index, run=exp.eid.run, step=exp.eid.step)
            exp.info.setdefault("task_index", task.index)
            exp.info.setdefault("taskset", task.taskset)
        rewards = [e.reward for e in produced]
        print(
            f"[trinity] task {task.index} ({task.workflow}): {len(produced)} experience(s), "
            f"rewards {rewards}",
            flush=True,
        )
        experiences.extend(produced)
    _write(output, experiences)
    print(
        f"[trinity] {len(experiences)} experience(s) from {len(tasks) - failed} of {len(tasks)} "
        f"task(s) written to {output}",
        flush=True,
    )
    return failed == 0


def _read_tasks(config: Config, num_tasks: int) -> list[Any]:
    from trinity.explorer.explorer import make_taskset_reader

    storage = config.buffer.explorer_input.taskset
    if storage is None:
        raise DebugError("buffer.explorer_input.taskset is not set: the workflow needs tasks")
    reader = make_taskset_reader(config, storage, batch_size=num_tasks, is_eval=False)
    return reader.read_batch()


def _connect(config: Config) -> tuple[ModelWrapper, list[ModelWrapper]] | None:
    """Wrappers onto the models ``--module inference_model`` serves, or None if none runs."""
    from trinity.rollout.model_path import resolve_model_path
    from trinity.rollout.remote import HttpEngine, RemoteModelError

    address_file = _job_dir(config) / ADDRESS_FILE
    if not address_file.exists():
        return None
    served = json.loads(address_file.read_text())["models"]
    wrappers: dict[str, ModelWrapper] = {}
    for role, cfg in _model_configs(config).items():
        if role not in served:
            print(f"[trinity] {address_file} does not list {role}", flush=True)
            return None
        where = served[role]
        try:
            engine = HttpEngine(
                where["base_url"],
                where["model"],
                str(resolve_model_path(cfg.model_path)),
                api_key=cfg.openai_api_key,
                chat_template=cfg.chat_template,
                enable_thinking=cfg.enable_thinking,
            )
        except RemoteModelError as err:
            print(f"[trinity] the served {role} is not usable ({err})", flush=True)
            return None
        wrappers[role] = _wrap(config, cfg, engine)
        print(
            f"[trinity] using {role} '{where['model']}' served at {where['base_url']}", flush=True
        )
    return _split(wrappers)


def _start_local(config: Config) -> tuple[ModelWrapper, list[ModelWrapper]]:
    print(
        "[trinity] no inference model is being served for this config (start one with "
        "'trinity debug --config <config> --module inference_model'); starting an engine "
        "in this process",
        flush=True,
    )
    return _split({role: _local_model(config, cfg) for role, cfg in _model_configs(config).items()})


def _split(wrappers: dict[str, ModelWrapper]) -> tuple[ModelWrapper, list[ModelWrapper]]:
    rollout = wrappers.pop("rollout_model")
    return rollout, list(wrappers.values())


def _write(output: Path, experiences: list[Experience]) -> None:
    if output.suffix in SQLITE_SUFFIXES:
        from trinity.buffer.sql_storage import SQLExperienceStorage

        storage = SQLExperienceStorage(str(output))
        storage.write(experiences)
        storage.close()
        return
    from trinity.buffer.jsonl import JsonlWriter

    writer = JsonlWriter(output)
    writer.write(experiences)
    writer.close()


# ---- models from the config ---------------------------------------------------------------


def _job_dir(config: Config) -> Path:
    from trinity.config import job_dir

    return job_dir(config)


def _model_configs(config: Config) -> dict[str, InferenceModelConfig]:
    """Role name -> engine config: rollout_model, auxiliary_models[0], ..."""
    roles = {"rollout_model": config.explorer.rollout_model}
    for i, aux in enumerate(config.explorer.auxiliary_models):
        roles[f"auxiliary_models[{i}]"] = aux
    return roles


def _local_model(config: Config, cfg: InferenceModelConfig, history: bool = True) -> ModelWrapper:
    from trinity.config import trainer_settings
    from trinity.rollout.model_path import resolve_model_path
    from trinity.rollout.vision_engine import rollout_engine

    # the policy's config as the trainer builds it (trinity/rollout/overrides.py)
    policy = cfg is config.explorer.rollout_model
    engine = rollout_engine(
        model_path=str(resolve_model_path(cfg.model_path)),
        dtype=cfg.dtype or config.model.dtype,
        max_model_len=cfg.max_model_len,
        seed=cfg.seed if cfg.seed is not None else config.seed,
        chat_template=cfg.chat_template,
        enable_thinking=cfg.enable_thinking,
        override_config=trainer_settings(config.trainer).policy.override_config if policy else None,
    )
    return _wrap(config, cfg, engine, history)


def _wrap(
    config: Config, cfg: InferenceModelConfig, engine: Any, history: bool = True
) -> ModelWrapper:
    from trinity.rollout.wrapper import ModelWrapper

    return ModelWrapper(
        engine,
        max_prompt_tokens=cfg.max_prompt_tokens,
        max_response_tokens=cfg.max_response_tokens,
        min_response_tokens=config.model.min_response_tokens,
        enable_prompt_truncation=config.model.enable_prompt_truncation,
        enable_history=history and cfg.enable_history,
        name=cfg.model_path,
    )
