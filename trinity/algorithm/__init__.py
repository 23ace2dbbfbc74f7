"""The algorithm maths: advantages, policy losses, KL, entropy, loss aggregation.

Every part is a pure tensor function registered by the name the config uses
(``advantage_fn: grpo``, ``kl_loss_fn: low_var_kl``, ...) with a typed ``Args``
dataclass. Build one from the config with ``build(POLICY_LOSS_FN, name, args_dict)``.
Importing this package fills the registries.
"""

from trinity.algorithm import advantage, entropy, kl, policy_loss, sample_strategy
from trinity.algorithm.advantage import AdvantageFn, AdvantageInputs, MissingInputError
from trinity.algorithm.args import InvalidArgsError, build, build_args
from trinity.algorithm.entropy import EntropyLoss
from trinity.algorithm.kl import KLFn
from trinity.algorithm.loss_agg import (
    LOSS_AGG_MODES,
    LossNormalizer,
    UnknownLossAggModeError,
    aggregate_loss,
)
from trinity.algorithm.policy_loss import PolicyLoss
from trinity.algorithm.registries import (
    ADVANTAGE_FN,
    ALGORITHM_TYPE,
    ENTROPY_LOSS_FN,
    KL_FN,
    POLICY_LOSS_FN,
    SAMPLE_STRATEGY,
)
from trinity.algorithm.utils import (
    entropy_from_logits,
    logprobs_from_logits,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from trinity.config.algorithm_defaults import AlgorithmType

__all__ = [
    "ADVANTAGE_FN",
    "ALGORITHM_TYPE",
    "ENTROPY_LOSS_FN",
    "KL_FN",
    "LOSS_AGG_MODES",
    "POLICY_LOSS_FN",
    "SAMPLE_STRATEGY",
    "AdvantageFn",
    "AdvantageInputs",
    "AlgorithmType",
    "EntropyLoss",
    "InvalidArgsError",
    "KLFn",
    "LossNormalizer",
    "MissingInputError",
    "PolicyLoss",
    "UnknownLossAggModeError",
    "advantage",
    "aggregate_loss",
    "build",
    "build_args",
    "entropy",
    "entropy_from_logits",
    "kl",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "policy_loss",
    "sample_strategy",
]
