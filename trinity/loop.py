"""The RL step in one process, read top to bottom: the loop the distributed roles wrap.

    run = build(config, total_steps=2)      # the components a `trinity run` starts
    try:
        for result in run_steps(run, 2):     # explore -> buffer -> train -> new weights
            print(result.step, result.explore["rollout/reward/mean"])
    finally:
        close(run)

No Ray: the explorer, pipeline, buffer, trainer and weight receiver are the plain classes
the Ray actors of ``trinity.launch.roles`` hold. The step bodies :func:`hand_on`
(``trinity.explorer.explore_loop``) and :func:`train` (``trinity.trainer.train_loop``)
are the ones the run's loops use; those loops add what a distributed run needs around
them: concurrency (steps in flight, the sync schedule), weight transports, monitors
and checkpoints. Here the schedule is synchronous: explore step ``s`` uses the
weights of train step ``s - 1`` (``synchronizer.sync_interval`` steps apart when it is
larger).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trinity.config import Config
from trinity.explorer.explore_loop import experience_pipeline, hand_on
from trinity.sync import weights
from trinity.trainer.train_loop import train

if TYPE_CHECKING:  # torch and the models load with the components, not with this module
    from trinity.buffer.experience_buffer import ExperienceBuffer
    from trinity.explorer.explorer import Explorer
    from trinity.pipeline import ExperiencePipeline
    from trinity.sync.weights import WeightReceiver
    from trinity.trainer.train_input import TrainInput
    from trinity.trainer.trainer import Trainer
    from trinity.types import Experience


@dataclass
class LocalRun:
    """The components of a run in one process (the same classes the Ray actors hold)."""

    config: Config
    explorer: Explorer  # tasksets, rollout engines, runner pool (trinity/explorer/explorer.py)
    pipeline: ExperiencePipeline  # operators between rollouts and the buffer (trinity/pipeline/)
    buffer: ExperienceBuffer  # queue, sql or file (trinity/buffer/experience_buffer.py)
    trainer: Trainer  # actor (+ critic, + reference) updates (trinity/trainer/trainer.py)
    train_input: TrainInput  # the sample strategy over the buffer (trinity/trainer/train_input.py)
    receiver: WeightReceiver  # published weights as full weights (trinity/sync/weights.py)
    total_steps: int  # train steps the trainer's LR schedule spans


@dataclass
class StepResult:
    """What one :func:`rl_step` did."""

    step: int
    experiences: list[Experience]  # what went into the buffer
    explore: dict[str, float]  # rollout metrics (``rollout/reward/mean``, ...) and the pipeline's
    train: dict[str, float] | None  # the train step's metrics; None: no batch was read
    version: int  # the policy version the rollout engine holds after the step


def build(
    config: Config,
    *,
    total_steps: int,
    model_dir: str | Path | None = None,
    job_dir: Path | None = None,
    logger: logging.Logger | None = None,
    explorer: Explorer | None = None,
) -> LocalRun:
    """Every component of one run, built in this process from ``config``.

    ``model_dir``: the policy's weights (default: ``model.model_path`` resolved);
    ``job_dir``: where the runners write their logs and the pipeline its saved input
    (default: nowhere); ``explorer``: one already built to use instead of a new one
    (its engines load once for several runs; ``close(run, keep_explorer=True)``).
    """
    from trinity.buffer import make_experience_buffer
    from trinity.explorer.explorer import Explorer
    from trinity.rollout.model_path import resolve_model_path
    from trinity.trainer.train_input import TrainInput
    from trinity.trainer.trainer import Trainer

    model_dir = str(model_dir or resolve_model_path(config.model.model_path))
    critic_dir = None  # the trainer's default: the policy's weights
    if config.algorithm.use_critic and config.model.critic_model_path:
        critic_dir = resolve_model_path(config.model.critic_model_path)
    log_dir = Path(job_dir) / "log" if job_dir is not None else None
    closers: list[Callable[[], None]] = []
    if explorer is None:
        explorer = Explorer(config, model_dir=model_dir, log_dir=log_dir, logger=logger)
        closers.append(explorer.close)
    try:
        pipeline = experience_pipeline(
            config.data_processor.experience_pipeline, config.service.data_juicer, job_dir
        )
        closers.append(pipeline.close)
        buffer = make_experience_buffer(config.buffer.trainer_input.experience_buffer)
        closers.append(buffer.close)
        trainer = Trainer(
            config,
            model_dir=model_dir,
            total_steps=total_steps,
            logger=logger,
            critic_model_dir=critic_dir,
        )
        # nothing waits for experiences that are not there: the explorer has put its step
        train_input = TrainInput(config, trainer.tokenizer, lambda n: buffer.get(n, timeout=0))
        receiver = weights.WeightReceiver(config, Path(job_dir or "."), None, model_dir, logger)
    except BaseException:
        for close_one in reversed(closers):
            close_one()
        raise
    initial = receiver.initial_adapter()  # LoRA continuing a saved adapter
    if initial is not None:
        explorer.load_weights(initial, 0)
    return LocalRun(config, explorer, pipeline, buffer, trainer, train_input, receiver, total_steps)


def close(run: LocalRun, *, keep_explorer: bool = False) -> None:
    """Close the buffer and the pipeline (and its service), then stop the rollout
    engines and runners unless ``keep_explorer``."""
    run.buffer.close()
    run.pipeline.close()
    if not keep_explorer:
        run.explorer.close()


def rl_step(run: LocalRun, step: int) -> StepResult | None:
    """One RL step (1-based); None when the taskset is exhausted before it.

    1. read tasks      ``Explorer.read_batch``: the taskset mix (trinity/buffer/task_reader.py)
    2. roll out        ``RunnerPool.run_tasks``: one workflow per task on the rollout
                       engine (trinity/explorer/runner.py, trinity/workflows/)
    3. score           the workflow's reward function (trinity/rewards/); the step's
                       rollout metrics (trinity/explorer/metrics.py)
    4. pipeline        ``ExperiencePipeline.process``: filters, reward shaping (trinity/pipeline/)
    5. put             the experience buffer (a Ray actor in a run: trinity/launch/buffer_actor.py)
    6. sample a batch  ``TrainInput.next_batch``: ``train_batch_size`` experiences through the
                       algorithm's sample strategy (trinity/trainer/train_input.py)
    7. train           ``Trainer.train_step``: advantages, losses, optimizer step
                       (trinity/trainer/trainer.py, trinity/algorithm/)
    8. publish         ``Trainer.weights_for_sync``: what every sync method sends
                       (in a run: ``trinity.sync.weights.publish``)
    9. load            ``WeightReceiver.full_weights`` (LoRA adapters merged), then
                       ``Explorer.load_weights`` into the rollout engine: policy version ``step``
    """
    # 1-3: read tasks, roll out, score
    produced = run.explorer.explore_step(step)
    if produced is None:
        return None
    experiences, explore_metrics = produced
    # 4-5: the experience pipeline, then into the buffer
    experiences = hand_on(step, experiences, explore_metrics, run.pipeline, run.buffer.put)
    # 6-7: sample a batch, train (ExplorerRole and TrainerRole run these in two actors)
    trained = train(run.trainer, run.train_input, step)
    train_metrics = trained[1] if trained is not None else None
    # 8-9: publish the new policy and load it into the rollout engine
    syn = run.config.synchronizer
    if trained is not None and (step % syn.sync_interval == 0 or step == run.total_steps):
        state = run.receiver.full_weights(run.trainer.weights_for_sync())
        run.explorer.load_weights(state, step)
    return StepResult(step, experiences, explore_metrics, train_metrics, run.explorer.model_version)


def run_steps(run: LocalRun, steps: int, start_step: int = 0) -> Iterator[StepResult]:
    """:func:`rl_step` for steps ``start_step + 1 .. start_step + steps``, yielding each
    result; stops early when the taskset is exhausted."""
    for step in range(start_step + 1, start_step + steps + 1):
        result = rl_step(run, step)
        if result is None:
            run.explorer.logger.info("taskset exhausted before step %d", step)
            return
        yield result
