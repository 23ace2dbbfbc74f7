"""Workflows: how a task is rolled out. Importing this package registers the built-ins.

``math_workflow``, ``math_boxed_workflow``, ``countdown_workflow``, ``env_workflow``
(multi-turn text games), ``step_wise_env_workflow``
(one experience per turn), ``tool_call_workflow``, ``llm_judge_workflow`` and the on-policy
distillation workflows; see docs/workflows.md.
"""

from trinity.workflows import countdown as _countdown  # noqa: F401
from trinity.workflows import llm_judge as _llm_judge  # noqa: F401
from trinity.workflows import math_boxed as _math_boxed  # noqa: F401
from trinity.workflows import math_workflow as _math_workflow  # noqa: F401
from trinity.workflows import multi_turn as _multi_turn  # noqa: F401
from trinity.workflows import on_policy_distill as _on_policy_distill  # noqa: F401
from trinity.workflows import step_wise as _step_wise  # noqa: F401
from trinity.workflows import tool_call as _tool_call  # noqa: F401
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

__all__ = ["WORKFLOWS", "Workflow"]
