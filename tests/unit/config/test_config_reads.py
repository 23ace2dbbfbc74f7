"""Every key a config sets is read by the run, or listed in NO_EFFECT: checked from reads.

The reads are recorded (``trinity.config.reads``) while the configs of ``examples/`` and
the upstream example configs of ``tests/unit/config/examples/`` go through a dry run
(load, lookups, report), and while the examples of ``BUILT`` build a run's components in
this process, on the tiny model (``trinity.loop.build``: explorer with its engine and
runners, experience pipeline, buffer, trainer, weight receiver), and run one RL step
(mode train: the run's train loop for one step). A key counts as read when a
module outside ``trinity/config/`` or a ``TRANSLATORS`` module reads it, or when it is one
of ``CONSUMED_IN_CONFIG`` (keys the config layer turns into other keys) and that module
reads it: validation, the dry-run report and ``to_plain`` read every key and prove nothing.

What this run does not reach is named in ``READ_ELSEWHERE`` with the module that reads
it there (the explorer's and trainer's loops in a run, the launcher, modes bench and
serve); the test checks that module still names the field.

Keys are compared as ``docs/config.md`` writes them, so a key a config sets counts as
read when any run reads it (a taskset's ``path`` in one example is read because every
example's taskset path is read).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from functools import cache
from pathlib import Path

import pytest

from trinity.config import (
    Config,
    ConfigError,
    dry_run_report,
    expand_stages,
    load_config,
    read_config,
)
from trinity.config.lookups import check_lookups
from trinity.config.no_effect import NO_EFFECT, schema_fields, set_keys
from trinity.config.reads import Reads, record_reads

ROOT = Path(__file__).resolve().parents[3]
TRINITY = ROOT / "trinity"
NOW = datetime(2025, 1, 2, 3, 4, 5)
WIDE = "tests/unit/config/reads_wide.yaml"  # what the examples leave at their defaults
CONFIGS = sorted(
    str(p.relative_to(ROOT))
    for p in [*ROOT.glob("examples/*/*.yaml"), *ROOT.glob("tests/unit/config/examples/*.yaml")]
) + [WIDE]
# the examples that also build their components and run a step: one per kind of run
BUILT = (
    "examples/grpo/grpo.yaml",  # GRPO, KL loss, eval taskset, queue
    "examples/ppo/ppo.yaml",  # the critic
    "examples/mix/mix.yaml",  # an auxiliary SFT buffer
    "examples/dapo/dapo.yaml",  # dynamic sampling, overlong shaping
    "examples/sft_grpo/sft_grpo.yaml",  # stages: SFT in mode train, then GRPO
    "examples/dpo/dpo.yaml",  # mode train on preference pairs
    "examples/tool_call/calculator.yaml",  # multi-turn tool calls
    "examples/jsd/jsd.yaml",  # an auxiliary model: the teacher
    WIDE,  # packed micro-batches, task and experience pipelines, an SQLite buffer
)

# key -> the config module that reads it and turns it into the keys the run reads
CONSUMED_IN_CONFIG = {
    "checkpoint_root_dir": "derived.py",  # job_dir()
    "project": "derived.py",  # job_dir(), the monitor's project
    "name": "derived.py",  # job_dir(), the monitor's run name
    "continue_from_checkpoint": "derived.py",  # a timestamped name when false
    "algorithm.repeat_times": "derived.py",  # every taskset's repeat_times
    "model.custom_chat_template": "derived.py",  # every engine's and dataset's chat_template
    "model.chat_template_path": "loader.py",  # read into model.custom_chat_template
    "model.enable_thinking": "derived.py",  # the rollout model's enable_thinking
    "model.temperature": "derived.py",  # the tasksets' rollout_args
    "model.top_p": "derived.py",
    "model.top_k": "derived.py",
    "model.logprobs": "derived.py",
    "buffer.explorer_input.default_eval_workflow_type": "derived.py",
    "trainer.trainer_config_path": "loader.py",  # read into trainer.trainer_config
    "trainer.max_token_len_per_gpu": "derived.py",  # actor.ppo_max_token_len_per_gpu
    "trainer.total_steps": "derived.py",  # buffer.total_steps
    "cluster.node_num": "trainer_ranks.py",  # the trainer's ranks on a GPU cluster
    "stages[].stage_name": "stages.py",  # the stage's experiment name
    "stages[].mode": "stages.py",  # the stage's config's mode
    # the short forms of trainer, copied into the veRL layout
    "trainer.enable_gradient_checkpointing": "derived.py",
    "trainer.use_dynamic_bsz": "derived.py",
    "trainer.grad_clip": "derived.py",
    # the buffer-level defaults of the tasksets' workflow and reward function
    "buffer.default_workflow_type": "derived.py",
    "buffer.default_reward_fn_type": "derived.py",
}

# key -> module outside trinity/config that reads it on a path this test does not run
READ_ELSEWHERE = {
    "ray_namespace": "launch/stage.py",
    "cluster.ray_address": "launch/stage.py",
    "explorer.name": "launch/stage.py",  # the actors' names and log files
    "trainer.name": "launch/stage.py",
    "explorer.eval_interval": "explorer/explore_loop.py",  # the explorer's loop in a run
    "explorer.eval_on_startup": "explorer/explore_loop.py",
    "monitor.monitor_type": "launch/roles.py",
    "monitor.monitor_args": "launch/roles.py",
    "service.data_juicer.auto_start": "service/data_juicer/client.py",  # a data_juicer operator
    "service.data_juicer.server_url": "service/data_juicer/client.py",
    # on a GPU only (a CPU config that sets them is told so by set_without_effect)
    "explorer.rollout_model.gpu_memory_utilization": "explorer/engines.py",
    "synchronizer.sync_timeout": "sync/weights.py",
    "synchronizer.sync_offset": "sync/weights.py",  # the explorer's required version
}


# what the upstream example configs read from the environment (the examples/ configs
# default to their own data)
UPSTREAM_ENV = {
    "MODEL_PATH": "tiny",
    "TRINITY_TASKSET_PATH": "data/gsm8k",
    "TRINITY_SFT_DATASET_PATH": "data/sft",
    "TRINITY_DATASET_PATH": "data/sft_warmup",
}


def _env(path: str, mp: pytest.MonkeyPatch) -> None:
    for key in UPSTREAM_ENV:
        mp.delenv(key, raising=False)
    if not path.startswith("examples/"):
        for key, value in UPSTREAM_ENV.items():
            mp.setenv(key, value)


def _dry_run(path: str) -> Config | None:
    try:
        cfg = load_config(ROOT / path, now=NOW)
    except ConfigError:
        return None  # a config that does not load runs nothing
    try:
        check_lookups(cfg)
    except ConfigError:
        pass  # a dataset of another machine: the rest of the run's reads still count
    dry_run_report(cfg)
    return cfg


class _Progress:
    """What a loop reports to the run's synchronizer actor, dropped: there is none here."""

    def report(self, role: str, step: int, metrics: dict[str, float]) -> None:
        pass

    def finish(self, role: str) -> None:
        pass


def _train_loop(stage: Config, job_dir: Path) -> None:
    """Mode train on a dataset: the run's train loop (monitor, publisher, heap, checkpoint
    schedule) for one step, in this process."""
    import logging

    from trinity.monitor import make_monitor
    from trinity.rollout.model_path import resolve_model_path
    from trinity.sync.publisher import WeightPublisher
    from trinity.trainer.train_loop import TrainLoop
    from trinity.trainer.trainer import Trainer
    from trinity.utils.memory import TrainerHeap

    logger = logging.getLogger("trinity.tests.reads")
    model_dir = resolve_model_path(stage.model.model_path)
    trainer = Trainer(stage, model_dir=str(model_dir), total_steps=1)
    monitor = make_monitor(
        stage.monitor.monitor_type,
        project=stage.project,
        name=stage.name,
        role="trainer",
        job_dir=job_dir,
        monitor_args=stage.monitor.monitor_args,
    )
    # mode train on a dataset publishes nothing, so no synchronizer is asked
    publisher = WeightPublisher(stage, job_dir, trainer, None, logger)
    # read as the trainer actor reads it; the heap does not keep freed memory here, since
    # keeping changes the allocator of this whole test process (process-wide, for good)
    assert isinstance(stage.trainer.keep_memory_between_steps, bool)
    heap = TrainerHeap(keep=False)
    train_loop = TrainLoop(
        stage, job_dir, trainer, None, heap, monitor, _Progress(), publisher, logger
    )
    assert train_loop.run(1)["steps"] == 1
    assert trainer.load_checkpoint(job_dir, 1) == 1


def _step(cfg: Config, job_dir: Path) -> None:
    """Each stage's components built in this process and one step: mode train through the
    run's train loop, the others through ``trinity.loop``, then a checkpoint saved and
    loaded back (what a resume reads)."""
    from trinity import loop
    from trinity.launch.stage import prepare_taskset

    for index, stage in enumerate(expand_stages(cfg, now=NOW)):
        stage_dir = job_dir / f"{Path(cfg.name).name}_{index}"
        if stage.mode == "train":
            _train_loop(stage, stage_dir)
            continue
        if stage.data_processor.task_pipeline is not None:
            stage = prepare_taskset(stage, stage_dir)
        run = loop.build(stage, total_steps=1, job_dir=stage_dir)
        try:
            assert loop.rl_step(run, 1) is not None
        finally:
            loop.close(run)
        run.trainer.save_checkpoint(stage_dir, 1)
        assert run.trainer.load_checkpoint(stage_dir, 1) == 1


@pytest.fixture(scope="module")
def reads(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reads]:
    job_dir = tmp_path_factory.mktemp("reads")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)  # the examples name their data relative to the checkout
        mp.setenv("TRINITY_MODEL_PATH", str(tiny_model_dir))
        mp.setenv("TRINITY_TEACHER_PATH", str(tiny_model_dir))  # same tokenizer as the student
        mp.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(job_dir))
        mp.setenv("HF_HUB_OFFLINE", "1")
        with record_reads() as recorded:
            for path in CONFIGS:
                _env(path, mp)
                cfg = _dry_run(path)
                if path in BUILT:
                    assert cfg is not None, path
                    _step(cfg, job_dir)
        yield recorded


@cache
def _written(path: str) -> list[tuple[str, str]]:
    with pytest.MonkeyPatch.context() as mp:
        _env(path, mp)
        mp.setenv("TRINITY_MODEL_PATH", "tiny")
        try:
            return set_keys(read_config(ROOT / path))
        except ConfigError:
            return []


# config modules that translate a layout of the file into what the run reads (veRL's
# trainer_config into the trainer's settings): their reads are the run's. Only the
# translation the run calls: the other upstream modules read the config at load time
TRANSLATORS = ("config/upstream/verl.py",)


def _is_read(key: str, reads: Reads) -> bool:
    readers = reads.readers.get(key, set())
    if any(not r.startswith(("config/", "<")) or r.startswith(TRANSLATORS) for r in readers):
        return True
    module = CONSUMED_IN_CONFIG.get(key)
    return module is not None and f"config/{module}" in readers


@pytest.mark.parametrize("path", CONFIGS)
def test_every_key_a_config_sets_is_read_or_listed_without_effect(path: str, reads: Reads) -> None:
    unread = sorted(
        {
            where
            for key, where in _written(path)
            if key not in NO_EFFECT and key not in READ_ELSEWHERE and not _is_read(key, reads)
        }
    )
    assert not unread, (
        f"{path} sets keys that nothing read in a dry run, the components' construction "
        f"and a step: {unread}. Wire each into the run, or list it in "
        "trinity/config/no_effect.py with the reason it has no effect"
    )


def test_no_effect_keys_are_read_by_no_run(reads: Reads) -> None:
    read = sorted(key for key in NO_EFFECT if _is_read(key, reads))
    assert not read, (
        f"listed in NO_EFFECT but read by the run: {[(k, sorted(reads.readers[k])) for k in read]}"
    )


@pytest.mark.parametrize("key", sorted(READ_ELSEWHERE))
def test_keys_read_elsewhere_are_named_there(key: str) -> None:
    assert key in schema_fields(), key
    source = (TRINITY / READ_ELSEWHERE[key]).read_text(encoding="utf-8")
    assert re.search(rf"\.{key.rsplit('.', 1)[-1]}\b", source), f"{READ_ELSEWHERE[key]}: {key}"


def test_consumed_keys_are_schema_keys() -> None:
    assert set(CONSUMED_IN_CONFIG) <= set(schema_fields())
    assert not set(CONSUMED_IN_CONFIG) & set(NO_EFFECT)


def test_keys_read_elsewhere_are_not_read_here(reads: Reads) -> None:
    read_here = sorted(key for key in READ_ELSEWHERE if _is_read(key, reads))
    assert not read_here, (
        f"the recorded run reads these; drop them from READ_ELSEWHERE: {read_here}"
    )
