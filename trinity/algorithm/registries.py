"""Registries of the algorithm's named parts; the config selects them by these names."""

from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS
from trinity.utils.registry import Registry

ADVANTAGE_FN: Registry = Registry("advantage_fn")
POLICY_LOSS_FN: Registry = Registry("policy_loss_fn")
KL_FN: Registry = Registry("kl_fn")  # used as both kl_penalty_fn and kl_loss_fn
ENTROPY_LOSS_FN: Registry = Registry("entropy_loss_fn")
SAMPLE_STRATEGY: Registry = Registry("sample_strategy")
ALGORITHM_TYPE: Registry = Registry("algorithm_type")  # default parts of each algorithm_type

for _name, _record in ALGORITHM_DEFAULTS.items():
    ALGORITHM_TYPE.register(_name)(_record)
