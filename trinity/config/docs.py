"""Render the config reference (``docs/config.md``) from the schema's help strings.

    python -m trinity.config.docs > docs/config.md

The reference is generated, so it cannot drift from the dataclasses; a test checks
that the committed file equals the rendered one.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from trinity.config import Config
from trinity.config.no_effect import NO_EFFECT, NO_EFFECT_ARGS

HEADER = """# Config reference

Every field of the YAML config, generated from the schema (`trinity/config/schema/`, with
veRL's `trainer.trainer_config` layout in `trinity/config/upstream/verl_layout.py`) by
`python -m trinity.config.docs > docs/config.md`. Keys are shown as dotted paths; list
items as `[]`. Defaults marked *derived* are computed by the resolve step (see
`docs/architecture.md`). `trinity run --config FILE --dry-run` prints a config with
every value resolved. Keys whose meaning starts with *no effect here* are accepted for
compatibility with configs written for veRL and vLLM and do nothing in this project
(`trinity/config/no_effect.py`); `trinity run` lists those a config sets. Tasksets
(`TasksetConfig`) and buffers (`ExperienceBufferConfig`) share the storage keys; a key
of the other kind (a queue setting on a taskset, a task setting on a buffer), which
Trinity-RFT's single storage type allows, is accepted and listed the same way
(`trinity/config/upstream/storage_kinds.py`). Beyond the
schema, `trinity run` and `--dry-run` check what the run will look up on this machine
(`trinity/config/lookups.py`): every workflow, reward-function, operator and monitor
name, every dataset path the mode reads, and that the job directory can be made; a miss
fails in one line naming the key, the value and what is valid.
"""


def _type_name(tp: Any) -> str:
    text = str(tp).replace("typing.", "")
    for prefix in ("trinity.config.schema.", "trinity.config.upstream."):
        text = text.replace(prefix, "")
    if isinstance(tp, type):
        return tp.__name__
    return text


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return "(section)" if dataclasses.is_dataclass(value) else repr(value)
    return "required"


def _nested_dataclass(tp: Any) -> type | None:
    """The dataclass inside ``tp`` (itself, Optional[...], or list[...])."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        found = _nested_dataclass(arg)
        if found is not None:
            return found
    return None


def _rows(cls: type, prefix: str, seen: set[type]) -> list[tuple[str, str, str, str]]:
    rows = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        nested = _nested_dataclass(tp)
        is_list = typing.get_origin(tp) is list or any(
            typing.get_origin(a) is list for a in typing.get_args(tp)
        )
        is_dict = typing.get_origin(tp) is dict
        help_text = f.metadata.get("help", "")
        if key in NO_EFFECT:
            help_text = f"no effect here ({NO_EFFECT[key]}): {help_text}"
        rows.append((key, _type_name(tp), _default(f), help_text))
        if nested is not None and nested not in seen:
            child = f"{key}[]." if is_list else (f"{key}.<name>." if is_dict else f"{key}.")
            rows.extend(_rows(nested, child, seen | {nested}))
    return rows


def render() -> str:
    sections: dict[str, list[str]] = {}
    for key, tp, default, help_text in _rows(Config, "", {Config}):
        nested = "." in key or "[" in key or tp.endswith("Config")
        top = key.split(".")[0].split("[")[0] if nested else "global"

        def cell(text: str) -> str:
            return text.replace("|", "\\|")

        sections.setdefault(top, []).append(
            f"| `{key}` | {cell(tp)} | {cell(default)} | {cell(help_text)} |"
        )
    lines = [HEADER]
    for name, rows in sections.items():
        lines += [
            "",
            f"## `{name}`",
            "",
            "| key | type | default | meaning |",
            "|---|---|---|---|",
            *rows,
        ]
    lines += [
        "",
        "## Part arguments without effect",
        "",
        "Arguments of `algorithm.policy_loss_fn_args` that a loss accepts under Trinity-RFT's "
        "names and computes otherwise here; `trinity run` lists those a config sets.",
        "",
        "| policy_loss_fn | argument | why |",
        "|---|---|---|",
        *(
            f"| `{loss}` | `{arg}` | {why} |"
            for loss, args in NO_EFFECT_ARGS.items()
            for arg, why in args.items()
        ),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
