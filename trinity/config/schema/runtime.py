"""Sections about where and how the run executes: cluster, synchronizer, monitor, log, service."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trinity.config.setting import setting

SyncMethod = Literal["nccl", "checkpoint", "memory"]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass
class ClusterConfig:
    """The machines of the run."""

    node_num: int = setting(1, "number of nodes")
    gpu_per_node: int = setting(0, "GPUs used on each node; 0 runs everything on CPU")
    ray_address: str = setting(
        "auto", "Ray cluster to join; auto or empty: join a running one, else start a local one"
    )
    colocate: bool = setting(
        False,
        "explorer and trainer share one GPU, the rollout engine freeing its KV cache while "
        "the trainer steps (mode: colocate sets it and runs as mode both)",
    )


@dataclass
class SynchronizerConfig:
    """How new weights travel from the trainer to the rollout models."""

    sync_method: SyncMethod | None = setting(
        None,
        "nccl (torch.distributed broadcast from the trainer to every rollout engine; gloo "
        "without CUDA), memory (one shared-memory file when the run is on one node, else "
        "Ray's object store) or checkpoint (files); unset: nccl in mode both, else checkpoint; "
        "Trinity-RFT's hccl (Ascend NPUs) is not here and fails validation",
    )
    sync_interval: int = setting(1, "train steps between weight synchronizations")
    sync_offset: int = setting(0, "explore steps the explorer may run ahead before training starts")
    sync_timeout: float = setting(3600, "seconds to wait for a synchronization")
    sync_style: Literal[
        "fixed",
        "trainer_driven",
        "explorer_driven",
        "fully_async",
        "dynamic",
        "dynamic_by_trainer",
        "dynamic_by_explorer",
    ] = setting(
        "fixed",
        "fixed: explore step s waits for version ((s-1-sync_offset)//sync_interval)*sync_interval; "
        "trainer_driven (or dynamic): the trainer publishes every sync_interval steps and each "
        "explore step takes the newest version without waiting; explorer_driven: every "
        "sync_interval explore steps the explorer asks for the trainer's current weights and "
        "waits for them (at most sync_timeout); fully_async: the explorer never waits, keeps "
        "explorer.max_inflight_batches batches rolling out and takes each published version "
        "between model calls; dynamic_by_trainer / dynamic_by_explorer: Trinity-RFT's older "
        "names of trainer_driven / explorer_driven",
    )


@dataclass
class MonitorConfig:
    """Where metrics go."""

    monitor_type: str = setting(
        "tensorboard",
        "tensorboard, wandb, mlflow, swanlab, console, a name a plugin registers, or several "
        "comma-separated (tensorboard,console)",
    )
    monitor_args: dict[str, Any] = setting(
        {},
        "arguments of the monitor (wandb: base_url, api_key; mlflow: uri, username, password; "
        "swanlab: mode, logdir, api_key, workspace, experiment_name, description, tags, id, "
        "resume)",
    )
    enable_ray_timeline: bool = setting(
        False, "write a Chrome-trace timeline.json of Ray tasks to the monitor directory"
    )


@dataclass
class LogConfig:
    """Per-actor log files."""

    level: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR (any case)")
    group_by_node: bool = setting(False, "put each actor's log under log/<node_ip>/")


@dataclass
class DataJuicerServiceConfig:
    """The Data-Juicer service the data pipelines' data_juicer operators send rows to."""

    server_url: str = setting(
        "",
        "URL of a running service (python -m trinity.service.data_juicer.server); "
        "not used with auto_start",
    )
    auto_start: bool = setting(
        False,
        "start the service on 127.0.0.1:port for each pipeline that uses it and stop it "
        "with the pipeline; needs the data_juicer extra",
    )
    port: int = setting(5005, "port of the auto-started service; 0: any free port")
    token: str = setting(
        "",
        "bearer token of the service at server_url (the TRINITY_DATA_JUICER_TOKEN it was "
        "started with); empty: that variable where the pipeline runs; auto_start makes its own",
    )
    allow_code_operators: bool = setting(
        False,
        "let the auto-started service run any Data-Juicer operator, also those outside its "
        "data-only allowlist that run code from the recipe (python_lambda_mapper, "
        "python_file_mapper), load models or touch files; a server_url service's own "
        "--allow-code-operators decides for it",
    )


@dataclass
class ServiceConfig:
    """External services."""

    data_juicer: DataJuicerServiceConfig | None = setting(
        None, "Data-Juicer service; unset: the data_juicer operator runs Data-Juicer in-process"
    )
