"""The schema keeps tenants apart so a distributed PostgreSQL can shard it by `space_id`
(deploy/SCALING.md): every tenant table carries `space_id`, and no stored row refers to a
row of another space, so no join along a foreign key ever crosses spaces. Checked on a
database where two spaces were ingested and processed by real processes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import grpc
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.platform.auth import Scope
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from tests.conftest import clone_database
from tests.support import run_service

GLOBAL_TABLES = {"schema_migrations", "change_log_horizon"}
# Keyed by a single UUID today; Citus needs (space_id, id) first (deploy/SCALING.md). A new
# table must carry space_id in its primary key; a table fixed leaves this list.
SINGLE_KEYED = {
    "assertions", "bm25_docs", "change_log", "chunks", "claim_drafts", "claim_occurrences", "claims",
    "credentials", "document_crossrefs", "document_versions", "documents", "entities", "entity_aliases",
    "extraction_decisions", "fact_decisions", "fact_evidence", "facts", "mentions", "merge_proposals",
    "normalization_outcomes", "provider_calls", "representations", "saved_queries", "sections",
    "testimony_currency_events", "work_units",
}
NULLABLE_SPACE = {"provider_calls"}  # calls made outside any space's work

NOTE = ("# Planning, {day} March 2026\n\nRavi owns the invoice exporter. Dana reviewed the exporter design.\n\n"
        "Priya moved the billing migration to October because the ledger needs a rewrite.\n")


async def tables(conn: asyncpg.Connection) -> dict[str, dict[str, object]]:
    rows = await conn.fetch(
        """SELECT t.relname AS name,
                  (SELECT a.attnotnull FROM pg_attribute a WHERE a.attrelid = t.oid AND a.attname = 'space_id'
                      AND NOT a.attisdropped) AS space_not_null,
                  (SELECT array_agg(a.attname::text) FROM pg_constraint k
                     JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey)
                    WHERE k.conrelid = t.oid AND k.contype = 'p') AS pk
             FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
            WHERE n.nspname = 'public' AND t.relkind IN ('r', 'p')""")
    return {r["name"]: {"space": r["space_not_null"], "pk": set(r["pk"] or [])} for r in rows}


async def cross_space_references(conn: asyncpg.Connection) -> dict[str, int]:
    """For each foreign key between two tenant tables, the child rows whose space differs
    from the parent row's."""
    fks = await conn.fetch(
        """SELECT k.conname, k.conrelid::regclass::text AS child, k.confrelid::regclass::text AS parent,
                  (SELECT array_agg(a.attname::text ORDER BY i) FROM unnest(k.conkey) WITH ORDINALITY u(n, i)
                     JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n) AS cols,
                  (SELECT array_agg(a.attname::text ORDER BY i) FROM unnest(k.confkey) WITH ORDINALITY u(n, i)
                     JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n) AS refcols
             FROM pg_constraint k WHERE k.contype = 'f' AND k.confrelid <> 'spaces'::regclass""")
    found = {}
    for fk in fks:
        on = " AND ".join(f'c."{a}" = p."{b}"' for a, b in zip(fk["cols"], fk["refcols"], strict=True))
        found[f"{fk['child']}.{fk['conname']}"] = await conn.fetchval(
            f'SELECT count(*) FROM "{fk["child"]}" c JOIN "{fk["parent"]}" p ON {on} '  # noqa: S608 - catalog names
            "WHERE c.space_id IS DISTINCT FROM p.space_id AND c.space_id IS NOT NULL")
    return found


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


def test_every_tenant_table_is_keyed_by_space_and_nothing_refers_across_spaces(pg, tmp_path: Path) -> None:
    dsn = clone_database(pg)
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

    async def check() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            found = await tables(conn)
            tenant = {name: t for name, t in found.items() if name not in GLOBAL_TABLES}
            assert [n for n, t in tenant.items() if t["space"] is None] == [], "tenant tables without space_id"
            assert {n for n, t in tenant.items() if t["space"] is False} == NULLABLE_SPACE
            unkeyed = {n for n, t in tenant.items() if "space_id" not in t["pk"]}
            new = unkeyed - SINGLE_KEYED
            assert not new, f"new tables must carry space_id in their primary key: {new}"
            assert SINGLE_KEYED <= unkeyed, f"now keyed by space: remove from SINGLE_KEYED {SINGLE_KEYED - unkeyed}"
            # both spaces hold the same documents, claims and entities, and nothing points across
            for table in ("documents", "claims", "entities", "mentions"):
                per_space = await conn.fetch(f"SELECT space_id, count(*) FROM {table} GROUP BY 1")  # noqa: S608
                assert len(per_space) == 2 and per_space[0]["count"] == per_space[1]["count"] > 0, table
            crossing = {fk: n for fk, n in (await cross_space_references(conn)).items() if n}
            assert crossing == {}
        finally:
            await conn.close()

    asyncio.run(check())
