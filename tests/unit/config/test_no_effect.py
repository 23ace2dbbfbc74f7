"""No config key does nothing silently: each is read by the run or listed in NO_EFFECT.

The precise check is tests/unit/config/test_config_reads.py, which records the reads of
real runs for the keys the example configs set. This one is the coarse net for every
other key of the schema, by names in the source.

The rule, checked statically on every leaf key of the schema (walked as docs/config.md
is generated): a key is *read* when its field name appears as an attribute access
(``.name``) or a quoted string (``"name"`` / ``'name'``) in a module of ``trinity/``
outside ``trinity/config/`` (the config layer itself) and ``trinity/studio/`` (the form
that writes configs), or in one of ``TRANSLATORS`` (the config modules that turn a layout
of the file into the settings the run reads: veRL's ``trainer_config``). A key that is not read must be in ``NO_EFFECT`` or in
``CONSUMED_IN_CONFIG`` below (keys the config layer turns into other keys, e.g. a short
form that resolve copies into the veRL layout).

A name match is not proof of effect: ``actor.strategy`` matches the sample strategy's
``.strategy``. Such keys were judged by hand and are listed in NO_EFFECT anyway; they
appear in ``NAME_READ_FOR_SOMETHING_ELSE`` with the file whose match is unrelated, and
the test checks that file still holds that match.

Tasksets (``TasksetConfig``) and buffers (``ExperienceBufferConfig``) share the storage
fields, and each kind of storage is handed to other modules: a field is read for a kind
only when a module that gets a storage of that kind (``STORAGE_READERS``) reads its name.
An auxiliary buffer's ``capacity`` is not read because the experience buffer's is.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from trinity.config import config_from_dict
from trinity.config.no_effect import NO_EFFECT, describe, schema_fields, set_without_effect

TRINITY = Path(__file__).resolve().parents[3] / "trinity"
# config modules whose reads are the run's: they translate veRL's trainer_config into
# the trainer's settings, which the trainer reads
TRANSLATORS = ("config/upstream/verl.py",)

_STORAGES = [
    key.removesuffix(".name") for key in schema_fields() if key.endswith("buffers.<name>.name")
]
_STORAGES += [
    "buffer.explorer_input.taskset",
    "buffer.explorer_input.tasksets[]",
    "buffer.explorer_input.eval_tasksets[]",
    "buffer.trainer_input.experience_buffer",
]

# each kind of storage -> the modules handed a storage of that kind (a StorageConfig)
_ROW_READER = "buffer/task_reader.py"  # TasksetReader: a taskset's tasks, a dataset's rows
_TASKSET_READERS = (
    _ROW_READER,
    "explorer/explorer.py",  # make_taskset_reader, the eval tasksets
    "launch/stage.py",  # the task pipeline's output taskset
    "trainer/trainer.py",  # the taskset's sampling temperature
    "cli/debug.py",
)
_DATASET_READERS = (  # trainer datasets: mode train's experience buffer, auxiliary buffers
    _ROW_READER,
    "trainer/dataset_steps.py",
    "trainer/sft_data.py",
    "trainer/train_input.py",
)
STORAGE_READERS = {
    **{
        taskset: _TASKSET_READERS
        for taskset in (
            "buffer.explorer_input.taskset",
            "buffer.explorer_input.tasksets[]",
            "buffer.explorer_input.eval_tasksets[]",
        )
    },
    "buffer.trainer_input.experience_buffer": (
        *_DATASET_READERS,
        "buffer/experience_buffer.py",  # make_experience_buffer: queue, sql, file
        "launch/buffer_actor.py",
        "launch/roles.py",  # the trainer's read timeout
        "launch/stage.py",
        "explorer/serve.py",
    ),
    "buffer.trainer_input.auxiliary_buffers.<name>": _DATASET_READERS,
}

# key -> the config module that reads it and turns it into the keys the run reads
CONSUMED_IN_CONFIG = {
    "checkpoint_root_dir": "derived.py",  # job_dir()
    "cluster.node_num": "trainer_ranks.py",  # the trainer's ranks on a GPU cluster
    "buffer.explorer_input.default_eval_workflow_type": "derived.py",  # eval tasksets' workflow
    "model.custom_chat_template": "derived.py",  # every engine's and dataset's chat_template
    "trainer.trainer_config_path": "loader.py",  # read into trainer.trainer_config
    "model.chat_template_path": "loader.py",  # read into model.custom_chat_template
    "explorer.runner_num": "upstream/spellings.py",  # Trinity-RFT's older spelling: runner_per_model
    "trainer.max_token_len_per_gpu": "derived.py",  # actor.ppo_max_token_len_per_gpu
    "trainer.trainer_config.trainer.n_gpus_per_node": "trainer_ranks.py",  # trainer layout
    "stages[].stage_name": "stages.py",  # the stage's experiment name
    # Trinity-RFT's serve proxy: mode serve's endpoint on the rollout model
    "explorer.proxy_port": "derived.py",
    "explorer.api_port": "derived.py",
    "explorer.listen_address": "derived.py",
    **{  # Trinity-RFT's data_selector section, copied into task_selector
        f"{storage}.data_selector.selector_type": "derived.py" for storage in _STORAGES
    },
    # Trinity-RFT's row kind: checked against what the storage's role and algorithm read
    **{
        f"{storage}.schema_type": "validate.py" for storage in _STORAGES if "taskset" not in storage
    },
}

# no-effect key -> file outside trinity/config whose match of the name means something else
NAME_READ_FOR_SOMETHING_ELSE = {
    # the actor's offload keys, which the trainer reads on CUDA (trainer/trainer.py)
    **{
        f"trainer.trainer_config.{owner}.fsdp_config.{key}": "trainer/distributed.py"
        for owner in ("actor_rollout_ref.ref", "critic.model")
        for key in ("param_offload", "optimizer_offload")
    },
    "model.lora_configs[].name": "trainer/trainer.py",  # every '.name' of the code
    # the fields of algorithm.optimizer, the policy's optimizer, of the same names
    **{
        key: "trainer/trainer.py"
        for key in NO_EFFECT
        if ".actor.optim." in key and not key.endswith("total_training_steps")
    },
    "trainer.trainer_config.actor_rollout_ref.actor.strategy": "trainer/train_input.py",
    "trainer.trainer_config.critic.strategy": "trainer/train_input.py",
    "trainer.trainer_config.actor_rollout_ref.actor.shuffle": "buffer/task_reader.py",
    "trainer.trainer_config.critic.shuffle": "buffer/task_reader.py",
    # the reference model's fields of the same names
    "trainer.trainer_config.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": (
        "trainer/trainer.py"
    ),
    "trainer.trainer_config.actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": (
        "trainer/trainer.py"
    ),
    "trainer.trainer_config.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": (
        "trainer/trainer.py"
    ),
    # the critic's own optimizer
    "algorithm.optimizer.total_training_steps": "trainer/critic.py",
    "trainer.trainer_config.actor_rollout_ref.actor.optim.total_training_steps": (
        "trainer/critic.py"
    ),
    # a training taskset's data_selector, which the taskset reader reads for every storage
    **{
        key: "buffer/task_reader.py"
        for key in NO_EFFECT
        if ".data_selector." in key and "explorer_input.tasksets" not in key
    },
    # buffer.total_epochs, which the explorer passes to each taskset's reader; the
    # auxiliary buffers' passes
    **{
        key: "explorer/explorer.py" if "explorer_input" in key else "trainer/train_input.py"
        for key in NO_EFFECT
        if key.endswith(".total_epochs")
    },
}


@cache
def _sources() -> dict[str, str]:
    return {
        str(path.relative_to(TRINITY)): path.read_text(encoding="utf-8")
        for path in TRINITY.rglob("*.py")
        if path.relative_to(TRINITY).parts[0] not in ("config", "studio")
        or str(path.relative_to(TRINITY)) in TRANSLATORS
    }


def _readers(name: str) -> list[str]:
    pattern = re.compile(rf"\.{name}\b|[\"']{name}[\"']")
    return sorted(file for file, text in _sources().items() if pattern.search(text))


@cache
def _leaf_keys() -> list[str]:
    keys = list(schema_fields())
    return [k for k in keys if not any(o.startswith((f"{k}.", f"{k}[].")) for o in keys)]


def _name(key: str) -> str:
    return key.rsplit(".", 1)[-1].removesuffix("[]")


def _storage_field(key: str) -> tuple[str, str] | None:
    """``(storage, field)`` of a key inside a storage: the storage's own field it is or
    lies in (``rollout_args`` for ``<storage>.rollout_args.temperature``)."""
    for storage in STORAGE_READERS:
        if key.startswith(f"{storage}."):
            return storage, key.removeprefix(f"{storage}.").split(".")[0]
    return None


def _storage_readers(storage: str, field: str) -> list[str]:
    """The modules handed a storage of this kind that read ``field``."""
    pattern = re.compile(rf"\.{field}\b|[\"']{field}[\"']")
    return sorted(file for file in STORAGE_READERS[storage] if pattern.search(_sources()[file]))


@pytest.mark.parametrize("key", _leaf_keys())
def test_every_key_is_read_or_listed_as_without_effect(key: str) -> None:
    if key in NO_EFFECT:
        return
    found = _storage_field(key)
    if found is not None and key not in CONSUMED_IN_CONFIG:
        storage, field = found
        assert _storage_readers(storage, field), (
            f"{key}: no module handed a {storage} reads '{field}' "
            f"({', '.join(STORAGE_READERS[storage])}): wire it into the run, or list it in "
            "trinity/config/no_effect.py with the reason it has no effect"
        )
    if _readers(_name(key)):
        return
    module = CONSUMED_IN_CONFIG.get(key)
    assert module is not None, (
        f"{key} is read nowhere outside trinity/config: wire it into the run, or list it in "
        "trinity/config/no_effect.py with the reason it has no effect"
    )
    source = (TRINITY / "config" / module).read_text(encoding="utf-8")
    assert re.search(rf"\b{_name(key)}\b", source), f"{module} does not read {key}"


@pytest.mark.parametrize("key", sorted(NO_EFFECT))
def test_no_effect_entries_are_schema_keys_nothing_reads(key: str) -> None:
    assert key in _leaf_keys(), f"{key} is not a leaf key of the schema"
    assert NO_EFFECT[key], f"{key} needs a reason"
    found = _storage_field(key)
    readers = _storage_readers(*found) if found else _readers(_name(key))
    unrelated = NAME_READ_FOR_SOMETHING_ELSE.get(key)
    if unrelated is None:
        assert not readers, f"{key} is listed as without effect but {readers} read its name"
    else:  # judged by hand: the match there is another field of the same name
        assert unrelated in readers, f"{unrelated} no longer reads '{_name(key)}'"


def test_consumed_keys_are_schema_keys() -> None:
    assert set(CONSUMED_IN_CONFIG) <= set(_leaf_keys())
    assert not set(CONSUMED_IN_CONFIG) & set(NO_EFFECT)


def test_storage_readers_name_every_storage_and_existing_modules() -> None:
    assert set(STORAGE_READERS) == set(_STORAGES)
    named = {file for files in STORAGE_READERS.values() for file in files}
    assert named <= set(_sources()), named - set(_sources())


def _with_veRL_keys(data: dict[str, Any]) -> dict[str, Any]:
    data["trainer"] = {
        "trainer_config": {
            "actor_rollout_ref": {
                "actor": {"fsdp_config": {"forward_prefetch": True}, "shuffle": False},
                "model": {"use_remove_padding": True},  # the default: not reported
            },
        }
    }
    data["explorer"] = {"auxiliary_models": [{"model_path": "judge", "enforce_eager": False}]}
    return data


def test_only_keys_set_to_a_non_default_value_are_reported(minimal: dict[str, Any]) -> None:
    found = set_without_effect(config_from_dict(_with_veRL_keys(minimal)))
    assert [key for key, _ in found] == [
        "explorer.auxiliary_models[0].enforce_eager",
        "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.forward_prefetch",
    ]
    assert (
        found[1][1]
        == NO_EFFECT["trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.forward_prefetch"]
    )


def test_stage_overrides_are_reported_under_their_stage(minimal: dict[str, Any]) -> None:
    minimal["stages"] = [
        {"stage_name": "a", "trainer": {"trainer_config": {"trainer": {"default_hdfs_dir": "x"}}}}
    ]
    found = set_without_effect(config_from_dict(minimal))
    assert [key for key, _ in found] == [
        "stages[0].trainer.trainer_config.trainer.default_hdfs_dir"
    ]


def test_a_default_config_reports_nothing(minimal: dict[str, Any]) -> None:
    assert set_without_effect(config_from_dict(minimal)) == []


def test_the_line_names_each_key_and_why() -> None:
    line = describe([("a.b", "vLLM-only"), ("c", "GPU-only")])
    assert line == "accepted, no effect here: a.b (vLLM-only), c (GPU-only)"


def test_the_reference_marks_every_key_without_effect() -> None:
    from trinity.config.docs import render

    rows = {line.split("`")[1]: line for line in render().splitlines() if line.startswith("| `")}
    for key, why in NO_EFFECT.items():
        assert f"| no effect here ({why}): " in rows[key], key


def test_gpu_only_keys_are_reported_on_a_cpu_config_only(minimal: dict[str, Any]) -> None:
    minimal["explorer"] = {
        "rollout_model": {"gpu_memory_utilization": 0.4},
        "auxiliary_models": [{"model_path": "judge", "gpu_memory_utilization": 0.3}],
    }
    minimal["trainer"] = {
        "trainer_config": {
            "actor_rollout_ref": {"actor": {"fsdp_config": {"optimizer_offload": True}}}
        }
    }
    on_cpu = [key for key, why in set_without_effect(config_from_dict(minimal))]
    assert on_cpu == [
        "explorer.rollout_model.gpu_memory_utilization",
        "explorer.auxiliary_models[0].gpu_memory_utilization",
        "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.optimizer_offload",
    ]
    minimal["cluster"] = {**minimal.get("cluster", {}), "gpu_per_node": 1}
    assert set_without_effect(config_from_dict(minimal)) == []


def test_a_storage_key_of_another_kind_of_storage_is_reported(minimal: dict[str, Any]) -> None:
    # capacity and max_read_timeout are queue settings; rollout_args and workflow_args
    # are given to the tasks a taskset's workflow runs
    minimal["buffer"]["explorer_input"]["taskset"].update(capacity=50, max_read_timeout=5)
    minimal["buffer"]["trainer_input"]["experience_buffer"].update(
        rollout_args={"temperature": 0.5}, workflow_args={"max_turns": 3}
    )
    found = dict(set_without_effect(config_from_dict(minimal)))
    assert list(found) == [
        "buffer.explorer_input.taskset.max_read_timeout",
        "buffer.explorer_input.taskset.capacity",
        "buffer.trainer_input.experience_buffer.rollout_args.temperature",
        "buffer.trainer_input.experience_buffer.workflow_args",
    ]
    assert found["buffer.explorer_input.taskset.capacity"].startswith("queue-only: a taskset")
    assert "never tasks" in found["buffer.trainer_input.experience_buffer.workflow_args"]
