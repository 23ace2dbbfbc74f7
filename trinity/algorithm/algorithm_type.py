"""Algorithm types: the default parts behind each ``algorithm.algorithm_type``.

An algorithm is a composition of registered parts. The config fills every part the user
leaves out from the chosen type's defaults, and uses the flags to decide which models
the trainer runs (critic, reference) and whether the explorer rolls out at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from trinity.algorithm.registries import ALGORITHM_TYPE


@dataclass(frozen=True)
class AlgorithmType:
    """Defaults and requirements of one algorithm type."""

    name: str
    policy_loss_fn: str
    advantage_fn: str | None  # None: the loss needs no advantages (sft, dpo)
    kl_penalty_fn: str = "none"
    kl_loss_fn: str = "k2"
    entropy_loss_fn: str = "default"
    sample_strategy: str = "default"
    use_critic: bool = False  # train a value model (GAE)
    use_reference: bool = True  # run the frozen reference model (KL, DPO)
    use_rollout: bool = True  # False: train on a dataset, no explorer (sft, dpo)
    repeat_times: int | None = None  # a value the type forces (dpo: one chosen + one rejected)
    min_repeat_times: int = 1  # group-based advantages need >= 2 rollouts per task


for _type in (
    AlgorithmType("ppo", "ppo", "ppo", use_critic=True),
    AlgorithmType("grpo", "ppo", "grpo", min_repeat_times=2),
    AlgorithmType("opmd", "opmd", "opmd", min_repeat_times=2),
    AlgorithmType("rloo", "ppo", "rloo", min_repeat_times=2),
    AlgorithmType("reinforceplusplus", "ppo", "reinforceplusplus"),
    AlgorithmType("gspo", "gspo", "grpo", kl_loss_fn="none", min_repeat_times=2),
    AlgorithmType("mix", "mix", "grpo", min_repeat_times=2),
    AlgorithmType(
        "sft",
        "sft",
        None,
        kl_loss_fn="none",
        entropy_loss_fn="none",
        use_reference=False,
        use_rollout=False,
    ),
    AlgorithmType(
        "dpo",
        "dpo",
        None,
        kl_loss_fn="none",
        entropy_loss_fn="none",
        use_rollout=False,
        repeat_times=2,
    ),
):
    ALGORITHM_TYPE.register(_type.name)(_type)
