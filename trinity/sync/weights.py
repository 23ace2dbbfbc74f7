"""The two ends of weight synchronisation: what the trainer publishes and when the
explorer takes it.

Past 400 lines on purpose: the trainer's publishing and the explorer's taking follow one
schedule and one handshake per method; split, each side would restate the other's half.

Schedule (``synchronizer``): the trainer publishes policy version ``v`` after train step
``v`` whenever ``v % sync_interval == 0`` (and after its last step). With
``sync_style: fixed``, explore step ``s`` uses version
``required_version(s) = ((s - 1 - sync_offset) // sync_interval) * sync_interval`` and waits
for it (at most ``sync_timeout`` seconds); with ``trainer_driven`` (alias ``dynamic``) it
takes the newest published version without ever waiting (``fully_async`` too, from a
background thread between model calls: :mod:`trinity.sync.watcher`). With
``explorer_driven`` the explorer decides: at its sync points (``explorer_sync_point``:
every ``sync_interval`` explore steps after the first ``sync_offset``) it asks for the
trainer's current weights and waits for them; the trainer publishes only when asked
(after a train step, or while it waits for a batch) and after its last step. An unanswered request (``sync_timeout``)
leaves the explorer on its weights until its next sync point. Across processes (modes
explore and train) there is no one to ask: the trainer publishes every ``sync_interval``
steps and the explorer takes the newest version on disk at its sync points.

Where the weights travel:

* mode ``both``: the version number passes through the run's ``Synchronizer`` actor;
  when the trainer and the explorer share one GPU (``nccl`` or ``memory``), the weights
  stay on it: the trainer copies them into one GPU buffer that the explorer reads by a
  CUDA IPC handle, device to device (``trinity.sync.cuda_slot``); otherwise they
  travel as an object-store reference beside it (``memory``), through
  ``global_step_N/actor`` files the trainer wrote (``checkpoint``), or by a collective
  broadcast from the trainer's rank 0 to every rollout engine (``nccl``; gloo without
  CUDA; ``trinity.sync.collective``);
* modes ``explore`` and ``train`` run as separate processes that share the job
  directory (``sync_method: checkpoint``): the trainer writes ``global_step_N/actor``,
  moves ``latest_state_dict_iteration.txt`` and deletes the older weights-only saves
  (:func:`read_version`); the explorer polls that pointer. It waits for
  a scheduled version only while ``trainer_status.json`` says a trainer is running, so an
  explorer without a trainer explores with the weights it has.

With LoRA only the adapter travels; :class:`WeightReceiver` merges it into full weights.
Staleness of an explore step ``s`` run with version ``v`` is ``(s - 1) - v``: how many
train steps its policy lags behind the synchronous schedule
(:func:`trinity.trainer.train_loop.staleness`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trinity.config import Config
from trinity.sync.cuda_slot import CudaSlotReader, CudaSlotVersion, CudaSlotWriter, same_gpu
from trinity.sync.errors import SyncTimeout
from trinity.sync.weight_slot import SlotFull, SlotReader, SlotVersion, SlotWriter
from trinity.trainer import checkpoint as ckpt

if TYPE_CHECKING:
    import torch

TRAINER_STATUS = "trainer_status.json"
POLL_S = 0.2
_logger = logging.getLogger("trinity.sync")


def to_object_store(state: dict[str, torch.Tensor]) -> dict[str, tuple[str, list[int], Any]]:
    """``state`` as (dtype, shape, byte array) triples for ``ray.put``.

    Ray writes numpy arrays straight into the object store and hands the reader views of
    it, where a pickled tensor costs a serialised copy on each side: ~0.25 GiB of
    SmolLM2 in bf16 less in both the trainer and the explorer during a sync.
    """
    import torch

    packed = {}
    for key, tensor in state.items():
        flat = tensor.detach().cpu().reshape(-1)  # a GPU tensor is copied to the host
        if not flat.is_contiguous():
            flat = flat.contiguous()
        packed[key] = (
            str(tensor.dtype).removeprefix("torch."),
            list(tensor.shape),
            flat.view(torch.uint8).numpy(),
        )
    return packed


def from_object_store(packed: dict[str, tuple[str, list[int], Any]]) -> dict[str, torch.Tensor]:
    """Tensors over the arrays of :func:`to_object_store`, without copying: read-only
    views of the object store (the engine copies them into its weights)."""
    import numpy as np
    import torch

    state = {}
    with warnings.catch_warnings():  # the object store's arrays are read-only
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for key, (dtype, shape, data) in packed.items():
            state[key] = torch.from_numpy(np.asarray(data)).view(getattr(torch, dtype)).view(shape)
    return state


def required_version(step: int, sync_interval: int, sync_offset: int) -> int:
    """Policy version explore step ``step`` (1-based) must use with ``sync_style: fixed``."""
    return max(0, ((step - 1 - sync_offset) // sync_interval) * sync_interval)


def explorer_sync_point(step: int, sync_interval: int, sync_offset: int) -> bool:
    """Whether explore step ``step`` (1-based) asks for new weights with ``explorer_driven``:
    after every ``sync_interval`` steps that follow the first ``sync_offset``."""
    done = step - 1 - sync_offset
    return done > 0 and done % sync_interval == 0


def trainer_publishes_at(config: Config, step: int, total_steps: int, requested: bool) -> bool:
    """Whether the trainer publishes after train step ``step``: every ``sync_interval``
    steps, or (``explorer_driven`` in mode both) when the explorer has asked; always after
    the last step."""
    syn = config.synchronizer
    if step == total_steps:
        return True
    if syn.sync_style == "explorer_driven" and config.mode == "both":
        return requested
    return step % syn.sync_interval == 0


def publishes(config: Config) -> bool:
    """Whether the trainer publishes weights: mode both, or mode train on the experience
    buffer with checkpoint sync (an explorer in another process may read them)."""
    from trinity.config.algorithm_defaults import trains_on_dataset

    if config.mode == "both":
        return True
    return (
        config.mode == "train"
        and config.synchronizer.sync_method == "checkpoint"
        and not trains_on_dataset(config)
    )


def set_trainer_status(job_dir: Path, state: str) -> None:
    """``running`` or ``finished``: read by explorers of the same job in other processes."""
    ckpt.write_json_atomic(
        Path(job_dir) / TRAINER_STATUS,
        {"state": state, "time": time.time(), "host": socket.gethostname(), "pid": os.getpid()},
    )


def trainer_running(job_dir: Path) -> bool:
    """Whether the job's trainer says it is running and, on this host, its process is alive
    (a crashed trainer never writes ``finished``); a trainer on another host is trusted."""
    status = ckpt.read_json(Path(job_dir) / TRAINER_STATUS)
    if not status or status.get("state") != "running":
        return False
    pid = status.get("pid")
    if status.get("host") != socket.gethostname() or not isinstance(pid, int):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def latest_on_disk(job_dir: Path) -> int:
    """The newest version the trainer wrote to ``job_dir`` (0 when none)."""
    versions = [
        ckpt.read_latest(job_dir, p) for p in (ckpt.LATEST_STATE_DICT, ckpt.LATEST_CHECKPOINT)
    ]
    return max((v for v in versions if v), default=0)


def read_version(job_dir: Path, version: int) -> tuple[int, dict[str, torch.Tensor]]:
    """(version, weights) from ``global_step_<version>/actor`` (weights-only or a full
    checkpoint's rank files). A newer publish deletes the weights-only saves before it,
    so when the directory vanished before or while it was read, the newest version on
    disk is read instead and returned with its weights."""
    from trinity.trainer.checkpoint_merge import (
        CheckpointFormatError,
        load_fsdp_state_dict_from_verl_checkpoint,
    )

    while True:
        directory = ckpt.step_dir(job_dir, version)
        try:
            state = load_fsdp_state_dict_from_verl_checkpoint(directory / "actor")
            if directory.exists():  # still there: it was there throughout (renamed away whole)
                return version, state
        except (FileNotFoundError, CheckpointFormatError):
            if directory.exists():
                raise
        newest = latest_on_disk(job_dir)
        if newest <= version:
            raise FileNotFoundError(
                f"policy version {version} ({directory}) was deleted and no newer one was "
                f"published in {job_dir}"
            )
        version = newest


class WeightReceiver:
    """The explorer's end: fetches the version a step needs and returns full weights."""

    def __init__(
        self,
        config: Config,
        job_dir: Path,
        synchronizer: Any,
        model_dir: str,
        logger: logging.Logger | None = None,
        engines: Any = None,
    ) -> None:
        """``engines``: the explorer's ``RolloutEngines``; with ``sync_method: nccl`` in
        mode both they join the broadcast group (in the background) and receive there."""
        self.config = config
        self.job_dir = Path(job_dir)
        self.sync = synchronizer
        self.model_dir = model_dir
        self.logger = logger or logging.getLogger("trinity.sync")
        self._applier = None
        self._slot_reader = SlotReader()  # maps the shared-memory slot once it is used
        self._cuda_reader = CudaSlotReader()  # opens the trainer's GPU buffer (one GPU)
        self._reading = False
        self.collective = None
        if (
            engines is not None
            and config.mode == "both"
            and config.synchronizer.sync_method == "nccl"
            and not same_gpu(config)
        ):
            from trinity.sync.collective import WeightGroupReceiver

            self.collective = WeightGroupReceiver(
                config, synchronizer, engines, self.full_weights, self.logger
            )

    # ---------------------------------------------------------------- schedule
    def before_step(self, step: int, current: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """Weights explore step ``step`` should use instead of version ``current``, or None
        to keep the current ones."""
        syn = self.config.synchronizer
        if self.config.mode not in ("both", "explore"):
            return None
        if syn.sync_style in ("dynamic", "trainer_driven", "fully_async"):
            return self.newest(current)
        if syn.sync_style == "explorer_driven":
            if not explorer_sync_point(step, syn.sync_interval, syn.sync_offset):
                return None
            if self.config.mode == "explore" or current >= step - 1:
                # across processes nobody to ask; or nothing newer than step - 1 can exist
                return self.newest(current)
            return self.request(current)
        wanted = required_version(step, syn.sync_interval, syn.sync_offset)
        if wanted <= current:
            return None
        if self.config.mode == "explore" and not trainer_running(self.job_dir):
            return self.newest(current)  # no trainer to wait for: take what exists
        return self.wait_for(wanted, current)

    def wait_for(self, version: int, current: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """Block until version >= ``version`` exists (or the trainer has finished)."""
        import ray

        timeout = self.config.synchronizer.sync_timeout
        if self.config.mode == "both":
            got, weights = ray.get(self.sync.wait_for.remote(version, timeout))
            return self._fetch(got, weights, current)
        deadline = time.monotonic() + timeout
        while (got := latest_on_disk(self.job_dir)) < version and trainer_running(self.job_dir):
            if time.monotonic() > deadline:
                raise SyncTimeout(
                    f"no policy version >= {version} in {self.job_dir} after {timeout:.0f}s "
                    f"(have {got}); raise synchronizer.sync_timeout if the trainer is slow"
                )
            time.sleep(POLL_S)
        return self._fetch(got, None, current)

    def request(self, current: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """``explorer_driven``: ask the trainer for its current weights and wait for a
        version newer than ``current`` (at most ``sync_timeout``; then keep ``current``)."""
        import ray

        timeout = self.config.synchronizer.sync_timeout
        got, weights = ray.get(self.sync.request.remote(current, timeout))
        if got <= current:
            self.logger.warning(
                "the trainer answered no weight request within %.0fs; exploring on with "
                "policy version %d and asking again at the next sync point",
                timeout,
                current,
            )
        return self._fetch(got, weights, current)

    def newest(self, current: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """The newest published weights if they are newer than ``current``; never waits."""
        import ray

        if self.config.mode == "both":
            got, weights = ray.get(self.sync.latest.remote())
            return self._fetch(got, weights, current)
        return self._fetch(latest_on_disk(self.job_dir), None, current)

    # ---------------------------------------------------------------- weights
    def _fetch(
        self, version: int, weights: list[Any] | None, current: int
    ) -> tuple[int, dict[str, torch.Tensor] | None] | None:
        """(version, full weights), or (version, None) when the broadcast already
        installed them in every engine."""
        import ray

        if version <= current:
            return None
        if self.collective is not None:
            return self.collective.receive(), None
        slots = (SlotVersion, CudaSlotVersion)
        if weights is not None and isinstance(weights[0], slots):
            # the slot's version now (maybe newer), kept there until release()
            version, weights = ray.get(
                self.sync.begin_read.remote(self.config.synchronizer.sync_timeout)
            )
            self._reading = True
        if weights is not None and isinstance(weights[0], CudaSlotVersion):
            state = self._cuda_reader.read(weights[0])  # views of the trainer's GPU buffer
        elif weights is not None and isinstance(weights[0], SlotVersion):
            state = self._slot_reader.read(weights[0])
        elif weights is not None:  # also when a full slot sent the trainer to the store
            state = from_object_store(ray.get(weights[0]))
        else:  # checkpoint sync: the trainer wrote the weights to disk
            version, state = read_version(self.job_dir, version)
        return version, self.full_weights(state)

    def release(self) -> None:
        """Call once the weights returned by ``before_step`` / ``wait_for`` / ``newest``
        are copied: with the shared-memory slot, the trainer may then overwrite them."""
        if self._reading:
            import ray

            self._reading = False
            ray.get(self.sync.end_read.remote())

    def full_weights(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` as a full state dict: LoRA adapters are merged into the base weights."""
        if not any(".lora_A." in k for k in state):
            return state
        if self._applier is None:
            self._applier = self._build_applier()
        return self._applier.full_state_dict(state)

    def _build_applier(self):
        from trinity.rollout.multimodal import model_class
        from trinity.trainer import lora

        if not self.config.model.lora_configs:
            raise lora.LoRAError("received LoRA adapter weights but model.lora_configs is empty")
        import torch

        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[self.config.model.dtype]
        base = model_class(self.model_dir).from_pretrained(self.model_dir, dtype=dtype)
        scale = lora.config_scaling(self.config.model.lora_configs[0])
        return lora.AdapterApplier(base.state_dict(), scale)

    def close(self) -> None:
        """Leave the broadcast group (``nccl``) at the end of the explorer's run."""
        self._slot_reader.close()
        self._cuda_reader.close()
        if self.collective is not None:
            self.collective.close()
            self.collective = None

    def initial_adapter(self) -> dict[str, torch.Tensor] | None:
        """Full weights of version 0 when training continues a saved adapter (else None:
        a new adapter starts at zero, so the base weights are version 0)."""
        from trinity.trainer import lora

        adapters = self.config.model.lora_configs
        if not adapters or not adapters[0].path:
            return None
        return self.full_weights(lora.load_adapter_dir(Path(adapters[0].path)))


def slot_writer(config: Config, synchronizer: Any) -> SlotWriter | CudaSlotWriter | None:
    """The trainer's end of the slot: the GPU buffer when the trainer and the explorer
    share one GPU (:func:`same_gpu`), else the shared-memory file when the run's driver
    made one."""
    import ray

    if same_gpu(config):
        return CudaSlotWriter()
    if config.mode != "both" or config.synchronizer.sync_method != "memory":
        return None
    path = ray.get(synchronizer.slot_path.remote())
    return SlotWriter(path) if path else None


def publish(
    trainer: Any,
    config: Config,
    job_dir: Path,
    synchronizer: Any,
    step: int,
    sender: Any = None,
    slot: SlotWriter | CudaSlotWriter | None = None,
) -> None:
    """The trainer's end: make the policy of ``step`` available as version ``step``;
    ``sender``: the ``WeightSender`` of a broadcast run (``nccl``); ``slot``: the
    shared-memory slot of a one-node ``memory`` run (:func:`slot_writer`)."""
    import ray

    weights = None
    if config.synchronizer.sync_method == "checkpoint":
        trainer.save_state_dict(job_dir, step)
    elif sender is not None:  # kept by the sender until the explorer asks for it
        sender.stage(step, trainer.weights_for_sync())
    elif slot is not None and slot.usable:
        # no explorer starts reading until publish (a failed write fails the run)
        ray.get(synchronizer.begin_write.remote(config.synchronizer.sync_timeout))
        state = trainer.weights_for_sync()
        try:
            weights = [slot.write(state)]
        except SlotFull as exc:
            slot.usable = False
            _logger.warning("%s; the weights go through Ray's object store instead", exc)
            weights = [ray.put(to_object_store(state))]
    else:
        weights = [ray.put(to_object_store(trainer.weights_for_sync()))]
    ray.get(synchronizer.publish.remote(step, weights))
