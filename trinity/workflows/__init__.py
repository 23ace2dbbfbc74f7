"""Workflows: how a task is rolled out. Importing this package registers the built-ins."""

from trinity.workflows import math_workflow as _math_workflow  # noqa: F401
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

__all__ = ["WORKFLOWS", "Workflow"]
