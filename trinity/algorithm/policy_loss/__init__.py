"""Policy losses, one module per family; importing this package registers them."""

from trinity.algorithm.policy_loss import (
    chord,
    cispo,
    dpo,
    gspo,
    importance_sampling,
    m2po,
    mix,
    opmd,
    ppo,
    rec,
    sapo,
    sft,
    sppo,
    topr,
)
from trinity.algorithm.policy_loss.base import PolicyLoss

__all__ = [
    "PolicyLoss",
    "chord",
    "cispo",
    "dpo",
    "gspo",
    "importance_sampling",
    "m2po",
    "mix",
    "opmd",
    "ppo",
    "rec",
    "sapo",
    "sft",
    "sppo",
    "topr",
]
