"""Which config keys a piece of code reads: attribute reads of the schema, recorded on request.

    with record_reads() as reads:
        build_and_step(config)
    reads.keys()  # {"model.model_path", "buffer.explorer_input.taskset.path", ...}

Inside the ``with`` block every schema dataclass (``Config`` and the sections under it)
gets a ``__getattribute__`` that records each field read; the block's end removes it, so
outside a recording attribute access is the plain one and nothing is left behind.

Keys are dotted paths as ``docs/config.md`` writes them (list items ``[]``, mapping
entries ``<name>``). An instance learns its path when it is read from its parent: every
``Config`` is a root, and a section read from a placed instance is placed under it; a
section built elsewhere and never reached from a ``Config`` is recorded under
``?<ClassName>``. Each read also records the module that made it (:func:`_reader`): a
path under ``trinity/``, ``<copy>`` for copies and generated methods, or ``<other>``.
A check can so tell a run's reads from a walk over the whole config (the dry-run
report, ``to_plain``, ``dataclasses.replace``).

For tests and diagnostics: a recording changes the schema classes for its duration,
in every thread of the process (the explorer's runner threads read the config too), so
only one recording may run at a time.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trinity.config.no_effect import nested_dataclass
from trinity.config.schema import Config
from trinity.config.typed_yaml import field_types

_PACKAGE = str(Path(__file__).resolve().parents[1]) + "/"
_STDLIB = str(Path(dataclasses.__file__).resolve().parent) + "/"
_LOCK = threading.Lock()


def schema_classes(root: type = Config) -> dict[type, frozenset[str]]:
    """Every dataclass of the schema under ``root`` -> its field names."""
    found: dict[type, frozenset[str]] = {}
    pending = [root]
    while pending:
        cls = pending.pop()
        if cls in found:
            continue
        found[cls] = frozenset(f.name for f in dataclasses.fields(cls))
        for tp in field_types(cls).values():
            nested, _ = nested_dataclass(tp)
            if nested is not None:
                pending.append(nested)
    return found


class Reads:
    """The keys read during one recording, each with the modules that read it."""

    def __init__(self, classes: dict[type, frozenset[str]]) -> None:
        self._fields = classes
        self._places: dict[int, tuple[object, set[str]]] = {}  # id -> (instance, paths)
        self.readers: dict[str, set[str]] = defaultdict(set)

    def keys(self, *, ignore: frozenset[str] = frozenset()) -> set[str]:
        """Keys read by at least one module not in ``ignore``."""
        return {key for key, who in self.readers.items() if who - ignore}

    def _paths(self, obj: object) -> set[str]:
        held = self._places.get(id(obj))
        if held is not None and held[0] is obj:
            return held[1]
        if isinstance(obj, Config):
            return self._place(obj, "")
        return {f"?{type(obj).__name__}"}

    def _place(self, obj: object, path: str) -> set[str]:
        held = self._places.get(id(obj))
        if held is None or held[0] is not obj:
            # the instance is kept, so its id names no other object while recording
            held = self._places[id(obj)] = (obj, set())
        held[1].add(path)
        return held[1]

    def saw(self, obj: object, name: str, value: Any, reader: str) -> None:
        for path in list(self._paths(obj)):
            key = f"{path}.{name}" if path else name
            self.readers[key].add(reader)
            if type(value) in self._fields:
                self._place(value, key)
            elif isinstance(value, list):
                for item in value:
                    if type(item) in self._fields:
                        self._place(item, f"{key}[]")
            elif isinstance(value, dict):
                for item in value.values():
                    if type(item) in self._fields:
                        self._place(item, f"{key}.<name>")


_active: Reads | None = None


# conversions into plain data that code then uses: their reads are their caller's
_CONVERSIONS = frozenset({"asdict", "_asdict_inner", "astuple", "_astuple_inner"})


def _reader(frame: Any) -> str:
    """The module behind a read: the first caller outside the standard library, so
    ``dataclasses.asdict(section)`` is its caller's read. Copies (``dataclasses.replace``,
    ``copy``) and generated methods (``__eq__``, ``__repr__``) read every field and use
    none: ``<copy>``."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith(_PACKAGE):
            return code.co_filename[len(_PACKAGE) :]
        if code.co_filename.startswith("<"):
            return "<copy>"
        if not code.co_filename.startswith(_STDLIB):
            return "<other>"
        if code.co_name not in _CONVERSIONS:
            return "<copy>"
        frame = frame.f_back
    return "<other>"


def _recording_getattribute(self: Any, name: str) -> Any:
    value = object.__getattribute__(self, name)
    reads = _active
    if reads is not None and name in reads._fields.get(type(self), ()):
        reads.saw(self, name, value, _reader(sys._getframe(1)))
    return value


@contextmanager
def record_reads(root: type = Config) -> Iterator[Reads]:
    """Record every field read of the schema under ``root`` until the block ends."""
    global _active
    if not _LOCK.acquire(blocking=False):
        raise RuntimeError("record_reads is already recording")
    classes = schema_classes(root)
    reads = Reads(classes)
    patched = [cls for cls in classes if "__getattribute__" not in vars(cls)]
    try:
        for cls in patched:
            cls.__getattribute__ = _recording_getattribute  # type: ignore[method-assign]
        _active = reads
        yield reads
    finally:
        _active = None
        for cls in patched:
            del cls.__getattribute__
        _LOCK.release()
