"""Algorithm types through ``trinity run``, several per process by way of ``stages``.

- ``--dry-run`` accepts every type of ``ALGORITHM_DEFAULTS`` with its default parts: one
  config holds one stage per type (``algorithm`` is the type alone; ``mode``, ``buffer``
  and ``explorer`` come from the type's example, for its data and models), and the
  report's stage lines show each type's resolved parts. One process, no Ray.
- A misspelt ``policy_loss_fn_args`` / ``advantage_fn_args`` name fails at load, naming
  the key path and the part's valid argument names, for every type's default parts.
- The types composed of existing parts (cpt, asymre, topr, cispo, sapo, mix_chord, sppo,
  rec, grpo_verl), m2po, the distillation types (on_policy_distill, jsd, with the tiny model as
  its own teacher), dapo, multi_step_grpo, gigpo and raft each train 2 steps on the tiny
  model as the stages of one ``trinity run`` (one Ray start), from their example configs
  made small. dapo answers additions with math_dapo_reward and dynamic sampling with one
  extra round: the tiny model answers no addition right, so groups tie, are dropped, and
  the step is topped up with them after the extra round
  (tests/unit/explorer/test_dynamic_sampling.py covers the refill with hand-made groups);
  multi_step_grpo and gigpo play guess_number with one experience per turn; raft trains
  the best additions with the SFT loss.
- A stage of that run before cpt, ``upstream_keys`` (grpo, 3 steps), sets Trinity-RFT's
  keys of a replay buffer, a taskset's data_selector and a cosine LR schedule with
  warm-up; its job directory shows each at work: ``actor/lr`` per step follows the schedule, a train
  step read experiences again (``batch/replayed``), and the explorer read the taskset in
  the order the reader with that seed gives in this process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest
import yaml
from cli_testing import REPO, run_cli

from trinity.buffer.task_reader import TasksetReader
from trinity.config import ConfigError, load_config
from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS, NONE

EXAMPLES = REPO / "examples"
TYPES = sorted(ALGORITHM_DEFAULTS)
# each type of the run and the metrics its loss reports
RUN_TYPES = {
    "cpt": ("actor/sft_loss",),
    "asymre": ("actor/pg_loss",),
    "topr": ("actor/pg_loss", "actor/topr_alpha"),
    "cispo": ("actor/pg_loss", "actor/cispo_dropfrac"),
    "sapo": ("actor/pg_loss", "actor/sapo_gate"),
    "m2po": ("actor/pg_loss", "actor/m2po/masked_fraction"),
    "mix_chord": ("actor/pg_loss", "actor/sft_loss", "actor/chord_mu"),
    "sppo": ("actor/pg_loss", "actor/pg_clipfrac"),
    "rec": ("actor/pg_loss", "actor/pg_clipfrac"),
    "grpo_verl": ("actor/pg_loss", "actor/pg_clipfrac_lower"),
    # the teacher (the tiny model itself here) scores the student's tokens
    "on_policy_distill": ("actor/pg_loss",),
    "jsd": ("actor/pg_loss",),
    "dapo": ("actor/pg_loss", "actor/pg_clipfrac"),
    "multi_step_grpo": ("actor/pg_loss",),
    "gigpo": ("actor/pg_loss",),
    "raft": ("actor/sft_loss",),
}


def example(algorithm_type: str) -> dict:
    path = EXAMPLES / algorithm_type / f"{algorithm_type}.yaml"
    return yaml.safe_load(path.read_text())


def staged_config(model_dir: Path, root: Path, stages: list[dict]) -> Path:
    """A config of ``stages`` on the tiny model, its jobs under ``root``; what the stages
    leave out comes from the grpo example."""
    config = example("grpo")  # the sections the stages leave out
    config.update(
        project="types",
        name="stages",
        checkpoint_root_dir=str(root),
        continue_from_checkpoint=True,
        stages=stages,
    )
    # prompts up to 256 tokens: guess_number's second turn holds the first
    config["model"].update(model_path=str(model_dir), max_prompt_tokens=256, max_response_tokens=8)
    # parts and arguments set here would reach every stage: the types' defaults only
    config["algorithm"] = {"algorithm_type": "grpo", "repeat_times": 2}
    path = root / "stages.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def defaults_stage(algorithm_type: str) -> dict:
    """Stage ``algorithm_type`` with its default parts and its example's data and models."""
    ex = example(algorithm_type)
    stage = {"stage_name": algorithm_type, "mode": ex.get("mode", "both")}
    stage["algorithm"] = {"algorithm_type": algorithm_type}
    if ex["algorithm"].get("repeat_times"):
        stage["algorithm"]["repeat_times"] = ex["algorithm"]["repeat_times"]
    for section in ("buffer", "explorer"):
        if section in ex:
            stage[section] = ex[section]
    return stage


def test_dry_run_accepts_every_type_with_its_defaults(tiny_model_dir: Path, tmp_path: Path) -> None:
    path = staged_config(tiny_model_dir, tmp_path, [defaults_stage(t) for t in TYPES])
    result = run_cli("run", "--config", str(path), "--dry-run")
    assert result.returncode == 0, result.stderr[-4000:]
    stages = result.stdout.split("# Stages (run in order)\n", 1)[1]
    for name in TYPES:
        row = ALGORITHM_DEFAULTS[name]
        mode = "both" if row.use_rollout else "train"
        parts = (
            f"advantage_fn {row.advantage_fn}, policy_loss_fn {row.policy_loss_fn}, "
            f"kl_loss_fn {row.kl_loss_fn}, kl_penalty_fn {row.kl_penalty_fn}, "
            f"entropy_loss_fn {row.entropy_loss_fn}"
        )
        assert f"stages/{name}: mode {mode}, algorithm {name} ({parts})" in stages, name


def arg_names(kind: str, name: str) -> list[str]:
    from trinity.algorithm import ADVANTAGE_FN, POLICY_LOSS_FN

    registry = {"advantage_fn": ADVANTAGE_FN, "policy_loss_fn": POLICY_LOSS_FN}[kind]
    return [f.name for f in dataclasses.fields(registry.get(name).Args)]


@pytest.mark.parametrize("algorithm_type", TYPES)
def test_a_wrong_argument_name_fails_naming_the_key_and_the_valid_names(
    algorithm_type: str,
) -> None:
    path = EXAMPLES / algorithm_type / f"{algorithm_type}.yaml"
    row = ALGORITHM_DEFAULTS[algorithm_type]
    kinds = [("policy_loss_fn", row.policy_loss_fn)]
    if row.advantage_fn != NONE:
        kinds.append(("advantage_fn", row.advantage_fn))
    for kind, name in kinds:
        with pytest.raises(ConfigError) as err:
            load_config(path, [f"algorithm.{kind}_args.no_such_arg=1"])
        message = str(err.value)
        assert message.startswith(f"algorithm.{kind}_args: {kind} '{name}'"), message
        assert "'no_such_arg'" in message
        valid = message.split("valid arguments: ", 1)[1].split(" (given", 1)[0]
        assert valid.split(", ") == (arg_names(kind, name) or ["(none)"])


def test_the_cli_names_a_misspelt_argument_and_exits_with_a_config_error() -> None:
    result = run_cli(
        "run",
        "--config",
        str(EXAMPLES / "topr" / "topr.yaml"),
        "--dry-run",
        "algorithm.policy_loss_fn_args.advantage_treshold=0.5",
    )
    assert result.returncode == 2, result.stdout[-2000:]
    assert result.stderr.startswith(
        "trinity: config error: algorithm.policy_loss_fn_args: policy_loss_fn 'topr' got "
        "unknown argument(s) 'advantage_treshold'; valid arguments: advantage_threshold, "
        "loss_agg_mode"
    ), result.stderr


def small_stage(algorithm_type: str) -> dict:
    """Stage ``algorithm_type``: its example, 2 steps of 2 tasks x 2 rollouts (or 2 rows)."""
    ex = example(algorithm_type)
    algorithm = {**ex["algorithm"], "optimizer": {"lr": 1e-3}}
    buffer = {**ex["buffer"], "batch_size": 2, "total_steps": 2}
    buffer.pop("total_epochs", None)
    stage = {"stage_name": algorithm_type, "mode": ex.get("mode", "both")}
    if stage["mode"] == "train":
        buffer["train_batch_size"] = 2
    else:
        algorithm["repeat_times"] = 2
        buffer["explorer_input"] = {**buffer["explorer_input"], "eval_tasksets": []}
        stage["explorer"] = {"runner_per_model": 2, "eval_on_startup": False}
        if ex.get("explorer", {}).get("auxiliary_models"):  # the distillation teacher
            stage["explorer"]["auxiliary_models"] = ex["explorer"]["auxiliary_models"]
    stage.update(algorithm=algorithm, buffer=buffer)
    taskset = buffer.get("explorer_input", {}).get("taskset", {})
    if algorithm_type == "dapo":
        # the overlong penalty over the last 4 of the run's 8 response tokens; one extra round
        taskset["reward_fn_args"] = {
            "enable_overlong_penalty": True,
            "max_response_length": 8,
            "cache_length": 4,
        }
        algorithm["dynamic_sampling"] = {"enable": True, "max_extra_rounds": 1}
    if "workflow_args" in taskset:  # guess_number: episodes of at most 2 turns
        taskset["workflow_args"] = {**taskset["workflow_args"], "max_turns": 2}
    return stage


def metric_rows(job: Path, role: str) -> list[dict]:
    """The records of the ``role`` ("trainer" or "explorer") run of ``job``."""
    [path] = (job / "monitor").rglob(f"*_{role}_metrics.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


# the upstream_keys stage: 3 steps, a cosine schedule after a 2-step warm-up
LR, WARMUP, MIN_LR_RATIO, STEPS = 1e-3, 2, 0.1, 3
SEED = 7  # the taskset's data_selector seed (the run's seed stays 42)


def upstream_keys_stage(root: Path) -> dict:
    """Grpo on the arithmetic taskset with Trinity-RFT's keys of a replay buffer, a data
    selector and an LR schedule; the experience buffer backs up to ``root``."""
    stage = small_stage("grpo")
    stage["stage_name"] = "upstream_keys"
    stage["buffer"]["total_steps"] = STEPS
    stage["algorithm"]["optimizer"] = {
        "lr": LR,
        "lr_scheduler_type": "cosine",
        "lr_warmup_steps": WARMUP,
        "min_lr_ratio": MIN_LR_RATIO,
    }
    taskset = stage["buffer"]["explorer_input"]["taskset"]
    taskset["path"] = str(EXAMPLES / "arithmetic" / "data")  # read by the test too
    taskset["data_selector"] = {"selector_type": "shuffle", "seed": SEED}
    stage["buffer"]["trainer_input"] = {
        "experience_buffer": {
            "name": "replayed",
            "storage_type": "queue",
            "path": str(root / "upstream_keys_experiences.jsonl"),
            # read again at once: the trainer's next read finds them before the explorer
            # has rolled out with the weights that read trained
            "replay_buffer": {
                "enable": True,
                "priority_fn": "linear_decay",
                "priority_fn_args": {"decay": 2.0},
                "reuse_cooldown_time": 0.0,
            },
        }
    }
    return stage


@pytest.fixture(scope="module")
def staged_run(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory, shared_ray_head: str
) -> Path:
    """One ``trinity run`` of every type of RUN_TYPES and the upstream_keys stage, on the
    suite's shared Ray head (a module fixture runs before the tests' own
    ``RAY_ADDRESS``); the root of its jobs (``types/stages/<stage>``)."""
    root = tmp_path_factory.mktemp("staged_run")
    # cpt (mode train) last: the first stage starts the explorer and the trainer side by
    # side, and a train-only stage in between would stop the explorer the next one needs
    rollout_types = [t for t in RUN_TYPES if t != "cpt"]
    stages = [small_stage(t) for t in rollout_types]
    stages += [upstream_keys_stage(root), small_stage("cpt")]
    path = staged_config(tiny_model_dir, root, stages)
    result = run_cli(
        "run",
        "--config",
        str(path),
        env={
            **os.environ,
            "TRINITY_TEACHER_PATH": str(tiny_model_dir),
            "RAY_ADDRESS": shared_ray_head,
        },
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "[trinity] ray: joined" in result.stderr
    return root


@pytest.mark.slow
def test_each_type_trains_two_steps_as_a_stage_of_one_run(staged_run: Path) -> None:
    for name, metrics in RUN_TYPES.items():
        job = staged_run / "types" / "stages" / name
        config = yaml.safe_load((job / "config.yaml").read_text())
        assert config["algorithm"]["algorithm_type"] == name
        rows = metric_rows(job, "trainer")
        assert [r["step"] for r in rows] == [1, 2], name
        for row in rows:
            for key in metrics:
                assert math.isfinite(row[key]), (name, key, row.get(key))
        assert (job / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").exists()
    for name in ("on_policy_distill", "jsd"):  # the teacher's log-probs were there
        rows = metric_rows(staged_run / "types" / "stages" / name, "explorer")
        kls = [r["rollout/teacher_kl/mean"] for r in rows if "rollout/teacher_kl/mean" in r]
        assert len(kls) == 2 and all(math.isfinite(k) for k in kls), (name, rows)


@pytest.mark.slow
def test_dapo_samples_dynamically_and_raft_and_the_multi_step_types_act(staged_run: Path) -> None:
    stages = staged_run / "types" / "stages"
    dapo = [r for r in metric_rows(stages / "dapo", "explorer") if "rollout/num_experiences" in r]
    assert len(dapo) == 2
    assert all(r["rollout/reward/format_score/mean"] <= 0 for r in dapo)  # overlong penalty
    for r in dapo:  # every step full (2 groups), in at most 1 + 1 rounds
        prefix = "rollout/dynamic_sampling"
        assert r[f"{prefix}/kept_groups"] + r[f"{prefix}/topped_up_groups"] == 2
        assert r[f"{prefix}/rounds"] in (1.0, 2.0)
        assert r["rollout/num_experiences"] == 4
    gigpo = [r for r in metric_rows(stages / "gigpo", "explorer") if "rollout/num_experiences" in r]
    assert len(gigpo) == 2
    assert all(r["rollout/num_experiences"] >= 4 for r in gigpo)  # 2 tasks x 2 episodes
    raft = [r for r in metric_rows(stages / "raft", "explorer") if "rollout/num_experiences" in r]
    assert len(raft) == 2 and all("rollout/best_of_group/masked" in r for r in raft)


def expected_lr(step: int) -> float:
    """The LR after train step ``step`` (1-based): the schedule's value at optimizer step
    ``step`` (0-based), a warm-up of (s + 1) / WARMUP, then cosine to MIN_LR_RATIO."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / (STEPS - WARMUP)
    return LR * (MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * progress)))


@pytest.mark.slow
def test_upstream_keys_of_replay_selector_and_schedule_act_in_a_run(staged_run: Path) -> None:
    job = staged_run / "types" / "stages" / "upstream_keys"
    rows = metric_rows(job, "trainer")
    assert [r["step"] for r in rows] == [1, 2, 3]

    # (a) warm-up to LR by step 2 (without it: 0.325 LR), then cosine down to 0.1 LR
    assert [expected_lr(s) for s in (1, 2, 3)] == pytest.approx([LR, LR, LR * MIN_LR_RATIO])
    assert [r["actor/lr"] for r in rows] == pytest.approx([expected_lr(s) for s in (1, 2, 3)])

    # (b) every step read a full batch (2 tasks x 2 rollouts); step 1 had nothing to
    # read again, a later one read experiences the queue had handed out before
    assert [r["batch/size"] for r in rows] == [4.0, 4.0, 4.0]
    replayed = [r["batch/replayed"] for r in rows]
    assert replayed[0] == 0 and sum(replayed) > 0, replayed
    # the backup holds each experience once, however often it was read
    written = [
        json.loads(line)
        for line in (staged_run / "upstream_keys_experiences.jsonl").read_text().splitlines()
    ]
    assert len({json.dumps(e["eid"]) for e in written}) == len(written)
    assert sum(r["batch/size"] for r in rows) - sum(replayed) <= len(written)

    # (c) the tasks of each explore step, from the backup, are the batches the reader of
    # that taskset with seed 7 gives here: a shuffle, not the file order
    config = yaml.safe_load((job / "config.yaml").read_text())
    taskset = config["buffer"]["explorer_input"]["taskset"]
    assert (taskset["data_selector"]["selector_type"], taskset["data_selector"]["seed"]) == (
        "shuffle",
        SEED,
    )
    explored: dict[int, set[int]] = {}
    for e in written:
        explored.setdefault(int(e["eid"]["batch"]), set()).add(int(e["eid"]["task"]))
    reader = TasksetReader(
        load_config(job / "config.yaml").buffer.explorer_input.taskset,
        batch_size=2,
        total_steps=STEPS,
        seed=SEED,
        selector="shuffle",
        default_workflow="math_workflow",
    )
    batches = [{t.index for t in reader.read_batch()} for _ in range(STEPS)]
    assert [explored[step] for step in sorted(explored)] == batches[: len(explored)]
    assert len(explored) >= 2, explored
    assert batches[:2] != [{0, 1}, {2, 3}]
