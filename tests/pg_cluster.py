"""A throwaway PostgreSQL for the tests that need one: ``pytest_plugins = ["pg_cluster"]`` in a test module.

One cluster per test session (``niofetcher.testing.PostgresCluster``), started by the
first test that asks for it and stopped when the session ends; tests keep out of each other's
way by crawl name (a schema each), not by cluster.  A test that asks for it is skipped, with one
line saying why, only when PostgreSQL's server programs or psycopg are not installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from niofetcher.testing import PostgresCluster, find_bindir

__all__ = ["postgres_dsn", "skip_reason"]


def skip_reason() -> str | None:
    """Why PostgreSQL tests cannot run here, None when they can."""
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    if find_bindir() is None:
        return "PostgreSQL's server programs are not installed (Debian: apt-get install postgresql)"
    return None


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The DSN of a PostgreSQL cluster that lives as long as the test session."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    with PostgresCluster() as cluster:
        yield cluster.dsn
