"""``rubric_judge_workflow``: an LLM judge rates each answer against the task's rubrics.

Rubrics as Rewards (Gunjal et al., arXiv:2507.17746, the implicit aggregation): the
judge, the first of ``explorer.auxiliary_models``, reads the question, one answer and
the row's ``rubric`` column (a list of ``{"description", "weight"}``) and starts its reply
with a JSON block ```` ```json {"rating": <1..10>} ``` ````. The reward (component
``rubric``) is ``(rating - 1) / 9``; a reply without a rating in [1, 10] gets 0. Every
answer records ``judge_success``, the fraction of the task's answers whose rating was
read. The judge samples at temperature 0 (``workflow_args.judge_temperature``) with the
judge model's ``max_response_tokens`` unless ``judge_max_tokens`` is set.

``rubric_judge_openai_workflow`` asks an OpenAI-compatible endpoint instead: the model
``workflow_args.judge_model_name`` at the base URL held by the environment variable named
by ``judge_api_base_url_env`` (default ``OPENAI_BASE_URL``), with the API key of the one
named by ``judge_api_key_env`` (default ``OPENAI_API_KEY``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from trinity.types import Experience
from trinity.workflows.args import read_args
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import build_messages, rollout_args, set_reward

RUBRIC_SYSTEM_PROMPT = (
    "You are an expert evaluator. Given a prompt, a response and a list of quality "
    "rubrics, rate the overall quality of the response from 1 to 10 by how well it "
    "satisfies the rubrics, taken together: violating several rubrics means a low "
    "rating, satisfying all of them a high one.\n"
    "Start your reply with a JSON object in a ```json code block holding one key, "
    '"rating", an integer from 1 to 10. Example:\n```json\n{"rating": 7}\n```'
)
RUBRIC_USER_PROMPT = (
    "Rate the response below from 1 to 10 by how well it satisfies the rubrics.\n"
    "<prompt>\n{question}\n</prompt>\n<response>\n{response}\n</response>\n"
    "<rubrics>\n{rubrics}\n</rubrics>\nYour JSON evaluation:"
)
_BLOCK = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_rubric_rating(text: str) -> float | None:
    """The rating of the reply's first fenced JSON block scaled from [1, 10] to [0, 1],
    or None when there is no block, no JSON or no rating in [1, 10].

        >>> parse_rubric_rating('```json\\n{"rating": 7}\\n```')
        0.6666666666666666
        >>> parse_rubric_rating('{"rating": 7}') is None
        True
    """
    match = _BLOCK.search(text)
    if match is None:
        return None
    try:
        parsed = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    rating = parsed.get("rating") if isinstance(parsed, dict) else None
    if isinstance(rating, bool) or not isinstance(rating, int | float) or not 1 <= rating <= 10:
        return None
    return (float(rating) - 1.0) / 9.0


def format_rubrics(rubric: Any) -> str:
    """The rubric list as numbered lines with their weights."""
    if not rubric:
        return "No rubrics are given."
    if not isinstance(rubric, list) or not all(isinstance(r, dict) for r in rubric):
        raise ValueError(
            f"task column 'rubric' must be a list of {{'description', 'weight'}}, got {rubric!r}"
        )
    return "\n".join(
        f"Rubric {i} (weight: {r.get('weight', 1)}): {r.get('description', '')}"
        for i, r in enumerate(rubric)
    )


@dataclass
class RubricJudgeArgs:
    judge_temperature: float = 0.0  # the judge's sampling temperature
    judge_max_tokens: int | None = None  # most tokens of a verdict; unset: the judge's default


@dataclass(kw_only=True)
class RubricJudgeOpenAIArgs(RubricJudgeArgs):
    judge_model_name: str  # the model the endpoint serves as the judge
    judge_api_base_url_env: str = "OPENAI_BASE_URL"  # variable holding the endpoint's URL
    judge_api_key_env: str = "OPENAI_API_KEY"  # variable holding its API key


@WORKFLOWS.register("rubric_judge_workflow")
class RubricJudgeWorkflow(Workflow):
    """Single-turn answers rated against the row's rubrics by ``auxiliary_models[0]``."""

    args_spec: ClassVar[type[RubricJudgeArgs]] = RubricJudgeArgs

    async def run_async(self) -> list[Experience]:
        task = self.task
        args = read_args(task, self.args_spec, task.workflow)
        judge = self.judge(args)
        messages = build_messages(task.raw, task.format)
        answers = await self.model.achat(messages, n=task.repeat_times, **rollout_args(task))
        rubrics = format_rubrics(task.raw.get("rubric"))
        prompts = [
            [
                {"role": "system", "content": RUBRIC_SYSTEM_PROMPT},
                {
                    "role": "user",
                    "content": RUBRIC_USER_PROMPT.format(
                        question=messages[-1]["content"],
                        response=exp.response_text or "",
                        rubrics=rubrics,
                    ),
                },
            ]
            for exp in answers
        ]
        verdicts = await asyncio.gather(*(judge(p) for p in prompts))
        ratings = [parse_rubric_rating(v) for v in verdicts]
        success = sum(r is not None for r in ratings) / len(ratings) if ratings else 0.0
        for run, (exp, rating, verdict) in enumerate(zip(answers, ratings, verdicts, strict=True)):
            set_reward(exp, {"rubric": rating if rating is not None else 0.0}, "rubric judge")
            exp.metrics["judge_success"] = success
            exp.info["judge_reply"] = verdict
            exp.eid.run = run
        return answers

    def judge(self, args: RubricJudgeArgs) -> Callable[[list[dict]], Awaitable[str]]:
        """The call that sends the judge one prompt and returns its reply."""
        if not self.auxiliary_models:
            raise ValueError(
                f"{self.task.workflow} needs a judge model: add one to "
                "explorer.auxiliary_models (the first one is the judge)"
            )
        model = self.auxiliary_models[0]
        judge_args: dict[str, Any] = {"temperature": args.judge_temperature}
        if args.judge_max_tokens is not None:
            judge_args["max_tokens"] = args.judge_max_tokens

        async def ask(messages: list[dict]) -> str:
            [verdict] = await model.achat(messages, n=1, **judge_args)
            return verdict.response_text or ""

        return ask


@WORKFLOWS.register("rubric_judge_openai_workflow")
class RubricJudgeOpenAIWorkflow(RubricJudgeWorkflow):
    """``rubric_judge_workflow`` with the judge behind an OpenAI-compatible endpoint."""

    args_spec = RubricJudgeOpenAIArgs

    def judge(self, args: RubricJudgeArgs) -> Callable[[list[dict]], Awaitable[str]]:
        import openai

        assert isinstance(args, RubricJudgeOpenAIArgs)
        base_url = os.environ.get(args.judge_api_base_url_env, "")
        if not base_url:
            raise ValueError(
                f"{self.task.workflow}: environment variable {args.judge_api_base_url_env} "
                "(workflow_args.judge_api_base_url_env) must hold the judge's base URL, "
                "e.g. http://127.0.0.1:8000/v1"
            )
        api_key = os.environ.get(args.judge_api_key_env, "")
        extra = {} if args.judge_max_tokens is None else {"max_tokens": args.judge_max_tokens}

        async def ask(messages: list[dict]) -> str:
            async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key) as client:
                completion = await client.chat.completions.create(
                    model=args.judge_model_name,
                    messages=messages,
                    temperature=args.judge_temperature,
                    **extra,
                )
            return completion.choices[0].message.content or ""

        return ask
