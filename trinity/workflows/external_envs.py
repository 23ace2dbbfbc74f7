"""Trinity-RFT's workflows whose environment no package registry holds (ALFWorld,
WebShop, the Enron e-mail search, InterCode SQL), registered under their names so that
an upstream config loads and its dry run says what the environment needs; see
:mod:`trinity.config.upstream.external_envs`. Running one raises that same line.
"""

from __future__ import annotations

from trinity.config.upstream.external_envs import EXTERNAL_WORKFLOWS, unavailable
from trinity.types import Experience
from trinity.workflows.base import Workflow
from trinity.workflows.registry import WORKFLOWS


class EnvironmentUnavailableError(RuntimeError):
    """The workflow's environment is not part of this build or not on this machine."""


class ExternalEnvWorkflow(Workflow):
    """A workflow of an environment this build does not run."""

    name = ""
    reads_prompt = False  # the row names a game, a session or a query of the environment

    async def run_async(self) -> list[Experience]:
        raise EnvironmentUnavailableError(unavailable(self.name, self.task.workflow_args))


for _name in EXTERNAL_WORKFLOWS:
    _attrs = {"name": _name, "__module__": __name__}
    WORKFLOWS.register(_name)(type(_name, (ExternalEnvWorkflow,), _attrs))
del _name, _attrs
