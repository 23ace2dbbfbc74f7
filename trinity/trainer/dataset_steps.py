"""How many rows a dataset-trained step reads and how many steps the dataset makes,
without torch or transformers: the driver of ``trinity run`` counts a stage's steps with
it before it starts the actors (``trinity.launch.stage.count_steps``).

``sft``, ``dpo`` and ``cpt`` train on the rows of ``buffer.trainer_input.experience_buffer``
(``storage_type`` file or sql). An SFT step reads ``train_batch_size`` rows; a DPO step
reads ``train_batch_size / 2`` rows, each a chosen and a rejected sequence.
"""

from __future__ import annotations

from typing import Literal

from trinity.buffer.task_reader import TasksetReader
from trinity.config import AlgorithmConfig, Config
from trinity.config.schema import StorageConfig

DatasetKind = Literal["sft", "dpo", "cpt"]


class TrainInputError(ValueError):
    """The trainer's input cannot be built from the config."""


def dataset_kind(algo: AlgorithmConfig) -> DatasetKind:
    if algo.algorithm_type == "cpt":
        return "cpt"  # raw text, no chat template
    return "dpo" if algo.policy_loss_fn == "dpo" else "sft"


def rows_per_step(config: Config) -> int:
    """Dataset rows one train step reads: train_batch_size, halved for DPO pairs."""
    size = int(config.buffer.train_batch_size or 1)
    if dataset_kind(config.algorithm) == "dpo":
        if size % 2:
            raise TrainInputError(
                f"buffer.train_batch_size is {size}: dpo trains on chosen/rejected pairs, "
                "so it must be even (it is batch_size x 2 when unset)"
            )
        return size // 2
    return size


def dataset_storage(config: Config) -> StorageConfig:
    storage = config.buffer.trainer_input.experience_buffer
    if storage is None or storage.storage_type not in ("file", "sql") or not storage.path:
        raise TrainInputError(
            f"algorithm_type {config.algorithm.algorithm_type} trains on a dataset: set "
            "buffer.trainer_input.experience_buffer.path (storage_type file or sql)"
        )
    return storage


def dataset_reader(
    storage: StorageConfig,
    *,
    batch_size: int,
    total_epochs: int = 1,
    total_steps: int | None = None,
    seed: int = 42,
) -> TasksetReader:
    """A row reader over ``storage``; ``len()`` of it counts batches of ``batch_size``."""
    return TasksetReader(
        storage,
        batch_size=batch_size,
        total_epochs=total_epochs,
        total_steps=total_steps,
        seed=seed if storage.data_selector.seed is None else storage.data_selector.seed,
        selector=storage.task_selector,
        default_workflow="",
    )


def dataset_steps(config: Config) -> int:
    """Train steps of an sft/dpo/cpt stage: batches of rows over buffer.total_epochs."""
    reader = dataset_reader(
        dataset_storage(config),
        batch_size=rows_per_step(config),
        total_epochs=config.buffer.total_epochs,
        total_steps=config.buffer.total_steps,
        seed=config.seed,
    )
    return len(reader)
