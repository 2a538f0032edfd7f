from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import asyncpg
import pytest

from services.platform.migrations import MIGRATIONS_DIR, MigrationError, migrate


async def _tables(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r["tablename"] for r in rows}
    finally:
        await conn.close()


async def test_applying_twice_changes_nothing(fresh_dsn: str) -> None:
    # The template is already migrated: a second and third run apply nothing.
    before = await _tables(fresh_dsn)
    report = await migrate(fresh_dsn)
    assert report.applied == [] and report.already >= 1
    assert await _tables(fresh_dsn) == before
    assert {"spaces", "credentials", "documents", "document_versions", "content_objects",
            "work_units", "schema_migrations"} <= before


async def test_a_tampered_migration_is_refused(fresh_dsn: str, tmp_path: Path) -> None:
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, copy)
    first = sorted(copy.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited after it was applied\n")
    with pytest.raises(MigrationError, match="differs"):
        await migrate(fresh_dsn, directory=copy)


async def test_a_migration_missing_from_the_release_is_refused(fresh_dsn: str, tmp_path: Path) -> None:
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(MigrationError, match="does not ship"):
        await migrate(fresh_dsn, directory=empty)


async def test_new_migrations_apply_in_order_once(fresh_dsn: str, tmp_path: Path) -> None:
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, copy)
    (copy / "9000_extra.sql").write_text("CREATE TABLE extra_probe (id int);")
    (copy / "9001_more.sql").write_text("INSERT INTO extra_probe VALUES (1);")
    report = await migrate(fresh_dsn, directory=copy)
    assert report.applied == ["9000_extra", "9001_more"]
    assert (await migrate(fresh_dsn, directory=copy)).applied == []
    conn = await asyncpg.connect(fresh_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM extra_probe") == 1
    finally:
        await conn.close()


async def test_a_failing_migration_leaves_nothing_half_applied(fresh_dsn: str, tmp_path: Path) -> None:
    copy = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS_DIR, copy)
    (copy / "9000_broken.sql").write_text("CREATE TABLE half_done (id int); SELECT no_such_function();")
    with pytest.raises(asyncpg.UndefinedFunctionError):
        await migrate(fresh_dsn, directory=copy)
    assert "half_done" not in await _tables(fresh_dsn)
    conn = await asyncpg.connect(fresh_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM schema_migrations WHERE version = 9000") == 0
    finally:
        await conn.close()


async def test_check_waits_for_the_schema_and_names_what_is_missing(fresh_dsn: str, pg) -> None:  # type: ignore[no-untyped-def]
    from services.platform.migrations import wait_current

    assert await wait_current(fresh_dsn, 0) == []
    empty = pg.create_database(f"empty_{uuid.uuid4().hex[:8]}")
    missing = await wait_current(empty, 0.3, poll_s=0.1)
    assert missing and missing[0] == "0001_foundation"
    unreachable = await wait_current("postgresql://postgres@127.0.0.1:1/none", 0)
    assert "not reachable" in unreachable[0]


async def test_a_second_migrator_is_refused_naming_the_first(fresh_dsn: str) -> None:
    from services.platform.migrations import _ADVISORY_LOCK_KEY

    holder = await asyncpg.connect(fresh_dsn, server_settings={"application_name": "the-first"})
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", _ADVISORY_LOCK_KEY)
        with pytest.raises(MigrationError, match="another `testament migrate` is running.*the-first"):
            await migrate(fresh_dsn)
    finally:
        await holder.close()
    assert (await migrate(fresh_dsn)).applied == []
