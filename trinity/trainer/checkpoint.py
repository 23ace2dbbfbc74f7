"""Checkpoint layout on disk, written atomically.

    <job_dir>/
      global_step_<N>/actor/
        model_world_size_<W>_rank_<r>.pt      parameters (this rank's part)
        optim_world_size_<W>_rank_<r>.pt      optimizer state
        extra_state_world_size_<W>_rank_<r>.pt  LR schedule, RNG states, step
        fsdp_config.json                      {"world_size": W, ...}
        huggingface/                          config + tokenizer (+ model.safetensors
                                              with save_contents hf_model, after an
                                              export or ``trinity convert``)
      latest_checkpointed_iteration.txt       newest complete full checkpoint
      latest_state_dict_iteration.txt         newest published weights (checkpoint sync)
      trainer_meta.json, explorer_meta.json

A weights-only save (``sync_method: checkpoint``) holds the model file alone, and
``fsdp_config.json`` says ``"full": false``. It never replaces a full checkpoint's files:
when the full checkpoint of the same step holds the same weights, only the pointer moves
(``actor_checkpoint.save_state_dict``). Once a newer one is published, a weights-only
save no pointer names is deleted (:func:`prune_weights_only`); full checkpoints follow
``max_actor_ckpt_to_keep`` (:func:`prune_checkpoints`), and a step a pointer names stays.

Commit. A step is written into a temporary sibling ``.global_step_<N>.<random>/``, its
files and directories are fsynced, and only then is it renamed to ``global_step_<N>``
(:func:`replace_dir`). When ``global_step_<N>`` exists already (a weights-only save of the
same step, the critic written just before, a step an interrupted run left behind), the
new directory takes over the old one's other entries (hard links) and the two are
swapped in one ``renameat2(RENAME_EXCHANGE)``; where that call is missing (not Linux,
some network file systems) the old directory is moved aside to
``.global_step_<N>.replaced`` only after the new one is complete, and the next save puts
it back if a crash came in between. The "latest" pointers move after the rename, each
written to a temporary file, fsynced and renamed over the old one. A crash (even
SIGKILL, or power loss) at any point leaves every pointer naming a complete directory.
An export into an existing step (``huggingface/``) is written beside it and swapped in
the same way (:func:`write_entries_atomic`).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

LATEST_CHECKPOINT = "latest_checkpointed_iteration.txt"
LATEST_STATE_DICT = "latest_state_dict_iteration.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_REPLACED = ".replaced"  # suffix of a step moved aside while its successor takes its place
_RENAME_EXCHANGE = 2  # linux/fs.h


def step_dir(job_dir: Path, step: int) -> Path:
    return Path(job_dir) / f"global_step_{step}"


def shard_name(kind: str, world_size: int, rank: int) -> str:
    return f"{kind}_world_size_{world_size}_rank_{rank}.pt"


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text``: a temporary file, fsynced, renamed over it, and the
    directory fsynced (so the rename itself survives a power loss)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Every file and directory under ``root`` (and ``root``) on disk."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(directory))


def replace_dir(new: Path, final: Path) -> None:
    """Make the directory ``new`` appear at ``final`` at once: fsync ``new``, rename it
    into place and fsync the parent. An existing ``final`` is swapped out atomically
    (``RENAME_EXCHANGE``) or, where that is missing, moved aside only now that ``new`` is
    complete (``restore_replaced`` undoes a crash in between); then it is deleted."""
    new, final = Path(new), Path(final)
    fsync_tree(new)
    if not final.exists():
        os.rename(new, final)
    elif _exchange(new, final):  # ``new`` now holds the old directory
        fsync_dir(final.parent)
        shutil.rmtree(new)
    else:
        aside = final.with_name(f".{final.name}{_REPLACED}")
        shutil.rmtree(aside, ignore_errors=True)
        os.rename(final, aside)
        os.rename(new, final)
        fsync_dir(final.parent)
        shutil.rmtree(aside)
    fsync_dir(final.parent)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directory entries atomically (Linux ``renameat2``); False where the
    system or the file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:  # glibc < 2.28, musl
        return False
    at_fdcwd = -100
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"cannot swap {a} and {b}: {os.strerror(code)}")


def restore_replaced(job_dir: Path) -> list[int]:
    """Undo a crash between moving a step aside and renaming its successor into place
    (:func:`replace_dir` without ``RENAME_EXCHANGE``), and delete what interrupted saves
    and deletions left behind; the same in every step's ``actor/`` (an interrupted
    export, :func:`write_entries_atomic`). Run by the job's one writer before it saves."""
    job_dir = Path(job_dir)
    restored = _restore_hidden(job_dir, ".global_step_*")
    for step in list_steps(job_dir):
        if (step_dir(job_dir, step) / "actor").is_dir():
            restore_entries(step_dir(job_dir, step) / "actor")
    return sorted(int(name.rsplit("_", 1)[1]) for name in restored)


def restore_entries(parent: Path) -> list[str]:
    """:func:`restore_replaced` for the entries :func:`write_entries_atomic` writes into
    ``parent``; returns the names put back."""
    return _restore_hidden(Path(parent), ".*")


def _restore_hidden(directory: Path, pattern: str) -> list[str]:
    """Rename each ``.<name>.replaced`` back to ``<name>`` where that is missing; delete
    the other hidden directories matching ``pattern``."""
    restored = []
    for path in directory.glob(pattern):
        name = path.name[1 : -len(_REPLACED)]
        if path.name.endswith(_REPLACED) and not (directory / name).exists():
            os.rename(path, directory / name)
            restored.append(name)
        elif path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
    if restored:
        fsync_dir(directory)
    return restored


def write_entries_atomic(parent: Path, write: Callable[[Path], None]) -> None:
    """Let ``write(tmp)`` fill a new hidden directory of ``parent`` with directories,
    then put each in place of its namesake in ``parent`` (:func:`replace_dir`). A crash
    (even SIGKILL) leaves each one whole, the old or the new (or, without
    ``RENAME_EXCHANGE``, the old moved aside: :func:`restore_entries` puts it back, as
    does the next call). For one writer at a time."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    restore_entries(parent)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=".writing."))
    try:
        write(tmp)
        for entry in sorted(tmp.iterdir()):
            replace_dir(entry, parent / entry.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


def read_json(path: Path) -> dict[str, Any] | None:
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def read_latest(job_dir: Path, pointer: str = LATEST_CHECKPOINT) -> int | None:
    path = Path(job_dir) / pointer
    if not path.exists():
        return None
    text = path.read_text().strip()
    return int(text) if text.isdigit() else None


def list_steps(job_dir: Path) -> list[int]:
    job_dir = Path(job_dir)
    if not job_dir.exists():
        return []
    steps = [int(m.group(1)) for p in job_dir.iterdir() if (m := _STEP_DIR.match(p.name))]
    return sorted(steps)


def save_actor_checkpoint(
    job_dir: Path,
    step: int,
    *,
    model_state: dict[str, torch.Tensor],
    optim_state: dict[str, Any] | None,
    extra_state: dict[str, Any] | None,
    hf_save: Any | None = None,
    pointer: str = LATEST_CHECKPOINT,
) -> Path:
    """Write a one-rank ``global_step_<step>/actor`` atomically and move ``pointer`` to ``step``.

    ``hf_save(dir)`` writes the Hugging Face config and tokenizer into ``huggingface/``.
    """
    staging = begin_checkpoint(job_dir, step)
    try:
        write_rank_shards(staging, 1, 0, model_state, optim_state, extra_state)
        return commit_checkpoint(job_dir, step, staging, 1, hf_save=hf_save, pointer=pointer)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def begin_checkpoint(job_dir: Path, step: int) -> Path:
    """A fresh temporary sibling of ``global_step_<step>`` that the ranks write into."""
    job_dir = Path(job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    restore_replaced(job_dir)
    staging = Path(tempfile.mkdtemp(dir=job_dir, prefix=f".global_step_{step}."))
    (staging / "actor").mkdir()
    return staging


def on_cpu(value: Any) -> Any:
    """``value`` (a state dict, possibly nested in dicts, lists and tuples) with every
    tensor on the CPU, so a checkpoint written on a GPU loads on either device."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu() if value.device.type != "cpu" else value
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [on_cpu(v) for v in value]
    if isinstance(value, tuple):
        items = [on_cpu(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def write_rank_shards(
    staging: Path,
    world_size: int,
    rank: int,
    model_state: dict[str, torch.Tensor],
    optim_state: dict[str, Any] | None,
    extra_state: dict[str, Any] | None,
) -> None:
    """Rank ``rank``'s model, optimizer and extra state files (plain tensors only, saved
    on the CPU whatever device they are on)."""
    import torch  # here: the driver reads this module's pointers and never imports torch

    actor = Path(staging) / "actor"
    for kind, state in (
        ("model", model_state),
        ("optim", optim_state),
        ("extra_state", extra_state),
    ):
        if state is not None:
            # fsynced by the rank that wrote it (rank 0 may see another node's file
            # system through a network mount)
            with open(actor / shard_name(kind, world_size, rank), "wb") as f:
                torch.save(on_cpu(state), f)
                f.flush()
                os.fsync(f.fileno())


def commit_checkpoint(
    job_dir: Path,
    step: int,
    staging: Path,
    world_size: int,
    *,
    hf_save: Any | None = None,
    pointer: str = LATEST_CHECKPOINT,
) -> Path:
    """Once every rank has written its files: rename ``staging`` into place as
    ``global_step_<step>`` (:func:`replace_dir`), then move ``pointer`` to ``step``.

    Entries of an existing ``global_step_<step>`` other than ``actor`` (the critic) are
    kept: the new directory links them before the swap."""
    job_dir = Path(job_dir)
    staging = Path(staging)
    actor = staging / "actor"
    missing = [
        r for r in range(world_size) if not (actor / shard_name("model", world_size, r)).exists()
    ]
    if missing:
        raise FileNotFoundError(f"ranks {missing} wrote no model file into {actor}")
    # "full": a checkpoint to resume from (its optimizer state may be left out by
    # save_contents), not a weights-only save for checkpoint synchronisation
    layout = {"world_size": world_size, "full": pointer == LATEST_CHECKPOINT}
    (actor / "fsdp_config.json").write_text(json.dumps(layout))
    if hf_save is not None:
        hf_save(actor / "huggingface")
    final = step_dir(job_dir, step)
    if final.exists():  # e.g. a weights-only save of the step, superseded; its critic
        for entry in final.iterdir():
            if not entry.name.startswith(".") and not (staging / entry.name).exists():
                _link_tree(entry, staging / entry.name)
    replace_dir(staging, final)
    write_text_atomic(job_dir / pointer, str(step))
    return final / "actor"


def _link_tree(source: Path, target: Path) -> None:
    """``source`` at ``target`` as hard links (copies where links are refused)."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    if source.is_dir():
        shutil.copytree(source, target, copy_function=link)
    else:
        link(str(source), str(target))


def checkpoint_world_size(job_dir: Path, step: int) -> int:
    """The number of trainer ranks that wrote ``global_step_<step>``."""
    config = read_json(step_dir(job_dir, step) / "actor" / "fsdp_config.json")
    return int(config["world_size"]) if config else 1


def prune_checkpoints(job_dir: Path, keep: int | None) -> list[int]:
    """Delete the oldest full checkpoints beyond ``keep`` (None or <= 0 keeps all); a
    step a pointer names stays."""
    if not keep or keep <= 0:
        return []
    named = _named_steps(job_dir)
    complete = [s for s in list_steps(job_dir) if _is_full(job_dir, s)]
    removed = [s for s in complete[:-keep] if s not in named]
    for step in removed:
        _remove_step(job_dir, step)
    return removed


def prune_weights_only(job_dir: Path) -> list[int]:
    """Delete the weights-only saves no pointer names. Their one reader, an explorer
    taking a version, is handed the newer one a pointer names when the files it was
    about to read are gone (:func:`trinity.sync.weights.read_version`)."""
    named = _named_steps(job_dir)
    removed = [s for s in list_steps(job_dir) if s not in named and _is_weights_only(job_dir, s)]
    for step in removed:
        _remove_step(job_dir, step)
    return removed


def _named_steps(job_dir: Path) -> set[int | None]:
    return {read_latest(job_dir, p) for p in (LATEST_CHECKPOINT, LATEST_STATE_DICT)}


def _remove_step(job_dir: Path, step: int) -> None:
    """Renamed out of sight first: a crash mid-delete leaves no half step behind (the
    leftover is deleted by the next save, :func:`restore_replaced`)."""
    doomed = Path(tempfile.mkdtemp(dir=job_dir, prefix=f".global_step_{step}.removing."))
    os.rename(step_dir(job_dir, step), doomed / "step")
    shutil.rmtree(doomed, ignore_errors=True)


def prune_critics(job_dir: Path, keep: int | None) -> list[int]:
    """Delete the ``critic/`` of the full checkpoints older than the newest ``keep`` that
    hold one (None or <= 0 keeps all); the actor's files stay."""
    if not keep or keep <= 0:
        return []
    with_critic = [
        s
        for s in list_steps(job_dir)
        if _is_full(job_dir, s) and (step_dir(job_dir, s) / "critic").is_dir()
    ]
    removed = []
    for step in with_critic[:-keep]:
        doomed = Path(tempfile.mkdtemp(dir=job_dir, prefix=f".global_step_{step}.removing."))
        os.rename(step_dir(job_dir, step) / "critic", doomed / "critic")
        shutil.rmtree(doomed, ignore_errors=True)
        removed.append(step)
    return removed


def _is_full(job_dir: Path, step: int) -> bool:
    actor = step_dir(job_dir, step) / "actor"
    layout = read_json(actor / "fsdp_config.json") or {}
    if "full" in layout:
        return bool(layout["full"])
    return any(p.name.startswith("optim_world_size_") for p in actor.glob("*.pt"))


def _is_weights_only(job_dir: Path, step: int) -> bool:
    """A committed weights-only save (not a step directory that holds no actor yet,
    such as a critic saved just before its actor)."""
    committed = (step_dir(job_dir, step) / "actor" / "fsdp_config.json").exists()
    return committed and not _is_full(job_dir, step)


def load_actor_shard(job_dir: Path, step: int, kind: str, world_size: int = 1, rank: int = 0):
    import torch

    path = step_dir(job_dir, step) / "actor" / shard_name(kind, world_size, rank)
    return torch.load(path, map_location="cpu", weights_only=True)


def load_hf_weights(job_dir: Path, step: int) -> dict[str, torch.Tensor] | None:
    """The full weights in ``global_step_<step>/actor/huggingface/*.safetensors`` (as
    ``save_pretrained`` wrote them: tied copies once); None when it holds none."""
    from safetensors.torch import load_file

    files = sorted((step_dir(job_dir, step) / "actor" / "huggingface").glob("*.safetensors"))
    if not files:
        return None
    state: dict[str, torch.Tensor] = {}
    for path in files:
        state.update(load_file(path, device="cpu"))
    return state
