"""Weight synchronisation by collective broadcast: ``synchronizer.sync_method: nccl``.

Past 400 lines on purpose: packing, the layout message, the group, sender and receiver
implement one handshake, described below.

The weight group is a ``torch.distributed`` process group of its own, independent of
the trainer's data-parallel group (it is built directly on a ``TCPStore``, so a process
that is already in the default group joins it too):

    rank 0        the trainer's rank 0, which publishes       (:class:`WeightSender`)
    rank 1        the explorer, holding rollout engine 0      (:class:`WeightGroupReceiver`)
    rank 1 + i    the actor of rollout engine i (1 <= i < engine_num); with LoRA these
                  do not join: the explorer merges the adapter and hands them full weights

Backend nccl when the trainer sees CUDA, gloo otherwise. Rank 0 hosts the store on its
node at a free port and passes the address on through the synchronizer.

Handshake. No member ever waits for another's training or rollout loop:

* publish ``v``: the trainer packs its weights (rollout dtype, sorted names, a few flat
  byte buckets), keeps them as the newest snapshot, tells the synchronizer ``v`` and
  trains on;
* take: once the synchronizer has a version the explorer needs, the explorer asks it for
  a transfer; a thread of rank 0 that serves these requests broadcasts the newest
  snapshot (its header says which version) and every other member receives and loads it;
* close: at the end of its run the explorer asks for a closing transfer, a header with
  version -1; after this last collective every member drops the group.

Joining and every broadcast wait at most ``synchronizer.sync_timeout`` seconds (the
process group's timeout) and then fail with :class:`WeightBroadcastError`.

Wire format of a transfer, all from rank 0: ``int64[2]`` header (version, layout bytes),
the layout as UTF-8 JSON (:func:`encode_layout`: per tensor name, dtype, shape, bucket,
byte offset; the bucket sizes), then each ``uint8`` bucket. Tensors travel as raw bytes,
so any dtype does. The layout is JSON, not pickle: whoever reaches the store's port
could otherwise make every member run code of their choosing.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trinity.config import Config
from trinity.sync.cuda_slot import same_gpu
from trinity.sync.errors import WeightBroadcastError

BUCKET_BYTES = 256 << 20
SEND, CLOSE = "send", "close"
_ALIGN = 16  # byte offset of each tensor in its bucket, so a dtype view is aligned
_POLL_S = 2.0  # the sender's long poll for transfer requests


@dataclass(frozen=True)
class GroupAddress:
    """Where the weight group meets: rank 0's store, the group size and its backend."""

    host: str
    port: int
    world_size: int
    backend: str


def group_size(config: Config) -> int:
    """Members of the weight group: the trainer, the explorer and (without LoRA) every
    engine actor."""
    if config.model.lora_configs:
        return 2
    return 1 + config.explorer.rollout_model.engine_num


# ------------------------------------------------------------------------ packing
@dataclass
class Packed:
    """A state dict as flat byte buckets; ``layout`` rows are
    (name, dtype, shape, bucket index, byte offset)."""

    version: int
    layout: list[tuple[str, torch.dtype, tuple[int, ...], int, int]]
    buckets: list[torch.Tensor]  # (nbytes,) uint8 each


def pack(
    state: Mapping[str, torch.Tensor],
    version: int,
    device: torch.device | None = None,
    bucket_bytes: int = BUCKET_BYTES,
) -> Packed:
    """``state`` in sorted name order, copied into buckets of about ``bucket_bytes``
    (a larger tensor gets a bucket of its own)."""
    layout, sizes = [], [0]
    for name in sorted(state):
        t = state[name]
        nbytes = t.numel() * t.element_size()
        if sizes[-1] and sizes[-1] + nbytes > bucket_bytes:
            sizes.append(0)
        layout.append((name, t.dtype, tuple(t.shape), len(sizes) - 1, sizes[-1]))
        sizes[-1] += -(-nbytes // _ALIGN) * _ALIGN
    buckets = [torch.empty(size, dtype=torch.uint8, device=device) for size in sizes]
    for name, _, _, index, offset in layout:
        flat = _bytes(state[name])
        buckets[index][offset : offset + flat.numel()].copy_(flat)
    return Packed(version, layout, buckets)


def unpack(packed: Packed) -> dict[str, torch.Tensor]:
    """The state dict of ``packed``: views into its buckets."""
    state = {}
    for name, dtype, shape, index, offset in packed.layout:
        numel = 1
        for dim in shape:
            numel *= dim
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        raw = packed.buckets[index][offset : offset + nbytes]
        state[name] = raw.view(dtype).reshape(shape)
    return state


def encode_layout(packed: Packed) -> bytes:
    """``packed``'s layout and bucket sizes as UTF-8 JSON (what a receiver needs to
    rebuild its tensors)."""
    rows = [
        [name, str(dtype).removeprefix("torch."), list(shape), index, offset]
        for name, dtype, shape, index, offset in packed.layout
    ]
    sizes = [b.numel() for b in packed.buckets]
    return json.dumps({"tensors": rows, "buckets": sizes}).encode()


def decode_layout(
    raw: bytes,
) -> tuple[list[tuple[str, torch.dtype, tuple[int, ...], int, int]], list[int]]:
    """(layout rows, bucket sizes) of :func:`encode_layout`'s bytes; anything else (a
    pickled layout of an older sender, garbage) is refused."""
    try:
        meta = json.loads(raw.decode("utf-8"))
        layout = []
        for name, dtype, shape, index, offset in meta["tensors"]:
            torch_dtype = getattr(torch, dtype, None)
            if not isinstance(torch_dtype, torch.dtype):
                raise ValueError(f"{dtype!r} is no torch dtype")
            layout.append(
                (str(name), torch_dtype, tuple(int(d) for d in shape), int(index), int(offset))
            )
        sizes = [int(size) for size in meta["buckets"]]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise WeightBroadcastError(
            f"the weight layout received ({len(raw)} bytes, starting {raw[:16]!r}) is not "
            f"the JSON layout of this trinity version ({exc}); are the trainer and the "
            "explorer running the same trinity version?"
        ) from None
    return layout, sizes


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def fingerprint(state: Mapping[str, torch.Tensor], names: list[str] | None = None) -> str:
    """A hash of the names, dtypes and bytes of ``state`` (of ``names`` only when given):
    equal fingerprints mean bit-identical weights."""
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(names if names is not None else state):
        t = state[name]
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(_bytes(t).cpu().numpy())
    return digest.hexdigest()


# ------------------------------------------------------------------------ the group
def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def host_store(host: str, world_size: int, timeout_s: float) -> tuple[Any, GroupAddress]:
    """Rank 0's ``TCPStore`` on a free port of ``host`` and the address others join."""
    store = dist.TCPStore(
        host,
        0,
        world_size,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return store, GroupAddress(host, store.port, world_size, default_backend())


class WeightGroup:
    """This process's membership of the weight group (rank 0 sends, others receive).

    Joining returns once all ``world_size`` members have joined (at most
    ``timeout_s``); rank 0 passes the store it hosts.
    """

    def __init__(
        self, address: GroupAddress, rank: int, timeout_s: float, store: Any = None
    ) -> None:
        self.address, self.rank, self.timeout_s = address, rank, timeout_s
        timeout = datetime.timedelta(seconds=timeout_s)
        self.device = torch.device("cpu")
        try:
            if store is None:
                store = dist.TCPStore(
                    address.host, address.port, address.world_size, is_master=False, timeout=timeout
                )
            prefixed = dist.PrefixStore("trinity_weights", store)
            if address.backend == "nccl":
                self.device = torch.device("cuda", torch.cuda.current_device())
                options = dist.ProcessGroupNCCL.Options()
                options._timeout = timeout
                self.pg = dist.ProcessGroupNCCL(prefixed, rank, address.world_size, options)
            else:
                self.pg = dist.ProcessGroupGloo(prefixed, rank, address.world_size, timeout)
        except (RuntimeError, dist.DistStoreError) as exc:
            raise WeightBroadcastError(
                f"rank {rank} could not join the weight group at {address.host}:{address.port} "
                f"({address.world_size} members, {address.backend}) within synchronizer."
                f"sync_timeout={timeout_s:g}s: {exc}"
            ) from exc
        self._store = store  # rank 0's store must outlive the group's rendezvous

    def send(self, packed: Packed) -> None:
        """Broadcast ``packed`` to every other member (rank 0 only)."""
        meta = encode_layout(packed)
        self._broadcast(
            torch.tensor([packed.version, len(meta)], dtype=torch.int64), packed.version
        )
        self._broadcast(torch.frombuffer(bytearray(meta), dtype=torch.uint8), packed.version)
        for bucket in packed.buckets:
            self._broadcast(bucket, packed.version)

    def send_close(self) -> None:
        self._broadcast(torch.tensor([-1, 0], dtype=torch.int64), -1)

    def receive(self) -> tuple[int, dict[str, torch.Tensor] | None]:
        """The next broadcast: (version, state dict), or (-1, None) when the group closes."""
        header = torch.zeros(2, dtype=torch.int64)
        self._broadcast(header, None)
        version, meta_bytes = (int(v) for v in header.cpu())
        if version < 0:
            return -1, None
        meta = torch.empty(meta_bytes, dtype=torch.uint8)
        self._broadcast(meta, version)
        layout, sizes = decode_layout(meta.cpu().numpy().tobytes())
        buckets = [torch.empty(size, dtype=torch.uint8, device=self.device) for size in sizes]
        for bucket in buckets:
            self._broadcast(bucket, version)
        return version, unpack(Packed(version, layout, buckets))

    def _broadcast(self, tensor: torch.Tensor, version: int | None) -> None:
        on_device = tensor.to(self.device)
        options = dist.BroadcastOptions()
        options.rootRank = 0
        try:
            self.pg.broadcast([on_device], options).wait()
        except RuntimeError as exc:
            what = f"policy version {version}" if version is not None else "the next weights"
            raise WeightBroadcastError(
                f"the broadcast of {what} did not complete on rank {self.rank} of the weight "
                f"group (synchronizer.sync_timeout={self.timeout_s:g}s; rank 0 is the trainer, "
                f"rank 1 the explorer; see their logs): {exc}"
            ) from exc
        if on_device is not tensor:
            tensor.copy_(on_device)

    def close(self) -> None:
        """Drop the group. Called after the closing broadcast, the last collective, so no
        member has a receive in flight when the others close their connections."""
        pg, self.pg = getattr(self, "pg", None), None
        if pg is not None and self.address.backend == "nccl":
            pg.shutdown()
        del pg
        self._store = None


# ------------------------------------------------------------------------ the trainer's end
class WeightSender:
    """Rank 0 of the weight group, inside the trainer's rank-0 process.

    :meth:`stage` keeps the newest published weights; a daemon thread joins the group
    and serves the explorer's transfer requests from the synchronizer until the closing
    one, so the training loop never waits for the explorer.
    """

    def __init__(
        self,
        config: Config,
        synchronizer: Any,
        logger: logging.Logger,
        host: str | None = None,
    ) -> None:
        import ray

        self.sync = synchronizer
        self.logger = logger
        self.timeout_s = float(config.synchronizer.sync_timeout)
        host = host or ray.util.get_node_ip_address()
        self._store, self.address = host_store(host, group_size(config), self.timeout_s)
        self._latest: Packed | None = None
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        ray.get(synchronizer.open_weight_group.remote(self.address))
        self._thread = threading.Thread(target=self._serve, name="weight-sender", daemon=True)
        self._thread.start()

    def stage(self, version: int, state: Mapping[str, torch.Tensor]) -> None:
        """Make ``state`` the weights of ``version``, sent on the explorer's next request."""
        if self.error is not None:
            raise WeightBroadcastError(
                f"the weight sender failed earlier: {self.error}"
            ) from self.error
        device = (
            torch.device("cuda", torch.cuda.current_device())
            if self.address.backend == "nccl"
            else None
        )
        packed = pack(state, version, device)
        with self._lock:
            self._latest = packed
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug("policy version %d fingerprint %s", version, fingerprint(state))

    def _serve(self) -> None:
        import ray

        group = None
        try:
            group = WeightGroup(self.address, 0, self.timeout_s, store=self._store)
            self.logger.info(
                "weight group ready: %d members over %s at %s:%d",
                self.address.world_size,
                self.address.backend,
                self.address.host,
                self.address.port,
            )
            while (kind := ray.get(self.sync.next_transfer.remote(_POLL_S))) != CLOSE:
                if kind != SEND:
                    continue
                with self._lock:
                    packed = self._latest
                if packed is None:  # the synchronizer asks only for published versions
                    raise WeightBroadcastError("asked to send weights before any were published")
                start = time.perf_counter()
                group.send(packed)
                self.logger.info(
                    "broadcast policy version %d (%.1f MB) in %.2fs",
                    packed.version,
                    sum(b.numel() for b in packed.buckets) / 1e6,
                    time.perf_counter() - start,
                )
            group.send_close()
            self.logger.info("weight group closed")
        except Exception as exc:  # noqa: BLE001 - reported to the explorer through the synchronizer
            self.error = exc
            self.logger.exception("the weight sender stopped")
            message = f"the trainer's weight sender failed: {exc}"
            try:
                ray.get(self.sync.weight_group_failed.remote(message))
            except ray.exceptions.RayActorError:
                pass  # the run is over: nobody is left to tell
        finally:
            if group is not None:
                group.close()
            self._store = None


def start_sender(config: Config, synchronizer: Any, logger: logging.Logger) -> WeightSender | None:
    """The trainer's sender when this run synchronises by broadcast (mode both, nccl),
    except when the trainer and the explorer share one GPU: NCCL cannot broadcast
    between two processes on one device, so the weights go through the trainer's GPU
    buffer instead (``trinity.sync.weights.same_gpu``)."""
    if config.mode != "both" or config.synchronizer.sync_method != "nccl" or same_gpu(config):
        return None
    return WeightSender(config, synchronizer, logger)


# ------------------------------------------------------------------------ the explorer's end
class WeightGroupReceiver:
    """The explorer's side: it joins as rank 1 (its engine 0 and any in-process engines)
    and has every engine actor join as rank 1 + i, in a background thread so the
    explorer evaluates meanwhile; :meth:`receive` fetches and installs one version.

    ``full_weights`` turns received LoRA adapters into full weights.
    """

    def __init__(
        self,
        config: Config,
        synchronizer: Any,
        engines: Any,
        full_weights: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
        logger: logging.Logger,
    ) -> None:
        self.sync = synchronizer
        self.engines = engines
        self.full_weights = full_weights
        self.logger = logger
        self.timeout_s = float(config.synchronizer.sync_timeout)
        self.lora = bool(config.model.lora_configs)
        self.local = engines.in_process
        self.members = [] if self.lora else engines.in_actors
        self.group: WeightGroup | None = None
        self._join_error: BaseException | None = None
        self._joiner = threading.Thread(target=self._join, name="weight-group-join", daemon=True)
        self._joiner.start()

    def _join(self) -> None:
        import ray

        try:
            address = ray.get(self.sync.weight_group_address.remote(self.timeout_s))
            refs = [
                e.handle.join_weight_group.remote(address, 2 + i, self.timeout_s)
                for i, e in enumerate(self.members)
            ]
            self.group = WeightGroup(address, 1, self.timeout_s)
            ray.get(refs)
            self.logger.info("joined the weight group (%d members)", address.world_size)
        except Exception as exc:  # noqa: BLE001 - re-raised by the next receive
            self._join_error = exc

    def _joined(self) -> WeightGroup:
        self._joiner.join()
        if self._join_error is not None:
            raise WeightBroadcastError(
                f"the explorer could not join the weight group: {self._join_error}"
            ) from self._join_error
        assert self.group is not None
        return self.group

    def receive(self) -> int:
        """Ask for the newest published weights, receive them on every member, load
        them into every engine; returns their version."""
        import ray

        group = self._joined()
        start = time.perf_counter()
        ray.get(self.sync.request_transfer.remote(SEND))
        debug = self.logger.isEnabledFor(logging.DEBUG)
        refs = [e.handle.receive_weights.remote(debug) for e in self.members]
        version, state = group.receive()
        assert state is not None
        received = time.perf_counter() - start
        if self.lora:  # every engine gets the merged weights (remote ones by object store)
            self.engines.load_state_dict(self.full_weights(state), version)
        else:
            for engine in self.local:
                engine.load_state_dict(state, version)
        remote = ray.get(refs)
        for engine in self.members:
            engine.model_version = version
        self.logger.info(
            "received policy version %d by broadcast in %.2fs, loaded in %.2fs",
            version,
            received,
            time.perf_counter() - start - received,
        )
        if debug and not self.lora:
            names = list(state)
            prints = [fingerprint(e.model.state_dict(), names) for e in self.local]
            prints += [fp for _, fp in remote]
            for i, fp in enumerate(prints):
                self.logger.debug(
                    "engine %d holds policy version %d fingerprint %s", i, version, fp
                )
        return version

    def close(self) -> None:
        """The closing transfer: every member leaves the group."""
        import ray

        try:
            group = self._joined()
        except WeightBroadcastError as exc:
            self.logger.warning("no weight group to close: %s", exc)
            return
        ray.get(self.sync.request_transfer.remote(CLOSE))
        refs = [e.handle.receive_weights.remote(False) for e in self.members]
        version, _ = group.receive()
        ray.get(refs)
        group.close()
        self.group = None
        self.logger.info("left the weight group")


def receive_into(
    group: WeightGroup, engine: Any, want_fingerprint: bool
) -> tuple[int, str | None] | None:
    """An engine actor's side of a transfer: load the broadcast weights into ``engine``
    and return (version, fingerprint of what it now holds), or leave the group and
    return None on the closing transfer."""
    version, state = group.receive()
    if state is None:
        group.close()
        return None
    engine.load_state_dict(state, version)
    fp = fingerprint(engine.model.state_dict(), list(state)) if want_fingerprint else None
    return version, fp
