"""The judge-score parser and the guess_number environment on hand-written input."""

import pytest

from trinity.workflows.envs import ENVIRONMENTS, GuessNumberEnv
from trinity.workflows.llm_judge import parse_judge_score


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Mostly right.\nScore: 8", 0.8),
        ("Score: 7/10", 0.7),
        ("**Rating:** 4 / 5", 0.8),  # a stated scale replaces max_score
        ("I rate it 3 out of 4", 0.75),
        ("The score is 9.5", 0.95),
        ("Score: 3. On reflection, Score: 6", 0.6),  # the last one counts
        ("It deserves a 6.", 0.6),  # bare number within [0, 10]
        ("Step 42 was wrong; overall 5", 0.5),  # 42 is out of range
        ("Score: 15", 1.0),  # clipped
        ("Score: -2", 0.0),
        ("no idea", None),
        ("Score: 3/0", None),
    ],
)
def test_parse_judge_score(reply, expected):
    score = parse_judge_score(reply, 10)
    assert score == (pytest.approx(expected) if expected is not None else None)


def test_guess_number_game():
    env = ENVIRONMENTS.get("guess_number")({"target": 7, "low": 1, "high": 10})
    assert "between 1 and 10" in env.reset()
    assert env.step("I guess 3").observation == "3 is wrong. The number is higher."
    assert not env.step("hmm").done  # no number: asked again
    step = env.step("maybe 9")
    assert step.observation.endswith("lower.") and not step.done
    assert env.step("7").done
    # solved; 3 of 4 replies held a guess
    assert env.rewards() == {"accuracy": 1.0, "format": pytest.approx(0.075)}


def test_guess_number_rejects_bad_rows():
    with pytest.raises(KeyError, match="'target' column"):
        GuessNumberEnv({"answer": 3})
    with pytest.raises(ValueError, match=r"outside \[1, 100\]"):
        GuessNumberEnv({"target": 500})
