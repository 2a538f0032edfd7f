"""The read path at scale (`make bench-scale`; size from TESTAMENT_BENCH_CLAIMS, default 1M).

One space of generated claims (bench_retrieval's topic generator: ten topics, ACLs
``topic:N`` clustered by topic), and beside it a space a tenth the size (the baseline of
BM25's growth, in the same run). The authority rows are bulk-loaded with the retrieval
bench's loader (hash vectors in two worker processes); every BM25 row (postings, lengths,
and through them the statistics counters) is written by the pipeline's writer
``index_text``, in transactions of 2,000 targets like the pipeline's units, on
TESTAMENT_BENCH_WRITERS connections at once, so the lexical index measured is the one the
pipeline builds; the postings' key and impact index, and then the HNSW graphs (the
migrations' own definitions), are built after the load. Vectors are ``HashEmbeddings`` (384).

In the order measured (each figure is logged as it comes; at a million claims the graphs
take most of the run, so what needs none comes first):

* BM25 claim search, trusted, in the tenth-size space and the full one (the p95 growth);
* BM25 claim search: the service's bounded scan, the exhaustive Okapi query it replaced,
  and ``ts_rank`` over a GIN full-text index (a user's baseline), with how often the
  bounded scan proved its answer exact; and a query whose terms match every claim;
* (the claims' graphs are built) the baseline a user would write: plain HNSW (ef_search
  40, the ACL as a post-filter) plus ``ts_rank``, fused by RRF; latency and recall@10 of
  its vector half against the exact oracle, beside the service's semantic leg, for a
  trusted caller and callers who see 10% and 30%; halfvec against float, and the bytes per
  claim of table and indexes;
* (the other graphs are built) for a trusted caller and a caller who sees one topic (10%):
  the four assured operations and search_claims per channel, in process (the use cases
  called directly): p50/p95 and SQL statements per call (asyncpg's query logger);
* bad input: an operation whose terms match every claim, a caller with 10,000
  principals, k and candidate_k at their maximum;
* the same calls as clients make them, through the gateway (HTTP/JSON) and straight to
  the retrieval service over gRPC, with a trusted key and a ``topic:0`` key of the space;
* claims_and_sources_context's legs one after another against concurrent, and at 1, 4 and
  16 concurrent callers: p50/p95 and calls/s.

TESTAMENT_BENCH_SECTIONS (a comma list of lexical, vector, bad-input, remote, depths, legs,
concurrency; all by default) skips the others.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import multiprocessing
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import grpc
import httpx
import numpy as np
from google.protobuf import struct_pb2
from pgvector.asyncpg import register_vector
from testament.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc

from bench import bench_retrieval as gen
from bench._common import Row, percentiles, running_stack
from bench.bench_quality import OLD_DEPTHS
from services.pipeline.adapters.store import index_text
from services.platform.auth import Caller, Scope
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from services.platform.embeddings import HashEmbeddings
from services.retrieval import adapters
from services.retrieval.adapters import CLAIM_VISIBLE
from services.retrieval.app import Retrieval
from services.retrieval.primitives import Primitives

SIZE = int(os.environ.get("TESTAMENT_BENCH_CLAIMS", "1000000"))
QUERIES = int(os.environ.get("TESTAMENT_BENCH_QUERIES", "40"))
WARMUP = 5
WRITE_BATCH = 2_000
WRITERS = int(os.environ.get("TESTAMENT_BENCH_WRITERS", "4"))
# Enough for the largest HNSW graph at a million claims (the float one, ~2 GB).
BUILD_MEMORY = os.environ.get("TESTAMENT_BENCH_BUILD_MEMORY", "3GB")
# Which measurements run after the in-process ones (a comma list; all by default). At a
# million claims the remote and concurrency sections add most of an hour.
SECTIONS = set(os.environ.get("TESTAMENT_BENCH_SECTIONS", "lexical,vector,bad-input,remote,depths,legs,concurrency")
               .split(","))
DIM = gen.DIM
RRF_K = 60

# The query the bounded scan replaced (the statistics recounted, every posting scored). Float
# arithmetic in the service's order (lexical.bm25_term) and each target's sum in term order:
# otherwise mathematically tied targets get scores an ulp apart, ranked by the join's row
# order rather than by id.
EXHAUSTIVE = f"""
WITH stats AS (SELECT count(*)::float AS n, greatest(sum(length)::float / count(*), 1) AS avgdl
                 FROM bm25_docs WHERE space_id = $1 AND target_kind = 'claim'),
     df AS (SELECT term, count(*)::float AS df FROM bm25_postings
             WHERE space_id = $1 AND target_kind = 'claim' AND term = ANY($3::text[]) GROUP BY term),
     scored AS (
        SELECT p.target_id, sum(ln(1 + (stats.n - df.df + 0.5) / (df.df + 0.5)) * (p.tf * 2.2::float8)
                                / (p.tf + 1.2::float8 * (0.25::float8 + 0.75::float8 * bd.length / stats.avgdl))
                                ORDER BY p.term COLLATE "C") AS score
          FROM bm25_postings p JOIN df ON df.term = p.term
          JOIN bm25_docs bd ON bd.target_kind = p.target_kind AND bd.target_id = p.target_id
          CROSS JOIN stats
         WHERE p.space_id = $1 AND p.target_kind = 'claim' AND p.term = ANY($3::text[])
         GROUP BY p.target_id)
SELECT s.target_id AS id, s.score FROM scored s JOIN claims c ON c.claim_id = s.target_id
 WHERE c.is_current_testimony AND {CLAIM_VISIBLE}
 ORDER BY s.score DESC, s.target_id LIMIT $4"""
# A user's full-text baseline: ts_rank over a GIN index, the ACL as a filter.
TS_RANK = f"""SELECT c.claim_id FROM claims c
               WHERE c.space_id = $1 AND to_tsvector('english', c.claim_text) @@ plainto_tsquery('english', $3)
                 AND c.is_current_testimony AND {CLAIM_VISIBLE}
               ORDER BY ts_rank(to_tsvector('english', c.claim_text), plainto_tsquery('english', $3)) DESC
               LIMIT $4"""
TS_OR = f"""SELECT c.claim_id FROM claims c
             WHERE c.space_id = $1 AND to_tsvector('english', c.claim_text) @@ to_tsquery('english', $3)
               AND c.is_current_testimony AND {CLAIM_VISIBLE}
             ORDER BY ts_rank(to_tsvector('english', c.claim_text), to_tsquery('english', $3)) DESC LIMIT $4"""
PLAIN_HNSW = f"""SELECT c.claim_id FROM claims c
                  WHERE c.space_id = $1 AND c.embedding_dim = {DIM} AND c.is_current_testimony AND {CLAIM_VISIBLE}
                  ORDER BY c.embedding::vector({DIM}) <=> $3::vector({DIM}) LIMIT $4"""
# The service's graph (migration 0013): half-precision vectors.
HALF_HNSW = f"""SELECT c.claim_id FROM claims c
                 WHERE c.space_id = $1 AND c.embedding_dim = {DIM} AND c.is_current_testimony AND {CLAIM_VISIBLE}
                 ORDER BY c.embedding::halfvec({DIM}) <=> $3::vector({DIM})::halfvec({DIM}) LIMIT $4"""
# The user's plain pgvector index over the float vectors, built by the bench.
USER_HNSW_INDEX = (f"CREATE INDEX bench_claims_float ON claims USING hnsw ((embedding::vector({DIM})) "
                   f"vector_cosine_ops) WHERE embedding_dim = {DIM}")
ORACLE = gen.ORACLE
SLUG = "bench-scale"


def log(message: str) -> None:
    gen.log(f"scale {message}")


class Statements:
    """Counts the statements each call sends, on its snapshot's connection and on the helper
    connections of its concurrent legs alike (asyncpg's query logger; a context variable
    that the legs' tasks inherit names the call)."""

    def __init__(self, db: Database) -> None:
        self.counts: list[int] = []
        self.current: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("statements", default=None)
        original = db.transaction

        @asynccontextmanager
        async def counted(**kwargs: Any) -> AsyncIterator[asyncpg.Connection]:
            seen = self.current.get()

            def logger(_record: Any) -> None:
                if seen is not None:
                    seen[0] += 1

            async with original(**kwargs) as conn:
                conn.add_query_logger(logger)
                try:
                    yield conn
                finally:
                    conn.remove_query_logger(logger)

        db.transaction = counted  # type: ignore[method-assign]

    def wrap(self, call: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def counted_call(item: Any) -> Any:
            seen = [0]
            token = self.current.set(seen)
            try:
                return await call(item)
            finally:
                self.current.reset(token)
                self.counts.append(seen[0])
        return counted_call

    def take(self) -> list[int]:
        out, self.counts = self.counts, []
        return out


async def write_postings(db: Database, corpus: gen.Corpus, writers: int = 1) -> float:
    """Every BM25 row through the pipeline's writer, a unit of WRITE_BATCH targets each, on
    ``writers`` connections at once (as concurrent pipeline workers write)."""
    started = time.perf_counter()
    items: dict[str, list[tuple[uuid.UUID, uuid.UUID | None, str]]] = {"claim": [], "chunk": [], "fact": [],
                                                                       "entity": []}
    for doc in corpus.docs:
        for ordinal, claims in enumerate(doc.chunks):
            chunk_id = uuid.UUID(int=doc.doc_id.int ^ ((ordinal + 1) << 80))
            items["chunk"].append((chunk_id, doc.doc_id, " ".join(c.text for c in claims)))
            items["claim"].extend((c.claim_id, doc.doc_id, c.text) for c in claims)
    items["fact"] = [(f.fact_id, None, f.label) for f in corpus.facts]
    profiles = await db.fetch("SELECT entity_id, profile_summary FROM entities WHERE space_id = $1", corpus.space)
    items["entity"] = [(r[0], None, r[1]) for r in profiles]
    units = [(kind, rows[start:start + WRITE_BATCH]) for kind, rows in items.items()
             for start in range(0, len(rows), WRITE_BATCH)]

    async def writer() -> None:
        while units:
            kind, batch = units.pop()
            async with db.transaction() as conn:
                await index_text(conn, corpus.space, kind, batch)

    await asyncio.gather(*(writer() for _ in range(writers)))
    return time.perf_counter() - started


@asynccontextmanager
async def postings_indexes_after(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """The postings' key and impact index are built once after the load (the writers'
    own DELETE keeps its target index), with the migrations' definitions."""
    impact = await conn.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = 'bm25_postings_impact'")
    key = await conn.fetchval("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = "
                              "'bm25_postings_pkey'")
    await conn.execute("ALTER TABLE bm25_postings DROP CONSTRAINT bm25_postings_pkey")
    await conn.execute("DROP INDEX bm25_postings_impact")
    try:
        yield
    finally:
        await conn.execute(f"SET maintenance_work_mem = '{BUILD_MEMORY}'")
        await conn.execute(f"ALTER TABLE bm25_postings ADD CONSTRAINT bm25_postings_pkey {key}")
        await conn.execute(impact)
        await conn.execute("RESET maintenance_work_mem")


async def timed_calls(items: Sequence[Any], call: Callable[[Any], Awaitable[Any]]) -> list[float]:
    for item in items[:WARMUP]:
        await call(item)
    samples = []
    for item in items[WARMUP:]:
        started = time.perf_counter()
        await call(item)
        samples.append(time.perf_counter() - started)
    return samples


def recall(found: Sequence[Any], truth: Sequence[Any]) -> float:
    return len(set(found) & set(truth)) / len(truth) if truth else 1.0


async def hnsw_ids(conn: asyncpg.Connection, sql: str, args: Sequence[Any]) -> list[uuid.UUID]:
    async with conn.transaction():
        await conn.execute("SET LOCAL hnsw.iterative_scan = 'off'")
        await conn.execute("SET LOCAL hnsw.ef_search = 40")
        await conn.execute("SET LOCAL enable_seqscan = off")
        return [r[0] for r in await conn.fetch(sql, *args)]


async def run() -> list[Row]:
    rows: list[Row] = []
    vocab = gen.vocabulary()
    began = time.perf_counter()
    async with running_stack(embedding="hash") as (stack, _port):
        assert stack.dsn is not None
        conn = await asyncpg.connect(stack.dsn)
        await register_vector(conn)
        db = await Database.connect(stack.dsn, max_size=16, query_timeout_s=120)
        pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
        try:
            definitions = await gen.drop_hnsw_indexes(conn)
            started = time.perf_counter()
            # A space a tenth the size, co-hosted: BM25's growth with size, measured in the same run.
            small = gen.synthetic(await gen.new_space(conn, f"{SLUG}-tenth"), SIZE // 10, vocab, 5 << 8,
                                  seed=SIZE + 1)
            corpus = gen.synthetic(await gen.new_space(conn, SLUG), SIZE, vocab, 3 << 8, seed=SIZE)
            for each in (small, corpus):
                await gen.load(conn, each, gen.Analyser(pool, postings=False), HashEmbeddings(DIM).model,
                               with_postings=False)
            pool.shutdown()
            loaded = time.perf_counter() - started
            started = time.perf_counter()
            async with postings_indexes_after(conn):
                for each in (small, corpus):
                    await write_postings(db, each, WRITERS)
                written = time.perf_counter() - started
            # The user's full-text baseline, and what autovacuum would do after a bulk load (the
            # postings' index-only scans, and a restricted caller's walk through claims, evidence
            # and mentions (migration 0017), need the visibility map).
            await gen.rebuild_indexes(conn, ["CREATE INDEX bench_claims_fts ON claims USING gin "
                                             "(to_tsvector('english', claim_text))"], BUILD_MEMORY)
            await conn.execute("VACUUM (ANALYZE) bm25_postings, bm25_docs, bm25_df, bm25_stats, claims, documents, "
                               "fact_evidence, mentions")
            indexed = time.perf_counter() - started - written  # the postings' key and index too
            log(f"{SIZE:,} + {SIZE // 10:,} claims: rows {loaded:.0f}s, BM25 via index_text {written:.0f}s "
                f"({WRITERS} writers), postings and full-text indexes {indexed:.0f}s")

            retrieval = Retrieval(db, HashEmbeddings(DIM), None)
            primitives = Primitives(retrieval)
            statements = Statements(db)
            space = corpus.space
            assert await db.fetchval("SELECT slug FROM spaces WHERE space_id = $1", space) == SLUG
            callers = {"trusted": Caller(space, Scope.READ, None),
                       "10% (topic:0)": Caller(space, Scope.READ, frozenset({"topic:0"}))}
            questions, names = gen.latency_queries(corpus, vocab, QUERIES + WARMUP, seed=SIZE)
            # The lexical figures first: they need no vector index (hours of building at 1M).
            rows.extend(await growth_rows(retrieval, primitives, small, corpus, vocab, questions))
            if "lexical" in SECTIONS:
                rows.extend(await lexical_rows(db, retrieval, callers, questions))
            if "bad-input" in SECTIONS:
                rows.append(await bm25_bad_input_row(primitives, corpus))
            # Then the claims' graphs (the service's and the user's) and the restricted callers'
            # recall and latency on them; the other graphs last.
            started = time.perf_counter()
            claim_graph = [d for d in definitions if " claims_hnsw_" in d]
            await gen.rebuild_indexes(conn, [*claim_graph, USER_HNSW_INDEX], BUILD_MEMORY)
            log(f"claims' vector indexes {time.perf_counter() - started:.0f}s")
            if "vector" in SECTIONS:
                rows.extend(await vector_rows(db, conn, retrieval, corpus, vocab, questions))
            await gen.rebuild_indexes(conn, [d for d in definitions if d not in claim_graph], BUILD_MEMORY)
            vectors = time.perf_counter() - started
            log(f"vector indexes {vectors:.0f}s")
            base: dict[str, float] = {}
            measured: dict[tuple[str, str], float] = {}
            for who, caller in callers.items():
                ops: list[tuple[str, Sequence[str], Callable[[str], Awaitable[Any]]]] = [
                    ("resolve_entity", names,
                     lambda n, c=caller: retrieval.run_operation(c, "resolve_entity", {"name": n})),
                    *((op, questions, lambda q, c=caller, o=op: retrieval.run_operation(c, o, {"query": q}))
                      for op in ("facts_context", "claims_and_sources_context", "combined_context")),
                    ("search_claims semantic", questions,
                     lambda q, c=caller: primitives.search(c, "claim", q, gen.K, "semantic")),
                    ("search_claims bm25", questions,
                     lambda q, c=caller: primitives.search(c, "claim", q, gen.K, "bm25")),
                ]
                for name, items, call in ops:
                    retrieval.legs.plans.clear()
                    statements.take()
                    samples = await timed_calls(items, statements.wrap(call))
                    counts = statements.take()
                    p50, p95 = percentiles(samples)
                    measured[(who, name)] = p50
                    if who == "trusted":
                        base[name] = p50
                    plans = Counter(retrieval.legs.plans)
                    rows.append(Row("scale", f"{name} @ {SIZE // 1000}k, {who}", len(samples), p50, p95,
                                    baseline_p50_ms=None if who == "trusted" else base[name],
                                    extra=f"statements/call median {statistics.median(counts or [0]):.0f} "
                                          f"max {max(counts or [0])}; plans "
                                          + " ".join(f"{p}:{n}" for p, n in sorted(plans.items()))))
                    log(f"{name} {who}: p50 {p50:.1f} p95 {p95:.1f}")
            sections: list[tuple[str, Callable[[], Awaitable[list[Row]]]]] = [
                ("bad-input", lambda: bad_input_rows(retrieval, corpus)),
                ("remote", lambda: remote_rows(stack, _port, db, questions, names, measured)),
                ("depths", lambda: depths_rows(db, retrieval, callers["trusted"], questions)),
                ("legs", lambda: legs_rows(retrieval, callers["trusted"], questions, statements)),
                ("concurrency", lambda: concurrency_rows(db, retrieval, callers["trusted"], questions))]
            for section, measure in sections:
                if section in SECTIONS:
                    rows.extend(await measure())
            rows[0].extra += (f"; {SIZE:,} claims (+ {SIZE // 10:,} co-hosted), loads {loaded:.0f}s + index_text "
                              f"{written:.0f}s ({WRITERS} writers), indexes {indexed:.0f}s + vectors {vectors:.0f}s; "
                              f"whole run {time.perf_counter() - began:.0f}s")
        finally:
            pool.shutdown(cancel_futures=True)
            await db.close()
            await conn.close()
    return rows


async def growth_rows(retrieval: Retrieval, primitives: Primitives, small: gen.Corpus, corpus: gen.Corpus,
                      vocab: gen.Vocabulary, questions: Sequence[str]) -> list[Row]:
    """BM25 claim search, trusted, in the co-hosted space a tenth the size (the baseline)
    and in the full space: the growth of its p95 with size."""
    rows: list[Row] = []
    smaller, _ = gen.latency_queries(small, vocab, QUERIES + WARMUP, seed=SIZE + 1)
    for label, each, items in ((f"{SIZE // 10_000}k (co-hosted)", small, smaller), (f"{SIZE // 1000}k", corpus,
                                                                                    questions)):
        caller = Caller(each.space, Scope.READ, None)
        retrieval.legs.plans.clear()
        samples = await timed_calls(items, lambda q, c=caller: primitives.search(c, "claim", q, gen.K, "bm25"))
        p50, p95 = percentiles(samples)
        log(f"search_claims bm25 trusted @ {label}: p50 {p50:.1f} p95 {p95:.1f}")
        plans = Counter(retrieval.legs.plans)
        growth = f"; p95 {p95 / rows[0].p95_ms:.2f}x the tenth-size space's" if rows and rows[0].p95_ms else ""
        rows.append(Row("scale-growth", f"search_claims bm25 @ {label}, trusted", len(samples), p50, p95,
                        baseline_p50_ms=rows[0].p50_ms if rows else None,
                        extra="plans " + " ".join(f"{p}:{n}" for p, n in sorted(plans.items())) + growth))
    return rows


async def remote_rows(stack: Any, port: int, db: Database, questions: Sequence[str], names: Sequence[str],
                      in_process: dict[tuple[str, str], float]) -> list[Row]:
    """The same calls as a client makes them: through the gateway (JSON over HTTP) and
    straight to the retrieval service over gRPC, each with a key of the bench space (a
    trusted one and one holding ``topic:0``). Beside each: the same caller's in-process p50
    from the same run."""
    credentials = PgCredentials(db)
    keys = {"trusted": (await credentials.create_key(scope=Scope.READ, space_slug=SLUG, trusted=True))[0],
            "10% (topic:0)": (await credentials.create_key(scope=Scope.READ, space_slug=SLUG,
                                                           principals=["topic:0"]))[0]}
    retrieval_port = next(c for c in stack.children if c.name == "retrieval").port
    rows: list[Row] = []
    channels = {"semantic": retrieval_pb2.SEARCH_CHANNEL_SEMANTIC, "bm25": retrieval_pb2.SEARCH_CHANNEL_BM25}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as http, \
            grpc.aio.insecure_channel(f"127.0.0.1:{retrieval_port}") as channel:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        for who, key in keys.items():
            headers = {"authorization": f"Bearer {key}"}
            metadata = (("authorization", f"Bearer {key}"),)

            async def http_call(path: str, body: dict[str, Any], headers: dict[str, str] = headers) -> None:
                reply = await http.post(path, json=body, headers=headers)
                reply.raise_for_status()

            def operation(name: str, arguments: dict[str, Any]) -> retrieval_pb2.RunOperationRequest:
                message = struct_pb2.Struct()
                message.update(arguments)
                return retrieval_pb2.RunOperationRequest(name=name, arguments=message)

            cases: list[tuple[str, Sequence[str], Callable[[str], Awaitable[Any]], Callable[[str], Awaitable[Any]]]] = [
                ("resolve_entity", names,
                 lambda n: http_call("/operations/resolve_entity", {"name": n}),
                 lambda n, m=metadata: stub.RunOperation(operation("resolve_entity", {"name": n}), metadata=m,
                                                         timeout=120)),
                *((op, questions,
                   lambda q, o=op: http_call(f"/operations/{o}", {"query": q}),
                   lambda q, o=op, m=metadata: stub.RunOperation(operation(o, {"query": q}), metadata=m, timeout=120))
                  for op in ("facts_context", "claims_and_sources_context", "combined_context")),
                *((f"search_claims {name}", questions,
                   lambda q, n=name: http_call("/search/claims", {"query": q, "k": gen.K, "channel": n}),
                   lambda q, c=code, m=metadata: stub.SearchClaims(
                       retrieval_pb2.SearchClaimsRequest(query=q, k=gen.K, channel=c), metadata=m, timeout=120))
                  for name, code in channels.items()),
            ]
            for name, items, via_http, via_grpc in cases:
                for door, call in (("gateway HTTP", via_http), ("gRPC direct", via_grpc)):
                    p50, p95 = percentiles(await timed_calls(items, call))
                    rows.append(Row("scale-remote", f"{name} @ {SIZE // 1000}k, {who}, {door}", len(items) - WARMUP,
                                    p50, p95, baseline_p50_ms=in_process.get((who, name)),
                                    extra="baseline: the same call and caller in process"))
                    log(f"{name} {who} {door}: p50 {p50:.1f} p95 {p95:.1f}")
    return rows


def old_depths(db: Database, retrieval: Retrieval) -> Retrieval:
    """The service as it was before #15 sized its candidate depths (the bench's hash weights)."""
    return Retrieval(db, retrieval.embedder, None, fact_depth=OLD_DEPTHS["fact"],
                     weights=dataclasses.replace(retrieval.weights, depth=OLD_DEPTHS["lexical"]))


async def depths_rows(db: Database, retrieval: Retrieval, caller: Caller, questions: Sequence[str]) -> list[Row]:
    """The assured operations with the candidate depths they had before #15 and with the
    service's, the same question alternately on each (the same load for both)."""
    old = old_depths(db, retrieval)
    rows: list[Row] = []
    for op in ("facts_context", "claims_and_sources_context", "combined_context"):
        samples: dict[str, list[float]] = {"before": [], "now": []}
        for i, q in enumerate(questions):
            order = (("before", old), ("now", retrieval))
            for label, which in order if i % 2 else order[::-1]:
                started = time.perf_counter()
                await which.run_operation(caller, op, {"query": q})
                if i >= WARMUP:
                    samples[label].append(time.perf_counter() - started)
        before = percentiles(samples["before"])
        rows.append(Row("scale-depths", f"{op}, depths before #15", len(samples["before"]), *before,
                        extra=f"evidence {OLD_DEPTHS['lexical']}, fact legs {OLD_DEPTHS['fact']}"))
        rows.append(Row("scale-depths", f"{op}, the service's depths", len(samples["now"]),
                        *percentiles(samples["now"]), baseline_p50_ms=before[0],
                        extra=f"evidence {retrieval.weights.depth}, fact legs {retrieval.fact_weights.depth}"))
        log(f"{op} depths before/now p50 {before[0]:.1f} / {rows[-1].p50_ms:.1f}")
    return rows


async def legs_rows(retrieval: Retrieval, caller: Caller, questions: Sequence[str],
                    statements: Statements) -> list[Row]:
    """The four legs of claims_and_sources_context one after another on the snapshot's
    connection (before) and at once on helper connections that import it (now)."""
    rows: list[Row] = []
    helper = retrieval._helper
    base = None
    for label, slots in (("legs one after another (before)", None), ("legs concurrent (service)", helper)):
        retrieval._helper = slots
        statements.take()
        samples = await timed_calls(questions, statements.wrap(lambda q: retrieval.run_operation(
            caller, "claims_and_sources_context", {"query": q})))
        counts = statements.take()
        p = percentiles(samples)
        base = base or p[0]
        rows.append(Row("scale-legs", f"claims_and_sources_context, {label}", len(samples), *p, baseline_p50_ms=base,
                        extra=f"statements/call (all connections) median {statistics.median(counts):.0f}"))
    retrieval._helper = helper
    return rows


async def lexical_rows(db: Database, retrieval: Retrieval, callers: dict[str, Caller],
                       questions: Sequence[str]) -> list[Row]:
    from services.platform.text import query_tokens

    rows = []
    for who, caller in callers.items():
        args = (caller.space_id, adapters.principals(caller))
        exhaustive, tsrank, bounded, agree = [], [], [], []
        retrieval.legs.plans.clear()
        for q in questions:
            terms = sorted(set(query_tokens(q)))
            async with retrieval.snapshot() as conn:
                started = time.perf_counter()
                hits = await retrieval.legs.lexical(conn, "claim", caller, q, gen.K)
                bounded.append(time.perf_counter() - started)
                started = time.perf_counter()
                truth = await conn.fetch(EXHAUSTIVE, *args, terms, gen.K)
                exhaustive.append(time.perf_counter() - started)
                started = time.perf_counter()
                await conn.fetch(TS_RANK, *args, " ".join(terms), gen.K)
                tsrank.append(time.perf_counter() - started)
            agree.append(recall([h for h, _ in hits], [t["id"] for t in truth]))
        plans = Counter(retrieval.legs.plans)
        ex = percentiles(exhaustive)
        rows.append(Row("scale-bm25", f"exhaustive Okapi (before), {who}", len(questions), *ex))
        rows.append(Row("scale-bm25", f"ts_rank + GIN (user baseline), {who}", len(questions), *percentiles(tsrank),
                        baseline_p50_ms=ex[0]))
        rows.append(Row("scale-bm25", f"bounded impact scan (service), {who}", len(questions),
                        *percentiles(bounded), baseline_p50_ms=ex[0],
                        extra=f"top-10 agreement with exhaustive {statistics.mean(agree):.3f}; plans "
                              + " ".join(f"{p}:{n}" for p, n in sorted(plans.items()))))
    return rows


async def vector_rows(db: Database, conn: asyncpg.Connection, retrieval: Retrieval, corpus: gen.Corpus,
                      vocab: gen.Vocabulary, questions: Sequence[str]) -> list[Row]:
    """The user's baseline (plain HNSW + ts_rank, RRF) beside the service's semantic leg,
    recall@10 against the exact oracle; halfvec beside float."""
    rows: list[Row] = []
    embed = HashEmbeddings(DIM)
    vectors = [np.asarray(embed.embed_one(q), dtype=np.float32) for q in questions]
    from services.platform.text import query_tokens

    audiences = {"trusted": None, "clustered 10%": frozenset({"topic:0"}),
                 "clustered 30%": frozenset({"topic:0", "topic:1", "topic:2"})}
    service_base = None
    for who, principals in audiences.items():
        caller = Caller(corpus.space, Scope.READ, principals)
        args = (caller.space_id, adapters.principals(caller))
        base_t, base_r, svc_t, svc_r = [], [], [], []
        retrieval.legs.plans.clear()
        for q, vector in zip(questions, vectors, strict=True):
            truth = [r[0] for r in await conn.fetch(ORACLE, *args, vector, gen.K)]
            started = time.perf_counter()
            dense = await hnsw_ids(conn, PLAIN_HNSW, (*args, vector, gen.K))
            lexical = [r[0] for r in await conn.fetch(TS_RANK, *args, " ".join(sorted(set(query_tokens(q)))),
                                                      gen.K)]
            fused: dict[uuid.UUID, float] = {}
            for ranked in (dense, lexical):
                for rank, item in enumerate(ranked):
                    fused[item] = fused.get(item, 0.0) + 1 / (RRF_K + rank + 1)
            base_t.append(time.perf_counter() - started)
            base_r.append(recall(dense, truth))
            started = time.perf_counter()
            async with retrieval.snapshot() as snap:
                hits = await retrieval.legs.semantic(snap, "claim", caller, vector.tolist(), gen.K)
            svc_t.append(time.perf_counter() - started)
            svc_r.append(recall([h for h, _ in hits], truth))
        b = percentiles(base_t)
        s = percentiles(svc_t)
        service_base = service_base or s[0]
        plans = Counter(retrieval.legs.plans)
        rows.append(Row("scale-acl", f"user baseline HNSW + ts_rank RRF, {who}", len(questions), *b,
                        extra=f"vector half recall@10 {statistics.mean(base_r):.3f} (ef_search 40, ACL post-filter)"))
        rows.append(Row("scale-acl", f"service semantic leg, {who}", len(questions), *s,
                        baseline_p50_ms=service_base,
                        extra=f"recall@10 {statistics.mean(svc_r):.3f}; plans "
                              + " ".join(f"{p}:{n}" for p, n in sorted(plans.items()))
                              + "; vs baseline: ratio to the trusted caller's leg"))
        log(f"semantic leg {who}: p50 {s[0]:.1f} p95 {s[1]:.1f} ({s[0] / service_base:.2f}x trusted), recall@10 "
            f"{statistics.mean(svc_r):.3f}, plans {dict(plans)}; user baseline p50 {b[0]:.1f} recall@10 "
            f"{statistics.mean(base_r):.3f}")

    # halfvec (the service's graph) beside the user's float graph, same HNSW parameters.
    caller = Caller(corpus.space, Scope.READ, None)
    args = (caller.space_id, None)
    full_r, half_r, full_t, half_t = [], [], [], []
    for vector in vectors:
        truth = [r[0] for r in await conn.fetch(ORACLE, *args, vector, gen.K)]
        started = time.perf_counter()
        full_r.append(recall(await hnsw_ids(conn, PLAIN_HNSW, (*args, vector, gen.K)), truth))
        full_t.append(time.perf_counter() - started)
        started = time.perf_counter()
        half_r.append(recall(await hnsw_ids(conn, HALF_HNSW, (*args, vector, gen.K)), truth))
        half_t.append(time.perf_counter() - started)
    sizes = {r[0]: r[1] for r in await conn.fetch(
        "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes WHERE relname = 'claims'")}
    claims = await conn.fetchval("SELECT count(*) FROM claims")
    heap = await conn.fetchval("SELECT pg_table_size('claims')")
    postings = await conn.fetchval(
        "SELECT pg_total_relation_size('bm25_postings') + pg_total_relation_size('bm25_docs')"
        " + pg_total_relation_size('bm25_df') + pg_total_relation_size('bm25_stats')")
    float_index = sizes.get("bench_claims_float", 0)
    half_index = sizes.get("claims_hnsw_384", 0)
    other = sum(v for k, v in sizes.items() if k not in ("bench_claims_float", "bench_claims_fts"))
    fb = percentiles(full_t)
    rows.append(Row("scale-storage", "HNSW over vector(384) (user's index)", len(vectors), *fb,
                    extra=f"recall@10 {statistics.mean(full_r):.3f}; index {float_index / claims:.0f} B/claim"))
    rows.append(Row("scale-storage", "HNSW over halfvec(384) (the service's, migration 0013)", len(vectors),
                    *percentiles(half_t), baseline_p50_ms=fb[0],
                    extra=f"recall@10 {statistics.mean(half_r):.3f}; index {half_index / claims:.0f} B/claim"))
    rows.append(Row("scale-storage", "bytes per claim", claims, 0.0, 0.0,
                    extra=f"claims table {heap / claims:.0f} B (vector(384) is {4 * DIM + 8} B of it), claims' "
                          f"indexes {other / claims:.0f} B, all BM25 tables (claims, chunks, facts, entities) "
                          f"{postings / claims:.0f} B; total {(heap + other + postings) / claims:.0f} B"))
    log(rows[-1].extra)
    return rows


async def concurrency_rows(db: Database, retrieval: Retrieval, caller: Caller, questions: Sequence[str]
                           ) -> list[Row]:
    """claims_and_sources_context at 1, 4 and 16 callers, with the depths before #15 (the
    baseline of each line) and with the service's."""
    rows: list[Row] = []
    for callers in (1, 4, 16):
        base = None
        for label, which in (("depths before #15", old_depths(db, retrieval)), ("service", retrieval)):
            queue = list(questions) * max(1, callers // 2)
            samples: list[float] = []

            async def worker(queue: list[str], samples: list[float], which: Retrieval = which) -> None:
                while queue:
                    q = queue.pop()
                    started = time.perf_counter()
                    await which.run_operation(caller, "claims_and_sources_context", {"query": q})
                    samples.append(time.perf_counter() - started)

            started = time.perf_counter()
            await asyncio.gather(*(worker(queue, samples) for _ in range(callers)))
            wall = time.perf_counter() - started
            p = percentiles(samples)
            base = base or p[0]
            rows.append(Row("scale-concurrency", f"claims_and_sources_context, {callers} concurrent, {label}",
                            len(samples), *p, baseline_p50_ms=base,
                            extra=f"{len(samples) / wall:.1f} calls/s (pool of 16 connections, one process)"))
            log(f"{callers} concurrent, {label}: p50 {p[0]:.1f} p95 {p[1]:.1f}, {len(samples) / wall:.1f} calls/s")
    return rows


EVERYTHING = " ".join(gen.PREDICATES)  # every generated claim states one of these


async def bad_input(name: str, retrieval: Retrieval, call: Callable[[], Awaitable[Any]]) -> Row:
    """Five calls of one bad input: the time, and what a caller got (truncation as reported)."""
    retrieval.legs.plans.clear()
    samples = []
    outcome = ""
    for _ in range(5):
        started = time.perf_counter()
        try:
            result = await call()
            outcome = "answered" if not result.HasField("negative") else "negative"
            if result.HasField("truncation") and result.truncation.truncated:
                cut = result.truncation
                outcome += (f", truncated ({cut.returned} returned of >= {cut.estimated_total}, exact "
                            f"{cut.total_is_exact})")
        except Exception as exc:  # noqa: BLE001 - the bench reports what a caller would get
            outcome = f"error {type(exc).__name__}: {exc}"
        samples.append(time.perf_counter() - started)
    plans = Counter(retrieval.legs.plans)
    log(f"bad input {name}: p50 {percentiles(samples)[0]:.0f} ms; {outcome}")
    return Row("scale-bad-input", name, len(samples), *percentiles(samples),
               extra=f"{outcome}; plans " + " ".join(f"{p}:{n}" for p, n in sorted(plans.items())))


async def bm25_bad_input_row(primitives: Primitives, corpus: gen.Corpus) -> Row:
    trusted = Caller(corpus.space, Scope.READ, None)
    return await bad_input("bm25 search, terms in every claim, k 100", primitives.r,
                           lambda: primitives.search(trusted, "claim", EVERYTHING, 100, "bm25"))


async def bad_input_rows(retrieval: Retrieval, corpus: gen.Corpus) -> list[Row]:
    wide = Caller(corpus.space, Scope.READ, frozenset({"topic:0", *(f"group:{i}" for i in range(9_999))}))
    trusted = Caller(corpus.space, Scope.READ, None)
    return [
        await bad_input("claims_and_sources_context, terms in every claim, k 100 candidate_k 400", retrieval,
                        lambda: retrieval.run_operation(trusted, "claims_and_sources_context",
                                                        {"query": EVERYTHING, "k": 100, "candidate_k": 400})),
        await bad_input("claims_and_sources_context, caller with 10,000 principals, k 100 candidate_k 400",
                        retrieval, lambda: _as(retrieval, wide, "claims_and_sources_context",
                                               {"query": "Who owns the billing?", "k": 100, "candidate_k": 400})),
    ]


async def _as(retrieval: Retrieval, caller: Caller, name: str, arguments: dict[str, Any]) -> Any:
    """As the servicer calls an operation: the caller's audience first."""
    return await retrieval.run_operation(await retrieval.audience(caller), name, arguments)
