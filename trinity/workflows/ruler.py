"""RULER: an LLM judge ranks a task's group of answers at once (relative scoring).

The policy answers the question ``repeat_times`` times; the judge reads the question and
all the answers in one prompt and ends its reply with a list of scores in [0, 1], one
per answer (``[0.2, 0.9, ...]``). Judging the group together lets the judge compare the
answers, which is all GRPO needs (its advantages are relative within the group).
RULER: OpenPipe ART, ``art.rewards.ruler``.

- ``math_ruler_workflow``: the judge is ``explorer.auxiliary_models[0]``; each answer's
  reward is its score (component ``ruler``).
- ``math_trainable_ruler_workflow``: the policy judges its own answers, and the judge's
  replies are trained too. With probability ``gold_probability`` (default 0.2) the
  reference answer is taken as known: the answers are rewarded by the reward function,
  the policy judges the group ``repeat_times`` times, and each judgement is an
  experience rewarded by how close its scores come to the scaled gold rewards
  (``judge`` = 1 - mean absolute error); these form an advantage group of their own
  (``eid.task`` = ``"<task index>-ruler"``). Otherwise the policy judges once, the
  answers are rewarded by its scores and the judgement is not trained on.

Both record ``gold_reward`` (the reward function's sum: ``math_format_reward`` unless
the taskset names another, so the default system prompt asks for ``<think>`` and
``<answer>``) and ``judge_success`` (the fraction of judge replies that held a list of
as many scores as answers; a task whose judge failed rewards every answer 0).

``workflow_args``: ``judge_temperature`` and ``judge_max_tokens`` (the judge model's
defaults when unset; math_ruler_workflow only), ``gold_probability``
(math_trainable_ruler_workflow).
"""

from __future__ import annotations

import ast
import random
import re

from trinity.rewards.registry import task_reward_fn
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import build_messages, rollout_args, score, set_reward

THINK_ANSWER_SYSTEM_PROMPT = (
    "You are a helpful assistant that solves the user's problem. First reason about it "
    "inside <think> </think> tags, then give the final answer inside <answer> </answer> "
    "tags, i.e. <think> reasoning </think> <answer> answer </answer>."
)
RULER_SYSTEM_PROMPT = (
    "You are an impartial judge. The user gives you a question and {n} candidate "
    "solutions. Compare them, judge how well each one solves the question, and give "
    "each a score between 0 and 1."
)
RULER_USER_PROMPT = (
    "Question:\n{question}\n\n"
    "A solution should reason inside <think> </think> and give its final answer inside "
    "<answer> </answer>.\n\n"
    "{solutions}\n\n"
    "Score each candidate between 0 and 1 for how well it solves the question. Keep "
    "any comparison brief, and end your reply with the list of scores in order: "
    "[score of candidate 1, ..., score of candidate {n}]"
)
# gold rewards of math_format_reward lie in [-0.1, 1.1]; the judge's scores in [0, 1]
GOLD_LOW, GOLD_HIGH = -0.1, 1.1
_LIST = re.compile(r"\[[^\[\]]*\]")


def parse_ruler_scores(text: str, n: int) -> list[float] | None:
    """The last ``[...]`` list of ``n`` numbers in ``text``, each clipped to [0, 1];
    None when there is none.

        >>> parse_ruler_scores("The second is right. [0.1, 0.9]", 2)
        [0.1, 0.9]
        >>> parse_ruler_scores("[0.5, 2, -1]", 3)
        [0.5, 1.0, 0.0]
        >>> parse_ruler_scores("[0.5]", 2) is None
        True
    """
    lists = _LIST.findall(text)
    if not lists:
        return None
    try:
        values = ast.literal_eval(lists[-1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(values, list) or len(values) != n:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return None
    return [min(max(float(v), 0.0), 1.0) for v in values]


def ruler_messages(question: str, answers: list[str]) -> list[dict[str, str]]:
    """The judge's chat messages for one group of answers."""
    n = len(answers)
    solutions = "\n\n".join(f"Candidate {i + 1}:\n{a}" for i, a in enumerate(answers))
    return [
        {"role": "system", "content": RULER_SYSTEM_PROMPT.format(n=n)},
        {
            "role": "user",
            "content": RULER_USER_PROMPT.format(question=question, solutions=solutions, n=n),
        },
    ]


def scaled_gold(reward: float) -> float:
    """A gold reward mapped from [-0.1, 1.1] onto the judge's [0, 1] (clipped)."""
    return min(max((reward - GOLD_LOW) / (GOLD_HIGH - GOLD_LOW), 0.0), 1.0)


class _RulerBase(Workflow):
    """The answers and their gold rewards, shared by both RULER workflows."""

    def _messages(self) -> list[dict]:
        task = self.task
        fmt = dict(task.format)
        if not task.reward_fn and not fmt.get("system_prompt"):
            fmt["system_prompt"] = THINK_ANSWER_SYSTEM_PROMPT
        return build_messages(task.raw, fmt)

    async def _answers(self, messages: list[dict]) -> list[Experience]:
        """Sample the answers; each records its gold reward components as metrics."""
        task = self.task
        answers = await self.model.achat(messages, n=task.repeat_times, **rollout_args(task))
        reward_fn = task_reward_fn(task, "math_format_reward")
        for run, exp in enumerate(answers):
            score(exp, reward_fn, exp.response_text or "", task.answer, task, self.logger)
            exp.metrics["gold_reward"] = float(exp.reward or 0.0)
            exp.eid.run = run
        return answers


@WORKFLOWS.register("math_ruler_workflow")
@WORKFLOWS.register("async_math_ruler_workflow")  # Trinity-RFT's name; every workflow is async here
class MathRulerWorkflow(_RulerBase):
    """Answers rewarded by an auxiliary judge that scores the whole group at once."""

    async def run_async(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise ValueError(
                "math_ruler_workflow needs a judge model: add one to explorer.auxiliary_models "
                "(the first one is the judge)"
            )
        judge = self.auxiliary_models[0]
        messages = self._messages()
        answers = await self._answers(messages)
        args = self.task.workflow_args
        judge_args = {
            key: cast(args[name])
            for key, name, cast in (
                ("temperature", "judge_temperature", float),
                ("max_tokens", "judge_max_tokens", int),
            )
            if args.get(name) is not None
        }
        prompt = ruler_messages(messages[-1]["content"], [a.response_text or "" for a in answers])
        [verdict] = await judge.achat(prompt, n=1, **judge_args)
        scores = parse_ruler_scores(verdict.response_text or "", len(answers))
        for i, exp in enumerate(answers):
            set_reward(exp, {"ruler": scores[i] if scores else 0.0}, "ruler judge")
            exp.metrics["judge_success"] = float(scores is not None)
            exp.info["judge_reply"] = verdict.response_text or ""
        return answers


@WORKFLOWS.register("math_trainable_ruler_workflow")
class MathTrainableRulerWorkflow(_RulerBase):
    """The policy judges its own group of answers; with the gold answer known, its
    judgements are trained to agree with the gold rewards."""

    async def run_async(self) -> list[Experience]:
        task = self.task
        gold_probability = float(task.workflow_args.get("gold_probability", 0.2))
        messages = self._messages()
        answers = await self._answers(messages)
        gold_known = random.random() < gold_probability
        prompt = ruler_messages(messages[-1]["content"], [a.response_text or "" for a in answers])
        n_judges = task.repeat_times if gold_known else 1
        judgements = await self.model.achat(prompt, n=n_judges, **rollout_args(task))
        parsed = [parse_ruler_scores(j.response_text or "", len(answers)) for j in judgements]
        valid = [p for p in parsed if p is not None]
        success = len(valid) / len(judgements)
        for exp in answers:
            exp.metrics["judge_success"] = success
        if not gold_known:
            for i, exp in enumerate(answers):
                mean = sum(p[i] for p in valid) / len(valid) if valid else 0.0
                set_reward(exp, {"ruler": mean}, "ruler judge")
            return answers
        # the answers keep their gold reward; each judgement is scored against it
        gold = [scaled_gold(float(a.reward or 0.0)) for a in answers]
        for run, (judgement, scores) in enumerate(zip(judgements, parsed, strict=True)):
            agreement = 0.0
            if scores is not None:
                agreement = 1.0 - sum(abs(s - g) for s, g in zip(scores, gold, strict=True)) / len(
                    gold
                )
            set_reward(judgement, {"judge": agreement}, "ruler judgement")
            judgement.metrics["judge_success"] = success
            judgement.eid.task = f"{task.index}-ruler"
            judgement.eid.run = run
        return answers + judgements
