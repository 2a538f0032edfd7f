"""The schema keeps tenants apart so a distributed PostgreSQL can shard it by `space_id`
(deploy/SCALING.md): every tenant table carries `space_id` in its primary key and every
unique constraint, and every foreign key between tenant tables includes it, so the
database itself refuses a row that refers to another space's row and no join along a
foreign key ever crosses spaces. Checked on a database where two spaces were ingested and
processed by real processes, and on such data migrated from before the re-keying."""

from __future__ import annotations

import asyncio
import io
import shutil
import time
import uuid
from pathlib import Path

import asyncpg
import grpc
import pytest
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.platform.auth import Scope
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from services.platform.migrations import MIGRATIONS_DIR, migrate
from tests.conftest import clone_database
from tests.support import run_service

GLOBAL_TABLES = {"schema_migrations", "change_log_horizon"}
# Read before a caller's space is known (a key's hash finds its credential and so its space):
# on Citus these are reference tables, copied to every node, not sharded by space_id.
REFERENCE_TABLES = {"spaces", "credentials"}
REKEY = "0009_space_keys.sql"  # the migration that re-keyed the tables of earlier ones

NOTE = ("# Planning, {day} March 2026\n\nRavi owns the invoice exporter. Dana reviewed the exporter design.\n\n"
        "Priya moved the billing migration to October because the ledger needs a rewrite.\n")


async def tables(conn: asyncpg.Connection) -> dict[str, dict[str, object]]:
    rows = await conn.fetch(
        """SELECT t.relname AS name,
                  (SELECT a.attnotnull FROM pg_attribute a WHERE a.attrelid = t.oid AND a.attname = 'space_id'
                      AND NOT a.attisdropped) AS space_not_null,
                  (SELECT array_agg(a.attname::text) FROM pg_constraint k
                     JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey)
                    WHERE k.conrelid = t.oid AND k.contype = 'p') AS pk,
                  (SELECT array_agg(x.indexrelid::regclass::text) FROM pg_index x
                    WHERE x.indrelid = t.oid AND x.indisunique
                      AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = t.oid
                                         AND a.attname = 'space_id' AND a.attnum = ANY(x.indkey))) AS unique_without
             FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
            WHERE n.nspname = 'public' AND t.relkind IN ('r', 'p')""")
    return {r["name"]: {"space": r["space_not_null"], "pk": set(r["pk"] or []),
                        "unique_without_space": r["unique_without"] or []} for r in rows}


async def foreign_keys(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(
        """SELECT k.conname, k.conrelid::regclass::text AS child, k.confrelid::regclass::text AS parent,
                  (SELECT array_agg(a.attname::text ORDER BY i) FROM unnest(k.conkey) WITH ORDINALITY u(n, i)
                     JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n) AS cols,
                  (SELECT array_agg(a.attname::text ORDER BY i) FROM unnest(k.confkey) WITH ORDINALITY u(n, i)
                     JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n) AS refcols
             FROM pg_constraint k WHERE k.contype = 'f'""")


async def _keys(dsn: str) -> dict[str, str]:
    db = await Database.connect(dsn, min_size=1, max_size=1)
    try:
        creds = PgCredentials(db)
        await creds.create_space("second", "Second")
        return {slug: (await creds.create_key(scope=Scope.WRITE, space_slug=slug, trusted=True))[0]
                for slug in ("default", "second")}
    finally:
        await db.close()


async def _ingest_both(address: str, keys: dict[str, str]) -> list[str]:
    versions = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = ingest_pb2_grpc.IngestServiceStub(channel)
        for key in keys.values():
            for day in (3, 4):
                async def stream(day: int = day):  # type: ignore[no-untyped-def]
                    yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(
                        filename=f"plan-{day}.md", mime="text/markdown"))
                    # the same text in both spaces: same hashes, names and entities, kept apart
                    yield ingest_pb2.UploadRequest(chunk=NOTE.format(day=day).encode())
                reply = await stub.Upload(stream(), timeout=30, metadata=(("authorization", f"Bearer {key}"),))
                versions.append(reply.version_id)
    return versions


@pytest.fixture(scope="module")
def processed(pg, tmp_path_factory: pytest.TempPathFactory) -> str:  # type: ignore[no-untyped-def]
    """A database where the same notes were ingested into two spaces and fully processed."""
    dsn = clone_database(pg)
    tmp_path = tmp_path_factory.mktemp("processed")
    keys = asyncio.run(_keys(dsn))
    env = {"TESTAMENT_DATA_DIR": str(tmp_path)}
    with run_service("ingest", dsn, tmp_path, **env) as ingest, run_service("pipeline", dsn, tmp_path, **env):
        versions = asyncio.run(_ingest_both(ingest.address, keys))

        async def finished() -> bool:
            conn = await asyncpg.connect(dsn)
            try:
                return await conn.fetchval(
                    "SELECT count(*) FILTER (WHERE status NOT IN ('succeeded', 'skipped')) = 0 AND "
                    "count(DISTINCT version_id) = $1 FROM work_units", len(versions))
            finally:
                await conn.close()
        deadline = time.monotonic() + 180
        while not asyncio.run(finished()):
            assert time.monotonic() < deadline, "the pipeline did not finish"
            time.sleep(0.3)
    return dsn


async def check_schema(conn: asyncpg.Connection) -> None:
    """The issue's rule: every tenant table's primary key contains space_id, no unique
    constraint of a tenant table lacks it, and every foreign key between tenant tables
    goes by it (space_id pairs with space_id), so Citus can shard every table by space."""
    found = await tables(conn)
    tenant = {name: t for name, t in found.items() if name not in GLOBAL_TABLES | REFERENCE_TABLES}
    assert [n for n, t in tenant.items() if t["space"] is not True] == [], "tenant tables without space_id NOT NULL"
    assert [n for n, t in tenant.items() if "space_id" not in t["pk"]] == [], "primary keys without space_id"
    assert {n: t["unique_without_space"] for n, t in tenant.items() if t["unique_without_space"]} == {}
    between = [fk for fk in await foreign_keys(conn) if fk["child"] in tenant and fk["parent"] in tenant]
    assert len(between) > 50
    assert [f"{fk['child']}.{fk['conname']}" for fk in between
            if ("space_id", "space_id") not in zip(fk["cols"], fk["refcols"], strict=True)] == []


def test_every_tenant_table_is_keyed_and_referenced_by_space(processed: str) -> None:
    async def check() -> None:
        conn = await asyncpg.connect(processed)
        try:
            await check_schema(conn)
            # both spaces hold the same documents, claims and entities, kept apart
            for table in ("documents", "claims", "entities", "mentions"):
                per_space = await conn.fetch(f"SELECT space_id, count(*) FROM {table} GROUP BY 1")  # noqa: S608
                assert len(per_space) == 2 and per_space[0]["count"] == per_space[1]["count"] > 0, table
        finally:
            await conn.close()

    asyncio.run(check())


def test_the_database_refuses_a_reference_across_spaces(processed: str) -> None:
    async def check() -> None:
        conn = await asyncpg.connect(processed)
        try:
            other = await conn.fetchval("SELECT space_id FROM spaces WHERE slug = 'second'")
            # a chunk of the second space reusing a claim of the first: every id exists, the pair does not
            foreign = await conn.fetchval("SELECT claim_id FROM claims WHERE space_id <> $1 LIMIT 1", other)
            own = await conn.fetchrow("SELECT chunk_id, version_id FROM chunks WHERE space_id = $1 LIMIT 1", other)
            with pytest.raises(asyncpg.ForeignKeyViolationError, match="claim_occurrences_claim_id_fkey"):
                await conn.execute(
                    "INSERT INTO claim_occurrences (claim_id, chunk_id, version_id, space_id, derivation_kind) "
                    "VALUES ($1, $2, $3, $4, 'reused')", foreign, own["chunk_id"], own["version_id"], other)
        finally:
            await conn.close()

    asyncio.run(check())


def test_the_re_keying_migration_applies_to_a_populated_database(pg, processed: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """0009 re-keys a database that holds processed data from before it: the rows of the
    processed database, loaded into one migrated only up to 0008, then 0009 applied."""
    before = tmp_path / "before"
    shutil.copytree(MIGRATIONS_DIR, before, ignore=lambda _d, names: [n for n in names if n >= REKEY])
    name = f"t_{uuid.uuid4().hex[:16]}"
    pg._psql("postgres", f'CREATE DATABASE "{name}"')
    old = f"postgresql://postgres@{pg.host}:{pg.port}/{name}"
    asyncio.run(migrate(old, directory=before))

    async def load_and_migrate() -> None:
        src, dst = await asyncpg.connect(processed), await asyncpg.connect(old)
        try:
            tables = ("SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' "
                      "AND relname <> 'schema_migrations' ORDER BY 1")
            # the tables the database had before 0009 (later migrations add their own, empty)
            known = {r["relname"] for r in await dst.fetch(tables)}
            names = [r["relname"] for r in await src.fetch(tables) if r["relname"] in known]
            counts = {t: await src.fetchval(f'SELECT count(*) FROM "{t}"') for t in names}  # noqa: S608
            await dst.execute("SET session_replication_role = replica")  # rows as they are: no triggers
            await dst.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in names))
            for t in names:
                data = io.BytesIO()
                await src.copy_from_table(t, output=data, format="binary")
                data.seek(0)
                await dst.copy_to_table(t, source=data, format="binary")
            # a receipt from before the ledger required a space; nobody could ever read it
            await dst.execute("INSERT INTO provider_calls (provider, outcome) VALUES ('embeddings', 'ok')")
            await dst.execute("RESET session_replication_role")
        finally:
            await src.close()
            await dst.close()
        report = await migrate(old)
        assert report.applied[0] == REKEY.removesuffix(".sql")
        conn = await asyncpg.connect(old)
        try:
            await check_schema(conn)
            assert {t: await conn.fetchval(f'SELECT count(*) FROM "{t}"') for t in names} == counts  # noqa: S608
        finally:
            await conn.close()

    asyncio.run(load_and_migrate())
