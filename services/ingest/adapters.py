"""Ingest adapters: PostgreSQL repository, graph health over gRPC, deletion hooks."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.ingest.app import Deletion, DocumentRow, Recorded
from services.ingest.domain import IngestCommand, ListQuery, WorkState
from services.platform import locks
from services.platform.auth import Caller
from services.platform.channels import service_channel
from services.platform.db import Database
from services.platform.errors import SCOPE_TOO_NARROW, PermissionDenied
from services.platform.stages import COMPONENT_VERSION, FIRST_STAGE
from services.platform.support import facts_of_claims, refresh_support

# A document is visible when its ACL is empty or shares a principal with the caller;
# $2 is NULL for callers that see the whole space (trusted keys, open stack).
VISIBLE = "($2::text[] IS NULL OR d.acl = '{}' OR d.acl && $2::text[])"


def _principals(caller: Caller) -> list[str] | None:
    return None if caller.principals is None else sorted(caller.principals)


class DeletionHook(Protocol):
    """What else a deletion retires, inside the deletion's transaction. The pipeline's
    claims and facts plug in here; returns (claims_retired, relations_closed,
    observations_closed)."""

    async def __call__(self, conn: asyncpg.Connection, space_id: uuid.UUID, doc_id: uuid.UUID,
                       version_ids: Sequence[uuid.UUID]) -> tuple[int, int, int]: ...


async def retire_claims(conn: asyncpg.Connection, space_id: uuid.UUID, doc_id: uuid.UUID,
                        version_ids: Sequence[uuid.UUID]) -> tuple[int, int, int]:
    """The document's claims stop being current testimony (``version_deleted``); they stay
    as history. Facts they alone supported are retracted; shared facts lose one supporter."""
    rows = await conn.fetch(
        """UPDATE claims SET is_current_testimony = false
            WHERE doc_id = $1 AND is_current_testimony RETURNING claim_id, version_id""", doc_id)
    if rows:
        reconciliation = uuid.uuid4()
        await conn.executemany(
            """INSERT INTO testimony_currency_events (space_id, claim_id, doc_id, reconciliation_id, became_current,
                                                      reason, from_version_id)
               VALUES ($1, $2, $3, $4, false, 'version_deleted', $5)""",
            [(space_id, r["claim_id"], doc_id, reconciliation, r["version_id"]) for r in rows])
    facts = set(await facts_of_claims(conn, [r["claim_id"] for r in rows]))
    # Facts the document backed through claims that were no longer current (a re-extraction
    # withdrew them) lose their source too, unless another live document still backs them.
    facts.update(r[0] for r in await conn.fetch(
        """SELECT DISTINCT e.fact_id FROM fact_evidence e
            WHERE e.doc_id = $1 AND NOT EXISTS (
                  SELECT 1 FROM fact_evidence o JOIN documents d ON d.doc_id = o.doc_id AND d.space_id = o.space_id
                   WHERE o.fact_id = e.fact_id AND o.stance = 'supports' AND d.deleted_at IS NULL)""", doc_id))
    relations, observations = await refresh_support(conn, space_id, sorted(facts), retract=True)
    return len(rows), relations, observations


class PgIngestRepository:
    def __init__(self, db: Database, *, deletion_hooks: Sequence[DeletionHook] = (retire_claims,)) -> None:
        self.db = db
        self.deletion_hooks = list(deletion_hooks)

    async def record_upload(self, caller: Caller, command: IngestCommand, content_hash: str, size: int,
                            key: str, routes: Mapping[str, str]) -> Recorded:
        space = caller.space_id
        doc_id = command.doc_id(space, content_hash)

        async def body(conn: asyncpg.Connection) -> Recorded:
            # Lock order (services/platform/locks.py): object key, document, version. The key
            # is held to commit: a failed upload's clean-up of the same object waits for us.
            await locks.lock_object_key(conn, key)
            mime, release = await self._content_object(conn, space, content_hash, size, key, command.mime, routes)
            await conn.execute(
                """INSERT INTO documents (doc_id, space_id, source_kind, source_ref, identity_hash, title,
                                          versioning_mode, acl)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (doc_id, space_id) DO NOTHING""",
                doc_id, space, command.source_kind, command.source_ref, command.identity_hash(content_hash),
                command.title, command.versioning_mode, list(command.acl),
            )
            # The row lock serialises concurrent ingests (and a running delete) of one document.
            doc = await locks.lock_document(conn, doc_id)
            assert doc is not None
            if release:
                await self._release_parked(conn, space, content_hash)
            acl = set(doc["acl"])
            if caller.principals is not None and acl and not (acl & caller.principals):
                raise PermissionDenied(SCOPE_TOO_NARROW, reason="DOCUMENT_NOT_VISIBLE")
            latest = await conn.fetchrow(
                """SELECT version_id, content_hash, source_version_ref FROM document_versions
                   WHERE doc_id = $1 AND deleted_at IS NULL ORDER BY version_no DESC LIMIT 1""",
                doc_id,
            )
            routed = mime in routes
            if doc["deleted_at"] is None and latest is not None and latest["content_hash"] == content_hash:
                # Same bytes as the newest version: nothing new, but the sync cursor advances.
                if command.source_version_ref is not None and command.source_version_ref != latest[
                        "source_version_ref"]:
                    await conn.execute("UPDATE document_versions SET source_version_ref = $2 WHERE version_id = $1",
                                       latest["version_id"], command.source_version_ref)
                parked = await conn.fetchval(
                    """SELECT EXISTS (SELECT 1 FROM work_units WHERE version_id = $1 AND stage = $2
                                       AND defer_reason = 'no_route' AND status = 'pending')""",
                    latest["version_id"], FIRST_STAGE,
                )
                return Recorded(space, doc_id, latest["version_id"], False, mime, doc["title"],
                                doc["versioning_mode"], bool(parked))
            if doc["deleted_at"] is not None:
                await conn.execute("UPDATE documents SET deleted_at = NULL WHERE doc_id = $1", doc_id)
            attribution = command.attribution
            version_id = await conn.fetchval(
                """INSERT INTO document_versions (doc_id, space_id, version_no, content_hash, source_version_ref,
                                                  source_modified_at, principal_kind, principal_ref, filename)
                   SELECT $1, $2, coalesce(max(version_no), 0) + 1, $3, $4, $5, $6, $7, $8
                     FROM document_versions WHERE doc_id = $1
                   RETURNING version_id""",
                doc_id, space, content_hash, command.source_version_ref, command.source_modified_at,
                attribution.kind if attribution else None, attribution.ref if attribution else None,
                command.filename,
            )
            await conn.execute(
                """INSERT INTO work_units (space_id, version_id, stage, component_version, defer_reason)
                   VALUES ($1, $2, $3, $4, $5)""",
                space, version_id, FIRST_STAGE, COMPONENT_VERSION[FIRST_STAGE], None if routed else "no_route",
            )
            return Recorded(space, doc_id, version_id, True, mime, doc["title"], doc["versioning_mode"], not routed)

        return await self.db.unit_of_work(body, what="record an upload")

    async def _content_object(self, conn: asyncpg.Connection, space: uuid.UUID, content_hash: str, size: int,
                              key: str, mime: str, routes: Mapping[str, str]) -> tuple[str, bool]:
        """The MIME in force for these bytes: first write wins, except that a routable type
        replaces an unroutable one, and then every parked conversion of the bytes is to be
        released (the second value; done after the document is locked, keeping lock order)."""
        row = await conn.fetchrow(
            """INSERT INTO content_objects (space_id, content_hash, byte_size, mime, object_key)
               VALUES ($1, $2, $3, $4, $5) ON CONFLICT (space_id, content_hash) DO NOTHING
               RETURNING mime""",
            space, content_hash, size, mime, key,
        )
        if row is not None:
            return mime, False
        stored = await conn.fetchval(
            "SELECT mime FROM content_objects WHERE space_id = $1 AND content_hash = $2 FOR UPDATE",
            space, content_hash,
        )
        if stored not in routes and mime in routes:
            await conn.execute("UPDATE content_objects SET mime = $3 WHERE space_id = $1 AND content_hash = $2",
                               space, content_hash, mime)
            return mime, True
        return str(stored), False

    @staticmethod
    async def _release_parked(conn: asyncpg.Connection, space: uuid.UUID, content_hash: str) -> None:
        await conn.execute(
            """UPDATE work_units SET defer_reason = NULL, not_before = clock_timestamp(),
                                     updated_at = clock_timestamp()
                WHERE stage = $3 AND status = 'pending' AND defer_reason = 'no_route'
                  AND version_id IN (SELECT version_id FROM document_versions
                                      WHERE space_id = $1 AND content_hash = $2)""",
            space, content_hash, FIRST_STAGE,
        )

    async def delete_unreferenced(self, key: str, delete: Callable[[str], Awaitable[None]]) -> None:
        """Remove an object this upload created if no content row (of any space) refers to it,
        under the same lock recording takes, so a concurrent upload of the bytes is never
        left pointing at nothing."""
        async def body(conn: asyncpg.Connection) -> None:
            await locks.lock_object_key(conn, key)
            if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM content_objects WHERE object_key = $1)", key):
                await delete(key)

        await self.db.unit_of_work(body, what="clean up an unreferenced object")

    async def list_documents(self, caller: Caller, query: ListQuery) -> list[DocumentRow]:
        after_ts, after_id = query.after if query.after else (None, None)
        rows = await self.db.fetch(
            f"""SELECT d.doc_id, d.title, d.source_kind, d.source_ref, d.first_seen_at,
                       v.version_id, v.version_no, v.status, v.ingested_at, v.error,
                       EXISTS (SELECT 1 FROM document_versions r WHERE r.doc_id = d.doc_id
                                 AND r.deleted_at IS NULL AND r.status = 'ready') AS serving
                  FROM documents d
                  JOIN LATERAL (SELECT version_id, version_no, status, ingested_at, error
                                  FROM document_versions
                                 WHERE doc_id = d.doc_id AND deleted_at IS NULL
                                 ORDER BY version_no DESC LIMIT 1) v ON true
                 WHERE d.space_id = $1 AND d.deleted_at IS NULL AND {VISIBLE}
                   AND ($3::text IS NULL OR v.status = $3)
                   AND ($4::timestamptz IS NULL OR (d.first_seen_at, d.doc_id) < ($4, $5::uuid))
                 ORDER BY d.first_seen_at DESC, d.doc_id DESC
                 LIMIT $6""",
            caller.space_id, _principals(caller), query.status, after_ts, after_id, query.limit + 1,
        )
        return [DocumentRow(**dict(r)) for r in rows]

    async def delete_document(self, caller: Caller, doc_id: uuid.UUID) -> Deletion | None:
        """Deletion wins over processing: in the lock order (space, document, versions) it
        waits for stages of the document's versions that are committing, retracts what they
        wrote, and every stage still running finds its version deleted and ends ``skipped``."""

        async def body(conn: asyncpg.Connection) -> Deletion | None:
            # Facts lose support below: the space lock first, as every fact writer takes it.
            await locks.lock_space(conn, caller.space_id)
            visible = await conn.fetchval(
                f"""SELECT EXISTS (SELECT 1 FROM documents d
                     WHERE d.doc_id = $3 AND d.space_id = $1 AND d.deleted_at IS NULL AND {VISIBLE})""",
                caller.space_id, _principals(caller), doc_id,
            )
            if not visible:
                return None
            doc = await locks.lock_document(conn, doc_id)
            if doc is None or doc["deleted_at"] is not None:
                return None  # a concurrent delete got there first
            live = [r["version_id"] for r in await conn.fetch(
                "SELECT version_id FROM document_versions WHERE doc_id = $1 AND deleted_at IS NULL", doc_id)]
            await locks.lock_versions(conn, live)
            deleted_at = await conn.fetchval(
                "UPDATE documents SET deleted_at = clock_timestamp() WHERE doc_id = $1 RETURNING deleted_at", doc_id)
            versions = [r["version_id"] for r in await conn.fetch(
                """UPDATE document_versions SET deleted_at = $2, status = 'deleted'
                    WHERE doc_id = $1 AND deleted_at IS NULL RETURNING version_id""", doc_id, deleted_at)]
            # Queued work of deleted versions will never publish: close it. Running units
            # find the version deleted when they complete.
            await conn.execute(
                """UPDATE work_units SET status = 'skipped', last_error = 'version deleted',
                                         finished_at = $2, updated_at = $2, lease_owner = NULL
                    WHERE version_id = ANY($1::uuid[]) AND status IN ('pending', 'failed')""",
                versions, deleted_at,
            )
            totals = [0, 0, 0]
            for hook in self.deletion_hooks:
                counts = await hook(conn, caller.space_id, doc_id, versions)
                totals = [a + b for a, b in zip(totals, counts, strict=True)]
            return Deletion(doc_id, deleted_at, *totals)

        return await self.db.unit_of_work(body, what="delete a document")

    async def work_states(self, caller: Caller, version_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID,
                                                                                          list[WorkState]]:
        rows = await self.db.fetch(
            f"""SELECT w.version_id, w.stage, w.component_version, w.status, w.defer_reason, w.not_before,
                       w.finished_at
                  FROM work_units w
                  JOIN document_versions v ON v.version_id = w.version_id AND v.space_id = w.space_id
                  JOIN documents d ON d.doc_id = v.doc_id AND d.space_id = v.space_id
                 WHERE w.version_id = ANY($3::uuid[]) AND v.space_id = $1 AND {VISIBLE}""",
            caller.space_id, _principals(caller), list(version_ids),
        )
        states: dict[uuid.UUID, list[WorkState]] = {}
        for r in rows:
            states.setdefault(r["version_id"], []).append(WorkState(
                r["stage"], r["component_version"], r["status"], r["defer_reason"], r["not_before"],
                r["finished_at"]))
        return states


class GrpcGraphHealth:
    """``live_graph``: the graph service answers its health check. Cached briefly."""

    def __init__(self, address: str | None, *, cache_s: float = 2.0) -> None:
        self._address = address
        self._cache_s = cache_s
        self._checked = -1e9
        self._value: tuple[bool, str] = (False, "graph_database_or_permission_failed")
        self._channel = service_channel(address) if address else None

    async def check(self) -> tuple[bool, str]:
        now = time.monotonic()
        if now - self._checked < self._cache_s:
            return self._value
        self._checked = now
        if self._channel is None:
            self._value = (False, "graph_database_or_permission_failed")
            return self._value
        try:
            reply = await health_pb2_grpc.HealthStub(self._channel).Check(
                health_pb2.HealthCheckRequest(service="testament.graph.v1.GraphService"), timeout=1.0)
            serving = reply.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.aio.AioRpcError:
            serving = False
        self._value = (True, "ready") if serving else (False, "graph_database_or_permission_failed")
        return self._value

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
