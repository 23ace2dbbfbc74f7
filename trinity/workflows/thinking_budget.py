"""``thinking_budget_workflow``: replies whose thinking is cut at a token budget.

The prompt is the row's ``messages`` column as it is. Each of ``repeat_times`` replies may
think for ``thinking_token_budget`` tokens: it is sampled up to that many tokens or up
to the ``reasoning_end_str`` (default ``</think>``), whichever comes first. A reply that
used the whole budget without closing its thinking gets the end string's tokens written
after it (``action_mask`` False and logprob 0: the policy did not choose them), and the
answer is then sampled after them; a reply that closed its thinking itself goes on
sampling unchanged. ``max_tokens`` (the taskset's, else the model's) bounds the whole
reply, end string included; a reply with no room left for an answer is not continued.
``info["thinking_tokens"]`` counts the tokens sampled before the answer (a closing end
string the policy wrote included), ``info["forced_reasoning_end"]`` says whether the end
string was written in.

The replies carry no reward unless the taskset names a reward function, which then
scores each reply against the row's ``response_key`` column (Trinity-RFT leaves them
unscored). ``workflow_args``: ``thinking_token_budget`` (required, >= 0),
``reasoning_end_str``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import torch

from trinity.rewards.registry import task_reward_fn
from trinity.rollout.chat import render_chat
from trinity.types import Experience
from trinity.workflows.args import args_error, read_args
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS
from trinity.workflows.single_turn import rollout_args, score

NAME = "thinking_budget_workflow"


@dataclass
class ThinkingBudgetArgs:
    thinking_token_budget: int  # tokens a reply may think for before its end is forced
    reasoning_end_str: str = "</think>"  # the text that closes the thinking

    def __post_init__(self) -> None:
        if self.thinking_token_budget < 0:
            raise args_error(
                NAME, "thinking_token_budget", self.thinking_token_budget, "it must be >= 0"
            )
        if not self.reasoning_end_str:
            raise args_error(NAME, "reasoning_end_str", "", "it must be a non-empty string")


@WORKFLOWS.register(NAME)
class ThinkingBudgetWorkflow(Workflow):
    """Chat replies with a per-reply budget of thinking tokens."""

    reads_prompt = False  # the row's ``messages`` column, whatever the format says

    async def run_async(self) -> list[Experience]:
        args = read_args(self.task, ThinkingBudgetArgs, NAME)
        messages = self.task.raw.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError(
                f"{NAME} reads the row's 'messages' column, a list of chat messages; got "
                f"{type(messages).__name__}"
            )
        tokenizer = self.model.tokenizer
        end_ids = tokenizer.encode(args.reasoning_end_str, add_special_tokens=False)
        if not end_ids:
            raise args_error(
                NAME, "reasoning_end_str", args.reasoning_end_str, "it encodes to no tokens"
            )
        sampling = rollout_args(self.task)
        limit = sampling.pop("max_tokens", None) or self.model.max_response_tokens
        budget = args.thinking_token_budget
        if limit is not None:
            budget = min(budget, limit)
        prompt = render_chat(tokenizer, messages, True, **self.model.template_args)
        n = self.task.repeat_times
        thoughts: list[Experience | None] = [None] * n  # a budget of 0: no thinking at all
        if budget > 0:
            stop = [args.reasoning_end_str]
            thoughts = await self.model.agenerate_ids(
                prompt, n=n, max_tokens=budget, stop=stop, **sampling
            )
        replies = await asyncio.gather(
            *(self._reply(prompt, t, end_ids, args, limit, sampling) for t in thoughts)
        )
        reward_fn = task_reward_fn(self.task, self.task.reward_fn) if self.task.reward_fn else None
        for run, exp in enumerate(replies):
            exp.eid.run = run
            exp.messages = [*messages, {"role": "assistant", "content": exp.response_text}]
            if reward_fn is not None:
                text = exp.response_text or ""
                score(exp, reward_fn, text, self.task.answer, self.task, self.logger)
        return replies

    async def _reply(
        self,
        prompt: list[int],
        thought: Experience | None,
        end_ids: list[int],
        args: ThinkingBudgetArgs,
        limit: int | None,
        sampling: dict,
    ) -> Experience:
        """``thought`` (the sampled thinking) continued to a whole reply."""
        tokenizer = self.model.tokenizer
        if thought is None:
            thought = Experience(
                tokens=torch.tensor(prompt, dtype=torch.long),
                prompt_length=len(prompt),
                logprobs=torch.zeros(0),
                prompt_text=tokenizer.decode(prompt),
                info={"model_version": self.model.model_version, "finish_reason": "length"},
            )
        sampled = thought.response_tokens.tolist()
        closed = args.reasoning_end_str in tokenizer.decode(sampled)
        forced = [] if closed else end_ids
        thought.info.update(thinking_tokens=len(sampled), forced_reasoning_end=False)
        ended = thought.info["finish_reason"] == "stop" and not closed  # eos inside the budget
        if ended or (limit is not None and len(sampled) + len(forced) >= limit):
            thought.response_text = tokenizer.decode(sampled, skip_special_tokens=True)
            return thought  # nothing more to sample
        context = thought.tokens.tolist() + forced
        room = {} if limit is None else {"max_tokens": limit - len(sampled) - len(forced)}
        [answer] = await self.model.agenerate_ids(context, n=1, **sampling, **room)
        reply = _join(thought, forced, answer, tokenizer)
        reply.info.update(forced_reasoning_end=bool(forced))
        return reply


def _join(thought: Experience, forced: list[int], answer: Experience, tokenizer) -> Experience:
    """One experience of the prompt, the sampled thinking, the ``forced`` tokens (masked
    out, logprob 0) and the ``answer`` sampled after them."""
    extra = torch.tensor(forced, dtype=torch.long)
    tokens = torch.cat([thought.tokens, extra, answer.response_tokens])
    response = tokens[thought.prompt_length :].tolist()
    return Experience(
        tokens=tokens,
        prompt_length=thought.prompt_length,
        logprobs=torch.cat([thought.logprobs, torch.zeros(len(forced)), answer.logprobs]),
        action_mask=torch.cat(
            [thought.action_mask, torch.zeros(len(forced), dtype=torch.bool), answer.action_mask]
        ),
        prompt_text=thought.prompt_text,
        response_text=tokenizer.decode(response, skip_special_tokens=True),
        temperature=answer.temperature,
        info={**thought.info, "finish_reason": answer.info["finish_reason"]},
    )
