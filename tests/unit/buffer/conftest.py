"""Fixtures of the buffer tests: a fresh database on a PostgreSQL server.

The server is $TRINITY_TEST_POSTGRES_URL's when it is set, else one started for the
session from the `pgserver` wheel (tests/unit/buffer/postgres_server.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from buffer_testing import fresh_postgres_database, postgres_server_url


@pytest.fixture(scope="session")
def postgres_base_url() -> Iterator[str]:
    """URL of the session's PostgreSQL server (an administrator's connection)."""
    yield from postgres_server_url()


@pytest.fixture
def postgres_url(postgres_base_url: str) -> Iterator[str]:
    """URL of an empty database of its own on the session's server."""
    with fresh_postgres_database(postgres_base_url) as url:
        yield url


@pytest.fixture(scope="module")
def module_postgres_url(postgres_base_url: str) -> Iterator[str]:
    """Like ``postgres_url``, shared by a module (hypothesis tests cannot use per-test fixtures)."""
    with fresh_postgres_database(postgres_base_url) as url:
        yield url
