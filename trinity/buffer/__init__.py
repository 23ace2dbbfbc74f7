"""The buffer: tasksets in, experiences between explorer and trainer.

- ``TasksetReader`` reads ``Task`` batches from file or SQL tasksets;
- ``make_experience_buffer(storage_cfg)`` builds the experience buffer a config names:
  ``ExperienceQueue`` (the in-memory FIFO between explorer and trainer),
  ``PriorityExperienceQueue`` (freshest first, optional reuse), or a ``StorageBuffer``
  over SQL or JSON lines;
- ``SQLExperienceStorage`` and ``JsonlWriter``/``JsonlReader`` persist experiences
  (the ``sql`` and ``file`` buffers, and the queue's backup);
- ``ExperienceModel`` is the SQL row of an experience (no pickle).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trinity.buffer.errors import (
    DatasetNotFoundError,
    ExperienceCodecError,
    InvalidRows,
    MalformedRowError,
    MissingKeyError,
    QueueClosed,
    TasksetExhausted,
)

if TYPE_CHECKING:
    from trinity.buffer.codec import experience_from_dict, experience_to_dict
    from trinity.buffer.experience_buffer import (
        ExperienceBuffer,
        ExperienceBufferConfigError,
        make_auxiliary_buffers,
        make_experience_buffer,
    )
    from trinity.buffer.file_reader import find_data_files, read_file, read_rows
    from trinity.buffer.jsonl import JsonlReader, JsonlWriter
    from trinity.buffer.priority_queue import PriorityExperienceQueue
    from trinity.buffer.queue import ExperienceQueue, ExperienceWriter, open_backup
    from trinity.buffer.row_check import KeyRule, format_rules
    from trinity.buffer.schema import ExperienceModel, TaskModel, experience_model, task_model
    from trinity.buffer.sql_storage import SQLExperienceStorage, SQLTaskStorage, database_url
    from trinity.buffer.storage_buffer import StorageBuffer, jsonl_buffer, sql_buffer
    from trinity.buffer.task_reader import TasksetReader

# each name is loaded from its module on first use, so that importing one module of the
# package (the task reader, in the driver) does not import the others: the codec and the
# queues import torch, the SQL storage imports sqlalchemy
_LAZY = {
    "experience_from_dict": "trinity.buffer.codec",
    "experience_to_dict": "trinity.buffer.codec",
    "ExperienceBuffer": "trinity.buffer.experience_buffer",
    "ExperienceBufferConfigError": "trinity.buffer.experience_buffer",
    "make_auxiliary_buffers": "trinity.buffer.experience_buffer",
    "make_experience_buffer": "trinity.buffer.experience_buffer",
    "find_data_files": "trinity.buffer.file_reader",
    "read_file": "trinity.buffer.file_reader",
    "read_rows": "trinity.buffer.file_reader",
    "JsonlReader": "trinity.buffer.jsonl",
    "JsonlWriter": "trinity.buffer.jsonl",
    "PriorityExperienceQueue": "trinity.buffer.priority_queue",
    "ExperienceQueue": "trinity.buffer.queue",
    "ExperienceWriter": "trinity.buffer.queue",
    "open_backup": "trinity.buffer.queue",
    "KeyRule": "trinity.buffer.row_check",
    "format_rules": "trinity.buffer.row_check",
    "ExperienceModel": "trinity.buffer.schema",
    "TaskModel": "trinity.buffer.schema",
    "experience_model": "trinity.buffer.schema",
    "task_model": "trinity.buffer.schema",
    "SQLExperienceStorage": "trinity.buffer.sql_storage",
    "SQLTaskStorage": "trinity.buffer.sql_storage",
    "database_url": "trinity.buffer.sql_storage",
    "StorageBuffer": "trinity.buffer.storage_buffer",
    "jsonl_buffer": "trinity.buffer.storage_buffer",
    "sql_buffer": "trinity.buffer.storage_buffer",
    "TasksetReader": "trinity.buffer.task_reader",
}

__all__ = [
    "DatasetNotFoundError",
    "ExperienceBuffer",
    "ExperienceBufferConfigError",
    "ExperienceCodecError",
    "ExperienceModel",
    "ExperienceQueue",
    "ExperienceWriter",
    "InvalidRows",
    "JsonlReader",
    "JsonlWriter",
    "KeyRule",
    "MalformedRowError",
    "MissingKeyError",
    "PriorityExperienceQueue",
    "QueueClosed",
    "SQLExperienceStorage",
    "SQLTaskStorage",
    "StorageBuffer",
    "TaskModel",
    "TasksetExhausted",
    "TasksetReader",
    "database_url",
    "experience_from_dict",
    "experience_model",
    "experience_to_dict",
    "find_data_files",
    "format_rules",
    "jsonl_buffer",
    "make_auxiliary_buffers",
    "make_experience_buffer",
    "open_backup",
    "read_file",
    "read_rows",
    "sql_buffer",
    "task_model",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
