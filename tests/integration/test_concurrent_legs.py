"""The legs of one answer run at once on helper connections that import the answer's
snapshot: they read exactly what the answer's own connection reads, and the answer is the
one the legs give when they run one after another."""

from __future__ import annotations

import asyncpg
from pgvector.asyncpg import register_vector

from bench import bench_retrieval as bench
from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.platform.embeddings import HashEmbeddings
from services.retrieval import adapters
from services.retrieval.app import Retrieval


async def test_helpers_read_the_answers_snapshot(dsn: str) -> None:
    db = await Database.connect(dsn, max_size=8)
    writer = await asyncpg.connect(dsn)
    try:
        retrieval = Retrieval(db, HashEmbeddings(384), None)
        async with retrieval.snapshot() as conn:
            before = await conn.fetchval("SELECT count(*) FROM spaces")
            await writer.execute("INSERT INTO spaces (slug, name) VALUES ('written-after', 'written after')")
            seen = await retrieval.concurrently(conn, [lambda c: c.fetchval("SELECT count(*) FROM spaces")] * 4)
            pids = await retrieval.concurrently(conn, [lambda c: c.fetchval("SELECT pg_backend_pid()")] * 4)
        assert seen == [before] * 4
        assert len(set(pids)) == 4  # four connections, one snapshot
        assert retrieval._helper is not None and retrieval._helper.free == 4  # every slot given back
    finally:
        await writer.close()
        await db.close()


async def test_concurrent_legs_give_the_sequential_answer(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    await register_vector(conn)
    db = await Database.connect(dsn, max_size=8)
    try:
        vocab = bench.vocabulary()
        corpus = bench.synthetic(await bench.new_space(conn, "legs"), 2_000, vocab, 0x51 << 8, seed=3)
        await bench.load(conn, corpus, bench.Analyser(None), HashEmbeddings(384).model)
        questions, _ = bench.latency_queries(corpus, vocab, 6, seed=3)
        caller = Caller(corpus.space, Scope.READ, frozenset({"topic:1", "topic:2"}))
        parallel = Retrieval(db, HashEmbeddings(384), None)
        sequential = Retrieval(db, HashEmbeddings(384), None)
        sequential._helper = None
        for op in ("claims_and_sources_context", "facts_context"):
            for q in questions:
                a = await parallel.run_operation(caller, op, {"query": q})
                b = await sequential.run_operation(caller, op, {"query": q})
                for env in (a, b):
                    env.ClearField("freshness")
                    env.ClearField("temporal_scope")
                assert a == b
                assert a.evidence or a.facts
    finally:
        await db.close()
        await conn.close()


async def test_a_failing_leg_raises_its_own_error(dsn: str) -> None:
    """Not the TaskGroup's ExceptionGroup, which no error mapping knows (it was a 500): the
    leg's error, as the legs one after another raise it; every slot is given back."""
    db = await Database.connect(dsn, max_size=8)
    try:
        retrieval = Retrieval(db, HashEmbeddings(384), None)

        async def times_out(conn: asyncpg.Connection) -> None:
            await conn.fetchval("SELECT 1")
            raise TimeoutError

        async with retrieval.snapshot() as conn:
            try:
                await retrieval.concurrently(conn, [lambda c: c.fetchval("SELECT pg_sleep(0.05)"), times_out])
            except TimeoutError:
                pass
            else:  # pragma: no cover - the assertion below names the failure
                raise AssertionError("the leg's TimeoutError was not raised")
        assert retrieval._helper is not None and retrieval._helper.free == 4
    finally:
        await db.close()


async def test_stale_row_counts_serve_while_they_are_recounted(dsn: str) -> None:
    """The counts that pick a leg's plan (exact scan or graph) are recounted off the answer:
    an answer that finds them stale uses them as they were and does not wait for the
    recount (a read of the whole table); the next answer after it gets the new ones."""
    db = await Database.connect(dsn, max_size=8)
    conn = await asyncpg.connect(dsn)
    try:
        space = await bench.new_space(conn, "stale-counts")
        legs = Retrieval(db, HashEmbeddings(384), None).legs
        caller = Caller(space, Scope.READ, frozenset({"topic:1"}))
        key = ("claim", space, ("topic:1",))
        async with db.transaction() as own:
            assert await legs.counts(own, "claim", caller) == (0, 0)  # first: counted in the answer
            legs._counts[key] = (legs._counts[key][0] - 2 * adapters.COUNTS_FRESH_S, 5, 7)  # as if long ago
            assert await legs.counts(own, "claim", caller) == (5, 7)  # stale, served at once
            recount = legs._recounting[key]
            assert await legs.counts(own, "claim", caller) == (5, 7) and legs._recounting[key] is recount  # one recount
        await recount
        assert key not in legs._recounting
        async with db.transaction() as own:
            assert await legs.counts(own, "claim", caller) == (0, 0)
    finally:
        await conn.close()
        await db.close()
