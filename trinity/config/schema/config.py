"""The root of a config file and its ``stages`` list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trinity.config.schema.algorithm import AlgorithmConfig
from trinity.config.schema.buffer import BufferConfig
from trinity.config.schema.data_processor import DataProcessorConfig
from trinity.config.schema.explorer import ExplorerConfig
from trinity.config.schema.model import ModelConfig
from trinity.config.schema.runtime import (
    ClusterConfig,
    LogConfig,
    MonitorConfig,
    ServiceConfig,
    SynchronizerConfig,
)
from trinity.config.schema.trainer import TrainerConfig
from trinity.config.setting import setting

Mode = Literal["both", "train", "explore", "bench", "serve"]

# Sections a stage may override; each is a partial mapping merged onto the global section.
STAGE_SECTIONS = ("algorithm", "buffer", "explorer", "trainer")


@dataclass
class StageConfig:
    """One stage of a multi-stage run; what it leaves out is inherited from the global config."""

    stage_name: str = setting(
        "", "unique stage name; the stage runs as experiment <name>/<stage_name>"
    )
    mode: Mode | None = setting(None, "mode of this stage; unset: the global mode")
    algorithm: dict[str, Any] | None = setting(None, "keys of algorithm overridden in this stage")
    buffer: dict[str, Any] | None = setting(None, "keys of buffer overridden in this stage")
    explorer: dict[str, Any] | None = setting(None, "keys of explorer overridden in this stage")
    trainer: dict[str, Any] | None = setting(None, "keys of trainer overridden in this stage")


@dataclass
class Config:
    """A whole experiment, as written in one YAML file."""

    project: str = setting(
        "Trinity-RFT", "project name; groups experiments in checkpoint_root_dir and the monitor"
    )
    name: str = setting("rft", "experiment name")
    mode: Mode = setting(
        "both",
        "both (explore and train), train, explore, bench (evaluate checkpoints), or serve "
        "(the rollout model on the OpenAI API; rewarded calls go to the experience buffer); "
        "Trinity-RFT's colocate is read as both with cluster.colocate",
    )
    checkpoint_root_dir: str = setting(
        "./checkpoints", "root of <project>/<name>/ holding checkpoints, logs and buffers"
    )
    continue_from_checkpoint: bool = setting(
        True,
        "resume after the newest full checkpoint of <project>/<name> (weights, optimizer, "
        "taskset position); false starts <name>_<timestamp>",
    )
    ray_namespace: str | None = setting(
        None, "Ray namespace of the run's actors; unset: <project>/<name>"
    )
    seed: int = setting(
        42, "seed of sampling, shuffling and initialisation; in [-2**63, 2**64 - 1], as torch takes"
    )
    algorithm: AlgorithmConfig = setting(AlgorithmConfig, "algorithm and its parts")
    model: ModelConfig = setting(ModelConfig, "the trained model and token limits")
    cluster: ClusterConfig = setting(ClusterConfig, "nodes and GPUs")
    buffer: BufferConfig = setting(BufferConfig, "tasksets, experience buffer and batch sizes")
    explorer: ExplorerConfig = setting(ExplorerConfig, "rollout models and workflow runners")
    trainer: TrainerConfig = setting(TrainerConfig, "training loop and checkpoints")
    synchronizer: SynchronizerConfig = setting(SynchronizerConfig, "weight synchronization")
    monitor: MonitorConfig = setting(MonitorConfig, "metrics destination")
    service: ServiceConfig = setting(ServiceConfig, "external services")
    data_processor: DataProcessorConfig = setting(
        DataProcessorConfig, "task and experience pipelines"
    )
    log: LogConfig = setting(LogConfig, "per-actor log files")
    stages: list[StageConfig] = setting(
        [], "stages run in sequence, each overriding parts of this config"
    )
