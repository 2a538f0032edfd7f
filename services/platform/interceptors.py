"""Server interceptors shared by every service: telemetry, errors, deadlines, auth.

Each interceptor wraps the method handler's behaviour in an async context
manager, so one implementation serves unary and streaming RPCs alike. Order
(outermost first): telemetry → errors → deadline → auth → validation (services/platform/validation.py) → the servicer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import asyncpg
import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry import context as otel_context
from opentelemetry import trace

from services.platform import telemetry
from services.platform.auth import Authenticator, current_caller
from services.platform.contract import method_scope
from services.platform.db import DeadlineSpent, TransientConflict, request_deadline
from services.platform.errors import (
    Aborted,
    AlreadyExists,
    Code,
    DeadlineExceeded,
    FieldViolation,
    InvalidArgument,
    TestamentError,
    Unavailable,
    ValidationFailed,
)
from services.platform.objectstore import ObjectStoreUnavailable

ERROR_DOMAIN = "testament"

Around = Callable[[str, grpc.aio.ServicerContext], AbstractAsyncContextManager[None]]


def _wrap(handler: grpc.RpcMethodHandler, method: str, around: Around) -> grpc.RpcMethodHandler:
    if handler.request_streaming and handler.response_streaming:
        behavior, factory = handler.stream_stream, grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        behavior, factory = handler.stream_unary, grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        behavior, factory = handler.unary_stream, grpc.unary_stream_rpc_method_handler
    else:
        behavior, factory = handler.unary_unary, grpc.unary_unary_rpc_method_handler

    if handler.response_streaming:

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async with around(method, context):
                result = behavior(request, context)
                if inspect.isasyncgen(result):
                    async for item in result:
                        yield item
                else:  # a behaviour that writes with context.write()
                    await result

        new_behavior: Any = streaming
    else:

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            async with around(method, context):
                return await behavior(request, context)

        new_behavior = unary
    return factory(
        new_behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class _AroundInterceptor(grpc.aio.ServerInterceptor):
    def around(self, method: str, context: grpc.aio.ServicerContext) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return _wrap(handler, handler_call_details.method, self.around)


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


class TelemetryInterceptor(_AroundInterceptor):
    """A server span per RPC, child of the caller's W3C trace context; one access line."""

    def __init__(self, service_name: str, *, access_log: bool = True) -> None:
        self._service = service_name
        self._access_log = access_log

    @asynccontextmanager
    async def around(self, method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        parent = telemetry.extract(_metadata(context))
        token = otel_context.attach(parent)
        started = time.perf_counter()
        outcome = "OK"
        try:
            with telemetry.tracer().start_as_current_span(
                method, kind=trace.SpanKind.SERVER, attributes={"rpc.system": "grpc"}
            ):
                try:
                    yield
                except BaseException as exc:  # noqa: BLE001 - recorded, then re-raised
                    code = context.code() if hasattr(context, "code") else None
                    outcome = getattr(code, "name", None) or type(exc).__name__
                    raise
                finally:
                    if self._access_log and not method.startswith("/grpc."):
                        telemetry.access_log(
                            "rpc",
                            service=self._service,
                            method=method,
                            outcome=outcome,
                            duration_ms=round((time.perf_counter() - started) * 1000, 2),
                        )
        finally:
            otel_context.detach(token)


_CODE_TO_GRPC = {code: getattr(grpc.StatusCode, code.value) for code in Code}


def _status_for(exc: TestamentError) -> status_pb2.Status:
    grpc_code = _CODE_TO_GRPC[exc.code]
    info = error_details_pb2.ErrorInfo(
        reason=exc.reason,
        domain=ERROR_DOMAIN,
        metadata={"http_status": str(exc.http_status), "detail": json.dumps(exc.detail)},
    )
    details = [info]
    if exc.retry_after_s is not None:
        details.append(
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=int(exc.retry_after_s + 0.999))
            )
        )
    return _pack(grpc_code, exc.message, details)


def _pack(grpc_code: grpc.StatusCode, message: str, details: list[Any]) -> status_pb2.Status:
    packed = []
    for item in details:
        holder = any_pb2.Any()
        holder.Pack(item)
        packed.append(holder)
    return status_pb2.Status(
        code=getattr(code_pb2, grpc_code.name), message=message, details=packed
    )


def validation_status(violations: list[FieldViolation]) -> status_pb2.Status:
    bad = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(
                field=v.field,
                description=v.message,
                reason=v.type,
                localized_message=error_details_pb2.LocalizedMessage(
                    locale="json", message=json.dumps({"input": v.input, "ctx": v.ctx})
                ),
            )
            for v in violations
        ]
    )
    info = error_details_pb2.ErrorInfo(
        reason="VALIDATION_FAILED", domain=ERROR_DOMAIN, metadata={"http_status": "422"}
    )
    summary = "; ".join(f"{v.field}: {v.message}" for v in violations) or "invalid request"
    return _pack(grpc.StatusCode.INVALID_ARGUMENT, summary, [info, bad])


def map_exception(exc: BaseException) -> status_pb2.Status:
    """The one place where domain and driver errors become gRPC statuses."""
    if isinstance(exc, ValidationFailed):
        return validation_status(exc.violations)
    if isinstance(exc, TestamentError):
        return _status_for(exc)
    if isinstance(exc, DeadlineSpent | asyncpg.QueryCanceledError | TimeoutError):
        return _status_for(DeadlineExceeded("the request deadline was exceeded",
                                            reason="DEADLINE_EXCEEDED"))
    if isinstance(exc, ObjectStoreUnavailable):
        return _status_for(Unavailable("the object store is unavailable; nothing was recorded",
                                       reason="OBJECT_STORE_UNAVAILABLE", retry_after_s=1))
    if isinstance(
        exc,
        asyncpg.PostgresConnectionError
        | asyncpg.InterfaceError
        | asyncpg.CannotConnectNowError
        | ConnectionError
        | OSError,
    ):
        return _status_for(Unavailable("the database is unavailable", reason="DB_UNAVAILABLE"))
    if isinstance(exc, TransientConflict | asyncpg.DeadlockDetectedError | asyncpg.SerializationError):
        return _status_for(Aborted(
            "the write met concurrent writes on every attempt and changed nothing; send it again",
            reason="TRANSACTION_CONFLICT", retry_after_s=1))
    if isinstance(exc, asyncpg.TooManyConnectionsError):
        return _status_for(Unavailable("the database has no free connection", reason="DB_UNAVAILABLE",
                                       retry_after_s=1))
    if isinstance(exc, asyncpg.UniqueViolationError):
        return _status_for(AlreadyExists("conflicting write", reason="ALREADY_EXISTS"))
    if isinstance(exc, asyncpg.DataError):
        return _status_for(InvalidArgument("a value was not accepted by the database",
                                           reason="INVALID_VALUE"))
    return _status_for(
        TestamentError("Internal Server Error", reason="INTERNAL", http_status=500)
    )


class ErrorInterceptor(_AroundInterceptor):
    """Domain and asyncpg errors → gRPC status with ErrorInfo; defects never leak detail."""

    @asynccontextmanager
    async def around(self, method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        try:
            yield
        except (grpc.aio.AbortError, asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to a status
            status = map_exception(exc)
            if status.code == code_pb2.INTERNAL:
                telemetry.access_log("defect", method=method, error=repr(exc))
            await context.abort_with_status(rpc_status.to_status(status))


class DeadlineInterceptor(_AroundInterceptor):
    """Turns the caller's deadline (or the server default) into :data:`request_deadline`."""

    def __init__(self, default_s: float) -> None:
        self._default_s = default_s

    @asynccontextmanager
    async def around(self, method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        remaining = context.time_remaining()
        budget = self._default_s if remaining is None else min(remaining, self._default_s)
        token = request_deadline.set(asyncio.get_running_loop().time() + budget)
        try:
            yield
        finally:
            request_deadline.reset(token)


class AuthInterceptor(_AroundInterceptor):
    """Authenticates the caller and enforces the method's declared scope."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._auth = authenticator

    @asynccontextmanager
    async def around(self, method: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        header = _metadata(context).get("authorization")
        caller = await self._auth.authenticate(header, method_scope(method))
        token = current_caller.set(caller)
        try:
            yield
        finally:
            current_caller.reset(token)
