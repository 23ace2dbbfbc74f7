"""The data_juicer operator: a clear error without the package; real operators with it.

The second group runs only where Data-Juicer (``pip install py-data-juicer``) is
installed; CI does not install it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from trinity.pipeline import ExperiencePipeline, OperatorError, TaskPipeline
from trinity.pipeline.data_juicer import DataJuicerMissingError
from trinity.types import EID, Experience

HAVE_DJ = importlib.util.find_spec("data_juicer") is not None
# one process per operator: these batches are tiny
LENGTH_FILTER = {"text_length_filter": {"min_len": 10, "max_len": 100, "num_proc": 1}}


@pytest.mark.skipif(HAVE_DJ, reason="Data-Juicer is installed")
def test_missing_package_is_named_for_both_pipelines() -> None:
    with pytest.raises(DataJuicerMissingError, match="pip install py-data-juicer"):
        ExperiencePipeline([{"name": "data_juicer", "args": {"config_path": "dj.yaml"}}])
    with pytest.raises(DataJuicerMissingError, match="pip install py-data-juicer"):
        TaskPipeline([{"name": "data_juicer", "args": {"process": [LENGTH_FILTER]}}])


def test_importing_the_pipelines_does_not_import_data_juicer() -> None:
    import sys

    import trinity.pipeline  # noqa: F401

    assert HAVE_DJ or "data_juicer" not in sys.modules


@pytest.mark.skipif(not HAVE_DJ, reason="Data-Juicer is not installed (pip install py-data-juicer)")
def test_filter_stats_feed_reward_shaping(tmp_path: Path) -> None:
    recipe = tmp_path / "dj.yaml"
    recipe.write_text(
        "process:\n  - text_length_filter:\n      min_len: 10\n      max_len: 100\n      num_proc: 1\n"
    )
    exps = [
        Experience(
            tokens=torch.tensor([1, 2, 3]),
            prompt_length=1,
            reward=1.0,
            eid=EID(task=i),
            prompt_text="q",
            response_text="x" * n,
        )
        for i, n in enumerate([3, 20, 50])
    ]
    pipeline = ExperiencePipeline(
        [
            {"name": "data_juicer", "args": {"config_path": str(recipe)}},
            {
                "name": "reward_shaping_mapper",
                "args": {
                    "reward_shaping_configs": [
                        {"stats_key": "text_len", "op_type": "ADD", "weight": 0.01}
                    ]
                },
            },
        ]
    )
    out, metrics = pipeline.process(exps)
    # the 3-character response is filtered out; 1.0 + 0.01 * 20 = 1.2, 1.0 + 0.01 * 50 = 1.5
    assert [(e.eid.task, e.info["text_len"]) for e in out] == [(1, 20), (2, 50)]
    assert [e.reward for e in out] == pytest.approx([1.2, 1.5])
    assert metrics["data_juicer/dropped"] == 1.0


@pytest.mark.skipif(not HAVE_DJ, reason="Data-Juicer is not installed (pip install py-data-juicer)")
def test_task_rows_through_data_juicer() -> None:
    rows, _ = TaskPipeline(
        [
            {
                "name": "data_juicer",
                "args": {
                    "process": [
                        {
                            "text_length_filter": {
                                "min_len": 4,
                                "text_key": "question",
                                "num_proc": 1,
                            }
                        }
                    ]
                },
            }
        ]
    ).process([{"question": "1+1", "answer": "2"}, {"question": "what is 12*12?", "answer": "144"}])
    assert rows == [{"question": "what is 12*12?", "answer": "144"}]
    with pytest.raises(OperatorError, match="exactly one of config_path or process"):
        TaskPipeline([{"name": "data_juicer", "args": {}}])
