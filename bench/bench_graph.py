"""2-hop neighbourhoods on a generated graph: 50k entities, 200k relations, 20 hub nodes.

Baseline in the same run: a plain recursive CTE over the same ``facts`` rows (current
relations, both directions, depth 2) with no budgets, no ACL and no clocks, called
directly on PostgreSQL. Against it: the bounded walk alone (same SQL the service runs,
in-process), the graph service over gRPC, and ``POST /graph/neighborhood`` through the
gateway. Start entities are drawn at random, so most 2-hop neighbourhoods touch a hub
and the budgets (2,000 edges, 1,000 frontier) cut them; the notes say how often.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable

import asyncpg
import grpc
import httpx
from testament.common.v1 import types_pb2
from testament.graph.v1 import graph_pb2, graph_pb2_grpc

from bench._common import Row, percentiles, running_stack, timed
from services.graph.adapters import PgGraphStore
from services.graph.domain import AppliedClocks, Budgets, Visibility
from services.platform.db import Database

ENTITIES = 50_000
RELATIONS = 200_000
HUBS = 20
HUB_DEGREE = 2_500  # 20 x 2,500 = 50k hub edges; the other 150k join random pairs
DOCS = 10
CLAIMS = 1_000
N = 300
STARTS = 200

LOAD = [
    """INSERT INTO content_objects (space_id, content_hash, byte_size, mime, object_key)
       SELECT $1, md5('bench-doc-' || d) || md5('bench-doc-' || d), 1, 'text/markdown', 'bench/' || d
         FROM generate_series(0, $2 - 1) d""",
    """INSERT INTO documents (doc_id, space_id, source_kind, identity_hash, title, versioning_mode)
       SELECT md5('bench-doc-' || d)::uuid, $1, 'upload', md5('bench-doc-' || d), 'Bench ' || d, 'snapshot'
         FROM generate_series(0, $2 - 1) d""",
    """INSERT INTO document_versions (version_id, doc_id, space_id, version_no, content_hash, status)
       SELECT md5('bench-ver-' || d)::uuid, md5('bench-doc-' || d)::uuid, $1, 1,
              md5('bench-doc-' || d) || md5('bench-doc-' || d), 'ready'
         FROM generate_series(0, $2 - 1) d""",
    """INSERT INTO representations (representation_id, space_id, version_id, object_key, markdown_sha256,
                                    char_count, converter)
       SELECT md5('bench-rep-' || d)::uuid, $1, md5('bench-ver-' || d)::uuid, 'k', 'x', 100, 'markdown'
         FROM generate_series(0, $2 - 1) d""",
    """INSERT INTO chunks (chunk_id, space_id, doc_id, version_id, representation_id, ordinal, block_start,
                           block_end, char_start, char_end, token_count, chunk_text, content_hash)
       SELECT md5('bench-chunk-' || d)::uuid, $1, md5('bench-doc-' || d)::uuid, md5('bench-ver-' || d)::uuid,
              md5('bench-rep-' || d)::uuid, 0, 0, 0, 0, 100, 10, 'bench', 'h'
         FROM generate_series(0, $2 - 1) d""",
]
LOAD_CLAIMS = """
INSERT INTO claims (claim_id, space_id, doc_id, version_id, representation_id, chunk_id, ordinal, claim_text,
                    source_span, char_start, char_end, extractor_version)
SELECT md5('bench-claim-' || c)::uuid, $1, md5('bench-doc-' || (c % $2))::uuid, md5('bench-ver-' || (c % $2))::uuid,
       md5('bench-rep-' || (c % $2))::uuid, md5('bench-chunk-' || (c % $2))::uuid, c, 'claim', 'claim', 0, 5, 'bench'
  FROM generate_series(0, $3 - 1) c"""
LOAD_ENTITIES = """
INSERT INTO entities (entity_id, space_id, canonical_name, normalized_name)
SELECT md5('bench-e-' || i)::uuid, $1, 'Entity ' || i, 'entity ' || i FROM generate_series(0, $2 - 1) i"""
# Hubs are entities 0..HUBS-1. About 10% of relations have a closed world window and 5%
# were invalidated, so the clock filters have something to do.
LOAD_FACTS = """
INSERT INTO facts (fact_id, space_id, kind, subject_entity_id, predicate, object_entity_id, label, valid_from,
                   valid_until, valid_precision, invalidated_at, evidence_count)
SELECT md5('bench-f-' || i)::uuid, $1, 'relation',
       md5('bench-e-' || CASE WHEN i < $3::int * $4::int THEN i % $3::int
                              ELSE floor(random() * $2::int)::int END)::uuid,
       (ARRAY['works_on', 'knows', 'part_of', 'reports_to', 'located_in'])[1 + i % 5],
       md5('bench-e-' || ($3::int + floor(random() * ($2::int - $3::int))::int))::uuid,
       'relation ' || i,
       CASE WHEN i % 10 = 0 THEN timestamptz '2025-01-01' END,
       CASE WHEN i % 10 = 0 THEN timestamptz '2025-06-01' END,
       CASE WHEN i % 10 = 0 THEN 'day' ELSE 'unknown' END,
       CASE WHEN i % 20 = 7 THEN clock_timestamp() - interval '30 days' END, 1
  FROM generate_series(0, $5::int - 1) i"""
LOAD_EVIDENCE = """
INSERT INTO fact_evidence (fact_id, claim_id, stance, space_id, doc_id)
SELECT md5('bench-f-' || i)::uuid, md5('bench-claim-' || (i % $2))::uuid, 'supports', $1,
       md5('bench-doc-' || ((i % $2) % $3))::uuid
  FROM generate_series(0, $4 - 1) i"""

BASELINE = """
WITH RECURSIVE reach (entity_id, depth) AS (
    SELECT $2::uuid, 0
  UNION
    SELECT CASE WHEN f.subject_entity_id = r.entity_id THEN f.object_entity_id ELSE f.subject_entity_id END,
           r.depth + 1
      FROM reach r
      JOIN facts f ON f.space_id = $1 AND f.kind = 'relation' AND f.invalidated_at IS NULL
                  AND (f.subject_entity_id = r.entity_id OR f.object_entity_id = r.entity_id)
     WHERE r.depth < 2
)
SELECT entity_id, min(depth) AS hops FROM reach GROUP BY entity_id ORDER BY 2, 1"""


async def load(conn: asyncpg.Connection, space: uuid.UUID) -> float:
    started = time.perf_counter()
    async with conn.transaction():
        await conn.execute("SELECT setseed(0.42)")
        for statement in LOAD:
            await conn.execute(statement, space, DOCS)
        await conn.execute(LOAD_CLAIMS, space, DOCS, CLAIMS)
        await conn.execute(LOAD_ENTITIES, space, ENTITIES)
        await conn.execute(LOAD_FACTS, space, ENTITIES, HUBS, HUB_DEGREE, RELATIONS)
        await conn.execute(LOAD_EVIDENCE, space, CLAIMS, DOCS, RELATIONS)
    await conn.execute("ANALYZE")
    return time.perf_counter() - started


def rotating(starts: list[uuid.UUID],
             call: Callable[[uuid.UUID], Awaitable[object]]) -> Callable[[], Awaitable[object]]:
    cycle = itertools.cycle(starts)
    return lambda: call(next(cycle))


async def run() -> list[Row]:
    rows: list[Row] = []
    async with running_stack() as (stack, port):
        assert stack.dsn is not None
        graph = next(c for c in stack.children if c.name == "graph")
        conn = await asyncpg.connect(stack.dsn)
        try:
            space = await conn.fetchval("SELECT space_id FROM spaces WHERE is_default")
            seconds = await load(conn, space)
            picker = random.Random(7)
            starts = [uuid.UUID(hashlib.md5(f"bench-e-{picker.randrange(HUBS, ENTITIES)}".encode()).hexdigest())
                      for _ in range(STARTS)]

            sizes: list[int] = []

            async def baseline(start: uuid.UUID) -> None:
                sizes.append(len(await conn.fetch(BASELINE, space, start)))

            base = percentiles(await timed(N, rotating(starts, baseline), warmup=20))
            avg = sum(sizes) / len(sizes)
            rows.append(Row("graph", "plain recursive CTE, 2 hops (baseline)", N, *base,
                            extra=f"no budgets/ACL/clocks; avg {avg:.0f} nodes; load {seconds:.1f}s"))

            db = await Database.connect(stack.dsn)
            store = PgGraphStore(db)
            vis = Visibility(space, None)
            walked: list[int] = []
            stops: Counter[str] = Counter()

            async def walk(start: uuid.UUID) -> None:
                async with store.snapshot(vis, 5000) as snap:
                    now = await snap.now()
                    w = await snap.walk_relations([start], 2, [], AppliedClocks(now, now), Budgets(), historical=False)
                walked.append(len(w.distances()))
                stops[w.stop or "none"] += 1

            own = percentiles(await timed(N, rotating(starts, walk), warmup=20))
            rows.append(Row("graph", "bounded walk SQL, 2 hops", N, *own, baseline_p50_ms=base[0],
                            extra=f"avg {sum(walked) / len(walked):.0f} nodes; stops {dict(stops)}"))
            await db.close()

            async with grpc.aio.insecure_channel(f"127.0.0.1:{graph.port}") as channel:
                stub = graph_pb2_grpc.GraphServiceStub(channel)
                reasons: Counter[str] = Counter()

                async def neighborhood(start: uuid.UUID) -> None:
                    reply = await stub.Neighborhood(graph_pb2.NeighborhoodRequest(entity_id=str(start)), timeout=10)
                    t = reply.envelope.truncation
                    reasons[types_pb2.TruncationReason.Name(t.reason).removeprefix("TRUNCATION_REASON_").lower()
                            if t.truncated else "none"] += 1

                via_grpc = percentiles(await timed(N, rotating(starts, neighborhood), warmup=20))
                day_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

                async def as_of(start: uuid.UUID) -> None:
                    await stub.Neighborhood(graph_pb2.NeighborhoodRequest(
                        entity_id=str(start), valid_at=day_ago, believed_at=day_ago), timeout=10)

                past = percentiles(await timed(N, rotating(starts, as_of), warmup=20))
            rows.append(Row("graph", "gRPC Neighborhood, 2 hops, limit 500", N, *via_grpc, baseline_p50_ms=base[0],
                            extra=f"truncation {dict(reasons)}"))
            rows.append(Row("graph", "gRPC Neighborhood, believed a day ago", N, *past, baseline_p50_ms=base[0],
                            extra="adds the facts invalidated since (no index serves them)"))

            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                async def http(start: uuid.UUID) -> None:
                    reply = await client.post("/graph/neighborhood", json={"entity_id": str(start)})
                    reply.raise_for_status()

                via_http = percentiles(await timed(N, rotating(starts, http), warmup=20))
            rows.append(Row("graph", "POST /graph/neighborhood, 2 hops", N, *via_http, baseline_p50_ms=base[0],
                            extra=f"+{via_http[0] - via_grpc[0]:.3f} ms over gRPC"))
        finally:
            await conn.close()
    return rows
