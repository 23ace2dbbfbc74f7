"""Where a process computes: the CPU, or the CUDA device Ray gave it.

A run computes on CUDA only when its config asks for GPUs (``cluster.gpu_per_node > 0``)
and the process can see one. Inside a Ray actor that is the case only when Ray granted it
a GPU: Ray sets ``CUDA_VISIBLE_DEVICES`` to the granted devices, so an actor started
without ``num_gpus`` sees none and computes on the CPU as a CPU run does. Everything else
(the fused CPU kernels, packed CPU linears, the CPU bf16 fallback) is decided from the
device of the tensors, never from this function, so the CPU paths stay as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from trinity.config.schema import ClusterConfig, Config


def compute_device(cluster: ClusterConfig) -> torch.device:
    """``cuda`` (this process's current device) when ``cluster.gpu_per_node > 0`` and
    CUDA is available here, else ``cpu``."""
    if cluster.gpu_per_node > 0 and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def is_cuda(device: torch.device | str | None) -> bool:
    """Whether ``device`` (a device, its name, or None for the CPU) is a CUDA device."""
    return device is not None and torch.device(device).type == "cuda"


def shares_one_gpu(config: Config) -> bool:
    """Whether the trainer and the explorer of a run share one GPU: mode both on one
    node with one GPU (``cluster.node_num == 1``, ``cluster.gpu_per_node == 1``), seen
    by this process. Their weights then pass by a device-to-device copy
    (``trinity.sync.cuda_slot``) instead of a broadcast, which NCCL cannot do between two
    processes on one device."""
    return (
        config.mode == "both"
        and config.cluster.node_num == 1
        and config.cluster.gpu_per_node == 1
        and torch.cuda.is_available()
    )
