"""The write side's one lock order.

Every transaction that writes takes its locks in this order, skipping the levels it does
not need but never going back up, and within one level always in key order:

  1. space      ``lock_space``: a transaction-level advisory lock, the one wide lock. Taken
                first and only by units that write entities, facts or fact support
                (the fact stages, deletion, merges), so they run one at a time per space.
  2. object     ``lock_object_key``: an advisory lock on a content object's storage key,
                held by an upload's recording and by the clean-up of a failed upload.
  3. document   ``lock_document``: the ``documents`` row.
  4. version    ``lock_versions``: ``document_versions`` rows, in version_id order.
  5. work unit  ``work_units`` rows (the queue's own row of a unit, then what it queues).
  6. entities, then facts: only ever written under the space lock, in key order.
  (last)        the change feed's per-space advisory lock, taken by deferred triggers as
                the transaction commits (migration 0004), after every other lock.

Row locks are ``FOR NO KEY UPDATE``, not ``FOR UPDATE``: inserting a chunk, claim or queue
row takes ``FOR KEY SHARE`` on the document and version it references (the foreign-key
check), which ``FOR UPDATE`` would block and ``FOR NO KEY UPDATE`` does not. No write path
changes a key column of these tables, so nothing needs the stronger lock.

Why this order: deletion must see every running stage of the document's versions either
committed (and retract what it wrote) or not yet committed (and then the stage finds the
version deleted and finishes as ``skipped``). Both lock the version row, deletion after the
document, a stage after the space when it writes facts, so neither can wait for the other
while holding what the other needs.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

# Advisory lock classes (the second argument of hashtextextended), one per level.
_SPACE = 7
_OBJECT = 0


async def lock_space(conn: asyncpg.Connection, space_id: uuid.UUID) -> None:
    """Level 1. Re-entrant within the transaction."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1::text, $2))", str(space_id), _SPACE)


async def lock_object_key(conn: asyncpg.Connection, key: str) -> None:
    """Level 2."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, $2))", key, _OBJECT)


async def lock_document(conn: asyncpg.Connection, doc_id: uuid.UUID) -> asyncpg.Record | None:
    """Level 3: the document row (None when there is none)."""
    return await conn.fetchrow(
        """SELECT doc_id, space_id, title, versioning_mode, acl, deleted_at FROM documents
            WHERE doc_id = $1 FOR NO KEY UPDATE""", doc_id)


async def lock_versions(conn: asyncpg.Connection, version_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """Level 4: version rows in key order; returns each one's ``deleted_at`` (absent rows are
    left out)."""
    rows = await conn.fetch(
        """SELECT version_id, deleted_at FROM document_versions WHERE version_id = ANY($1::uuid[])
            ORDER BY version_id FOR NO KEY UPDATE""", sorted(set(version_ids)))
    return {r["version_id"]: r["deleted_at"] for r in rows}
