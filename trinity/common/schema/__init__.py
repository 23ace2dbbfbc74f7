"""Database schema of the buffer (re-exported from ``trinity.buffer.schema``)."""

from trinity.common.schema.sql_schema import Base, ExperienceModel, TaskModel

__all__ = ["Base", "ExperienceModel", "TaskModel"]
