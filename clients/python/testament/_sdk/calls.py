"""How the SDK calls one RPC: credentials, a deadline on every call, and retries only where
the contract says a repeat is safe.

A unary call is retried when its ``idempotency_level`` (declared per RPC in the protos) is
NO_SIDE_EFFECTS or IDEMPOTENT and the server answered UNAVAILABLE or RESOURCE_EXHAUSTED,
or, for any call, when it answered ABORTED with reason TRANSACTION_CONFLICT (nothing was
changed; the contract says to send it again). The wait is the server's RetryInfo delay
when it sends one, else a jittered exponential backoff; no attempt outlives the call's
deadline. Streams are never retried.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import MethodDescriptor

from testament._sdk.errors import RPCError

_SAFE = (descriptor_pb2.MethodOptions.NO_SIDE_EFFECTS, descriptor_pb2.MethodOptions.IDEMPOTENT)
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
R = TypeVar("R")  # the RPC's response message


@dataclass(frozen=True)
class RetryPolicy:
    """At most ``attempts`` tries of a retryable call; backoff ``base_s`` · 2^n (jittered)."""

    attempts: int = 4
    base_s: float = 0.1
    max_s: float = 5.0

    def delay(self, method: MethodDescriptor, error: RPCError, attempt: int, deadline: float) -> float | None:
        """Seconds to wait before trying again, or None to give up with ``error``."""
        if attempt + 1 >= self.attempts:
            return None
        conflict = error.code == grpc.StatusCode.ABORTED and error.reason == "TRANSACTION_CONFLICT"
        safe = method.GetOptions().idempotency_level in _SAFE and error.code in _RETRYABLE
        if not (conflict or safe):
            return None
        wait = error.retry_after_s
        if wait is None:
            wait = min(self.max_s, self.base_s * 2 ** attempt) * random.uniform(0.5, 1.0)
        return None if time.monotonic() + wait >= deadline else wait


class _Service:
    _service: ClassVar[str]

    def __init__(self, channel: Any, metadata: Sequence[tuple[str, str]], timeout_s: float,
                 policy: RetryPolicy) -> None:
        self._descriptor = descriptor_pool.Default().FindServiceByName(self._service)
        self._metadata = tuple(metadata)
        self._timeout_s = timeout_s
        self._policy = policy
        self._calls: dict[str, Any] = {}
        for method in self._descriptor.methods:
            path = f"/{self._descriptor.full_name}/{method.name}"
            kind = ("stream_unary" if method.client_streaming else
                    "unary_stream" if method.server_streaming else "unary_unary")
            self._calls[method.name] = getattr(channel, kind)(
                path, request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=message_factory.GetMessageClass(method.output_type).FromString)

    def _deadline(self, timeout_s: float | None) -> float:
        return time.monotonic() + (timeout_s or self._timeout_s)

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.001, deadline - time.monotonic())

    def _wait_or_raise(self, name: str, failure: grpc.RpcError, attempt: int, deadline: float) -> float:
        """The pause before the next attempt, or the failure raised as RPCError."""
        error = RPCError.from_grpc(failure)
        wait = self._policy.delay(self._descriptor.methods_by_name[name], error, attempt, deadline)
        if wait is None:
            raise error from None
        return wait


class SyncService(_Service):
    def _unary(self, name: str, request: Any, timeout_s: float | None, response: type[R]) -> R:
        deadline = self._deadline(timeout_s)
        attempt = 0
        while True:
            try:
                reply: R = self._calls[name](request, metadata=self._metadata, timeout=self._left(deadline))
                return reply
            except grpc.RpcError as failure:
                wait = self._wait_or_raise(name, failure, attempt, deadline)
            time.sleep(wait)
            attempt += 1

    def _client_stream(self, name: str, requests: Iterable[Any], timeout_s: float | None,
                       response: type[R]) -> R:
        try:
            reply: R = self._calls[name](iter(requests), metadata=self._metadata,
                                         timeout=self._left(self._deadline(timeout_s)))
            return reply
        except grpc.RpcError as failure:
            raise RPCError.from_grpc(failure) from None

    def _server_stream(self, name: str, request: Any, timeout_s: float | None,
                       response: type[R]) -> Iterator[R]:
        try:
            yield from self._calls[name](request, metadata=self._metadata,
                                         timeout=self._left(self._deadline(timeout_s)))
        except grpc.RpcError as failure:
            raise RPCError.from_grpc(failure) from None


class AsyncService(_Service):
    async def _unary(self, name: str, request: Any, timeout_s: float | None, response: type[R]) -> R:
        deadline = self._deadline(timeout_s)
        attempt = 0
        while True:
            try:
                reply: R = await self._calls[name](request, metadata=self._metadata, timeout=self._left(deadline))
                return reply
            except grpc.RpcError as failure:
                wait = self._wait_or_raise(name, failure, attempt, deadline)
            await asyncio.sleep(wait)
            attempt += 1

    async def _client_stream(self, name: str, requests: AsyncIterable[Any] | Iterable[Any],
                             timeout_s: float | None, response: type[R]) -> R:
        try:
            reply: R = await self._calls[name](requests, metadata=self._metadata,
                                               timeout=self._left(self._deadline(timeout_s)))
            return reply
        except grpc.RpcError as failure:
            raise RPCError.from_grpc(failure) from None

    async def _server_stream(self, name: str, request: Any, timeout_s: float | None,
                             response: type[R]) -> AsyncIterator[R]:
        try:
            async for message in self._calls[name](request, metadata=self._metadata,
                                                   timeout=self._left(self._deadline(timeout_s))):
                yield message
        except grpc.RpcError as failure:
            raise RPCError.from_grpc(failure) from None
