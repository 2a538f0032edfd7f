"""Facts in PostgreSQL: the entity cascade, mentions and assertions, applying adjudication
verdicts, reconciliation of testimony and support, labels and profiles.

Every writer runs inside the unit's completion transaction, which holds the space lock
first (``SPACE_WIDE`` stages, services/platform/locks.py), so two versions of one space
never race to create the same entity or fact.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import asyncpg
import numpy as np

from services.pipeline.adapters import merges
from services.pipeline.adapters.store import derived_id, index_text
from services.pipeline.domain.adjudicate import FactView, Incoming, PendingEnd, Verdict, holder_predicates
from services.pipeline.domain.entities import (
    RESOLVER_VERSION,
    Candidate,
    ResolutionVerdict,
    better_name,
    choose,
    entity_compatible,
)
from services.pipeline.domain.facts import (
    ClaimView,
    Window,
    attribute_key,
    normalize_claim,
    normalize_name,
    relation_label,
    valid_predicate,
)

if TYPE_CHECKING:
    from services.pipeline.adapters.store import VersionSource

# Candidate width per tier: the cascade finds candidates, the chooser decides.
CANDIDATE_WIDTH = 8
# The spelling tiers (T1, T2) read this many alias rows, names with the mention's numbers
# first, and keep the CANDIDATE_WIDTH best that could name the same thing: cut before that
# check, names that cannot match ("service 7" for "ledger service") crowd out one that can
# ("ledger"), and how many of them exist depends on the order documents came in.
CANDIDATE_POOL = CANDIDATE_WIDTH * 8
TRIGRAM_FLOOR = 0.3
# T3: cosine similarity (1 - pgvector `<=>`) between the mention-in-its-claim vector and an
# entity's profile vector, same dimension only, that makes the entity a *candidate*. It is
# low on purpose: lexical hash vectors score a true descriptive match around 0.2 (MiniLM
# higher); at most CANDIDATE_WIDTH candidates, and the chooser's own rules decide.
T3_FLOOR = 0.15

# Entities a merge redirected are read through their survivor (one hop: merges.apply
# refuses chains).
_LIVE = "coalesce(e.merged_into, e.entity_id)"


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
        """SELECT DISTINCT a.normalized_alias FROM entity_aliases a JOIN entities e USING (entity_id, space_id)
            WHERE a.space_id = $1 AND a.normalized_alias = ANY($2::text[])""",
        space_id, sorted(grams))
    return frozenset(r[0] for r in rows)


async def candidates(conn: asyncpg.Connection, space_id: uuid.UUID, doc_id: uuid.UUID, name: str, *,
                     context_vector: Sequence[float] | None = None,
                     claim_id: uuid.UUID | None = None,
                     in_document: Collection[uuid.UUID] | None = None) -> list[Candidate]:
    """T0 exact alias (every match; for a single word also every name it is the first word
    of), then T1 trigram, then T2 Daitch–Mokotoff, then T3 profile embedding (only with a
    precomputed ``context_vector``: the mention in its claim, embedded outside the
    transaction), stopping at the first tier that finds anything. Merged entities are read
    through their survivor; entities already named in the document (``in_document`` when
    the caller knows better, as re-resolution does) are marked.

    A bare first name meets every full name it starts, not only the entities that happen to
    hold it as an alias: which entities hold "Ravi" depends on which documents came first."""
    key = normalize_name(name)
    in_doc = set(in_document) if in_document is not None else await document_entities(conn, doc_id)
    first_of = first_name_pattern(key) if key and " " not in key else None
    rows = await conn.fetch(
        f"""SELECT DISTINCT ON ({_LIVE}) {_LIVE}, a.normalized_alias, a.alias_text, {_SURFACES}
              FROM entity_aliases a JOIN entities e USING (entity_id, space_id)
             WHERE a.space_id = $1 AND (a.normalized_alias = $2 OR a.normalized_alias LIKE $3)
             ORDER BY {_LIVE}, a.normalized_alias <> $2, a.alias_id""", space_id, key, first_of)
    if rows:
        return [_candidate(r, "T0", 1.0, in_doc) for r in rows]
    numbers = " ".join(re.findall(r"[0-9]+", key))
    rows = await conn.fetch(
        f"""SELECT {_LIVE}, a.normalized_alias, a.alias_text, {_SURFACES}, similarity(a.normalized_alias, $2) AS score
              FROM entity_aliases a JOIN entities e USING (entity_id, space_id)
             WHERE a.space_id = $1 AND a.normalized_alias % $2
               AND similarity(a.normalized_alias, $2) >= $3
             ORDER BY {_same_numbers('$5')} DESC, score DESC, a.normalized_alias, a.alias_id LIMIT $4""",
        space_id, key, TRIGRAM_FLOOR, CANDIDATE_POOL, numbers)
    found = _fitting_first(key, name, [_candidate(r, "T1", float(r["score"]), in_doc) for r in rows])
    if found:
        return found
    codes = await phonetic(conn, key)
    if codes:
        rows = await conn.fetch(
            f"""SELECT {_LIVE}, a.normalized_alias, a.alias_text, {_SURFACES}
                  FROM entity_aliases a JOIN entities e USING (entity_id, space_id)
                 WHERE a.space_id = $1 AND a.phonetic && $2::text[]
                 ORDER BY {_same_numbers('$4')} DESC, a.normalized_alias, a.alias_id LIMIT $3""",
            space_id, codes, CANDIDATE_POOL, numbers)
        found = _fitting_first(key, name, [_candidate(r, "T2", 0.7, in_doc) for r in rows])
        if found:
            return found
    if context_vector is None or not len(context_vector):
        return []
    return await profile_candidates(conn, space_id, key, context_vector, in_doc, claim_id)


async def document_entities(conn: asyncpg.Connection, doc_id: uuid.UUID) -> set[uuid.UUID]:
    """The (live) entities the document's saved mentions name."""
    return {r[0] for r in await conn.fetch(
        f"""SELECT DISTINCT {_LIVE} FROM mentions m
             JOIN entities e ON e.entity_id = m.resolved_entity_id AND e.space_id = m.space_id
             WHERE m.doc_id = $1""", doc_id)}


async def profile_candidates(conn: asyncpg.Connection, space_id: uuid.UUID, key: str,
                             vector: Sequence[float], in_doc: set[uuid.UUID] | frozenset[uuid.UUID] = frozenset(),
                             claim_id: uuid.UUID | None = None) -> list[Candidate]:
    """T3: live entities whose profile vector (same dimension) is within T3_FLOOR cosine of
    the mention's context vector, best first, at most CANDIDATE_WIDTH. Each carries its
    profile, its aliases and whether the claim names it elsewhere, for the chooser."""
    dim = int(len(vector))  # a literal, so the partial HNSW index (profile_dim = 384) applies
    rows = await conn.fetch(
        f"""SELECT e.entity_id, e.normalized_name, e.profile_summary,
                   1 - (e.profile_embedding::vector({dim}) <=> $2::vector({dim})) AS score,
                   ARRAY(SELECT a.normalized_alias FROM entity_aliases a
                          WHERE a.entity_id = e.entity_id ORDER BY 1) AS names
              FROM entities e
             WHERE e.space_id = $1 AND e.merged_into IS NULL AND e.profile_dim = {dim}
               AND e.profile_embedding IS NOT NULL
             ORDER BY e.profile_embedding::vector({dim}) <=> $2::vector({dim})
             LIMIT $3""", space_id, np.asarray(vector, dtype=np.float32), CANDIDATE_WIDTH)
    rows = [r for r in rows if r["score"] is not None and float(r["score"]) >= T3_FLOOR]
    if not rows:
        return []
    rest = ""
    if claim_id is not None:
        claim_text = await conn.fetchval("SELECT claim_text FROM claims WHERE claim_id = $1", claim_id)
        rest = f" {normalize_name(claim_text or '')} ".replace(f" {key} ", " ", 1)
    return [Candidate(r["entity_id"], r["normalized_name"], "T3", float(r["score"]), r["entity_id"] in in_doc,
                      profile=r["profile_summary"], names=tuple(r["names"] or ()),
                      named_in_claim=any(f" {n} " in rest for n in (r["names"] or ()) if n))
            for r in rows]


# every alias of the (live) entity as written, for the chooser's whole-entity check
_SURFACES = f"""ARRAY(SELECT a2.alias_text FROM entity_aliases a2 WHERE a2.entity_id = {_LIVE}
                      ORDER BY a2.alias_text) AS surfaces"""


def _candidate(r: Any, tier: str, score: float, in_doc: set[uuid.UUID]) -> Candidate:
    return Candidate(r[0], r["normalized_alias"], tier, score, r[0] in in_doc, surface=r["alias_text"],
                     surfaces=tuple(r["surfaces"] or ()))


def first_name_pattern(word: str) -> str:
    """A LIKE pattern (through the trigram index) for the names ``word`` is the first word of."""
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + " %"


def _same_numbers(param: str) -> str:
    """SQL: the alias carries exactly the mention's numbers (``param``: its digit runs, space-separated)."""
    return f"trim(regexp_replace(a.normalized_alias, '[^0-9]+', ' ', 'g')) = {param}"


def _fitting_first(key: str, surface: str, found: list[Candidate]) -> list[Candidate]:
    """The best candidate per entity (by score, then id), those that could name what the
    mention names first (the chooser's own check), at most CANDIDATE_WIDTH."""
    best: dict[uuid.UUID, Candidate] = {}
    for c in found:
        if c.entity_id not in best or c.score > best[c.entity_id].score:
            best[c.entity_id] = c
    return sorted(best.values(), key=lambda c: (not entity_compatible(key, c, surface.strip()), -c.score,
                                                str(c.entity_id)))[:CANDIDATE_WIDTH]


async def phonetic(conn: asyncpg.Connection, key: str) -> list[str]:
    first = key.split()[0] if key else ""
    if not first or not re.search(r"[a-z]", first):
        return []
    codes = await conn.fetchval("SELECT daitch_mokotoff($1)", first)
    return list(codes or [])


def mention_key(claim_id: uuid.UUID | str | None, surface: str) -> str:
    """The key of a mention's precomputed context vector: "<claim_id>/<normalised name>"
    (the normalised name alone when there is no claim)."""
    key = normalize_name(surface)
    return f"{claim_id}/{key}" if claim_id is not None else key


def context_text(surface: str, claim_text: str) -> str:
    """What T3 embeds for a mention: the name, then the claim that uses it."""
    return f"{surface.strip()}. {claim_text.strip()}"


async def context_texts(db: Any, source: VersionSource) -> dict[str, str]:
    """Before the write, outside any transaction: ``mention_key -> context_text`` for the
    names this version's normalisation will resolve and the memory does not know yet (a
    known alias is settled by T0 and needs no vector). Mirrors FactsWriter.normalize."""
    claims = await db.fetch(
        """SELECT c.claim_id, c.claim_text, c.is_attributed, c.attributed_to, c.claim_valid_from,
                  c.claim_valid_until, c.claim_valid_precision, c.claim_valid_kind, c.asserted_at
             FROM claims c JOIN claim_occurrences o ON o.claim_id = c.claim_id AND o.space_id = c.space_id
            WHERE o.version_id = $1 AND o.derivation_kind = 'extracted' AND c.is_current_testimony
            ORDER BY c.char_start, c.ordinal""", source.version_id)
    # a name the space already holds is settled by T0 and needs no vector; the drafts are
    # read from the document's own names, as FactsWriter.drafts reads them
    known = await known_aliases(db, source.space_id, [c["claim_text"] for c in claims])
    aliases: set[str] = set()
    texts: dict[str, str] = {}
    for claim in claims:
        view = ClaimView(str(claim["claim_id"]), claim["claim_text"], claim["is_attributed"],
                         claim["attributed_to"], claim["claim_valid_from"], claim["claim_valid_until"],
                         claim["claim_valid_precision"], claim["claim_valid_kind"], claim["asserted_at"])
        drafts, _ = normalize_claim(view, frozenset(aliases))
        for draft in drafts:
            if draft.kind != "observation" and not valid_predicate(draft.predicate or ""):
                continue
            for name in (draft.subject, draft.object):
                if name and normalize_name(name) not in aliases and normalize_name(name) not in known:
                    texts.setdefault(mention_key(claim["claim_id"], name), context_text(name, claim["claim_text"]))
            for name in (draft.subject, draft.object):
                if name:
                    aliases.add(normalize_name(name))
    return texts


async def resolve(conn: asyncpg.Connection, space_id: uuid.UUID, doc_id: uuid.UUID, surface: str,
                  cache: dict[str, tuple[uuid.UUID, ResolutionVerdict]], *,
                  context_vector: Mapping[str, Sequence[float]] | None = None,
                  claim_id: uuid.UUID | None = None, in_document: Collection[uuid.UUID] | None = None,
                  arrivals: set[str] | None = None) -> tuple[uuid.UUID, ResolutionVerdict]:
    """An entity for a name: the document's own earlier match, else the cascade + chooser,
    else a new entity. Every verdict is returned for the mention row.

    ``context_vector`` maps :func:`mention_key` (claim id and name) to the mention's
    context vector, embedded before the transaction; without it T3 is skipped. When the
    chosen entity had compatible rivals (``ambiguous_with``), a merge proposal is recorded
    (never applied). A name of several words new to its entity is added to ``arrivals``: it
    may be a rival for bare first names that joined another entity (see reresolution)."""
    key = normalize_name(surface)
    if key in cache:
        entity_id, _ = cache[key]
        return entity_id, ResolutionVerdict(entity_id, "document", 1.0, {"reused_in_document": True})
    vector = None
    if context_vector:
        vector = context_vector.get(mention_key(claim_id, surface))
        if vector is None and claim_id is not None:
            vector = context_vector.get(key)
    if in_document is None:  # named by the document: its saved mentions and the names resolved so far
        in_document = await document_entities(conn, doc_id) | {entity for entity, _ in cache.values()}
    verdict = choose(key, await candidates(conn, space_id, doc_id, surface, context_vector=vector,
                                           claim_id=claim_id, in_document=in_document), surface=surface.strip())
    chosen = verdict.entity_id
    rivals = verdict.scores.get("ambiguous_with") if chosen is not None else None
    if chosen is not None and isinstance(rivals, list | tuple) and rivals:
        await merges.propose_group(conn, space_id, [chosen, *(uuid.UUID(str(r)) for r in rivals)], seed=chosen)
    if chosen is None:
        chosen = uuid.uuid4()
        await conn.execute(
            """INSERT INTO entities (entity_id, space_id, canonical_name, normalized_name) VALUES ($1, $2, $3, $4)""",
            chosen, space_id, surface, key)
    entity_id = chosen
    inserted = await conn.fetchval(
        """INSERT INTO entity_aliases (space_id, entity_id, alias_text, normalized_alias, phonetic)
           VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (entity_id, normalized_alias, space_id) DO UPDATE SET last_seen = clock_timestamp()
           RETURNING xmax = 0""",
        space_id, entity_id, surface, key, await _all_codes(conn, key))
    if inserted and arrivals is not None and " " in key:
        arrivals.add(key)
    if verdict.method in ("T0", "T1", "T2") and better_name(surface, await conn.fetchval(
            "SELECT canonical_name FROM entities WHERE entity_id = $1", entity_id)):
        # The fullest spelling seen becomes the canonical name ("Ravi" -> "Ravi Shankar"), the
        # same whichever document came first; a description matched by profile (T3) is an
        # alias, never the name.
        await conn.execute("UPDATE entities SET canonical_name = $2, normalized_name = $3, updated_at = "
                           "clock_timestamp() WHERE entity_id = $1", entity_id, surface, key)
        await relabel(conn, space_id, entity_id)
    cache[key] = (entity_id, verdict)
    return entity_id, verdict


async def relabel(conn: asyncpg.Connection, space_id: uuid.UUID, entity_id: uuid.UUID) -> None:
    """An entity's new canonical name renames its facts' labels: a label is rendered from the
    entities' current names, not the spelling a fact was written with ("Ravi works on X"
    becomes "Ravi Shankar works on X"). A relation is rendered again; an observation whose
    label starts with one of the entity's aliases gets the new name there. A relabelled fact's
    vector is cleared: the version's label stage embeds and indexes it again (facts_of_version).
    Facts after entities, in key order (services/platform/locks.py), under the space lock."""
    rows = await conn.fetch(
        """SELECT f.fact_id, f.kind, f.predicate, f.label, f.subject_entity_id,
                  se.canonical_name AS subject_name, oe.canonical_name AS object_name
             FROM facts f JOIN entities se ON se.entity_id = f.subject_entity_id AND se.space_id = f.space_id
             LEFT JOIN entities oe ON oe.entity_id = f.object_entity_id AND oe.space_id = f.space_id
            WHERE f.space_id = $1 AND (f.subject_entity_id = $2 OR f.object_entity_id = $2)
            ORDER BY f.fact_id FOR NO KEY UPDATE OF f""", space_id, entity_id)
    aliases = sorted((r["alias_text"] for r in await conn.fetch(
        "SELECT alias_text FROM entity_aliases WHERE entity_id = $1", entity_id)), key=len, reverse=True)
    changed = []
    for r in rows:
        label = r["label"]
        if r["kind"] == "relation" and r["object_name"] is not None:
            label = relation_label(r["subject_name"], r["predicate"], r["object_name"])
        elif r["subject_entity_id"] == entity_id and ": " not in label:  # an attribute value names no one
            old = next((a for a in aliases if label.startswith(a + " ")), None)
            label = r["subject_name"] + label[len(old):] if old is not None else label
        if label != r["label"]:
            changed.append((r["fact_id"], label))
    await conn.executemany(
        """UPDATE facts SET label = $2, embedding = NULL, embedding_dim = NULL, embedding_model = NULL
            WHERE fact_id = $1""", changed)


async def _all_codes(conn: asyncpg.Connection, key: str) -> list[str]:
    """The Daitch-Mokotoff codes of the key's words that hold a letter, in one statement."""
    words = [w for w in key.split() if re.search(r"[a-z]", w)]
    if not words:
        return []
    codes = await conn.fetchval(
        "SELECT array_agg(c) FROM unnest($1::text[]) AS w, unnest(daitch_mokotoff(w)) AS c", words)
    return sorted(set(codes or []))


def mention_row(*, space_id: uuid.UUID, doc_id: uuid.UUID, version_id: uuid.UUID, claim_id: uuid.UUID,
                ordinal: int, role: str, surface: str, entity_id: uuid.UUID, verdict: ResolutionVerdict
                ) -> tuple[Any, ...]:
    """A mention row for :func:`save_mentions`; its id (the first field) is derived, so the
    assertion naming it can be written in the same batch."""
    return (derived_id("mention", claim_id, ordinal, role), space_id, doc_id, version_id, claim_id, surface,
            normalize_name(surface), entity_id, verdict.method, verdict.confidence, verdict.entity_id is None,
            verdict.scores, RESOLVER_VERSION)


async def save_mentions(conn: asyncpg.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    await conn.executemany(
        """INSERT INTO mentions (mention_id, space_id, doc_id, version_id, claim_id, surface_form, normalized_lemma,
                                 resolved_entity_id, resolution_method, resolution_confidence,
                                 resolution_is_new_entity, resolved_at, scores, resolver_version)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, clock_timestamp(), $12, $13)
           ON CONFLICT (mention_id, space_id) DO NOTHING""", rows)


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
        """SELECT f.fact_id, f.kind, f.subject_entity_id, f.predicate, f.object_entity_id, f.statement, f.valid_from,
                  f.valid_until, f.valid_precision, f.superseded_by IS NOT NULL AS superseded, f.contradiction_group,
                  origin.change_kind, origin.features->>'previous_object_id' AS previous_object_id,
                  origin.asserted_at
             FROM facts f
        LEFT JOIN LATERAL (SELECT a.change_kind, a.features, c.asserted_at
                             FROM assertions a JOIN claims c ON c.claim_id = a.claim_id AND c.space_id = a.space_id
                            WHERE a.assertion_id = (SELECT a2.assertion_id FROM assertions a2
                                                     WHERE a2.fact_id = f.fact_id
                                                     ORDER BY a2.adjudicated_at, a2.assertion_id LIMIT 1)) origin
               ON true
            WHERE f.space_id = $1 AND f.invalidated_at IS NULL
              AND (f.subject_entity_id = $2 OR (f.kind = 'relation' AND f.predicate = ANY($3::text[])
                                                 AND f.object_entity_id = $4))
            ORDER BY f.ingested_at""",
        space_id, incoming.subject_id, list(holder_predicates(incoming.predicate)), incoming.object_id)
    return [FactView(r["fact_id"], r["kind"], r["subject_entity_id"], r["predicate"], r["object_entity_id"],
                     r["statement"], _window(r), r["superseded"], r["contradiction_group"],
                     attribute_key(r["statement"] or "", normalize_name(subject_name)),
                     statement_key(r["statement"]), r["change_kind"] or "none",
                     uuid.UUID(r["previous_object_id"]) if r["previous_object_id"] else None,
                     r["asserted_at"]) for r in rows]


async def pending_ends(conn: asyncpg.Connection, space_id: uuid.UUID, subject_id: uuid.UUID,
                       object_id: uuid.UUID | None) -> list[PendingEnd]:
    """Ends ("left X", "no longer") read for this subject and object that found no fact when
    they arrived, with when they were said."""
    if object_id is None:
        return []
    rows = await conn.fetch(
        """SELECT a.valid_from, a.valid_precision, c.asserted_at, a.claim_id, c.doc_id FROM assertions a
             JOIN claims c ON c.claim_id = a.claim_id AND c.space_id = a.space_id
             JOIN mentions sm ON sm.mention_id = a.subject_mention_id AND sm.space_id = a.space_id
             JOIN mentions om ON om.mention_id = a.object_mention_id AND om.space_id = a.space_id
            WHERE a.space_id = $1 AND a.kind = 'relation' AND a.features->>'dropped' = 'pending_end'
              AND sm.resolved_entity_id = $2 AND om.resolved_entity_id = $3""", space_id, subject_id, object_id)
    return [PendingEnd(r["valid_from"], r["asserted_at"], (r["claim_id"], r["doc_id"]), r["valid_precision"])
            for r in rows]


async def drop_assertion(conn: asyncpg.Connection, assertion_id: uuid.UUID, reason: str | None) -> None:
    await conn.execute("UPDATE assertions SET adjudicated_at = clock_timestamp(), features = features || $2 "
                       "WHERE assertion_id = $1", assertion_id, {"dropped": reason})


class Transcript:
    """Evidence and decision rows of one adjudication, written in two batches by :meth:`write`
    instead of a round trip each: nothing in the adjudication loop reads them back."""

    def __init__(self) -> None:
        self.evidence: list[tuple[Any, ...]] = []
        self.decisions: list[tuple[Any, ...]] = []

    def add_evidence(self, space_id: uuid.UUID, fact_id: uuid.UUID, claim_id: uuid.UUID, doc_id: uuid.UUID,
                     stance: str) -> None:
        self.evidence.append((fact_id, claim_id, stance, space_id, doc_id))

    def add_decision(self, space_id: uuid.UUID, fact_id: uuid.UUID, subject_kind: str, outcome: str, verdict: Verdict,
                     claim_id: uuid.UUID | None, *, before: Window | None, after: Window | None,
                     related: uuid.UUID | None = None) -> None:
        features = {"reason": verdict.reason, **verdict.features,
                    "window_before": before.as_json() if before else None,
                    "window_after": after.as_json() if after else None}
        self.decisions.append((space_id, fact_id, subject_kind, outcome, verdict.confidence, related or verdict.target,
                               claim_id, json.loads(json.dumps(features, default=str))))

    async def write(self, conn: asyncpg.Connection) -> None:
        await conn.executemany(
            """INSERT INTO fact_evidence (fact_id, claim_id, stance, space_id, doc_id) VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (fact_id, claim_id, space_id) DO NOTHING""", self.evidence)
        await conn.executemany(  # in the order decided: decided_at is each row's clock_timestamp()
            """INSERT INTO fact_decisions (space_id, fact_id, subject_kind, outcome, method, confidence, related_id,
                                           claim_id, features)
               VALUES ($1, $2, $3, $4, 'rules', $5, $6, $7, $8)""", self.decisions)
        self.evidence.clear()
        self.decisions.clear()


async def apply(conn: asyncpg.Connection, *, space_id: uuid.UUID, incoming: Incoming, verdict: Verdict,
                assertion_id: uuid.UUID, claim_id: uuid.UUID, doc_id: uuid.UUID, label: str,
                transcript: Transcript, generation: int = 0) -> uuid.UUID | None:
    """Write a verdict: the fact, its supersessions and groups now, its evidence and decisions
    into ``transcript`` (the caller writes it). An assertion adjudicated again after
    re-resolution (``generation`` > 0) makes a new fact: the one it made before stays retracted."""
    subject_kind = incoming.kind
    if verdict.outcome == "end":
        assert verdict.target is not None
        for ended, at in verdict.supersede:
            before = await conn.fetchrow("SELECT valid_from, valid_until, valid_precision FROM facts "
                                         "WHERE fact_id = $1", ended)
            after = _window(before).ended(at, verdict.end_precision)
            await conn.execute("UPDATE facts SET valid_until = $2, valid_precision = $3 WHERE fact_id = $1",
                               ended, after.valid_until, after.precision)
            transcript.add_evidence(space_id, ended, claim_id, doc_id, "supports")
            transcript.add_decision(space_id, ended, subject_kind, "update", verdict, claim_id,
                                    before=_window(before), after=after)
        await conn.execute("UPDATE assertions SET fact_id = $2, adjudicated_at = clock_timestamp() "
                           "WHERE assertion_id = $1", assertion_id, verdict.target)
        return verdict.target
    if verdict.outcome == "drop":
        await drop_assertion(conn, assertion_id, verdict.reason)
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
                                    label = CASE WHEN kind = 'observation' THEN $6 ELSE label END
                    WHERE fact_id = $1""", fact_id, w.valid_from, w.valid_until, w.precision,
                incoming.statement or label, label)
        stance = "contradicts" if verdict.outcome == "contradict_evidence" else "supports"
        transcript.add_evidence(space_id, fact_id, claim_id, doc_id, stance)
        transcript.add_decision(space_id, fact_id, subject_kind,
                                "contradict" if stance == "contradicts" else verdict.outcome, verdict, claim_id,
                                before=_window(before) if before else None, after=verdict.window)
    else:
        fact_id = derived_id("fact", assertion_id, generation) if generation else derived_id("fact", assertion_id)
        w = verdict.window or incoming.window
        closer = verdict.closed_by[0] if verdict.closed_by is not None else None
        closed_at = verdict.closed_at()
        if closed_at is not None:
            w = w.ended(closed_at, verdict.end_precision)
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
               ON CONFLICT (fact_id, space_id) DO NOTHING""",
            fact_id, space_id, incoming.kind, incoming.subject_id, incoming.predicate, incoming.object_id,
            incoming.statement, label, w.valid_from, w.valid_until, w.precision, group, verdict.confidence)
        transcript.add_evidence(space_id, fact_id, claim_id, doc_id, "supports")
        if closed_at is not None and closed_at == verdict.ended_at and verdict.ended_by is not None:
            transcript.add_evidence(space_id, fact_id, *verdict.ended_by, "supports")  # the end read first
        transcript.add_decision(space_id, fact_id, subject_kind, "add" if verdict.outcome == "add" else "contradict",
                                verdict, claim_id, before=None, after=verdict.window or incoming.window)
        if closer is not None:
            # a successor that arrived first: this fact is history from the start
            await conn.execute("UPDATE facts SET superseded_by = $2 WHERE fact_id = $1", fact_id, closer)
            transcript.add_decision(space_id, fact_id, subject_kind, "supersede", verdict, claim_id,
                                    before=verdict.window or incoming.window, after=w, related=closer)
        if group is not None:
            await conn.execute("UPDATE facts SET contradiction_group = $2 WHERE fact_id = ANY($1::uuid[])",
                               list(verdict.group_with), group)
            for other in verdict.group_with:
                transcript.add_decision(space_id, other, subject_kind, "contradict", verdict, claim_id,
                                        before=None, after=None, related=fact_id)
        for predecessor, close_at in verdict.supersede:
            before = await conn.fetchrow(
                "SELECT kind, valid_from, valid_until, valid_precision FROM facts WHERE fact_id = $1", predecessor)
            after = _window(before)
            if close_at is not None:
                after = after.ended(close_at)
            await conn.execute(
                "UPDATE facts SET superseded_by = $2, valid_until = $3, valid_precision = $4 WHERE fact_id = $1",
                predecessor, fact_id, after.valid_until, after.precision)
            transcript.add_decision(space_id, predecessor, before["kind"], "supersede", verdict, claim_id,
                                    before=_window(before), after=after, related=fact_id)
    await conn.execute("UPDATE assertions SET fact_id = $2, adjudicated_at = clock_timestamp() "
                       "WHERE assertion_id = $1", assertion_id, fact_id)
    return fact_id


# --------------------------------------------------------------------------------------
# reconciliation
# --------------------------------------------------------------------------------------

async def retire_reextracted(conn: asyncpg.Connection, space_id: uuid.UUID, doc_id: uuid.UUID,
                             version_id: uuid.UUID, extractor_version: str) -> list[uuid.UUID]:
    """Claims of this version from an earlier extractor, now that ``extractor_version`` has read
    it again, stop being current testimony (``reextracted``)."""
    rows = await conn.fetch(
        """UPDATE claims c SET is_current_testimony = false
            WHERE c.version_id = $1 AND c.is_current_testimony AND c.extractor_version <> $2
        RETURNING c.claim_id""", version_id, extractor_version)
    if rows:
        reconciliation = uuid.uuid4()
        await conn.executemany(
            """INSERT INTO testimony_currency_events (space_id, claim_id, doc_id, reconciliation_id, became_current,
                                                      reason, from_version_id)
               VALUES ($1, $2, $3, $4, false, 'reextracted', $5)""",
            [(space_id, r["claim_id"], doc_id, reconciliation, version_id) for r in rows])
    return [r["claim_id"] for r in rows]


async def withdraw_unsupported(conn: asyncpg.Connection, space_id: uuid.UUID, fact_ids: list[uuid.UUID]) -> None:
    """Recount support; a fact left with none because only the reading changed is flagged
    ``withdrawn`` (never retracted), with a decision on its transcript."""
    if not fact_ids:
        return
    await conn.fetch("SELECT * FROM refresh_fact_support($1::uuid[], false)", fact_ids)
    rows = await conn.fetch(
        """UPDATE facts SET support_state = CASE WHEN evidence_count = 0 THEN 'withdrawn' ELSE 'current' END
            WHERE fact_id = ANY($1::uuid[]) AND invalidated_at IS NULL
        RETURNING fact_id, kind, support_state""", fact_ids)
    await conn.executemany(
        """INSERT INTO fact_decisions (space_id, fact_id, subject_kind, outcome, method, features)
           VALUES ($1, $2, $3, 'withdrawn', 'reconcile', $4)""",
        [(space_id, r["fact_id"], r["kind"], {"reason": "reextraction_did_not_derive_it"}) for r in rows
         if r["support_state"] == "withdrawn"])


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

async def facts_of_version(conn: Any, space_id: uuid.UUID, version_id: uuid.UUID, model: str
                           ) -> list[asyncpg.Record]:
    """The facts a version touched, each with ``needs_vector``: its label has no vector under
    ``model`` yet. A label only changes with its vector cleared (relabel), so a fact stored
    with a vector under the model carries its current label's vector."""
    columns = ("f.fact_id, f.label, f.subject_entity_id, f.object_entity_id, "
               "(f.embedding IS NULL OR f.embedding_model IS DISTINCT FROM $3) AS needs_vector")
    return await conn.fetch(
        f"""SELECT {columns}
              FROM assertions a JOIN facts f ON f.fact_id = a.fact_id AND f.space_id = a.space_id
             WHERE a.version_id = $1
            UNION  -- facts of the entities it names that a new canonical name relabelled (see relabel)
            SELECT {columns}
              FROM mentions m JOIN facts f ON f.space_id = m.space_id AND f.subject_entity_id = m.resolved_entity_id
             WHERE m.version_id = $1 AND f.embedding IS NULL
            UNION
            SELECT {columns}
              FROM mentions m JOIN facts f ON f.space_id = m.space_id AND f.object_entity_id = m.resolved_entity_id
             WHERE m.version_id = $1 AND f.embedding IS NULL
            UNION  -- facts this version's re-resolution adjudicated again (see reresolution)
            SELECT {columns}
              FROM assertions a JOIN facts f ON f.space_id = a.space_id AND f.fact_id = a.fact_id
             WHERE a.space_id = $2 AND a.features ? 'reresolved_by' AND a.features->>'reresolved_by' = $1::text
               AND f.embedding IS NULL""", version_id, space_id, model)


async def save_label_vectors(conn: asyncpg.Connection, space_id: uuid.UUID, facts: Sequence[asyncpg.Record],
                             vectors: Sequence[Sequence[float]], model: str) -> None:
    """Store the vectors of these labels, and their lexical rows, for the facts that still
    carry the label that was embedded and no vector under ``model``: another version may
    have relabelled a fact, or embedded it, since its label was read (outside the lock)."""
    pending = {r["fact_id"]: r["label"] for r in await conn.fetch(
        """SELECT fact_id, label FROM facts
            WHERE space_id = $1 AND fact_id = ANY($2::uuid[])
              AND (embedding IS NULL OR embedding_model IS DISTINCT FROM $3)""",
        space_id, [f["fact_id"] for f in facts], model)}
    written = [(f, v) for f, v in zip(facts, vectors, strict=True) if pending.get(f["fact_id"]) == f["label"]]
    await conn.executemany(
        "UPDATE facts SET embedding = $2, embedding_dim = $3, embedding_model = $4 WHERE fact_id = $1",
        [(f["fact_id"], np.asarray(v, dtype=np.float32), len(v), model) for f, v in written])
    await index_text(conn, space_id, "fact", [(f["fact_id"], None, f["label"]) for f, _ in written])


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


async def unchanged_profiles(conn: Any, space_id: uuid.UUID, profiles: dict[uuid.UUID, str],
                             models: dict[uuid.UUID, str | None]) -> set[uuid.UUID]:
    """The entities whose stored profile is this text under this model (None: no vector)."""
    return {r["entity_id"] for r in await conn.fetch(
        """SELECT e.entity_id FROM entities e
             JOIN unnest($2::uuid[], $3::text[], $4::text[]) AS p(entity_id, summary, model)
               ON p.entity_id = e.entity_id
            WHERE e.space_id = $1 AND e.profile_summary = p.summary AND e.profile_model IS NOT DISTINCT FROM p.model""",
        space_id, list(profiles), list(profiles.values()), [models[e] for e in profiles])}


async def save_profiles(conn: asyncpg.Connection, space_id: uuid.UUID, profiles: dict[uuid.UUID, str],
                        vectors: dict[uuid.UUID, list[float]], model: str,
                        neighbours: Mapping[uuid.UUID, Sequence[uuid.UUID]]) -> None:
    """Store these profiles with their vectors and lexical rows, unless one is already stored
    so (another version wrote it since it was read); the touched entities' neighbourhoods
    (read before the lock, :func:`merges.neighbourhood`) are judged for merges, since their
    aliases and profiles may have changed."""
    models = {e: model if vectors.get(e) else None for e in profiles}  # what each profile is stored under
    same = await unchanged_profiles(conn, space_id, profiles, models)
    changed = {e: t for e, t in profiles.items() if e not in same}
    await conn.executemany(
        """UPDATE entities SET profile_summary = $2, profile_embedding = $3, profile_dim = $4, profile_model = $5,
                               updated_at = clock_timestamp() WHERE entity_id = $1""",
        [(e, text, np.asarray(vectors[e], dtype=np.float32) if vectors.get(e) else None,
          len(vectors[e]) if vectors.get(e) else None, models[e]) for e, text in changed.items()])
    await index_text(conn, space_id, "entity", [(e, None, t) for e, t in changed.items()])
    # A refreshed profile re-examines its neighbourhood: proposals only, never applied.
    await merges.record_neighbourhood(conn, space_id, neighbours)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
