"""``math_rm_workflow``: a reward model, served as an auxiliary model, scores each answer.

The policy answers the task's question (``repeat_times`` samples). The reward model, the
first of ``explorer.auxiliary_models``, is a causal LM used as a generative verifier
(Zhang et al., "Generative Verifiers: Reward Modeling as Next-Token Prediction",
arXiv:2408.15240): it reads the question, the reference answer (``response_key``, when
the row has one) and the answer, is asked whether the answer is correct, and its score
is the probability it gives "Yes" against "No" as its reply:

    score = p(Yes) / (p(Yes) + p(No)) = sigmoid(log p(Yes) - log p(No))

read from one forward pass over both continuations (nothing is sampled). The reward is
that score (component ``reward_model``, in [0, 1]).

``workflow_args``: ``rm_prompt`` (a template with ``{question}``, ``{reference}`` and
``{response}``), ``positive`` and ``negative`` (the two replies compared, default "Yes"
and "No"; each may be several tokens, its log-probability is their sum).
"""

from __future__ import annotations

import math

import torch

from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import build_messages, rollout_args, set_reward

RM_PROMPT = (
    "Question:\n{question}\n\n"
    "Reference answer:\n{reference}\n\n"
    "Proposed answer:\n{response}\n\n"
    "Is the proposed answer correct? Reply with Yes or No."
)


def yes_probability(logprob_yes: float, logprob_no: float) -> float:
    """p(Yes) / (p(Yes) + p(No)) from the two log-probabilities.

    >>> round(yes_probability(math.log(0.3), math.log(0.1)), 6)
    0.75
    """
    return 1.0 / (1.0 + math.exp(logprob_no - logprob_yes))


@WORKFLOWS.register("math_rm_workflow")
@WORKFLOWS.register("async_math_rm_workflow")  # Trinity-RFT's name; every workflow is async here
class MathRMWorkflow(Workflow):
    """Single-turn answers rewarded by a generative reward model (``auxiliary_models[0]``)."""

    async def run_async(self) -> list[Experience]:
        if not self.auxiliary_models:
            raise ValueError(
                "math_rm_workflow needs a reward model: add one to explorer.auxiliary_models "
                "(the first one scores the answers)"
            )
        rm = self.auxiliary_models[0]
        task = self.task
        args = task.workflow_args
        messages = build_messages(task.raw, task.format)
        answers = await self.model.achat(messages, n=task.repeat_times, **rollout_args(task))
        template = str(args.get("rm_prompt", RM_PROMPT))
        labels = [str(args.get("positive", "Yes")), str(args.get("negative", "No"))]
        label_ids = [rm.tokenizer(label, add_special_tokens=False)["input_ids"] for label in labels]
        reference = task.answer if task.answer is not None else "(none given)"
        # one sequence per (answer, label): the reward model's prompt, then the label
        sequences = []
        for exp in answers:
            prompt = template.format(
                question=messages[-1]["content"],
                reference=reference,
                response=exp.response_text or "",
            )
            prompt_ids = list(rm.engine.apply_chat_template([{"role": "user", "content": prompt}]))
            for ids in label_ids:
                sequences.append(
                    Experience(
                        tokens=torch.tensor(prompt_ids + ids, dtype=torch.long),
                        prompt_length=len(prompt_ids),
                    )
                )
        logprobs = await rm.aresponse_logprobs(sequences)
        for run, exp in enumerate(answers):
            yes, no = (float(v.sum()) for v in logprobs[2 * run : 2 * run + 2])
            set_reward(exp, {"reward_model": yes_probability(yes, no)}, "reward model")
            exp.eid.run = run
        return answers
