"""The HTTP face: RememberStack's JSON API served by transcoding to the gRPC services.

Every annotated RPC is served by the generic transcoder; the only hand-written
handler is ``POST /ingest``, whose raw byte body becomes the client stream of
``IngestService.Upload`` (HTTP cannot express that generically).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry import context as otel_context
from opentelemetry import trace
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from testament.common.v1 import deployment_pb2

from services.gateway.admission import CORS_EXPOSE, CORS_HEADERS, CORS_METHODS, Admission, Limits
from services.gateway.bodies import BodyTimeout, BodyTooLarge, idle_limited, read_body
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
from services.platform.auth import Scope as CredentialScope
from services.platform.auth import allows
from services.platform.channels import service_channel
from services.platform.contract import method_scope
from services.platform.errors import SCOPE_TOO_NARROW

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
    if code == grpc.StatusCode.UNAVAILABLE:  # e.g. the service is restarting: worth asking again soon
        return detail(503, "service unavailable", {"Retry-After": "1", **headers})
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return detail(504, "the request took too long")
    return detail(status, error.details() or code.name.lower(), headers)


class Upstreams:
    """One channel per service, with trace context and the caller's credential forwarded."""

    def __init__(self, addresses: Mapping[str, str], *, deadline_s: float) -> None:
        self.deadline_s = deadline_s
        self._channels = {
            name: service_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)])
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


_DEPLOYMENT = "testament.common.v1.DeploymentService"
_SCOPES = {s.value for s in CredentialScope}


async def authenticate(channel: grpc.aio.Channel, metadata: list[tuple[str, str]],
                       *, timeout_s: float) -> deployment_pb2.AuthenticateResponse:
    """DeploymentService.Authenticate: who a credential names (raises AioRpcError)."""
    call = channel.unary_unary(f"/{_DEPLOYMENT}/Authenticate", request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=deployment_pb2.AuthenticateResponse.FromString)
    return await call(deployment_pb2.AuthenticateRequest(), metadata=metadata, timeout=timeout_s)


@dataclass(frozen=True)
class Identity:
    space: str
    key: str | None  # the credential id; None on an open stack
    scope: CredentialScope | None = None  # None when the services could not be asked

    def may(self, full_method: str) -> bool:
        """Whether the credential's scope covers the method's contract scope (checked
        before decoding, so a refused caller gets 403 whatever it sent)."""
        return self.scope is None or allows(self.scope, method_scope(full_method))


@dataclass(frozen=True)
class DoorPolicy:
    limits: Limits = Limits()
    max_in_flight: int = 1024
    header_max_bytes: int = 16384
    body_max_bytes: int = 16 << 20
    body_timeout_s: float = 30.0
    cors_origins: frozenset[str] = frozenset()


def _cors(response: Response, origin: str, *, preflight: bool) -> None:
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Vary"] = "Origin"
    if preflight:
        response.headers["Access-Control-Allow-Methods"] = CORS_METHODS
        response.headers["Access-Control-Allow-Headers"] = CORS_HEADERS
        response.headers["Access-Control-Max-Age"] = "600"
    else:
        response.headers["Access-Control-Expose-Headers"] = CORS_EXPOSE


def _metadata(request: Request) -> list[tuple[str, str]]:
    pairs = [(h, request.headers[h]) for h in HOP_HEADERS if h in request.headers]
    pairs.extend(telemetry.inject())
    return pairs


class Gateway:
    """ASGI application."""

    def __init__(self, router: Router, upstreams: Upstreams, *, body_max_bytes: int | None,
                 upload_deadline_s: float = 3600.0, front_door: HttpFrontDoor | None = None,
                 openapi: Mapping[str, Any] | None = None, door: DoorPolicy | None = None) -> None:
        self.front_door = front_door
        self._openapi = json.dumps(openapi, separators=(",", ":")).encode() if openapi is not None else None
        self.router = router
        self.upstreams = upstreams
        self.body_max_bytes = body_max_bytes
        self.upload_deadline_s = upload_deadline_s
        self.door = door or DoorPolicy()
        self.admission = Admission(self.door.limits)
        self.in_flight = 0
        self.idle = asyncio.Event()  # set while nothing is in flight
        self.idle.set()
        self.draining = False
        self._identities: dict[str | None, tuple[float, Identity]] = {}

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
        if self.draining:
            # Shutting down: nothing new is admitted, and health says so.
            await detail(503, {"code": "draining", "message": "the gateway is shutting down"},
                         {"Retry-After": "1", "Connection": "close"})(scope, receive, send)
            return
        if self.in_flight >= self.door.max_in_flight and scope["path"] != "/healthz":
            # Shed before reading anything more of the request.
            await detail(503, {"code": "overloaded", "message": "the gateway is at its in-flight ceiling"},
                         {"Retry-After": "1"})(scope, receive, send)
            return
        if sum(len(k) + len(v) for k, v in scope["headers"]) > self.door.header_max_bytes:
            await detail(431, "request_header_fields_too_large")(scope, receive, send)
            return
        self.in_flight += 1
        self.idle.clear()
        try:
            await self._serve(Request(scope, receive), scope, receive, send)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self.idle.set()

    async def _serve(self, request: Request, scope: Scope, receive: Receive, send: Send) -> None:
        origin = request.headers.get("origin")
        allowed = origin is not None and origin in self.door.cors_origins
        if request.method == "OPTIONS" and origin is not None and "access-control-request-method" in request.headers:
            response = Response(status_code=204)
            if allowed:
                _cors(response, origin, preflight=True)
            await response(scope, receive, send)
            return
        parent = telemetry.extract(dict(request.headers))
        token = otel_context.attach(parent)
        admitted: Identity | None = None
        try:
            with telemetry.tracer().start_as_current_span(
                f"{request.method} {request.url.path}", kind=trace.SpanKind.SERVER
            ):
                if request.url.path == "/healthz":
                    response = await self.dispatch(request, None)
                else:
                    who = await self._identify(request)
                    if isinstance(who, Response):
                        response = who
                    elif (refusal := self.admission.admit(who.space, who.key)) is not None:
                        response = detail(429, {"code": refusal.code, "message": refusal.message},
                                          {"Retry-After": str(refusal.retry_after_s)})
                    else:
                        admitted = who
                        response = await self.dispatch(request, who)
                trace_id = telemetry.current_trace_id()
                if trace_id:
                    response.headers["x-trace-id"] = trace_id
                if allowed:
                    assert origin is not None
                    _cors(response, origin, preflight=False)
            # A streamed response stays in flight (and admitted) until its last byte.
            await response(scope, receive, send)
        finally:
            otel_context.detach(token)
            if admitted is not None:
                self.admission.release(admitted.space, admitted.key)

    async def _identify(self, request: Request) -> Identity | Response:
        """Who is calling, asked of the services before routing (cached for a second), so
        an unknown path answers 401 before 404 and admission counts per key and space."""
        header = request.headers.get("authorization")
        now = asyncio.get_running_loop().time()
        cached = self._identities.get(header)
        if cached is not None and now - cached[0] < 1.0:
            return cached[1]
        channel = self.upstreams.channel_for(_DEPLOYMENT)
        if channel is None:
            return Identity("unknown", None)
        try:
            reply = await authenticate(channel, _metadata(request), timeout_s=5.0)
        except grpc.aio.AioRpcError as error:
            if error.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                return error_response(None, error)
            return Identity("unknown", None)  # the services check every call themselves
        identity = Identity(reply.space_id, reply.credential_id if reply.HasField("credential_id") else None,
                            CredentialScope(reply.scope) if reply.scope in _SCOPES else None)
        if len(self._identities) > 10_000:
            self._identities.clear()
        self._identities[header] = (now, identity)
        return identity

    async def dispatch(self, request: Request, who: Identity | None) -> Response:
        spoken = self.front_door.accepts(request) if self.front_door else None
        if spoken is not None:
            assert self.front_door is not None
            if who is not None and not who.may(spoken[0].path):
                return self.front_door.refuse(spoken[1], grpc.StatusCode.PERMISSION_DENIED, SCOPE_TOO_NARROW)
            return await self.front_door.serve(request, *spoken)
        if self._openapi is not None and request.url.path == "/openapi.json" and request.method == "GET":
            return Response(self._openapi, media_type=JSON)
        found = self.router.match(request.method, request.url.path)
        if found is None:
            return detail(404, "Not Found")
        if found == "method_not_allowed":
            return detail(405, "Method Not Allowed")
        assert isinstance(found, Match)
        if who is not None and not who.may(found.route.full_method):
            return detail(403, SCOPE_TOO_NARROW)
        if found.route.method.client_streaming:
            return await self.upload(request, found)
        return await self.unary(request, found)

    async def unary(self, request: Request, match: Match) -> Response:
        route = match.route
        try:
            raw = await read_body(request, self.door.body_max_bytes, self.door.body_timeout_s)
        except BodyTooLarge:
            return detail(413, "body_too_large")
        except BodyTimeout:
            return detail(408, "request_timeout")
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
        # Called with its fields, which types-protobuf's Message (from 7.35.1.20261122) no longer admits.
        request_cls = cast(Callable[..., Message], route.request_class())
        options = getattr(request_cls(), "options").__class__()  # noqa: B009 - the class is typed Message
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
            async for piece in idle_limited(request.stream(), self.door.body_timeout_s):
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
            response = await send_stream(method, stream(), path=route.full_method, metadata=_metadata(request),
                                         timeout=self.upload_deadline_s)
        except grpc.aio.AioRpcError as error:
            return error_response(route, error)
        except BodyTimeout:
            return detail(408, "request_timeout")
        return json_response(200, encode_response(route, response))
