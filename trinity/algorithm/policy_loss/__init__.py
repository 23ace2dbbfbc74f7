"""Policy losses, one module per family; importing this package registers them."""

from trinity.algorithm.policy_loss import dpo, gspo, mix, opmd, ppo, sft
from trinity.algorithm.policy_loss.base import PolicyLoss

__all__ = ["PolicyLoss", "dpo", "gspo", "mix", "opmd", "ppo", "sft"]
