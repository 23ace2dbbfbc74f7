"""Run a Data-Juicer recipe over rows in this process.

A recipe is Data-Juicer's ``process`` list: one ``{operator name: {args}}`` mapping per
operator, applied in order (``[{"text_length_filter": {"min_len": 10}}]``). Rows are
plain dicts; filters drop rows and add their statistics to each kept row under
``__dj__stats__`` (``{"text_len": 20}``), as plain JSON values.

Data-Juicer is optional (``pip install py-data-juicer``, or the ``data_juicer`` extra)
and imported only when a runner is built. Both the in-process ``data_juicer`` operator
and the Data-Juicer service (``server.py``) run recipes through ``DataJuicerRunner``;
the service passes ``allow_code_operators=False`` unless told otherwise, which keeps to
the operators of ``allowlist.py``.

Data-Juicer itself ignores an argument an operator does not have and checks no type, so
a recipe's mistakes would surface as a failure deep in a run, or not at all. The runner
checks each operator's arguments against its signature first (pydantic, so
``Annotated[int, Gt(0)]`` holds) and raises one-line errors naming the operator:
``RecipeError`` for a recipe that names no operator it can load, ``OperatorArgumentError``
for a bad argument, ``OperatorFailed`` for an operator that raises on the rows.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import typing
from typing import Any

from trinity.service.data_juicer.allowlist import ALLOWED_OPERATORS, check_allowed

PIP_PACKAGE = "py-data-juicer"
STATS_FIELD = "__dj__stats__"

# the keyword arguments every operator takes besides its own (Data-Juicer's base_op.OP,
# Filter, ...), with the types checked where Data-Juicer's code shows them; an
# allowlisted operator is refused any other name its signature lacks
KEY = str | None
BASE_ARGS: dict[str, Any] = {
    **dict.fromkeys(
        (
            "audio_key",
            "history_key",
            "image_bytes_key",
            "image_key",
            "index_key",
            "instruction_key",
            "prompt_key",
            "query_key",
            "response_key",
            "system_key",
            "text_key",
            "video_key",
        ),
        KEY,
    ),
    **dict.fromkeys(
        (
            "adaptive_batching",
            "auto_op_parallelism",
            "max_closed_interval",
            "min_closed_interval",
            "reversed_range",
            "skip_op_error",
            "turbo",
        ),
        bool | None,
    ),
    "batch_size": int | None,
    "num_proc": int | None,
    **dict.fromkeys(
        (
            "accelerator",
            "batch_mode",
            "cpu_required",
            "gpu_required",
            "input_columns",
            "mem_required",
            "memory",
            "num_cpus",
            "num_gpus",
            "output_columns",
            "ray_execution_mode",
            "runtime_env",
            "stats_export_path",
            "work_dir",
        ),
        Any,
    ),
}
# errors an operator raises for arguments or rows that do not fit it, not for its own faults
INPUT_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError)


class DataJuicerMissingError(ImportError):
    """Data-Juicer is needed here but not installed."""


class RecipeError(ValueError):
    """A recipe that names no operator Data-Juicer has, or not in its ``{name: args}`` form."""


class OperatorArgumentError(ValueError):
    """An operator's argument that it does not have, of the wrong type or out of range."""


class OperatorFailed(RuntimeError):
    """An operator raised while running on the rows; ``cause`` is what it raised."""

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


def require_data_juicer(who: str) -> None:
    """Raise ``DataJuicerMissingError`` naming ``who`` needs it, unless Data-Juicer imports."""
    if importlib.util.find_spec("data_juicer") is None:
        raise DataJuicerMissingError(
            f"{who} needs Data-Juicer, which is not installed: pip install {PIP_PACKAGE} "
            "(or pip install 'trinity-rft[data_juicer]')"
        )


class DataJuicerRunner:
    """Loads a recipe's operators once and runs them over lists of rows.

    ``allow_code_operators=False`` refuses (``allowlist.OperatorRefused``) an operator or
    argument outside ``allowlist.py``, before any operator is built."""

    def __init__(self, process: list[Any], allow_code_operators: bool = True) -> None:
        require_data_juicer("the 'data_juicer' operator")
        registry = importlib.import_module("data_juicer.ops").OPERATORS.modules
        steps = []
        for i, item in enumerate(process):
            name, args = _operator_of(i, item)
            if name not in registry:
                raise RecipeError(f"process[{i}]: Data-Juicer has no operator '{name}'")
            params = _parameters(registry[name])
            if not allow_code_operators:
                defaults = {k: p.default for k, p in params.items()}
                check_allowed(name, args, defaults)
            steps.append((name, _checked_args(name, args, params)))
        self._ops = []
        for name, args in steps:
            try:
                self._ops.append((name, args, registry[name](**args)))
            except Exception as exc:  # Data-Juicer checks some arguments as it builds
                raise OperatorArgumentError(
                    f"operator '{name}' rejects its arguments {args!r}: {_reason(exc)}"
                ) from exc
        self._dataset_cls = importlib.import_module("data_juicer.core.data").NestedDataset

    def run(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not rows:
            return []
        dataset = self._dataset_cls.from_list(rows)
        for name, args, op in self._ops:
            try:
                dataset = op.run(dataset)
            except Exception as exc:
                raise OperatorFailed(
                    f"operator '{name}' failed on the rows: {_reason(exc)}"
                    + _missing_fields(args, dataset.column_names),
                    exc,
                ) from exc
        out = dataset.to_list()
        for row in out:
            if STATS_FIELD in row:
                row[STATS_FIELD] = {k: plain(v) for k, v in (row[STATS_FIELD] or {}).items()}
        return out


def plain(value: Any) -> Any:
    """A JSON-storable copy of a statistic (numpy scalars and arrays become numbers/lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _operator_of(i: int, item: Any) -> tuple[str, dict[str, Any]]:
    """``(name, args)`` of the recipe's item ``i``, ``{name: {args}}`` (``{name: null}``:
    no arguments)."""
    if not isinstance(item, dict) or len(item) != 1:
        raise RecipeError(
            f"process[{i}]: each item names one operator, {{name: {{args}}}}; given {item!r}"
        )
    [(name, args)] = item.items()
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise OperatorArgumentError(
            f"operator '{name}': its arguments must be a mapping of names to values; given {args!r}"
        )
    return str(name), args


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The named parameters of an operator's ``__init__``, with resolved annotations."""
    try:
        hints = typing.get_type_hints(cls.__init__, include_extras=True)
    except Exception:  # an annotation that does not resolve: check the others' names only
        hints = {}
    params = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        params[name] = p.replace(annotation=hints.get(name, inspect.Parameter.empty))
    return params


def _checked_args(
    name: str, args: dict[str, Any], params: dict[str, inspect.Parameter]
) -> dict[str, Any]:
    """``args`` validated against the operator's annotations (values coerced as pydantic
    does: ``"3"`` for an ``int`` becomes 3); ``OperatorArgumentError`` for the first bad one."""
    from pydantic import TypeAdapter, ValidationError

    out = dict(args)
    for arg, value in args.items():
        if arg in params:
            annotation = params[arg].annotation
        elif arg in BASE_ARGS:
            annotation = BASE_ARGS[arg]
        elif name in ALLOWED_OPERATORS:
            known = ", ".join(sorted(params))
            raise OperatorArgumentError(
                f"operator '{name}' has no argument '{arg}' (given {arg}={value!r}); "
                f"its own arguments: {known}, besides Data-Juicer's common ones "
                "(text_key, num_proc, ...)"
            )
        else:  # an operator outside the allowlist may read further arguments itself
            continue
        if annotation in (inspect.Parameter.empty, Any) or isinstance(annotation, str):
            continue
        try:
            adapter = TypeAdapter(annotation)
        except Exception:  # a type pydantic cannot check (a class of Data-Juicer's own)
            continue
        try:
            out[arg] = adapter.validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]["msg"] if exc.errors() else str(exc)
            raise OperatorArgumentError(
                f"operator '{name}': argument {arg}={value!r} is not valid: {first} "
                f"(expected {_type_text(annotation)})"
            ) from None
    return out


def _missing_fields(args: dict[str, Any], columns: list[str]) -> str:
    """``"; text_key='x' names no field of the rows (they have: a, b)"`` for the ``*_key``
    arguments that name no column, the likely cause of a failure; else ``""``."""
    missing = [
        f"{arg}={value!r}"
        for arg, value in args.items()
        if arg.endswith("_key") and isinstance(value, str) and value.split(".")[0] not in columns
    ]
    if not missing:
        return ""
    return f"; {', '.join(missing)} names no field of the rows (they have: {', '.join(columns)})"


def _type_text(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _reason(exc: BaseException) -> str:
    """``Type: message`` of ``exc``, on one line."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
