"""difficulty_based selection: hand-derived beliefs and probabilities, draws, the reader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from trinity.buffer import TasksetReader
from trinity.buffer.difficulty_selector import DifficultySelector, DifficultySettings
from trinity.config.schema.buffer import DataSelectorConfig, TasksetConfig

# three tasks, prior pass rates of a weaker (f0) and a stronger (f1) reference model
FEATURES = np.array([[0.0, 0.4], [0.2, 0.8], [0.6, 1.0]])
# e^(-(1/3) / tau) = 1/4
TAU = 1 / (3 * math.log(4))


def three_tasks(**settings) -> DifficultySelector:
    base = {"target_reward": 0.5, "tau": TAU, "m": 4, "lamb": 0.5, "rho": 0.5}
    return DifficultySelector(FEATURES, DifficultySettings(**{**base, **settings}), seed=0)


def test_before_any_feedback_every_task_is_equally_likely() -> None:
    # Beta(1, 1) everywhere: every mean is 0.5, every score 0
    assert three_tasks().probabilities() == pytest.approx([1 / 3, 1 / 3, 1 / 3])


def test_hand_derived_beliefs_and_probabilities_after_one_step() -> None:
    selector = three_tasks()
    # tasks 0 and 2 observed at 0 and 1: mean r = 0.5, mean f0 = 0.3, mean f1 = 0.7,
    # so c = (0.5 - 0.3) / 0.4 = 0.5 and task 1 is predicted 0.2 + 0.5 * 0.6 = 0.5
    selector.update([0, 2], [0.0, 1.0])
    assert selector.capability == pytest.approx(0.5, abs=1e-5)
    # alpha = 0.5 * 1 + 0.5 + 0.5 * s + 0.5 * 4 * p~ with s = 4 r on observed tasks:
    # task 0: alpha = 1 + 0 + 0 = 1,   beta = 1 + 2 + 2 = 5   -> mean 1/6
    # task 1: alpha = 1 + 0 + 1 = 2,   beta = 1 + 0 + 1 = 2   -> mean 1/2
    # task 2: alpha = 1 + 2 + 2 = 5,   beta = 1 + 0 + 0 = 1   -> mean 5/6
    assert selector.alphas == pytest.approx([1, 2, 5], abs=1e-5)
    assert selector.betas == pytest.approx([5, 2, 1], abs=1e-5)
    # scores -|0.5 - mean|: -1/3, 0, -1/3; softmax over tau: weights 1/4, 1, 1/4
    assert selector.probabilities() == pytest.approx([1 / 6, 2 / 3, 1 / 6], abs=1e-5)


def test_tau_zero_takes_the_best_tasks_and_ties_go_to_the_first() -> None:
    selector = three_tasks(tau=0)
    selector.update([0, 2], [0.0, 1.0])
    assert selector.probabilities() == pytest.approx([0, 1, 0])
    assert selector.draw(3).tolist() == [1, 0, 2]


def test_draws_follow_the_probabilities_and_never_repeat_a_task() -> None:
    selector = three_tasks()
    selector.update([0, 2], [0.0, 1.0])
    firsts = []
    for _ in range(3000):
        batch = selector.draw(2)
        assert batch[0] != batch[1]
        firsts.append(int(batch[0]))
    assert np.bincount(firsts, minlength=3) / 3000 == pytest.approx([1 / 6, 2 / 3, 1 / 6], abs=0.03)


def test_the_capability_is_a_running_mean_and_adaptive_rho_halves_on_a_miss() -> None:
    selector = three_tasks(adaptive_rho=True)
    selector.update([0, 2], [0.0, 1.0])  # predicted 0.2 and 0.8: missed by 0.2 < 0.25
    assert selector.rho == 0.5
    # task 1 observed at 1.0: c_obs = (1 - 0.2) / 0.6 = 4/3, c = 0.9 * 0.5 + 0.1 * 4/3;
    # predicted 0.2 + 0.6 * 0.5 = 0.5 for it: missed by 0.5 >= 0.25
    selector.update([1], [1.0])
    assert selector.capability == pytest.approx(0.9 * 0.5 + 0.1 * 4 / 3, abs=1e-5)
    assert selector.rho == 0.25


def test_one_feature_column_is_the_prediction() -> None:
    selector = DifficultySelector(
        np.array([[0.1], [0.9]]), DifficultySettings(m=2, lamb=1.0, rho=1.0), seed=0
    )
    # lamb 1 forgets everything, rho 1 takes only the prediction: alpha = 1 + 2 p~,
    # beta = 1 + 2 (1 - p~); task 0 observed at 0.5, task 1 predicted by its column
    selector.update([0], [0.5])
    assert selector.alphas == pytest.approx([2.0, 2.8])
    assert selector.betas == pytest.approx([2.0, 1.2])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": 0.5}, "unknown difficulty_based setting"),
        ({"tau": "low"}, "tau must be a number"),
        ({"do_sample": 1}, "do_sample must be true or false"),
        ({"rho": 2.0}, "lamb and rho must lie in"),
        ({"tau": -1}, "tau must be >= 0"),
    ],
)
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DifficultySettings.from_kwargs(kwargs, "taskset 't'")


# ---- the taskset reader


def taskset(tmp_path: Path) -> str:
    rows = [
        {"prompt": f"q{i}", "weak": w, "strong": s}
        for i, (w, s) in enumerate([(0.0, 0.4), (0.2, 0.8), (0.6, 1.0), (0.9, 1.0)])
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(tmp_path)


def difficulty_reader(path: str, feature_keys=("weak", "strong"), **kwargs) -> TasksetReader:
    selector = DataSelectorConfig(
        selector_type="difficulty_based",
        feature_keys=list(feature_keys),
        kwargs={"target_reward": 0.5, "tau": 0.05, "m": 4, **kwargs},
    )
    return TasksetReader(
        TasksetConfig(name="t", storage_type="file", path=path, data_selector=selector),
        batch_size=3,
        total_epochs=3,
        selector="difficulty_based",
        default_workflow="math_workflow",
    )


def test_the_reader_draws_distinct_tasks_and_learns_from_feedback(tmp_path: Path) -> None:
    reader = difficulty_reader(taskset(tmp_path))
    first = [t.index for t in reader.read_batch()]
    assert len(set(first)) == 3
    # observed: 0 fails, 2 passes -> c = 0.5, predicted 0.5 / 0.95 for tasks 1 / 3
    reader.feedback({0: 0.0, 2: 1.0})
    probabilities = reader.difficulty.probabilities()
    assert probabilities.argmax() == 1
    assert probabilities[1] > 0.9
    assert [t.index for t in reader.read_batch()][0] == 1


def test_the_reader_resumes_with_its_beliefs(tmp_path: Path) -> None:
    path = taskset(tmp_path)
    reader = difficulty_reader(path)
    reader.read_batch()
    reader.feedback({0: 0.0, 2: 1.0})
    state = json.loads(json.dumps(reader.state_dict()))  # as the explorer state stores it
    later = [[t.index for t in reader.read_batch()] for _ in range(2)]
    resumed = difficulty_reader(path)
    resumed.load_state_dict(state)
    assert [[t.index for t in resumed.read_batch()] for _ in range(2)] == later


@pytest.mark.parametrize(
    ("feature_keys", "message"),
    [((), "one or two columns"), (("weak", "prompt"), "holds 'q0' in feature key 'prompt'")],
)
def test_bad_feature_keys_are_named(tmp_path: Path, feature_keys, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        difficulty_reader(taskset(tmp_path), feature_keys=feature_keys)
