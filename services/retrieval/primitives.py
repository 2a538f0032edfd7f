"""The retrieval primitives: lookups, hydrate, transcript, search, adjacent chunks, and the
change feed. Same rules as the assured operations: confirm every nomination in one
snapshot, count what drops, answer "no" with a typed negative."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator
from typing import Any

from testament.common.v1 import types_pb2 as t
from testament.retrieval.v1 import retrieval_pb2

from services.platform.auth import Caller
from services.platform.errors import Conflict, FieldViolation, ValidationFailed
from services.platform.values import parse_utc
from services.platform.wire import enum_value
from services.retrieval import adapters as db
from services.retrieval.app import (
    Retrieval,
    chunk_message,
    envelope,
    negative,
    struct,
    truncation,
    ts,
)
from services.retrieval.domain import CURRENT, TimeScope, Validity, holds, turn_spans

TRANSCRIPT_LIMIT = 40


class Primitives:
    def __init__(self, retrieval: Retrieval, changes: Any | None = None) -> None:
        self.r = retrieval
        self.changes = changes

    async def lookup_relations(self, caller: Caller, *, subject: uuid.UUID | None, obj: uuid.UUID | None,
                               predicate: str | None, valid_at: str | None, k: int) -> t.Envelope:
        at = parse_utc("valid_at", valid_at) if valid_at is not None else None
        async with self.r.snapshot() as conn:
            now = await self.r._now(conn)
            scope = TimeScope("at", at=at) if at else CURRENT
            env = envelope("fact", scope, now)
            rows = await conn.fetch(
                f"""SELECT {db.FACT_COLUMNS} FROM facts f
                     WHERE f.space_id = $1 AND f.kind = 'relation' AND f.invalidated_at IS NULL
                       AND ($3::uuid IS NULL OR f.subject_entity_id = $3)
                       AND ($4::uuid IS NULL OR f.object_entity_id = $4)
                       AND ($5::text IS NULL OR f.predicate = $5) AND {db.FACT_SUPPORTED}
                     ORDER BY f.evidence_count DESC, f.ingested_at DESC""",
                caller.space_id, db.principals(caller), subject, obj, predicate)
            held = [r for r in rows if holds(Validity(r["valid_from"], r["valid_until"], r["valid_precision"],
                                                      r["superseded_by"] is not None), scope, now)]
            await self.r._attach_facts(conn, caller, env, held[:k], per_stance=0)
        _clear_evidence(env)
        if len(held) > k:
            truncation(env, returned=k, estimated=len(held), exact=False, reason="lookup_k_limit")
        if not held:
            negative(env, "known_empty", "no held relation matches these arguments at that time")
        return env

    async def lookup_observations(self, caller: Caller, entity_id: uuid.UUID, property_query: str | None,
                                  k: int) -> t.Envelope:
        vector = await self.r.embed_query(property_query) if property_query else None
        async with self.r.snapshot() as conn:
            now = await self.r._now(conn)
            env = envelope("fact", CURRENT, now)
            dropped = 0
            if vector is not None:
                hits = await self.r.legs.semantic(conn, "fact", caller, vector, k,
                                                  filters=db.Filters(fact_kind="observation", subject_id=entity_id))
                found = await db.facts(conn, caller, [h for h, _ in hits])
                rows = []
                for fact_id, _ in hits:
                    row = found.get(fact_id)
                    if row is None or not _holds_now(row, now):
                        dropped += 1
                    else:
                        rows.append(row)
                more = False
            else:
                all_rows = await conn.fetch(
                    f"""SELECT {db.FACT_COLUMNS} FROM facts f
                         WHERE f.space_id = $1 AND f.kind = 'observation' AND f.subject_entity_id = $3
                           AND f.invalidated_at IS NULL AND {db.FACT_SUPPORTED}
                         ORDER BY f.evidence_count DESC, f.ingested_at DESC""",
                    caller.space_id, db.principals(caller), entity_id)
                live = [r for r in all_rows if _holds_now(r, now)]
                rows, more = live[:k], len(live) > k
            await self.r._attach_facts(conn, caller, env, rows, per_stance=0)
        _clear_evidence(env)
        env.dropped_by_hydration = dropped
        if more:
            truncation(env, returned=len(rows), estimated=len(rows) + 1, exact=False, reason="lookup_k_limit")
        if not rows:
            negative(env, "known_empty", "no live observation of this entity matches")
        return env

    async def hydrate(self, caller: Caller, relation_id: uuid.UUID) -> t.Envelope:
        async with self.r.snapshot() as conn:
            now = await self.r._now(conn)
            env = envelope("composite", CURRENT, now)
            rows = await db.facts(conn, caller, [relation_id], traceable=True)
            row = rows.get(relation_id)
            if row is None or row["kind"] != "relation":
                return negative(env, "unknown_entity", "no relation with this id is visible",
                                "find it with lookup_relations or facts_context")
            await self.r._attach_facts(conn, caller, env, [row], per_stance=1000)
            env.ClearField("fact_evidence")
            env.ClearField("evidence_totals")
            docs = await conn.fetch(
                f"""SELECT DISTINCT d.doc_id, d.title, d.source_kind FROM fact_evidence e
                      JOIN claims c ON c.claim_id = e.claim_id AND c.space_id = e.space_id
                           JOIN documents d ON d.doc_id = c.doc_id AND d.space_id = c.space_id
                     WHERE d.space_id = $1 AND e.fact_id = $3 AND c.is_current_testimony AND {db.DOC_VISIBLE}
                     ORDER BY d.doc_id""", caller.space_id, db.principals(caller), relation_id)
            for d in docs:
                source = env.sources.add(doc_id=str(d["doc_id"]), source_kind=d["source_kind"])
                if d["title"] is not None:
                    source.title = d["title"]
        return env

    async def transcript(self, caller: Caller, relation_id: uuid.UUID) -> t.Envelope:
        async with self.r.snapshot() as conn:
            now = await self.r._now(conn)
            env = envelope("composite", CURRENT, now)
            visible = await db.facts(conn, caller, [relation_id], traceable=True)
            rows = []
            total = 0
            if relation_id in visible and visible[relation_id]["kind"] == "relation":
                total = await conn.fetchval("SELECT count(*) FROM fact_decisions WHERE fact_id = $1", relation_id)
                rows = await conn.fetch(
                    """SELECT * FROM (SELECT subject_kind, outcome, method, confidence, related_id, decided_by,
                                             decided_at, features
                                        FROM fact_decisions WHERE fact_id = $1
                                       ORDER BY decided_at DESC LIMIT $2) recent ORDER BY decided_at""",
                    relation_id, TRANSCRIPT_LIMIT)
        for r in rows:
            entry = env.transcript.add(subject_kind=enum_value(t.TranscriptSubjectKind, r["subject_kind"]),
                                       outcome=r["outcome"], method=r["method"], decided_by=r["decided_by"],
                                       decided_at=ts(r["decided_at"]))
            if r["confidence"] is not None:
                entry.confidence = r["confidence"]
            if r["related_id"] is not None:
                entry.related_id = str(r["related_id"])
            if r["features"] is not None:
                entry.features.CopyFrom(struct(r["features"]))
        truncation(env, returned=len(rows), estimated=total, exact=True, reason=None)
        if not rows:
            negative(env, "known_empty", "no decision is recorded for this relation")
        return env

    async def search(self, caller: Caller, kind: str, query: str, k: int, channel: str) -> t.Envelope:
        vector = await self.r.embed_query(query) if channel == "semantic" else None
        async with self.r.snapshot() as conn:
            now = await self.r._now(conn)
            env = envelope("evidence", CURRENT, now)
            if vector is not None:
                if not await self.r.legs.comparable(conn, caller.space_id):
                    model = await self.r.legs.space_model(conn, caller.space_id)
                    raise Conflict(f"this space is embedded with {model}, queries with {self.r.legs.model}: "
                                   "run `testament ops reembed`, or search with channel=bm25",
                                   reason="EMBEDDING_MODEL_MISMATCH")
                hits = await self.r.legs.semantic(conn, kind, caller, vector, k)
            else:
                hits = await self.r.legs.lexical(conn, kind, caller, query, k)
            ids = [h for h, _ in hits]
            found = await (db.claims(conn, caller, ids) if kind == "claim" else db.chunks(conn, caller, ids))
        dropped = 0
        for item in ids:
            row = found.get(item)
            if row is None:
                dropped += 1
            elif kind == "claim":
                env.evidence.append(self.r._evidence(row, caller))
            else:
                message = chunk_message(row)
                message.chunk_text = self.r.redact(message.chunk_text, caller)
                env.chunks.append(message)
        env.dropped_by_hydration = dropped
        if len(ids) >= k:
            # A BM25 read that reached its cap says how many targets at least match.
            estimated = max(len(ids), getattr(hits, "matched", None) or 0)
            truncation(env, returned=len(ids) - dropped, estimated=estimated, exact=False, reason="result_budget")
        if dropped == len(ids):
            negative(env, "known_empty", "nothing in memory matches the query")
        return env

    async def adjacent(self, caller: Caller, chunk_id: uuid.UUID, window: int, turn_id: str | None = None
                       ) -> t.Envelope:
        """The chunks around a chunk: ``window`` chunks on each side, or, given one of its
        conversation turns, the chunks holding the ``window`` turns on each side of that turn
        (every chunk holds at least one whole turn, so they lie within ``window`` chunks)."""
        async with self.r.snapshot() as conn:
            now = await self.r._now(conn)
            env = envelope("evidence", CURRENT, now)
            target = (await db.chunks(conn, caller, [chunk_id])).get(chunk_id)
            if target is None:
                return negative(env, "unknown_entity", "no visible chunk has this id",
                                "find chunks with search_chunks")
            if turn_id is not None and turn_id not in [i for _, _, i in turn_spans(target["chunk_text"])]:
                raise ValidationFailed([FieldViolation(
                    "turn_id", "Input should be the id of one of the chunk's turns", "literal_error", turn_id)])
            ids = await db.chunk_ids_between(conn, target["version_id"], target["ordinal"] - window,
                                             target["ordinal"] + window)
            found = await db.chunks(conn, caller, ids)
        rows = [found[i] for i in ids if i in found]
        if turn_id is not None:
            rows = _around_turn(rows, chunk_id, turn_id, window)
        for row in rows:
            message = chunk_message(row)
            message.chunk_text = self.r.redact(message.chunk_text, caller)
            env.chunks.append(message)
        if not env.chunks:
            negative(env, "known_empty", "the chunk exists but nothing around it can be confirmed")
        return env

    async def watch_changes(self, caller: Caller, cursor: str | None, kinds: list[int]
                            ) -> AsyncIterator[retrieval_pb2.WatchChangesResponse]:
        from services.platform.errors import Unimplemented

        if self.changes is None:
            raise Unimplemented("the change feed is not available in this deployment", reason="NOT_BUILT")
        async for item in self.changes(caller, cursor, kinds):
            yield item


def _holds_now(row: Any, now: dt.datetime) -> bool:
    return holds(Validity(row["valid_from"], row["valid_until"], row["valid_precision"],
                          row["superseded_by"] is not None), CURRENT, now)


def _clear_evidence(env: t.Envelope) -> None:
    """Lookups return facts only (their evidence is one hydrate away)."""
    for name in ("evidence", "fact_evidence", "evidence_totals"):
        env.ClearField(name)


def _around_turn(rows: list[Any], chunk_id: uuid.UUID, turn_id: str, window: int) -> list[Any]:
    """Of consecutive chunks, those holding one of the ``window`` turns on either side of
    ``turn_id`` (in the chunk ``chunk_id``), or that turn itself."""
    turns = [(row["chunk_id"], turn) for row in rows for _, _, turn in turn_spans(row["chunk_text"])]
    at = turns.index((chunk_id, turn_id))
    wanted = {chunk for chunk, _ in turns[max(0, at - window):at + window + 1]}
    return [row for row in rows if row["chunk_id"] in wanted]
