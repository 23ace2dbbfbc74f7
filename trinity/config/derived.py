"""Derived values of a config, computed by one pure function.

Past 400 lines on purpose: one derivation per schema section, applied in one order (later
sections read what earlier ones derived), so they stay in one pure function's module.

``resolve(cfg, now=...)`` returns a new ``Config`` in which every "unset: ..." field of
the schema holds its effective value. It reads nothing but its arguments: no files, no
environment, no cluster. The documented derivations:

- name -> ``<name>_<YYYYmmddHHMMSS>`` when ``continue_from_checkpoint`` is false;
  ``ray_namespace`` -> ``<project>/<name>``;
- algorithm parts, critic and reference use from ``algorithm_defaults``; dpo uses 2 rollouts;
- ``max_model_len`` = ``max_prompt_tokens + max_response_tokens`` (and each of the two
  from the other when only one is given);
- ``train_batch_size`` = ``batch_size * repeat_times`` (``mix``: plus the expert rows,
  ``trinity.config.train_batch``); ``taskset`` becomes ``tasksets[0]``;
  taskset ``repeat_times`` = ``algorithm.repeat_times`` (1 for eval tasksets); rollout
  args from ``model``; workflow and reward names from explorer_input, then buffer;
  without an experience buffer, modes both and explore get a queue named experience_buffer;
  the experience buffer's path (a queue's SQLite backup, a sql database) of a run that
  writes it -> ``<job_dir>/buffer/<name>.db``;
- the short trainer settings and ``algorithm.optimizer`` written into ``trainer_config``
  (over the actor optimizer a veRL layout gives, as Trinity-RFT does);
  ``actor.ppo_mini_batch_size`` = ``train_batch_size`` (one optimizer step per batch);
  ``trainer.total_steps`` from ``buffer.total_steps`` when that is set.
"""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path

from trinity.config.algorithm_defaults import NONE, PART_NAMES, defaults_for
from trinity.config.errors import ConfigError
from trinity.config.schema import (
    Config,
    ExperienceBufferConfig,
    StorageConfig,
    TasksetConfig,
    TrainerConfig,
    VerlTrainerConfig,
)
from trinity.config.train_batch import default_train_batch_size, rollouts_read

DEFAULT_EXPERIENCE_BUFFER = "experience_buffer"

# A resolved config remembers the config it came from, so stages can be expanded from it.
SOURCE_ATTR = "_unresolved_source"


def resolve(cfg: Config, *, now: datetime) -> Config:
    """Return a new config with every derived value filled in; ``cfg`` is not modified.

    Raises:
        ConfigError: a value that cannot be derived (e.g. no way to know max_model_len).
    """
    out = resolve_run(cfg, now=now, rename=True)
    source = getattr(cfg, SOURCE_ATTR, None)  # resolving a resolved config keeps the original
    setattr(out, SOURCE_ATTR, copy.deepcopy(source if source is not None else cfg))
    return out


def resolve_run(cfg: Config, *, now: datetime, rename: bool) -> Config:
    """``resolve`` without remembering the source; ``rename=False`` keeps ``name`` as is."""
    out = copy.deepcopy(cfg)
    # bench evaluates the checkpoints of the run it names, so it never starts a fresh one
    if rename and not out.continue_from_checkpoint and out.mode != "bench":
        out.name = timestamped(out.name, now)
    if out.ray_namespace is None:
        out.ray_namespace = f"{out.project}/{out.name}"
    out.log.level = out.log.level.upper()
    _resolve_algorithm(out)
    _resolve_model(out)
    _resolve_buffer(out)
    _resolve_explorer(out)
    _resolve_synchronizer(out)
    _resolve_trainer(out)
    return out


def timestamped(name: str, now: datetime) -> str:
    """``<name>_<YYYYmmddHHMMSS>``: the name of a fresh run when not continuing."""
    return f"{name}_{now.strftime('%Y%m%d%H%M%S')}"


def job_dir(cfg: Config) -> Path:
    """Directory of the experiment: ``<checkpoint_root_dir>/<project>/<name>``."""
    return Path(cfg.checkpoint_root_dir) / cfg.project / cfg.name


def _resolve_algorithm(cfg: Config) -> None:
    algo = cfg.algorithm
    table = defaults_for(algo.algorithm_type)
    for part in PART_NAMES:
        if getattr(algo, part) is None:
            setattr(algo, part, getattr(table, part))
    if table.fixed_repeat_times is not None:
        algo.repeat_times = table.fixed_repeat_times
    # the row's loss arguments (dapo's clip-higher) go with the row's own loss, and only
    # when the config gives none: a user's arguments are taken as written
    if algo.policy_loss_fn == table.policy_loss_fn and not algo.policy_loss_fn_args:
        algo.policy_loss_fn_args = dict(table.policy_loss_fn_args)
    if algo.dynamic_sampling.enable is None:
        algo.dynamic_sampling.enable = table.dynamic_sampling
    if algo.use_critic is None:
        algo.use_critic = table.use_critic
    if algo.use_reference is None:
        kl_active = algo.kl_loss_fn != NONE or algo.kl_penalty_fn != NONE
        algo.use_reference = table.needs_reference or kl_active


def _resolve_model(cfg: Config) -> None:
    model = cfg.model
    if model.chat_template_path:
        raise ConfigError(
            "model.chat_template_path",
            "must be read into model.custom_chat_template before resolving",
            value=model.chat_template_path,
            valid="load the file with load_config, or set model.custom_chat_template in Python",
        )
    prompt, response = model.max_prompt_tokens, model.max_response_tokens
    if model.max_model_len is None:
        if prompt is None or response is None:
            raise ConfigError(
                "model.max_model_len",
                "is unset and cannot be derived",
                valid="set model.max_model_len, or both model.max_prompt_tokens and model.max_response_tokens",
            )
        model.max_model_len = prompt + response
    elif prompt is None and response is not None and response < model.max_model_len:
        model.max_prompt_tokens = model.max_model_len - response
    elif response is None and prompt is not None and prompt < model.max_model_len:
        model.max_response_tokens = model.max_model_len - prompt
    if not model.critic_model_path:
        model.critic_model_path = model.model_path


def _resolve_buffer(cfg: Config) -> None:
    buffer, algo = cfg.buffer, cfg.algorithm
    if buffer.train_batch_size is None:
        buffer.train_batch_size = default_train_batch_size(cfg)
    ei = buffer.explorer_input
    if ei.default_workflow_type is None:
        ei.default_workflow_type = buffer.default_workflow_type
    if ei.default_reward_fn_type is None:
        ei.default_reward_fn_type = buffer.default_reward_fn_type
    if ei.default_eval_workflow_type is None:
        ei.default_eval_workflow_type = ei.default_workflow_type
    if ei.taskset is not None:
        others = [t for t in ei.tasksets if t.name != ei.taskset.name]
        ei.tasksets = [ei.taskset, *others]
    ei.taskset = ei.tasksets[0] if ei.tasksets else None

    for taskset in ei.tasksets:
        _fill_storage(taskset, cfg, storage_type="file")
        _fill_rollout_args(taskset, cfg)
        taskset.is_eval = False
        if taskset.repeat_times is None:
            taskset.repeat_times = algo.repeat_times
        taskset.default_workflow_type = taskset.default_workflow_type or ei.default_workflow_type
        taskset.default_reward_fn_type = taskset.default_reward_fn_type or ei.default_reward_fn_type
    for taskset in ei.eval_tasksets:
        _fill_storage(taskset, cfg, storage_type="file")
        _fill_rollout_args(taskset, cfg)
        taskset.is_eval = True
        if taskset.repeat_times is None:
            taskset.repeat_times = 1
        taskset.default_workflow_type = (
            taskset.default_workflow_type or ei.default_eval_workflow_type
        )
        taskset.default_reward_fn_type = taskset.default_reward_fn_type or ei.default_reward_fn_type

    ti = buffer.trainer_input
    if ti.experience_buffer is None and cfg.mode in ("both", "explore"):
        ti.experience_buffer = ExperienceBufferConfig(name=DEFAULT_EXPERIENCE_BUFFER)
    if ti.experience_buffer is not None:
        # in train mode nothing in the run writes the buffer: it is a dataset to read
        _fill_storage(
            ti.experience_buffer, cfg, storage_type="file" if cfg.mode == "train" else "queue"
        )
        _fill_experience_path(ti.experience_buffer, cfg)
    for key, aux in ti.auxiliary_buffers.items():
        aux.name = aux.name or key
        _fill_storage(aux, cfg, storage_type="file")


def _fill_storage(storage: StorageConfig, cfg: Config, *, storage_type: str) -> None:
    if storage.storage_type is None:
        storage.storage_type = storage_type  # type: ignore[assignment]
    selector = storage.data_selector.selector_type
    if selector is not None:
        # Trinity-RFT's name; difficulty_based needs reward feedback, which only the
        # explorer's taskset reader gets (it reads data_selector): the others draw as random
        storage.task_selector = "random" if selector == "difficulty_based" else selector
    if storage.format.chat_template is None:
        storage.format.chat_template = cfg.model.custom_chat_template


def _fill_experience_path(storage: StorageConfig, cfg: Config) -> None:
    """A queue's SQLite backup, or a sql buffer's database, that no path names lives in
    the run's own job directory: ``<job_dir>/buffer/<name>.db`` (``trinity view --db
    <job_dir>`` finds it there). Only where the run writes the buffer: in mode train it
    is a dataset that must be named."""
    writes = cfg.mode in ("both", "explore", "serve")
    if writes and storage.path is None and storage.storage_type in ("queue", "sql"):
        storage.path = str(job_dir(cfg) / "buffer" / f"{storage.name}.db")


def _fill_rollout_args(storage: TasksetConfig, cfg: Config) -> None:
    model, args = cfg.model, storage.rollout_args
    if args.temperature is None:
        args.temperature = model.temperature
    if args.top_p is None:
        args.top_p = model.top_p
    if args.top_k is None:
        args.top_k = model.top_k
    if args.logprobs is None:
        args.logprobs = model.logprobs
    if args.max_tokens is None:
        args.max_tokens = model.max_response_tokens


def _resolve_explorer(cfg: Config) -> None:
    model, rollout = cfg.model, cfg.explorer.rollout_model
    rollout.model_path = rollout.model_path or model.model_path
    if rollout.chat_template is None:
        rollout.chat_template = model.custom_chat_template
    if model.enable_thinking is not None:  # the policy's setting, as upstream writes it
        rollout.enable_thinking = model.enable_thinking
    if rollout.max_prompt_tokens is None:
        rollout.max_prompt_tokens = model.max_prompt_tokens
    if rollout.max_response_tokens is None:
        rollout.max_response_tokens = model.max_response_tokens
    if rollout.max_model_len is None:
        rollout.max_model_len = model.max_model_len
    for engine in (rollout, *cfg.explorer.auxiliary_models):
        if engine.dtype is None:
            engine.dtype = model.dtype
        if engine.seed is None:
            engine.seed = cfg.seed
        prompt, response = engine.max_prompt_tokens, engine.max_response_tokens
        if engine.max_model_len is None and prompt is not None and response is not None:
            engine.max_model_len = prompt + response
    if cfg.mode == "serve":
        _resolve_serve_address(cfg)


def _resolve_serve_address(cfg: Config) -> None:
    """Trinity-RFT's serve-proxy keys name the endpoint mode serve opens on the rollout
    model (trinity/explorer/serve.py): ``proxy_port`` (older: ``api_port``) its port,
    ``listen_address`` its host. A key the rollout model already sets otherwise conflicts."""
    explorer, rollout = cfg.explorer, cfg.explorer.rollout_model
    port = explorer.proxy_port
    if port is None:
        port = explorer.api_port
    elif explorer.api_port is not None and explorer.api_port != port:
        raise ConfigError(
            "explorer.api_port",
            "is the older name of explorer.proxy_port, which gives another port",
            value=explorer.api_port,
            valid=f"proxy_port alone ({port})",
        )
    if port is not None:
        if rollout.openai_api_port not in (0, port):
            raise ConfigError(
                "explorer.proxy_port",
                "names the serve endpoint's port, which rollout_model.openai_api_port "
                f"already sets to {rollout.openai_api_port}",
                value=port,
                valid="one of the two, or the same port in both",
            )
        rollout.openai_api_port = port
    host = explorer.listen_address
    if host is not None:
        default = type(rollout)().openai_api_host  # the schema's default (127.0.0.1)
        if rollout.openai_api_host not in (default, host):
            raise ConfigError(
                "explorer.listen_address",
                "names the serve endpoint's address, which rollout_model.openai_api_host "
                f"already sets to {rollout.openai_api_host}",
                value=host,
                valid="one of the two, or the same address in both",
            )
        rollout.openai_api_host = host


def _resolve_synchronizer(cfg: Config) -> None:
    old_names = {"dynamic_by_trainer": "trainer_driven", "dynamic_by_explorer": "explorer_driven"}
    style = cfg.synchronizer.sync_style
    cfg.synchronizer.sync_style = old_names.get(style, style)  # type: ignore[assignment]
    # only mode both runs a trainer and an explorer side by side; every other mode hands
    # weights over through checkpoint files
    if cfg.mode != "both":
        cfg.synchronizer.sync_method = "checkpoint"
    elif cfg.synchronizer.sync_method is None:
        cfg.synchronizer.sync_method = "nccl"


def _resolve_trainer(cfg: Config) -> None:
    trainer = cfg.trainer
    check_trainer_config_source(trainer)
    if trainer.trainer_config_path:
        raise ConfigError(
            "trainer.trainer_config_path",
            "must be read into trainer.trainer_config before resolving",
            value=trainer.trainer_config_path,
            valid="load the file with load_config, or set trainer.trainer_config in Python",
        )
    if trainer.total_steps is None:
        trainer.total_steps = steps_from_buffer(cfg)
    tc = trainer.trainer_config = trainer.trainer_config or VerlTrainerConfig()
    arr = tc.actor_rollout_ref
    actor = arr.actor
    # the FAQ's rule: the trainer makes one optimizer step per train batch
    actor.ppo_mini_batch_size = cfg.buffer.train_batch_size
    if trainer.ppo_max_token_len_per_gpu is not None:  # the FAQ's name of the shortcut
        if trainer.max_token_len_per_gpu not in (None, trainer.ppo_max_token_len_per_gpu):
            raise ConfigError(
                "trainer.ppo_max_token_len_per_gpu",
                "disagrees with trainer.max_token_len_per_gpu, which names the same setting",
                value=trainer.ppo_max_token_len_per_gpu,
                valid=f"{trainer.max_token_len_per_gpu}, or set only one of the two",
            )
        trainer.max_token_len_per_gpu = trainer.ppo_max_token_len_per_gpu
    shortcuts = (
        ("use_dynamic_bsz", actor, "use_dynamic_bsz"),
        ("max_token_len_per_gpu", actor, "ppo_max_token_len_per_gpu"),
        ("ulysses_sequence_parallel_size", actor, "ulysses_sequence_parallel_size"),
        ("grad_clip", actor, "grad_clip"),
        ("enable_gradient_checkpointing", arr.model, "enable_gradient_checkpointing"),
    )
    for short, target, name in shortcuts:
        if getattr(trainer, short) is None:
            setattr(trainer, short, getattr(target, name))
        else:
            setattr(target, name, getattr(trainer, short))
    trainer.ppo_max_token_len_per_gpu = trainer.max_token_len_per_gpu

    optimizer = cfg.algorithm.optimizer
    run_steps = train_steps(cfg)
    if optimizer.total_training_steps == -1 and run_steps is not None:
        optimizer.total_training_steps = run_steps
    # algorithm.optimizer wins over a veRL-layout actor optimizer, as in Trinity-RFT;
    # load_config logs the fields where they differ (upstream/notes.py)
    actor.optim = copy.deepcopy(optimizer)
    if tc.critic.optim.total_training_steps == -1:
        tc.critic.optim.total_training_steps = optimizer.total_training_steps

    for follower in (arr.ref, arr.rollout):
        if follower.log_prob_micro_batch_size_per_gpu is None:
            follower.log_prob_micro_batch_size_per_gpu = actor.ppo_micro_batch_size_per_gpu
        if follower.log_prob_use_dynamic_bsz is None:
            follower.log_prob_use_dynamic_bsz = actor.use_dynamic_bsz
        if follower.log_prob_max_token_len_per_gpu is None:
            follower.log_prob_max_token_len_per_gpu = actor.ppo_max_token_len_per_gpu
    for name in (
        "ulysses_sequence_parallel_size",
        "entropy_from_logits_with_chunking",
        "entropy_checkpointing",
    ):
        if getattr(arr.ref, name) is None:
            setattr(arr.ref, name, getattr(actor, name))

    critic = tc.critic
    if critic.forward_micro_batch_size_per_gpu is None:
        critic.forward_micro_batch_size_per_gpu = critic.ppo_micro_batch_size_per_gpu
    if critic.use_dynamic_bsz is None:
        critic.use_dynamic_bsz = actor.use_dynamic_bsz
    if critic.ppo_max_token_len_per_gpu is None:
        critic.ppo_max_token_len_per_gpu = 2 * actor.ppo_max_token_len_per_gpu
    if critic.forward_max_token_len_per_gpu is None:
        critic.forward_max_token_len_per_gpu = critic.ppo_max_token_len_per_gpu
    if critic.ppo_epochs is None:
        critic.ppo_epochs = actor.ppo_epochs
    if critic.shuffle is None:
        critic.shuffle = actor.shuffle
    if critic.model.external_lib is None:
        critic.model.external_lib = arr.model.external_lib


def train_steps(cfg: Config) -> int | None:
    """Train steps the run will make: the smaller of trainer.total_steps and what the buffer feeds."""
    known = [n for n in (cfg.trainer.total_steps, steps_from_buffer(cfg)) if n is not None]
    return min(known) if known else None


def check_trainer_config_source(trainer: TrainerConfig) -> None:
    """The detailed trainer settings come from one place: inline or a file, not both."""
    if trainer.trainer_config is not None and trainer.trainer_config_path:
        raise ConfigError(
            "trainer.trainer_config_path",
            "is set together with trainer.trainer_config",
            value=trainer.trainer_config_path,
            valid="set only one of trainer.trainer_config and trainer.trainer_config_path",
        )


def steps_from_buffer(cfg: Config) -> int | None:
    """Train steps ``buffer.total_steps`` feeds (None when the data size decides)."""
    buffer = cfg.buffer
    if buffer.total_steps is None or cfg.mode not in ("both", "train"):
        return None
    if cfg.mode == "train":
        return buffer.total_steps
    if buffer.train_batch_size is None:
        return buffer.total_steps  # unresolved config: one explore step per train step
    if buffer.train_batch_size < 1:
        return None  # validate names the batch size; nothing to derive from it
    experiences = buffer.total_steps * buffer.batch_size * cfg.algorithm.repeat_times
    per_step = rollouts_read(cfg, buffer.train_batch_size)  # mix: its expert rows aside
    return max(1, experiences // max(per_step, 1))  # exact for any size of int
