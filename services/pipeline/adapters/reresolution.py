"""Re-resolution when a rival name arrives (issue #12, order independence).

A bare first name met when one full name fitted joined it ("Ravi" -> "Ravi Shankar"); met
after a second full name ("Ravi Patel") it joins neither (``entities.choose``). So when a
full name arrives, the bare mentions that other entities hold under its first word are
resolved again exactly as they would be if met now: each document's bare "Ravi" with the
document's other names as its context (a document that named "Ravi Shankar" keeps its
"Ravi" there). A mention that lands elsewhere is moved, its verdict rewritten with the move
under ``scores.reresolved``, and the facts that depended on it are retracted and adjudicated
again in one deterministic order (:func:`reopen`); graph edges are read from facts.

Runs inside normalisation's transaction, under the space lock (services/platform/locks.py):
mentions and aliases (entities) first, then facts in key order.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import asyncpg

from services.pipeline.adapters import facts_store as fs
from services.pipeline.domain.entities import RESOLVER_VERSION

if TYPE_CHECKING:
    from services.pipeline.adapters.store import VersionSource

# A chain of supersessions and contradiction groups is followed this far from the moved
# mentions' facts; real chains are a handful long.
CLOSURE_ROUNDS = 16


@dataclass(frozen=True)
class Moved:
    mention_id: uuid.UUID
    from_entity: uuid.UUID
    to_entity: uuid.UUID
    rival: str  # the full name whose arrival made the bare name ambiguous


async def rival_arrived(conn: asyncpg.Connection, source: VersionSource, arrivals: Collection[str]) -> list[Moved]:
    """For each full name new to its entity: re-resolve the bare mentions of its first word
    held by entities that also hold a full name it starts. Returns the mentions moved."""
    moved: list[Moved] = []
    for rival in sorted(arrivals):
        word = rival.split()[0]
        holders = [r[0] for r in await conn.fetch(
            """SELECT DISTINCT e.entity_id FROM entities e
                 JOIN entity_aliases b ON b.entity_id = e.entity_id AND b.space_id = e.space_id
                WHERE e.space_id = $1 AND e.merged_into IS NULL AND b.normalized_alias = $2
                  AND EXISTS (SELECT 1 FROM entity_aliases f WHERE f.space_id = e.space_id
                                 AND f.entity_id = e.entity_id AND f.normalized_alias LIKE $3)
                  AND NOT EXISTS (SELECT 1 FROM entities x WHERE x.space_id = e.space_id
                                     AND x.merged_into = e.entity_id)
                ORDER BY e.entity_id""", source.space_id, word, fs.first_name_pattern(word))]
        for holder in holders:
            moved.extend(await _reresolve(conn, source, holder, word, rival))
    return moved


async def _reresolve(conn: asyncpg.Connection, source: VersionSource, holder: uuid.UUID, word: str,
                     rival: str) -> list[Moved]:
    rows = await conn.fetch(
        """SELECT m.mention_id, m.doc_id, m.surface_form, m.resolution_method, m.scores FROM mentions m
             JOIN claims c ON c.claim_id = m.claim_id AND c.space_id = m.space_id
            WHERE m.space_id = $1 AND m.resolved_entity_id = $2 AND m.normalized_lemma = $3
            ORDER BY m.doc_id, c.char_start, c.ordinal, m.mention_id""", source.space_id, holder, word)
    by_doc: dict[uuid.UUID, list[asyncpg.Record]] = {}
    for r in rows:
        by_doc.setdefault(r["doc_id"], []).append(r)
    moved: list[Moved] = []
    for doc_id, mentions in by_doc.items():
        # as met now: the document's other names are its context, not these mentions themselves
        in_doc = {r[0] for r in await conn.fetch(
            """SELECT DISTINCT coalesce(e.merged_into, e.entity_id) FROM mentions m
                 JOIN entities e ON e.entity_id = m.resolved_entity_id AND e.space_id = m.space_id
                WHERE m.space_id = $1 AND m.doc_id = $2 AND m.normalized_lemma <> $3""",
            source.space_id, doc_id, word)}
        target, verdict = await fs.resolve(conn, source.space_id, doc_id, mentions[0]["surface_form"], {},
                                           in_document=in_doc)
        if target == holder:
            continue
        for r in mentions:
            scores = dict(verdict.scores)
            scores["reresolved"] = {"from": str(holder), "to": str(target), "rival": rival,
                                    "by_version": str(source.version_id),
                                    "was": {"method": r["resolution_method"], "scores": r["scores"]}}
            await conn.execute(
                """UPDATE mentions SET resolved_entity_id = $2, resolution_method = $3, resolution_confidence = $4,
                                       resolution_is_new_entity = $5, resolved_at = clock_timestamp(), scores = $6,
                                       resolver_version = $7
                    WHERE mention_id = $1""",
                r["mention_id"], target, verdict.method, verdict.confidence, verdict.entity_id is None, scores,
                RESOLVER_VERSION)
            moved.append(Moved(r["mention_id"], holder, target, rival))
    if moved:
        # the holder no longer goes by the bare name unless a mention of its own still does
        await conn.execute(
            """DELETE FROM entity_aliases a WHERE a.space_id = $1 AND a.entity_id = $2 AND a.normalized_alias = $3
                  AND NOT EXISTS (SELECT 1 FROM mentions m WHERE m.space_id = a.space_id
                                     AND m.resolved_entity_id = a.entity_id AND m.normalized_lemma = $3)""",
            source.space_id, holder, word)
    return moved


async def reopen(conn: asyncpg.Connection, source: VersionSource, moved: Collection[Moved]) -> list[uuid.UUID]:
    """Retract the facts that depended on the moved mentions and reopen the assertions behind
    them for adjudication; returns those assertions. Dependence is followed through
    supersession (either way), contradiction groups and the claims that supported a fact, so
    no kept fact still points at a retracted one. A reopened assertion's ``generation`` is
    raised (its next fact gets a new id) and ``reresolved_by`` names this version (whose
    label stage embeds the new facts)."""
    space_id = source.space_id
    mention_ids = sorted({m.mention_id for m in moved})
    seeds = await conn.fetch(
        """SELECT a.assertion_id, a.fact_id FROM assertions a
            WHERE a.space_id = $1 AND a.adjudicated_at IS NOT NULL
              AND (a.subject_mention_id = ANY($2::uuid[]) OR a.object_mention_id = ANY($2::uuid[]))""",
        space_id, mention_ids)
    assertions = {r["assertion_id"] for r in seeds}
    facts: set[uuid.UUID] = set(await _live(conn, space_id, [r["fact_id"] for r in seeds if r["fact_id"]]))
    for _ in range(CLOSURE_ROUNDS):
        before = len(assertions)
        assertions |= {r[0] for r in await conn.fetch(  # a claim's assertions are adjudicated together
            """SELECT a.assertion_id FROM assertions a
                WHERE a.space_id = $1 AND a.adjudicated_at IS NOT NULL
                  AND (a.fact_id = ANY($2::uuid[]) OR a.claim_id IN (SELECT b.claim_id FROM assertions b
                                                                     WHERE b.space_id = $1
                                                                       AND b.assertion_id = ANY($3::uuid[])))""",
            space_id, sorted(facts), sorted(assertions))}
        grown = facts | {r[0] for r in await conn.fetch(
            """SELECT f.fact_id FROM facts f
                WHERE f.space_id = $1 AND f.invalidated_at IS NULL AND (
                      f.superseded_by = ANY($2::uuid[])
                   OR f.fact_id IN (SELECT g.superseded_by FROM facts g
                                     WHERE g.space_id = $1 AND g.fact_id = ANY($2::uuid[]))
                   OR f.contradiction_group IN (SELECT g.contradiction_group FROM facts g
                                                 WHERE g.space_id = $1 AND g.fact_id = ANY($2::uuid[]))
                   OR f.fact_id IN (SELECT e.fact_id FROM fact_evidence e
                                      JOIN assertions a ON a.claim_id = e.claim_id AND a.space_id = e.space_id
                                     WHERE e.space_id = $1 AND a.assertion_id = ANY($3::uuid[])))""",
            space_id, sorted(facts), sorted(assertions))}
        if grown == facts and len(assertions) == before:
            break
        facts = grown
    ordered = sorted(facts)
    await conn.execute("SELECT 1 FROM facts WHERE fact_id = ANY($1::uuid[]) ORDER BY fact_id FOR NO KEY UPDATE",
                       ordered)
    retracted = await conn.fetch(
        """UPDATE facts SET invalidated_at = clock_timestamp()
            WHERE space_id = $1 AND fact_id = ANY($2::uuid[]) AND invalidated_at IS NULL
        RETURNING fact_id, kind""", space_id, ordered)
    why = {"reason": "mention_re_resolved", "by_version": str(source.version_id),
           "moves": [{"mention_id": str(m.mention_id), "from": str(m.from_entity), "to": str(m.to_entity),
                      "rival": m.rival} for m in sorted(moved, key=lambda m: str(m.mention_id))]}
    await conn.executemany(
        """INSERT INTO fact_decisions (space_id, fact_id, subject_kind, outcome, method, features)
           VALUES ($1, $2, $3, 'retracted_reresolution', 'resolution', $4)""",
        [(space_id, r["fact_id"], r["kind"], why) for r in retracted])
    reopened = sorted(assertions)
    await conn.execute(
        """UPDATE assertions SET fact_id = NULL, adjudicated_at = NULL,
                  features = (features - 'dropped') || jsonb_build_object(
                      'generation', coalesce((features->>'generation')::int, 0) + 1, 'reresolved_by', $3::text)
            WHERE space_id = $1 AND assertion_id = ANY($2::uuid[])""", space_id, reopened, str(source.version_id))
    return reopened


async def _live(conn: asyncpg.Connection, space_id: uuid.UUID, fact_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    return [r[0] for r in await conn.fetch(
        "SELECT fact_id FROM facts WHERE space_id = $1 AND fact_id = ANY($2::uuid[]) AND invalidated_at IS NULL",
        space_id, fact_ids)]
