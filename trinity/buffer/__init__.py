"""The buffer: tasksets in, experiences between explorer and trainer.

- ``TasksetReader`` reads ``Task`` batches from file or SQL tasksets;
- ``ExperienceQueue`` is the in-memory FIFO between explorer and trainer;
- ``SQLExperienceStorage`` and ``JsonlWriter``/``JsonlReader`` persist experiences
  (the ``sql`` and ``file`` buffers, and the queue's backup);
- ``ExperienceModel`` is the SQL row of an experience (no pickle).
"""

from trinity.buffer.codec import experience_from_dict, experience_to_dict
from trinity.buffer.errors import (
    DatasetNotFoundError,
    ExperienceCodecError,
    MalformedRowError,
    MissingKeyError,
    QueueClosed,
    TasksetExhausted,
)
from trinity.buffer.file_reader import find_data_files, read_file, read_rows
from trinity.buffer.jsonl import JsonlReader, JsonlWriter
from trinity.buffer.queue import ExperienceQueue, ExperienceWriter, open_backup
from trinity.buffer.schema import ExperienceModel, TaskModel, experience_model, task_model
from trinity.buffer.sql_storage import SQLExperienceStorage, SQLTaskStorage, database_url
from trinity.buffer.task_reader import TasksetReader

__all__ = [
    "DatasetNotFoundError",
    "ExperienceCodecError",
    "ExperienceModel",
    "ExperienceQueue",
    "ExperienceWriter",
    "JsonlReader",
    "JsonlWriter",
    "MalformedRowError",
    "MissingKeyError",
    "QueueClosed",
    "SQLExperienceStorage",
    "SQLTaskStorage",
    "TaskModel",
    "TasksetExhausted",
    "TasksetReader",
    "database_url",
    "experience_from_dict",
    "experience_model",
    "experience_to_dict",
    "find_data_files",
    "open_backup",
    "read_file",
    "read_rows",
    "task_model",
]
