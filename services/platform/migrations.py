"""Ordered, checksummed SQL migrations, applied by ``testament migrate``.

Files are ``NNNN_name.sql`` in :data:`MIGRATIONS_DIR`, applied in number order,
each in its own transaction together with its bookkeeping row. A database whose
applied files differ from the files shipped here (edited, renamed, missing) is
refused: the schema would no longer be what the code expects. Services never
create schema themselves.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_FILE_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# An arbitrary, fixed key so concurrent `migrate` runs queue instead of racing.
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
        await conn.execute("SELECT pg_advisory_lock($1)", _ADVISORY_LOCK_KEY)
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
