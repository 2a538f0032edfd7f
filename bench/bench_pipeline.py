"""Pipeline throughput with the `rules` and `hash` providers, per stage; queue claim latency
under 4 concurrent workers; facts per second through normalisation and adjudication with
10k and 100k facts already held.

Baselines in the same run: a single claimer for the queue; the 10k-fact memory for the
100k one (so growth in cost shows as a ratio).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

import asyncpg
import grpc
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from bench._common import Row, percentiles, running_stack

DOCS = 120
FACT_DOCS = 40


def _doc(i: int) -> bytes:
    return (f"# Weekly notes {i}\n\nPerson{i} owns the exporter module {i}. Person{i} reports to Lead{i % 7}.\n\n"
            f"The service {i} depends on the ledger. Person{i} uses the billing dashboard.\n\n"
            f"Person{i} has been on the payments project since March 2026.\n").encode()


async def _upload(stub: ingest_pb2_grpc.IngestServiceStub, body: bytes, name: str) -> str:
    async def stream():
        yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(filename=name, mime="text/markdown"))
        yield ingest_pb2.UploadRequest(chunk=body)
    return (await stub.Upload(stream(), timeout=60)).version_id


async def _wait_all(conn: asyncpg.Connection, versions: list[str], timeout_s: float = 600) -> None:
    ids = [uuid.UUID(v) for v in versions]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = await conn.fetchval(
            """SELECT count(*) FROM work_units WHERE version_id = ANY($1::uuid[]) AND stage = 'label_relation'
               AND status IN ('succeeded', 'skipped')""", ids)
        if done == len(ids):
            return
        await asyncio.sleep(0.2)
    raise TimeoutError("the pipeline did not finish the benchmark load")


async def _stage_rows(conn: asyncpg.Connection, versions: list[str], label: str, wall_s: float,
                      megabytes: float) -> list[Row]:
    rows = [Row("pipeline", f"{label}: end to end", len(versions), wall_s * 1000 / len(versions),
                wall_s * 1000 / len(versions),
                extra=f"{len(versions) / wall_s * 60:,.0f} docs/min, {megabytes / wall_s * 60:,.2f} MB/min")]
    stats = await conn.fetch(
        """SELECT stage, count(*) AS n,
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)) AS p50,
                  percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - started_at)) AS p95,
                  sum(extract(epoch FROM finished_at - started_at)) AS busy
             FROM work_units WHERE version_id = ANY($1::uuid[]) AND started_at IS NOT NULL
            GROUP BY stage ORDER BY min(created_at)""", [uuid.UUID(v) for v in versions])
    for s in stats:
        rate = len(versions) / s["busy"] * 60 if s["busy"] else float("inf")
        rows.append(Row("pipeline", f"  stage {s['stage']}", s["n"], s["p50"] * 1000, s["p95"] * 1000,
                        extra=f"{rate:,.0f} docs/min of worker time"))
    return rows


async def _seed_facts(conn: asyncpg.Connection, count: int) -> None:
    """Existing memory: `count` relations between generated entities, with evidence-free rows
    (adjudication reads facts by subject, so their number per subject is what matters)."""
    space = await conn.fetchval("SELECT space_id FROM spaces WHERE is_default")
    await conn.execute(
        """INSERT INTO entities (entity_id, space_id, canonical_name, normalized_name)
           SELECT gen_random_uuid(), $1, 'Seed ' || g, 'seed ' || g FROM generate_series(1, $2) g""",
        space, max(1, count // 4))
    await conn.execute(
        """INSERT INTO entity_aliases (space_id, entity_id, alias_text, normalized_alias)
           SELECT $1, entity_id, canonical_name, normalized_name FROM entities WHERE normalized_name LIKE 'seed %'""",
        space)
    await conn.execute(
        """WITH e AS (SELECT entity_id, row_number() OVER () AS n FROM entities WHERE normalized_name LIKE 'seed %'),
                total AS (SELECT count(*) AS c FROM e)
           INSERT INTO facts (fact_id, space_id, kind, subject_entity_id, predicate, object_entity_id, label,
                              evidence_count)
           SELECT gen_random_uuid(), $1, 'relation', s.entity_id, 'works_on', o.entity_id, 'seed fact ' || g.i, 1
             FROM generate_series(1, $2) AS g(i)
             CROSS JOIN total
             JOIN e s ON s.n = (g.i % total.c) + 1
             JOIN e o ON o.n = ((g.i * 7 + 1) % total.c) + 1""",
        space, count)
    await conn.execute("ANALYZE")


async def _facts_rate(held: int) -> Row:
    async with running_stack(embedding="hash") as (stack, _port):
        assert stack.dsn is not None
        conn = await asyncpg.connect(stack.dsn)
        try:
            await _seed_facts(conn, held)
            ingest = next(c for c in stack.children if c.name == "ingest")
            async with grpc.aio.insecure_channel(f"127.0.0.1:{ingest.port}") as channel:
                stub = ingest_pb2_grpc.IngestServiceStub(channel)
                versions = [await _upload(stub, _doc(i), f"f{i}.md") for i in range(FACT_DOCS)]
            await _wait_all(conn, versions)
            row = await conn.fetchrow(
                """SELECT sum(extract(epoch FROM finished_at - started_at)) AS busy FROM work_units
                    WHERE version_id = ANY($1::uuid[])
                      AND stage IN ('normalize_relations', 'adjudicate_observations', 'adjudicate_supersession')""",
                [uuid.UUID(v) for v in versions])
            assertions = await conn.fetchval("SELECT count(*) FROM assertions WHERE version_id = ANY($1::uuid[])",
                                             [uuid.UUID(v) for v in versions])
        finally:
            await conn.close()
    per_assertion_ms = row["busy"] * 1000 / max(1, assertions)
    return Row("facts", f"normalise + adjudicate with {held:,} facts held", assertions, per_assertion_ms,
               per_assertion_ms, extra=f"{assertions / row['busy']:,.0f} facts/s")


async def _claim_latency() -> list[Row]:
    from services.pipeline.adapters.queue import PgQueue
    from services.platform.db import Database

    rows: list[Row] = []
    async with running_stack(embedding="hash") as (stack, _port):
        assert stack.dsn is not None
        # Stop the real pipeline so only the benchmark claims.
        pipeline = next(c for c in stack.children if c.name == "pipeline")
        pipeline.proc.terminate()
        pipeline.proc.wait(30)
        stack.children.remove(pipeline)
        db = await Database.connect(stack.dsn, min_size=4, max_size=8)
        conn = await asyncpg.connect(stack.dsn)
        try:
            space = await conn.fetchval("SELECT space_id FROM spaces WHERE is_default")
            await conn.execute("INSERT INTO content_objects VALUES ($1, $2, 1, 'text/markdown', 'k')", space, "0" * 64)
            await conn.execute("INSERT INTO documents (doc_id, space_id, source_kind, identity_hash, versioning_mode) "
                               "VALUES ($1, $2, 'upload', $3, 'snapshot')", uuid.uuid4(), space, "0" * 64)
            doc = await conn.fetchval("SELECT doc_id FROM documents LIMIT 1")
            version = await conn.fetchval("INSERT INTO document_versions (doc_id, space_id, version_no, content_hash) "
                                          "VALUES ($1, $2, 1, $3) RETURNING version_id", doc, space, "0" * 64)
            for workers in (1, 4):
                await conn.execute("DELETE FROM work_units")
                await conn.executemany(
                    "INSERT INTO work_units (space_id, version_id, stage, unit_key, component_version) "
                    "VALUES ($1, $2, 'label_relation', $3, 'label_relation/1')",
                    [(space, version, str(i)) for i in range(800)])
                samples: list[float] = []

                async def claimer(owner: str, samples: list[float] = samples) -> None:
                    queue = PgQueue(db, owner=owner, lease_s=60, backoff_base_s=2, backoff_max_s=60, max_attempts=3)
                    while True:
                        started = time.perf_counter()
                        got = await queue.claim(1)
                        samples.append(time.perf_counter() - started)
                        if not got:
                            return

                await asyncio.gather(*(claimer(f"w{i}") for i in range(workers)))
                p50, p95 = percentiles(samples)
                rows.append(Row("queue", f"claim latency, {workers} concurrent worker(s)", len(samples), p50, p95,
                                baseline_p50_ms=None if workers == 1 else rows[0].p50_ms,
                                extra=f"{statistics.mean(samples) * 1000:.2f} ms mean"))
        finally:
            await conn.close()
            await db.close()
    return rows


async def run() -> list[Row]:
    rows: list[Row] = []
    async with running_stack(embedding="hash") as (stack, _port):
        assert stack.dsn is not None
        ingest = next(c for c in stack.children if c.name == "ingest")
        conn = await asyncpg.connect(stack.dsn)
        try:
            bodies = [_doc(i) for i in range(DOCS)]
            started = time.perf_counter()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{ingest.port}") as channel:
                stub = ingest_pb2_grpc.IngestServiceStub(channel)
                versions = list(await asyncio.gather(*(_upload(stub, b, f"d{i}.md") for i, b in enumerate(bodies))))
            await _wait_all(conn, versions)
            wall = time.perf_counter() - started
            rows.extend(await _stage_rows(conn, versions, "rules + hash", wall, sum(map(len, bodies)) / 2**20))
        finally:
            await conn.close()
    rows.extend(await _claim_latency())
    small = await _facts_rate(10_000)
    large = await _facts_rate(100_000)
    large.baseline_p50_ms = small.p50_ms
    rows.extend([small, large])
    return rows
