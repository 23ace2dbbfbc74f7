"""The data_juicer operator in the pipeline's process: a clear error without the
package; real operators with it.

The second group runs only where Data-Juicer is installed (the data_juicer extra, which
``make test`` installs). Experiences through Data-Juicer and the Data-Juicer service:
tests/integration/test_data_juicer_service.py.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from trinity.pipeline import ExperiencePipeline, OperatorError, TaskPipeline
from trinity.pipeline.data_juicer import DataJuicerMissingError

HAVE_DJ = importlib.util.find_spec("data_juicer") is not None
# one process per operator: these batches are tiny
LENGTH_FILTER = {"text_length_filter": {"min_len": 10, "max_len": 100, "num_proc": 1}}


@pytest.mark.skipif(HAVE_DJ, reason="Data-Juicer is installed")
def test_missing_package_is_named_for_both_pipelines() -> None:
    with pytest.raises(DataJuicerMissingError, match="pip install py-data-juicer"):
        ExperiencePipeline([{"name": "data_juicer", "args": {"config_path": "dj.yaml"}}])
    with pytest.raises(DataJuicerMissingError, match="pip install py-data-juicer"):
        TaskPipeline([{"name": "data_juicer", "args": {"process": [LENGTH_FILTER]}}])


def test_importing_the_pipelines_and_the_service_does_not_import_data_juicer() -> None:
    # a fresh interpreter: the other tests here import Data-Juicer into this one
    code = (
        "import sys, trinity.pipeline, trinity.service.data_juicer.server; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'data_juicer'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


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
