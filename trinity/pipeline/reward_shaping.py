"""``reward_shaping_mapper``: fold per-experience statistics into the reward.

Each entry of ``reward_shaping_configs`` applies, in order::

    reward = reward OP (weight * stat)        OP in ADD, SUB, MUL, DIV

where ``stat`` is ``exp.info[stats_key]``, or ``exp.metrics[stats_key]`` when info
lacks it (e.g. a quality score a Data-Juicer operator wrote into info, or a reward
component). Example: reward 1.0, ``{stats_key: quality, op_type: SUB, weight: 0.5}``
and quality 0.4 give ``1.0 - 0.5 * 0.4 = 0.8``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trinity.pipeline.operator import EXPERIENCE_OPERATORS, ExperienceOperator, OperatorError
from trinity.types import Experience

OPS: dict[str, Callable[[float, float], float]] = {
    "ADD": operator.add,
    "SUB": operator.sub,
    "MUL": operator.mul,
    "DIV": operator.truediv,
}


@dataclass(frozen=True)
class RewardShapingConfig:
    stats_key: str
    op_type: str = "ADD"
    weight: float = 1.0


def _shaping_config(raw: Any) -> RewardShapingConfig:
    if isinstance(raw, RewardShapingConfig):
        return raw
    if not isinstance(raw, Mapping) or "stats_key" not in raw:
        raise OperatorError(
            f"reward_shaping_mapper: each of reward_shaping_configs needs stats_key "
            f"(and op_type, weight); got {raw!r}"
        )
    unknown = set(raw) - {"stats_key", "op_type", "weight"}
    if unknown:
        raise OperatorError(
            f"reward_shaping_mapper: unknown fields {sorted(unknown)} in {dict(raw)}"
        )
    cfg = RewardShapingConfig(
        stats_key=str(raw["stats_key"]),
        op_type=str(raw.get("op_type", "ADD")).upper(),
        weight=float(raw.get("weight", 1.0)),
    )
    if cfg.op_type not in OPS:
        raise OperatorError(
            f"reward_shaping_mapper: unknown op_type '{cfg.op_type}' (valid: {', '.join(OPS)})"
        )
    return cfg


@EXPERIENCE_OPERATORS.register("reward_shaping_mapper")
class RewardShapingMapper(ExperienceOperator):
    def __init__(self, reward_shaping_configs: list[Mapping[str, Any]]) -> None:
        if not reward_shaping_configs:
            raise OperatorError(
                "reward_shaping_mapper needs at least one of reward_shaping_configs"
            )
        self.configs = [_shaping_config(raw) for raw in reward_shaping_configs]

    def process(self, exps: list[Experience]) -> tuple[list[Experience], dict[str, float]]:
        if not exps:
            return exps, {}
        before = [exp.reward for exp in exps]
        for exp in exps:
            if exp.reward is None:
                raise OperatorError(
                    f"reward_shaping_mapper: experience {exp.eid} has no reward to shape; "
                    "put invalid_reward_filter before it"
                )
            reward = float(exp.reward)
            for cfg in self.configs:
                term = cfg.weight * _stat(exp, cfg.stats_key)
                if cfg.op_type == "DIV" and term == 0:
                    raise OperatorError(
                        f"reward_shaping_mapper: DIV by weight * {cfg.stats_key} = 0 "
                        f"for experience {exp.eid}"
                    )
                reward = OPS[cfg.op_type](reward, term)
            exp.reward = reward
        deltas = [exp.reward - b for exp, b in zip(exps, before, strict=True)]
        return exps, {"reward_shaping/delta_mean": sum(deltas) / len(deltas)}


def _stat(exp: Experience, key: str) -> float:
    for source, values in (("info", exp.info), ("metrics", exp.metrics)):
        if key in values:
            try:
                return float(values[key])
            except (TypeError, ValueError):
                raise OperatorError(
                    f"reward_shaping_mapper: {source}['{key}'] of experience {exp.eid} is "
                    f"{values[key]!r}, not a number"
                ) from None
    raise OperatorError(
        f"reward_shaping_mapper: experience {exp.eid} has no stats_key '{key}' in info "
        f"(keys {sorted(exp.info)}) or metrics (keys {sorted(exp.metrics)})"
    )
