"""Helpers of the workflow tests: build pools and tasks, run a task and show its log.

``run_task`` runs one task through the pool and fails with the runners' logs (which
hold the workflow's traceback) when the task did not complete.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trinity.explorer.runner import RunnerPool
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import Experience, Task


def make_pool(model: ModelWrapper, log_dir: Path, auxiliary_models=None) -> RunnerPool:
    return RunnerPool(
        [model],
        num_runners=2,
        max_timeout=120,
        max_retry_times=0,
        auxiliary_models=auxiliary_models,
        log_dir=log_dir,
    )


def run_task(pool: RunnerPool, task: Task, log_dir: Path) -> list[Experience]:
    result = pool.run_tasks([task], batch_id=0)
    if result.failed or result.timed_out:
        logs = "\n".join(p.read_text() for p in sorted(log_dir.glob("*.log")))
        pytest.fail(f"task failed={result.failed} timed_out={result.timed_out}:\n{logs[-4000:]}")
    return result.experiences


def make_task(workflow: str, raw: dict, **kwargs) -> Task:
    kwargs.setdefault("rollout_args", {"temperature": 1.0, "max_tokens": 8})
    kwargs.setdefault("format", {"prompt_key": "question", "response_key": "answer"})
    return Task(
        raw=raw, workflow=workflow, reward_fn=kwargs.pop("reward_fn", None), taskset="t", **kwargs
    )


def check_conversation(exp: Experience, tokenizer, messages: list[dict], tools=None) -> None:
    """The experience is the chat template's rendering of ``messages`` with the policy's
    sampled tokens in place of each assistant message, and exactly those are masked in.

    Splits the response into runs of equal ``action_mask``; a True run decodes (special
    tokens dropped, a final eos kept) to one assistant message's content; the whole,
    decoded run by run, is a prefix of the template's text that ends where an
    assistant message ends.
    """
    kwargs = {"tools": tools} if tools else {}
    expected = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=False, **kwargs
    )
    tokens = exp.tokens.tolist()
    mask = [False] * exp.prompt_length + exp.action_mask.tolist()
    assert len(mask) == len(tokens) and exp.logprobs.shape == exp.action_mask.shape
    assert (exp.logprobs[~exp.action_mask] == 0).all()
    assert (exp.logprobs[exp.action_mask] < 0).all()
    runs: list[tuple[bool, list[int]]] = []
    for token, flag in zip(tokens, mask, strict=True):
        if runs and runs[-1][0] == flag:
            runs[-1][1].append(token)
        else:
            runs.append((flag, [token]))
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    assert [flag for flag, _ in runs] == [False, True] * len(replies)  # context, reply, ...
    built = ""
    pending = iter(replies)
    for flag, ids in runs:
        if flag:
            text = tokenizer.decode(ids, skip_special_tokens=True)
            assert text == next(pending)
            if ids[-1] == tokenizer.eos_token_id:
                text += tokenizer.eos_token
            built += text
        else:
            built += tokenizer.decode(ids)
    assert expected.startswith(built), f"{built!r}\nis not a prefix of\n{expected!r}"
    # what the template writes after the last reply: its end-of-turn marker only
    assert expected[len(built) :] in (tokenizer.eos_token + "\n", "\n")


def teach(
    base_dir: Path, out_dir: Path, dialogues: list[list[tuple[str, bool]]], max_steps: int = 300
) -> Path:
    """Copy the tiny model to ``out_dir``, taught to write given replies greedily.

    A dialogue is a list of (text, trained) pieces, each tokenized on its own (as a
    Conversation builds its sequence); the model is trained on the tokens of the
    ``trained`` pieces until greedy decoding reproduces every one of them.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    rows = []
    for dialogue in dialogues:
        ids, labels = [], []
        for text, trained in dialogue:
            piece = tokenizer(text, add_special_tokens=False)["input_ids"]
            ids += piece
            labels += piece if trained else [-100] * len(piece)
        rows.append((ids, labels))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    target = torch.full((len(rows), width), -100)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, labels) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        target[i, : len(ids)] = torch.tensor(labels)
        attention[i, : len(ids)] = 1
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(0)
    # logits only where a trained token is predicted: the vocabulary is 49k wide
    trained = target[:, 1:] != -100
    wanted = target[:, 1:][trained]
    for _ in range(max_steps):
        hidden = model.model(input_ids=input_ids, attention_mask=attention).last_hidden_state
        logits = model.lm_head(hidden[:, :-1][trained])
        if bool((logits.argmax(-1) == wanted).all()):
            break
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(logits, wanted).backward()
        optimizer.step()
    else:
        raise AssertionError(f"the tiny model did not learn its replies in {max_steps} steps")
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir
