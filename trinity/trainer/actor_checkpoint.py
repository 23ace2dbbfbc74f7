"""The trainer's own checkpoints: save and resume the policy, its optimizer and the
extra state (LR schedule, RNG states), on one rank or sharded over several.

``trinity/trainer/checkpoint.py`` owns the layout on disk and the atomic commit; this
module decides what goes in (``actor.checkpoint.save_contents`` / ``load_contents``).
Functions of a :class:`~trinity.trainer.trainer.Trainer`, whose methods of the same
names call them.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trinity.config import trainer_settings
from trinity.trainer import checkpoint as ckpt
from trinity.trainer import distributed, lora
from trinity.trainer.export import model_state, save_hf_config, save_hf_model, weights_for_sync
from trinity.trainer.parts import TrainerSetupError

if TYPE_CHECKING:
    from trinity.trainer.trainer import Trainer


def save_checkpoint(trainer: Trainer, job_dir: Path, step: int, keep: int | None = None) -> Path:
    """Model, optimizer and extra state of ``step``; with several ranks every rank
    calls this and writes its own shard files."""
    loop = trainer_settings(trainer.config.trainer).loop
    if loop.keep_only_newest:  # veRL's remove_previous_ckpt_in_save: over max_*_ckpt_to_keep
        keep = 1
    if trainer.world_size > 1:
        return _save_sharded(trainer, Path(job_dir), step, keep)
    save = _contents(trainer, "save_contents")
    if trainer.critic is not None:
        # before the actor: the actor's save moves the "latest" pointer
        trainer.critic.save(job_dir, step)
    path = ckpt.save_actor_checkpoint(
        job_dir,
        step,
        model_state=model_state(trainer),
        optim_state=trainer.optimizer.state_dict() if "optimizer" in save else None,
        extra_state=_rank_extra_state(trainer, step) if "extra" in save else None,
        hf_save=partial(save_hf_model if "hf_model" in save else save_hf_config, trainer),
    )
    ckpt.write_json_atomic(Path(job_dir) / "trainer_meta.json", {"latest_iteration": step})
    _record_weights(trainer, job_dir, step)
    ckpt.prune_checkpoints(job_dir, keep)
    if trainer.critic is not None:
        ckpt.prune_critics(job_dir, 1 if loop.keep_only_newest else loop.max_critic_ckpt_to_keep)
    trainer.logger.info("saved checkpoint %s", path)
    return path


def save_state_dict(trainer: Trainer, job_dir: Path, step: int) -> Path:
    """Weights only, for checkpoint-based synchronisation: the full state in one
    file (``model_world_size_1_rank_0.pt``) however many ranks train.

    When ``global_step_<step>`` is a full checkpoint of the current weights (saved or
    resumed from by this trainer) only the pointer moves: the explorer reads the
    weights from it, and its optimizer and extra state stay. A full checkpoint of other
    weights (an earlier run's, ``resume_mode: disable``) is replaced. Afterwards the
    weights-only saves no pointer names are deleted."""
    if _holds_the_weights(trainer, job_dir, step):
        if trainer.rank == 0:
            ckpt.write_text_atomic(Path(job_dir) / ckpt.LATEST_STATE_DICT, str(step))
        return ckpt.step_dir(job_dir, step) / "actor"
    weights = weights_for_sync(trainer)
    if trainer.rank > 0:
        return ckpt.step_dir(job_dir, step) / "actor"
    path = ckpt.save_actor_checkpoint(
        job_dir,
        step,
        model_state=weights,
        optim_state=None,
        extra_state=None,
        pointer=ckpt.LATEST_STATE_DICT,
    )
    ckpt.prune_weights_only(job_dir)
    return path


def _record_weights(trainer: Trainer, job_dir: Path, step: int) -> None:
    """The full checkpoint ``global_step_<step>`` holds the policy's current weights."""
    trainer.checkpointed_weights = _weights_at(trainer, job_dir, step)


def _holds_the_weights(trainer: Trainer, job_dir: Path, step: int) -> bool:
    """Whether this trainer saved or resumed from the full checkpoint ``global_step_<step>``
    since its weights last changed (each train step moves ``trainer.global_step``); the
    same answer on every rank."""
    return trainer.checkpointed_weights == _weights_at(trainer, job_dir, step)


def _weights_at(trainer: Trainer, job_dir: Path, step: int) -> tuple[Path, int, int]:
    return (Path(job_dir).resolve(), step, trainer.global_step)


def load_checkpoint(trainer: Trainer, job_dir: Path, step: int | None = None) -> int:
    """Resume from the full checkpoint of ``step`` (None: the newest); returns its step
    (0 when there is none)."""
    step = step or ckpt.read_latest(job_dir)
    if not step:
        return 0
    if trainer.world_size > 1:
        return _load_sharded(trainer, Path(job_dir), step)
    load = _contents(trainer, "load_contents")
    shard = _shard_loader(trainer, Path(job_dir), step, load)
    state = _saved_weights(trainer, Path(job_dir), step, load, shard)
    if state is not None:
        if trainer.lora is not None:
            lora.load_adapter_state(trainer.model, state)
        elif trainer.master is not None:
            trainer.master.load_state_dict(trainer.model, state)
        else:
            trainer.model.load_state_dict(state)
    if "optimizer" in load:
        trainer.optimizer.load_state_dict(shard("optim"))
    _load_extra_state(trainer, shard("extra_state") if "extra" in load else None)
    if trainer.critic is not None:
        trainer.critic.load(job_dir, step)
    trainer.global_step = step
    if state is not None:
        _record_weights(trainer, job_dir, step)
    trainer.logger.info("resumed trainer from step %d", step)
    return trainer.global_step


def _contents(trainer: Trainer, which: str) -> set[str]:
    """``actor.checkpoint.save_contents`` or ``load_contents``. The model's shards are
    always written (the explorer resumes from them); optimizer and extra state only
    when listed; ``hf_model`` adds the weights to ``huggingface/``, and loaded, reads
    the policy from there instead of the shards."""
    policy = trainer_settings(trainer.config.trainer).policy
    return set(getattr(policy, which))


def _shard_loader(trainer: Trainer, job_dir: Path, step: int, load: set[str]):
    """kind -> this rank's shard of ``step``; a part ``load_contents`` lists but the
    checkpoint lacks (``save_contents`` left it out) fails naming both keys."""

    def shard(kind: str):
        path = ckpt.step_dir(job_dir, step) / "actor"
        if not (path / ckpt.shard_name(kind, trainer.world_size, trainer.rank)).exists():
            part = {"optim": "optimizer", "extra_state": "extra"}.get(kind, kind)
            raise TrainerSetupError(
                f"checkpoint {path} holds no {part} state (actor.checkpoint.save_contents "
                f"left it out); drop '{part}' from actor.checkpoint.load_contents to resume "
                "without it"
            )
        return ckpt.load_actor_shard(job_dir, step, kind, trainer.world_size, trainer.rank)

    return shard


def _saved_weights(
    trainer: Trainer, job_dir: Path, step: int, load: set[str], shard
) -> dict | None:
    """The policy's weights ``load_contents`` names: its ``model`` shard, or with
    ``hf_model`` the full weights of ``huggingface/`` (tied names filled in); None
    when it names neither."""
    if "hf_model" not in load:
        return shard("model") if "model" in load else None
    path = ckpt.step_dir(job_dir, step) / "actor" / "huggingface"
    if "model" in load:
        raise TrainerSetupError(
            "actor.checkpoint.load_contents lists both 'model' and 'hf_model': name one "
            f"source of the policy's weights (the shards or {path})"
        )
    if trainer.lora is not None:
        raise TrainerSetupError(
            f"{path} holds the merged weights of a LoRA policy, not its adapter: load "
            "'model' (actor.checkpoint.load_contents) to resume LoRA training"
        )
    state = ckpt.load_hf_weights(job_dir, step)
    if state is None:
        raise TrainerSetupError(
            f"checkpoint {path} holds no weights (actor.checkpoint.save_contents left "
            "out hf_model); load 'model' from actor.checkpoint.load_contents instead"
        )
    return _with_tied_names(trainer.model, state)


def _load_extra_state(trainer: Trainer, extra: dict[str, Any] | None) -> None:
    """LR schedule and RNG states; without them (``extra`` not loaded) the schedule
    starts again and the generators keep their state."""
    if extra is None:
        return
    trainer.scheduler.load_state_dict(extra["lr_scheduler"])
    torch.set_rng_state(extra["torch_rng"])
    state = random.getstate()
    random.setstate((state[0], tuple(extra["python_rng"]), state[2]))


def _rank_extra_state(trainer: Trainer, step: int) -> dict[str, Any]:
    return {
        "global_step": step,
        "lr_scheduler": trainer.scheduler.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": list(random.getstate()[1]),
    }


def _save_sharded(trainer: Trainer, job_dir: Path, step: int, keep: int | None) -> Path:
    """Rank 0 opens a staging directory, every rank writes its shards into it (in the
    turns ``trainer.save_strategy`` allows), and rank 0 renames it into place once all
    have (a shared filesystem is assumed)."""
    import torch.distributed as dist

    holder = [ckpt.begin_checkpoint(job_dir, step) if trainer.rank == 0 else None]
    dist.broadcast_object_list(holder, src=0)
    staging = Path(holder[0])
    save = _contents(trainer, "save_contents")
    model_state = distributed.to_local(trainer.model.state_dict())
    optim_state = (
        distributed.to_local(trainer.optimizer.state_dict()) if "optimizer" in save else None
    )
    extra = _rank_extra_state(trainer, step) if "extra" in save else None
    # hf_model: the full weights, gathered by every rank, written by rank 0
    full = distributed.full_state_dict(trainer.model) if "hf_model" in save else None

    def hf_save(directory: Path) -> None:
        save_hf_config(trainer, directory)
        if full is not None:
            trainer.model.save_pretrained(directory, state_dict=full, safe_serialization=True)

    interval: list[float] = []

    def write() -> None:
        interval.append(time.time())
        ckpt.write_rank_shards(
            staging, trainer.world_size, trainer.rank, model_state, optim_state, extra
        )
        interval.append(time.time())

    strategy = trainer.config.trainer.save_strategy
    turn, turns = distributed.in_turns(strategy, write)  # ends with a barrier
    trainer.logger.info(
        "rank %d wrote its checkpoint shards from %.6f to %.6f (turn %d of %d, save_strategy %s)",
        trainer.rank,
        *interval,
        turn + 1,
        turns,
        strategy,
    )
    path = ckpt.step_dir(job_dir, step) / "actor"
    if trainer.rank == 0:
        ckpt.commit_checkpoint(job_dir, step, staging, trainer.world_size, hf_save=hf_save)
        ckpt.write_json_atomic(job_dir / "trainer_meta.json", {"latest_iteration": step})
        ckpt.prune_checkpoints(job_dir, keep)
        trainer.logger.info("saved checkpoint %s (%d ranks)", path, trainer.world_size)
    dist.barrier()  # the checkpoint is complete when any rank returns
    _record_weights(trainer, job_dir, step)
    return path


def _load_sharded(trainer: Trainer, job_dir: Path, step: int) -> int:
    saved = ckpt.checkpoint_world_size(job_dir, step)
    if saved != trainer.world_size:
        raise TrainerSetupError(
            f"checkpoint {ckpt.step_dir(job_dir, step)} was written by {saved} trainer rank(s); "
            f"resume it with {saved} (this trainer has {trainer.world_size}) or start from its "
            "Hugging Face export (trinity convert)"
        )

    load = _contents(trainer, "load_contents")
    shard = _shard_loader(trainer, job_dir, step, load)
    state = _saved_weights(trainer, job_dir, step, load, shard)
    if state is not None:
        distributed.load_model_state(trainer.model, state, full="hf_model" in load)
    if "optimizer" in load:
        distributed.load_local_optimizer_state(trainer.optimizer, trainer.model, shard("optim"))
    _load_extra_state(trainer, shard("extra_state") if "extra" in load else None)
    trainer.global_step = step
    if state is not None:
        _record_weights(trainer, job_dir, step)
    trainer.logger.info("resumed trainer rank %d from step %d", trainer.rank, step)
    return trainer.global_step


def _with_tied_names(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict:
    """``state`` plus the names ``save_pretrained`` left out because they share a
    parameter with a saved name (a tied LM head), so it loads with ``strict=True``."""
    names_of: dict[int, list[str]] = defaultdict(list)
    for name, param in model.named_parameters(remove_duplicate=False):
        names_of[id(param)].append(name)
    full = dict(state)
    for names in names_of.values():
        saved = [n for n in names if n in state]
        for name in names:
            if saved and name not in full:
                full[name] = state[saved[0]]
    return full
