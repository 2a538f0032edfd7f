"""PipelineService servicer: dead letters, replay, parked work, queue counts, cost receipts,
re-extraction, re-embedding and entity merges (everything `testament ops` does).

Every operation is confined to the caller's space. Field limits and formats are the
contract's buf.validate rules, checked before these methods run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import grpc
from testament.common.v1 import stage_pb2
from testament.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc

from services.pipeline.adapters import merges
from services.pipeline.adapters.queue import PgQueue
from services.pipeline.adapters.reembed import ReembedRefused, reembed_space
from services.platform.auth import require_caller
from services.platform.db import Database, request_deadline
from services.platform.embeddings import EmbeddingProvider, EmbeddingUnavailable
from services.platform.errors import Conflict, NotFound, Unavailable
from services.platform.values import (
    DEFER_REASON,
    STAGE_STATUS,
    cursor_instant,
    cursor_uuid,
    decode_cursor,
    encode_cursor,
)
from services.platform.wire import optional, timestamp

# Defaults of the page sizes whose bounds the contract's rules hold.
DEAD_LETTER_PAGE, COST_RECEIPT_PAGE, MERGE_PAGE = 50, 100, 100
MERGE_STATUS = {"proposed": pipeline_pb2.MERGE_STATUS_PROPOSED, "applied": pipeline_pb2.MERGE_STATUS_APPLIED,
                "reverted": pipeline_pb2.MERGE_STATUS_REVERTED, "rejected": pipeline_pb2.MERGE_STATUS_REJECTED}
MERGE_STATUS_NAME = {number: name for name, number in MERGE_STATUS.items()}


def _after(raw: str | None) -> tuple[dt.datetime, uuid.UUID] | None:
    """The (time, id) a page cursor continues after; None for the first page."""
    if not raw:
        return None
    data = decode_cursor(raw, ("t", "i"))
    return cursor_instant(data["t"]), cursor_uuid(data["i"])


def _merge_refusal(refused: merges.MergeRefused) -> Exception:
    if refused.reason == "unknown_proposal":
        return NotFound("no merge proposal with that id", reason="MERGE_PROPOSAL_NOT_FOUND")
    if refused.reason == "chain":
        return Conflict(refused.detail, reason="MERGE_CHAIN")
    if refused.reason == "too_many_facts":
        return Conflict(refused.detail, reason="MERGE_TOO_LARGE")
    return Conflict(refused.detail, reason="MERGE_NOT_APPLICABLE")  # not_applicable, not_applied


def _merge_change(change: dict[str, Any]) -> pipeline_pb2.MergeChange:
    reply = pipeline_pb2.MergeChange(proposal_id=change["proposal_id"], status=MERGE_STATUS[change["status"]],
                                     survivor_id=change["survivor_id"], absorbed_id=change["absorbed_id"],
                                     facts=change["facts"], aliases=change["aliases"])
    for name in ("mentions", "facts_still_pointing"):
        if name in change:
            setattr(reply, name, change[name])
    return reply


class PipelineServicer(pipeline_pb2_grpc.PipelineServiceServicer):
    def __init__(self, db: Database, queue: PgQueue, routes: set[str], embeddings: EmbeddingProvider,
                 embed_batch: int) -> None:
        self.db = db
        self.queue = queue
        self.routes = routes
        self.embeddings = embeddings
        self.embed_batch = embed_batch

    async def ListDeadLetters(self, request: pipeline_pb2.ListDeadLettersRequest,
                              context: grpc.aio.ServicerContext) -> pipeline_pb2.ListDeadLettersResponse:
        caller = require_caller()
        limit = optional(request, "limit", DEAD_LETTER_PAGE)
        after = _after(optional(request, "cursor"))
        version = uuid.UUID(request.version_id) if request.HasField("version_id") else None
        rows = await self.db.fetch(
            """SELECT w.work_id, v.doc_id, w.version_id, w.stage, w.component_version, w.attempts, w.last_error,
                      w.updated_at
                 FROM work_units w JOIN document_versions v USING (version_id)
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
        work_id = uuid.UUID(request.work_unit_id)
        attempts = optional(request, "attempts")
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
        limit = optional(request, "limit", COST_RECEIPT_PAGE)
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

    async def ReextractVersion(self, request: pipeline_pb2.ReextractVersionRequest,
                               context: grpc.aio.ServicerContext) -> pipeline_pb2.ReextractVersionResponse:
        caller = require_caller()
        generation = await self.queue.reextract(uuid.UUID(request.version_id), caller.space_id)
        if generation is None:
            raise Conflict("the version has no finished extraction to redo (unknown, deleted or still processing)",
                           reason="NOTHING_TO_REEXTRACT")
        return pipeline_pb2.ReextractVersionResponse(version_id=request.version_id, generation=generation)

    async def ReembedSpace(self, request: pipeline_pb2.ReembedSpaceRequest,
                           context: grpc.aio.ServicerContext) -> pipeline_pb2.ReembedSpaceResponse:
        caller = require_caller()
        # The whole space is embedded again: the caller's own deadline bounds it, not the
        # server's default one (the contract says so).
        left = context.time_remaining()
        token = request_deadline.set(None if left is None else asyncio.get_running_loop().time() + left)
        try:
            async with self.db.acquire() as conn:
                done = await reembed_space(conn, caller.space_id, self.embeddings.embed, self.embeddings.model,
                                           batch=self.embed_batch)
        except ReembedRefused as exc:
            raise Conflict(str(exc), reason="REEMBED_BUSY") from None
        except EmbeddingUnavailable as exc:
            raise Unavailable(f"the embedding model failed: {exc}", reason="MODEL_PROVIDER_UNAVAILABLE",
                              retry_after_s=1) from None
        finally:
            request_deadline.reset(token)
        reply = pipeline_pb2.ReembedSpaceResponse(space_id=done["space_id"], model=done["model"],
                                                  reembedded=done["reembedded"])
        if done["previous_model"] is not None:
            reply.previous_model = done["previous_model"]
        if "dimension" in done:
            reply.dimension = done["dimension"]
        return reply

    async def ListMergeProposals(self, request: pipeline_pb2.ListMergeProposalsRequest,
                                 context: grpc.aio.ServicerContext) -> pipeline_pb2.ListMergeProposalsResponse:
        caller = require_caller()
        status = MERGE_STATUS_NAME[request.status] if request.HasField("status") else None
        rows = await merges.list_proposals(self.db, caller.space_id, status=status,
                                           limit=optional(request, "limit", MERGE_PAGE))
        reply = pipeline_pb2.ListMergeProposalsResponse()
        for r in rows:
            item = reply.proposals.add(proposal_id=str(r["proposal_id"]), survivor_id=str(r["survivor_id"]),
                                       survivor_name=r["survivor_name"], absorbed_id=str(r["absorbed_id"]),
                                       absorbed_name=r["absorbed_name"], score=float(r["score"]),
                                       status=MERGE_STATUS[r["status"]], created_at=timestamp(r["created_at"]))
            for name in ("applied_at", "reverted_at"):
                if r[name] is not None:
                    getattr(item, name).CopyFrom(timestamp(r[name]))
        return reply

    async def _merge_change(self, raw_id: str, change: Any, what: str) -> pipeline_pb2.MergeChange:
        caller = require_caller()
        proposal = uuid.UUID(raw_id)
        try:
            done = await self.db.unit_of_work(lambda conn: change(conn, proposal, caller.space_id), what=what)
        except merges.MergeRefused as refused:
            raise _merge_refusal(refused) from None
        return _merge_change(done)

    async def ApplyMerge(self, request: pipeline_pb2.ApplyMergeRequest,
                         context: grpc.aio.ServicerContext) -> pipeline_pb2.ApplyMergeResponse:
        change = await self._merge_change(request.proposal_id, merges.apply, "apply a merge")
        return pipeline_pb2.ApplyMergeResponse(change=change)

    async def RevertMerge(self, request: pipeline_pb2.RevertMergeRequest,
                          context: grpc.aio.ServicerContext) -> pipeline_pb2.RevertMergeResponse:
        change = await self._merge_change(request.proposal_id, merges.revert, "revert a merge")
        return pipeline_pb2.RevertMergeResponse(change=change)
