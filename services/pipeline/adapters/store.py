"""Reads and writes of the pipeline stages in PostgreSQL.

Every write is idempotent: ids are derived from their inputs (uuid5), rows are replaced
or inserted with ``ON CONFLICT DO NOTHING``, and all of a unit's writes share the
transaction that marks the unit done (see :mod:`services.pipeline.adapters.queue`).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.pipeline.domain.claims import ClaimDraft, Decision
from services.platform.db import Database
from services.platform.ledger import CostLedger
from services.platform.structure import Chunk, Section, retrieval_text
from services.platform.text import term_frequencies

_NS = uuid.UUID("0b7e2c1a-64f4-4c2f-8f1e-9a53d2c4b7aa")


def derived_id(*parts: object) -> uuid.UUID:
    return uuid.uuid5(_NS, "\x00".join(str(p) for p in parts))


@dataclass(frozen=True)
class VersionSource:
    space_id: uuid.UUID
    doc_id: uuid.UUID
    version_id: uuid.UUID
    version_no: int
    content_hash: str
    mime: str
    object_key: str
    filename: str | None
    title: str | None
    source_modified_at: dt.datetime | None
    ingested_at: dt.datetime
    representation_id: uuid.UUID | None
    representation_key: str | None


@dataclass(frozen=True)
class ChunkRow:
    chunk_id: uuid.UUID
    ordinal: int
    char_start: int
    char_end: int
    chunk_text: str
    reused_from: uuid.UUID | None


@dataclass(frozen=True)
class OldChunk:
    chunk_id: uuid.UUID
    content_hash: str
    embedding: Any
    embedding_dim: int | None
    embedding_model: str | None


class PgStageStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def version(self, version_id: uuid.UUID) -> VersionSource:
        row = await self.db.fetchrow(
            """SELECT v.space_id, v.doc_id, v.version_id, v.version_no, v.content_hash, c.mime, c.object_key,
                      v.filename, d.title, v.source_modified_at, v.ingested_at, r.representation_id,
                      r.object_key AS representation_key
                 FROM document_versions v
                 JOIN documents d ON d.doc_id = v.doc_id AND d.space_id = v.space_id
                 JOIN content_objects c ON c.space_id = v.space_id AND c.content_hash = v.content_hash
            LEFT JOIN representations r ON r.version_id = v.version_id AND r.space_id = v.space_id
                WHERE v.version_id = $1""",
            version_id,
        )
        if row is None:
            raise LookupError(f"version {version_id} does not exist")
        return VersionSource(**dict(row))

    # --- convert / structure ---------------------------------------------------------

    @staticmethod
    async def save_representation(conn: asyncpg.Connection, source: VersionSource, key: str, sha256: str,
                                  chars: int, converter: str) -> uuid.UUID:
        representation_id = derived_id("representation", source.version_id)
        await conn.execute(
            """INSERT INTO representations (representation_id, space_id, version_id, object_key, markdown_sha256,
                                            char_count, converter)
               VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (version_id, space_id) DO NOTHING""",
            representation_id, source.space_id, source.version_id, key, sha256, chars, converter,
        )
        return representation_id

    @staticmethod
    async def save_sections(conn: asyncpg.Connection, source: VersionSource, sections: Sequence[Section]) -> None:
        assert source.representation_id is not None
        rep = source.representation_id
        await conn.execute("DELETE FROM sections WHERE representation_id = $1", rep)
        ids = {s.index: derived_id("section", rep, s.node_path) for s in sections}
        await conn.executemany(
            """INSERT INTO sections (section_id, space_id, version_id, representation_id, parent_section_id,
                                     node_path, heading_level, title, normalized_title, role, ordinal,
                                     block_start, block_end, char_start, char_end)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)""",
            [(ids[s.index], source.space_id, source.version_id, rep,
              ids.get(s.parent_index) if s.parent_index is not None else None, s.node_path, s.heading_level,
              s.title, s.normalized_title, s.role, s.ordinal, s.block_start, s.block_end, s.char_start, s.char_end)
             for s in sections],
        )

    # --- chunk ---------------------------------------------------------------------

    async def previous_chunks(self, source: VersionSource) -> list[OldChunk]:
        """The chunks of the newest earlier version of the document that has any."""
        rows = await self.db.fetch(
            """SELECT c.chunk_id, c.content_hash, c.embedding, c.embedding_dim, c.embedding_model
                 FROM chunks c
                WHERE c.version_id = (SELECT v.version_id FROM document_versions v
                                       WHERE v.doc_id = $1 AND v.version_no < $2
                                         AND EXISTS (SELECT 1 FROM chunks x WHERE x.version_id = v.version_id)
                                       ORDER BY v.version_no DESC LIMIT 1)
                ORDER BY c.ordinal""",
            source.doc_id, source.version_no,
        )
        return [OldChunk(**dict(r)) for r in rows]

    async def previous_claims_by_block(self, source: VersionSource, extractor_version: str
                                       ) -> dict[str, list[uuid.UUID]]:
        """For the newest earlier version: each block's normalised-text hash → the claims (of
        this extractor) whose verbatim span lies in that block. An unchanged paragraph of a new
        version keeps these claims instead of being read again."""
        from services.platform.structure import normalized_hash, parse_blocks

        rows = await self.db.fetch(
            """SELECT ch.chunk_id, ch.chunk_text, c.claim_id, c.source_span
                 FROM chunks ch
                 JOIN claim_occurrences o ON o.chunk_id = ch.chunk_id AND o.space_id = ch.space_id
                 JOIN claims c ON c.claim_id = o.claim_id AND c.space_id = o.space_id
                WHERE c.extractor_version = $3 AND c.is_current_testimony
                  AND ch.version_id = (SELECT v.version_id FROM document_versions v
                                        WHERE v.doc_id = $1 AND v.version_no < $2
                                          AND EXISTS (SELECT 1 FROM chunks x WHERE x.version_id = v.version_id)
                                        ORDER BY v.version_no DESC LIMIT 1)""",
            source.doc_id, source.version_no, extractor_version)
        by_chunk: dict[uuid.UUID, tuple[str, list[tuple[uuid.UUID, str]]]] = {}
        for r in rows:
            by_chunk.setdefault(r["chunk_id"], (r["chunk_text"], []))[1].append((r["claim_id"], r["source_span"]))
        out: dict[str, list[uuid.UUID]] = {}
        for text, claims in by_chunk.values():
            for block in parse_blocks(text):
                key = normalized_hash(block.text)
                out.setdefault(key, [])
                out[key].extend(claim for claim, span in claims if span in block.text and claim not in out[key])
        return out

    @staticmethod
    async def save_chunks(conn: asyncpg.Connection, source: VersionSource, chunks: Sequence[Chunk],
                          sections: Sequence[Section], reuse: Sequence[OldChunk | None]) -> None:
        assert source.representation_id is not None
        rep = source.representation_id
        old_ids = [r["chunk_id"] for r in await conn.fetch("SELECT chunk_id FROM chunks WHERE version_id = $1",
                                                           source.version_id)]
        if old_ids:  # a re-run replaces what an interrupted run may have left (nothing commits half-way)
            await _delete_postings(conn, "chunk", old_ids)
            await conn.execute("DELETE FROM chunks WHERE version_id = $1", source.version_id)
        section_ids = {s.index: derived_id("section", rep, s.node_path) for s in sections}
        rows = []
        for chunk, old in zip(chunks, reuse, strict=True):
            chunk_id = derived_id("chunk", source.version_id, chunk.ordinal)
            rows.append((
                chunk_id, source.space_id, source.doc_id, source.version_id, rep, section_ids.get(chunk.section_index),
                chunk.ordinal, chunk.block_start, chunk.block_end, chunk.char_start, chunk.char_end, chunk.token_count,
                chunk.text, chunk.content_hash, chunk.location_header, old.chunk_id if old else None,
                old.embedding if old else None, old.embedding_dim if old else None,
                old.embedding_model if old else None,
            ))
        await conn.executemany(
            """INSERT INTO chunks (chunk_id, space_id, doc_id, version_id, representation_id, section_id, ordinal,
                                   block_start, block_end, char_start, char_end, token_count, chunk_text,
                                   content_hash, location_header, reused_from, embedding, embedding_dim,
                                   embedding_model)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)""",
            rows,
        )
        await conn.execute(  # a reused chunk keeps its unit vectors with its own
            """INSERT INTO chunk_units (chunk_id, ordinal, space_id, embedding, embedding_dim, embedding_model)
               SELECT c.chunk_id, u.ordinal, c.space_id, u.embedding, u.embedding_dim, u.embedding_model
                 FROM chunks c JOIN chunk_units u ON u.chunk_id = c.reused_from AND u.space_id = c.space_id
                WHERE c.version_id = $1 AND c.embedding IS NOT NULL""", source.version_id)
        await index_text(conn, source.space_id, "chunk", [(r[0], source.doc_id, retrieval_text(r[12])) for r in rows])

    async def chunk(self, version_id: uuid.UUID, ordinal: int) -> ChunkRow | None:
        row = await self.db.fetchrow(
            """SELECT chunk_id, ordinal, char_start, char_end, chunk_text, reused_from FROM chunks
                WHERE version_id = $1 AND ordinal = $2""", version_id, ordinal)
        return ChunkRow(**dict(row)) if row else None

    # --- embeddings ------------------------------------------------------------------

    async def space_model(self, space_id: uuid.UUID) -> tuple[str, int] | None:
        row = await self.db.fetchrow("SELECT model, dimension FROM space_embedding_models WHERE space_id = $1",
                                     space_id)
        return (row["model"], row["dimension"]) if row else None

    @staticmethod
    async def fix_space_model(conn: asyncpg.Connection, space_id: uuid.UUID, model: str, dimension: int) -> tuple[
            str, int]:
        await conn.execute(
            """INSERT INTO space_embedding_models (space_id, model, dimension) VALUES ($1, $2, $3)
               ON CONFLICT (space_id) DO NOTHING""", space_id, model, dimension)
        row = await conn.fetchrow("SELECT model, dimension FROM space_embedding_models WHERE space_id = $1", space_id)
        return row["model"], row["dimension"]

    async def unembedded(self, table: str, version_id: uuid.UUID) -> list[tuple[uuid.UUID, str]]:
        column = {"chunks": ("chunk_id", "chunk_text"), "claims": ("claim_id", "claim_text")}[table]
        rows = await self.db.fetch(
            f"SELECT {column[0]} AS id, {column[1]} AS text FROM {table} "
            f"WHERE version_id = $1 AND embedding IS NULL ORDER BY {column[0]}", version_id)
        return [(r["id"], r["text"]) for r in rows]

    @staticmethod
    async def save_vectors(conn: asyncpg.Connection, table: str, vectors: Iterable[tuple[uuid.UUID, list[float]]],
                           model: str) -> None:
        key = {"chunks": "chunk_id", "claims": "claim_id"}[table]
        import numpy as np

        await conn.executemany(
            f"UPDATE {table} SET embedding = $2, embedding_dim = $3, embedding_model = $4 WHERE {key} = $1",
            [(i, np.asarray(v, dtype=np.float32), len(v), model) for i, v in vectors],
        )

    @staticmethod
    async def save_units(conn: asyncpg.Connection, space_id: uuid.UUID,
                         units: Sequence[tuple[uuid.UUID, int, list[float]]], model: str) -> None:
        """The unit vectors of chunks, (chunk_id, ordinal, vector), replacing any they had."""
        import numpy as np

        await conn.execute("DELETE FROM chunk_units WHERE space_id = $1 AND chunk_id = ANY($2::uuid[])",
                           space_id, list({i for i, _, _ in units}))
        await conn.executemany(
            """INSERT INTO chunk_units (chunk_id, ordinal, space_id, embedding, embedding_dim, embedding_model)
               VALUES ($1, $2, $3, $4, $5, $6)""",
            [(i, n, space_id, np.asarray(v, dtype=np.float32), len(v), model) for i, n, v in units])

    # --- claims ----------------------------------------------------------------------

    @staticmethod
    async def save_drafts(conn: asyncpg.Connection, source: VersionSource, chunk_id: uuid.UUID, provider: str,
                          payload: dict[str, Any]) -> None:
        await conn.execute(
            """INSERT INTO claim_drafts (chunk_id, space_id, version_id, provider, drafts) VALUES ($1, $2, $3, $4, $5)
               ON CONFLICT (chunk_id, space_id) DO UPDATE SET provider = EXCLUDED.provider, drafts = EXCLUDED.drafts,
                                                    created_at = clock_timestamp()""",
            chunk_id, source.space_id, source.version_id, provider, payload)

    async def drafts(self, chunk_id: uuid.UUID) -> tuple[str, dict[str, Any]] | None:
        row = await self.db.fetchrow("SELECT provider, drafts FROM claim_drafts WHERE chunk_id = $1", chunk_id)
        return (row["provider"], row["drafts"]) if row else None

    @staticmethod
    async def attach_claims(conn: asyncpg.Connection, source: VersionSource, chunk_id: uuid.UUID,
                            claim_ids: Sequence[uuid.UUID]) -> None:
        await conn.executemany(
            """INSERT INTO claim_occurrences (claim_id, chunk_id, version_id, space_id, derivation_kind)
               VALUES ($1, $2, $3, $4, 'reused') ON CONFLICT DO NOTHING""",
            [(claim_id, chunk_id, source.version_id, source.space_id) for claim_id in claim_ids])

    @staticmethod
    async def reuse_claims(conn: asyncpg.Connection, source: VersionSource, chunk_id: uuid.UUID,
                           old_chunk_id: uuid.UUID) -> int:
        result = await conn.execute(
            """INSERT INTO claim_occurrences (claim_id, chunk_id, version_id, space_id, derivation_kind)
               SELECT o.claim_id, $1, $2, $3, 'reused' FROM claim_occurrences o WHERE o.chunk_id = $4
               ON CONFLICT DO NOTHING""",
            chunk_id, source.version_id, source.space_id, old_chunk_id)
        return int(result.split()[-1])

    @staticmethod
    async def save_claims(conn: asyncpg.Connection, source: VersionSource, chunk_id: uuid.UUID,
                          claims: Sequence[ClaimDraft], decisions: Sequence[Decision], *, extractor: str,
                          asserted_at: dt.datetime | None) -> None:
        assert source.representation_id is not None
        rows = []
        for ordinal, c in enumerate(claims):
            claim_id = derived_id("claim", chunk_id, extractor, ordinal)  # a new extractor makes new claims
            rows.append((
                claim_id, source.space_id, source.doc_id, source.version_id, source.representation_id, chunk_id,
                ordinal, c.claim_text, c.source_span, c.char_start, c.char_end,
                [{"char_start": s.char_start, "char_end": s.char_end} for s in c.evidence_spans],
                list(c.added_context), c.temporal_class, c.is_attributed, c.attributed_to, c.kept_flagged, extractor,
                asserted_at, c.valid_from, c.valid_until, c.valid_precision, c.valid_kind,
            ))
        await conn.executemany(
            """INSERT INTO claims (claim_id, space_id, doc_id, version_id, representation_id, chunk_id, ordinal,
                                   claim_text, source_span, char_start, char_end, evidence_spans, added_context,
                                   temporal_class, is_attributed, attributed_to, kept_flagged, extractor_version,
                                   asserted_at, claim_valid_from, claim_valid_until, claim_valid_precision,
                                   claim_valid_kind)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
                       $21, $22, $23)
               ON CONFLICT (claim_id, space_id) DO NOTHING""",
            rows,
        )
        await conn.executemany(
            """INSERT INTO claim_occurrences (claim_id, chunk_id, version_id, space_id, derivation_kind)
               VALUES ($1, $2, $3, $4, 'extracted') ON CONFLICT DO NOTHING""",
            [(r[0], chunk_id, source.version_id, source.space_id) for r in rows],
        )
        await conn.executemany(
            """INSERT INTO extraction_decisions (decision_id, space_id, version_id, chunk_id, kind, reason,
                                                 char_start, char_end, detail, provider)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (decision_id, space_id) DO NOTHING""",
            [(derived_id("decision", chunk_id, extractor, i), source.space_id, source.version_id, chunk_id, d.kind,
              d.reason, d.char_start, d.char_end, d.detail, extractor) for i, d in enumerate(decisions)],
        )
        await index_text(conn, source.space_id, "claim", [(r[0], source.doc_id, r[7]) for r in rows])

    # --- the cost ledger ----------------------------------------------------------------

    async def record_call(self, *, space_id: uuid.UUID | None, work_id: uuid.UUID | None, stage: str | None,
                          attempt: int | None, provider: str, model: str | None, tokens_in: int | None,
                          tokens_out: int | None, latency_ms: float, outcome: str) -> None:
        await CostLedger(self.db).record(space_id=space_id, work_id=work_id, stage=stage, attempt=attempt,
                                         provider=provider, model=model, tokens_in=tokens_in, tokens_out=tokens_out,
                                         latency_ms=latency_ms, outcome=outcome)


async def _delete_postings(conn: asyncpg.Connection, kind: str, ids: Sequence[uuid.UUID]) -> None:
    await conn.execute("DELETE FROM bm25_postings WHERE target_kind = $1 AND target_id = ANY($2::uuid[])", kind,
                       list(ids))
    await conn.execute("DELETE FROM bm25_docs WHERE target_kind = $1 AND target_id = ANY($2::uuid[])", kind,
                       list(ids))


async def index_text(conn: asyncpg.Connection, space_id: uuid.UUID, kind: str,
                     items: Sequence[tuple[uuid.UUID, uuid.UUID | None, str]]) -> None:
    """BM25 postings (term frequencies) and lengths for each (target, document, text)."""
    if not items:
        return
    docs: list[tuple[Any, ...]] = []
    postings: list[tuple[Any, ...]] = []
    for target_id, doc_id, text in items:
        counts, length = term_frequencies(text)
        docs.append((space_id, kind, target_id, doc_id, length))
        postings.extend((space_id, kind, term, target_id, tf, length) for term, tf in counts.items())
    # A target's postings are rewritten whole: each carries its target's length, so no
    # posting of an earlier text may stay behind. One statement per table (the counters'
    # triggers fire once per statement), terms in one order so that concurrent writers take
    # the counter rows alike.
    await conn.execute("DELETE FROM bm25_postings WHERE target_kind = $1 AND target_id = ANY($2::uuid[])", kind,
                       [d[2] for d in docs])
    postings.sort(key=lambda p: (p[2], p[3]))
    await conn.execute(
        """INSERT INTO bm25_docs (space_id, target_kind, target_id, doc_id, length)
           SELECT $1, $2, t, d, l FROM unnest($3::uuid[], $4::uuid[], $5::int[]) AS x(t, d, l)
           ON CONFLICT (target_kind, target_id, space_id) DO UPDATE SET length = EXCLUDED.length""",
        space_id, kind, [d[2] for d in docs], [d[3] for d in docs], [d[4] for d in docs])
    await conn.execute(
        """INSERT INTO bm25_postings (space_id, target_kind, term, target_id, tf, length)
           SELECT $1, $2, term, t, tf, l FROM unnest($3::text[], $4::uuid[], $5::int[], $6::int[])
                                       AS x(term, t, tf, l)
           """,
        space_id, kind, [p[2] for p in postings], [p[3] for p in postings], [p[4] for p in postings],
        [p[5] for p in postings])


def draft_payload(drafts: Sequence[ClaimDraft], decisions: Sequence[Decision]) -> dict[str, Any]:
    from dataclasses import asdict

    def encode(obj: Any) -> Any:
        return json.loads(json.dumps(asdict(obj), default=lambda v: v.isoformat()))

    return {"drafts": [encode(d) for d in drafts], "decisions": [encode(d) for d in decisions]}


def load_payload(payload: dict[str, Any]) -> tuple[list[ClaimDraft], list[Decision]]:
    from services.pipeline.domain.claims import EvidenceSpan

    drafts = []
    for d in payload.get("drafts", []):
        values = dict(d)
        values["evidence_spans"] = tuple(EvidenceSpan(**s) for s in values["evidence_spans"])
        values["added_context"] = tuple(values["added_context"])
        for key in ("valid_from", "valid_until"):
            if values.get(key):
                values[key] = dt.datetime.fromisoformat(values[key])
        drafts.append(ClaimDraft(**values))
    return drafts, [Decision(**d) for d in payload.get("decisions", [])]
