"""Fixtures of the buffer integration tests: storage URLs to run each test against.

``storage_url`` is a SQLite file, or a fresh database on a PostgreSQL server:
$TRINITY_TEST_POSTGRES_URL's when it is set, else one started for the session from the
`pgserver` wheel. The helpers live with the buffer unit tests.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "buffer"))

from buffer_testing import fresh_postgres_database, postgres_server_url  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def postgres_base_url() -> Iterator[str]:
    """URL of the session's PostgreSQL server (shared with the unit tests' fixture)."""
    yield from postgres_server_url()


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "buffer.db")
    else:
        # requested here, so that the SQLite runs start no server
        with fresh_postgres_database(request.getfixturevalue("postgres_base_url")) as url:
            yield url
