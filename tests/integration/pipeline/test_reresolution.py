"""Issue #12, order independence at entity resolution, against a real PostgreSQL: a bare
"Ravi" that joined the only full name it fitted is resolved again when a second full name
("Ravi Patel") arrives, and what depended on it is adjudicated again, so every order of
the documents (and of their stages) leaves the same facts, windows, labels and mentions.

Documents go through the real offline extractor, grounding, normalisation, adjudication,
support counts and labels (``FactsWriter``), one transaction per stage under the space
lock, as the pipeline's units commit them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import uuid
from collections.abc import AsyncIterator, Sequence

import pytest

from services.pipeline.adapters.facts_writer import FactsWriter
from services.pipeline.adapters.store import PgStageStore, VersionSource
from services.pipeline.domain.claims import ExtractionInput, ParsedClaimProvider, Passage
from services.pipeline.domain.facts import ParseRelationProvider
from services.pipeline.domain.grounding import ground
from services.platform.db import Database
from services.platform.embeddings import HashEmbeddings
from services.platform.locks import lock_space

HASH = HashEmbeddings(384)
UTC = dt.UTC

SHANKAR = ("shankar", "# Team\n\nRavi Shankar moved from the billing migration to the search team on 1 June.\n"
                      "Ravi owns the invoice exporter.\n", "2026-06-10")
BARE = ("bare", "# Notes\n\nRavi works on the billing migration.\nRavi finished the export API.\n", "2026-03-01")
PATEL = ("patel", "# Design\n\nRavi Patel leads the design team.\n", "2026-03-05")
KUMAR = ("kumar", "# Kumar\n\nRavi Kumar joined the data platform team.\n", "2026-04-01")
# "Ravi" before the full name its document gives him
LATE = ("late", "# Sync\n\nRavi owns the billing dashboard.\nRavi Shankar leads the search team.\n", "2026-05-01")
DOCUMENTS = (SHANKAR, BARE, PATEL, KUMAR, LATE)


@pytest.fixture()
async def db(dsn: str) -> AsyncIterator[Database]:
    database = await Database.connect(dsn, max_size=2)
    try:
        yield database
    finally:
        await database.close()


async def add_document(db: Database, space_id: uuid.UUID, ref: str, text: str, said_on: str) -> VersionSource:
    """A document, its version, representation and one chunk, and the claims the offline
    extractor reads from it, grounded and saved as the claim stages save them."""
    sha = hashlib.sha256(f"{space_id}{text}".encode()).hexdigest()
    said = dt.datetime.fromisoformat(said_on).replace(hour=10, tzinfo=UTC)
    async with db.transaction() as conn:
        await conn.execute("INSERT INTO content_objects (space_id, content_hash, byte_size, mime, object_key) "
                           "VALUES ($1, $2, $3, 'text/markdown', $4)", space_id, sha, len(text), f"originals/{sha}")
        doc_id = uuid.uuid4()
        await conn.execute("INSERT INTO documents (doc_id, space_id, source_kind, identity_hash, versioning_mode, "
                           "title) VALUES ($1, $2, 'file', $3, 'snapshot', $4)", doc_id, space_id, sha, ref)
        version_id = await conn.fetchval(
            "INSERT INTO document_versions (doc_id, space_id, version_no, content_hash, source_modified_at) "
            "VALUES ($1, $2, 1, $3, $4) RETURNING version_id", doc_id, space_id, sha, said)
        await conn.execute("INSERT INTO representations (representation_id, space_id, version_id, object_key, "
                           "markdown_sha256, char_count, converter) VALUES ($1, $2, $3, 'r', $4, $5, 'test')",
                           uuid.uuid4(), space_id, version_id, sha, len(text))
    store = PgStageStore(db)
    source = await store.version(version_id)
    chunk_id = uuid.uuid4()
    provider = ParsedClaimProvider()
    item = ExtractionInput(text, Passage(str(chunk_id), 0, len(text)), said, ref)
    kept, decisions = ground(item, *await provider.extract(item))
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO chunks (chunk_id, space_id, doc_id, version_id, representation_id, ordinal, block_start, "
            "block_end, char_start, char_end, token_count, chunk_text, content_hash) "
            "VALUES ($1, $2, $3, $4, $5, 0, 0, 1, 0, $6, 20, $7, 'h')",
            chunk_id, space_id, doc_id, version_id, source.representation_id, len(text), text)
        await store.save_claims(conn, source, chunk_id, kept, decisions, extractor=provider.version,
                                asserted_at=said)
    return source


async def stage(db: Database, source: VersionSource, name: str) -> None:
    """One fact stage of one version, in its own transaction under the space lock."""
    writer = FactsWriter(db)
    if name == "normalize":
        drafted = await writer.drafts(source, ParseRelationProvider())
        async with db.transaction() as conn:
            await lock_space(conn, source.space_id)
            await writer.normalize(conn, source, drafted, floor=0.75)
        return
    if name == "label":
        labels = await writer.labels_to_embed(source, HASH.model)
        vectors = [HASH.embed_one(f["label"]) for f in labels.facts]
        profile_vectors = {e: HASH.embed_one(t) for e, t in labels.profiles.items()}
        neighbours = await writer.neighbourhood(source, labels, profile_vectors)  # as the stage: before the lock
        async with db.transaction() as conn:
            await lock_space(conn, source.space_id)
            await writer.save_labels(conn, source, labels, vectors, profile_vectors, HASH.model, neighbours)
        return
    async with db.transaction() as conn:
        await lock_space(conn, source.space_id)
        if name == "adjudicate":
            await writer.adjudicate(conn, source, floor=0.75)
        else:
            await writer.settle_counts(conn, source)


STAGES = ("normalize", "adjudicate", "settle", "label")


async def run(db: Database, order: Sequence[int], *, interleaved: bool = False,
              documents: Sequence[tuple[str, str, str]] = DOCUMENTS) -> tuple[uuid.UUID, dict]:
    """The documents in ``order``: each through every stage, or (``interleaved``) every
    document normalised in that order and then adjudicated, counted and labelled backwards."""
    async with db.transaction() as conn:
        space_id = await conn.fetchval("INSERT INTO spaces (slug, name) VALUES ($1, 'test') RETURNING space_id",
                                       f"r{uuid.uuid4().hex[:12]}")
    sources = [await add_document(db, space_id, *documents[i]) for i in order]
    if interleaved:
        for source in sources:
            await stage(db, source, "normalize")
        for name in STAGES[1:]:
            for source in reversed(sources):
                await stage(db, source, name)
    else:
        for source in sources:
            for name in STAGES:
                await stage(db, source, name)
    return space_id, await snapshot(db, space_id)


async def snapshot(db: Database, space_id: uuid.UUID) -> dict:
    """What is held, with entity ids replaced by names (ids differ between runs)."""
    async with db.acquire() as conn:
        facts = await conn.fetch(
            """SELECT f.label, f.valid_from, f.valid_until, f.valid_precision, f.evidence_count,
                      s.label AS superseded_by, f.contradiction_group IS NOT NULL AS contradicted,
                      f.embedding IS NOT NULL AS embedded
                 FROM facts f LEFT JOIN facts s ON s.fact_id = f.superseded_by AND s.space_id = f.space_id
                WHERE f.space_id = $1 AND f.invalidated_at IS NULL ORDER BY 1, 2""", space_id)
        mentions = await conn.fetch(
            """SELECT d.title, m.surface_form, e.canonical_name, e.entity_id
                 FROM mentions m JOIN documents d ON d.doc_id = m.doc_id AND d.space_id = m.space_id
                 JOIN entities e ON e.entity_id = m.resolved_entity_id AND e.space_id = m.space_id
                WHERE m.space_id = $1 ORDER BY 1, 2, 3""", space_id)
        aliases = await conn.fetch(
            """SELECT e.canonical_name, array_agg(a.normalized_alias ORDER BY a.normalized_alias) AS aliases
                 FROM entities e JOIN entity_aliases a ON a.entity_id = e.entity_id AND a.space_id = e.space_id
                WHERE e.space_id = $1 GROUP BY e.entity_id, e.canonical_name ORDER BY 1, 2""", space_id)
        orphans = await conn.fetchval(
            """SELECT count(*) FROM entities e WHERE e.space_id = $1
                  AND NOT EXISTS (SELECT 1 FROM entity_aliases a WHERE a.entity_id = e.entity_id
                                     AND a.space_id = e.space_id)""", space_id)
    groups: dict[uuid.UUID, set[tuple[str, str]]] = {}
    for m in mentions:
        groups.setdefault(m["entity_id"], set()).add((m["title"], m["surface_form"]))
    return {
        "facts": sorted(tuple(str(v) for v in dict(f).values()) for f in facts),
        "mentions": sorted({(m["title"], m["surface_form"], m["canonical_name"]) for m in mentions}),
        "partition": sorted(sorted(g) for g in groups.values()),
        "aliases": [(a["canonical_name"], list(a["aliases"])) for a in aliases],
        "orphans": orphans,
    }


async def test_every_order_of_the_three_ravis_holds_the_same_facts_windows_labels_and_mentions(
        db: Database) -> None:
    outcomes: dict[object, dict] = {}
    for order in itertools.permutations(range(3)):
        outcomes[order] = (await run(db, order))[1]
    outcomes["interleaved"] = (await run(db, (1, 0, 2), interleaved=True))[1]
    outcomes["interleaved-2"] = (await run(db, (2, 1, 0), interleaved=True))[1]
    first = outcomes[(0, 1, 2)]  # Shankar and Patel first: the bare "Ravi" met after both
    for key, outcome in outcomes.items():
        assert outcome == first, (key, outcome, first)
    mentions = set(first["mentions"])
    # the bare "Ravi" of a document that names no full "Ravi" joins neither full name
    assert ("bare", "Ravi", "Ravi") in mentions
    # a document that names "Ravi Shankar" keeps its own "Ravi" there
    assert ("shankar", "Ravi", "Ravi Shankar") in mentions
    labels = {f[0] for f in first["facts"]}
    assert {"Ravi works on billing migration", "Ravi finished export API", "Ravi Patel leads design team",
            "Ravi Shankar owns invoice exporter"} <= labels, labels
    assert first["orphans"] == 0
    assert all(f[-1] == "True" for f in first["facts"]), "every held fact is labelled and embedded"


async def test_a_moved_mention_says_why_and_the_facts_it_took_are_retracted_with_a_decision(
        db: Database) -> None:
    """Bare first, then Shankar (who joins the bare entity), then Patel: the bare mentions
    move, their verdict records the move, and the fact Shankar's move had closed is reopened
    on the bare "Ravi" (retracted with a decision, adjudicated again)."""
    space_id, held = await run(db, (1, 0, 2))
    async with db.acquire() as conn:
        moved = await conn.fetch(
            """SELECT m.scores, m.resolution_method FROM mentions m
                WHERE m.space_id = $1 AND m.scores ? 'reresolved'""", space_id)
        assert moved and all(m["scores"]["reresolved"]["rival"] == "ravi patel" for m in moved)
        decisions = await conn.fetch(
            """SELECT d.features, f.label FROM fact_decisions d JOIN facts f ON f.fact_id = d.fact_id
                AND f.space_id = d.space_id WHERE d.space_id = $1 AND d.outcome = 'retracted_reresolution'""",
            space_id)
        assert decisions and all(f["features"]["reason"] == "mention_re_resolved" for f in decisions)
        assert "Ravi Shankar works on billing migration" in {d["label"] for d in decisions}
        billing = [f for f in held["facts"] if f[0] == "Ravi works on billing migration"]
        assert len(billing) == 1 and billing[0][2] == "None", "the bare Ravi's billing work is not closed"
        # no duplicate rows: one live fact per label, one mention per claim role
        assert len({f[0] for f in held["facts"]}) == len(held["facts"])
        assert await conn.fetchval(
            """SELECT count(*) FROM (SELECT claim_id, role FROM (SELECT m.claim_id, m.mention_id AS role
                 FROM mentions m WHERE m.space_id = $1) x GROUP BY 1, 2 HAVING count(*) > 1) d""", space_id) == 0


async def test_a_third_full_name_neither_joins_the_unresolved_ravi_nor_changes_the_outcome(db: Database) -> None:
    """"Ravi Kumar" met after the bare "Ravi" was left between Shankar and Patel does not join
    it (met before it, Kumar is an entity of its own): all 24 orders of four documents agree."""
    outcomes = {order: (await run(db, order))[1] for order in itertools.permutations(range(4))}
    first = outcomes[(0, 2, 3, 1)]
    assert all(outcome == first for outcome in outcomes.values()), [
        order for order, outcome in outcomes.items() if outcome != first]
    assert ("bare", "Ravi", "Ravi") in set(first["mentions"])
    assert ("kumar", "Ravi Kumar", "Ravi Kumar") in set(first["mentions"])
    assert [("kumar", "Ravi Kumar")] in first["partition"]


async def test_a_bare_name_joins_the_full_name_its_document_gives_wherever_it_stands(db: Database) -> None:
    """"Ravi owns the billing dashboard. Ravi Shankar leads the search team.": the "Ravi" is
    Shankar's in every order, also when Shankar and Patel were known before the document."""
    documents = (SHANKAR, PATEL, LATE)
    outcomes = {order: (await run(db, order, documents=documents))[1]
                for order in itertools.permutations(range(3))}
    first = outcomes[(0, 1, 2)]
    assert all(outcome == first for outcome in outcomes.values()), [
        order for order, outcome in outcomes.items() if outcome != first]
    assert ("late", "Ravi", "Ravi Shankar") in set(first["mentions"])
    assert "Ravi Shankar owns billing dashboard" in {f[0] for f in first["facts"]}


async def _row_versions(db: Database, space_id: uuid.UUID) -> dict[str, dict[str, object]]:
    """Each fact's and entity's row version (xmin) and lexical postings, by label or name."""
    async with db.acquire() as conn:
        facts = await conn.fetch(
            """SELECT f.label, f.xmin::text AS v, (SELECT count(*) FROM bm25_postings p
                                                   WHERE p.target_kind = 'fact' AND p.target_id = f.fact_id) AS n
                 FROM facts f WHERE f.space_id = $1""", space_id)
        entities = await conn.fetch(
            """SELECT e.canonical_name, e.xmin::text AS v, e.profile_summary FROM entities e
                WHERE e.space_id = $1 AND e.profile_summary IS NOT NULL""", space_id)
    return {"facts": {r["label"]: (r["v"], r["n"]) for r in facts},
            "entities": {r["canonical_name"]: (r["v"], r["profile_summary"]) for r in entities}}


async def test_labelling_again_rewrites_only_what_changed(db: Database) -> None:
    # A version's label stage embeds its facts' labels and their entities' profiles. A fact
    # stored with a vector under the model, or a profile with the same text, is neither
    # embedded nor written again (no new row version, no postings rewritten); a relabelled one
    # (its vector cleared, as relabel does) is written again, postings and all.
    space_id, _ = await run(db, [0, 1])
    before = await _row_versions(db, space_id)
    assert before["facts"] and before["entities"]
    async with db.acquire() as conn:
        versions = await conn.fetch("SELECT version_id FROM document_versions WHERE space_id = $1", space_id)
    store = PgStageStore(db)
    sources = [await store.version(v["version_id"]) for v in versions]
    for source in sources:
        await stage(db, source, "label")
    assert await _row_versions(db, space_id) == before
    for source in sources:  # and nothing was embedded again
        again = await FactsWriter(db).labels_to_embed(source, HASH.model)
        assert again.facts == [] and again.profiles == {} and again.entities

    async with db.acquire() as conn:
        fact = await conn.fetchrow(
            "SELECT fact_id, label, subject_entity_id FROM facts WHERE space_id = $1 AND label LIKE 'Ravi%' "
            "ORDER BY label LIMIT 1", space_id)
        await conn.execute("UPDATE facts SET label = label || ' rechecked', embedding = NULL, embedding_dim = NULL, "
                           "embedding_model = NULL WHERE fact_id = $1", fact["fact_id"])
    for source in sources:
        await stage(db, source, "label")
    after = await _row_versions(db, space_id)
    relabelled = f"{fact['label']} rechecked"
    assert relabelled in after["facts"] and after["facts"][relabelled][1] > 0
    async with db.acquire() as conn:
        postings = {r["term"] for r in await conn.fetch(
            "SELECT term FROM bm25_postings WHERE target_kind = 'fact' AND target_id = $1", fact["fact_id"])}
        profile = await conn.fetchval("SELECT profile_summary FROM entities WHERE entity_id = $1",
                                      fact["subject_entity_id"])
    assert "recheck" in postings or "rechecked" in postings
    assert relabelled in profile  # the subject's profile names its facts' labels: rewritten too
    untouched = {k: v for k, v in before["facts"].items() if k != fact["label"]}
    assert {k: after["facts"][k] for k in untouched} == untouched


async def test_a_label_changed_after_it_was_read_keeps_no_stale_vector(db: Database) -> None:
    # The label stage reads and embeds outside the space lock; a relabel in between wins: the
    # vector of the old label is not stored, and the fact stays for a later label stage.
    space_id, _ = await run(db, [0])
    async with db.acquire() as conn:
        fact = await conn.fetchrow("SELECT fact_id, label FROM facts WHERE space_id = $1 ORDER BY label LIMIT 1",
                                   space_id)
        await conn.execute("UPDATE facts SET embedding = NULL, embedding_dim = NULL, embedding_model = NULL "
                           "WHERE fact_id = $1", fact["fact_id"])
        version = await conn.fetchval("SELECT version_id FROM document_versions WHERE space_id = $1", space_id)
    source = await PgStageStore(db).version(version)
    writer = FactsWriter(db)
    labels = await writer.labels_to_embed(source, HASH.model)
    assert [f["fact_id"] for f in labels.facts] == [fact["fact_id"]]
    async with db.transaction() as conn:
        await lock_space(conn, space_id)
        await conn.execute("UPDATE facts SET label = label || ' renamed' WHERE fact_id = $1", fact["fact_id"])
        await writer.save_labels(conn, source, labels, [HASH.embed_one(fact["label"])], {}, HASH.model, {})
    async with db.acquire() as conn:
        assert await conn.fetchval("SELECT embedding IS NULL FROM facts WHERE fact_id = $1", fact["fact_id"])
    assert [f["label"] for f in (await writer.labels_to_embed(source, HASH.model)).facts] == \
        [f"{fact['label']} renamed"]


async def test_an_undated_no_longer_ends_what_was_said_before_it_in_either_order(db: Database) -> None:
    # "Tomasz no longer owns the DNS config", said on 4 May with no date of its own: the fact
    # said on 1 April had ended by that day, whichever document the pipeline reads first (the
    # end read first waits, with when it was said, for the fact it ends). What is said after
    # the end is only contradicted by it.
    owns = ("owns", "# Infra\n\nTomasz Lis owns the DNS config.\n", "2026-04-01")
    ends = ("ends", "# Infra\n\nTomasz Lis no longer owns the DNS config.\n", "2026-05-04")
    later = ("later", "# Infra\n\nTomasz Lis owns the DNS config.\n", "2026-06-01")
    held = {}
    for order in ([0, 1], [1, 0]):
        _, snap = await run(db, order, documents=(owns, ends))
        held[tuple(order)] = snap["facts"]
    assert held[(0, 1)] == held[(1, 0)]
    [fact] = held[(0, 1)]
    assert fact[:4] == ("Tomasz Lis owns DNS config", "None", "2026-05-04 00:00:00+00:00", "day"), fact
    _, snap = await run(db, [1, 0], documents=(later, ends))
    [fact] = snap["facts"]
    assert fact[:4] == ("Tomasz Lis owns DNS config", "None", "None", "unknown"), fact


async def test_a_holder_named_after_an_end_takes_over_in_either_order(db: Database) -> None:
    # "… no longer owns the DNS config. The DNS config is Beatriz Sousa now.": the second
    # sentence names who holds what the first let go; in either order Tomasz's holding ends
    # by the day it was said (an end read first still dates a fact its successor closes).
    owns = ("owns", "# Infra\n\nTomasz Lis owns the DNS config.\n", "2026-04-01")
    handover = ("handover", "# Infra\n\nTomasz Lis no longer owns the DNS config. "
                            "The DNS config is Beatriz Sousa now.\n", "2026-05-04")
    held = {}
    for order in ([0, 1], [1, 0]):
        _, snap = await run(db, order, documents=(owns, handover))
        held[tuple(order)] = [f[:4] for f in snap["facts"]]
    assert held[(0, 1)] == held[(1, 0)], held
    assert held[(0, 1)] == [("Beatriz Sousa owns DNS config", "None", "None", "unknown"),
                            ("Tomasz Lis owns DNS config", "None", "2026-05-04 00:00:00+00:00", "day")]
