"""Fixtures of the buffer integration tests: storage URLs to run each test against.

``storage_url`` is a SQLite file, or a fresh PostgreSQL database when
TRINITY_TEST_POSTGRES_URL names a server (skipped otherwise). The helpers live
with the buffer unit tests.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "buffer"))

from buffer_testing import fresh_postgres_database, postgres_base_url  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "buffer.db")
    else:
        with fresh_postgres_database(postgres_base_url()) as url:
            yield url
