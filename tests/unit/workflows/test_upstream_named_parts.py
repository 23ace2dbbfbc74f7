"""The parsers, rule rewards and the FrozenLake environment of the workflows registered
under Trinity-RFT's names, on hand-written input (the environment is gymnasium's own)."""

import inspect
import json

import pytest

from trinity.rewards.registry import REWARD_FNS
from trinity.workflows.frozen_lake import (
    DOWN,
    RIGHT,
    FrozenLakeEnv,
    parse_action,
    random_map,
    shortest_path,
)
from trinity.workflows.reward_model import yes_probability
from trinity.workflows.rubric_judge import format_rubrics, parse_rubric_rating
from trinity.workflows.ruler import parse_ruler_scores, scaled_gold
from trinity.workflows.tool_call import toolace_messages, toolcall_reward

CALL = '[{"name": "weather", "arguments": {"city": "Paris", "days": 2}}]'


@pytest.mark.parametrize(
    ("reply", "n", "expected"),
    [
        ("Candidate 2 is right.\n[0.2, 0.9]", 2, [0.2, 0.9]),
        ("[1, 0] on reflection [0.5, 0.25]", 2, [0.5, 0.25]),  # the last list counts
        ("[1.5, -0.5, 1]", 3, [1.0, 0.0, 1.0]),  # clipped to [0, 1]
        ("[0.5, 0.5]", 3, None),  # one score per answer or nothing
        ("[0.5, 'good']", 2, None),
        ("[True, False]", 2, None),
        ("no list here", 2, None),
        ("[0.5, __import__('os')]", 2, None),  # literal_eval, never eval
    ],
)
def test_parse_ruler_scores(reply, n, expected):
    assert parse_ruler_scores(reply, n) == expected


def test_gold_rewards_scale_onto_the_judges_range():
    # math_format_reward's extremes -0.1 and 1.1 map to 0 and 1; 0.1 to 0.2 / 1.2
    assert [scaled_gold(r) for r in (-0.1, 1.1, 0.1)] == pytest.approx([0.0, 1.0, 1 / 6])
    assert scaled_gold(5.0) == 1.0


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('```json\n{"rating": 7}\n```', 6 / 9),
        ('Here: ```\n{"rating": 10}\n``` done', 1.0),
        ('```json\n{"rating": 1}\n```', 0.0),
        ('```json\n{"rating": 11}\n```', None),  # out of [1, 10]
        ('```json\n{"score": 7}\n```', None),
        ('{"rating": 7}', None),  # no code block
        ("```json\nnot json\n```", None),
    ],
)
def test_parse_rubric_rating(reply, expected):
    rating = parse_rubric_rating(reply)
    assert rating == (pytest.approx(expected) if expected is not None else None)


def test_rubrics_are_listed_with_their_weights():
    text = format_rubrics([{"description": "cites a dose", "weight": 3}, {"description": "x"}])
    assert text == "Rubric 0 (weight: 3): cites a dose\nRubric 1 (weight: 1): x"
    assert format_rubrics([]) == "No rubrics are given."
    with pytest.raises(ValueError, match="must be a list"):
        format_rubrics("be nice")


def test_yes_probability():
    # p(yes) = 0.6, p(no) = 0.2 -> 0.75
    assert yes_probability(-0.5108256, -1.6094379) == pytest.approx(0.75, abs=1e-6)
    assert yes_probability(0.0, 0.0) == 0.5


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (f"<think>Paris, two days.</think><tool_call>{CALL}</tool_call>", 1.0),
        # arguments in another key order, the call as one object
        (
            '<think>ok</think><tool_call>{"name": "weather", "arguments": '
            '{"days": 2, "city": "Paris"}}</tool_call>',
            1.0,
        ),
        (f"<tool_call>{CALL}</tool_call>", 0.0),  # no reasoning
        (f"<tool_call>{CALL}</tool_call><think>after</think>", 0.0),  # reasoning after
        (f"<think>a</think><think>b</think><tool_call>{CALL}</tool_call>", 0.0),
        (
            '<think>a</think><tool_call>[{"name": "weather", "arguments": {"city": "Rome", '
            '"days": 2}}]</tool_call>',
            0.0,
        ),
        ("<think>a</think><tool_call>[not json]</tool_call>", 0.0),
        ("<think>a</think> no call", 0.0),
    ],
)
def test_toolcall_reward(reply, expected):
    assert toolcall_reward(reply, CALL) == {"accuracy": expected}


def test_toolace_rows_become_messages():
    row = {
        "tools": json.dumps([{"name": "weather", "description": "forecast", "parameters": {}}]),
        "raw_system": "You are a helpful agent.",
        "conversations": [
            {"from": "human", "value": "Weather in Paris?"},
            {"from": "function_call", "value": {"name": "weather"}},
            {"from": "observation", "value": "sunny"},
            {"from": "user", "value": "And tomorrow?"},
        ],
        "answer": CALL,
    }
    messages = toolace_messages(row)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[0]["content"].startswith("You are a helpful agent.")
    spec = {"type": "function", "function": json.loads(row["tools"])[0]}
    assert json.dumps(spec) in messages[0]["content"]
    assert messages[2]["content"] == '{"name": "weather"}'
    with pytest.raises(ValueError, match="from 'robot'"):
        toolace_messages({**row, "conversations": [{"from": "robot", "value": "hi"}]})
    with pytest.raises(KeyError, match="'conversations' column"):
        toolace_messages({"tools": "[]"})


def test_math_boxed_reward_takes_trinity_rft_arguments():
    fn = REWARD_FNS.get("math_boxed_reward")
    assert fn(r"<think>2+2</think> \boxed{4}", "4", with_think=True) == {
        "accuracy": 1.0,
        "format_score": 0.0,
    }
    assert fn(r"\boxed{4}", "4", with_think=True, format_score_coef=0.2) == {
        "accuracy": 1.0,
        "format_score": -0.2,
    }
    assert fn(r"\boxed{5}", "4") == {"accuracy": 0.0}  # without with_think: accuracy only


@pytest.mark.parametrize(
    ("name", "args"),
    [
        (
            "math_dapo_reward",
            {"enable_overlong_penalty", "penalty_factor", "max_response_length", "cache_length"},
        ),
        ("math_boxed_reward", {"with_think", "format_score_coef"}),
        ("countdown_reward", set()),
    ],
)
def test_rewards_accept_the_reward_fn_args_of_trinity_rft_configs(name, args):
    params = set(inspect.signature(REWARD_FNS.get(name)).parameters)
    assert args <= params


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Action: ```Down```", DOWN),
        ("```up``` then ```Right```", RIGHT),  # the last span
        ("```3```", RIGHT),  # Trinity-RFT's numbering: 1 left, 2 down, 3 right, 4 up
        ("```jump```", None),
        ("Right", None),
    ],
)
def test_parse_action(reply, expected):
    assert parse_action(reply) == expected


def test_random_maps_are_solvable_and_reproducible():
    for seed in range(20):
        desc = random_map(size=5, p=0.7, seed=seed, max_steps=6)
        board = [list(row) for row in desc]
        start = next((r, c) for r, row in enumerate(board) for c, t in enumerate(row) if t == "S")
        assert sum(row.count("G") for row in desc) == 1
        assert shortest_path(board, start) <= 6
        assert random_map(size=5, p=0.7, seed=seed, max_steps=6) == desc


def test_frozen_lake_episode_through_gymnasium():
    gymnasium = pytest.importorskip("gymnasium")
    desc = ["SFF", "FHF", "FFG"]
    env = FrozenLakeEnv({"seed": 0}, max_steps=6, desc=desc)
    first = env.reset()
    assert first.startswith("Current observation (0):\n P \t _ \t _ \t\n _ \t O \t _ \t")
    assert "At most 6 steps remain." in first
    stuck = env.step("I will think first")  # no action: the player stays
    assert "did not move you" in stuck.observation and not stuck.done
    # the same moves on gymnasium's own environment give the rewards we report
    reference = gymnasium.make("FrozenLake-v1", desc=desc, is_slippery=False)
    reference.reset(seed=0)
    for reply, move in [("```Right```", RIGHT), ("```Right```", RIGHT), ("```Down```", DOWN)]:
        step = env.step(reply)
        _, reward, terminated, _, _ = reference.step(move)
        assert env.position == int(reference.unwrapped.s)
        assert step.done == terminated
    assert env.step("```Down```").done  # reaches G
    _, reward, terminated, _, _ = reference.step(DOWN)
    assert terminated and reward == 1.0
    assert env.rewards() == {"success": 1.0}
    assert " √ " in env.render()


def test_frozen_lake_hole_ends_the_episode_with_nothing():
    pytest.importorskip("gymnasium")
    env = FrozenLakeEnv({}, max_steps=4, desc=["SH", "FG"])
    env.reset()
    step = env.step("```Right```")
    assert step.done and env.rewards() == {"success": 0.0}
    assert " X " in env.render()
