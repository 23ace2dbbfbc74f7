"""DAPO's experience operators (Yu et al., arXiv:2503.14476), by Trinity-RFT's names.

``dapo_dynamic_sampling`` (section 3.2) keeps a group (same ``eid.group``: one task's
rollouts in one explore step) only when some but not all of its rollouts are correct,
``0 < |{correct}| < G``. A rollout is correct when its score is above
``correct_threshold`` (default 0). The score is the reward component ``metric_key``
(default ``accuracy``, found as ``algorithm.dynamic_sampling`` finds it), or the reward
when the experience has no such component (a rollout whose reward function raised).
So it drops every group whose correct / wrong verdicts all tie; a group of one always
ties. With ``math_dapo_reward``'s accuracy of +1 / -1 (or ``math_reward``'s 1 / 0) and
the default threshold, that is the test of ``algorithm.dynamic_sampling`` with
``metric_key: accuracy``: drop the groups whose accuracy ties. Unlike it, the operator
rolls out nothing more, so the step is left with fewer groups. Example, threshold 0:
group a (accuracy 1, -1) is kept; b (-1, -1) and c (1, 1) are dropped (4 experiences,
2 all wrong and 2 all correct).

``mask_response_truncated`` (section 3.4, overlong filtering) zeroes the
``action_mask`` of every experience whose response was cut off, so it adds nothing to
the loss. It stays in the batch, and its reward still counts in its group's
advantages. Cut off means ``info["finish_reason"] == "length"`` (the reply stopped at
its token limit: ``max_response_tokens``, the taskset's ``max_tokens`` or
``max_model_len``) or ``info["truncated"]`` (a multi-turn conversation cut at
``max_model_len``).
"""

from __future__ import annotations

import math
from numbers import Real

from trinity.pipeline.groups import group_score, groups_of, ties
from trinity.pipeline.operator import EXPERIENCE_OPERATORS, ExperienceOperator, OperatorError
from trinity.types import Experience


@EXPERIENCE_OPERATORS.register("dapo_dynamic_sampling")
class DapoDynamicSampling(ExperienceOperator):
    def __init__(self, metric_key: str = "accuracy", correct_threshold: float = 0.0) -> None:
        if not isinstance(metric_key, str) or not metric_key:
            raise OperatorError(
                f"dapo_dynamic_sampling: metric_key must be the name of a reward component "
                f"(e.g. accuracy), got {metric_key!r}"
            )
        if (
            isinstance(correct_threshold, bool)
            or not isinstance(correct_threshold, Real)
            or not math.isfinite(correct_threshold)
        ):
            raise OperatorError(
                f"dapo_dynamic_sampling: correct_threshold must be a finite number, "
                f"got {correct_threshold!r}"
            )
        self.metric_key = metric_key
        self.correct_threshold = float(correct_threshold)

    def is_correct(self, exp: Experience) -> bool:
        try:
            score = group_score(exp, self.metric_key)
        except KeyError:
            score = exp.reward  # no such component: Trinity-RFT falls back to the reward
        if score is None:
            raise OperatorError(
                f"dapo_dynamic_sampling: experience {exp.eid} has no metric "
                f"'{self.metric_key}' and no reward; put invalid_reward_filter before it"
            )
        return score > self.correct_threshold

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        kept: list[Experience] = []
        all_correct = all_wrong = groups = 0
        for members in groups_of(exps).values():
            verdicts = [self.is_correct(m) for m in members]
            if not ties(verdicts):
                kept.extend(members)
                continue
            groups += 1
            if verdicts[0]:
                all_correct += len(members)
            else:
                all_wrong += len(members)
        return kept, {
            "dapo_dynamic_sampling/dropped_groups": float(groups),
            "dapo_dynamic_sampling/dropped": float(len(exps) - len(kept)),
            "dapo_dynamic_sampling/dropped_all_correct": float(all_correct),
            "dapo_dynamic_sampling/dropped_all_wrong": float(all_wrong),
        }


def response_truncated(exp: Experience) -> bool:
    """True when the response was cut off at its token limit (module docstring)."""
    return exp.info.get("finish_reason") == "length" or bool(exp.info.get("truncated"))


@EXPERIENCE_OPERATORS.register("mask_response_truncated")
class MaskResponseTruncated(ExperienceOperator):
    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        masked = 0
        for exp in exps:
            if response_truncated(exp) and exp.action_mask is not None:
                exp.action_mask = exp.action_mask.new_zeros(exp.action_mask.shape)
                masked += 1
        return exps, {"mask_response_truncated/masked": float(masked)}
