"""Shared fixtures: one real embedded PostgreSQL per test session.

The schema is migrated once into a template database; each test module that
needs a clean database gets its own copy (``CREATE DATABASE … TEMPLATE``), which
takes milliseconds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.platform.embedded_pg import EmbeddedPostgres
from services.platform.migrations import migrate


@pytest.fixture(scope="session")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "data", fast=True,
                              database="testament_template")
    server.start()
    asyncio.run(migrate(server.dsn))
    try:
        yield server
    finally:
        server.stop()


def clone_database(pg: EmbeddedPostgres) -> str:
    name = f"t_{uuid.uuid4().hex[:16]}"
    for attempt in range(20):
        result = pg._psql("postgres", f'CREATE DATABASE "{name}" TEMPLATE testament_template', check=False)
        if result.returncode == 0:
            return f"postgresql://postgres@{pg.host}:{pg.port}/{name}"
        if "being accessed by other users" not in result.stderr or attempt == 19:
            raise RuntimeError(f"cannot clone the template database: {result.stderr.strip()}")
        time.sleep(0.25)
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def dsn(pg: EmbeddedPostgres) -> str:
    """A freshly migrated database of its own for the test module."""
    return clone_database(pg)


@pytest.fixture()
def fresh_dsn(pg: EmbeddedPostgres) -> str:
    return clone_database(pg)


@pytest.fixture()
def tmp(tmp_path: Path) -> Path:
    return tmp_path
