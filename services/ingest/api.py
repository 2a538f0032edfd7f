"""IngestService servicer: converts messages, calls the use cases, converts results."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.ingest.app import IngestService
from services.ingest.domain import (
    ReadinessReport,
    UploadRequest,
    encode_cursor,
    list_query,
    readiness_ids,
)
from services.platform.auth import require_caller
from services.platform.errors import FieldViolation, InvalidArgument, ValidationFailed
from services.platform.values import DEFER_REASON, STAGE_STATUS
from services.platform.wire import optional, timestamp

_MODES = {ingest_pb2.VERSIONING_MODE_SNAPSHOT: "snapshot", ingest_pb2.VERSIONING_MODE_LIVING: "living"}
_MODE_ENUM = {v: k for k, v in _MODES.items()}
_STATUS_FILTER = {
    ingest_pb2.DOCUMENT_STATUS_INGESTING: "ingesting", ingest_pb2.DOCUMENT_STATUS_CONVERTING: "converting",
    ingest_pb2.DOCUMENT_STATUS_STRUCTURING: "structuring", ingest_pb2.DOCUMENT_STATUS_READY: "ready",
    ingest_pb2.DOCUMENT_STATUS_FAILED: "failed", ingest_pb2.DOCUMENT_STATUS_DELETED: "deleted",
}
_STATUS_ENUM = {v: k for k, v in _STATUS_FILTER.items()}
_REQUIREMENTS = ("pipeline", "p1", "live_graph", "p3")




# Initial metadata an upload's server sends once its options are accepted (the gateway
# waits for it: services/gateway/frontdoor.py ACCEPTED_KEY).
UPLOAD_ACCEPTED = "x-testament-upload-accepted"


class IngestServicer(ingest_pb2_grpc.IngestServiceServicer):
    def __init__(self, service: IngestService, *, model_bindings: dict[str, str] | None = None,
                 build_revision: str = "") -> None:
        self.service = service
        self.model_bindings = dict(model_bindings or {})
        self.build_revision = build_revision

    async def Upload(self, requests: AsyncIterator[ingest_pb2.UploadRequest],
                     context: grpc.aio.ServicerContext) -> ingest_pb2.UploadResponse:
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("payload") != "options":
            raise InvalidArgument("the first message of an upload must carry its options", reason="OPTIONS_FIRST")
        o = first.options
        request = UploadRequest(
            filename=o.filename, mime=o.mime, title=optional(o, "title"),
            source_kind=optional(o, "source_kind"), source_ref=optional(o, "source_ref"),
            source_modified_at=optional(o, "source_modified_at"),
            versioning_mode=_MODES.get(o.versioning_mode) if o.HasField("versioning_mode") else None,  # type: ignore[arg-type]
            source_version_ref=optional(o, "source_version_ref"),
            principal_kind=optional(o, "principal_kind"), principal_ref=optional(o, "principal_ref"),
            acl=tuple(o.acl),
        )

        async def chunks() -> AsyncIterator[bytes]:
            # Asked for bytes only once the options passed validation: say so, so a client
            # may wait for it before sending the body (the gateway does) and so never has
            # its refusal raced by its own writes.
            await context.send_initial_metadata(((UPLOAD_ACCEPTED, "1"),))
            async for message in requests:
                if message.WhichOneof("payload") != "chunk":
                    raise InvalidArgument("only the first message of an upload may carry options",
                                          reason="OPTIONS_TWICE")
                yield message.chunk

        recorded, content_hash = await self.service.upload(require_caller(), request, chunks())
        reply = ingest_pb2.UploadResponse(
            deployment_id=str(recorded.space_id), doc_id=str(recorded.doc_id), version_id=str(recorded.version_id),
            content_hash=content_hash, created=recorded.created, mime=recorded.mime, title=recorded.title,
            versioning_mode=_MODE_ENUM[recorded.versioning_mode],
        )
        if recorded.parked:
            reply.parked = ingest_pb2.PARKED_REASON_NO_ROUTE
        return reply

    async def ListDocuments(self, request: ingest_pb2.ListDocumentsRequest,
                            context: grpc.aio.ServicerContext) -> ingest_pb2.ListDocumentsResponse:
        status = _STATUS_FILTER.get(request.status) if request.HasField("status") else None
        query = list_query(optional(request, "limit"), optional(request, "cursor") or None, status)
        rows = await self.service.list_documents(require_caller(), query)
        page, more = rows[:query.limit], len(rows) > query.limit
        reply = ingest_pb2.ListDocumentsResponse()
        for row in page:
            item = reply.documents.add(doc_id=str(row.doc_id), source_kind=row.source_kind, serving=row.serving)
            if row.title is not None:
                item.title = row.title
            if row.source_ref is not None:
                item.source_uri = row.source_ref
            item.first_seen_at.CopyFrom(timestamp(row.first_seen_at))
            latest = item.latest
            latest.version_id, latest.version_no = str(row.version_id), row.version_no
            latest.status = _STATUS_ENUM[row.status]
            latest.ingested_at.CopyFrom(timestamp(row.ingested_at))
            if row.error is not None:
                latest.error = row.error
        if more and page:
            reply.cursor = encode_cursor(page[-1].first_seen_at, page[-1].doc_id)
        return reply

    async def DeleteDocument(self, request: ingest_pb2.DeleteDocumentRequest,
                             context: grpc.aio.ServicerContext) -> ingest_pb2.DeleteDocumentResponse:
        deletion = await self.service.delete_document(require_caller(), uuid.UUID(request.doc_id))
        return ingest_pb2.DeleteDocumentResponse(
            doc_id=str(deletion.doc_id), deleted_at=timestamp(deletion.deleted_at),
            claims_retired=deletion.claims_retired, relations_closed=deletion.relations_closed,
            observations_closed=deletion.observations_closed,
        )

    def _readiness_args(self, request: Any) -> tuple[list[Any], dict[str, bool]]:
        missing = [FieldViolation(f"require.{name}", "Field required", "missing")
                   for name in _REQUIREMENTS if not request.require.HasField(name)]
        if not request.HasField("require"):
            missing = [FieldViolation("require", "Field required", "missing")]
        if missing:
            raise ValidationFailed(missing)
        ids = readiness_ids(list(request.version_ids))
        return ids, {name: getattr(request.require, name) for name in _REQUIREMENTS}

    async def GetReadiness(self, request: ingest_pb2.GetReadinessRequest,
                           context: grpc.aio.ServicerContext) -> ingest_pb2.GetReadinessResponse:
        ids, require = self._readiness_args(request)
        report = await self.service.readiness(require_caller(), ids, require)
        return ingest_pb2.GetReadinessResponse(report=self._report(report))

    async def WatchReadiness(self, request: ingest_pb2.WatchReadinessRequest,
                             context: grpc.aio.ServicerContext) -> AsyncIterator[ingest_pb2.WatchReadinessResponse]:
        ids, require = self._readiness_args(request)
        async for report in self.service.watch_readiness(require_caller(), ids, require):
            yield ingest_pb2.WatchReadinessResponse(report=self._report(report))

    def _report(self, report: ReadinessReport) -> ingest_pb2.PipelineReadinessReport:
        message = report_message(report)
        message.build_revision = self.build_revision
        message.model_bindings.update(self.model_bindings)
        return message


def report_message(report: ReadinessReport) -> ingest_pb2.PipelineReadinessReport:
    message = ingest_pb2.PipelineReadinessReport(ready=report.ready, build_revision="")
    for version in report.versions:
        item = message.versions.add(version_id=str(version.version_id), ready=version.ready)
        for stage in version.stages:
            s = item.stages.add(stage=stage.stage, component_version=stage.component_version,
                                status=STAGE_STATUS[stage.status])
            if stage.finished_at is not None:
                s.finished_at.CopyFrom(timestamp(stage.finished_at))
            if stage.defer_reason is not None:
                s.defer_reason = DEFER_REASON[stage.defer_reason]
    for name, capability in report.capabilities.items():
        target = getattr(message.capabilities, name)
        target.required, target.ready, target.reason = capability.required, capability.ready, capability.reason
        target.checked_at.CopyFrom(timestamp(capability.checked_at))
    return message
