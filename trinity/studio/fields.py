"""The form fields of the config generator, read from the typed config schema.

``schema_fields()`` walks the ``Config`` dataclasses and returns one ``FieldSpec`` per
leaf key (``algorithm.optimizer.lr``, ``buffer.explorer_input.taskset.path``, ...) with
its type, default and help string, so the form can never drift from the schema. The
widget follows the type:

    bool                      checkbox            (bool | None: a choice of unset/true/false)
    Literal[...]              selectbox
    int, float                number input        (| None: may be left empty = unset)
    str                       text input          (| None: empty = unset)
    list, dict                YAML text area      (e.g. eval_tasksets, monitor_args)

A few ``str`` fields name registered parts (workflows, reward functions, algorithm
parts); they get a selectbox of the registered names that still accepts other names.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Union

from trinity.config.schema import LOG_LEVELS, Config
from trinity.config.typed_yaml import field_types

Kind = Literal["bool", "choice", "int", "float", "str", "yaml"]

# Set by resolve, never by the user.
DERIVED_ONLY = frozenset({"is_eval"})


@dataclass(frozen=True)
class FieldSpec:
    """One leaf key of the config and how to edit it.

    ``choices`` lists the valid values of a ``choice`` field (``None`` first when the
    field may be unset); ``open_choices`` marks registry names, where other names (a
    plugin's, a dotted import path) are accepted too.
    """

    path: str
    kind: Kind
    default: Any
    help: str
    optional: bool = False
    choices: tuple[Any, ...] = ()
    open_choices: bool = False
    annotation: Any = None

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> ``(X, True)``; anything else -> ``(tp, False)``."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _registered(kind: str) -> Callable[[], list[str]]:
    """The names registered for ``kind``, read when the form is built (plugins included)."""

    def names() -> list[str]:
        if kind == "algorithm_type":
            from trinity.config.algorithm_defaults import ALGORITHM_DEFAULTS

            return list(ALGORITHM_DEFAULTS)
        if kind == "workflow":
            import trinity.workflows  # noqa: F401  (registers the built-in workflows)
            from trinity.workflows.registry import WORKFLOWS

            return WORKFLOWS.names()
        if kind == "reward_fn":
            import trinity.rewards  # noqa: F401
            from trinity.rewards.registry import REWARD_FNS

            return REWARD_FNS.names()
        import trinity.algorithm  # noqa: F401  (registers the algorithm parts)
        from trinity.algorithm import registries

        registry = getattr(registries, kind)
        return (
            sorted({"none", *registry.names()})
            if kind in ("KL_FN", "ENTROPY_LOSS_FN")
            else registry.names()
        )

    return names


# str fields whose values are registered names, by the last part of their key.
_NAMED_PARTS: dict[str, Callable[[], list[str]]] = {
    "algorithm_type": _registered("algorithm_type"),
    "default_workflow_type": _registered("workflow"),
    "default_eval_workflow_type": _registered("workflow"),
    "default_reward_fn_type": _registered("reward_fn"),
    "advantage_fn": _registered("ADVANTAGE_FN"),
    "policy_loss_fn": _registered("POLICY_LOSS_FN"),
    "kl_penalty_fn": _registered("KL_FN"),
    "kl_loss_fn": _registered("KL_FN"),
    "entropy_loss_fn": _registered("ENTROPY_LOSS_FN"),
    "sample_strategy": _registered("SAMPLE_STRATEGY"),
}


def _spec(path: str, tp: Any, default: Any, help_text: str) -> FieldSpec:
    inner, optional = _unwrap_optional(tp)
    common = {"path": path, "default": default, "help": help_text, "optional": optional}
    origin = typing.get_origin(inner)
    if origin is Literal:
        choices = typing.get_args(inner)
        return FieldSpec(
            kind="choice", choices=((None,) if optional else ()) + choices, annotation=tp, **common
        )
    if inner is bool:
        if optional:
            return FieldSpec(kind="choice", choices=(None, True, False), annotation=tp, **common)
        return FieldSpec(kind="bool", annotation=tp, **common)
    if inner in (int, float):
        return FieldSpec(kind=inner.__name__, annotation=tp, **common)
    if inner is str:
        name = path.rsplit(".", 1)[-1]
        if name in _NAMED_PARTS:
            names = tuple(_NAMED_PARTS[name]())
            choices = ((None,) if optional else ()) + names
            if default is not None and default not in choices:
                choices += (default,)
            return FieldSpec(
                kind="choice", choices=choices, open_choices=True, annotation=tp, **common
            )
        if path == "log.level":
            return FieldSpec(kind="choice", choices=LOG_LEVELS, annotation=tp, **common)
        return FieldSpec(kind="str", annotation=tp, **common)
    if origin in (list, dict) or inner is Any:
        return FieldSpec(kind="yaml", annotation=tp, **common)
    raise TypeError(f"config field {path} has a type the form cannot edit: {tp!r}")


def _walk(cls: type, instance: Any, prefix: str) -> list[FieldSpec]:
    specs: list[FieldSpec] = []
    types_ = field_types(cls)
    for f in dataclasses.fields(cls):
        if f.name in DERIVED_ONLY:
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        tp = types_[f.name]
        inner, _ = _unwrap_optional(tp)
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(inner):
            # An optional section left unset still shows its fields, with their defaults.
            specs += _walk(inner, value if value is not None else inner(), path)
        else:
            specs.append(_spec(path, tp, value, f.metadata.get("help", "")))
    return specs


def schema_fields(cls: type = Config) -> list[FieldSpec]:
    """Every editable leaf key of ``cls`` in schema order, with the schema's defaults."""
    return _walk(cls, cls(), "")
