"""A workflow's ``workflow_args`` read into a typed dataclass of its own.

``read_args(task, Spec, "name")`` returns ``Spec(**task.workflow_args)`` after checking,
key by key, that the workflow takes each key and that its value has the field's type;
anything else is a :class:`WorkflowArgsError` of one line naming the key, the value and
what would be valid. A spec checks ranges in ``__post_init__`` with :func:`args_error`.

    @dataclass
    class SudokuArgs:
        max_steps: int = 20  # a field without a default is required

    args = read_args(task, SudokuArgs, "sudoku_workflow")
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

Spec = TypeVar("Spec")

# what each field type accepts (bool is no number here, though Python's bool is an int)
_KINDS: dict[type, tuple[str, tuple[type, ...]]] = {
    int: ("an integer", (int,)),
    float: ("a number", (int, float)),
    str: ("a string", (str,)),
    bool: ("true or false", (bool,)),
}


class WorkflowArgsError(ValueError):
    """A ``workflow_args`` key the workflow does not take, or a value it cannot use."""


def args_error(workflow: str, key: str, value: Any, valid: str) -> WorkflowArgsError:
    """The one-line error of an unusable ``workflow_args.<key>``."""
    return WorkflowArgsError(f"workflow_args.{key} of {workflow}: got {value!r}; {valid}")


def read_args(task: Any, spec: type[Spec], workflow: str) -> Spec:
    """``task.workflow_args`` as an instance of the dataclass ``spec``."""
    given = dict(task.workflow_args or {})
    fields = {f.name: f for f in dataclasses.fields(spec)}  # type: ignore[arg-type]
    takes = ", ".join(fields) or "none"
    for key in given:
        if key not in fields:
            raise WorkflowArgsError(
                f"workflow_args.{key} is not an argument of {workflow} (given: "
                f"{given[key]!r}); it takes {takes}"
            )
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in given:
            raise WorkflowArgsError(
                f"workflow_args.{name} is required by {workflow}; it takes {takes}"
            )
    hints = typing.get_type_hints(spec)
    for key, value in given.items():
        _check_type(workflow, key, value, hints[key])
    return spec(**given)


def _check_type(workflow: str, key: str, value: Any, hint: Any) -> None:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in options:
        return
    for option in options:
        kind = _KINDS.get(option)
        if kind is None:  # lists, dicts: the spec checks them itself
            return
        if isinstance(value, kind[1]) and (option is bool or not isinstance(value, bool)):
            return
    wanted = " or ".join(_KINDS[o][0] for o in options if o in _KINDS)
    raise args_error(workflow, key, value, f"it must be {wanted}")


@dataclass
class NoArgs:
    """The spec of a workflow that takes no ``workflow_args``."""
