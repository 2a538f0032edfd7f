"""Fusion never hurts: on a fixed slice of the labelled set (tests/data/retrieval), ingested
by the real pipeline, the fused evidence ranking of claims_and_sources_context recalls at
least as much as its best single channel, and more than a plain BM25 over the raw turns.

Deterministic: the `hash` embedder and the `rules` extractor, so the figures are the same
on every run and this is not a timing test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np
import pytest

from bench import labelled, quality
from services.pipeline.adapters.reembed import ReembedRefused, reembed_space
from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.platform.embeddings import HashEmbeddings
from services.platform.errors import Conflict, InvalidArgument, ValidationFailed
from services.platform.structure import retrieval_text, retrieval_units
from services.retrieval import adapters
from services.retrieval.app import Retrieval
from services.retrieval.domain import turn_spans
from services.retrieval.primitives import Primitives
from tests.conftest import clone_database
from tests.e2e.test_pipeline import Pipeline
from tests.support import run_service

SLICE = ["conv_01", "conv_05", "docs_01", "docs_03"]  # two conversations, notes and emails


@pytest.fixture(scope="module")
def ingested(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[labelled.LabelledSet],
                                                                           dict[uuid.UUID, labelled.Document]]]:
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp("quality")
    sets = labelled.load(SLICE)
    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.5"}
    with ExitStack() as stack:
        procs = {name: stack.enter_context(run_service(name, dsn, tmp, **env)) for name in ("ingest", "pipeline")}
        pipeline = Pipeline(dsn, procs["ingest"].address, procs["pipeline"].address, tmp)
        versions = {}
        for doc in (d for s in sets for d in s.documents):
            reply = pipeline.upload(doc.markdown.encode(), doc.filename, title=doc.title,
                                    source_kind="chat" if doc.kind == "conversation" else "file",
                                    source_ref=doc.filename,
                                    source_modified_at=doc.modified_at.strftime("%Y-%m-%dT%H:%M:%SZ"))
            versions[reply.version_id] = doc
        for version_id in versions:
            assert pipeline.wait(version_id, timeout_s=120).ready
        rows = pipeline.sql("SELECT version_id, doc_id FROM document_versions")
        docs = {r["doc_id"]: versions[str(r["version_id"])] for r in rows if str(r["version_id"]) in versions}
        yield dsn, sets, docs


def _evaluate(dsn: str, sets: list[labelled.LabelledSet], docs: dict[uuid.UUID, labelled.Document]
              ) -> tuple[list[quality.Case], dict[str, dict[str, list[str]]]]:
    async def run() -> tuple[list[quality.Case], dict[str, dict[str, list[str]]]]:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            retrieval = Retrieval(db, HashEmbeddings(), None)
            caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
            questions = [q for s in sets for q in s.questions]
            units = quality.UnitMap(docs)
            cases = await quality.collect(retrieval, caller, questions, units)
            answered = await quality.testament_rankings(retrieval, Primitives(retrieval), caller, questions, units,
                                                        operations=["claims_and_sources_context"])
            return cases, answered
        finally:
            await db.close()
    return asyncio.run(run())


def test_fused_evidence_recall_is_never_below_the_best_single_channel(ingested) -> None:
    dsn, sets, docs = ingested
    cases, answered = _evaluate(dsn, sets, docs)
    assert len(cases) > 150
    weights = Retrieval(None, HashEmbeddings(), None).weights
    fused_r10, fused_mrr = quality.objective(cases, weights)
    channels = {name: quality.objective(cases, quality.alone(name)) for name in quality.FUSED_CHANNELS}
    best = max(channels, key=lambda name: channels[name][0])
    assert fused_r10 >= channels[best][0], (fused_r10, fused_mrr, channels)

    # And the plain baseline a user would write first: Okapi BM25 over the raw turns and blocks.
    bm25 = quality.OkapiBM25(quality.all_units(sets))
    baseline = quality.summarise([c.question for c in cases], {c.question.qid: bm25.rank(c.question.text)
                                                               for c in cases})["all"]
    assert baseline.recall is not None
    assert fused_r10 > baseline.recall[10], (fused_r10, baseline.recall)

    # The same through the real operation and the real search primitives (grouping of equal
    # claims, hydration and the k budget included): the operation beats each channel alone.
    questions = [c.question for c in cases]
    real = {name: quality.summarise(questions, ranked)["all"] for name, ranked in answered.items()}
    op = real.pop("claims_and_sources_context")
    assert op.recall is not None and all(s.recall is not None for s in real.values())
    assert op.recall[10] >= max(s.recall[10] for s in real.values()), (op.recall,
                                                                       {n: s.recall for n, s in real.items()})
    assert op.recall[10] >= fused_r10 - 0.02  # what the operation returns is what the replay ranks


def test_the_second_stage_scores_every_nominee_by_meaning_and_keeps_fusion_above_each_channel(ingested) -> None:
    # The dense signal comes from the stored vectors, for what only BM25 nominated too; with
    # the second stage on, the replayed fusion still recalls at least its best single channel.
    dsn, sets, docs = ingested
    embedder = HashEmbeddings()
    # Shallow legs, so that BM25 nominates passages the dense leg did not; whole chunks as
    # passages, so that the ranking shows the second stage's own signals (by unit, it shows
    # the unit legs').
    weights = dataclasses.replace(Retrieval(None, embedder, None).weights, depth=10, dense=0.75, coverage=0.25,
                                  unit_semantic=0.0, unit_bm25=0.0, unit_passage=0.0, unit_claim=0.0)

    async def run() -> tuple[list[quality.Case], list[tuple[str, float]], Any]:
        db = await Database.connect(dsn, min_size=1, max_size=4)
        try:
            retrieval = Retrieval(db, embedder, None, weights=weights)
            caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
            questions = [q for s in sets for q in s.questions][::3]
            cases = await quality.collect(retrieval, caller, questions, quality.UnitMap(docs))
            case = next(c for c in cases if set(c.candidates.chunks["bm25"]) - set(c.candidates.chunks["semantic"]))
            only_bm25 = next(iter(set(case.candidates.chunks["bm25"]) - set(case.candidates.chunks["semantic"])))
            text = await db.fetchval("SELECT chunk_text FROM chunks WHERE chunk_id = $1", only_bm25)
            expected = sum(a * b for a, b in zip(embedder.embed_one(retrieval_text(text)),
                                                 await retrieval.embed_query(case.question.text), strict=True))
            env = await retrieval.run_operation(caller, "claims_and_sources_context", {"query": case.question.text})
            return cases, [(str(only_bm25), expected), (case.question.text, 0.0)], (case, env)
        finally:
            await db.close()
    cases, ((item, expected), _), (case, env) = asyncio.run(run())
    assert case.candidates.similarity[uuid.UUID(item)] == pytest.approx(expected, abs=1e-5)
    assert any("dense" in r.signals for r in env.ranking)
    for r in env.ranking:
        assert r.score == pytest.approx(sum(r.signals.values()), rel=1e-9)
    fused_r10, _ = quality.objective(cases, weights)
    best = max(quality.objective(cases, quality.alone(name))[0] for name in quality.FUSED_CHANNELS)
    assert fused_r10 >= best, (fused_r10, best)


def test_conversation_chunks_are_never_a_header_alone(ingested) -> None:
    dsn, _, docs = ingested
    conversations = [doc_id for doc_id, d in docs.items() if d.kind == "conversation"]
    rows = Pipeline(dsn, "", "", None).sql(  # type: ignore[arg-type]
        "SELECT chunk_text FROM chunks WHERE doc_id = ANY($1::uuid[])", conversations)
    assert rows
    for row in rows:
        assert any(line.startswith("[s") for line in row["chunk_text"].splitlines()), row["chunk_text"]


def test_a_hit_widens_to_its_neighbouring_turns(ingested) -> None:
    dsn, _, docs = ingested
    conversations = [doc_id for doc_id, d in docs.items() if d.kind == "conversation"]

    async def run() -> None:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            primitives = Primitives(Retrieval(db, HashEmbeddings(), None))
            caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
            longest = await db.fetchval("SELECT doc_id FROM chunks WHERE doc_id = ANY($1::uuid[]) GROUP BY doc_id "
                                        "ORDER BY count(*) DESC, doc_id LIMIT 1", conversations)
            ids = [r["chunk_id"] for r in await db.fetch(
                "SELECT chunk_id FROM chunks WHERE doc_id = $1 ORDER BY ordinal", longest)]
            assert len(ids) >= 3
            whole = await primitives.adjacent(caller, ids[1], 1)
            assert [c.chunk_id for c in whole.chunks] == [str(i) for i in ids[:3]]
            turns_of = {c.chunk_id: [t for _, _, t in turn_spans(c.chunk_text)] for c in whole.chunks}
            turns = [(c.chunk_id, t) for c in whole.chunks for t in turns_of[c.chunk_id]]
            for turn in turns_of[str(ids[1])]:
                # One turn each side of it, whichever chunks hold them: never the whole window of chunks
                # unless the turns reach that far.
                at = turns.index((str(ids[1]), turn))
                wanted = {chunk for chunk, _ in turns[max(0, at - 1):at + 2]}
                widened = await primitives.adjacent(caller, ids[1], 1, turn)
                assert [c.chunk_id for c in widened.chunks] == [c.chunk_id for c in whole.chunks
                                                                if c.chunk_id in wanted]
            first = await primitives.adjacent(caller, ids[1], 1, turns_of[str(ids[1])][0])
            last = await primitives.adjacent(caller, ids[1], 1, turns_of[str(ids[1])][-1])
            assert [c.chunk_id for c in first.chunks][:2] == [str(ids[0]), str(ids[1])]
            assert [c.chunk_id for c in last.chunks][-2:] == [str(ids[1]), str(ids[2])]
            if len(turns_of[str(ids[1])]) >= 3:  # a middle turn stays inside its own chunk
                alone = await primitives.adjacent(caller, ids[1], 1, turns_of[str(ids[1])][1])
                assert [c.chunk_id for c in alone.chunks] == [str(ids[1])]
            with pytest.raises(ValidationFailed):
                await primitives.adjacent(caller, ids[1], 1, "s99-99")
        finally:
            await db.close()
    asyncio.run(run())


def test_questions_of_nothing_but_scaffolding_are_answered_not_refused_or_scanned(ingested) -> None:
    dsn, _, _ = ingested

    async def run() -> list:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            retrieval = Retrieval(db, HashEmbeddings(), None)
            caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
            async with retrieval.snapshot() as conn:
                assert await retrieval.legs.lexical(conn, "chunk", caller, "what did they say about it?", 50) == []
            out = []
            for query in ("who what when", "😀🎉😀", "Zebulon Quartermaine " * 380):  # the last: ~8 KB
                out.append(await retrieval.run_operation(caller, "claims_and_sources_context", {"query": query}))
            with pytest.raises(InvalidArgument, match="maxLength"):  # 100 KB: a clear 4xx, before any search
                await retrieval.run_operation(caller, "claims_and_sources_context", {"query": "word " * 20_000})
            return out
        finally:
            await db.close()
    for env in asyncio.run(run()):
        # no lexical match is possible, the semantic leg still answers: evidence or a typed negative
        assert env.evidence or env.chunks or env.negative.explanation


def test_each_turn_and_block_of_a_chunk_has_its_own_vector(ingested) -> None:
    dsn, _, docs = ingested

    async def run() -> None:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            rows = await db.fetch("SELECT chunk_id, doc_id, chunk_text, embedding FROM chunks "
                                  "WHERE embedding IS NOT NULL")
            units: dict[uuid.UUID, list[tuple[int, list[float]]]] = {}
            for u in await db.fetch("SELECT chunk_id, ordinal, embedding FROM chunk_units ORDER BY ordinal"):
                units.setdefault(u["chunk_id"], []).append((u["ordinal"], u["embedding"].to_list()))
            assert set(units) == {r["chunk_id"] for r in rows}
            assert {docs[r["doc_id"]].kind for r in rows} == {"conversation", "document"}
            for r in rows:
                texts = retrieval_units(r["chunk_text"])
                assert [n for n, _ in units[r["chunk_id"]]] == list(range(len(texts)))
                vectors = await HashEmbeddings().embed(texts)
                assert np.allclose([v for _, v in units[r["chunk_id"]]], vectors, atol=1e-5)
                whole = await HashEmbeddings().embed([retrieval_text(r["chunk_text"])])
                assert np.allclose(r["embedding"].to_list(), whole[0], atol=1e-5)  # and the whole text its own
            conversation = [r for r in rows if docs[r["doc_id"]].kind == "conversation"]
            assert sum(len(units[r["chunk_id"]]) for r in conversation) > 2 * len(conversation)  # several turns a chunk
        finally:
            await db.close()
    asyncio.run(run())


def test_the_semantic_chunk_leg_ranks_a_chunk_by_its_best_unit(ingested) -> None:
    dsn, _, _ = ingested

    async def run() -> None:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            retrieval = Retrieval(db, HashEmbeddings(), None)
            caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
            rows = await db.fetch("SELECT chunk_id, chunk_text, embedding FROM chunks ORDER BY chunk_id")
            probes = [(r, retrieval_units(r["chunk_text"])) for r in rows]
            probes = [(r, max(units, key=len)) for r, units in probes if len(units) >= 3][:5]
            assert probes
            for row, said in probes:
                # One turn or block of a many-unit chunk, asked word for word: that unit matches
                # exactly, so the chunk scores the mean of 1 (its best unit) and its whole text's.
                vector = (await HashEmbeddings().embed([said]))[0]
                whole = float(np.dot(row["embedding"].to_list(), vector))
                for exact_max, plan in ((None, "exact"), (0, "hnsw")):
                    saved = adapters.EXACT_SCAN_MAX
                    if exact_max is not None:
                        adapters.EXACT_SCAN_MAX = exact_max
                    try:
                        async with retrieval.snapshot() as conn:
                            found = await retrieval.legs.semantic(conn, "chunk", caller, vector, 10)
                    finally:
                        adapters.EXACT_SCAN_MAX = saved
                    assert retrieval.legs.plans[-1] == plan
                    assert len({i for i, _ in found}) == len(found)  # a chunk once, however many units match
                    assert found[0][0] == row["chunk_id"], (plan, said, found[:3])
                    assert found[0][1] == pytest.approx((1 + whole) / 2, abs=1e-4)
                    assert found[0][1] > whole + 1e-3  # more than its whole text alone would score
        finally:
            await db.close()
    asyncio.run(run())


def test_unit_vectors_go_with_their_chunks(ingested) -> None:
    dsn, _, _ = ingested

    async def run() -> None:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            async with db.acquire() as conn:
                tx = conn.transaction()
                await tx.start()
                try:  # a chunk written again (a re-run of the chunk stage deletes the old rows)
                    chunk_id = uuid.uuid4()
                    await conn.execute(
                        """INSERT INTO chunks (chunk_id, space_id, doc_id, version_id, representation_id, ordinal,
                                               block_start, block_end, char_start, char_end, token_count, chunk_text,
                                               content_hash, embedding, embedding_dim, embedding_model)
                           SELECT $1, space_id, doc_id, version_id, representation_id, 100000, block_start,
                                  block_end, char_start, char_end, token_count, chunk_text, content_hash, embedding,
                                  embedding_dim, embedding_model FROM chunks WHERE embedding IS NOT NULL LIMIT 1""",
                        chunk_id)
                    await conn.execute(
                        """INSERT INTO chunk_units (chunk_id, ordinal, space_id, embedding, embedding_dim,
                                                    embedding_model)
                           SELECT chunk_id, 0, space_id, embedding, embedding_dim, embedding_model FROM chunks
                            WHERE chunk_id = $1""", chunk_id)
                    await conn.execute("DELETE FROM chunks WHERE chunk_id = $1", chunk_id)
                    assert await conn.fetchval("SELECT count(*) FROM chunk_units WHERE chunk_id = $1", chunk_id) == 0
                finally:
                    await tx.rollback()
        finally:
            await db.close()
    asyncio.run(run())


def test_a_model_change_is_a_guided_reembed_never_a_silent_mix(ingested) -> None:
    # Runs last in this module: it changes the space's model.
    dsn, _, _ = ingested
    old, new = HashEmbeddings(), HashEmbeddings(dimension=256)

    async def run() -> None:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
            query = "Which company is Tom's new job with?"
            stale = Retrieval(db, new, None)  # queries with a model the space was not embedded with
            async with stale.snapshot() as conn:
                assert await stale.legs.semantic(conn, "chunk", caller, await stale.embed_query(query), 10) == []
            with pytest.raises(Conflict, match="testament ops reembed"):
                await Primitives(stale).search(caller, "chunk", query, 10, "semantic")
            env = await stale.run_operation(caller, "claims_and_sources_context", {"query": query})
            assert env.chunks  # BM25 still answers

            async with db.acquire() as conn:
                summary = await reembed_space(conn, caller.space_id, new.embed, new.model)
                assert summary["previous_model"] == old.model and summary["dimension"] == 256
                assert all(n > 0 for n in summary["reembedded"].values())
                for table, column in (("chunks", "embedding_model"), ("claims", "embedding_model"),
                                      ("facts", "embedding_model"), ("entities", "profile_model")):
                    models = await conn.fetch(f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT NULL")
                    assert [r[0] for r in models] == [new.model], table
                units = await conn.fetchrow("SELECT count(*) AS n, array_agg(DISTINCT embedding_model) AS models, "
                                            "array_agg(DISTINCT embedding_dim) AS dims FROM chunk_units")
                assert (units["n"], units["models"], units["dims"]) == (summary["reembedded"]["chunk_units"],
                                                                       [new.model], [256])
                text = await conn.fetchval("SELECT chunk_text FROM chunks WHERE chunk_text LIKE '%Faria Logistics%'")
            fresh = Retrieval(db, new, None)
            said = next(u for u in retrieval_units(text) if "Faria Logistics" in u)
            env = await Primitives(fresh).search(caller, "chunk", said, 10, "semantic")
            assert env.chunks and "Faria Logistics" in env.chunks[0].chunk_text  # the new units answer
            async with db.acquire() as conn:
                await conn.execute("INSERT INTO work_units (space_id, version_id, stage, unit_key, "
                                   "component_version) SELECT $1, version_id, 'embed_chunk', 'x', 'embed_chunk/1' "
                                   "FROM document_versions LIMIT 1", caller.space_id)
                with pytest.raises(ReembedRefused, match="pending or running"):
                    await reembed_space(conn, caller.space_id, old.embed, old.model)
        finally:
            await db.close()
    asyncio.run(run())


def test_the_evidence_operation_returns_the_best_turns_themselves(ingested) -> None:
    # Ranked by unit: each passage is one turn or block, the unit's own slice of the chunk it
    # names; the ranking reads the passages first (one entry each, in order), then the claims.
    dsn, sets, docs = ingested
    questions = [q for s in sets for q in s.questions][::10]

    async def run() -> list[Any]:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            retrieval = Retrieval(db, HashEmbeddings(), None)
            assert retrieval.weights.by_unit
            caller = Caller(await db.fetchval("SELECT space_id FROM spaces WHERE is_default"), Scope.READ, None)
            out = []
            for q in questions:
                env = await retrieval.run_operation(caller, "claims_and_sources_context", {"query": q.text})
                whole = {r["chunk_id"]: (r["char_start"], r["char_end"]) for r in await db.fetch(
                    "SELECT chunk_id, char_start, char_end FROM chunks WHERE chunk_id = ANY($1::uuid[])",
                    [uuid.UUID(c.chunk_id) for c in env.chunks])}
                out.append((env, whole))
            return out
        finally:
            await db.close()
    by_doc = {str(doc_id): doc for doc_id, doc in docs.items()}
    for env, whole in asyncio.run(run()):
        assert env.chunks
        for c in env.chunks:
            doc = by_doc[c.doc_id]
            assert doc.markdown[c.char_start:c.char_end] == c.chunk_text
            start, end = whole[uuid.UUID(c.chunk_id)]
            assert start <= c.char_start < c.char_end <= end  # inside the passage it names
            assert len(doc.units_in(c.char_start, c.char_end)) == 1, c.chunk_text  # one turn or block
        assert len({(c.chunk_id, c.char_start) for c in env.chunks}) == len(env.chunks)  # each unit once
        passages = [r for r in env.ranking if r.item_id in {c.chunk_id for c in env.chunks}]
        assert len(passages) == len(env.chunks) and list(env.ranking)[:len(passages)] == passages
        assert [r.score for r in passages] == sorted((r.score for r in passages), reverse=True)
        for r in env.ranking:
            assert r.score == pytest.approx(sum(r.signals.values()), rel=1e-9)
