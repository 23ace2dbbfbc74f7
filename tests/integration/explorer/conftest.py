"""Every test here starts with hung test workflows blocked and releases them at the end."""

from __future__ import annotations

import pytest
from behaviour_workflow import RELEASE


@pytest.fixture(autouse=True)
def release_hung_workflows():
    RELEASE.clear()
    yield
    RELEASE.set()
