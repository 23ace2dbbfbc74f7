"""The algorithm's parts the trainer calls, built from ``algorithm`` and checked together.

    # policy loss, advantage fn, KL loss and penalty, entropy
    parts = build_parts(config.algorithm, trainer_settings(config.trainer).rollout_correction)

A part that needs a model or input the config does not provide (a KL loss without the
reference model, GAE without a critic, ...) fails here with the keys to change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trinity.algorithm import ADVANTAGE_FN, ENTROPY_LOSS_FN, KL_FN, POLICY_LOSS_FN
from trinity.algorithm.args import build
from trinity.config import AlgorithmConfig
from trinity.config.algorithm_defaults import NONE
from trinity.config.trainer_settings import RolloutCorrection

# policy losses whose gradient is zero where the advantages are (Trainer.rows_with_gradient)
LINEAR_IN_ADVANTAGE = ("ppo", "gspo")


class TrainerSetupError(ValueError):
    """The algorithm's parts need a model or input the config does not provide."""


@dataclass
class AlgorithmParts:
    policy_loss: Any
    advantage_fn: Any | None  # None: the loss needs no advantages (sft, dpo)
    kl_loss: Any
    kl_penalty: Any
    entropy_loss: Any
    entropy_has_grad: bool  # an entropy loss with a non-zero coefficient


def policy_loss_args(algo: AlgorithmConfig) -> dict[str, Any]:
    """``policy_loss_fn_args``, with ``algorithm.loss_agg_mode`` filled in when the loss
    aggregates tokens and its args leave the mode unset (the args win when they set it)."""
    args = dict(algo.policy_loss_fn_args)
    loss_cls = POLICY_LOSS_FN.get(algo.policy_loss_fn)
    names = (
        {f.name for f in dataclasses.fields(loss_cls.Args)}
        if dataclasses.is_dataclass(getattr(loss_cls, "Args", None))
        else set()
    )
    if "loss_agg_mode" in names and "loss_agg_mode" not in args:
        args["loss_agg_mode"] = algo.loss_agg_mode
    return args


def build_parts(algo: AlgorithmConfig, rollout_correction: RolloutCorrection) -> AlgorithmParts:
    """The registered parts ``algo`` names, checked against the models it uses and the
    trainer's ``rollout_correction``."""
    policy_loss = build(POLICY_LOSS_FN, algo.policy_loss_fn, policy_loss_args(algo))
    advantage_fn = None
    if algo.advantage_fn and algo.advantage_fn != NONE:
        advantage_fn = build(ADVANTAGE_FN, algo.advantage_fn, algo.advantage_fn_args)
    kl_loss = build(KL_FN, algo.kl_loss_fn, algo.kl_loss_fn_args)
    kl_penalty = build(KL_FN, algo.kl_penalty_fn, algo.kl_penalty_fn_args)
    entropy_loss = build(ENTROPY_LOSS_FN, algo.entropy_loss_fn, algo.entropy_loss_fn_args)
    parts = AlgorithmParts(
        policy_loss=policy_loss,
        advantage_fn=advantage_fn,
        kl_loss=kl_loss,
        kl_penalty=kl_penalty,
        entropy_loss=entropy_loss,
        entropy_has_grad=(
            algo.entropy_loss_fn != NONE
            and float(getattr(entropy_loss.args, "entropy_coef", 0.0)) != 0.0
        ),
    )
    check_parts(algo, rollout_correction, parts)
    return parts


def check_parts(
    algo: AlgorithmConfig, rollout_correction: RolloutCorrection, parts: AlgorithmParts
) -> None:
    needs_ref = [
        f"{key} '{name}'"
        for key, name in (
            ("kl_loss_fn", algo.kl_loss_fn),
            ("kl_penalty_fn", algo.kl_penalty_fn),
        )
        if name != NONE
    ]
    inputs = parts.policy_loss.inputs
    if "ref_logprobs" in inputs:
        needs_ref.append(f"policy_loss_fn '{algo.policy_loss_fn}'")
    if needs_ref and not algo.use_reference:
        raise TrainerSetupError(
            f"{', '.join(needs_ref)} need(s) the reference model but algorithm.use_reference "
            "is false; set it to true or turn those parts off ('none')"
        )
    if algo.advantage_fn == "ppo" and not algo.use_critic:
        raise TrainerSetupError(
            "advantage_fn 'ppo' (GAE) needs critic values but algorithm.use_critic is false"
        )
    if "advantages" in inputs and parts.advantage_fn is None:
        raise TrainerSetupError(
            f"policy_loss_fn '{algo.policy_loss_fn}' needs advantages: set algorithm.advantage_fn"
        )
    # rollout correction: bypass_mode false recomputes the old log-probs at each step
    rollout_is = rollout_correction.rollout_is
    if rollout_is is not None and "rollout_is_weights" not in inputs:
        raise TrainerSetupError(
            f"policy_loss_fn '{algo.policy_loss_fn}' does not take rollout correction "
            "weights (trainer_config.algorithm.rollout_correction.rollout_is); use 'ppo' "
            "or set rollout_is to null"
        )
