"""Seconds per GRPO step: trinity against Hugging Face TRL's GRPOTrainer, side by side.

    nice -n 15 .venv/bin/python benchmarks/grpo_step.py            # 2 warm-up + 5 timed steps each
    nice -n 15 .venv/bin/python benchmarks/grpo_step.py --steps 2 --warmup 1   # quick look
    nice -n 15 .venv/bin/python benchmarks/grpo_step.py --dtype float32  # CPUs without bf16

Both systems do the same work per step: the default model (SmolLM2-135M-Instruct), two
tasks of the demo's arithmetic taskset with 8 rollouts each (16 completions of at most
32 tokens, temperature 1.0), the demo's reward, one AdamW update at lr 1e-5 on the whole
batch, no KL term and no reference model. A trinity step is rollout (the explorer's
engine, model wrapper and workflow, in this process) + ``Trainer.train_step`` + the
weight sync into the rollout engine; a TRL step is one ``GRPOTrainer`` optimizer step
(generation included). Rows of a group whose rewards all tie have zero advantage and
no gradient; trinity's trainer leaves them out of its forward and backward passes (the
update is the same), TRL runs them: each step's line says how many there were. With
``--train-every-row`` trinity's trainer runs them too, so both systems do the same
forward and backward work whatever the rewards.

TRL runs with its fastest CPU settings for this job: bf16 mixed precision, no gradient
checkpointing, beta 0 (no reference model), num_generations 8, per-device batch 16,
max_completion_length 32, use_cpu. Each system runs in its own process (as a user's job
would: neither shares an allocator, a heap or thread pools with the other), and this
process alternates them step by step (a trinity step runs after every TRL step, never at
the same time), so both see the same background load. The last line is
``trinity/trl step-time ratio: <r>`` (median over the timed steps; below 1 means trinity
is faster). ``--dtype float32`` runs both in float32 (TRL without mixed precision,
trinity with ``model.dtype: float32``), for CPUs without bf16 instructions (AVX2 only).
Needs the ``bench`` extra: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import DATA, default_model_dir, demo_config

TASKS_PER_STEP = 2
ROLLOUTS = 8
MAX_TOKENS = 32
TEMPERATURE = 1.0
LR = 1e-5


def load_tasks(seed: int) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in (DATA / "train.jsonl").read_text().splitlines() if line]
    random.Random(seed).shuffle(rows)
    return rows


def reward(response: str, truth: object) -> float:
    from trinity.rewards.math import math_reward

    return float(sum(math_reward(response, truth).values()))


class TrinityGRPO:
    """The explorer's rollout path and the trainer, in this process."""

    def __init__(
        self,
        model_dir: Path,
        tasks: list[dict[str, str]],
        total_steps: int,
        train_every_row: bool = False,
        extra: tuple[str, ...] = (),
        engine_args: dict[str, Any] | None = None,
        dtype: str = "bfloat16",
    ) -> None:
        """``extra``: config overrides; ``engine_args``: more keywords of the engine
        (``benchmarks/gpu_step.py`` passes its device); ``dtype``: ``model.dtype`` of the
        engine and the trainer."""
        from trinity.rollout.engine import TransformersEngine
        from trinity.rollout.wrapper import ModelWrapper
        from trinity.trainer.trainer import Trainer

        self._tmp = tempfile.TemporaryDirectory(prefix="grpo-bench-")
        self.config = demo_config(
            model_dir,
            self._tmp.name,
            total_steps=total_steps,
            lr=LR,
            rollouts=ROLLOUTS,
            tasks_per_step=TASKS_PER_STEP,
            max_tokens=MAX_TOKENS,
            dtype=dtype,
            extra=extra,
        )
        self.engine = TransformersEngine(
            str(model_dir),
            dtype=self.config.model.dtype,
            seed=self.config.seed,
            **(engine_args or {}),
        )
        self.model = ModelWrapper(self.engine, max_response_tokens=MAX_TOKENS)
        # the trainer's torch work runs on the engine's thread, so the process keeps one
        # OpenMP thread team, as the explorer's and the trainer's processes of a run do
        self.trainer = self.engine.run_in_worker(
            lambda: Trainer(self.config, model_dir=model_dir, total_steps=total_steps)
        )
        if train_every_row:  # no row is left out, tied rewards or not
            self.trainer.rows_with_gradient = lambda batch: None
        self.tasks = tasks
        self.step_count = 0
        self.phases: dict[str, list[float]] = {"rollout": [], "train": [], "sync": []}
        # rows the trainer left out of each step (actor/skipped_rows)
        self.skipped: list[int] = []
        # rows whose group's rewards all tie (zero advantage, no gradient)
        self.tied: list[int] = []

    def _task_list(self) -> list[Any]:
        from trinity.types import Task

        start = self.step_count * TASKS_PER_STEP
        rows = [self.tasks[(start + i) % len(self.tasks)] for i in range(TASKS_PER_STEP)]
        return [
            Task(
                raw=row,
                workflow="math_workflow",
                reward_fn="math_reward",
                repeat_times=ROLLOUTS,
                index=start + i,
                rollout_args={"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS},
                format={"prompt_key": "question", "response_key": "answer"},
            )
            for i, row in enumerate(rows)
        ]

    async def _rollout(self) -> list[Any]:
        from trinity.types import EID
        from trinity.workflows.math_workflow import MathWorkflow

        tasks = self._task_list()
        results = await asyncio.gather(*(MathWorkflow(t, self.model).run_async() for t in tasks))
        experiences = []
        for task, exps in zip(tasks, results, strict=True):
            for exp in exps:
                exp.eid = EID(batch=self.step_count, task=task.index, run=exp.eid.run)
                experiences.append(exp)
        return experiences

    def step(self) -> float:
        """One GRPO step; returns its seconds and records the phases."""
        start = time.perf_counter()
        experiences = asyncio.run(self._rollout())
        rolled = time.perf_counter()
        metrics = self.engine.run_in_worker(lambda: self.trainer.train_step(experiences))
        trained = time.perf_counter()
        self.skipped.append(int(metrics["actor/skipped_rows"]))
        groups: dict[int, set[float]] = {}
        for exp in experiences:
            groups.setdefault(exp.eid.task, set()).add(exp.reward)
        self.tied.append(sum(1 for exp in experiences if len(groups[exp.eid.task]) == 1))
        self.engine.load_state_dict(self.trainer.weights_for_sync(), self.step_count + 1)
        end = time.perf_counter()
        self.phases["rollout"].append(rolled - start)
        self.phases["train"].append(trained - rolled)
        self.phases["sync"].append(end - trained)
        self.step_count += 1
        return end - start

    def close(self) -> None:
        self.engine.close()
        self._tmp.cleanup()


def build_trl(
    model_dir: Path,
    tasks: list[dict[str, str]],
    max_steps: int,
    seed: int,
    out: str,
    dtype: str = "bfloat16",
):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    dataset = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": t["question"]}], "answer": t["answer"]}
            for t in tasks
        ]
    )

    def arithmetic_reward(completions: list, answer: list, **_: Any) -> list[float]:
        return [reward(c[0]["content"], a) for c, a in zip(completions, answer, strict=True)]

    # TRL loads the model in float32 (its default, named here); bf16 adds mixed precision,
    # float32 sets neither bf16 nor fp16 (GRPOConfig's bf16 is True when left unset)
    args = GRPOConfig(
        output_dir=out,
        use_cpu=True,
        bf16=dtype == "bfloat16",
        fp16=False,
        model_init_kwargs={"dtype": "float32"},
        gradient_checkpointing=False,
        beta=0.0,
        num_generations=ROLLOUTS,
        per_device_train_batch_size=TASKS_PER_STEP * ROLLOUTS,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=MAX_TOKENS,
        temperature=TEMPERATURE,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=max_steps,
        logging_steps=max_steps,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=seed,
        dataloader_num_workers=0,
    )
    return GRPOTrainer(
        model=str(model_dir), reward_funcs=arithmetic_reward, args=args, train_dataset=dataset
    )


def summary(name: str, times: list[float], warmup: int) -> float:
    timed = times[warmup:]
    median = statistics.median(timed)
    print(
        f"{name}: median {median:.2f} s/step over {len(timed)} timed steps "
        f"(all: {', '.join(f'{t:.2f}' for t in times)})"
    )
    return median


def _trinity_worker(
    conn: Any, model_dir: Path, tasks: list, total: int, train_every_row: bool, dtype: str
) -> None:
    """Child process: one trinity step per "step" message; replies (seconds, phases)."""
    import torch

    system = TrinityGRPO(model_dir, tasks, total, train_every_row, dtype=dtype)
    trainer = system.trainer
    weights = ", ".join(sorted({str(p.dtype) for p in trainer.model.parameters()}))
    autocast = trainer.autocast_dtype  # None or float32: no autocast
    conn.send(
        f"trinity: engine weights {system.engine.model.dtype}, trainer weights {weights}, "
        f"autocast {'no' if autocast in (None, torch.float32) else autocast}"
    )
    try:
        while conn.recv() == "step":
            seconds = system.step()
            phases = {k: v[-1] for k, v in system.phases.items()}
            conn.send((seconds, phases, system.tied[-1], system.skipped[-1]))
    finally:
        system.close()


def _trl_worker(conn: Any, model_dir: Path, tasks: list, total: int, seed: int, dtype: str) -> None:
    """Child process: TRL's own training loop, each step held until a "step" message;
    replies with the step's seconds (optimizer step, generation included)."""
    from transformers import TrainerCallback

    class Gate(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            conn.recv()
            self.start = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            conn.send(time.perf_counter() - self.start)

    with tempfile.TemporaryDirectory(prefix="trl-bench-") as out:
        trl = build_trl(model_dir, tasks, total, seed, out, dtype)
        trl.add_callback(Gate())
        conn.send(
            f"trl: weights {trl.model.dtype}, mixed precision {trl.accelerator.mixed_precision}"
        )
        trl.train()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed steps per system (default 2)"
    )
    parser.add_argument("--steps", type=int, default=5, help="timed steps per system (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default="bfloat16",
        help="what both systems compute in (default bfloat16: TRL's bf16 mixed precision)",
    )
    parser.add_argument(
        "--train-every-row",
        action="store_true",
        help="trinity's trainer runs rows with tied rewards too (as TRL does)",
    )
    args = parser.parse_args()
    if args.warmup < 0 or args.steps < 1:
        parser.error("--warmup must be >= 0 and --steps >= 1")
    import multiprocessing

    import torch

    model_dir = default_model_dir()
    tasks = load_tasks(args.seed)
    total = args.warmup + args.steps
    print(
        f"model {model_dir.name}, {args.dtype}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"{TASKS_PER_STEP} tasks x {ROLLOUTS} rollouts, <= {MAX_TOKENS} tokens, T={TEMPERATURE}, "
        f"lr {LR}; {args.warmup} warm-up + {args.steps} timed steps each, one process each"
    )
    spawn = multiprocessing.get_context("spawn")
    trinity_conn, trinity_end = spawn.Pipe()
    trl_conn, trl_end = spawn.Pipe()
    workers = [
        spawn.Process(
            target=_trinity_worker,
            args=(trinity_end, model_dir, tasks, total, args.train_every_row, args.dtype),
        ),
        spawn.Process(
            target=_trl_worker, args=(trl_end, model_dir, tasks, total, args.seed, args.dtype)
        ),
    ]
    for worker in workers:
        worker.start()
    trl_times: list[float] = []
    trinity_times: list[float] = []
    phases: dict[str, list[float]] = {"rollout": [], "train": [], "sync": []}
    skipped_rows: list[int] = []
    try:
        for conn in (trinity_conn, trl_conn):  # each says what it computes in when ready
            print(conn.recv(), flush=True)
        for step in range(1, total + 1):
            trl_conn.send("step")
            trl_times.append(trl_conn.recv())
            if step == total:
                # after its last step TRL wraps up (logs, end-of-training callbacks); let
                # it finish so trinity's last step does not share the cores with it
                workers[1].join(timeout=300)
            trinity_conn.send("step")
            seconds, step_phases, tied, skipped = trinity_conn.recv()
            trinity_times.append(seconds)
            skipped_rows.append(skipped)
            for key, value in step_phases.items():
                phases[key].append(value)
            print(
                f"step {step}: trl {trl_times[-1]:.2f} s, trinity {trinity_times[-1]:.2f} s "
                f"(rollout {step_phases['rollout']:.2f}, train {step_phases['train']:.2f}, "
                f"sync {step_phases['sync']:.2f}; {tied} of {TASKS_PER_STEP * ROLLOUTS} rows "
                f"had tied rewards and no gradient, {skipped} skipped by the trainer)",
                flush=True,
            )
        trinity_conn.send("stop")
    except EOFError:
        raise SystemExit("a benchmark process died; its traceback is above") from None
    finally:
        for worker in workers:
            worker.join(timeout=120)
            if worker.is_alive():
                worker.terminate()
    medians = {k: statistics.median(v[args.warmup :]) for k, v in phases.items()}
    print("trinity phases (median s): " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()))
    timed = skipped_rows[args.warmup :]
    print(
        f"trinity rows skipped by the trainer (no gradient): {sum(timed)} of "
        f"{len(timed) * TASKS_PER_STEP * ROLLOUTS} in the timed steps"
    )
    trl_median = summary("trl", trl_times, args.warmup)
    trinity_median = summary("trinity", trinity_times, args.warmup)
    print(f"trinity/trl step-time ratio: {trinity_median / trl_median:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
