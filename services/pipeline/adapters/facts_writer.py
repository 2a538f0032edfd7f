"""The fact stages' work for one version, inside its unit's transaction: normalise claims
into assertions with resolved entities, adjudicate them against held facts, settle
evidence counts, reconcile testimony and support, and label and index what changed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.pipeline.adapters import crossrefs, merges, reresolution
from services.pipeline.adapters import facts_store as fs
from services.pipeline.adapters.store import VersionSource, derived_id
from services.pipeline.domain.adjudicate import Incoming, decide
from services.pipeline.domain.facts import (
    ClaimView,
    RelationProvider,
    attribute_key,
    claim_window,
    normalize_name,
    observation_label,
    relation_label,
)
from services.platform.db import Database
from services.platform.support import facts_of_claims, refresh_support


class FactsWriter:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def context_texts(self, source: VersionSource) -> dict[str, str]:
        return await fs.context_texts(self.db, source)

    async def drafts(self, source: VersionSource, provider: RelationProvider) -> list[tuple[Any, list[Any],
                                                                                             str | None]]:
        """The version's new claims and what the provider makes of them (outside any
        transaction: a model provider may take seconds)."""
        claims = await self.db.fetch(
            """SELECT c.claim_id, c.claim_text, c.is_attributed, c.attributed_to, c.claim_valid_from,
                      c.claim_valid_until, c.claim_valid_precision, c.claim_valid_kind, c.asserted_at
                 FROM claims c JOIN claim_occurrences o ON o.claim_id = c.claim_id AND o.space_id = c.space_id
                WHERE o.version_id = $1 AND o.derivation_kind = 'extracted' AND c.is_current_testimony
                  AND NOT EXISTS (SELECT 1 FROM normalization_outcomes n WHERE n.claim_id = c.claim_id)
                ORDER BY c.char_start, c.ordinal""", source.version_id)
        views = [ClaimView(str(c["claim_id"]), c["claim_text"], c["is_attributed"], c["attributed_to"],
                           c["claim_valid_from"], c["claim_valid_until"], c["claim_valid_precision"],
                           c["claim_valid_kind"], c["asserted_at"]) for c in claims]
        # Anchors and bare references ("the service", "the new deadline") are read from the
        # document's own names only: the space's names depend on which documents committed
        # first, so reading them here made the facts depend on ingest and stage order.
        results = await provider.normalize(views, frozenset())
        return [(claim, drafts, reason) for claim, (drafts, reason) in zip(claims, results, strict=True)]

    async def normalize(self, conn: asyncpg.Connection, source: VersionSource,
                        drafted: list[tuple[Any, list[Any], str | None]],
                        context_vector: dict[str, list[float]] | None = None, *, floor: float = 0.75) -> None:
        """Resolve and stage the assertions of the version's claims. A full name new to its
        entity may make earlier bare-name joins ambiguous: those mentions are resolved again
        and what depended on them adjudicated again, here (see reresolution)."""
        cache: dict[str, Any] = {}
        arrivals: set[str] = set()
        # Every name is resolved before any mention of this version is saved, and the names
        # resolved so far are in the cache: the document's saved mentions are read once.
        saved = await fs.document_entities(conn, source.doc_id)

        def named() -> set[uuid.UUID]:  # what resolve reads itself when not given
            return saved | {entity for entity, _ in cache.values()}

        names = [(claim["claim_id"], ordinal, role, name) for claim, drafts, _ in drafted
                 for ordinal, draft in enumerate(drafts)
                 for role, name in (("subject", draft.subject), ("object", draft.object)) if name is not None]
        # The document's full names first, then its single words (each in document order): a
        # bare "Ravi" meets the "Ravi Shankar" its document names wherever in it the name stands.
        resolved = {}
        for claim_id, ordinal, role, name in sorted(names, key=lambda n: " " not in normalize_name(n[3])):
            resolved[claim_id, ordinal, role] = await fs.resolve(
                conn, source.space_id, source.doc_id, name, cache, context_vector=context_vector,
                claim_id=claim_id, arrivals=arrivals, in_document=named())
        # Mentions, assertions and outcomes are written in three batches (their ids are derived):
        # nothing below reads them before rival_arrived, and the mentions' entities are cached.
        mentions: list[tuple[Any, ...]] = []
        assertions: list[tuple[Any, ...]] = []
        outcomes: list[tuple[Any, ...]] = []
        for claim, drafts, reason in drafted:
            view = ClaimView(str(claim["claim_id"]), claim["claim_text"], claim["is_attributed"],
                             claim["attributed_to"], claim["claim_valid_from"], claim["claim_valid_until"],
                             claim["claim_valid_precision"], claim["claim_valid_kind"], claim["asserted_at"])
            for ordinal, draft in enumerate(drafts):
                mention = {"space_id": source.space_id, "doc_id": source.doc_id, "version_id": source.version_id,
                           "claim_id": claim["claim_id"], "ordinal": ordinal}
                subject_id, subject_verdict = resolved[claim["claim_id"], ordinal, "subject"]
                mentions.append(fs.mention_row(**mention, role="subject", surface=draft.subject,
                                               entity_id=subject_id, verdict=subject_verdict))
                subject_mention = mentions[-1][0]
                object_mention = None
                features: dict[str, Any] = dict(draft.features)
                if draft.object is not None:
                    object_id, object_verdict = resolved[claim["claim_id"], ordinal, "object"]
                    mentions.append(fs.mention_row(**mention, role="object", surface=draft.object,
                                                   entity_id=object_id, verdict=object_verdict))
                    object_mention = mentions[-1][0]
                if draft.previous_object is not None:
                    previous_id, _ = await fs.resolve(conn, source.space_id, source.doc_id, draft.previous_object,
                                                      cache, arrivals=arrivals, in_document=named())
                    features["previous_object_id"] = str(previous_id)
                if draft.features.get("previous_holder"):
                    # the previous holder is a mention like any other name ("took over X from Dev Patel")
                    await fs.resolve(conn, source.space_id, source.doc_id, str(draft.features["previous_holder"]),
                                     cache, arrivals=arrivals, in_document=named())
                if draft.previous_value is not None:
                    features["previous_value"] = draft.previous_value
                window = claim_window(view, draft)
                assertions.append((
                    derived_id("assertion", claim["claim_id"], ordinal), source.space_id, source.version_id,
                    claim["claim_id"], ordinal, draft.kind, subject_mention, draft.predicate, object_mention,
                    draft.statement, window.valid_from, window.valid_until, window.precision, view.valid_kind,
                    draft.change_kind, features))
            outcomes.append((claim["claim_id"], source.version_id, source.space_id, len(drafts),
                             None if drafts else (reason or "unknown_predicate")))
        await fs.save_mentions(conn, mentions)
        await conn.executemany(
            """INSERT INTO assertions (assertion_id, space_id, version_id, claim_id, ordinal, kind,
                                       subject_mention_id, predicate, object_mention_id, statement,
                                       valid_from, valid_until, valid_precision, valid_kind, change_kind, features)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
               ON CONFLICT (claim_id, ordinal, space_id) DO NOTHING""", assertions)
        await conn.executemany(
            """INSERT INTO normalization_outcomes (claim_id, version_id, space_id, assertions, reason)
               VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING""", outcomes)
        moved = await reresolution.rival_arrived(conn, source, arrivals) if arrivals else []
        if moved:
            reopened = await reresolution.reopen(conn, source, moved)
            await self._adjudicate(conn, source.space_id, await self._pending(conn, assertion_ids=reopened),
                                   floor=floor)
            await refresh_support(conn, source.space_id, await _facts_of_assertions(conn, reopened), retract=False)

    async def adjudicate(self, conn: asyncpg.Connection, source: VersionSource, *, floor: float) -> None:
        await self._adjudicate(conn, source.space_id, await self._pending(conn, version_id=source.version_id),
                               floor=floor)

    @staticmethod
    async def _pending(conn: asyncpg.Connection, *, version_id: uuid.UUID | None = None,
                       assertion_ids: list[uuid.UUID] | None = None) -> list[asyncpg.Record]:
        """Assertions awaiting adjudication: a version's, in document order, or reopened ones
        (any versions), by said-on time, then version and document order: one order whatever
        order the documents came in."""
        return list(await conn.fetch(
            """SELECT a.assertion_id, a.claim_id, a.kind, a.predicate, a.statement, a.valid_from, a.valid_until,
                      a.valid_precision, a.valid_kind, a.change_kind, a.features, c.doc_id, c.asserted_at,
                      c.is_current_testimony,
                      sm.resolved_entity_id AS subject_id, se.canonical_name AS subject_name,
                      om.resolved_entity_id AS object_id, oe.canonical_name AS object_name
                 FROM assertions a
                 JOIN claims c ON c.claim_id = a.claim_id AND c.space_id = a.space_id
                 JOIN mentions sm ON sm.mention_id = a.subject_mention_id AND sm.space_id = a.space_id
                 JOIN entities se ON se.entity_id = sm.resolved_entity_id AND se.space_id = sm.space_id
            LEFT JOIN mentions om ON om.mention_id = a.object_mention_id AND om.space_id = a.space_id
            LEFT JOIN entities oe ON oe.entity_id = om.resolved_entity_id AND oe.space_id = om.space_id
                WHERE (a.version_id = $1 OR a.assertion_id = ANY($2::uuid[])) AND a.adjudicated_at IS NULL
                ORDER BY c.asserted_at, a.version_id, c.char_start, a.claim_id, a.ordinal""",
            version_id, assertion_ids or []))

    @staticmethod
    async def _adjudicate(conn: asyncpg.Connection, space_id: uuid.UUID, rows: list[asyncpg.Record], *,
                          floor: float) -> None:
        transcript = fs.Transcript()
        for r in rows:
            if not r["is_current_testimony"]:
                # A later version (living mode) or a deletion retired the claim before its
                # turn came: the source no longer says it, so it makes or supports no fact.
                await fs.drop_assertion(conn, r["assertion_id"], "claim_no_longer_current")
                continue
            features = r["features"] or {}
            window = fs.Window(r["valid_from"], r["valid_until"], r["valid_precision"])
            subject_key = normalize_name(r["subject_name"])
            incoming = Incoming(
                r["kind"], r["subject_id"], r["predicate"], r["object_id"], r["statement"], window, r["valid_kind"],
                r["change_kind"],
                previous_object_id=uuid.UUID(features["previous_object_id"]) if features.get(
                    "previous_object_id") else None,
                previous_value=features.get("previous_value"),
                attribute=attribute_key(r["statement"] or "", subject_key),
                statement_key=fs.statement_key(r["statement"]),
                ends=bool(features.get("ends")), said_at=r["asserted_at"],
                until_claim=bool(features.get("until_claim")), schedule=bool(features.get("schedule")),
            )
            candidates = await fs.fact_views(conn, space_id, incoming, r["subject_name"])
            ends = (await fs.pending_ends(conn, space_id, r["subject_id"], r["object_id"])
                    if r["kind"] == "relation" else [])
            verdict = decide(incoming, candidates, floor=floor, pending_ends=ends)
            label = (relation_label(r["subject_name"], r["predicate"], r["object_name"]) if r["kind"] == "relation"
                     else observation_label(r["subject_name"], r["statement"] or "", features))
            await fs.apply(conn, space_id=space_id, incoming=incoming, verdict=verdict,
                           assertion_id=r["assertion_id"], claim_id=r["claim_id"], doc_id=r["doc_id"], label=label,
                           transcript=transcript, generation=int(features.get("generation") or 0))
        await transcript.write(conn)

    async def settle_counts(self, conn: asyncpg.Connection, source: VersionSource) -> None:
        """Evidence counts of every fact this version touched (including the facts it closed)."""
        touched = [r[0] for r in await conn.fetch(
            """SELECT DISTINCT e.fact_id FROM fact_evidence e
                 JOIN claim_occurrences o ON o.claim_id = e.claim_id AND o.space_id = e.space_id
                WHERE o.version_id = $1
               UNION
               SELECT DISTINCT f.fact_id FROM facts f
                    JOIN assertions a ON a.fact_id = f.superseded_by AND a.space_id = f.space_id
                WHERE a.version_id = $1""", source.version_id)]
        await refresh_support(conn, source.space_id, touched, retract=False)

    async def reconcile(self, conn: asyncpg.Connection, source: VersionSource, *, reextracted_by: str | None = None
                        ) -> None:
        """A living document's new version retires the claims it no longer carries; facts that
        lose their last current support are retracted. Snapshot versions retire nothing.

        After a re-extraction (``reextracted_by`` = the extractor that just ran), claims of
        this version that the new reading did not derive again stop being current
        (``reextracted``); a fact left without support is then only *withdrawn*: the source
        did not change, only the reading did, so it is flagged and still returned."""
        if reextracted_by is not None:
            retired = await fs.retire_reextracted(conn, source.space_id, source.doc_id, source.version_id,
                                                  reextracted_by)
            await fs.withdraw_unsupported(conn, source.space_id, await facts_of_claims(conn, retired))
            return
        mode = await conn.fetchval("SELECT versioning_mode FROM documents WHERE doc_id = $1", source.doc_id)
        if mode != "living":
            return
        retired = await fs.supersede_living_testimony(conn, source.space_id, source.doc_id, source.version_id)
        await refresh_support(conn, source.space_id, await facts_of_claims(conn, retired), retract=True)

    async def link_citations(self, conn: asyncpg.Connection, source: VersionSource, markdown: str) -> None:
        """Cross-references this version makes (and earlier documents make to it), for citation paths."""
        await crossrefs.link_version(conn, source, markdown)

    async def labels_to_embed(self, source: VersionSource, model: str) -> Labels:
        """What this version's label stage must embed under ``model``: the labels of its facts
        that have no vector under it, and the profiles of their entities whose text changed."""
        facts = await fs.facts_of_version(self.db, source.space_id, source.version_id, model)
        entities = sorted({f["subject_entity_id"] for f in facts} | {f["object_entity_id"] for f in facts
                                                                      if f["object_entity_id"]})
        profiles = await fs.profile_texts(self.db, entities)
        same = await fs.unchanged_profiles(self.db, source.space_id, profiles, dict.fromkeys(profiles, model))
        return Labels([f for f in facts if f["needs_vector"]],
                      {e: t for e, t in profiles.items() if e not in same}, entities)

    async def neighbourhood(self, source: VersionSource, labels: Labels,
                            profile_vectors: dict[uuid.UUID, list[float]]) -> dict[uuid.UUID, list[uuid.UUID]]:
        """Whom each touched entity is compared with for merges, searched before the space lock
        (the search is most of the proposals' cost), with the profile vectors about to be stored."""
        return await merges.neighbourhood(self.db, source.space_id, labels.entities,
                                          {e: profile_vectors.get(e) or None for e in labels.profiles})

    async def save_labels(self, conn: asyncpg.Connection, source: VersionSource, labels: Labels,
                          vectors: list[list[float]], profile_vectors: dict[uuid.UUID, list[float]],
                          model: str, neighbours: dict[uuid.UUID, list[uuid.UUID]]) -> None:
        """Write the labels' and profiles' vectors and lexical rows. A fact or profile already
        stored with its vector is not rewritten (a row version, a graph entry and its postings
        again, for nothing): most facts a new version touches were embedded before."""
        await fs.save_label_vectors(conn, source.space_id, labels.facts, vectors, model)
        await fs.save_profiles(conn, source.space_id, labels.profiles, profile_vectors, model, neighbours)


@dataclass(frozen=True)
class Labels:
    """A version's label work: facts to embed, profiles to embed, every entity touched."""

    facts: list[asyncpg.Record]
    profiles: dict[uuid.UUID, str]
    entities: list[uuid.UUID]


async def _facts_of_assertions(conn: asyncpg.Connection, assertion_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """The live facts adjudicating these assertions touched: theirs, those their claims
    support, and those they superseded."""
    return [r[0] for r in await conn.fetch(
        """SELECT e.fact_id FROM fact_evidence e
             JOIN assertions a ON a.claim_id = e.claim_id AND a.space_id = e.space_id
             JOIN facts f ON f.fact_id = e.fact_id AND f.space_id = e.space_id
            WHERE a.assertion_id = ANY($1::uuid[]) AND f.invalidated_at IS NULL
           UNION
           SELECT f.fact_id FROM facts f JOIN assertions a ON a.fact_id = f.superseded_by AND a.space_id = f.space_id
            WHERE a.assertion_id = ANY($1::uuid[]) AND f.invalidated_at IS NULL""", assertion_ids)]
