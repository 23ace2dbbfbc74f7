"""Experience <-> plain data, without pickle.

Two tensor encodings share one dtype vocabulary (``"int64"``, ``"bfloat16"``, ...):

- bytes: raw little-endian element bytes plus ``{"dtype", "shape"}`` (the SQL columns);
- JSON: ``{"dtype", "shape", "data"}`` with ``data`` the flattened values (JSON lines).

Both are exact: bytes bit for bit; JSON value for value (floats go through Python's
shortest-repr ``float``, exact for float16/32/64 and bfloat16, with -0.0 and
infinities kept; a NaN comes back as NaN without its sign and payload bits). ``info``, ``metrics`` and ``messages`` must be JSON-compatible: tuples
come back as lists and non-string dict keys as strings, as JSON does.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from trinity.buffer.errors import ExperienceCodecError
from trinity.types import EID, Experience

TENSOR_FIELDS = (
    "tokens",
    "logprobs",
    "action_mask",
    "advantages",
    "returns",
    "chosen",
    "rejected",
    "teacher_logprobs",
)
JSON_FIELDS = ("info", "metrics", "messages")

_DTYPES: dict[str, torch.dtype] = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    )
}


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise ExperienceCodecError(
            f"tensor dtype {dtype} cannot be stored; supported: {', '.join(_DTYPES)}"
        )
    return name


def dtype_from_name(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ExperienceCodecError(
            f"stored tensor has unknown dtype '{name}'; supported: {', '.join(_DTYPES)}"
        ) from None


def _byte_order_swap(raw: torch.Tensor, itemsize: int) -> torch.Tensor:
    """Reverse each element's bytes on big-endian hosts so stored bytes are little-endian."""
    if sys.byteorder == "little" or itemsize == 1:
        return raw
    return raw.reshape(-1, itemsize).flip(-1).reshape(-1)


def tensor_to_bytes(tensor: torch.Tensor) -> tuple[bytes, dict[str, Any]]:
    """Encode any-shape tensor as (little-endian bytes, ``{"dtype", "shape"}``)."""
    meta = {"dtype": dtype_name(tensor.dtype), "shape": list(tensor.shape)}
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    raw = _byte_order_swap(flat.view(torch.uint8), tensor.element_size())
    return raw.numpy().tobytes(), meta


def tensor_from_bytes(data: bytes, meta: dict[str, Any]) -> torch.Tensor:
    dtype = dtype_from_name(meta["dtype"])
    shape = [int(s) for s in meta["shape"]]
    if len(data) == 0:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return _byte_order_swap(raw, itemsize).view(dtype).reshape(shape)


def tensor_to_json(tensor: torch.Tensor) -> dict[str, Any]:
    """Encode a tensor as ``{"dtype", "shape", "data"}``; ``data`` is flattened."""
    return {
        "dtype": dtype_name(tensor.dtype),
        "shape": list(tensor.shape),
        "data": tensor.detach().cpu().reshape(-1).tolist(),
    }


def tensor_from_json(obj: dict[str, Any]) -> torch.Tensor:
    dtype = dtype_from_name(obj["dtype"])
    return torch.tensor(obj["data"], dtype=dtype).reshape([int(s) for s in obj["shape"]])


def check_json(value: Any, field: str) -> Any:
    """Return ``value`` if JSON can store it, else raise naming the field."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ExperienceCodecError(
            f"experience field '{field}' cannot be stored as JSON ({exc}); "
            "convert tensors/arrays to lists and objects to dicts before writing"
        ) from exc
    return value


def eid_to_dict(eid: EID) -> dict[str, Any]:
    return {"batch": eid.batch, "task": eid.task, "run": eid.run, "step": eid.step}


def experience_to_dict(exp: Experience) -> dict[str, Any]:
    """A JSON-ready dict holding every field of ``exp``."""
    out: dict[str, Any] = {}
    for name in TENSOR_FIELDS:
        value = getattr(exp, name)
        out[name] = None if value is None else tensor_to_json(value)
    out["prompt_length"] = int(exp.prompt_length)
    out["reward"] = None if exp.reward is None else float(exp.reward)
    out["eid"] = eid_to_dict(exp.eid)
    for name in JSON_FIELDS:
        out[name] = check_json(getattr(exp, name), name)
    out["prompt_text"] = exp.prompt_text
    out["response_text"] = exp.response_text
    out["temperature"] = None if exp.temperature is None else float(exp.temperature)
    # the images' tensors are stored once per digest beside the lines (buffer/media_store.py)
    out["media_digest"] = None if exp.media is None else exp.media.digest
    return out


def experience_from_dict(obj: dict[str, Any]) -> Experience:
    tensors = {
        name: None if obj.get(name) is None else tensor_from_json(obj[name])
        for name in TENSOR_FIELDS
        if name != "tokens"
    }
    return Experience(
        tokens=tensor_from_json(obj["tokens"]),
        prompt_length=int(obj["prompt_length"]),
        reward=obj.get("reward"),
        eid=EID(**obj.get("eid", {})),
        info=obj.get("info") or {},
        metrics=obj.get("metrics") or {},
        messages=obj.get("messages"),
        prompt_text=obj.get("prompt_text"),
        response_text=obj.get("response_text"),
        temperature=_optional_float(obj.get("temperature")),  # absent in older lines
        **tensors,
    )


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
