"""Where the experiences of each train step come from.

- ``sft``, ``dpo`` and ``cpt`` train on a dataset: the rows of
  ``buffer.trainer_input.experience_buffer`` (``storage_type`` file or sql), tokenized
  with the chat template (``cpt``: raw text without one; ``trinity.trainer.sft_data``). An SFT step reads
  ``train_batch_size`` rows; a DPO step reads ``train_batch_size / 2`` rows, each a
  chosen and a rejected sequence.
- every other algorithm reads ``train_batch_size`` experiences from the experience
  buffer the explorer fills (or, in mode train, one it filled before); ``mix`` reads
  fewer, as its expert rows fill the rest of the batch (``trinity.config.train_batch``).

The sample strategy then picks the batch; ``mix`` adds expert rows from the auxiliary
datasets (``buffer.trainer_input.auxiliary_buffers``), which repeat as long as needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trinity.algorithm.args import build
from trinity.algorithm.registries import SAMPLE_STRATEGY
from trinity.config import Config, ModelConfig
from trinity.config.algorithm_defaults import trains_on_dataset
from trinity.config.train_batch import rollouts_read
from trinity.rollout.engine import chat_template_args
from trinity.trainer.dataset_steps import (
    TrainInputError,
    dataset_kind,
    dataset_steps,
    dataset_storage,
    rows_per_step,
)
from trinity.trainer.sft_data import DatasetSource, Limits
from trinity.types import Experience

__all__ = ["TrainInput", "TrainInputError", "dataset_steps"]


class TrainInput:
    """Reads one train step's experiences; ``next_batch`` returns [] when the input ends.

    ``read_buffer(n)`` reads up to ``n`` experiences from the experience buffer (a Ray
    actor's ``get`` in a run, a local buffer in tests); unused by sft and dpo.
    """

    def __init__(
        self,
        config: Config,
        tokenizer: Any,
        read_buffer: Callable[[int], list[Experience]] | None = None,
    ) -> None:
        algo = config.algorithm
        self.train_batch_size = int(config.buffer.train_batch_size or 1)
        self.buffer_rows = rollouts_read(config, self.train_batch_size)
        self.strategy = build(SAMPLE_STRATEGY, algo.sample_strategy, algo.sample_strategy_args)
        limits = Limits(config.model.max_prompt_tokens, config.model.max_model_len)
        # the rollout engine's template variables: SFT rows render as its prompts do
        template_args = chat_template_args(config.explorer.rollout_model.enable_thinking)
        self.dataset: DatasetSource | None = None
        if trains_on_dataset(config):
            self.rows_per_step = rows_per_step(config)
            self.dataset = DatasetSource(
                dataset_storage(config),
                tokenizer,
                kind=dataset_kind(config.algorithm),
                batch_size=self.rows_per_step,
                total_epochs=config.buffer.total_epochs,
                total_steps=config.buffer.total_steps,
                seed=config.seed,
                limits=limits,
                template_args=template_args,
                processor=media_processor(
                    config.model, dataset_storage(config), dataset_kind(config.algorithm)
                ),
            )
        elif read_buffer is None:
            raise TrainInputError(
                f"algorithm_type {algo.algorithm_type} trains on rollouts: an experience buffer is needed"
            )
        self.read_buffer = read_buffer
        self.auxiliary: dict[str, DatasetSource] = {}
        for key, storage in config.buffer.trainer_input.auxiliary_buffers.items():
            if storage.storage_type not in ("file", "sql"):
                raise TrainInputError(
                    f"buffer.trainer_input.auxiliary_buffers.{key}.storage_type is "
                    f"{storage.storage_type}: auxiliary buffers are datasets (file or sql)"
                )
            self.auxiliary[key] = DatasetSource(
                storage,
                tokenizer,
                kind="sft",
                batch_size=1,
                # total_epochs passes, then it runs out (mix then trains on rollouts alone)
                total_epochs=storage.total_epochs or 1,
                endless=storage.total_epochs is None,
                seed=config.seed,
                limits=limits,
                template_args=template_args,
                processor=media_processor(config.model, storage, "sft"),
            )

    def next_batch(self, model_version: int) -> list[Experience]:
        """The experiences of the next train step, chosen by the sample strategy."""
        if self.dataset is not None:
            return self.dataset.get(self.rows_per_step)
        assert self.read_buffer is not None
        experiences = self.read_buffer(self.buffer_rows)
        if not experiences:
            return []
        return self.strategy.select(
            experiences,
            self.train_batch_size,
            model_version=model_version,
            auxiliary=self.auxiliary,
        )


def media_processor(model: ModelConfig, storage: Any, kind: str) -> Any:
    """The policy's processor when ``storage``'s rows carry images (``format.image_key``
    or ``video_key``) for SFT; None otherwise. Images on a DPO or CPT dataset, or on a
    text policy, are refused here."""
    fmt = storage.format
    if not (fmt.image_key or fmt.video_key):
        return None
    from trinity.rollout.model_path import resolve_model_path
    from trinity.rollout.multimodal import is_vision_language, load_processor

    where = f"dataset '{storage.name}'"
    if kind != "sft":
        raise TrainInputError(
            f"{where}: format.image_key / video_key are read by SFT datasets only, not {kind}"
        )
    path = resolve_model_path(model.model_path)
    if not is_vision_language(path):
        raise TrainInputError(
            f"{where}: format.image_key needs a vision-language model.model_path; "
            f"'{model.model_path}' is a text model"
        )
    return load_processor(path, model.custom_chat_template)
