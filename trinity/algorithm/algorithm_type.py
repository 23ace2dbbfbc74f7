"""Algorithm types: the default parts behind each ``algorithm.algorithm_type``.

An algorithm is a composition of registered parts. The config fills every part the user
leaves out from the chosen type's defaults, and uses the flags to decide which models
the trainer runs (critic, reference) and whether the explorer rolls out at all. The
records are built from ``trinity.config.algorithm_defaults.ALGORITHM_DEFAULTS``, the one
table of algorithm types.
"""

from __future__ import annotations

from dataclasses import dataclass

from trinity.algorithm.registries import ALGORITHM_TYPE
from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS, NONE, AlgorithmDefaults


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

    @classmethod
    def from_defaults(cls, name: str, row: AlgorithmDefaults) -> AlgorithmType:
        """The record of ``row``, a line of the config's algorithm table."""
        return cls(
            name=name,
            policy_loss_fn=row.policy_loss_fn,
            advantage_fn=None if row.advantage_fn == NONE else row.advantage_fn,
            kl_penalty_fn=row.kl_penalty_fn,
            kl_loss_fn=row.kl_loss_fn,
            entropy_loss_fn=row.entropy_loss_fn,
            sample_strategy=row.sample_strategy,
            use_critic=row.use_critic,
            use_reference=row.needs_reference
            or row.kl_loss_fn != NONE
            or row.kl_penalty_fn != NONE,
            use_rollout=row.use_rollout,
            repeat_times=row.fixed_repeat_times,
            min_repeat_times=2 if row.needs_group else 1,
        )


for _name, _row in ALGORITHM_DEFAULTS.items():
    ALGORITHM_TYPE.register(_name)(AlgorithmType.from_defaults(_name, _row))
