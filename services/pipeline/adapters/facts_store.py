"""Facts in PostgreSQL: the entity cascade, mentions and assertions, applying adjudication
verdicts, reconciliation of testimony and support, labels and profiles.

Every writer runs inside the unit's completion transaction under a per-space advisory
lock, so two versions of one space never race to create the same entity or fact.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from services.pipeline.adapters.store import derived_id, index_text
from services.pipeline.domain.adjudicate import FactView, Incoming, Verdict
from services.pipeline.domain.entities import RESOLVER_VERSION, Candidate, ResolutionVerdict, choose
from services.pipeline.domain.facts import Window, attribute_key, normalize_name

# Candidate width per tier: the cascade finds candidates, the chooser decides.
CANDIDATE_WIDTH = 8
TRIGRAM_FLOOR = 0.3


async def lock_space(conn: asyncpg.Connection, space_id: uuid.UUID) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1::text, 7))", str(space_id))


async def known_aliases(conn: Any, space_id: uuid.UUID, texts: Sequence[str]) -> frozenset[str]:
    """Normalised aliases of the space found as word n-grams (1–5) of the texts."""
    grams: set[str] = set()
    for text in texts:
        words = normalize_name(text).split()
        for n in range(1, 6):
            grams.update(" ".join(words[i:i + n]) for i in range(len(words) - n + 1))
    if not grams:
        return frozenset()
    rows = await conn.fetch(
        """SELECT DISTINCT a.normalized_alias FROM entity_aliases a JOIN entities e USING (entity_id)
            WHERE a.space_id = $1 AND a.normalized_alias = ANY($2::text[]) AND e.merged_into IS NULL""",
        space_id, sorted(grams))
    return frozenset(r[0] for r in rows)


async def candidates(conn: asyncpg.Connection, space_id: uuid.UUID, doc_id: uuid.UUID,
                     name: str) -> list[Candidate]:
    """T0 exact alias (every match), then T1 trigram, then T2 Daitch–Mokotoff, stopping at
    the first tier that finds anything. Entities already named in the document are marked."""
    key = normalize_name(name)
    in_doc = {r[0] for r in await conn.fetch(
        "SELECT DISTINCT resolved_entity_id FROM mentions WHERE doc_id = $1 AND resolved_entity_id IS NOT NULL",
        doc_id)}
    rows = await conn.fetch(
        """SELECT DISTINCT ON (e.entity_id) e.entity_id, a.normalized_alias
             FROM entity_aliases a JOIN entities e USING (entity_id)
            WHERE a.space_id = $1 AND a.normalized_alias = $2 AND e.merged_into IS NULL""", space_id, key)
    if rows:
        return [Candidate(r[0], r[1], "T0", 1.0, r[0] in in_doc) for r in rows]
    rows = await conn.fetch(
        """SELECT e.entity_id, a.normalized_alias, similarity(a.normalized_alias, $2) AS score
             FROM entity_aliases a JOIN entities e USING (entity_id)
            WHERE a.space_id = $1 AND e.merged_into IS NULL AND a.normalized_alias % $2
              AND similarity(a.normalized_alias, $2) >= $3
            ORDER BY score DESC LIMIT $4""", space_id, key, TRIGRAM_FLOOR, CANDIDATE_WIDTH * 2)
    found = _best_per_entity([Candidate(r[0], r[1], "T1", float(r[2]), r[0] in in_doc) for r in rows])
    if found:
        return found[:CANDIDATE_WIDTH]
    codes = await phonetic(conn, key)
    if codes:
        rows = await conn.fetch(
            """SELECT e.entity_id, a.normalized_alias FROM entity_aliases a JOIN entities e USING (entity_id)
                WHERE a.space_id = $1 AND e.merged_into IS NULL AND a.phonetic && $2::text[]
                LIMIT $3""", space_id, codes, CANDIDATE_WIDTH)
        return _best_per_entity([Candidate(r[0], r[1], "T2", 0.7, r[0] in in_doc) for r in rows])
    return []


def _best_per_entity(found: list[Candidate]) -> list[Candidate]:
    best: dict[uuid.UUID, Candidate] = {}
    for c in found:
        if c.entity_id not in best or c.score > best[c.entity_id].score:
            best[c.entity_id] = c
    return sorted(best.values(), key=lambda c: -c.score)


async def phonetic(conn: asyncpg.Connection, key: str) -> list[str]:
    first = key.split()[0] if key else ""
    if not first or not re.search(r"[a-z]", first):
        return []
    codes = await conn.fetchval("SELECT daitch_mokotoff($1)", first)
    return list(codes or [])


async def resolve(conn: asyncpg.Connection, space_id: uuid.UUID, doc_id: uuid.UUID, surface: str,
                  cache: dict[str, tuple[uuid.UUID, ResolutionVerdict]]) -> tuple[uuid.UUID, ResolutionVerdict]:
    """An entity for a name: the document's own earlier match, else the cascade + chooser,
    else a new entity. Every verdict is returned for the mention row."""
    key = normalize_name(surface)
    if key in cache:
        entity_id, _ = cache[key]
        return entity_id, ResolutionVerdict(entity_id, "document", 1.0, {"reused_in_document": True})
    verdict = choose(key, await candidates(conn, space_id, doc_id, surface))
    entity_id = verdict.entity_id
    if entity_id is None:
        entity_id = uuid.uuid4()
        await conn.execute(
            """INSERT INTO entities (entity_id, space_id, canonical_name, normalized_name) VALUES ($1, $2, $3, $4)""",
            entity_id, space_id, surface, key)
    await conn.execute(
        """INSERT INTO entity_aliases (space_id, entity_id, alias_text, normalized_alias, phonetic)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (entity_id, normalized_alias) DO UPDATE SET last_seen = clock_timestamp()""",
        space_id, entity_id, surface, key, await _all_codes(conn, key))
    if verdict.entity_id is not None and len(key) > len(normalize_name(await conn.fetchval(
            "SELECT canonical_name FROM entities WHERE entity_id = $1", entity_id))):
        # The fullest spelling seen becomes the canonical name ("Ravi" -> "Ravi Shankar").
        await conn.execute("UPDATE entities SET canonical_name = $2, normalized_name = $3, updated_at = "
                           "clock_timestamp() WHERE entity_id = $1", entity_id, surface, key)
    cache[key] = (entity_id, verdict)
    return entity_id, verdict


async def _all_codes(conn: asyncpg.Connection, key: str) -> list[str]:
    codes: list[str] = []
    for word in key.split():
        if re.search(r"[a-z]", word):
            codes.extend(await conn.fetchval("SELECT daitch_mokotoff($1)", word) or [])
    return sorted(set(codes))


async def save_mention(conn: asyncpg.Connection, *, space_id: uuid.UUID, doc_id: uuid.UUID, version_id: uuid.UUID,
                       claim_id: uuid.UUID, ordinal: int, role: str, surface: str, entity_id: uuid.UUID,
                       verdict: ResolutionVerdict) -> uuid.UUID:
    mention_id = derived_id("mention", claim_id, ordinal, role)
    await conn.execute(
        """INSERT INTO mentions (mention_id, space_id, doc_id, version_id, claim_id, surface_form, normalized_lemma,
                                 resolved_entity_id, resolution_method, resolution_confidence,
                                 resolution_is_new_entity, resolved_at, scores, resolver_version)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, clock_timestamp(), $12, $13)
           ON CONFLICT (mention_id) DO NOTHING""",
        mention_id, space_id, doc_id, version_id, claim_id, surface, normalize_name(surface), entity_id,
        verdict.method, verdict.confidence, verdict.entity_id is None, verdict.scores, RESOLVER_VERSION)
    return mention_id


# --------------------------------------------------------------------------------------
# adjudication
# --------------------------------------------------------------------------------------

def _window(row: Any) -> Window:
    return Window(row["valid_from"], row["valid_until"], row["valid_precision"])


def statement_key(statement: str | None) -> str:
    return normalize_name(statement or "")


async def fact_views(conn: asyncpg.Connection, space_id: uuid.UUID, incoming: Incoming,
                     subject_name: str) -> list[FactView]:
    rows = await conn.fetch(
        """SELECT fact_id, kind, subject_entity_id, predicate, object_entity_id, statement, valid_from, valid_until,
                  valid_precision, superseded_by IS NOT NULL AS superseded, contradiction_group
             FROM facts
            WHERE space_id = $1 AND invalidated_at IS NULL
              AND (subject_entity_id = $2 OR (kind = 'relation' AND predicate = $3 AND object_entity_id = $4))
            ORDER BY ingested_at""",
        space_id, incoming.subject_id, incoming.predicate, incoming.object_id)
    return [FactView(r["fact_id"], r["kind"], r["subject_entity_id"], r["predicate"], r["object_entity_id"],
                     r["statement"], _window(r), r["superseded"], r["contradiction_group"],
                     attribute_key(r["statement"] or "", normalize_name(subject_name)),
                     statement_key(r["statement"])) for r in rows]


async def apply(conn: asyncpg.Connection, *, space_id: uuid.UUID, incoming: Incoming, verdict: Verdict,
                assertion_id: uuid.UUID, claim_id: uuid.UUID, doc_id: uuid.UUID, label: str) -> uuid.UUID | None:
    """Write a verdict: the fact, its evidence, supersessions, groups and the transcript."""
    subject_kind = incoming.kind
    if verdict.outcome == "drop":
        await conn.execute("UPDATE assertions SET adjudicated_at = clock_timestamp(), features = features || $2 "
                           "WHERE assertion_id = $1", assertion_id, {"dropped": verdict.reason})
        return None
    if verdict.outcome in ("noop", "update", "contradict_evidence"):
        assert verdict.target is not None
        fact_id = verdict.target
        before = await conn.fetchrow("SELECT valid_from, valid_until, valid_precision FROM facts WHERE fact_id = $1",
                                     fact_id)
        if verdict.outcome == "update" and verdict.window is not None:
            w = verdict.window
            await conn.execute(
                """UPDATE facts SET valid_from = $2, valid_until = $3, valid_precision = $4,
                                    statement = CASE WHEN kind = 'observation' THEN $5 ELSE statement END,
                                    label = CASE WHEN kind = 'observation' THEN $5 ELSE label END
                    WHERE fact_id = $1""", fact_id, w.valid_from, w.valid_until, w.precision,
                incoming.statement or label)
        stance = "contradicts" if verdict.outcome == "contradict_evidence" else "supports"
        await _evidence(conn, space_id, fact_id, claim_id, doc_id, stance)
        await _decision(conn, space_id, fact_id, subject_kind,
                        "contradict" if stance == "contradicts" else verdict.outcome, verdict, claim_id,
                        before=_window(before) if before else None, after=verdict.window)
    else:
        fact_id = derived_id("fact", assertion_id)
        w = verdict.window or incoming.window
        group = None
        if verdict.outcome == "contradict":
            existing = await conn.fetchval(
                "SELECT contradiction_group FROM facts WHERE fact_id = ANY($1::uuid[]) AND contradiction_group "
                "IS NOT NULL LIMIT 1", list(verdict.group_with))
            group = existing or uuid.uuid4()
        await conn.execute(
            """INSERT INTO facts (fact_id, space_id, kind, subject_entity_id, predicate, object_entity_id, statement,
                                  label, valid_from, valid_until, valid_precision, contradiction_group, confidence)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
               ON CONFLICT (fact_id) DO NOTHING""",
            fact_id, space_id, incoming.kind, incoming.subject_id, incoming.predicate, incoming.object_id,
            incoming.statement, label, w.valid_from, w.valid_until, w.precision, group, verdict.confidence)
        await _evidence(conn, space_id, fact_id, claim_id, doc_id, "supports")
        await _decision(conn, space_id, fact_id, subject_kind, "add" if verdict.outcome == "add" else "contradict",
                        verdict, claim_id, before=None, after=w)
        if group is not None:
            await conn.execute("UPDATE facts SET contradiction_group = $2 WHERE fact_id = ANY($1::uuid[])",
                               list(verdict.group_with), group)
            for other in verdict.group_with:
                await _decision(conn, space_id, other, subject_kind, "contradict", verdict, claim_id,
                                before=None, after=None, related=fact_id)
        for predecessor, close_at in verdict.supersede:
            before = await conn.fetchrow(
                "SELECT kind, valid_from, valid_until, valid_precision FROM facts WHERE fact_id = $1", predecessor)
            after = _window(before)
            if close_at is not None:
                after = Window(after.valid_from, close_at, "day" if after.precision in ("open", "unknown")
                               else after.precision)
            await conn.execute(
                "UPDATE facts SET superseded_by = $2, valid_until = $3, valid_precision = $4 WHERE fact_id = $1",
                predecessor, fact_id, after.valid_until, after.precision)
            await _decision(conn, space_id, predecessor, before["kind"], "supersede", verdict, claim_id,
                            before=_window(before), after=after, related=fact_id)
    await conn.execute("UPDATE assertions SET fact_id = $2, adjudicated_at = clock_timestamp() "
                       "WHERE assertion_id = $1", assertion_id, fact_id)
    return fact_id


async def _evidence(conn: asyncpg.Connection, space_id: uuid.UUID, fact_id: uuid.UUID, claim_id: uuid.UUID,
                    doc_id: uuid.UUID, stance: str) -> None:
    await conn.execute(
        """INSERT INTO fact_evidence (fact_id, claim_id, stance, space_id, doc_id) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (fact_id, claim_id) DO NOTHING""", fact_id, claim_id, stance, space_id, doc_id)


async def _decision(conn: asyncpg.Connection, space_id: uuid.UUID, fact_id: uuid.UUID, subject_kind: str,
                    outcome: str, verdict: Verdict, claim_id: uuid.UUID | None, *, before: Window | None,
                    after: Window | None, related: uuid.UUID | None = None) -> None:
    features = {"reason": verdict.reason, **verdict.features,
                "window_before": before.as_json() if before else None,
                "window_after": after.as_json() if after else None}
    await conn.execute(
        """INSERT INTO fact_decisions (space_id, fact_id, subject_kind, outcome, method, confidence, related_id,
                                       claim_id, features)
           VALUES ($1, $2, $3, $4, 'rules', $5, $6, $7, $8)""",
        space_id, fact_id, subject_kind, outcome, verdict.confidence, related or verdict.target, claim_id,
        json.loads(json.dumps(features, default=str)))


# --------------------------------------------------------------------------------------
# reconciliation
# --------------------------------------------------------------------------------------

async def supersede_living_testimony(conn: asyncpg.Connection, space_id: uuid.UUID, doc_id: uuid.UUID,
                                     version_id: uuid.UUID) -> list[uuid.UUID]:
    """A living document's new version is the standing statement: claims of earlier versions
    that no passage of this version carries stop being current testimony."""
    rows = await conn.fetch(
        """UPDATE claims c SET is_current_testimony = false
            WHERE c.doc_id = $1 AND c.is_current_testimony
              AND NOT EXISTS (SELECT 1 FROM claim_occurrences o WHERE o.claim_id = c.claim_id AND o.version_id = $2)
        RETURNING c.claim_id, c.version_id""", doc_id, version_id)
    if rows:
        reconciliation = uuid.uuid4()
        await conn.executemany(
            """INSERT INTO testimony_currency_events (space_id, claim_id, doc_id, reconciliation_id, became_current,
                                                      reason, from_version_id)
               VALUES ($1, $2, $3, $4, false, 'version_superseded', $5)""",
            [(space_id, r["claim_id"], doc_id, reconciliation, r["version_id"]) for r in rows])
    return [r["claim_id"] for r in rows]


# --------------------------------------------------------------------------------------
# labels, vectors and profiles
# --------------------------------------------------------------------------------------

async def facts_of_version(conn: Any, version_id: uuid.UUID) -> list[asyncpg.Record]:
    return await conn.fetch(
        """SELECT DISTINCT f.fact_id, f.label, f.subject_entity_id, f.object_entity_id
             FROM assertions a JOIN facts f ON f.fact_id = a.fact_id WHERE a.version_id = $1""", version_id)


async def index_facts(conn: asyncpg.Connection, space_id: uuid.UUID, facts: Sequence[asyncpg.Record]) -> None:
    ids = [f["fact_id"] for f in facts]
    await conn.execute("DELETE FROM bm25_postings WHERE target_kind = 'fact' AND target_id = ANY($1::uuid[])", ids)
    await index_text(conn, space_id, "fact", [(f["fact_id"], None, f["label"]) for f in facts])


async def profile_texts(conn: Any, entity_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """An entity's profile: its name and the labels of its strongest current facts."""
    rows = await conn.fetch(
        """SELECT e.entity_id, e.canonical_name,
                  (SELECT string_agg(label, '. ' ORDER BY evidence_count DESC, ingested_at)
                     FROM (SELECT label, evidence_count, ingested_at FROM facts f
                            WHERE (f.subject_entity_id = e.entity_id OR f.object_entity_id = e.entity_id)
                              AND f.invalidated_at IS NULL ORDER BY evidence_count DESC, ingested_at LIMIT 8) top)
                  AS summary
             FROM entities e WHERE e.entity_id = ANY($1::uuid[])""", list(entity_ids))
    return {r["entity_id"]: f"{r['canonical_name']}. {r['summary'] or ''}".strip() for r in rows}


async def save_profiles(conn: asyncpg.Connection, space_id: uuid.UUID, profiles: dict[uuid.UUID, str],
                        vectors: dict[uuid.UUID, list[float]], model: str) -> None:
    import numpy as np

    for entity_id, text in profiles.items():
        vector = vectors.get(entity_id)
        await conn.execute(
            """UPDATE entities SET profile_summary = $2, profile_embedding = $3, profile_dim = $4, profile_model = $5,
                                   updated_at = clock_timestamp() WHERE entity_id = $1""",
            entity_id, text, np.asarray(vector, dtype=np.float32) if vector else None,
            len(vector) if vector else None, model if vector else None)
    await conn.execute("DELETE FROM bm25_postings WHERE target_kind = 'entity' AND target_id = ANY($1::uuid[])",
                       list(profiles))
    await index_text(conn, space_id, "entity", [(e, None, t) for e, t in profiles.items()])


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
