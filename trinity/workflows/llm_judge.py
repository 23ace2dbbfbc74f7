"""``llm_judge_workflow``: a second model grades the policy's answers.

The policy answers the task's question (``repeat_times`` samples); the judge, the
first of ``explorer.auxiliary_models``, reads the question, the reference answer (the
``response_key`` column, when the row has one) and each answer, and replies with a
score. The reward is that score scaled to [0, 1] (component ``judge``); a reply
without a readable score gets 0 and the metric ``judge_parse_failed`` = 1.

``workflow_args``: ``max_score`` (default 10), ``judge_temperature`` (default 0),
``judge_max_tokens`` (default 128), ``judge_prompt`` (a template with ``{question}``,
``{reference}``, ``{response}`` and ``{max_score}``).
"""

from __future__ import annotations

import asyncio
import re

from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import build_messages, rollout_args, set_reward

JUDGE_PROMPT = (
    "Grade the answer to the question below.\n\n"
    "Question:\n{question}\n\n"
    "Reference answer:\n{reference}\n\n"
    "Answer to grade:\n{response}\n\n"
    "Rate the answer from 0 (wrong or useless) to {max_score} (correct and complete). "
    "End your reply with a line of the form 'Score: <number>'."
)

_NUMBER = r"([-+]?\d+(?:\.\d+)?)"
_LABELLED = re.compile(
    r"(?:score|rating|grade)\s*(?:is|of|=|:)?\s*\**\s*" + _NUMBER + r"(?:\s*/\s*" + _NUMBER + ")?",
    re.I,
)
_FRACTION = re.compile(_NUMBER + r"\s*(?:/|out of)\s*" + _NUMBER, re.I)
_BARE = re.compile(_NUMBER)


def parse_judge_score(text: str, max_score: float = 10.0) -> float | None:
    """The judge's score scaled to [0, 1], or None when the reply states none.

    Looks, in order, for the last "Score: x" (or "rating"/"grade", optionally "x/y"),
    the last "x/y" or "x out of y", then the last bare number within [0, max_score].
    A stated denominator replaces ``max_score``; the result is clipped to [0, 1].

        >>> parse_judge_score("Clear and right. Score: 8")
        0.8
        >>> parse_judge_score("I'd give it 3 out of 4.")
        0.75
        >>> parse_judge_score("no idea") is None
        True
    """
    value = scale = None
    labelled = _LABELLED.findall(text)
    if labelled:
        value, scale = labelled[-1]
    else:
        fractions = _FRACTION.findall(text)
        if fractions:
            value, scale = fractions[-1]
        else:
            bare = [n for n in _BARE.findall(text) if 0 <= float(n) <= max_score]
            value = bare[-1] if bare else None
    if value is None:
        return None
    denominator = float(scale) if scale else float(max_score)
    if denominator <= 0:
        return None
    return min(max(float(value) / denominator, 0.0), 1.0)


@WORKFLOWS.register("llm_judge_workflow")
class LLMJudgeWorkflow(Workflow):
    """Single-turn answers rewarded by an LLM judge (``auxiliary_models[0]``)."""

    async def run_async(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise ValueError(
                "llm_judge_workflow needs a judge model: add one to explorer.auxiliary_models "
                "(the first one is the judge)"
            )
        judge = self.auxiliary_models[0]
        task = self.task
        args = task.workflow_args
        max_score = float(args.get("max_score", 10))
        messages = build_messages(task.raw, task.format)
        experiences = await self.model.achat(messages, n=task.repeat_times, **rollout_args(task))
        reference = task.answer if task.answer is not None else "(none given)"
        template = str(args.get("judge_prompt", JUDGE_PROMPT))
        judge_args = {
            "temperature": float(args.get("judge_temperature", 0.0)),
            "max_tokens": int(args.get("judge_max_tokens", 128)),
        }
        prompts = [
            template.format(
                question=messages[-1]["content"],
                reference=reference,
                response=exp.response_text or "",
                max_score=f"{max_score:g}",
            )
            for exp in experiences
        ]
        verdicts = await asyncio.gather(
            *(judge.achat([{"role": "user", "content": p}], n=1, **judge_args) for p in prompts)
        )
        for run, (exp, [verdict]) in enumerate(zip(experiences, verdicts, strict=True)):
            text = verdict.response_text or ""
            score = parse_judge_score(text, max_score)
            set_reward(exp, {"judge": score if score is not None else 0.0}, "llm judge")
            exp.metrics["judge_parse_failed"] = float(score is None)
            exp.info["judge_reply"] = text
            exp.eid.run = run
        return experiences
