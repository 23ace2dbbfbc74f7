"""Workflows: how a task is rolled out. Importing this package registers the built-ins.

``math_workflow`` (also ``async_math_workflow``), ``math_boxed_workflow``,
``countdown_workflow``, ``env_workflow`` (multi-turn text games), ``step_wise_env_workflow``
(one experience per turn), ``frozen_lake_workflow``, ``multi_turn_tool_workflow`` (runs
tools), ``tool_call_workflow`` = ``toolcall_workflow`` (ToolACE function calls), the judged
ones (``llm_judge_workflow``, ``math_rm_workflow``, ``math_ruler_workflow``,
``math_trainable_ruler_workflow``, ``rubric_judge_workflow``, ``rubric_judge_openai_workflow``),
``simple_workflow``, ``simple_mm_workflow`` (images, vision-language models),
``math_eval_workflow``, ``thinking_budget_workflow``,
``sudoku_workflow``, the on-policy distillation workflows and the AgentScope agents
(``agentscope_workflow_adapter``, ``agentscope_react_math_workflow``, ...); see
docs/workflows.md.
"""

from trinity.workflows import agentscope_adapter as _agentscope_adapter  # noqa: F401
from trinity.workflows import agentscope_react as _agentscope_react  # noqa: F401
from trinity.workflows import countdown as _countdown  # noqa: F401
from trinity.workflows import external_envs as _external_envs  # noqa: F401
from trinity.workflows import frozen_lake as _frozen_lake  # noqa: F401
from trinity.workflows import llm_judge as _llm_judge  # noqa: F401
from trinity.workflows import math_boxed as _math_boxed  # noqa: F401
from trinity.workflows import math_eval as _math_eval  # noqa: F401
from trinity.workflows import math_workflow as _math_workflow  # noqa: F401
from trinity.workflows import multi_turn as _multi_turn  # noqa: F401
from trinity.workflows import multi_turn_tool as _multi_turn_tool  # noqa: F401
from trinity.workflows import on_policy_distill as _on_policy_distill  # noqa: F401
from trinity.workflows import reward_model as _reward_model  # noqa: F401
from trinity.workflows import rubric_judge as _rubric_judge  # noqa: F401
from trinity.workflows import ruler as _ruler  # noqa: F401
from trinity.workflows import sciworld as _sciworld  # noqa: F401
from trinity.workflows import simple_mm as _simple_mm  # noqa: F401
from trinity.workflows import step_wise as _step_wise  # noqa: F401
from trinity.workflows import sudoku as _sudoku  # noqa: F401
from trinity.workflows import thinking_budget as _thinking_budget  # noqa: F401
from trinity.workflows import tool_call as _tool_call  # noqa: F401
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS

__all__ = ["WORKFLOWS", "Workflow"]
