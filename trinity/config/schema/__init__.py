"""Typed schema of a config file: nested dataclasses mirroring the YAML sections.

Each field has a type, a default (here and nowhere else) and a help string in
``dataclasses.field(metadata={"help": ...})``. ``None`` means "unset: derived by resolve".
"""

from trinity.config.schema.algorithm import AlgorithmConfig, OptimizerConfig
from trinity.config.schema.buffer import (
    BufferConfig,
    ExperienceBufferConfig,
    ExplorerInputConfig,
    FormatConfig,
    RolloutArgs,
    StorageConfig,
    TasksetConfig,
    TrainerInputConfig,
)
from trinity.config.schema.config import STAGE_SECTIONS, Config, StageConfig
from trinity.config.schema.data_processor import (
    DataProcessorConfig,
    ExperiencePipelineConfig,
    OperatorConfig,
    TaskPipelineConfig,
)
from trinity.config.schema.explorer import ExplorerConfig, InferenceModelConfig
from trinity.config.schema.model import LoRAConfig, ModelConfig
from trinity.config.schema.runtime import (
    LOG_LEVELS,
    ClusterConfig,
    DataJuicerServiceConfig,
    LogConfig,
    MonitorConfig,
    ServiceConfig,
    SynchronizerConfig,
)
from trinity.config.schema.trainer import TrainerConfig
from trinity.config.upstream.verl_layout import (
    ActorConfig,
    ActorModelConfig,
    ActorRolloutRefConfig,
    CheckpointContentsConfig,
    CriticConfig,
    CriticModelConfig,
    FsdpConfig,
    FusedKernelOptions,
    RefConfig,
    RolloutLogProbConfig,
    VerlLoopConfig,
    VerlTrainerConfig,
    WrapPolicyConfig,
)

__all__ = [
    "LOG_LEVELS",
    "STAGE_SECTIONS",
    "ActorConfig",
    "ActorModelConfig",
    "ActorRolloutRefConfig",
    "AlgorithmConfig",
    "BufferConfig",
    "CheckpointContentsConfig",
    "ClusterConfig",
    "Config",
    "CriticConfig",
    "CriticModelConfig",
    "DataJuicerServiceConfig",
    "DataProcessorConfig",
    "ExperienceBufferConfig",
    "ExperiencePipelineConfig",
    "ExplorerConfig",
    "ExplorerInputConfig",
    "FormatConfig",
    "FsdpConfig",
    "FusedKernelOptions",
    "InferenceModelConfig",
    "LoRAConfig",
    "LogConfig",
    "ModelConfig",
    "MonitorConfig",
    "OperatorConfig",
    "OptimizerConfig",
    "RefConfig",
    "RolloutArgs",
    "RolloutLogProbConfig",
    "ServiceConfig",
    "StageConfig",
    "StorageConfig",
    "SynchronizerConfig",
    "TaskPipelineConfig",
    "TasksetConfig",
    "TrainerConfig",
    "TrainerInputConfig",
    "VerlLoopConfig",
    "VerlTrainerConfig",
    "WrapPolicyConfig",
]
