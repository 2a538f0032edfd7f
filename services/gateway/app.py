"""The HTTP face: RememberStack's JSON API served by transcoding to the gRPC services.

Every annotated RPC is served by the generic transcoder; the only hand-written
handler is ``POST /ingest``, whose raw byte body becomes the client stream of
``IngestService.Upload`` (HTTP cannot express that generically).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry import context as otel_context
from opentelemetry import trace
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from services.gateway.frontdoor import HttpFrontDoor, send_stream
from services.gateway.transcoder import (
    DecodeError,
    Match,
    Problem,
    Route,
    Router,
    build_request,
    decode_text_message,
    encode_response,
)
from services.platform import telemetry

JSON = "application/json"
HOP_HEADERS = ("authorization",)
# Attribution travels in headers only (kept out of access logs); the size comes from
# Content-Length. A query parameter cannot set either.
_HEADER_ONLY_OPTIONS = ("principal_kind", "principal_ref", "expected_size")
_UPLOAD_SLICE = 256 * 1024


def json_response(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        status_code=status,
        media_type=JSON,
        headers=dict(headers or {}),
    )


def detail(status: int, value: Any, headers: Mapping[str, str] | None = None) -> Response:
    return json_response(status, {"detail": value}, headers)


_DEFAULT_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: 422,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.UNIMPLEMENTED: 501,
}


def _rich_status(error: grpc.aio.AioRpcError) -> status_pb2.Status | None:
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None


def error_response(route: Route | None, error: grpc.aio.AioRpcError) -> Response:
    """gRPC status → RememberStack HTTP status and ``detail`` body."""
    rich = _rich_status(error)
    info: error_details_pb2.ErrorInfo | None = None
    bad: error_details_pb2.BadRequest | None = None
    headers: dict[str, str] = {}
    for item in rich.details if rich else ():
        if item.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            item.Unpack(info)
        elif item.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            item.Unpack(bad)
        elif item.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            item.Unpack(retry)
            headers["Retry-After"] = str(max(1, retry.retry_delay.seconds))
    if bad is not None:
        items = []
        for v in bad.field_violations:
            extra = json.loads(v.localized_message.message or "{}") if v.localized_message.locale == "json" else {}
            loc = route.loc_for(v.field) if route else ("body", v.field)
            items.append(Problem(v.reason or "value_error", loc, v.description, extra.get("input"),
                                 extra.get("ctx")).as_json())
        status = int(info.metadata.get("http_status", "422")) if info else 422
        return detail(status, items, headers)
    if info is not None and "http_status" in info.metadata:
        body = json.loads(info.metadata["detail"]) if "detail" in info.metadata else error.details()
        return detail(int(info.metadata["http_status"]), body, headers)
    code = error.code()
    status = _DEFAULT_HTTP.get(code, 500)
    if status == 500:
        telemetry.access_log("upstream_error", code=code.name, details=error.details(),
                             method=route.full_method if route else None)
        return detail(500, "Internal Server Error")
    if code == grpc.StatusCode.UNAVAILABLE:
        return detail(503, "service unavailable")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return detail(504, "the request took too long")
    return detail(status, error.details() or code.name.lower(), headers)


class Upstreams:
    """One channel per service, with trace context and the caller's credential forwarded."""

    def __init__(self, addresses: Mapping[str, str], *, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._channels = {
            name: grpc.aio.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)])
            for name, addr in addresses.items()
        }

    def channel_for(self, service_full_name: str) -> grpc.aio.Channel | None:
        """The channel of the service that serves this contract service (None: not deployed)."""
        key = service_full_name.split(".")[1]  # testament.<pkg>.v1.Service
        if key in self._channels:
            return self._channels[key]
        if key == "common":  # DeploymentService is served by every process: use any
            for name in ("ingest", "retrieval", "queryspace", "graph", "pipeline"):
                if name in self._channels:
                    return self._channels[name]
        return None

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


def _metadata(request: Request) -> list[tuple[str, str]]:
    pairs = [(h, request.headers[h]) for h in HOP_HEADERS if h in request.headers]
    pairs.extend(telemetry.inject())
    return pairs


class Gateway:
    """ASGI application."""

    def __init__(self, router: Router, upstreams: Upstreams, *, body_max_bytes: int | None,
                 upload_deadline_s: float = 3600.0, front_door: HttpFrontDoor | None = None,
                 openapi: Mapping[str, Any] | None = None) -> None:
        self.front_door = front_door
        self._openapi = json.dumps(openapi, separators=(",", ":")).encode() if openapi is not None else None
        self.router = router
        self.upstreams = upstreams
        self.body_max_bytes = body_max_bytes
        self.upload_deadline_s = upload_deadline_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.upstreams.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        parent = telemetry.extract(dict(request.headers))
        token = otel_context.attach(parent)
        try:
            with telemetry.tracer().start_as_current_span(
                f"{request.method} {request.url.path}", kind=trace.SpanKind.SERVER
            ):
                response = await self.dispatch(request)
                trace_id = telemetry.current_trace_id()
                if trace_id:
                    response.headers["x-trace-id"] = trace_id
        finally:
            otel_context.detach(token)
        await response(scope, receive, send)

    async def dispatch(self, request: Request) -> Response:
        spoken = self.front_door.accepts(request) if self.front_door else None
        if spoken is not None:
            assert self.front_door is not None
            return await self.front_door.serve(request, *spoken)
        if self._openapi is not None and request.url.path == "/openapi.json" and request.method == "GET":
            return Response(self._openapi, media_type=JSON)
        found = self.router.match(request.method, request.url.path)
        if found is None:
            return detail(404, "Not Found")
        if found == "method_not_allowed":
            return detail(405, "Method Not Allowed")
        assert isinstance(found, Match)
        if found.route.method.client_streaming:
            return await self.upload(request, found)
        return await self.unary(request, found)

    async def unary(self, request: Request, match: Match) -> Response:
        route = match.route
        raw = await request.body()
        body: Any = None
        has_body = bool(raw.strip())
        if has_body:
            try:
                body = json.loads(raw)
            except ValueError as exc:
                return detail(422, [Problem("json_invalid", ("body", exc.pos if hasattr(exc, "pos") else 0),
                                            "JSON decode error", {}, {"error": str(exc)}).as_json()])
        query = {key: request.query_params.getlist(key) for key in request.query_params}
        try:
            message = build_request(match, query, body, has_body=has_body)
        except DecodeError as exc:
            return detail(422, [p.as_json() for p in exc.problems])
        return await self._call(route, message, request)

    async def _call(self, route: Route, message: Message, request: Request) -> Response:
        channel = self.upstreams.channel_for(route.service.full_name)
        if channel is None:
            return detail(503, "service unavailable")
        call = channel.unary_unary(
            route.full_method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=route.response_class().FromString,
        )
        try:
            response = await call(message, metadata=_metadata(request), timeout=self.upstreams.deadline_s)
        except grpc.aio.AioRpcError as error:
            return error_response(route, error)
        return json_response(200, encode_response(route, response))

    async def upload(self, request: Request, match: Match) -> Response:
        """POST /ingest: query string → UploadOptions, headers → attribution, body → chunks."""
        route = match.route
        request_cls = route.request_class()
        options = request_cls().options.__class__()
        query = {key: request.query_params.getlist(key) for key in request.query_params
                 if key not in _HEADER_ONLY_OPTIONS}
        try:
            decode_text_message(options, query, ("query",))
        except DecodeError as exc:
            return detail(422, [p.as_json() for p in exc.problems])
        for header, name in (("x-ingest-principal-kind", "principal_kind"),
                             ("x-ingest-principal-ref", "principal_ref")):
            if header in request.headers:
                setattr(options, name, request.headers[header])
        length = request.headers.get("content-length")
        if self.body_max_bytes is not None:
            if length is None:
                return detail(411, "length_required")
            if int(length) > self.body_max_bytes:
                return detail(413, "body_too_large")
        if length is not None:
            options.expected_size = int(length)

        async def stream() -> AsyncIterator[Message]:
            yield request_cls(options=options)
            async for piece in request.stream():
                for start in range(0, len(piece), _UPLOAD_SLICE):
                    part = piece[start:start + _UPLOAD_SLICE]
                    if part:
                        yield request_cls(chunk=part)

        channel = self.upstreams.channel_for(route.service.full_name)
        if channel is None:
            return detail(503, "service unavailable")
        method = channel.stream_unary(
            route.full_method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=route.response_class().FromString,
        )
        try:
            response = await send_stream(method, stream(), metadata=_metadata(request),
                                         timeout=self.upload_deadline_s)
        except grpc.aio.AioRpcError as error:
            return error_response(route, error)
        return json_response(200, encode_response(route, response))
