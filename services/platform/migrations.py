"""Ordered, checksummed SQL migrations, applied by ``testament migrate``.

Files are ``NNNN_name.sql`` in :data:`MIGRATIONS_DIR`, applied in number order,
each in its own transaction together with its bookkeeping row. A database whose
applied files differ from the files shipped here (edited, renamed, missing) is
refused: the schema would no longer be what the code expects. Services never
create schema themselves.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# An arbitrary, fixed key: a second `migrate` run while one holds it is refused at once.
_ADVISORY_LOCK_KEY = 0x7E57A3E1


class MigrationError(Exception):
    """The database and the shipped migrations disagree; nothing was applied."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_RE.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name!r} is not named NNNN_name.sql")
        found.append(Migration(int(match[1]), match[2], path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError("two migration files share a number")
    return found


@dataclass(frozen=True)
class MigrationReport:
    applied: list[str]
    already: int


async def migrate(dsn: str, *, directory: Path = MIGRATIONS_DIR) -> MigrationReport:
    """Apply every pending migration; verify the applied ones. Idempotent."""
    migrations = discover(directory)
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        await conn.execute("SET lock_timeout = '60s'")
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", _ADVISORY_LOCK_KEY):
            holder = await conn.fetchrow(
                """SELECT a.pid, a.application_name, a.client_addr::text AS addr, a.backend_start
                     FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                    WHERE l.locktype = 'advisory' AND l.granted
                      AND ((l.classid::bigint << 32) | l.objid::bigint) = $1""", _ADVISORY_LOCK_KEY)
            who = (f" (server pid {holder['pid']}, application {holder['application_name'] or '?'!r}, "
                   f"from {holder['addr'] or 'a local socket'}, since {holder['backend_start']:%H:%M:%S})"
                   if holder else "")
            raise MigrationError(f"another `testament migrate` is running on this database{who}; "
                                 "two migrators at once are refused: let that one finish, then run again")
        try:
            await conn.execute(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version    integer PRIMARY KEY,
                    name       text NOT NULL,
                    checksum   text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """
            )
            rows = await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
            applied = {r["version"]: r for r in rows}
            shipped = {m.version: m for m in migrations}
            for version, row in sorted(applied.items()):
                m = shipped.get(version)
                if m is None:
                    raise MigrationError(
                        f"the database has migration {version:04d}_{row['name']} applied, "
                        "which this release does not ship; refusing to touch it"
                    )
                if m.checksum != row["checksum"] or m.name != row["name"]:
                    raise MigrationError(
                        f"migration {version:04d}_{m.name}.sql differs from the one applied to "
                        "this database (checksum mismatch); refusing to continue"
                    )
            done: list[str] = []
            for m in migrations:
                if m.version in applied:
                    continue
                async with conn.transaction():
                    await conn.execute(m.sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1,$2,$3)",
                        m.version,
                        m.name,
                        m.checksum,
                    )
                done.append(f"{m.version:04d}_{m.name}")
            return MigrationReport(applied=done, already=len(applied))
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _ADVISORY_LOCK_KEY)
    finally:
        await conn.close()


async def pending(conn: asyncpg.Connection, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """The shipped migrations this database has not applied (empty: the schema is current).
    Raises :class:`MigrationError` when the database holds one this release does not ship."""
    shipped = {m.version: m for m in discover(directory)}
    if await conn.fetchval("SELECT to_regclass('schema_migrations')") is None:
        return [f"{m.version:04d}_{m.name}" for m in shipped.values()]
    applied = {r["version"]: r["name"] for r in await conn.fetch("SELECT version, name FROM schema_migrations")}
    unknown = sorted(set(applied) - set(shipped))
    if unknown:
        raise MigrationError(f"the database has migration {unknown[0]:04d}_{applied[unknown[0]]} applied, which "
                             "this release does not ship (is an older release running against a newer schema?)")
    return [f"{v:04d}_{m.name}" for v, m in sorted(shipped.items()) if v not in applied]


async def wait_current(dsn: str, wait_s: float, *, poll_s: float = 1.0) -> list[str]:
    """Wait up to ``wait_s`` for the schema to be current (another process migrates it);
    returns what is still missing ([] once current). An unreachable database is waited for."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=5)
            try:
                missing = await pending(conn)
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            missing = [f"(database not reachable: {exc})"]
        if not missing or loop.time() >= deadline:
            return missing
        await asyncio.sleep(poll_s)
