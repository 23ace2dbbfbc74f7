"""Importing trinity, or building its classes in one's own program, changes nothing
process-wide: no environment variable, no transformers module or class, no allocator
policy. Tuning for a run's processes is applied by ``trinity run`` to the processes it
starts (``trinity.launch.process_policy``), and checked here in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trinity.launch import process_policy
from trinity.utils.environment import scoped_environment

REPO = Path(__file__).resolve().parents[2]

# argv: a model dir, a scratch dir and the trainer tests' helpers, to build a bf16 Trainer
# after the imports. The environment is compared with what it was once the dependencies
# were imported (importing transformers' models sets TORCHINDUCTOR_CACHE_DIR, say). One
# line of JSON after the imports, one after building the trainer: one interpreter for
# both, as each costs a fresh import of torch and transformers.
_PROBE = """
import importlib, json, os, sys
from transformers.models.llama import modeling_llama
env = dict(os.environ)

def transformers_state():
    classes = {n: c for n, c in vars(modeling_llama).items() if isinstance(c, type)}
    return (
        {n: id(v) for n, v in vars(modeling_llama).items()},
        {n: id(vars(c).get("forward")) for n, c in classes.items()},
    )

def state(**more):
    from trinity.utils import memory, threads
    return json.dumps({
        "env_added": sorted(set(os.environ) - set(env)),
        "env_changed": sorted(k for k in env if os.environ.get(k) != env[k]),
        "transformers_unchanged": transformers_state() == before,
        "heap_policy": memory.keeps_freed_memory(),
        "torch_thread": threads._pool is not None,
        **more,
    })

before = transformers_state()
names = ["trinity", "trinity.algorithm", "trinity.buffer", "trinity.trainer", "trinity.rollout",
         "trinity.config", "trinity.launch.run", "trinity.launch.cluster",
         "trinity.trainer.trainer", "trinity.trainer.fused_layers", "trinity.utils.memory",
         "trinity.utils.threads", "trinity.explorer.engines", "trinity.explorer.runner",
         "trinity.monitor.mlflow", "trinity.cli.main"]
skipped = []
for name in names:
    try:
        importlib.import_module(name)
    except ImportError as exc:  # an optional stack that is not installed
        skipped.append(f"{name}: {exc}")
print(state(skipped=skipped))
sys.path.insert(0, sys.argv[3])
from trainer_testing import make_config
from trinity.trainer.trainer import Trainer
from pathlib import Path
config = make_config(Path(sys.argv[1]), Path(sys.argv[2]), model={"dtype": "bfloat16"})
Trainer(config, model_dir=sys.argv[1], total_steps=1)
print(state(built_trainer=True))
"""


# what a run's processes get: the probe starts without them, so it sees any setdefault
_RUN_VARIABLES = (
    "THP_MEM_ALLOC_ENABLE",
    "OMP_WAIT_POLICY",
    "RAY_DEDUP_LOGS",
    "RAY_worker_niceness",
)


def _probe(*args: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in _RUN_VARIABLES}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.strip().splitlines() if line.startswith("{")]


def _assert_untouched(result: dict) -> None:
    assert result["env_added"] == [] and result["env_changed"] == [], result
    assert result["transformers_unchanged"], result
    assert result["heap_policy"] is False
    assert result["torch_thread"] is False


def test_importing_trinity_and_building_a_trainer_change_nothing_process_wide(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    helpers = REPO / "tests" / "unit" / "trainer"
    imported, built = _probe(str(tiny_model_dir), str(tmp_path), str(helpers))
    # a fresh interpreter that imports trinity (trinity.algorithm, trinity.buffer, ...)
    assert imported["skipped"] == [], imported["skipped"]
    _assert_untouched(imported)
    # then builds a Trainer in its own program
    assert built["built_trainer"]
    _assert_untouched(built)


def test_the_driver_policy_keeps_what_the_environment_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(process_policy.THP, raising=False)
    monkeypatch.setenv("RAY_DEDUP_LOGS", "1")
    process_policy.apply_to_driver()
    assert os.environ[process_policy.THP] == "1"
    assert os.environ["RAY_DEDUP_LOGS"] == "1"  # the user's choice wins


@pytest.mark.parametrize(
    "started_here, overlapping, environment, expected",
    [
        (True, True, {}, {"THP_MEM_ALLOC_ENABLE": "1", "OMP_WAIT_POLICY": "PASSIVE"}),
        (True, False, {}, {"THP_MEM_ALLOC_ENABLE": "1"}),
        # a joined cluster keeps the wait policy its own environment gave it
        (False, True, {}, {"THP_MEM_ALLOC_ENABLE": "1"}),
        (True, True, {"OMP_WAIT_POLICY": "ACTIVE", "THP_MEM_ALLOC_ENABLE": "0"}, {}),
    ],
)
def test_worker_env_adds_only_what_the_driver_environment_leaves_unset(
    monkeypatch: pytest.MonkeyPatch,
    started_here: bool,
    overlapping: bool,
    environment: dict[str, str],
    expected: dict[str, str],
) -> None:
    for key in ("OMP_WAIT_POLICY", "THP_MEM_ALLOC_ENABLE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    got = process_policy.worker_env(started_here=started_here, overlapping=overlapping)
    assert got == {**expected, "TRINITY_DRIVER_DIR": os.getcwd()}


def test_a_worker_enters_the_driver_directory_where_it_exists(
    tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    driver, worker = tmp_path / "driver", tmp_path / "worker"
    driver.mkdir()
    worker.mkdir()
    monkeypatch.chdir(worker)
    monkeypatch.setenv("TRINITY_DRIVER_DIR", str(driver))
    process_policy.enter_driver_directory()
    assert os.getcwd() == str(driver)
    # a node without that directory: the worker stays where it is and says so
    monkeypatch.chdir(worker)
    monkeypatch.setenv("TRINITY_DRIVER_DIR", str(tmp_path / "elsewhere"))
    with caplog.at_level("WARNING", logger="trinity.launch"):
        process_policy.enter_driver_directory()
    assert os.getcwd() == str(worker)
    assert "is not on this node" in caplog.text


def test_scoped_environment_restores_what_was_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRINITY_TEST_KEPT", "before")
    monkeypatch.delenv("TRINITY_TEST_NEW", raising=False)
    with scoped_environment({"TRINITY_TEST_KEPT": "x", "TRINITY_TEST_NEW": "y"}):
        assert os.environ["TRINITY_TEST_KEPT"] == "x" and os.environ["TRINITY_TEST_NEW"] == "y"
    assert os.environ["TRINITY_TEST_KEPT"] == "before"
    assert "TRINITY_TEST_NEW" not in os.environ
