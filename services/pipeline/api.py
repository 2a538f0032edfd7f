"""PipelineService servicer: dead letters, replay, parked work, queue counts, cost receipts.

Every operation is confined to the caller's space.
"""

from __future__ import annotations

import datetime as dt
import uuid

import grpc
from testament.common.v1 import stage_pb2
from testament.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc

from services.pipeline.adapters.queue import PgQueue
from services.platform.auth import require_caller
from services.platform.db import Database
from services.platform.errors import Conflict, FieldViolation, NotFound, ValidationFailed
from services.platform.values import (
    DEFER_REASON,
    STAGE_STATUS,
    bounded_int,
    cursor_instant,
    cursor_uuid,
    decode_cursor,
    encode_cursor,
    parse_uuid,
)
from services.platform.wire import optional, timestamp

# ReplayDeadLetterRequest.attempts: 1-10 (the contract).
MAX_REPLAY_ATTEMPTS = 10
# ListDeadLettersRequest.limit: default 50, 1-200 (the contract).
DEAD_LETTER_PAGE, DEAD_LETTER_PAGE_MAX = 50, 200


def _after(raw: str | None) -> tuple[dt.datetime, uuid.UUID] | None:
    """The (time, id) a page cursor continues after; None for the first page."""
    if not raw:
        return None
    data = decode_cursor(raw, ("t", "i"))
    return cursor_instant(data["t"]), cursor_uuid(data["i"])


class PipelineServicer(pipeline_pb2_grpc.PipelineServiceServicer):
    def __init__(self, db: Database, queue: PgQueue, routes: set[str]) -> None:
        self.db = db
        self.queue = queue
        self.routes = routes

    async def ListDeadLetters(self, request: pipeline_pb2.ListDeadLettersRequest,
                              context: grpc.aio.ServicerContext) -> pipeline_pb2.ListDeadLettersResponse:
        caller = require_caller()
        limit = bounded_int("limit", optional(request, "limit"), DEAD_LETTER_PAGE, 1, DEAD_LETTER_PAGE_MAX)
        after = _after(optional(request, "cursor"))
        version = parse_uuid("version_id", request.version_id) if request.HasField("version_id") else None
        rows = await self.db.fetch(
            """SELECT w.work_id, v.doc_id, w.version_id, w.stage, w.component_version, w.attempts, w.last_error,
                      w.updated_at
                 FROM work_units w JOIN document_versions v USING (version_id, space_id)
                WHERE w.space_id = $1 AND w.status = 'dead_letter'
                  AND ($2::text IS NULL OR w.stage = $2) AND ($3::uuid IS NULL OR w.version_id = $3)
                  AND ($4::timestamptz IS NULL OR (w.updated_at, w.work_id) < ($4, $5::uuid))
                ORDER BY w.updated_at DESC, w.work_id DESC LIMIT $6""",
            caller.space_id, request.stage if request.HasField("stage") else None, version,
            *(after or (None, None)),
            limit + 1,
        )
        reply = pipeline_pb2.ListDeadLettersResponse()
        for r in rows[:limit]:
            item = reply.dead_letters.add(work_unit_id=str(r["work_id"]), doc_id=str(r["doc_id"]),
                                          version_id=str(r["version_id"]), stage=r["stage"],
                                          component_version=r["component_version"], attempts=r["attempts"])
            if r["last_error"] is not None:
                item.last_error = r["last_error"]
            item.dead_lettered_at.CopyFrom(timestamp(r["updated_at"]))
        if len(rows) > limit:
            last = rows[limit - 1]
            reply.cursor = encode_cursor({"t": last["updated_at"].isoformat(), "i": str(last["work_id"])})
        return reply

    async def ReplayDeadLetter(self, request: pipeline_pb2.ReplayDeadLetterRequest,
                               context: grpc.aio.ServicerContext) -> pipeline_pb2.ReplayDeadLetterResponse:
        caller = require_caller()
        work_id = parse_uuid("work_unit_id", request.work_unit_id)
        attempts = request.attempts if request.HasField("attempts") else None
        if attempts is not None and not 1 <= attempts <= MAX_REPLAY_ATTEMPTS:
            bound = ("greater_than_equal", "at least 1", {"ge": 1}) if attempts < 1 else (
                "less_than_equal", f"at most {MAX_REPLAY_ATTEMPTS}", {"le": MAX_REPLAY_ATTEMPTS})
            raise ValidationFailed([FieldViolation("attempts", f"Input should be {bound[1]}", bound[0], attempts,
                                                   bound[2])])
        not_before = request.not_before.ToDatetime(dt.UTC) if request.HasField("not_before") else None
        replay = await self.queue.replay(work_id, attempts=attempts, not_before=not_before, space_id=caller.space_id)
        if replay.outcome == "unknown":
            raise NotFound("no work unit with that id", reason="WORK_UNIT_NOT_FOUND")
        if replay.outcome == "version_deleted":
            raise Conflict("the work unit's document was deleted; there is nothing to replay",
                           reason="VERSION_DELETED")
        if replay.outcome == "not_dead_letter":
            raise Conflict("the work unit is not dead-lettered (already replayed or finished)",
                           reason="NOT_DEAD_LETTER")
        row = replay.row
        assert row is not None
        return pipeline_pb2.ReplayDeadLetterResponse(work_unit_id=str(row["work_id"]),
                                                     status=stage_pb2.STAGE_STATUS_PENDING,
                                                     attempts=row["max_attempts"],
                                                     not_before=timestamp(row["not_before"]))

    async def ResumeNoRoute(self, request: pipeline_pb2.ResumeNoRouteRequest,
                            context: grpc.aio.ServicerContext) -> pipeline_pb2.ResumeNoRouteResponse:
        caller = require_caller()
        routes = self.routes if not request.HasField("mime") else self.routes & {request.mime}
        released = await self.queue.resume_no_route(routes, caller.space_id)
        return pipeline_pb2.ResumeNoRouteResponse(released_version_ids=[str(v) for v in released])

    async def InspectQueue(self, request: pipeline_pb2.InspectQueueRequest,
                           context: grpc.aio.ServicerContext) -> pipeline_pb2.InspectQueueResponse:
        caller = require_caller()
        rows = await self.db.fetch(
            """SELECT stage, status, defer_reason, count(*) AS n, min(created_at) AS oldest FROM work_units
                WHERE space_id = $1 AND (cardinality($2::text[]) = 0 OR stage = ANY($2::text[]))
                GROUP BY stage, status, defer_reason ORDER BY stage, status, defer_reason""",
            caller.space_id, list(request.stages),
        )
        reply = pipeline_pb2.InspectQueueResponse(observed_at=timestamp(dt.datetime.now(dt.UTC)))
        for r in rows:
            item = reply.counts.add(stage=r["stage"], status=STAGE_STATUS[r["status"]], count=r["n"],
                                    oldest_created_at=timestamp(r["oldest"]))
            if r["defer_reason"] is not None:
                item.defer_reason = DEFER_REASON[r["defer_reason"]]
        return reply

    async def ListCostReceipts(self, request: pipeline_pb2.ListCostReceiptsRequest,
                               context: grpc.aio.ServicerContext) -> pipeline_pb2.ListCostReceiptsResponse:
        caller = require_caller()
        limit = bounded_int("limit", optional(request, "limit"), 100, 1, 500)
        after = _after(optional(request, "cursor"))
        now = dt.datetime.now(dt.UTC)
        horizon = now - dt.timedelta(seconds=60)  # receipts younger than this may still be arriving
        rows = await self.db.fetch(
            """SELECT call_id, work_id, stage, attempt, provider, model, tokens_in, tokens_out, latency_ms, outcome,
                      occurred_at
                 FROM provider_calls
                WHERE space_id = $1 AND occurred_at <= $2
                  AND ($3::timestamptz IS NULL OR (occurred_at, call_id) > ($3, $4::uuid))
                ORDER BY occurred_at, call_id LIMIT $5""",
            caller.space_id, horizon, *(after or (None, None)), limit + 1,
        )
        reply = pipeline_pb2.ListCostReceiptsResponse(
            contract="rememberstack.cost_export.v1", deployment_id=str(caller.space_id),
            server_time=timestamp(now), horizon=timestamp(horizon))
        if request.HasField("cursor"):
            reply.cursor = request.cursor
        for r in rows[:limit]:
            item = reply.receipts.add(cost_id=str(r["call_id"]), deployment_id=str(caller.space_id),
                                      source=pipeline_pb2.COST_SOURCE_WORKER,
                                      work_id=str(r["work_id"]) if r["work_id"] else "",
                                      call_key=f"{r['provider']}:{r['call_id']}", outcome=r["outcome"],
                                      occurred_at=timestamp(r["occurred_at"]))
            for name, value in (("stage", r["stage"]), ("attempt", r["attempt"]), ("model_name", r["model"]),
                                ("tokens_in", r["tokens_in"]), ("tokens_out", r["tokens_out"])):
                if value is not None:
                    setattr(item, name, value)
            if r["latency_ms"] is not None:
                item.latency_ms = int(r["latency_ms"])
        if len(rows) > limit:
            last = rows[limit - 1]
            reply.next_cursor = encode_cursor({"t": last["occurred_at"].isoformat(), "i": str(last["call_id"])})
        return reply
