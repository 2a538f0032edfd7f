"""QuerySpaceService servicer: converts messages, calls the use cases, converts results."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2
from testament.queryspace.v1 import queryspace_pb2 as pb
from testament.queryspace.v1 import queryspace_pb2_grpc

from services.platform.auth import require_caller
from services.platform.errors import FieldViolation, ValidationFailed
from services.platform.values import bounded_int, collect
from services.platform.wire import enum_value, optional, timestamp
from services.queryspace.app import QuerySpace, Request

_STATUS_NAMES = {v: k for k, v in pb.SavedQueryStatus.items()}


def _value(v: Any) -> struct_pb2.Value:
    return json_format.ParseDict(v, struct_pb2.Value())


def _list(values: list[Any]) -> struct_pb2.ListValue:
    out = struct_pb2.ListValue()
    out.extend(values)
    return out


def _set_ts(target: Any, name: str, value: dt.datetime | None) -> None:
    if value is not None:
        getattr(target, name).CopyFrom(timestamp(value))


def _parameters(values: Any) -> list[Any]:
    return [json_format.MessageToDict(v) for v in values]


def query_result(r: dict[str, Any]) -> pb.QueryResult:
    out = pb.QueryResult(
        contract=r["contract"], grade=r["grade"], request_id=r["request_id"], deployment_id=r["deployment_id"],
        surface_manifest_hash=r["surface_manifest_hash"], query_space_schema=r["query_space_schema"],
        query_hash=r["query_hash"], query_language=r["query_language"],
        referenced_views=r["referenced_views"], referenced_functions=r["referenced_functions"],
        source_grain_tags=r["source_grain_tags"], returned_row_count=r["returned_row_count"],
        returned_byte_count=r["returned_byte_count"], truncated=r["truncated"], exact_total_known=False,
        ordered_result=r["ordered_result"], empty_result=r["empty_result"], elapsed_ms=r["elapsed_ms"],
        termination_reason=enum_value(pb.QueryTerminationReason, r["termination_reason"]), warnings=r["warnings"],
    )
    if r["saved_query"] is not None:
        out.saved_query.CopyFrom(pb.SavedQueryRef(**r["saved_query"]))
    for c in r["columns"]:
        out.columns.add(name=c["name"], type=c["type"], nullable=True)
    for row in r["rows"]:
        out.rows.append(_list(row))
    limits = r["limits"]
    out.limits.CopyFrom(pb.ResultLimits(row_cap=limits["row_cap"], byte_cap=limits["byte_cap"],
                                        statement_timeout_ms=limits["statement_timeout_ms"],
                                        analytical_tier=limits["analytical_tier"]))
    if r["truncation_reason"] is not None:
        out.truncation_reason = enum_value(pb.QueryTruncationReason, r["truncation_reason"])
    if r["error_code"] is not None:
        out.error_code = enum_value(pb.QueryErrorCode, r["error_code"])
    if r["error_message"] is not None:
        out.error_message = r["error_message"]
    _set_ts(out, "execution_started_at", r["execution_started_at"])
    _set_ts(out, "evaluated_at", r["evaluated_at"])
    _set_ts(out, "pg_snapshot_at", r["pg_snapshot_at"])
    for s in r["semantic_invocations"]:
        item = out.semantic_invocations.add(function=s["function"], nominated=s["nominated"],
                                            confirmed=s["confirmed"])
        for name in ("dropped_stale", "dropped_filtered", "dropped_ambiguous", "dropped_absent",
                     "dropped_body_mismatch", "dropped_absent_current", "dropped_absent_projection",
                     "dropped_hash_mismatch"):
            setattr(item, name, s.get(name) or 0)
        for name in ("policy_generation", "embedder_generation", "generation", "termination_reason"):
            if s.get(name) is not None:
                setattr(item, name, s[name])
        _set_ts(item, "pg_confirmed_at", s.get("pg_confirmed_at"))
    for g in r["graph_invocations"]:
        graph = out.graph_invocations.add(
            ordinal=g["ordinal"], function=enum_value(pb.GraphFunction, g["function"]), truncated=g["truncated"],
            examined_edges=g["examined_edges"], returned_paths=g["returned_paths"],
            effective_depth=g["effective_depth"], effective_expansion_budget=g["effective_expansion_budget"],
            effective_frontier_budget=g["effective_frontier_budget"],
            effective_result_budget=g["effective_result_budget"],
            effective_time_budget_ms=g["effective_time_budget_ms"])
        if g.get("truncation_reason") is not None:
            graph.truncation_reason = enum_value(pb.GraphTruncationReason, g["truncation_reason"])
        for name in ("applied_valid_at", "applied_believed_at", "evaluated_at"):
            _set_ts(graph, name, g.get(name))
    return out


def _summary_fields(row: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "query_id": str(row["query_id"]), "namespace": row["namespace"], "name": row["name"],
        "version": row["version"], "status": enum_value(pb.SavedQueryStatus, row["status"]),
        "origin": enum_value(pb.SavedQueryOrigin, row["origin"]), "query_hash": row["query_hash"],
        "validated_surface_manifest_hash": row["validated_surface_manifest_hash"],
    }
    if row.get("description") is not None:
        fields["description"] = row["description"]
    if row.get("assurance") is not None:
        fields["assurance"] = enum_value(pb.SavedQueryAssurance, row["assurance"])
    return fields


def _status(request: pb.ListSavedQueriesRequest) -> str | None:
    if not request.HasField("status"):
        return None
    if request.status == pb.SAVED_QUERY_STATUS_UNSPECIFIED:
        raise ValidationFailed([FieldViolation("status", "Input should be 'draft', 'pending_revalidation', "
                                                         "'active', 'deprecated', 'disabled' or 'broken'",
                                               type="enum")])
    return _STATUS_NAMES[request.status].removeprefix("SAVED_QUERY_STATUS_").lower()


def _query_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ValidationFailed([FieldViolation("query_id", "Input should be a valid UUID", type="uuid_parsing",
                                               input=value)]) from None


EXPORT_BATCH_ROWS = 1000


def _at_least(name: str, value: int | None, low: int) -> int | None:
    """An optional integer that must be at least ``low``; absent stays absent, so the tier's
    own default applies."""
    return None if value is None else bounded_int(name, value, value, low, 2**31 - 1)


class QuerySpaceServicer(queryspace_pb2_grpc.QuerySpaceServiceServicer):
    def __init__(self, service: QuerySpace, exports: QuerySpace | None = None) -> None:
        self.service = service
        # The analytical tier (operator exports): its own limits and admission budgets.
        self.exports = exports or service

    async def RunSql(self, request: pb.RunSqlRequest, context: grpc.aio.ServicerContext) -> pb.RunSqlResponse:
        max_rows = _at_least("max_rows", optional(request, "max_rows"), 0)
        result = await self.service.run(require_caller(), Request(request.sql, _parameters(request.parameters),
                                                                  max_rows=max_rows))
        return pb.RunSqlResponse(result=query_result(result))

    async def ExplainSql(self, request: pb.ExplainSqlRequest,
                         context: grpc.aio.ServicerContext) -> pb.ExplainSqlResponse:
        result = await self.service.run(require_caller(), Request(request.sql, _parameters(request.parameters),
                                                                  explain=True))
        return pb.ExplainSqlResponse(result=query_result(result))

    async def DescribeQuerySpace(self, request: pb.DescribeQuerySpaceRequest,
                                 context: grpc.aio.ServicerContext) -> pb.DescribeQuerySpaceResponse:
        require_caller()
        d = self.service.describe(optional(request, "pattern"), bool(optional(request, "include_examples")))
        out = pb.DescribeQuerySpaceResponse(schema=d["schema"], schema_major=d["schema_major"],
                                            surface_manifest_hash=d["surface_manifest_hash"],
                                            functions=d["functions"])
        out.headline.CopyFrom(_value(d["headline"]))
        for name in ("retrieval_choices", "honesty_warnings", "worked_examples", "examples"):
            getattr(out, name).extend([_value(v) for v in d[name]])
        for v in d["views"]:
            view = out.views.add(name=v["name"], grain=v["grain"], row_key=v["row_key"], comment=v["comment"])
            for column in v["columns"]:
                view.columns.append(_list(column))
        out.limits.interactive.update(d["limits"]["interactive"])
        out.limits.analytical.update(d["limits"]["analytical"])
        out.core_operation_descriptors.CopyFrom(_value(d["core_operation_descriptors"]))
        out.function_signatures.CopyFrom(_value(d["function_signatures"]))
        g = d["sql_grammar"]
        out.sql_grammar.CopyFrom(pb.SqlGrammar(
            functions=g["functions"], operators=g["operators"], cast_types=g["cast_types"],
            statement_node_classes=g["statement_node_classes"], public_functions=g["public_functions"],
            srf_invocations_max_per_category=g["srf_invocations_max_per_category"],
            recursion_depth_max=g["recursion_depth_max"]))
        out.sql_grammar.srf_categories.CopyFrom(_value(g["srf_categories"]))
        return out

    async def SearchQuerySpace(self, request: pb.SearchQuerySpaceRequest,
                               context: grpc.aio.ServicerContext) -> pb.SearchQuerySpaceResponse:
        require_caller()
        hits = self.service.search(request.query, optional(request, "k"))  # k: 1-25, the contract's rule
        out = pb.SearchQuerySpaceResponse()
        for h in hits:
            out.hits.add(kind=enum_value(pb.QuerySpaceHitKind, h["kind"]), name=h["name"], score=h["score"],
                         purpose=h["purpose"], tags=h["tags"])
        return out

    async def ListSavedQueries(self, request: pb.ListSavedQueriesRequest,
                               context: grpc.aio.ServicerContext) -> pb.ListSavedQueriesResponse:
        rows = await self.service.list_saved(require_caller(), optional(request, "namespace"), _status(request))
        return pb.ListSavedQueriesResponse(saved_queries=[pb.SavedQuerySummary(**_summary_fields(r)) for r in rows])

    async def DescribeSavedQuery(self, request: pb.DescribeSavedQueryRequest,
                                 context: grpc.aio.ServicerContext) -> pb.DescribeSavedQueryResponse:
        row = await self.service.describe_saved(require_caller(), request.namespace, request.name,
                                                optional(request, "version"))
        out = pb.DescribeSavedQueryResponse(**_summary_fields(row), sql=row["sql"], query_space_major="memory_v1")
        for name in ("parameter_schema", "declared_result_schema", "declared_interpretation", "validation_report"):
            getattr(out, name).CopyFrom(_value(row[name] if row[name] is not None else {}))
        out.author_principal.CopyFrom(_value(row["author_principal"]))
        out.approver_principal.CopyFrom(_value(row["approver_principal"]))
        limits = out.default_limits
        if row["default_max_rows"] is not None:
            limits.max_rows = row["default_max_rows"]
        if row["default_statement_timeout_ms"] is not None:
            limits.statement_timeout_ms = row["default_statement_timeout_ms"]
        if row["default_max_bytes"] is not None:
            limits.max_bytes = row["default_max_bytes"]
        return out

    async def RunSavedQuery(self, request: pb.RunSavedQueryRequest,
                            context: grpc.aio.ServicerContext) -> pb.RunSavedQueryResponse:
        problems: list[FieldViolation] = []
        version = collect(problems, _at_least, "version", optional(request, "version"), 1)
        max_rows = collect(problems, _at_least, "max_rows", optional(request, "max_rows"), 0)
        if problems:
            raise ValidationFailed(problems)
        result = await self.service.run_saved(require_caller(), request.namespace, request.name, version,
                                              _parameters(request.parameters), max_rows)
        return pb.RunSavedQueryResponse(result=query_result(result))

    # --- operator face (no HTTP routes) ----------------------------------------------

    async def ExportSql(self, request: pb.ExportSqlRequest,
                        context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ExportSqlResponse]:
        max_rows = _at_least("max_rows", optional(request, "max_rows"), 0)
        result = await self.exports.run(require_caller(), Request(request.sql, _parameters(request.parameters),
                                                                  max_rows=max_rows))
        rows = result["rows"]
        if result["termination_reason"] == "completed":
            yield pb.ExportSqlResponse(header=query_result({**result, "rows": []}))
            for start in range(0, len(rows), EXPORT_BATCH_ROWS):
                yield pb.ExportSqlResponse(rows=pb.ExportRowBatch(
                    rows=[_list(r) for r in rows[start:start + EXPORT_BATCH_ROWS]]))
        yield pb.ExportSqlResponse(trailer=query_result({**result, "rows": []}))

    async def CreateSavedQuery(self, request: pb.CreateSavedQueryRequest,
                               context: grpc.aio.ServicerContext) -> pb.CreateSavedQueryResponse:
        caller = require_caller()
        row = await self.service.author(caller.space_id, request.namespace, request.name, request.sql,
                                        author=request.author_principal,
                                        description=optional(request, "description"),
                                        max_rows=optional(request, "max_rows"))
        return pb.CreateSavedQueryResponse(saved_query=pb.SavedQuerySummary(**_summary_fields(row)))

    async def ApproveSavedQuery(self, request: pb.ApproveSavedQueryRequest,
                                context: grpc.aio.ServicerContext) -> pb.ApproveSavedQueryResponse:
        caller = require_caller()
        row = await self.service.approve(_query_id(request.query_id), request.approver_principal,
                                         space=caller.space_id)
        return pb.ApproveSavedQueryResponse(saved_query=pb.SavedQuerySummary(**_summary_fields(row)))

    async def SetSavedQueryStatus(self, request: pb.SetSavedQueryStatusRequest,
                                  context: grpc.aio.ServicerContext) -> pb.SetSavedQueryStatusResponse:
        caller = require_caller()
        status = _STATUS_NAMES.get(request.status, "").removeprefix("SAVED_QUERY_STATUS_").lower()
        row = await self.service.set_status(_query_id(request.query_id), status, space=caller.space_id)
        return pb.SetSavedQueryStatusResponse(saved_query=pb.SavedQuerySummary(**_summary_fields(row)))
