"""Which keys the config generator shows where.

Beginner mode shows two curated lists ("Essential Configs", "Important Configs");
expert mode shows every key of the schema, grouped by top-level section into a
general block and the tabs "Model", "Buffer", "Explorer and Synchronizer" and
"Trainer". The essential keys are always written to the generated YAML, even when
they keep their default, so a generated file names the things a reader looks for.
"""

from __future__ import annotations

from collections.abc import Sequence

from trinity.studio.fields import FieldSpec

TASKSET = "buffer.explorer_input.taskset"

BEGINNER_SECTIONS: dict[str, tuple[str, ...]] = {
    "Essential Configs": (
        "project",
        "name",
        "checkpoint_root_dir",
        "model.model_path",
        f"{TASKSET}.name",
        f"{TASKSET}.storage_type",
        f"{TASKSET}.path",
        f"{TASKSET}.split",
        f"{TASKSET}.format.prompt_key",
        f"{TASKSET}.format.response_key",
        "buffer.explorer_input.default_workflow_type",
        "buffer.explorer_input.default_reward_fn_type",
        "algorithm.algorithm_type",
        "algorithm.repeat_times",
        "buffer.batch_size",
        "buffer.total_epochs",
        "model.max_prompt_tokens",
        "model.max_response_tokens",
        "monitor.monitor_type",
    ),
    "Important Configs": (
        "mode",
        "continue_from_checkpoint",
        "buffer.total_steps",
        "buffer.train_batch_size",
        "model.dtype",
        "algorithm.optimizer.lr",
        "algorithm.kl_loss_fn",
        "buffer.explorer_input.eval_tasksets",
        "explorer.eval_interval",
        "explorer.runner_per_model",
        "explorer.rollout_model.engine_num",
        "synchronizer.sync_method",
        "synchronizer.sync_interval",
        "trainer.save_interval",
        "trainer.grad_clip",
        "cluster.node_num",
        "cluster.gpu_per_node",
        "log.level",
    ),
}

ALWAYS_WRITTEN: frozenset[str] = frozenset(BEGINNER_SECTIONS["Essential Configs"])

# Top-level sections of each expert block; "" stands for the top-level keys
# (project, name, mode, ..., stages).
GENERAL = "General"
EXPERT_SECTIONS: dict[str, tuple[str, ...]] = {
    GENERAL: ("", "cluster", "monitor", "log"),
    "Model": ("model",),
    "Buffer": ("buffer", "data_processor", "service"),
    "Explorer and Synchronizer": ("explorer", "synchronizer"),
    "Trainer": ("algorithm", "trainer"),
}


def top_section(path: str) -> str:
    """``"algorithm.optimizer.lr"`` -> ``"algorithm"``; a top-level scalar -> ``""``."""
    head, dot, _ = path.partition(".")
    return head if dot else ""


def expert_fields(block: str, fields: Sequence[FieldSpec]) -> list[FieldSpec]:
    """The fields shown in expert block ``block``, in schema order."""
    sections = EXPERT_SECTIONS[block]
    return [f for f in fields if top_section(f.path) in sections]


def group_by_parent(fields: Sequence[FieldSpec]) -> dict[str, list[FieldSpec]]:
    """Fields keyed by their parent section (``"buffer.explorer_input.taskset.format"``)."""
    groups: dict[str, list[FieldSpec]] = {}
    for f in fields:
        parent = f.path.rpartition(".")[0]
        groups.setdefault(parent, []).append(f)
    return groups
