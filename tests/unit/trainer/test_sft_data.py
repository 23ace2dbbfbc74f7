"""SFT and DPO rows -> token ids with masks that cover assistant tokens only."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from trinity.buffer.errors import MissingKeyError
from trinity.config.schema import FormatConfig, StorageConfig
from trinity.trainer.sft_data import (
    DatasetFormatError,
    DatasetSource,
    Limits,
    RowConverter,
    tokenize_chat,
)

# Renders tools and every turn, and only ever appends: a minimal template of the usual shape.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools: {{ tools | map(attribute='name') | join(',') }}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def text(tokenizer, ids) -> str:
    return tokenizer.decode(ids)


def trained_text(tokenizer, exp) -> str:
    response = exp.tokens[exp.prompt_length :]
    return tokenizer.decode(response[exp.action_mask])


def test_plaintext_row_trains_the_reply_only(tokenizer) -> None:
    fmt = FormatConfig(prompt_key="question", response_key="answer", system_prompt="Be brief.")
    exp = RowConverter(tokenizer, fmt, kind="sft", dataset="d")(
        {"question": "1 + 2?", "answer": "3"}, 0
    )
    prompt = text(tokenizer, exp.tokens[: exp.prompt_length])
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1 + 2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # exactly the rollout prompt the engine builds for the same messages
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1 + 2?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        exp.tokens[: exp.prompt_length].tolist()
        == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    )
    assert text(tokenizer, exp.tokens[exp.prompt_length :]) == "3<|im_end|>\n"
    assert bool(exp.action_mask.all())


def test_system_prompt_key_wins_over_system_prompt(tokenizer) -> None:
    fmt = FormatConfig(system_prompt_key="sys", system_prompt="fixed")
    exp = RowConverter(tokenizer, fmt, kind="sft")(
        {"prompt": "p", "response": "r", "sys": "row"}, 0
    )
    assert "<|im_start|>system\nrow<|im_end|>" in text(tokenizer, exp.tokens)
    assert "fixed" not in text(tokenizer, exp.tokens)


CONVERSATION = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "u2"},
    {"role": "assistant", "content": "a2"},
]


def test_messages_train_the_last_reply_by_default(tokenizer) -> None:
    fmt = FormatConfig(prompt_type="messages", messages_key="conv")
    exp = RowConverter(tokenizer, fmt, kind="sft")({"conv": CONVERSATION}, 0)
    assert trained_text(tokenizer, exp) == "a2<|im_end|>\n"
    # the earlier reply is context: it sits in the prompt
    assert "a1" in text(tokenizer, exp.tokens[: exp.prompt_length])


def test_concatenated_multi_turn_trains_every_assistant_turn(tokenizer) -> None:
    fmt = FormatConfig(prompt_type="messages", enable_concatenated_multi_turn=True)
    exp = RowConverter(tokenizer, fmt, kind="sft")({"messages": CONVERSATION}, 0)
    response = exp.tokens[exp.prompt_length :]
    pieces = [
        (tokenizer.decode([t]), bool(m))
        for t, m in zip(response.tolist(), exp.action_mask.tolist(), strict=True)
    ]
    trained = "".join(p for p, m in pieces if m)
    untrained = "".join(p for p, m in pieces if not m)
    # the response starts at the first reply; the user turn and the assistant header
    # in between are context (mask 0)
    assert trained == "a1<|im_end|>\na2<|im_end|>\n"
    assert untrained == "<|im_start|>user\nu2<|im_end|>\n<|im_start|>assistant\n"
    assert text(tokenizer, exp.tokens[: exp.prompt_length]).endswith(
        "u1<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tools_and_chat_template_are_used(tokenizer) -> None:
    fmt = FormatConfig(prompt_type="messages", tools_key="tools", chat_template=TOOLS_TEMPLATE)
    row = {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        "tools": [{"name": "calc"}, {"name": "search"}],
    }
    exp = RowConverter(tokenizer, fmt, kind="sft")(row, 0)
    assert text(tokenizer, exp.tokens[: exp.prompt_length]) == (
        "<|im_start|>system\nTools: calc,search<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
    )
    assert trained_text(tokenizer, exp) == "a<|im_end|>\n"


def test_tool_turns_inside_a_conversation_are_masked(tokenizer) -> None:
    fmt = FormatConfig(
        prompt_type="messages", enable_concatenated_multi_turn=True, chat_template=TOOLS_TEMPLATE
    )
    row = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "call"},
            {"role": "tool", "content": "42"},
            {"role": "assistant", "content": "done"},
        ]
    }
    exp = RowConverter(tokenizer, fmt, kind="sft")(row, 0)
    assert trained_text(tokenizer, exp) == "call<|im_end|>\ndone<|im_end|>\n"


def test_dpo_plaintext_pair(tokenizer) -> None:
    fmt = FormatConfig(prompt_key="q", chosen_key="good", rejected_key="bad")
    exp = RowConverter(tokenizer, fmt, kind="dpo")({"q": "2 + 2?", "good": "4", "bad": "five"}, 3)
    assert text(tokenizer, exp.chosen) == "4<|im_end|>\n"
    assert text(tokenizer, exp.rejected) == "five<|im_end|>\n"
    assert exp.tokens.tolist() == exp.tokens[: exp.prompt_length].tolist() + exp.chosen.tolist()
    assert text(tokenizer, exp.tokens[: exp.prompt_length]).endswith(
        "2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_dpo_messages_pair(tokenizer) -> None:
    fmt = FormatConfig(prompt_type="messages")
    row = {
        "messages": [{"role": "user", "content": "hi"}],
        "chosen": [{"role": "assistant", "content": "hello"}],
        "rejected": [{"role": "assistant", "content": "go away"}],
    }
    exp = RowConverter(tokenizer, fmt, kind="dpo")(row, 0)
    assert text(tokenizer, exp.chosen) == "hello<|im_end|>\n"
    assert text(tokenizer, exp.rejected) == "go away<|im_end|>\n"


@pytest.mark.parametrize(
    ("fmt", "row", "message"),
    [
        (
            FormatConfig(),
            {"prompt": "p"},
            "missing key 'response' \\(named by format.response_key\\)",
        ),
        (
            FormatConfig(prompt_type="messages"),
            {"messages": [{"role": "user", "content": "u"}]},
            "last message of 'messages' must be the assistant reply",
        ),
        (
            FormatConfig(tools_key="t"),
            {"prompt": "p", "response": "r", "t": "calc"},
            "must be a list of dicts",
        ),
        (FormatConfig(prompt_type="messages"), {"messages": "text"}, "must be a list of"),
    ],
)
def test_malformed_rows_name_dataset_row_and_key(tokenizer, fmt, row, message) -> None:
    with pytest.raises(DatasetFormatError, match=f"dataset 'ds', row 7 \\(0-based\\): .*{message}"):
        RowConverter(tokenizer, fmt, kind="sft", dataset="ds")(row, 7)


def test_dpo_row_needs_both_replies(tokenizer) -> None:
    with pytest.raises(DatasetFormatError, match="missing key 'rejected'"):
        RowConverter(tokenizer, FormatConfig(), kind="dpo")({"prompt": "p", "chosen": "c"}, 0)


def test_long_prompt_keeps_its_end_and_sequence_is_cut(tokenizer) -> None:
    fmt = FormatConfig()
    row = {"prompt": "word " * 40, "response": "reply " * 40}
    full = RowConverter(tokenizer, fmt, kind="sft")(row, 0)
    cut = RowConverter(
        tokenizer, fmt, kind="sft", limits=Limits(max_prompt_tokens=10, max_model_len=16)
    )(row, 0)
    assert cut.prompt_length == 10 and cut.tokens.numel() == 16
    # the last 10 prompt tokens (ending with the assistant header) and the reply's first 6
    assert (
        cut.tokens[:10].tolist()
        == full.tokens[full.prompt_length - 10 : full.prompt_length].tolist()
    )
    assert (
        cut.tokens[10:].tolist()
        == full.tokens[full.prompt_length : full.prompt_length + 6].tolist()
    )


def test_tokenize_chat_refuses_a_template_that_rewrites_history(tokenizer) -> None:
    # this template prints only the newest message, so a longer prefix is no extension
    template = "{{ messages[-1]['content'] }}"
    messages = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}]
    with pytest.raises(DatasetFormatError, match="changes earlier turns"):
        tokenize_chat(tokenizer, messages, [False, True], chat_template=template)


def test_dataset_source_reads_batches_across_epochs(tokenizer, tmp_path: Path) -> None:
    data = tmp_path / "sft"
    data.mkdir()
    rows = [{"prompt": f"q{i}", "response": f"a{i}"} for i in range(3)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    storage = StorageConfig(name="sft", storage_type="file", path=str(data))
    source = DatasetSource(storage, tokenizer, kind="sft", batch_size=2, total_epochs=2)
    assert len(source) == 3  # 6 rows in batches of 2
    got = [source.get(2) for _ in range(4)]
    assert [len(b) for b in got] == [2, 2, 2, 0]
    replies = [trained_text(tokenizer, e) for b in got for e in b]
    assert replies == [f"a{i}<|im_end|>\n" for i in (0, 1, 2, 0, 1, 2)]
    assert all(e.eid.batch == "sft" for b in got for e in b)

    endless = DatasetSource(storage, tokenizer, kind="sft", batch_size=1, endless=True)
    assert len(endless.get(7)) == 7  # auxiliary data repeats as long as it is read


def test_dataset_source_checks_the_prompt_key(tokenizer, tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    storage = StorageConfig(name="sft", storage_type="file", path=str(tmp_path))
    with pytest.raises(
        MissingKeyError, match="missing key 'prompt' \\(named by format.prompt_key\\)"
    ):
        DatasetSource(storage, tokenizer, kind="sft", batch_size=1)


# Opens every reply with an empty thinking section unless thinking is enabled, as
# templates of thinking-capable models do (and only ever appends).
_NO_THINKING = (
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>\n{% endif %}"
)
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}" + _NO_THINKING + "{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n" + _NO_THINKING + "{% endif %}"
)


@pytest.mark.parametrize("enable_thinking", [False, True])
def test_rows_render_with_the_rollout_engines_template_variables(
    tokenizer, enable_thinking: bool
) -> None:
    from trinity.rollout.engine import chat_template_args, render_chat

    fmt = FormatConfig(prompt_type="plaintext", chat_template=THINKING_TEMPLATE)
    args = chat_template_args(enable_thinking)
    exp = RowConverter(tokenizer, fmt, kind="sft", template_args=args)(
        {"prompt": "q", "response": "a"}, 0
    )
    # the prompt is what the engine renders for the same messages and variables
    engine_tokenizer = copy.deepcopy(tokenizer)  # the module's tokenizer stays as it is
    engine_tokenizer.chat_template = THINKING_TEMPLATE
    expected = render_chat(engine_tokenizer, [{"role": "user", "content": "q"}], True, **args)
    assert exp.tokens[: exp.prompt_length].tolist() == expected
    assert ("<think></think>" in text(tokenizer, expected)) is (not enable_thinking)
    assert trained_text(tokenizer, exp) == "a<|im_end|>\n"
