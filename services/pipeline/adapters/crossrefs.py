"""Document cross-references in PostgreSQL: what a version links to or cites, and which
earlier documents cite a document that arrives after them (so citation paths do not
depend on ingest order)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import asyncpg

from services.pipeline.domain.citations import DocumentNames, citing, document_names, find_references

if TYPE_CHECKING:
    from services.pipeline.adapters.store import VersionSource

# How many other documents a version's references are matched against (newest first).
MAX_CANDIDATES = 5000

_LATEST = """SELECT DISTINCT ON (v.doc_id) v.doc_id, v.version_id, v.filename
               FROM document_versions v WHERE v.deleted_at IS NULL ORDER BY v.doc_id, v.version_no DESC"""


async def _names(conn: asyncpg.Connection, space_id: uuid.UUID, exclude: uuid.UUID) -> list[DocumentNames]:
    rows = await conn.fetch(
        f"""SELECT d.doc_id, d.title, d.source_ref, l.filename,
                   (SELECT s.title FROM sections s WHERE s.version_id = l.version_id AND s.heading_level = 1
                     ORDER BY s.ordinal LIMIT 1) AS heading
              FROM documents d JOIN ({_LATEST}) l ON l.doc_id = d.doc_id
             WHERE d.space_id = $1 AND d.deleted_at IS NULL AND d.doc_id <> $2
             ORDER BY d.first_seen_at DESC LIMIT {MAX_CANDIDATES}""", space_id, exclude)
    return [document_names(r["doc_id"], title=r["title"] or r["heading"],
                           markdown=f"# {r['heading']}\n" if r["heading"] and r["title"] else None,
                           filename=r["filename"], source_ref=r["source_ref"]) for r in rows]


async def link_version(conn: asyncpg.Connection, source: VersionSource, markdown: str) -> None:
    """Restate this document's outgoing references; add those of earlier documents to it."""
    source_ref = await conn.fetchval("SELECT source_ref FROM documents WHERE doc_id = $1", source.doc_id)
    own = document_names(source.doc_id, title=source.title, markdown=markdown, filename=source.filename,
                         source_ref=source_ref)
    outgoing = find_references(markdown, await _names(conn, source.space_id, source.doc_id), self_id=source.doc_id)
    await conn.execute("DELETE FROM document_crossrefs WHERE space_id = $1 AND from_doc_id = $2",
                       source.space_id, source.doc_id)
    await conn.executemany(
        """INSERT INTO document_crossrefs (space_id, from_doc_id, to_doc_id, kind, context)
           VALUES ($1, $2, $3, $4, $5)""",
        [(source.space_id, source.doc_id, r.to_doc_id, r.kind, r.context) for r in outgoing])
    await _incoming(conn, source, own)


async def _incoming(conn: asyncpg.Connection, source: VersionSource, own: DocumentNames) -> None:
    needles = [n for n in (*own.titles, *own.refs) if n and len(n) >= 6]
    if not needles:
        return
    rows = await conn.fetch(
        f"""SELECT l.doc_id, string_agg(c.chunk_text, E'\\n\\n' ORDER BY c.ordinal) AS text
              FROM ({_LATEST}) l JOIN documents d ON d.doc_id = l.doc_id
              JOIN chunks c ON c.version_id = l.version_id
             WHERE d.space_id = $1 AND d.deleted_at IS NULL AND d.doc_id <> $2
               AND l.doc_id IN (SELECT c2.doc_id FROM chunks c2
                                 WHERE c2.space_id = $1 AND c2.chunk_text ILIKE ANY ($3::text[]))
             GROUP BY l.doc_id LIMIT {MAX_CANDIDATES}""",
        source.space_id, source.doc_id, [f"%{_like(n)}%" for n in needles])
    found: list[tuple[Any, ...]] = []
    for from_doc, reference in citing([(r["doc_id"], r["text"]) for r in rows], own):
        found.append((source.space_id, from_doc, source.doc_id, reference.kind, reference.context))
    await conn.executemany(
        """INSERT INTO document_crossrefs (space_id, from_doc_id, to_doc_id, kind, context)
           SELECT $1, $2, $3, $4, $5
            WHERE NOT EXISTS (SELECT 1 FROM document_crossrefs x WHERE x.space_id = $1 AND x.from_doc_id = $2
                                AND x.to_doc_id = $3 AND x.kind = $4)""", found)


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").replace("-", "_").replace(" ", "%")
