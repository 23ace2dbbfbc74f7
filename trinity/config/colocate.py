"""Trinity-RFT's ``mode: colocate``: the explorer and the trainer on one GPU.

Here that is mode ``both`` with ``cluster.colocate`` true (the mode's spelling is turned
into it by ``trinity.config.upstream.spellings``), the one-GPU device plan
(``trinity.config.device_plan``: both actors on GPU 0, weights through CUDA IPC), and
the rollout engine's memory handed over at each step: it frees its KV cache once its
rollouts are done and takes it again before the next ones
(``TransformersEngine.release_memory`` / ``retake_memory``). A config that names no
``cluster.gpu_per_node`` gets 1; more than one GPU is refused at validation. On a
machine without a GPU the run is mode both on CPU, which the dry-run report and the
run's start say in one line.
"""

from __future__ import annotations

from trinity.config.errors import ConfigError


def check_colocated_gpus(node_num: int, gpu_per_node: int) -> None:
    """``ConfigError`` unless a colocated run asks for one GPU (or none: CPU)."""
    if node_num * gpu_per_node > 1:
        raise ConfigError(
            "cluster.gpu_per_node",
            f"mode colocate shares one GPU between the explorer and the trainer, and "
            f"cluster.node_num x gpu_per_node is {node_num * gpu_per_node}",
            value=gpu_per_node,
            valid="1 with cluster.node_num 1 (0 runs on CPU), or mode both for several GPUs",
        )


def colocate_line(on_gpu: bool) -> str:
    """The line the dry-run report and the run's start print for a colocated run."""
    if not on_gpu:
        return "mode colocate: no GPU, so the run is mode both on CPU"
    return (
        "mode colocate: the explorer and the trainer share GPU 0; the rollout engine frees "
        "its KV cache while the trainer steps and takes it again before its rollouts"
    )
