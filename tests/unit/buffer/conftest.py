"""Fixtures of the buffer tests: a fresh PostgreSQL database when a server is configured."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from buffer_testing import fresh_postgres_database, postgres_base_url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """URL of an empty database on $TRINITY_TEST_POSTGRES_URL's server (skips without one)."""
    with fresh_postgres_database(postgres_base_url()) as url:
        yield url


@pytest.fixture(scope="module")
def module_postgres_url() -> Iterator[str]:
    """Like ``postgres_url``, shared by a module (hypothesis tests cannot use per-test fixtures)."""
    with fresh_postgres_database(postgres_base_url()) as url:
        yield url
