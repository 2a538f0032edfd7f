"""Shared fixtures: one real embedded PostgreSQL per test session.

The schema is migrated once into a template database; each test module that
needs a clean database gets its own copy (``CREATE DATABASE … TEMPLATE``), which
takes milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.platform.embedded_pg import EmbeddedPostgres
from services.platform.migrations import migrate

_counter = itertools.count()


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
    name = f"t{next(_counter)}_{id(pg) % 10000}"
    pg._psql("postgres", f'CREATE DATABASE "{name}" TEMPLATE testament_template')
    return f"postgresql://postgres@{pg.host}:{pg.port}/{name}"


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
