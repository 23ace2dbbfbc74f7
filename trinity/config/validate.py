"""Checks of a resolved config: types, ranges and combinations that cannot work.

Past 400 lines on purpose: one check function per schema section, in schema order; they
share the helpers at the top and are read as one pass over the config.

``validate`` only reads: it never creates files, never contacts a cluster and never
changes a value. The first problem found is raised as a ``ConfigError`` naming the full
key path and what would be valid.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from trinity.config.algorithm_defaults import (
    BUILTIN_PART_NAMES,
    NONE,
    PART_KINDS,
    PART_NAMES,
    defaults_for,
)
from trinity.config.derived import check_trainer_config_source, train_steps
from trinity.config.device_plan import device_plan
from trinity.config.errors import ConfigError, closest
from trinity.config.part_args import BUILTIN_PART_ARGS, InvalidArgsError, build_args
from trinity.config.schema import (
    LOG_LEVELS,
    Config,
    ExperienceBufferConfig,
    InferenceModelConfig,
    OptimizerConfig,
    StorageConfig,
    TasksetConfig,
)
from trinity.config.schema.buffer import PRIORITY_FN_ARGS, ReplayBufferConfig
from trinity.config.train_batch import check_batch_fills
from trinity.config.trainer_ranks import check_trainer_ranks
from trinity.config.typed_yaml import build, to_plain


def validate(cfg: Config) -> None:
    """Raise ``ConfigError`` for the first impossible setting of ``cfg`` (a resolved config)."""
    build(Config, to_plain(cfg))  # every key and value still fits the schema
    for check in _CHECKS:
        check(cfg)


def _at_least(path: str, value: float | None, low: float, what: str = "") -> None:
    if value is not None and value < low:
        raise ConfigError(
            path, f"must be >= {low:g}{what}", value=value, valid=f"a value >= {low:g}"
        )


def _positive(path: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(path, "must be > 0", value=value, valid="a value > 0")


def _fraction(path: str, value: float | None, *, open_low: bool = False) -> None:
    if value is None:
        return
    low_ok = value > 0 if open_low else value >= 0
    if not (low_ok and value <= 1):
        interval = "(0, 1]" if open_low else "[0, 1]"
        raise ConfigError(
            path, f"must lie in {interval}", value=value, valid=f"a number in {interval}"
        )


def _required(path: str, value: str | None, what: str) -> None:
    if not value:
        raise ConfigError(path, f"is required: {what}", value=value, valid="a non-empty string")


# the seeds torch.manual_seed and torch.Generator.manual_seed take (a C int64 or uint64);
# random.seed takes any integer, and the numpy generators take the seed modulo 2**64
TORCH_SEEDS = (-(2**63), 2**64 - 1)
TORCH_SEEDS_TEXT = "[-2**63, 2**64 - 1]"


def _check_global(cfg: Config) -> None:
    _required("project", cfg.project, "the project name")
    _required("name", cfg.name, "the experiment name")
    _required("checkpoint_root_dir", cfg.checkpoint_root_dir, "where checkpoints and logs go")
    if cfg.log.level.upper() not in LOG_LEVELS:
        raise ConfigError(
            "log.level",
            "unknown log level",
            value=cfg.log.level,
            valid="valid: " + ", ".join(LOG_LEVELS) + " (any case)",
            suggestion=closest(cfg.log.level.upper(), LOG_LEVELS),
        )
    _at_least("cluster.node_num", cfg.cluster.node_num, 1)
    _at_least("cluster.gpu_per_node", cfg.cluster.gpu_per_node, 0)
    if not TORCH_SEEDS[0] <= cfg.seed <= TORCH_SEEDS[1]:
        raise ConfigError(
            "seed",
            "is outside what torch.manual_seed takes",
            value=cfg.seed,
            valid=f"an integer in {TORCH_SEEDS_TEXT}",
        )


# advantage functions that read Experience.teacher_logprobs (on-policy distillation)
TEACHER_ADVANTAGE_FNS = frozenset({"on_policy_distill", "jsd"})


def _check_algorithm(cfg: Config) -> None:
    algo = cfg.algorithm
    table = defaults_for(algo.algorithm_type)
    _at_least("algorithm.repeat_times", algo.repeat_times, 1)
    if table.needs_group and algo.repeat_times <= 1:
        raise ConfigError(
            "algorithm.repeat_times",
            f"{algo.algorithm_type} needs repeat_times > 1",
            value=algo.repeat_times,
            valid="an integer > 1 (rollouts per task compared within a group)",
        )
    if algo.sample_strategy == "mix" and not cfg.buffer.trainer_input.auxiliary_buffers:
        raise ConfigError(
            "buffer.trainer_input.auxiliary_buffers",
            f"{algo.algorithm_type} needs an expert dataset (sample_strategy mix)",
            value={},
            valid="a buffer such as auxiliary_buffers.sft_dataset",
        )
    if (
        algo.advantage_fn in TEACHER_ADVANTAGE_FNS
        and cfg.mode in ("both", "explore")
        and not cfg.explorer.auxiliary_models
    ):
        raise ConfigError(
            "explorer.auxiliary_models",
            f"advantage_fn {algo.advantage_fn} needs a teacher model to score the rollouts",
            value=[],
            valid="a model whose model_path is the teacher (it must share the policy's tokenizer)",
        )
    _check_optimizer("algorithm.optimizer", algo.optimizer)
    _check_part_names(cfg)
    _check_old_logprobs(cfg)


def _check_old_logprobs(cfg: Config) -> None:
    """m2po bounds the ratio to the policy that sampled the tokens: the old log-probs
    must be the rollout engine's, not recomputed by the trainer."""
    if cfg.algorithm.policy_loss_fn != "m2po":
        return
    tc = cfg.trainer.trainer_config
    correction = "trainer.trainer_config.algorithm.rollout_correction.bypass_mode"
    for path, value in (
        ("algorithm.bypass_old_logprobs", cfg.algorithm.bypass_old_logprobs),
        (correction, tc is None or tc.algorithm.rollout_correction.bypass_mode),
    ):
        if not value:
            raise ConfigError(
                path,
                "policy_loss_fn m2po needs the rollout engine's log-probs as the old "
                "log-probs (its trust region is the ratio to the policy that sampled)",
                value=value,
                valid="true",
            )


def _check_optimizer(path: str, opt: OptimizerConfig) -> None:
    _positive(f"{path}.lr", opt.lr)
    _fraction(f"{path}.lr_warmup_steps_ratio", opt.lr_warmup_steps_ratio)
    _fraction(f"{path}.min_lr_ratio", opt.min_lr_ratio)
    _at_least(f"{path}.weight_decay", opt.weight_decay, 0)
    _at_least(
        f"{path}.lr_warmup_steps", opt.lr_warmup_steps, -1, " (-1: use lr_warmup_steps_ratio)"
    )
    if len(opt.betas) != 2 or not all(0 <= b < 1 for b in opt.betas):
        raise ConfigError(
            f"{path}.betas",
            "must be two numbers in [0, 1)",
            value=opt.betas,
            valid="e.g. [0.9, 0.999]",
        )


def _check_part_names(cfg: Config) -> None:
    """Part names must be registered and their ``*_args`` fit the part's ``Args``.

    A config naming only built-in parts is checked against BUILTIN_PART_ARGS without
    importing the algorithm package (and torch). Any other name (a plugin's part, a
    dotted path, a typo) is looked up in the registries, once the package has registered
    its parts; a registry that is still empty is not checked.
    """
    if "trinity.algorithm" not in sys.modules and all(
        _names_builtin_part(cfg, part) for part in PART_NAMES
    ):
        for part in PART_NAMES:
            name = getattr(cfg.algorithm, part)
            parts = BUILTIN_PART_ARGS[PART_KINDS[part]]
            if name in parts:  # not None, nor "none" where that is no registered part
                _check_part_args(cfg, part, name, parts[name])
        return
    try:
        import trinity.algorithm  # noqa: F401  (importing it registers the parts)
        from trinity.algorithm import registries
    except ImportError:
        return
    by_part = {
        "advantage_fn": registries.ADVANTAGE_FN,
        "policy_loss_fn": registries.POLICY_LOSS_FN,
        "kl_penalty_fn": registries.KL_FN,
        "kl_loss_fn": registries.KL_FN,
        "entropy_loss_fn": registries.ENTROPY_LOSS_FN,
        "sample_strategy": registries.SAMPLE_STRATEGY,
    }
    for part in PART_NAMES:
        name, registry = getattr(cfg.algorithm, part), by_part[part]
        if name is None or not registry.names() or (name == NONE and name not in registry):
            continue
        try:
            part_cls = registry.get(name)  # a registered name, or a dotted path to user code
        except KeyError as exc:
            raise ConfigError(
                f"algorithm.{part}",
                f"unknown {registry.kind}",
                value=name,
                valid="registered: " + ", ".join(sorted({NONE, *registry.names()})),
                suggestion=None if "." in name else closest(name, registry.names()),
            ) from exc
        _check_part_args(cfg, part, name, getattr(part_cls, "Args", None))


def _names_builtin_part(cfg: Config, part: str) -> bool:
    name = getattr(cfg.algorithm, part)
    return name is None or name == NONE or name in BUILTIN_PART_NAMES[PART_KINDS[part]]


def _check_part_args(cfg: Config, part: str, name: str, args_cls: type | None) -> None:
    """``algorithm.<part>_args`` must build the ``Args`` of the part named ``name``."""
    given = getattr(cfg.algorithm, f"{part}_args")
    if args_cls is None or not given:
        return
    try:
        build_args(args_cls, given, owner=f"{part} '{name}'")
    except InvalidArgsError as exc:
        names = ", ".join(f.name for f in dataclasses.fields(args_cls)) or "(none)"
        raise ConfigError(
            f"algorithm.{part}_args",
            str(exc),
            value=given,
            valid=f"arguments of {part} '{name}': {names}",
        ) from exc


def _check_model(cfg: Config) -> None:
    model = cfg.model
    _required("model.model_path", model.model_path, "the model to train")
    _positive("model.max_model_len", model.max_model_len)
    _positive("model.max_prompt_tokens", model.max_prompt_tokens)
    _positive("model.max_response_tokens", model.max_response_tokens)
    _at_least("model.min_response_tokens", model.min_response_tokens, 0)
    limit, prompt, response = (
        model.max_model_len,
        model.max_prompt_tokens,
        model.max_response_tokens,
    )
    if limit is not None and response is not None and response > limit:
        raise ConfigError(
            "model.max_response_tokens",
            f"exceeds model.max_model_len ({limit})",
            value=response,
            valid=f"at most {limit}",
        )
    if (
        limit is not None
        and prompt is not None
        and response is not None
        and prompt + response > limit
    ):
        raise ConfigError(
            "model.max_prompt_tokens",
            f"max_prompt_tokens + max_response_tokens ({prompt} + {response}) exceeds model.max_model_len ({limit})",
            value=prompt,
            valid=f"at most {limit - response}, or a larger max_model_len",
        )
    if response is not None and model.min_response_tokens >= response:
        raise ConfigError(
            "model.min_response_tokens",
            f"must be below model.max_response_tokens ({response})",
            value=model.min_response_tokens,
            valid=f"an integer < {response}",
        )
    _check_sampling("model", model.temperature, model.top_p)
    if model.external_model.enable and cfg.mode not in ("explore", "bench"):
        raise ConfigError(
            "model.external_model.enable",
            f"an external endpoint keeps its own weights, so mode {cfg.mode} cannot train it",
            value=True,
            valid="false, or mode explore or bench",
        )
    _check_lora(cfg)


def _check_lora(cfg: Config) -> None:
    adapters = cfg.model.lora_configs
    if len(adapters) > 1:
        raise ConfigError(
            "model.lora_configs",
            "holds more than one adapter",
            value=len(adapters),
            valid="at most one",
        )
    for i, lora in enumerate(adapters):
        path = f"model.lora_configs[{i}]"
        _at_least(f"{path}.lora_rank", lora.lora_rank, 1)
        _positive(f"{path}.lora_alpha", lora.lora_alpha)
        _fraction(f"{path}.lora_dropout", lora.lora_dropout)
        if not lora.target_modules:
            raise ConfigError(
                f"{path}.target_modules", "is empty", value=[], valid="layer names, or [all-linear]"
            )


def _check_sampling(path: str, temperature: float | None, top_p: float | None) -> None:
    _at_least(f"{path}.temperature", temperature, 0)
    _fraction(f"{path}.top_p", top_p, open_low=True)


def _check_buffer(cfg: Config) -> None:
    buffer, ei, ti = cfg.buffer, cfg.buffer.explorer_input, cfg.buffer.trainer_input
    _positive("buffer.batch_size", buffer.batch_size)
    _positive("buffer.train_batch_size", buffer.train_batch_size)
    _at_least("buffer.total_epochs", buffer.total_epochs, 1)
    _at_least("buffer.total_steps", buffer.total_steps, 1)
    if cfg.mode in ("both", "explore") and not ei.tasksets:
        raise ConfigError(
            "buffer.explorer_input.taskset",
            f"mode {cfg.mode} needs a taskset to explore",
            value=None,
            valid="a taskset (or tasksets list) with name, storage_type and path",
        )
    if cfg.mode == "bench" and not ei.eval_tasksets:
        raise ConfigError(
            "buffer.explorer_input.eval_tasksets",
            "mode bench needs eval tasksets",
            value=[],
            valid="a list of tasksets",
        )
    if cfg.mode in ("both", "train", "explore"):
        if ti.experience_buffer is None or not ti.experience_buffer.name:
            raise ConfigError(
                "buffer.trainer_input.experience_buffer.name",
                f"is required in mode {cfg.mode}: the experience buffer needs a name",
                value=None if ti.experience_buffer is None else ti.experience_buffer.name,
                valid="a unique non-empty name",
            )
    if cfg.mode == "serve":
        _check_serve_buffer(ti.experience_buffer)
    storages: list[tuple[str, StorageConfig]] = [
        *((f"buffer.explorer_input.tasksets[{i}]", t) for i, t in enumerate(ei.tasksets)),
        *((f"buffer.explorer_input.eval_tasksets[{i}]", t) for i, t in enumerate(ei.eval_tasksets)),
        *(
            (f"buffer.trainer_input.auxiliary_buffers.{k}", b)
            for k, b in ti.auxiliary_buffers.items()
        ),
    ]
    if ti.experience_buffer is not None:
        storages.append(("buffer.trainer_input.experience_buffer", ti.experience_buffer))
    # an eval taskset may share its training taskset's name (as Trinity-RFT's examples do):
    # eval results are keyed by eval taskset, the readers and buffers by their own names
    seen: dict[tuple[bool, str], str] = {}
    for path, storage in storages:
        _check_storage(path, storage)
        scope = (".eval_tasksets[" in path, storage.name)
        if scope in seen:
            among = "eval tasksets" if scope[0] else "training tasksets and buffers"
            raise ConfigError(
                f"{path}.name",
                f"is already used by {seen[scope]}",
                value=storage.name,
                valid=f"a name unique among {among}",
            )
        seen[scope] = path
    _check_schema_types(cfg)


def _check_serve_buffer(storage: ExperienceBufferConfig | None) -> None:
    """Mode serve runs without Ray, so a queue in its process would have no reader: it
    fills, and then every /commit waits for room that never comes."""
    path = "buffer.trainer_input.experience_buffer"
    valid = (
        "storage_type sql (a SQLite file or database URL) or file (JSON lines), which a "
        "trainer reads (mode train, another run)"
    )
    if storage is None:
        raise ConfigError(
            path,
            "is required in mode serve: /commit writes the scored calls there",
            value=None,
            valid=valid,
        )
    if storage.storage_type == "queue":
        raise ConfigError(
            f"{path}.storage_type",
            "mode serve runs without a trainer, so nothing would read a queue in its process",
            value=storage.storage_type,
            valid=valid,
        )


def _check_schema_types(cfg: Config) -> None:
    """Trinity-RFT's ``schema_type`` must name the rows this project reads there: auxiliary
    buffers are SFT datasets, a trainer's dataset is SFT or DPO by its policy loss."""
    ti = cfg.buffer.trainer_input
    for key, storage in ti.auxiliary_buffers.items():
        if storage.schema_type not in (None, "sft"):
            raise ConfigError(
                f"buffer.trainer_input.auxiliary_buffers.{key}.schema_type",
                "auxiliary buffers are read as SFT datasets",
                value=storage.schema_type,
                valid="sft, or unset",
            )
    given = ti.experience_buffer.schema_type if ti.experience_buffer is not None else None
    if given in ("sft", "dpo") and cfg.algorithm.algorithm_type != "cpt":
        rows = "dpo" if cfg.algorithm.policy_loss_fn == "dpo" else "sft"
        if given != rows:
            raise ConfigError(
                "buffer.trainer_input.experience_buffer.schema_type",
                f"algorithm_type {cfg.algorithm.algorithm_type} trains on {rows} rows",
                value=given,
                valid=f"{rows}, or unset",
            )


def _check_storage(path: str, storage: StorageConfig) -> None:
    _required(f"{path}.name", storage.name, "every taskset and buffer needs a unique name")
    if storage.storage_type == "task_dir" and ".explorer_input." not in path:
        raise ConfigError(
            f"{path}.storage_type",
            "task_dir holds tasksets (a directory per task), not experiences or dataset rows",
            value="task_dir",
            valid="queue, sql or file" if path.endswith("experience_buffer") else "file or sql",
        )
    if storage.storage_type in ("file", "sql", "task_dir") and not storage.path:
        raise ConfigError(
            f"{path}.path",
            f"is required for storage_type {storage.storage_type}",
            value=storage.path,
            valid="a data directory, file or hub id (file), a SQLAlchemy URL (sql) or a "
            "directory of task directories (task_dir)",
        )
    if isinstance(storage, TasksetConfig):
        _at_least(f"{path}.repeat_times", storage.repeat_times, 1)
        args = storage.rollout_args
        _check_sampling(f"{path}.rollout_args", args.temperature, args.top_p)
        _positive(f"{path}.rollout_args.max_tokens", args.max_tokens)
    if isinstance(storage, ExperienceBufferConfig):
        _positive(f"{path}.max_read_timeout", storage.max_read_timeout)
        _positive(f"{path}.capacity", storage.capacity)
        _at_least(f"{path}.total_epochs", storage.total_epochs, 1)
        _at_least(f"{path}.reuse_cooldown_time", storage.reuse_cooldown_time, 0)
        replay = storage.replay_buffer
        _at_least(f"{path}.replay_buffer.reuse_cooldown_time", replay.reuse_cooldown_time, 0)
        _check_priority_fn_args(f"{path}.replay_buffer.priority_fn_args", replay)


def _check_priority_fn_args(path: str, replay: ReplayBufferConfig) -> None:
    """The arguments ``replay.priority_fn`` takes, each a number, counts and sigma >= 0."""
    known = PRIORITY_FN_ARGS[replay.priority_fn]
    given = replay.priority_fn_args or {}
    valid = "{" + ", ".join(f"{name}: <number>" for name in known) + "}"
    for name, value in given.items():
        if name not in known or not isinstance(value, int | float) or isinstance(value, bool):
            raise ConfigError(
                path,
                f"{replay.priority_fn} takes {', '.join(known)} (numbers)",
                value=given,
                valid=valid,
            )
    for name in ("use_count_limit", "sigma"):
        if name in known:
            _at_least(f"{path}.{name}", given.get(name, known[name]), 0)
    if "use_count_limit" in given and not isinstance(given["use_count_limit"], int):
        raise ConfigError(
            f"{path}.use_count_limit", "must be a whole number of reads", value=given, valid=valid
        )


def _check_explorer(cfg: Config) -> None:
    explorer = cfg.explorer
    _at_least("explorer.runner_per_model", explorer.runner_per_model, 1)
    _at_least("explorer.runner_num", explorer.runner_num, 1)
    _positive("explorer.max_timeout", explorer.max_timeout)
    _at_least("explorer.max_retry_times", explorer.max_retry_times, 0)
    _at_least("explorer.eval_interval", explorer.eval_interval, 1)
    _at_least("explorer.max_repeat_times_per_runner", explorer.max_repeat_times_per_runner, 1)
    ratio = explorer.over_rollout.ratio
    if not 0 <= ratio < 1:
        raise ConfigError(
            "explorer.over_rollout.ratio",
            "must lie in [0, 1): the share of a step's tasks it may go on without",
            value=ratio,
            valid="a number in [0, 1); 0 waits for every task",
        )
    _at_least("explorer.over_rollout.wait_after_min", explorer.over_rollout.wait_after_min, 0)
    _positive("explorer.serve.feedback_timeout", explorer.serve.feedback_timeout)
    _positive("explorer.serve.commit_timeout", explorer.serve.commit_timeout)
    engines = [("explorer.rollout_model", explorer.rollout_model)]
    engines += [
        (f"explorer.auxiliary_models[{i}]", m) for i, m in enumerate(explorer.auxiliary_models)
    ]
    for path, engine in engines:
        _check_engine(path, engine)


def _check_engine(path: str, engine: InferenceModelConfig) -> None:
    _required(f"{path}.model_path", engine.model_path, "the weights to serve")
    _at_least(f"{path}.engine_num", engine.engine_num, 1)
    _at_least(f"{path}.tensor_parallel_size", engine.tensor_parallel_size, 1)
    _fraction(f"{path}.gpu_memory_utilization", engine.gpu_memory_utilization, open_low=True)
    if not 0 <= engine.openai_api_port <= 65535:
        raise ConfigError(
            f"{path}.openai_api_port",
            "is not a TCP port",
            value=engine.openai_api_port,
            valid="an integer in [0, 65535]; 0 picks a free port",
        )
    for key in ("max_body_bytes", "max_request_tokens", "max_queued_rows"):
        _at_least(f"{path}.openai_api_{key}", getattr(engine, f"openai_api_{key}"), 1)
    limit, response = engine.max_model_len, engine.max_response_tokens
    if limit is not None and response is not None and response > limit:
        raise ConfigError(
            f"{path}.max_response_tokens",
            f"exceeds {path}.max_model_len ({limit})",
            value=response,
            valid=f"at most {limit}",
        )
    prompt = engine.max_prompt_tokens
    if limit is not None and prompt is not None and response is not None:
        if prompt + response > limit:
            raise ConfigError(
                f"{path}.max_model_len",
                f"is shorter than max_prompt_tokens + max_response_tokens ({prompt} + "
                f"{response} = {prompt + response})",
                value=limit,
                valid=f"at least {prompt + response}, or smaller {path}.max_prompt_tokens "
                "/ max_response_tokens (the rollout model's are model's where unset)",
            )
    _check_engine_seed(path, engine)


def _check_engine_seed(path: str, engine: InferenceModelConfig) -> None:
    """Replica ``i`` of an engine samples with ``seed + i`` (trinity/explorer/engines.py)."""
    if engine.seed is None:
        return
    replicas = max(engine.engine_num, 1)
    if engine.seed < TORCH_SEEDS[0] or engine.seed + replicas - 1 > TORCH_SEEDS[1]:
        index = 0 if engine.seed < TORCH_SEEDS[0] else replicas - 1
        replica = f"replica {index} would sample with seed {engine.seed + index}"
        raise ConfigError(
            f"{path}.seed",
            f"is outside what torch.manual_seed takes ({replica}: seed + replica index)",
            value=engine.seed,
            valid=f"seed .. seed + engine_num - 1 in {TORCH_SEEDS_TEXT}; unset: the global seed",
        )


def _check_gpus(cfg: Config) -> None:
    """The GPUs of the cluster split between engines and trainer ranks (``device_plan``)."""
    device_plan(cfg)


def _check_synchronizer(cfg: Config) -> None:
    sync = cfg.synchronizer
    _at_least("synchronizer.sync_interval", sync.sync_interval, 1)
    _at_least("synchronizer.sync_offset", sync.sync_offset, 0)
    _positive("synchronizer.sync_timeout", sync.sync_timeout)
    _at_least("explorer.max_inflight_batches", cfg.explorer.max_inflight_batches, 1)
    if sync.sync_style == "fully_async" and cfg.algorithm.dynamic_sampling.enable:
        raise ConfigError(
            "algorithm.dynamic_sampling.enable",
            "cannot refill steps with sync_style fully_async (its batches roll out side by "
            "side, each read once)",
            value=True,
            valid="false, or another synchronizer.sync_style",
        )


def _check_batch_fills(cfg: Config) -> None:
    """A synchronous run's train batch fits in what the explorer writes before it waits."""
    check_batch_fills(cfg, train_steps(cfg))


def _check_trainer(cfg: Config) -> None:
    trainer = cfg.trainer
    check_trainer_config_source(trainer)
    check_trainer_ranks(cfg)
    _at_least("trainer.save_interval", trainer.save_interval, 0, " (0: save only at the end)")
    _at_least("trainer.total_steps", trainer.total_steps, 1)
    _positive("trainer.grad_clip", trainer.grad_clip)
    _at_least("trainer.max_token_len_per_gpu", trainer.max_token_len_per_gpu, 1)
    _at_least("trainer.ulysses_sequence_parallel_size", trainer.ulysses_sequence_parallel_size, 1)
    tc = trainer.trainer_config
    if tc is None:
        return
    prefix = "trainer.trainer_config"
    actor = tc.actor_rollout_ref.actor
    _at_least(
        f"{prefix}.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        actor.ppo_micro_batch_size_per_gpu,
        1,
    )
    _at_least(f"{prefix}.actor_rollout_ref.actor.ppo_epochs", actor.ppo_epochs, 1)
    _at_least(
        f"{prefix}.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        tc.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu,
        1,
    )
    _at_least(
        f"{prefix}.critic.ppo_micro_batch_size_per_gpu", tc.critic.ppo_micro_batch_size_per_gpu, 1
    )
    token_budgets = (
        ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", actor.ppo_max_token_len_per_gpu),
        (
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
            tc.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu,
        ),
        ("critic.ppo_max_token_len_per_gpu", tc.critic.ppo_max_token_len_per_gpu),
        ("critic.forward_max_token_len_per_gpu", tc.critic.forward_max_token_len_per_gpu),
    )
    for key, budget in token_budgets:
        _at_least(f"{prefix}.{key}", budget, 1)
    _positive(f"{prefix}.critic.grad_clip", tc.critic.grad_clip)
    _check_optimizer(f"{prefix}.critic.optim", tc.critic.optim)
    correction = tc.algorithm.rollout_correction
    _positive(
        f"{prefix}.algorithm.rollout_correction.rollout_is_threshold",
        correction.rollout_is_threshold,
    )
    bypass = correction.bypass_mode and cfg.algorithm.bypass_old_logprobs
    if correction.rollout_is is not None and bypass:
        raise ConfigError(
            f"{prefix}.algorithm.rollout_correction.rollout_is",
            "needs bypass_mode false (in bypass mode the rollout log-probs are the old "
            "log-probs, so every weight would be 1)",
            value=correction.rollout_is,
            valid="null, or set algorithm.rollout_correction.bypass_mode: false",
        )
    loop = tc.trainer
    if loop.resume_mode == "resume_path" and not loop.resume_from_path:
        raise ConfigError(
            f"{prefix}.trainer.resume_from_path",
            "is required when resume_mode is resume_path",
            value=loop.resume_from_path,
            valid="a checkpoint directory",
        )


def _check_data_processor(cfg: Config) -> None:
    dp = cfg.data_processor
    operators = [("data_processor.experience_pipeline.operators", dp.experience_pipeline.operators)]
    if dp.task_pipeline is not None:
        _at_least("data_processor.task_pipeline.num_process", dp.task_pipeline.num_process, 1)
        operators.append(("data_processor.task_pipeline.operators", dp.task_pipeline.operators))
    for path, ops in operators:
        for i, op in enumerate(ops):
            _required(f"{path}[{i}].name", op.name, "the registered operator name")


def _check_service(cfg: Config) -> None:
    dj = cfg.service.data_juicer
    if dj is None:
        return
    if dj.auto_start:
        if not 0 <= dj.port <= 65535:
            raise ConfigError(
                "service.data_juicer.port",
                "is not a TCP port",
                value=dj.port,
                valid="0..65535 (0: any free port)",
            )
    elif not dj.server_url.startswith(("http://", "https://")):
        raise ConfigError(
            "service.data_juicer.server_url",
            "must name a running Data-Juicer service unless auto_start is true",
            value=dj.server_url,
            valid="an http:// or https:// URL, e.g. http://127.0.0.1:5005, or auto_start: true",
        )


def _check_stages(cfg: Config) -> None:
    seen: set[str] = set()
    for i, stage in enumerate(cfg.stages):
        _required(f"stages[{i}].stage_name", stage.stage_name, "each stage needs a unique name")
        if stage.stage_name in seen:
            raise ConfigError(
                f"stages[{i}].stage_name",
                "is used by an earlier stage",
                value=stage.stage_name,
                valid="a unique stage name",
            )
        seen.add(stage.stage_name)


_CHECKS: tuple[Callable[[Config], None], ...] = (
    _check_global,
    _check_algorithm,
    _check_model,
    _check_buffer,
    _check_explorer,
    _check_synchronizer,
    _check_batch_fills,
    _check_trainer,
    _check_gpus,  # after the trainer's ranks are checked
    _check_data_processor,
    _check_service,
    _check_stages,
)
