"""The Workflow contract: run one task against the current policy, return experiences.

A workflow is built for one task with the rollout model (and any auxiliary models),
runs, and returns the experiences it produced, each with its reward set. Workflows are
registered by name and chosen per taskset by ``default_workflow_type``.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from trinity.types import Experience, Task

if TYPE_CHECKING:
    from trinity.rollout.wrapper import ModelWrapper


class Workflow(ABC):
    """Base class of every workflow; subclasses implement ``run_async``."""

    #: whether the workflow builds its prompt from the row's ``format.prompt_key`` (or
    #: ``messages_key``) column, which the taskset reader then checks in every row; a
    #: workflow that builds it from other columns (or an environment) sets False
    reads_prompt: ClassVar[bool] = True
    #: whether ``run_async`` returns exactly one experience per rollout (``repeat_times``
    #: per task); validation then knows how many experiences an explore step writes.
    #: False (unknown) for workflows that may write one per turn, or none
    one_experience_per_rollout: ClassVar[bool] = False

    def __init__(
        self,
        task: Task,
        model: ModelWrapper,
        auxiliary_models: list[ModelWrapper] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.task = task
        self.model = model
        self.auxiliary_models = auxiliary_models or []
        self.logger = logger or logging.getLogger(f"trinity.workflow.{type(self).__name__}")

    @abstractmethod
    async def run_async(self) -> list[Experience]:
        """Roll out the task ``task.repeat_times`` times and score every rollout."""

    def run(self) -> list[Experience]:
        """Synchronous adapter for callers without an event loop (runner threads, debug)."""
        return asyncio.run(self.run_async())
