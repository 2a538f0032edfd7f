"""ACL property test: documents with clustered access lists, random callers; every answer
derives only from documents the caller may see, and the vector leg keeps its recall."""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

import numpy as np
import pytest
from testament.common.v1 import types_pb2 as t

from services.platform.auth import Caller, Scope
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from services.platform.embeddings import HashEmbeddings
from services.platform.text import normalize_name
from services.retrieval import adapters as db
from services.retrieval.app import Retrieval
from services.retrieval.domain import CURRENT
from services.retrieval.exposure import check
from tests.conftest import clone_database
from tests.e2e.test_pipeline import Pipeline
from tests.support import run_service

TOPICS = {
    "billing": ["invoice exporter", "billing ledger", "payment retries"],
    "search": ["ranking service", "query parser", "search index"],
    "hiring": ["interview loop", "offer letters", "recruiting pipeline"],
    "security": ["key rotation", "audit trail", "access review"],
}
PEOPLE = ["Ravi", "Dana", "Mira", "Omar", "Lena", "Tariq"]


def _documents(rng: random.Random) -> list[tuple[str, list[str]]]:
    docs = []
    for topic, things in TOPICS.items():
        for n in range(8):
            person = rng.choice(PEOPLE)
            thing = rng.choice(things)
            text = (f"# {topic.title()} note {n}\n\n{person} owns the {thing} for {topic}.\n\n"
                    f"{person} uses the {rng.choice(things)} every week.\n")
            # Clustered: a topic's documents belong to its team; a few are public or shared.
            roll = rng.random()
            acl = [] if roll < 0.15 else [topic] if roll < 0.85 else [topic, rng.choice(list(TOPICS))]
            docs.append((text, sorted(set(acl))))
    return docs


@pytest.fixture(scope="module")
def loaded(pg, tmp_path_factory: pytest.TempPathFactory):
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp("acl")
    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.5"}
    rng = random.Random(7)
    docs = _documents(rng)
    with run_service("ingest", dsn, tmp, **env) as ingest, run_service("pipeline", dsn, tmp, **env) as pipeline:
        stack = Pipeline(dsn, ingest.address, pipeline.address, tmp)
        for i, (text, acl) in enumerate(docs):
            version = stack.upload(text.encode(), f"doc{i}.md", acl=acl)
            assert stack.wait(version.version_id).ready
    return dsn, docs


def _visible(acl: list[str], principals: frozenset[str]) -> bool:
    return not acl or bool(set(acl) & principals)


async def _probe(dsn: str, docs: list[tuple[str, list[str]]]) -> None:
    database = await Database.connect(dsn, min_size=1, max_size=4)
    try:
        retrieval = Retrieval(database, HashEmbeddings(dimension=384), graph=None)
        space = await database.fetchval("SELECT space_id FROM spaces WHERE is_default")
        rows = await database.fetch("SELECT doc_id, acl FROM documents")
        doc_acl = {r["doc_id"]: list(r["acl"]) for r in rows}
        rng = random.Random(11)
        for _ in range(12):
            principals = frozenset(rng.sample(list(TOPICS), rng.randint(1, 2)))
            caller = Caller(space, Scope.READ, principals)
            visible_docs = {d for d, acl in doc_acl.items() if _visible(acl, principals)}
            visible_names = {p for text, acl in docs if _visible(acl, principals) for p in PEOPLE if p in text}
            query = f"who owns the {rng.choice(rng.choice(list(TOPICS.values())))}"
            envs = [
                await retrieval.facts_context(caller, query, None, 30, 5, 1, None, CURRENT),
                await retrieval.claims_and_sources(caller, query, None, 50, 200),
                await retrieval.resolve(caller, rng.choice(PEOPLE), ()),
            ]
            # An entity's facts join facts_context's fusion only when the caller may see them (else
            # they would be nominated, then dropped, and counted in dropped_by_hydration).
            async with database.transaction(isolation="repeatable_read", readonly=True) as conn:
                entities = [r[0] for r in await conn.fetch("SELECT entity_id FROM entities WHERE space_id = $1", space)]
                nominated = await db.facts_of_entities(conn, caller, entities, 10_000)
                supported = await conn.fetch(
                    """SELECT DISTINCT e.fact_id, c.doc_id FROM fact_evidence e JOIN claims c USING (claim_id)
                        WHERE e.stance = 'supports' AND c.is_current_testimony AND e.fact_id = ANY($1::uuid[])""",
                    nominated)
            assert nominated and {r["fact_id"] for r in supported if r["doc_id"] in visible_docs} == set(nominated)
            # A misspelt name resolves by trigram to the visible entities best by similarity,
            # exactly those (visibility is probed in score order, never counted first).
            misspelt = rng.choice(PEOPLE) + "h"
            fuzzy = await retrieval.resolve(caller, misspelt, ())
            async with database.transaction(isolation="repeatable_read", readonly=True) as conn:
                best = await conn.fetch(
                    f"""SELECT x.entity_id FROM entities x JOIN entity_aliases a USING (entity_id, space_id)
                         WHERE x.space_id = $1 AND x.merged_into IS NULL AND a.normalized_alias % $3
                           AND {db.ENTITY_VISIBLE}
                         GROUP BY x.entity_id ORDER BY max(similarity(a.normalized_alias, $3)) DESC, x.entity_id
                         LIMIT 8""", space, sorted(principals), normalize_name(misspelt))
            tiers = {e.tier for e in fuzzy.entities}
            if best:
                assert [uuid.UUID(e.entity_id) for e in fuzzy.entities] == [r[0] for r in best], misspelt
                assert tiers == {t.ResolutionTier.RESOLUTION_TIER_T1}
            else:  # nothing visible is near the name: a later tier may answer, never T1
                assert t.ResolutionTier.RESOLUTION_TIER_T1 not in tiers
            for env in envs:
                for e in env.evidence:
                    assert uuid.UUID(e.doc_id) in visible_docs, (principals, e.claim_text)
                for c in env.chunks:
                    assert uuid.UUID(c.doc_id) in visible_docs
                for entity in env.entities:
                    assert entity.canonical_name in visible_names, (principals, entity.canonical_name)
                for fact in env.facts:
                    assert any(name in fact.label for name in visible_names)
            # Recall of the vector leg against an exact oracle over the visible rows.
            vector = (await HashEmbeddings(dimension=384).embed([query]))[0]
            async with database.transaction(isolation="repeatable_read", readonly=True) as conn:
                oracle = await conn.fetch(
                    f"""SELECT c.claim_id, c.embedding <=> $3 AS distance FROM claims c
                         WHERE c.space_id = $1 AND c.is_current_testimony
                          AND c.embedding_dim = 384 AND {db.CLAIM_VISIBLE}
                        ORDER BY c.embedding <=> $3 LIMIT 10""", space, sorted(principals),
                    np.asarray(vector, dtype="float32"))
                # The semantic chunk leg searches unit vectors: a unit is visible exactly when its
                # chunk is; a chunk scores by its best unit and its whole text (the exact oracle).
                chunk_oracle = await conn.fetch(
                    f"""SELECT c.chunk_id, (min(u.embedding <=> $3) + min(c.embedding <=> $3)) / 2 AS distance
                          FROM chunk_units u JOIN chunks c ON c.chunk_id = u.chunk_id
                         WHERE c.space_id = $1 AND {db.CLAIM_VISIBLE}
                         GROUP BY c.chunk_id ORDER BY 2 LIMIT 10""", space, sorted(principals),
                    np.asarray(vector, dtype="float32"))
                chunk_docs = dict(await conn.fetch("SELECT chunk_id, doc_id FROM chunks"))
                for kind, expected in (("claim", oracle), ("chunk", chunk_oracle)):
                    # Rows with the same text tie; any of the tied rows is a right answer.
                    cutoff = expected[-1]["distance"] + 1e-6 if expected else 0.0
                    # Both plans: the exact scan (this space is small) and the restricted HNSW walk.
                    for exact_max, plan in ((None, "exact"), (0, "hnsw")):
                        saved = db.EXACT_SCAN_MAX, db.RESTRICTED_EXACT_SCAN_MAX
                        if exact_max is not None:
                            db.EXACT_SCAN_MAX = db.RESTRICTED_EXACT_SCAN_MAX = exact_max
                        try:
                            async with conn.transaction():
                                found = await retrieval.legs.semantic(conn, kind, caller, vector, 10)
                        finally:
                            db.EXACT_SCAN_MAX, db.RESTRICTED_EXACT_SCAN_MAX = saved
                        assert retrieval.legs.plans[-1] == plan
                        assert len(found) == len(expected), (kind, plan)
                        assert all(1 - score <= cutoff for _, score in found), (kind, plan)  # recall 1.0 up to ties
                        if kind == "chunk":
                            assert all(chunk_docs[i] in visible_docs for i, _ in found), (plan, principals)
                # The unit leg (turns and blocks by their own vectors, read with the chunk leg):
                # the same, unit by unit.
                unit_oracle = await conn.fetch(
                    f"""SELECT u.embedding <=> $3 AS distance FROM chunk_units u
                          JOIN chunks c ON c.chunk_id = u.chunk_id AND c.space_id = u.space_id
                         WHERE c.space_id = $1 AND {db.CLAIM_VISIBLE} ORDER BY 1 LIMIT 10""",
                    space, sorted(principals), np.asarray(vector, dtype="float32"))
                cutoff = unit_oracle[-1]["distance"] + 1e-6 if unit_oracle else 0.0
                for exact_max in (None, 0):
                    saved = db.EXACT_SCAN_MAX, db.RESTRICTED_EXACT_SCAN_MAX
                    if exact_max is not None:
                        db.EXACT_SCAN_MAX = db.RESTRICTED_EXACT_SCAN_MAX = exact_max
                    try:
                        async with conn.transaction():
                            units = (await retrieval.legs.semantic(conn, "chunk", caller, vector, 10,
                                                                   units=10)).units
                    finally:
                        db.EXACT_SCAN_MAX, db.RESTRICTED_EXACT_SCAN_MAX = saved
                    assert len(units) == len(unit_oracle) and all(1 - score <= cutoff for _, score in units)
                    assert all(chunk_docs[chunk] in visible_docs for (chunk, _), _ in units), principals
    finally:
        await database.close()


def test_every_answer_derives_only_from_visible_documents(loaded) -> None:
    dsn, docs = loaded
    asyncio.run(_probe(dsn, docs))


def test_the_exposure_check_reports_per_principal(loaded, tmp_path: Path) -> None:
    dsn, _ = loaded

    async def run() -> dict:
        database = await Database.connect(dsn, min_size=1, max_size=2)
        credentials = PgCredentials(database)
        try:
            # Principal sets as keys hold them: two keys with one set (in another order), one
            # with a thousand principals of which one occurs in an ACL, and a trusted key.
            for held in (["billing", "search"], ["search", "billing"], ["hiring", *(f"x{i}" for i in range(1000))]):
                await credentials.create_key(scope=Scope.READ, principals=held)
            await credentials.create_key(scope=Scope.READ, trusted=True)
            return await check(database, k=5, queries=5)
        finally:
            await database.execute("DELETE FROM credentials")
            await database.close()

    report = asyncio.run(run())
    assert {p["principal"] for p in report["principals"]} == set(TOPICS)
    assert all(p["testament_recall_at_k"] >= 0.99 for p in report["principals"])
    # Which plan each principal set got, over its sample queries.
    assert all(sum(p["testament_plans"].values()) == p["queries"] and set(p["testament_plans"]) <= {"exact", "hnsw"}
               for p in report["principals"])
    # And every key's principal set: the plan its visible rows give it, recall, latency.
    sets = {tuple(s["principals"][:2]): s for s in report["principal_sets"]}
    assert set(sets) == {("billing", "search"), ("hiring", "x0")}
    assert sets[("billing", "search")]["keys"] == 2 and sets[("hiring", "x0")]["keys"] == 1
    for s in sets.values():
        assert s["plan"] == "exact" and s["restricted"] and 0 < s["eligible_rows"] < s["space_rows"]
        assert s["testament_recall_at_k"] >= 0.99 and s["latency_vs_trusted"] > 0
    assert sets[("hiring", "x0")]["eligible_rows"] < sets[("billing", "search")]["eligible_rows"]


def test_restricted_rows_read_from_their_documents_are_the_rows_checked_one_by_one(loaded) -> None:
    """A restricted caller's exact scans read its rows from the documents it may see
    (``adapters._BY_DOCUMENT``) instead of checking every row of the space: for every kind,
    and every principal set (none visible but the public documents, one topic, two), the
    very rows the row-by-row visibility predicates admit."""
    dsn, _ = loaded

    async def run() -> None:
        database = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            space = await database.fetchval("SELECT space_id FROM spaces WHERE is_default")
            sets = [["nobody"], *([t] for t in TOPICS), ["billing", "search"]]
            for kind in ("claim", "chunk", "chunk_unit", "fact", "entity"):
                seen = {}
                for how, target in (("checked", db._TARGETS[kind]), ("read", db._rows(kind, True))):
                    unit = ", u.ordinal" if kind == "chunk_unit" else ""
                    sql = (f"SELECT {target['id']}{unit} FROM {target['table']} WHERE {target['space']} = $1 "
                           f"AND {target['where']}")
                    seen[how] = [{tuple(r) for r in await database.fetch(sql, space, principals)}
                                 for principals in sets]
                assert seen["read"] == seen["checked"], kind
                assert any(seen["read"]) and seen["read"][0] < seen["read"][-1] or kind == "entity", kind
        finally:
            await database.close()

    asyncio.run(run())
