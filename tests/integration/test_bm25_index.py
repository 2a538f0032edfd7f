"""The bounded BM25 scan against the exhaustive Okapi query it replaced, on random corpora
written through the pipeline's writer (``index_text``) into the real PostgreSQL: the same
targets with the same scores, the writers' counters equal to a recount after inserts,
rewrites and deletions, and a restricted caller that never gets a row outside its ACL.
This also smoke-tests the retrieval bench's data generator and loader."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pgvector.asyncpg import register_vector
from testament.common.v1 import types_pb2

from bench import bench_retrieval as bench
from bench.bench_scale import EXHAUSTIVE  # the query the bounded scan replaced
from services.pipeline.adapters.store import _delete_postings, index_text
from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.platform.embeddings import HashEmbeddings
from services.platform.text import query_tokens
from services.retrieval import adapters, lexical
from services.retrieval.adapters import SearchLegs
from services.retrieval.app import Retrieval
from services.retrieval.primitives import Primitives

WORDS = ["alpha", "brick", "cedar", "delta", "ember", "fjord", "grain", "harbor", "ivory", "jolt", "kelp",
         "lumen", "mesa", "nadir", "orbit"]
PRINCIPALS = ["team:a", "team:b", "team:c"]

def sentence(rng: random.Random) -> str:
    # Skewed word choice: some terms are in most claims, some in few, lengths vary.
    words = [WORDS[min(int(rng.expovariate(0.35)), len(WORDS) - 1)] for _ in range(rng.randint(1, 14))]
    return " ".join(words) + "."


def corpus(space: uuid.UUID, seed: int, docs: int) -> bench.Corpus:
    rng = random.Random(seed)
    new_id = bench.Ids(uuid.uuid4().int >> 96)  # fresh ids: hypothesis replays seeds
    out = bench.Corpus(space, [])
    for d in range(docs):
        acl = rng.choice([[], [PRINCIPALS[0]], [PRINCIPALS[1]], [PRINCIPALS[1], PRINCIPALS[2]]])
        chunks = [[bench.ClaimGen(new_id(), sentence(rng)) for _ in range(rng.randint(1, 4))]
                  for _ in range(rng.randint(1, 3))]
        out.docs.append(bench.DocGen(new_id(), f"doc {d}", acl, chunks))
    return out


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await register_vector(conn)
    return conn


async def write(conn: asyncpg.Connection, c: bench.Corpus) -> list[uuid.UUID]:
    """The corpus's rows by the bench loader, its claim postings by the pipeline's writer."""
    await bench.load(conn, c, bench.Analyser(None), "hash-384", with_postings=False)
    ids = []
    for doc in c.docs:
        items = [(claim.claim_id, doc.doc_id, claim.text) for chunk in doc.chunks for claim in chunk]
        async with conn.transaction():
            await index_text(conn, c.space, "claim", items)
        ids.extend(i for i, _, _ in items)
    return ids


async def counters_match(conn: asyncpg.Connection, space: uuid.UUID) -> None:
    kept = await conn.fetch("SELECT target_kind, sum(n) AS n, sum(total_length) AS total FROM bm25_stats "
                            "WHERE space_id = $1 GROUP BY 1 HAVING sum(n) <> 0 ORDER BY 1", space)
    counted = await conn.fetch("SELECT target_kind, count(*) AS n, sum(length) AS total FROM bm25_docs "
                               "WHERE space_id = $1 GROUP BY 1 ORDER BY 1", space)
    assert [tuple(r) for r in kept] == [tuple(r) for r in counted]
    kept_df = await conn.fetch("SELECT target_kind, term, sum(df) FROM bm25_df WHERE space_id = $1 "
                               "GROUP BY 1, 2 HAVING sum(df) <> 0 ORDER BY 1, 2", space)
    counted_df = await conn.fetch("SELECT target_kind, term, count(*) FROM bm25_postings WHERE space_id = $1 "
                                  "GROUP BY 1, 2 ORDER BY 1, 2", space)
    assert [tuple(r) for r in kept_df] == [tuple(r) for r in counted_df]


def same_ranking(found: list[tuple[uuid.UUID, float]], truth: list[Any]) -> None:
    """Same scores (to float rounding) in the same order; among exactly tied scores at the
    cut the exhaustive sum's own rounding decides, so ids are compared above the last tie."""
    assert len(found) == len(truth)
    for (_, fscore), t in zip(found, truth, strict=True):
        assert fscore == pytest.approx(t["score"], rel=1e-9, abs=1e-12)
    if truth:
        last = truth[-1]["score"]
        above = [t["id"] for t in truth if t["score"] > last + 1e-9]
        assert [i for i, _ in found[:len(above)]] == above
        assert {i for i, s in found if s > last + 1e-9} == set(above)


async def compare(conn: asyncpg.Connection, legs: SearchLegs, caller: Caller, query: str, k: int) -> str:
    terms = sorted(set(query_tokens(query)))
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        found = await legs.lexical(conn, "claim", caller, query, k)
        truth = await conn.fetch(EXHAUSTIVE, caller.space_id, adapters.principals(caller), terms, k)
    same_ranking(found, list(truth))
    return legs.plans[-1] if terms else "none"


@pytest.fixture()
def shallow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny prefixes, so that small corpora go through every path: several rounds,
    completion by random access, and the proof failing until a list is exhausted."""
    monkeypatch.setattr(lexical, "BM25_EXHAUSTIVE_MAX", 0)
    monkeypatch.setattr(lexical, "BM25_FIRST_DEPTH", 2)
    monkeypatch.setattr(lexical, "BM25_READ_MAX", 100_000)
    monkeypatch.setattr(lexical, "BM25_COMPLETE_MAX", 3)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), docs=st.integers(3, 40), k=st.sampled_from([1, 3, 10]),
       queries=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1, max_size=4))
# Mathematically tied targets whose three parts were summed in different orders (an ulp
# apart, so ranked by rounding instead of by id): seen on main before the sums were ordered.
@example(seed=2**31, docs=31, k=10, queries=[["alpha", "brick", "fjord"]])
def test_bounded_scan_equals_exhaustive_okapi(dsn: str, shallow: None, seed: int, docs: int, k: int,
                                              queries: list[list[str]]) -> None:
    equivalence(dsn, seed, docs, k, queries, ("bm25_exact", "none"))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), docs=st.integers(3, 40), k=st.sampled_from([1, 10]),
       queries=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1, max_size=3))
def test_the_one_statement_path_for_few_postings_equals_it_too(dsn: str, seed: int, docs: int, k: int,
                                                               queries: list[list[str]]) -> None:
    equivalence(dsn, seed, docs, k, queries, ("bm25_exhaustive", "none"))


@pytest.fixture()
def maxscore(monkeypatch: pytest.MonkeyPatch) -> None:
    """MaxScore on small corpora, with so few candidates completed that the proof is often
    decided by the best partial score left out (and fails, so the exhaustive statement answers)."""
    monkeypatch.setattr(lexical, "MAXSCORE_MIN", 0)
    monkeypatch.setattr(lexical, "MAXSCORE_CANDIDATES_MIN", 2)
    monkeypatch.setattr(lexical, "MAXSCORE_CANDIDATES_PER_K", 2)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), docs=st.integers(3, 40), k=st.sampled_from([1, 3, 10]),
       queries=st.lists(st.lists(st.sampled_from(WORDS), min_size=2, max_size=4), min_size=1, max_size=4))
def test_maxscore_equals_exhaustive_okapi(dsn: str, maxscore: None, seed: int, docs: int, k: int,
                                          queries: list[list[str]]) -> None:
    equivalence(dsn, seed, docs, k, queries, ("bm25_maxscore", "bm25_exhaustive", "none"))


async def test_rare_and_common_terms_are_answered_by_maxscore_without_the_common_lists(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A common word beside a rare one: only the rare list is read whole, and the answer is
    the exhaustive one; a caller who sees a part of the space keeps the exhaustive statement."""
    monkeypatch.setattr(lexical, "MAXSCORE_MIN", 0)
    conn = await connect(dsn)
    try:
        space = await bench.new_space(conn, "bm25-maxscore")
        new_id = bench.Ids(uuid.uuid4().int >> 96)
        rng = random.Random(5)
        docs = [bench.DocGen(new_id(), f"doc {d}", [PRINCIPALS[d % 2]] if d % 3 else [], [[bench.ClaimGen(
            new_id(), " ".join(["alpha"] * rng.randint(1, 3) + (["kelp"] if rng.random() < 0.1 else [])
                               + rng.sample(WORDS[1:8], 3)) + ".") for _ in range(4)]]) for d in range(60)]
        await write(conn, bench.Corpus(space, docs))
        legs = SearchLegs()
        for k in (1, 5, 10):
            assert await compare(conn, legs, Caller(space, Scope.READ, None), "alpha kelp", k) == "bm25_maxscore"
        assert await compare(conn, legs, Caller(space, Scope.READ, frozenset({PRINCIPALS[0]})), "alpha kelp",
                             5) == "bm25_exhaustive"
    finally:
        await conn.close()


def equivalence(dsn: str, seed: int, docs: int, k: int, queries: list[list[str]], plans: tuple[str, ...]) -> None:
    async def run() -> None:
        conn = await connect(dsn)
        try:
            space = await bench.new_space(conn, f"bm25-{uuid.uuid4().hex[:12]}")
            ids = await write(conn, corpus(space, seed, docs))
            await counters_match(conn, space)
            legs = SearchLegs()
            callers = [Caller(space, Scope.READ, None), Caller(space, Scope.READ, frozenset({PRINCIPALS[1]})),
                       Caller(space, Scope.READ, frozenset({"nobody"}))]
            for words in queries:
                for caller in callers:
                    assert await compare(conn, legs, caller, " ".join(words), k) in plans
            # Deleting and rewriting targets moves N, lengths and df: the counters follow.
            rng = random.Random(seed)
            gone = rng.sample(ids, len(ids) // 3)
            async with conn.transaction():
                await _delete_postings(conn, "claim", gone)
            async with conn.transaction():  # a rewrite, as the writers do it: old postings out first
                await _delete_postings(conn, "claim", ids[:3])
                await index_text(conn, space, "claim", [(i, None, sentence(rng)) for i in ids[:3]])
            await counters_match(conn, space)
            for words in queries:
                await compare(conn, legs, callers[0], " ".join(words), k)
        finally:
            await conn.close()

    asyncio.run(run())


async def test_the_cap_bounds_the_read_and_says_so(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query whose one term is in nearly every claim, with the prefix capped below its
    list: the answer is what was read, with exact scores, and the plan says it was bounded."""
    monkeypatch.setattr(lexical, "BM25_EXHAUSTIVE_MAX", 0)
    monkeypatch.setattr(lexical, "BM25_FIRST_DEPTH", 4)
    monkeypatch.setattr(lexical, "BM25_READ_MAX", 16)
    conn = await connect(dsn)
    try:
        space = await bench.new_space(conn, "bm25-cap")
        await write(conn, corpus(space, 7, 60))
        legs = SearchLegs()
        caller = Caller(space, Scope.READ, None)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            found = await legs.lexical(conn, "claim", caller, "alpha", 10)
            truth = {r["id"]: r["score"] for r in await conn.fetch(EXHAUSTIVE, space, None, ["alpha"], 10_000)}
        assert legs.plans[-1] in ("bm25_bounded", "bm25_exact") and len(found) == 10
        for target, score in found:
            assert score == pytest.approx(truth[target], rel=1e-9)
        assert found.matched is None if legs.plans[-1] == "bm25_exact" else found.matched >= 10
    finally:
        await conn.close()


async def test_a_term_in_every_text_is_read_to_the_cap_and_the_cut_says_how_many_match(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flat impacts (every text alike) never prove a prefix: the read stops at the cap and
    the answer says how many targets at least match (search reports it as the truncation's
    estimated total)."""
    monkeypatch.setattr(lexical, "BM25_EXHAUSTIVE_MAX", 0)
    monkeypatch.setattr(lexical, "BM25_FIRST_DEPTH", 4)
    monkeypatch.setattr(lexical, "BM25_READ_MAX", 40)
    conn = await connect(dsn)
    try:
        space = await bench.new_space(conn, "bm25-flat")
        new_id = bench.Ids(uuid.uuid4().int >> 96)
        flat = bench.Corpus(space, [bench.DocGen(new_id(), f"doc {d}", [], [[bench.ClaimGen(new_id(), "alpha brick.")
                                                                            for _ in range(3)]]) for d in range(50)])
        await write(conn, flat)
        legs = SearchLegs()
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            found = await legs.lexical(conn, "claim", Caller(space, Scope.READ, None), "alpha brick", 10)
        assert legs.plans[-1] == "bm25_bounded" and len(found) == 10 and found.matched == 150
        # search_claims reports the cut in its envelope.
        db = await Database.connect(dsn)
        try:
            env = await Primitives(Retrieval(db, HashEmbeddings(384), None)).search(
                Caller(space, Scope.READ, None), "claim", "alpha brick", 10, "bm25")
        finally:
            await db.close()
        assert len(env.evidence) == 10 and env.truncation.truncated and not env.truncation.total_is_exact
        assert env.truncation.estimated_total == 150
        assert env.truncation.reason == types_pb2.TRUNCATION_REASON_RESULT_BUDGET
    finally:
        await conn.close()


async def test_a_restricted_caller_never_gets_a_row_outside_its_acl(dsn: str) -> None:
    conn = await connect(dsn)
    try:
        space = await bench.new_space(conn, "bm25-acl")
        c = corpus(space, 11, 80)
        await write(conn, c)
        acl = {claim.claim_id: doc.acl for doc in c.docs for chunk in doc.chunks for claim in chunk}
        legs = SearchLegs()
        for principal in [*PRINCIPALS, "nobody"]:
            caller = Caller(space, Scope.READ, frozenset({principal}))
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                for word in WORDS:
                    for target, _ in await legs.lexical(conn, "claim", caller, word, 50):
                        assert not acl[target] or principal in acl[target]
        # A deleted document's claims leave every caller's answer.
        doc = next(d for d in c.docs if not d.acl)
        await conn.execute("UPDATE documents SET deleted_at = now() WHERE doc_id = $1", doc.doc_id)
        mine = {claim.claim_id for chunk in doc.chunks for claim in chunk}
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            for word in WORDS:
                hits = await legs.lexical(conn, "claim", Caller(space, Scope.READ, None), word, 500)
                assert not mine & {t for t, _ in hits}
    finally:
        await conn.close()


async def test_a_caller_with_thousands_of_principals_is_narrowed_to_the_acls_principals(dsn: str) -> None:
    from services.platform.db import Database
    from services.platform.embeddings import HashEmbeddings
    from services.retrieval.app import Retrieval

    conn = await connect(dsn)
    db = await Database.connect(dsn)
    try:
        space = await bench.new_space(conn, "bm25-wide")
        c = corpus(space, 13, 30)
        await write(conn, c)
        retrieval = Retrieval(db, HashEmbeddings(384), None)
        wide = Caller(space, Scope.READ, frozenset({PRINCIPALS[1], *(f"group:{i}" for i in range(5_000))}))
        narrowed = await retrieval.audience(wide)
        assert narrowed.principals == {PRINCIPALS[1]}
        legs = SearchLegs()
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            for word in WORDS[:5]:
                assert await legs.lexical(conn, "claim", narrowed, word, 100) == await legs.lexical(
                    conn, "claim", wide, word, 100)
        # A principal that an ACL starts naming counts from then on.
        await conn.execute("UPDATE documents SET acl = acl || '{group:7}'::text[] WHERE doc_id = $1", c.docs[0].doc_id)
        assert (await retrieval.audience(wide)).principals == {PRINCIPALS[1], "group:7"}
        assert await retrieval.audience(Caller(space, Scope.READ, frozenset({"group:7"}))) == Caller(
            space, Scope.READ, frozenset({"group:7"}))
    finally:
        await db.close()
        await conn.close()


async def test_the_scale_bench_writes_its_corpus_through_the_pipelines_writer(dsn: str) -> None:
    """bench-scale's generator and writer at a few hundred claims (so neither rots)."""
    from bench import bench_scale
    from services.platform.db import Database
    from services.platform.embeddings import HashEmbeddings

    conn = await connect(dsn)
    db = await Database.connect(dsn)
    try:
        c = bench.synthetic(await bench.new_space(conn, "bench-scale-smoke"), 400, bench.vocabulary(), 0x5C << 8,
                            seed=1)
        await bench.load(conn, c, bench.Analyser(None), HashEmbeddings(384).model, with_postings=False)
        await bench_scale.write_postings(db, c)
        await counters_match(conn, c.space)
        kinds = dict(await conn.fetch("SELECT target_kind, count(*) FROM bm25_docs WHERE space_id = $1 GROUP BY 1",
                                      c.space))
        assert kinds == {"claim": 400, "chunk": 100, "fact": len(c.facts), "entity": len(c.entities)}
        question = bench.latency_queries(c, bench.vocabulary(), 1, seed=1)[0][0]
        assert await compare(conn, SearchLegs(), Caller(c.space, Scope.READ, None), question, 10) in (
            "bm25_exact", "bm25_exhaustive")
    finally:
        await db.close()
        await conn.close()


async def test_the_bulk_loader_puts_every_postings_index_back(fresh_dsn: str) -> None:
    conn = await connect(fresh_dsn)
    try:
        query = "SELECT indexdef FROM pg_indexes WHERE tablename = 'bm25_postings' ORDER BY 1"
        before = [r[0] for r in await conn.fetch(query)]
        async with bench.postings_unindexed(conn):
            assert await conn.fetch(query) == []
            await bench.load(conn, corpus(await bench.new_space(conn, "bulk"), 5, 10), bench.Analyser(None),
                             "hash-384")
        assert [r[0] for r in await conn.fetch(query)] == before
    finally:
        await conn.close()
