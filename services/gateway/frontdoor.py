"""One front door: every RPC of every service at the gateway's two addresses.

- Native gRPC (HTTP/2) on the gateway's gRPC port: a generic proxy that passes each
  call's bytes through to the owning service, unary and streaming alike.
- On the HTTP port, at ``POST /<package>.<Service>/<Method>``: the Connect protocol
  (unary and streaming, JSON and binary) and gRPC-Web (binary and text), so browsers
  and HTTP/1.1 clients reach every RPC, streams included.

Calls are routed by method name to the service that owns it (the contract is the one
list of methods); the caller's credential, trace context and deadline go along. The
services still authenticate and authorise every call themselves.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from services.gateway.bodies import BodyTimeout, BodyTooLarge, read_body
from services.platform import contract, telemetry
from services.platform.envelopes import COMPRESSED, END_STREAM, ENVELOPE, TRAILER, envelope

# --- the method table -------------------------------------------------------------------


@dataclass(frozen=True)
class Rpc:
    path: str  # "/testament.ingest.v1.IngestService/Upload"
    service: str  # "testament.ingest.v1.IngestService"
    method: MethodDescriptor

    @property
    def client_streaming(self) -> bool:
        return bool(self.method.client_streaming)

    @property
    def server_streaming(self) -> bool:
        return bool(self.method.server_streaming)

    def request_class(self) -> type[Message]:
        return message_factory.GetMessageClass(self.method.input_type)

    def response_class(self) -> type[Message]:
        return message_factory.GetMessageClass(self.method.output_type)


def rpc_table() -> dict[str, Rpc]:
    """Every method of every service in the contract, by its gRPC path."""
    table: dict[str, Rpc] = {}
    for full_name in contract.SERVICE_FULL_NAMES.values():
        for method in contract.service(full_name).methods:
            path = f"/{full_name}/{method.name}"
            table[path] = Rpc(path, full_name, method)
    return table


ChannelFor = Callable[[str], grpc.aio.Channel | None]

# Metadata that belongs to one hop and is never passed on.
_HOP_ONLY = re.compile(r"^(:|grpc-|content-type$|te$|user-agent$|host$|connection$|content-length$)")


def forwardable(pairs: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [(k.lower(), v) for k, v in pairs if not _HOP_ONLY.match(k.lower())]


# Client streams whose service sends initial metadata once the first message is accepted
# (services/ingest/api.py UPLOAD_ACCEPTED): the writer waits for it before the rest.
ANNOUNCE_ACCEPTANCE = frozenset({"/testament.ingest.v1.IngestService/Upload"})
ACCEPTED_KEY = "x-testament-upload-accepted"


async def send_stream(method: grpc.aio.StreamUnaryMultiCallable, messages: AsyncIterator[Any], *,
                      path: str, **kw: Any) -> Any:
    """A client-streaming call whose refusal arrives as the server's own status.

    Handing grpc an iterator races its writer against the server: when the service
    refuses the first message and ends the call while bytes are still being written,
    the client sees INTERNAL "Internal error from Core" instead of the refusal. Writing
    ourselves, a failed write just means the call has ended: its status is then read.
    """
    call = method(**kw)
    try:
        first = True
        async for message in messages:
            if call.done():
                break
            await call.write(message)
            if first and path in ANNOUNCE_ACCEPTANCE:
                # A service that validates the first message (an upload's options) answers
                # with initial metadata once it wants more, or ends the call: wait for either.
                first = False
                announced = dict(await call.initial_metadata() or ())
                if ACCEPTED_KEY not in announced:
                    break  # refused: its status is the answer
        if not call.done():
            await call.done_writing()
    except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
        pass  # the call ended while we wrote: its status says why
    except BaseException:
        call.cancel()
        raise
    return await call


# --- native gRPC ------------------------------------------------------------------------


class GrpcProxy(grpc.GenericRpcHandler):
    """Serves every contract method on the gateway's gRPC port by passing bytes through."""

    def __init__(self, table: Mapping[str, Rpc], channel_for: ChannelFor, *, default_deadline_s: float) -> None:
        self._table = table
        self._channel_for = channel_for
        self._default_deadline_s = default_deadline_s

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        rpc = self._table.get(handler_call_details.method)  # type: ignore[attr-defined]
        if rpc is None:
            return None  # UNIMPLEMENTED, as for any unknown method
        path = rpc.path

        def upstream(context: grpc.aio.ServicerContext) -> tuple[grpc.aio.Channel, dict[str, Any]]:
            channel = self._channel_for(rpc.service)
            if channel is None:
                raise _Unavailable(rpc.service)
            left = context.time_remaining()
            return channel, {"metadata": forwardable(context.invocation_metadata() or ()),
                             "timeout": left if left is not None else self._default_deadline_s}

        async def relay_error(context: grpc.aio.ServicerContext, error: Exception) -> None:
            if isinstance(error, _Unavailable):
                await context.abort(grpc.StatusCode.UNAVAILABLE, f"{error.args[0]} is not deployed")
            assert isinstance(error, grpc.aio.AioRpcError)
            await context.abort(error.code(), error.details() or "", tuple(error.trailing_metadata() or ()))

        if not rpc.client_streaming and not rpc.server_streaming:
            async def unary_unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                try:
                    channel, kw = upstream(context)
                    return await channel.unary_unary(path)(request, **kw)
                except (grpc.aio.AioRpcError, _Unavailable) as error:
                    await relay_error(context, error)
                    raise AssertionError("unreachable") from None

            return grpc.unary_unary_rpc_method_handler(unary_unary)
        if not rpc.client_streaming:
            async def unary_stream(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
                try:
                    channel, kw = upstream(context)
                    async for item in channel.unary_stream(path)(request, **kw):
                        yield item
                except (grpc.aio.AioRpcError, _Unavailable) as error:
                    await relay_error(context, error)

            return grpc.unary_stream_rpc_method_handler(unary_stream)
        if not rpc.server_streaming:
            async def stream_unary(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
                try:
                    channel, kw = upstream(context)
                    return await send_stream(channel.stream_unary(path), requests, path=path, **kw)
                except (grpc.aio.AioRpcError, _Unavailable) as error:
                    await relay_error(context, error)
                    raise AssertionError("unreachable") from None

            return grpc.stream_unary_rpc_method_handler(stream_unary)

        async def stream_stream(requests: AsyncIterator[bytes],
                                context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            try:
                channel, kw = upstream(context)
                async for item in channel.stream_stream(path)(requests, **kw):
                    yield item
            except (grpc.aio.AioRpcError, _Unavailable) as error:
                await relay_error(context, error)

        return grpc.stream_stream_rpc_method_handler(stream_stream)


class _Unavailable(Exception):
    pass


# --- Connect and gRPC-Web over HTTP -------------------------------------------------------

# gRPC status -> Connect code name and HTTP status (the Connect protocol's table).
_CONNECT = {
    grpc.StatusCode.CANCELLED: ("canceled", 499),
    grpc.StatusCode.UNKNOWN: ("unknown", 500),
    grpc.StatusCode.INVALID_ARGUMENT: ("invalid_argument", 400),
    grpc.StatusCode.DEADLINE_EXCEEDED: ("deadline_exceeded", 504),
    grpc.StatusCode.NOT_FOUND: ("not_found", 404),
    grpc.StatusCode.ALREADY_EXISTS: ("already_exists", 409),
    grpc.StatusCode.PERMISSION_DENIED: ("permission_denied", 403),
    grpc.StatusCode.RESOURCE_EXHAUSTED: ("resource_exhausted", 429),
    grpc.StatusCode.FAILED_PRECONDITION: ("failed_precondition", 400),
    grpc.StatusCode.ABORTED: ("aborted", 409),
    grpc.StatusCode.OUT_OF_RANGE: ("out_of_range", 400),
    grpc.StatusCode.UNIMPLEMENTED: ("unimplemented", 501),
    grpc.StatusCode.INTERNAL: ("internal", 500),
    grpc.StatusCode.UNAVAILABLE: ("unavailable", 503),
    grpc.StatusCode.DATA_LOSS: ("data_loss", 500),
    grpc.StatusCode.UNAUTHENTICATED: ("unauthenticated", 401),
}

# One message at most this large in either direction (as the gRPC channels allow).
MAX_MESSAGE_BYTES = 64 << 20


@dataclass(frozen=True)
class Wire:
    """How one HTTP request speaks: protocol (connect / grpc-web), codec, framing."""

    protocol: str  # "connect" | "grpc-web"
    codec: str  # "json" | "proto"
    enveloped: bool  # Connect streaming and every gRPC-Web call frame their messages
    text: bool = False  # grpc-web-text: base64 bodies
    content_type: str = ""


def wire_of(content_type: str, rpc: Rpc) -> Wire | None:
    """The protocol a request's content type names, or None (then it is not ours)."""
    ctype = content_type.split(";")[0].strip().lower()
    streaming = rpc.client_streaming or rpc.server_streaming
    if ctype in ("application/json", "application/proto") and not streaming:
        return Wire("connect", ctype.split("/")[1], False, content_type=ctype)
    if ctype in ("application/connect+json", "application/connect+proto"):
        return Wire("connect", ctype.split("+")[1], True, content_type=ctype)
    if ctype.startswith("application/grpc-web"):
        base, _, codec = ctype.partition("+")
        if base not in ("application/grpc-web", "application/grpc-web-text") or codec not in ("", "proto", "json"):
            return None
        return Wire("grpc-web", codec or "proto", True, text=base.endswith("-text"), content_type=ctype)
    return None


class ProtocolError(Exception):
    """The request itself is malformed (bad framing, bad message, unsupported feature)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def frames(body: bytes) -> list[tuple[int, bytes]]:
    """Split an enveloped body into (flags, payload)."""
    out, at = [], 0
    while at < len(body):
        if len(body) - at < ENVELOPE.size:
            raise ProtocolError(grpc.StatusCode.INVALID_ARGUMENT, "truncated message envelope")
        flags, size = ENVELOPE.unpack_from(body, at)
        at += ENVELOPE.size
        if size > MAX_MESSAGE_BYTES or at + size > len(body):
            raise ProtocolError(grpc.StatusCode.INVALID_ARGUMENT, "truncated or oversized message")
        if flags & COMPRESSED:
            raise ProtocolError(grpc.StatusCode.UNIMPLEMENTED, "compressed messages are not supported")
        out.append((flags, body[at:at + size]))
        at += size
    return out


def _unbase64(raw: bytes) -> bytes:
    """grpc-web-text bodies: one or more padded base64 chunks, concatenated."""
    try:
        return b"".join(base64.b64decode(seg) for seg in re.findall(rb"[^=\s]+=*", raw))
    except ValueError:
        raise ProtocolError(grpc.StatusCode.INVALID_ARGUMENT, "the body is not base64") from None


def decode_message(cls: type[Message], payload: bytes, codec: str) -> Message:
    message = cls()
    try:
        if codec == "json":
            json_format.Parse(payload.decode("utf-8") if payload else "{}", message)
        else:
            message.ParseFromString(payload)
    except (json_format.ParseError, DecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(grpc.StatusCode.INVALID_ARGUMENT, f"the request message is malformed: {exc}") from None
    return message


def encode_message(message: Message, codec: str) -> bytes:
    if codec == "json":
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def timeout_of(request: Request, wire: Wire, default_s: float) -> float:
    """The caller's deadline: Connect-Timeout-Ms or grpc-timeout, capped by the default."""
    if wire.protocol == "connect":
        raw = request.headers.get("connect-timeout-ms")
        if raw is not None:
            if not raw.isdigit() or len(raw) > 10:
                raise ProtocolError(grpc.StatusCode.INVALID_ARGUMENT, "connect-timeout-ms must be an integer")
            return min(default_s, int(raw) / 1000)
        return default_s
    raw = request.headers.get("grpc-timeout")
    if raw is None:
        return default_s
    units = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
    if len(raw) < 2 or not raw[:-1].isdigit() or raw[-1] not in units:
        raise ProtocolError(grpc.StatusCode.INVALID_ARGUMENT, "grpc-timeout is malformed")
    return min(default_s, int(raw[:-1]) * units[raw[-1]])


def _details_of(trailing: Iterable[tuple[str, Any]] | None) -> list[dict[str, str]]:
    """google.rpc.Status details carried by an upstream error, in Connect's JSON form."""
    for key, value in trailing or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            return [{"type": d.type_url.rsplit("/", 1)[-1],
                     "value": base64.b64encode(d.value).decode().rstrip("=")} for d in status.details]
    return []


@dataclass(frozen=True)
class Failure:
    code: grpc.StatusCode
    message: str
    trailing: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, error: grpc.aio.AioRpcError) -> Failure:
        return cls(error.code(), error.details() or "", tuple(error.trailing_metadata() or ()))

    def connect_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": _CONNECT.get(self.code, ("unknown", 500))[0], "message": self.message}
        details = _details_of(self.trailing)
        if details:
            body["details"] = details
        return body

    def grpc_web_trailer(self) -> bytes:
        lines = [f"grpc-status: {self.code.value[0]}", f"grpc-message: {_percent(self.message)}"]
        for key, value in self.trailing:
            if key == "grpc-status-details-bin" and isinstance(value, bytes):
                lines.append(f"grpc-status-details-bin: {base64.b64encode(value).decode().rstrip('=')}")
        return ("\r\n".join(lines) + "\r\n").encode()


_OK_TRAILER = b"grpc-status: 0\r\ngrpc-message: \r\n"


def _percent(text: str) -> str:
    return "".join(c if 0x20 <= ord(c) < 0x7F and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
                   for c in text)


class HttpFrontDoor:
    """Connect and gRPC-Web for every contract method, beside the RememberStack routes."""

    def __init__(self, table: Mapping[str, Rpc], channel_for: ChannelFor, *, default_deadline_s: float,
                 hop_headers: Iterable[str], body_max_bytes: int = MAX_MESSAGE_BYTES,
                 body_timeout_s: float = 30.0) -> None:
        self._table = table
        self._body_max_bytes = body_max_bytes
        self._body_timeout_s = body_timeout_s
        self._channel_for = channel_for
        self._default_deadline_s = default_deadline_s
        self._hop_headers = tuple(hop_headers)

    def accepts(self, request: Request) -> tuple[Rpc, Wire] | None:
        if request.method != "POST":
            return None
        rpc = self._table.get(request.url.path)
        if rpc is None:
            return None
        wire = wire_of(request.headers.get("content-type", ""), rpc)
        return (rpc, wire) if wire is not None else None

    def _metadata(self, request: Request) -> list[tuple[str, str]]:
        pairs = [(h, request.headers[h]) for h in self._hop_headers if h in request.headers]
        pairs.extend(telemetry.inject())
        return pairs

    async def serve(self, request: Request, rpc: Rpc, wire: Wire) -> Response:
        try:
            timeout = timeout_of(request, wire, self._default_deadline_s)
            try:
                raw = await read_body(request, self._body_max_bytes, self._body_timeout_s)
            except BodyTooLarge:
                raise ProtocolError(grpc.StatusCode.RESOURCE_EXHAUSTED, "the request is too large") from None
            except BodyTimeout:
                raise ProtocolError(grpc.StatusCode.DEADLINE_EXCEEDED, "the request body stopped arriving") from None
            if wire.text:
                raw = _unbase64(raw)
            if wire.enveloped:
                payloads = [p for flags, p in frames(raw) if not flags & (END_STREAM | TRAILER)]
            else:
                payloads = [raw]
            if not rpc.client_streaming and len(payloads) != 1:
                raise ProtocolError(grpc.StatusCode.INVALID_ARGUMENT, "exactly one request message is expected")
            messages = [decode_message(rpc.request_class(), p, wire.codec) for p in payloads]
        except ProtocolError as exc:
            return self._fail_early(wire, Failure(exc.code, str(exc)))
        channel = self._channel_for(rpc.service)
        if channel is None:
            return self._fail_early(wire, Failure(grpc.StatusCode.UNAVAILABLE, f"{rpc.service} is not deployed"))
        serialize = {"request_serializer": lambda m: m.SerializeToString(),
                     "response_deserializer": rpc.response_class().FromString}
        kw = {"metadata": self._metadata(request), "timeout": timeout}
        if not rpc.server_streaming:
            try:
                if rpc.client_streaming:
                    async def requests() -> AsyncIterator[Message]:
                        for m in messages:
                            yield m
                    reply = await send_stream(channel.stream_unary(rpc.path, **serialize), requests(), path=rpc.path,
                                              **kw)
                else:
                    reply = await channel.unary_unary(rpc.path, **serialize)(messages[0], **kw)
            except grpc.aio.AioRpcError as error:
                return self._fail_early(wire, Failure.of(error))
            return self._single(wire, reply)
        call = channel.unary_stream(rpc.path, **serialize)(messages[0], **kw)
        return StreamingResponse(self._stream(wire, call), status_code=200, media_type=wire.content_type)

    def refuse(self, wire: Wire, code: grpc.StatusCode, message: str) -> Response:
        """A refusal made at the door, in the protocol the caller speaks."""
        return self._fail_early(wire, Failure(code, message))

    # --- responses ---------------------------------------------------------------

    def _body(self, wire: Wire, data: bytes) -> bytes:
        return base64.b64encode(data) if wire.text else data

    def _single(self, wire: Wire, reply: Message) -> Response:
        payload = encode_message(reply, wire.codec)
        if wire.protocol == "connect" and not wire.enveloped:
            return Response(payload, status_code=200, media_type=wire.content_type)
        if wire.protocol == "connect":
            data = envelope(payload) + envelope(b"{}", END_STREAM)
        else:
            data = envelope(payload) + envelope(_OK_TRAILER, TRAILER)
        return Response(self._body(wire, data), status_code=200, media_type=wire.content_type)

    def _fail_early(self, wire: Wire, failure: Failure) -> Response:
        if wire.protocol == "connect" and not wire.enveloped:
            status = _CONNECT.get(failure.code, ("unknown", 500))[1]
            return Response(json.dumps(failure.connect_json()), status_code=status, media_type="application/json")
        return Response(self._body(wire, self._end(wire, failure)), status_code=200, media_type=wire.content_type)

    def _end(self, wire: Wire, failure: Failure | None) -> bytes:
        if wire.protocol == "connect":
            end: dict[str, Any] = {} if failure is None else {"error": failure.connect_json()}
            return envelope(json.dumps(end).encode(), END_STREAM)
        return envelope(_OK_TRAILER if failure is None else failure.grpc_web_trailer(), TRAILER)

    async def _stream(self, wire: Wire, call: Any) -> AsyncIterator[bytes]:
        failure: Failure | None = None
        try:
            async for reply in call:
                yield self._body(wire, envelope(encode_message(reply, wire.codec)))
        except grpc.aio.AioRpcError as error:
            failure = Failure.of(error)
        finally:
            call.cancel()  # the client went away, or the stream ended: free the upstream call
        yield self._body(wire, self._end(wire, failure))
