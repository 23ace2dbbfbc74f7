"""SQL rows of the buffer, at the import path the user docs name.

``ExperienceModel.to_experience(row)`` turns a row of an experience database back
into an ``Experience``; see ``trinity.buffer.schema`` for the table layout.
"""

from trinity.buffer.schema import Base, ExperienceModel, TaskModel

__all__ = ["Base", "ExperienceModel", "TaskModel"]
