"""Which runs have several processes doing torch work at once (their OpenMP threads then
sleep instead of spinning: trinity.launch.cluster.connect)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trinity.config import config_from_dict
from trinity.launch.cluster import torch_work_overlaps


def overlaps(minimal: dict[str, Any], **changes: dict[str, Any]) -> bool:
    data = copy.deepcopy(minimal)
    for section, values in changes.items():
        if section == "mode":
            data["mode"] = values
        else:
            data.setdefault(section, {}).update(values)
    return torch_work_overlaps(config_from_dict(data))


def test_synchronous_run_alternates_explorer_and_trainer(minimal: dict[str, Any]) -> None:
    assert overlaps(minimal) is False
    assert overlaps(minimal, synchronizer={"sync_interval": 1, "sync_offset": 0}) is False


@pytest.mark.parametrize(
    "synchronizer",
    [{"sync_offset": 1}, {"sync_interval": 2}, {"sync_style": "dynamic"}],
)
def test_explorer_ahead_of_the_trainer_overlaps(
    minimal: dict[str, Any], synchronizer: dict[str, Any]
) -> None:
    assert overlaps(minimal, synchronizer=synchronizer) is True
    # a stage that only explores (or only trains) runs one of them
    assert overlaps(minimal, mode="explore", synchronizer=synchronizer) is False


def test_several_engines_overlap(minimal: dict[str, Any]) -> None:
    assert overlaps(minimal, explorer={"rollout_model": {"engine_num": 2}}) is True
    judge = {"model_path": "tiny-model", "engine_num": 1}
    assert overlaps(minimal, explorer={"auxiliary_models": [judge]}) is True
