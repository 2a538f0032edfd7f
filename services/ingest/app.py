"""Ingest use cases: upload, list, delete, readiness. Ports are small protocols; the
Postgres, object-store and graph-health adapters implement them."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from services.ingest.domain import (
    Capability,
    IngestCommand,
    ListQuery,
    ReadinessReport,
    UploadRequest,
    VersionReadiness,
    WorkState,
    body_too_large,
    document_not_found,
    validate_upload,
    version_readiness,
)
from services.platform.auth import Caller
from services.platform.objectstore import ObjectStore
from services.platform.stages import STAGES

# Stages whose output the search indexes hold: p1 is ready when these are done.
INDEX_STAGES = ("embed_chunk", "embed_claim", "label_relation")


def object_key(content_hash: str) -> str:
    """Originals are content addressed: one object per SHA-256, whoever sent it."""
    return f"originals/sha256/{content_hash[:2]}/{content_hash}"


@dataclass(frozen=True)
class Recorded:
    space_id: uuid.UUID
    doc_id: uuid.UUID
    version_id: uuid.UUID
    created: bool
    mime: str
    title: str
    versioning_mode: str
    parked: bool


@dataclass(frozen=True)
class DocumentRow:
    doc_id: uuid.UUID
    title: str | None
    source_kind: str
    source_ref: str | None
    first_seen_at: dt.datetime
    version_id: uuid.UUID
    version_no: int
    status: str
    ingested_at: dt.datetime
    error: str | None
    serving: bool


@dataclass(frozen=True)
class Deletion:
    doc_id: uuid.UUID
    deleted_at: dt.datetime
    claims_retired: int
    relations_closed: int
    observations_closed: int


class IngestRepository(Protocol):
    async def record_upload(self, caller: Caller, command: IngestCommand, content_hash: str, size: int,
                            key: str, routes: Mapping[str, str]) -> Recorded: ...

    async def delete_unreferenced(self, key: str, delete: Callable[[str], Awaitable[None]]) -> None: ...

    async def list_documents(self, caller: Caller, query: ListQuery) -> list[DocumentRow]: ...

    async def delete_document(self, caller: Caller, doc_id: uuid.UUID) -> Deletion | None: ...

    async def work_states(self, caller: Caller, version_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[WorkState]]:
        ...


class GraphHealth(Protocol):
    async def check(self) -> tuple[bool, str]: ...


@dataclass
class Spooled:
    """An upload staged on local disk while its hash is computed (memory stays bounded)."""

    path: Path
    content_hash: str
    size: int

    async def chunks(self, size: int = 1 << 20) -> AsyncIterator[bytes]:
        handle = await asyncio.to_thread(open, self.path, "rb")
        try:
            while piece := await asyncio.to_thread(handle.read, size):
                yield piece
        finally:
            handle.close()

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


async def spool(chunks: AsyncIterator[bytes], directory: Path, *, max_bytes: int | None) -> Spooled:
    """Write the stream to a private temp file, hashing as it goes; nothing survives a failure."""
    await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    path = directory / f"upload-{uuid.uuid4().hex}"
    digest = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            async for piece in chunks:
                size += len(piece)
                if max_bytes is not None and size > max_bytes:
                    raise body_too_large()
                digest.update(piece)
                await asyncio.to_thread(handle.write, piece)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Spooled(path, digest.hexdigest(), size)


class IngestService:
    def __init__(self, repo: IngestRepository, store: ObjectStore, graph: GraphHealth, *,
                 spool_dir: Path, routes: Mapping[str, str], body_max_bytes: int | None,
                 trusted_attribution: bool) -> None:
        self.repo = repo
        self.store = store
        self.graph = graph
        self.spool_dir = spool_dir
        self.routes = dict(routes)
        self.body_max_bytes = body_max_bytes
        self.trusted_attribution = trusted_attribution

    async def upload(self, caller: Caller, request: UploadRequest, chunks: AsyncIterator[bytes]) -> tuple[
            Recorded, str]:
        """Validate first, then stream the bytes; one transaction records the version and its
        first unit of pipeline work. A failure leaves no version, object or queue row."""
        command = validate_upload(request, caller, trusted_attribution=self.trusted_attribution)
        staged = await spool(chunks, self.spool_dir, max_bytes=self.body_max_bytes)
        try:
            key = object_key(staged.content_hash)
            created_object = False
            if not await self.store.exists(key):
                created_object = await self.store.put_stream(key, staged.chunks(), content_type=command.mime)
            try:
                recorded = await self.repo.record_upload(caller, command, staged.content_hash, staged.size, key,
                                                         self.routes)
            except BaseException:
                if created_object:
                    await asyncio.shield(self.repo.delete_unreferenced(key, self.store.delete))
                raise
            return recorded, staged.content_hash
        finally:
            staged.discard()

    async def list_documents(self, caller: Caller, query: ListQuery) -> list[DocumentRow]:
        return await self.repo.list_documents(caller, query)

    async def delete_document(self, caller: Caller, doc_id: uuid.UUID) -> Deletion:
        deletion = await self.repo.delete_document(caller, doc_id)
        if deletion is None:
            raise document_not_found()
        return deletion

    async def readiness(self, caller: Caller, version_ids: Sequence[uuid.UUID], require: Mapping[str, bool],
                        now: dt.datetime | None = None) -> ReadinessReport:
        now = now or dt.datetime.now(dt.UTC)
        units = await self.repo.work_states(caller, version_ids)
        versions = tuple(version_readiness(v, STAGES, units.get(v, []), now) for v in version_ids)
        pipeline_ready = all(v.ready for v in versions)
        indexed = all(_indexed(v) for v in versions)
        graph_ready, graph_reason = await self.graph.check()
        capabilities = {
            "pipeline": Capability(require["pipeline"], pipeline_ready, now,
                                   "ready" if pipeline_ready else "stage_incomplete"),
            "p1": Capability(require["p1"], indexed, now, "ready" if indexed else "search_channel_incomplete"),
            "live_graph": Capability(require["live_graph"], graph_ready, now, graph_reason),
            # Filesystem views (p3) are not built: never ready, and says why.
            "p3": Capability(require["p3"], False, now, "corpus_snapshot_incomplete"),
        }
        return ReadinessReport(versions, capabilities)

    async def watch_readiness(self, caller: Caller, version_ids: Sequence[uuid.UUID], require: Mapping[str, bool],
                              *, poll_s: float = 0.5) -> AsyncIterator[ReadinessReport]:
        """Push each change of the report until it is ready or a stage is dead-lettered."""
        last: object = None
        while True:
            report = await self.readiness(caller, version_ids, require)
            fingerprint = (report.ready, [(v.version_id, v.stages) for v in report.versions],
                           {k: (c.ready, c.reason) for k, c in report.capabilities.items()})
            if fingerprint != last:
                last = fingerprint
                yield report
            if report.terminal:
                return
            await asyncio.sleep(poll_s)


def _indexed(version: VersionReadiness) -> bool:
    return all(s.done for s in version.stages if s.stage in INDEX_STAGES)
