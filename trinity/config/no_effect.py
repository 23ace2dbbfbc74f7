"""The config keys this project accepts but does not act on, and why.

The config surface follows Trinity-RFT's user docs, which describe a GPU deployment on
veRL and vLLM; a config written for it must load here, so keys of parts we do not have
(FSDP offload, sequence parallelism, vLLM engine options, ...) are accepted. They must
not do nothing silently: ``trinity run`` and ``--dry-run`` list those the config sets to
a value other than the default (``set_without_effect``), and ``docs/config.md`` marks
them; keys of the other kind of storage (a queue setting on a taskset), which the typed
config has no field for, are listed too (``trinity/config/upstream/storage_kinds.py``).
Keys are dotted paths as ``docs/config.md`` writes them: list items as ``[]``,
mapping entries as ``<name>``. Tests keep this table true (tests/unit/config/test_no_effect.py).
``NO_EFFECT_ARGS`` does the same for arguments a part accepts in its ``*_args`` mapping
(Trinity-RFT's names) and computes otherwise here.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS
from trinity.config.part_args.policy_loss import BATCH_GEOMETRY
from trinity.config.schema import STAGE_SECTIONS, Config
from trinity.config.typed_yaml import field_types, to_plain
from trinity.config.upstream.storage_kinds import carried_keys, other_kind_reason

_ONE_ENGINE = "one engine here: the transformers engine serves every engine_type"
_BUILT_IN_ENGINE = (
    "one engine here: vllm and vllm_async mean the built-in transformers engine, on CPU and on GPU"
)
_NO_TP = (
    "not implemented on our engines: a replica computes on one device, though on a GPU "
    "cluster the device plan reserves this many GPUs for it"
)
_NO_GRAPHS = (
    "vLLM's switch: the built-in engine captures its decode steps as CUDA graphs on a GPU "
    "either way (TRINITY_DECODE=reference decodes without them)"
)
_NO_PREFIX_CACHE = "vLLM-only: no KV cache is kept across requests"
_FSDP = "GPU-only FSDP option: several trainer ranks shard each decoder layer with FSDP2 defaults"
_NO_SP = "not implemented: sequences are never split over ranks"
_CHUNKED_ENTROPY = (
    "always on: the trainer computes entropy in chunks of token positions, never the whole "
    "softmax at once"
)
_ENTROPY_RECOMPUTED = "always on: the entropy's backward recomputes each chunk's softmax"
_NO_REF_ENTROPY = "the reference model computes log-probs only, no entropy"
_NO_FUSED = "not implemented: our trainer has its own fused layers, always on"
_PADDING = "not implemented: batches are padded, never packed without pads"
_STRATEGY = "veRL compatibility only: the trainer's data parallelism is its own"
_NO_REJECTION = "not implemented: rollout correction weights tokens (rollout_is), rejects none"

_TOOL_PARSER = "vLLM-only: our endpoint always parses Hermes <tool_call> blocks"
_STORAGES = (
    "buffer.explorer_input.taskset",
    "buffer.explorer_input.tasksets[]",
    "buffer.explorer_input.eval_tasksets[]",
    "buffer.trainer_input.experience_buffer",
    "buffer.trainer_input.auxiliary_buffers.<name>",
)
_QUEUE_KEYS = (
    "use_priority_queue",
    "reuse_cooldown_time",
    "replay_buffer.enable",
    "replay_buffer.priority_fn",
    "replay_buffer.priority_fn_args",
    "replay_buffer.reuse_cooldown_time",
)
_QUEUE_LIMITS = ("capacity", "max_read_timeout")
_WHOLE_DATA = "queue-only: {} holds all its rows from the start, so no read waits or overflows"

NO_EFFECT: dict[str, str] = {
    # explorer engines
    **{
        f"explorer.{engine}.{key}": why
        for engine in ("rollout_model", "auxiliary_models[]")
        for key, why in (
            ("engine_type", _BUILT_IN_ENGINE),
            ("tensor_parallel_size", _NO_TP),
            ("enforce_eager", _NO_GRAPHS),
            ("enable_prefix_caching", _NO_PREFIX_CACHE),
            ("enable_chunked_prefill", "vLLM-only: our engines prefill each prompt in one pass"),
            ("use_v1", _ONE_ENGINE),
            ("enable_auto_tool_choice", _TOOL_PARSER),
            ("tool_call_parser", _TOOL_PARSER),
            ("reasoning_parser", "vLLM-only: the endpoint leaves reasoning in the content"),
            ("enable_log_requests", "vLLM-only: requests are not logged one by one"),
        )
    },
    # tasksets and buffers; a key of the other kind of storage is not a field of this one
    # (trinity/config/upstream/storage_kinds.py)
    f"{_STORAGES[3]}.total_epochs": (
        "only auxiliary buffers; tasksets pass buffer.total_epochs times"
    ),
    **{
        f"{_STORAGES[4]}.{key}": _WHOLE_DATA.format("an auxiliary buffer (file or sql)")
        for key in _QUEUE_LIMITS
    },
    **{
        f"{_STORAGES[4]}.{key}": "an auxiliary buffer is read in its selector's order"
        for key in _QUEUE_KEYS
    },
    **{
        f"{storage}.data_selector.{key}": (
            "difficulty_based draws by the explorer's reward feedback, which only training "
            "tasksets get: this one draws as random"
        )
        for storage in (_STORAGES[2], *_STORAGES[3:])
        for key in ("feature_keys", "kwargs")
    },
    **{
        f"{taskset}.schema_type": "a taskset's rows are tasks; its format names their columns"
        for taskset in _STORAGES[:3]
    },
    # model
    "model.lora_configs[].name": (
        "one adapter, saved as actor/lora_adapter/ and merged into the rollout weights: no "
        "engine serves adapters by name"
    ),
    # trainer
    "trainer.trainer_type": "verl and torch name the same built-in trainer",
    "trainer.enable_preview": "no rollout preview is sent: samples are in trinity view and the buffer",
    "trainer.trainer_strategy": _STRATEGY,
    "trainer.ulysses_sequence_parallel_size": _NO_SP,
    "algorithm.optimizer.total_training_steps": (
        "the policy's schedule spans the run's train steps; only the critic's default follows it"
    ),
    "trainer.trainer_config.actor_rollout_ref.hybrid_engine": (
        "actor and reference always share the trainer's ranks"
    ),
    "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding": _PADDING,
    "trainer.trainer_config.actor_rollout_ref.model.use_fused_kernels": _NO_FUSED,
    "trainer.trainer_config.actor_rollout_ref.model.fused_kernel_options.impl_backend": _NO_FUSED,
    "trainer.trainer_config.actor_rollout_ref.actor.strategy": _STRATEGY,
    "trainer.trainer_config.actor_rollout_ref.actor.ppo_mini_batch_size": (
        "overridden by buffer.train_batch_size: one optimizer step per train batch and ppo_epoch"
    ),
    "trainer.trainer_config.actor_rollout_ref.actor.shuffle": (
        "not implemented: each pass reads the batch in order"
    ),
    "trainer.trainer_config.actor_rollout_ref.actor.ulysses_sequence_parallel_size": _NO_SP,
    "trainer.trainer_config.actor_rollout_ref.actor.entropy_from_logits_with_chunking": (
        _CHUNKED_ENTROPY
    ),
    "trainer.trainer_config.actor_rollout_ref.actor.entropy_checkpointing": _ENTROPY_RECOMPUTED,
    "trainer.trainer_config.actor_rollout_ref.actor.optim.total_training_steps": (
        "the policy's schedule spans the run's train steps"
    ),
    **{
        f"trainer.trainer_config.actor_rollout_ref.actor.optim.{key}": (
            "algorithm.optimizer is the policy's optimizer, as in Trinity-RFT; the load logs "
            "where this one differs"
        )
        for key in (
            "lr",
            "lr_warmup_steps",
            "lr_warmup_steps_ratio",
            "lr_scheduler_type",
            "warmup_style",
            "min_lr_ratio",
            "weight_decay",
            "betas",
        )
    },
    "trainer.trainer_config.actor_rollout_ref.ref.ulysses_sequence_parallel_size": _NO_SP,
    "trainer.trainer_config.actor_rollout_ref.ref.entropy_from_logits_with_chunking": (
        _NO_REF_ENTROPY
    ),
    "trainer.trainer_config.actor_rollout_ref.ref.entropy_checkpointing": _NO_REF_ENTROPY,
    **{
        f"trainer.trainer_config.algorithm.rollout_correction.{key}": _NO_REJECTION
        for key in (
            "rollout_rs",
            "rollout_rs_threshold",
            "rollout_rs_threshold_lower",
            "rollout_token_veto_threshold",
        )
    },
    "trainer.trainer_config.algorithm.rollout_correction.loss_type": (
        "the policy loss is algorithm.policy_loss_fn in every mode"
    ),
    "trainer.trainer_config.critic.strategy": _STRATEGY,
    "trainer.trainer_config.critic.shuffle": "not implemented: each pass reads the batch in order",
    "trainer.trainer_config.critic.ulysses_sequence_parallel_size": _NO_SP,
    "trainer.trainer_config.critic.model.use_remove_padding": _PADDING,
    **{
        f"trainer.trainer_config.{owner}.fsdp_config.{key}": _FSDP
        for owner in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic.model")
        for key in (
            "wrap_policy.transformer_layer_cls_to_wrap",
            "wrap_policy.min_num_params",
            "param_offload",
            "optimizer_offload",
            "fsdp_size",
            "forward_prefetch",
        )
        # the actor's offload keys act on CUDA (trinity.trainer.distributed)
        if not (owner == "actor_rollout_ref.actor" and key.endswith("_offload"))
    },
    "trainer.trainer_config.trainer.default_hdfs_dir": "not implemented: no remote copy is made",
    "trainer.trainer_config.trainer.val_before_train": (
        "the trainer validates nothing: the explorer evaluates, before the first step when "
        "explorer.eval_on_startup is true"
    ),
    "trainer.trainer_config.trainer.del_local_ckpt_after_load": (
        "not implemented: checkpoints stay after loading"
    ),
    # services and pipelines
    "explorer.service_status_check_interval": (
        "serve mode runs one engine in its own process: no proxy polls engines' health"
    ),
    "explorer.min_running_model_num": (
        "serve mode runs one engine and syncs no weights while serving"
    ),
    "explorer.db_url": (
        "no request history is recorded; rewarded calls go to "
        "buffer.trainer_input.experience_buffer"
    ),
}

_MIX_BATCH = (
    "derived here: the trainer averages each part over its own rows of the whole "
    "mini-batch, the share Trinity-RFT's per-micro-batch weights compute from these"
)
# policy_loss_fn -> arguments of policy_loss_fn_args it accepts but does not act on
NO_EFFECT_ARGS: dict[str, dict[str, str]] = {
    loss: {arg: _MIX_BATCH for arg in ("use_dynamic_bsz", *BATCH_GEOMETRY)}
    for loss in ("mix", "mix_chord")
}


def schema_fields(cls: type = Config, prefix: str = "") -> dict[str, dataclasses.Field]:
    """Every key of the schema (sections and leaves) -> its field, keyed as in docs/config.md."""
    found: dict[str, dataclasses.Field] = {}
    types = field_types(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        found[key] = f
        nested, shape = nested_dataclass(types[f.name])
        if nested is not None and nested is not cls:
            found.update(schema_fields(nested, _child_prefix(key, shape)))
    return found


def nested_dataclass(tp: Any) -> tuple[type | None, str]:
    """The dataclass inside ``tp`` and how it is held: ``"one"``, ``"list"`` or ``"dict"``."""
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp, "one"
    for arg in typing.get_args(tp):
        found, shape = nested_dataclass(arg)
        if found is not None:
            if origin is list:
                return found, "list"
            if origin is dict:
                return found, "dict"
            return found, shape
    return None, "one"


def _child_prefix(key: str, shape: str) -> str:
    return {"list": f"{key}[].", "dict": f"{key}.<name>."}.get(shape, f"{key}.")


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return to_plain(f.default_factory())  # type: ignore[misc]
    return dataclasses.MISSING


def set_without_effect(cfg: Config) -> list[tuple[str, str]]:
    """``(key path, why)`` of each no-effect key that ``cfg`` sets to a non-default value.

    ``cfg`` is the config as written (``read_config``), not resolved: resolve fills unset
    keys from others, and only what the user wrote is reported. Stage overrides count too.
    Arguments of ``NO_EFFECT_ARGS`` count whenever the policy loss's args name them.
    """
    plain = to_plain(cfg)
    found = [(where, NO_EFFECT[key]) for key, where in set_keys(cfg) if key in NO_EFFECT]
    for carried in carried_keys(cfg):
        pattern = f"{carried.pattern}."
        fields = schema_fields(carried.kind, pattern)
        found += [
            (where, other_kind_reason(carried.pattern, key.removeprefix(pattern)))
            for key, where in _walk(
                carried.values, carried.kind, pattern, f"{carried.where}.", fields
            )
        ]
    found += _loss_args(plain["algorithm"], None, "algorithm.")
    if cfg.cluster.gpu_per_node == 0:
        found += _gpu_only(cfg)
    for index, stage in enumerate(cfg.stages):
        override = stage.algorithm
        if isinstance(override, Mapping):
            found += _loss_args(override, plain["algorithm"], f"stages[{index}].algorithm.")
    return found


def set_keys(cfg: Config) -> list[tuple[str, str]]:
    """``(key, where)`` of each leaf key ``cfg`` sets to a non-default value: ``key`` as
    ``docs/config.md`` writes it, ``where`` the path in this config (list indices, entry
    names, ``stages[i].`` for a stage's override). ``cfg`` as written, not resolved."""
    fields = schema_fields()
    overrides = {f"stages[].{section}" for section in STAGE_SECTIONS}  # walked below
    found = [
        (key, where)
        for key, where in _walk(to_plain(cfg), Config, "", "", fields)
        if key not in overrides
    ]
    for index, stage in enumerate(cfg.stages):
        for section in STAGE_SECTIONS:
            override = getattr(stage, section)
            if isinstance(override, Mapping):
                cls = type(getattr(cfg, section))
                found += _walk(override, cls, f"{section}.", f"stages[{index}].{section}.", fields)
    return found


_GPU_ONLY = "GPU-only: no effect while cluster.gpu_per_node is 0 (everything runs on the CPU)"


def _gpu_only(cfg: Config) -> list[tuple[str, str]]:
    """The keys that act on GPUs only (``trinity.launch.gpus``, ``trinity.trainer.
    distributed``) which a CPU config sets to a non-default value."""
    from trinity.config.schema.explorer import InferenceModelConfig
    from trinity.config.upstream.verl_layout import FsdpConfig

    models = [("explorer.rollout_model", cfg.explorer.rollout_model)]
    models += [
        (f"explorer.auxiliary_models[{i}]", m) for i, m in enumerate(cfg.explorer.auxiliary_models)
    ]
    default = InferenceModelConfig().gpu_memory_utilization
    found = [
        (f"{path}.gpu_memory_utilization", _GPU_ONLY)
        for path, model in models
        if model.gpu_memory_utilization != default
    ]
    verl = cfg.trainer.trainer_config  # None until resolved when the config sets none
    if verl is not None:
        fsdp = verl.actor_rollout_ref.actor.fsdp_config
        for key in ("param_offload", "optimizer_offload"):
            if getattr(fsdp, key) != getattr(FsdpConfig(), key):
                path = f"trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.{key}"
                found.append((path, _GPU_ONLY))
    return found


def _loss_args(
    algorithm: Mapping[str, Any], outer: Mapping[str, Any] | None, path: str
) -> list[tuple[str, str]]:
    """``NO_EFFECT_ARGS`` entries ``algorithm.policy_loss_fn_args`` names; a stage's
    ``algorithm`` falls back to the run's (``outer``) for what it does not set."""
    merged = {**(outer or {}), **algorithm}
    loss = merged.get("policy_loss_fn")
    if loss is None:
        row = ALGORITHM_DEFAULTS.get(merged.get("algorithm_type", "ppo"))
        loss = row.policy_loss_fn if row is not None else None
    ignored = NO_EFFECT_ARGS.get(loss or "", {})
    given = algorithm.get("policy_loss_fn_args") or {}
    return [(f"{path}policy_loss_fn_args.{arg}", ignored[arg]) for arg in given if arg in ignored]


def describe(found: list[tuple[str, str]]) -> str:
    """The one line ``trinity run`` prints: ``accepted, no effect here: key (why), ...``."""
    return "accepted, no effect here: " + ", ".join(f"{key} ({why})" for key, why in found)


def _walk(
    data: Mapping[str, Any],
    cls: type,
    pattern: str,
    path: str,
    fields: dict[str, dataclasses.Field],
) -> Iterator[tuple[str, str]]:
    types = field_types(cls)
    for name, value in data.items():
        if name not in types:
            continue
        key, where = f"{pattern}{name}", f"{path}{name}"
        nested, shape = nested_dataclass(types[name])
        if nested is None or value is None:
            if value != default_of(fields[key]):
                yield key, where
        elif shape == "list" and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    yield from _walk(item, nested, f"{key}[].", f"{where}[{i}].", fields)
        elif shape == "dict" and isinstance(value, Mapping):
            for entry, item in value.items():
                if isinstance(item, Mapping):
                    yield from _walk(item, nested, f"{key}.<name>.", f"{where}.{entry}.", fields)
        elif isinstance(value, Mapping):
            yield from _walk(value, nested, f"{key}.", f"{where}.", fields)
