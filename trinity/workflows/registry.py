"""Registry of workflows, selected by ``default_workflow_type``."""

from trinity.utils.registry import Registry

WORKFLOWS: Registry = Registry("workflow")
