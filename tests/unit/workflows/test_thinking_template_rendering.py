"""Multi-turn, tool-call and history renderings use the engine's template variables.

The chat template below branches on ``enable_thinking`` the way thinking-capable
templates do: undefined, true and false each put a different prefix after every
assistant header. Whatever renders chat messages outside the engine (Conversation,
the tool-call workflow, the history merge) must produce the engine's tokens.
"""

from __future__ import annotations

import asyncio

import pytest

from trinity.rollout.engine import TransformersEngine, render_chat
from trinity.rollout.hermes_tools import template_renders_tools
from trinity.rollout.history import merge_conversations
from trinity.rollout.wrapper import ModelWrapper
from trinity.types import Task
from trinity.workflows.conversation import Conversation
from trinity.workflows.multi_turn_tool import ToolCallWorkflow
from trinity.workflows.tools import CALCULATOR_SPEC

# what follows every assistant header: nothing / an open think block / an empty one
PREFIXES = {None: "", True: "<think>\n", False: "<think>\n\n</think>\n\n"}

THINKING_TEMPLATE = (
    "{%- if enable_thinking is not defined -%}{%- set prefix = '' -%}"
    "{%- elif enable_thinking -%}{%- set prefix = '<think>\\n' -%}"
    "{%- else -%}{%- set prefix = '<think>\\n\\n</think>\\n\\n' -%}{%- endif -%}"
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\nTools: ' + (tools | map(attribute='function')"
    " | map(attribute='name') | join(', ')) + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{%- if m['role'] == 'assistant' %}{{ prefix }}{% endif -%}"
    "{{ m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' + prefix }}{% endif -%}"
)

QUESTION = [{"role": "user", "content": "What is 6 * 7?"}]
MODES = list(PREFIXES)
GREEDY = {"temperature": 0, "max_tokens": 4}


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    built = {
        mode: TransformersEngine(
            str(tiny_model_dir),
            dtype="float32",
            max_model_len=256,
            pack_weights=False,
            chat_template=THINKING_TEMPLATE,
            enable_thinking=mode,
        )
        for mode in MODES
    }
    yield built
    for engine in built.values():
        engine.close()


def _text(engine, messages, add_generation_prompt=True, **extra) -> str:
    return engine.tokenizer.apply_chat_template(
        messages,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        **engine.template_args,
        **extra,
    )


def test_the_template_renders_each_mode_differently(engines):
    prompts = {mode: engines[mode].apply_chat_template(QUESTION) for mode in MODES}
    for mode, ids in prompts.items():
        text = engines[mode].tokenizer.decode(ids)
        assert text.endswith("<|im_start|>assistant\n" + PREFIXES[mode])
    assert len({tuple(ids) for ids in prompts.values()}) == 3
    assert ModelWrapper(engines[False]).template_args == {"enable_thinking": False}
    assert ModelWrapper(engines[None]).template_args == {}


@pytest.mark.parametrize("mode", MODES)
def test_conversation_renders_as_the_engine(engines, mode):
    engine = engines[mode]
    tok = engine.tokenizer
    conv = Conversation(ModelWrapper(engine), QUESTION)
    assert conv.tokens == engine.apply_chat_template(QUESTION)

    reply = asyncio.run(conv.sample(**GREEDY))
    assert reply is not None
    before = len(conv.tokens)
    assert conv.add({"role": "user", "content": "And 7 * 8?"})
    glue = conv.tokens[before:]
    # the in-between tokens are the tail of the engine's own prompt for the next turn,
    # ending with the generation prompt of this mode
    assert engine.apply_chat_template(conv.messages)[-len(glue) :] == glue
    assert tok.decode(glue).endswith("<|im_start|>assistant\n" + PREFIXES[mode])
    # the whole sequence reads as the template's rendering of the conversation
    assert tok.decode(conv.tokens) == _text(engine, conv.messages)


@pytest.mark.parametrize("mode", MODES)
def test_tool_call_prompt_is_the_engines(engines, mode):
    engine = engines[mode]
    model = ModelWrapper(engine)
    tools = [CALCULATOR_SPEC]
    assert template_renders_tools(engine.tokenizer, tools, model.template_args)
    task = Task(
        raw={"question": QUESTION[0]["content"], "answer": "42", "tools": tools},
        workflow="multi_turn_tool_workflow",
        reward_fn=None,
        rollout_args=GREEDY,
        format={"prompt_key": "question", "response_key": "answer"},
        workflow_args={"max_turns": 1},
    )
    [exp] = ToolCallWorkflow(task=task, model=model).run()
    prompt = exp.tokens[: exp.prompt_length].tolist()
    # the template writes the tools itself, so the prompt is the question with them
    assert prompt == render_chat(
        engine.tokenizer, QUESTION, True, tools=tools, **engine.template_args
    )
    assert engine.tokenizer.decode(prompt).startswith("<|im_start|>system\nTools: calculator")
    assert engine.tokenizer.decode(prompt).endswith("<|im_start|>assistant\n" + PREFIXES[mode])

    # a tool result fed back (as the workflow's rollout does) splices the engine's tokens
    conv = Conversation(model, QUESTION, tools=tools)
    assert conv.tokens == prompt
    assert asyncio.run(conv.sample(**GREEDY)) is not None
    before = len(conv.tokens)
    assert conv.add({"role": "tool", "content": "42"})
    glue = conv.tokens[before:]
    full = render_chat(engine.tokenizer, conv.messages, True, tools=tools, **engine.template_args)
    assert full[-len(glue) :] == glue
    assert engine.tokenizer.decode(glue).endswith(
        "<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n" + PREFIXES[mode]
    )


@pytest.mark.parametrize("mode", MODES)
def test_history_merge_glue_is_the_engines(engines, mode):
    engine = engines[mode]
    model = ModelWrapper(engine, enable_history=True)
    [first] = model.chat(QUESTION, **GREEDY)
    follow_up = [
        *QUESTION,
        {"role": "assistant", "content": first.response_text},
        {"role": "user", "content": "And 7 * 8?"},
    ]
    [second] = model.chat(follow_up, **GREEDY)
    recorded = model.extract_experience_from_history(clear_history=False)
    [conv] = model.extract_experience_from_history(merge_turns=True)
    assert conv.info["turns"] == 2
    tokens = conv.tokens.tolist()
    assert tokens[: first.prompt_length] == engine.apply_chat_template(QUESTION)
    # the replies keep their sampled ids; the glue between them is the tail of the
    # engine's prompt for the second call, ending with this mode's generation prompt
    reply_1_end = first.prompt_length + first.response_length
    reply_2_start = len(tokens) - second.response_length
    assert tokens[first.prompt_length : reply_1_end] == first.response_tokens.tolist()
    assert tokens[reply_2_start:] == second.response_tokens.tolist()
    glue = tokens[reply_1_end:reply_2_start]
    second_prompt = engine.apply_chat_template(follow_up)
    assert glue == second_prompt[-len(glue) :]
    assert engine.tokenizer.decode(glue).endswith("<|im_start|>assistant\n" + PREFIXES[mode])
    # and up to the second reply the sequence reads as that prompt
    assert engine.tokenizer.decode(tokens[:reply_2_start]) == engine.tokenizer.decode(second_prompt)
    # without the engine's variables the glue no longer lines up (the prefixes differ)
    if mode is not None:
        unmerged = merge_conversations(recorded, engine.tokenizer)
        assert len(unmerged) == 2
