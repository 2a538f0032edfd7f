"""gRPC server bootstrap shared by every service process.

A composition root builds a :class:`ServiceSpec` (its servicers and the resources
they hold) and calls :func:`run`. This module owns what every service does the
same way: uvloop, interceptors, health, reflection, the deployment service,
binding the port, and the graceful drain on SIGTERM/SIGINT (health goes
NOT_SERVING, new calls are refused, in-flight calls get the grace period,
resources close, the process exits 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.platform import contract, telemetry
from services.platform.auth import Authenticator
from services.platform.errors import Unimplemented
from services.platform.interceptors import (
    AuthInterceptor,
    DeadlineInterceptor,
    ErrorInterceptor,
    TelemetryInterceptor,
)
from services.platform.settings import Settings
from services.platform.validation import ValidationInterceptor

Closer = Callable[[], Awaitable[None]]


class StartupError(SystemExit):
    """A service cannot start (occupied port, unreachable database…); exits 1 with a message."""


@dataclass
class Servicer:
    """An implementation of one contract service: ``impl`` is an instance of the generated
    ``<Service>Servicer`` base class and overrides one coroutine (or async generator for
    server streams) per RPC. An RPC it does not override must be declared ``not_built`` in
    the contract (it then answers UNIMPLEMENTED); anything else refuses to start."""

    full_name: str
    impl: object


Background = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


@dataclass
class ServiceSpec:
    name: str
    port: int
    servicers: list[Servicer]
    authenticator: Authenticator | None
    closers: list[Closer] = field(default_factory=list)
    # Long-running tasks (the pipeline's workers): started after the server, told to stop
    # on SIGTERM and given the grace period to finish what they hold.
    background: list[Background] = field(default_factory=list)


def _unimplemented(method: MethodDescriptor, note: str) -> Callable[..., Any]:
    message = f"{method.containing_service.name}.{method.name} is not implemented: {note}"

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise Unimplemented(message, reason="NOT_BUILT")

    if method.server_streaming:

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> Any:
            raise Unimplemented(message, reason="NOT_BUILT")
            yield  # pragma: no cover - makes this an async generator

        return streaming
    return unary


def _generated_base(descriptor: ServiceDescriptor, impl_type: type) -> type | None:
    """The generated ``<Service>Servicer`` class ``impl_type`` derives from, if any."""
    module = descriptor.file.name.removesuffix(".proto").replace("/", ".") + "_pb2_grpc"
    for klass in impl_type.__mro__:
        if klass.__name__ == f"{descriptor.name}Servicer" and klass.__module__ == module:
            return klass
    return None


def binding_problems(descriptor: ServiceDescriptor, impl_type: type) -> list[str]:
    """Why ``impl_type`` cannot serve ``descriptor`` (empty when it can): it must derive from
    the generated base, override every RPC the contract does not declare ``not_built``,
    implement none it does declare so, and define no RPC-like name outside the contract."""
    base = _generated_base(descriptor, impl_type)
    if base is None:
        return [f"{impl_type.__name__} does not derive from the generated {descriptor.name}Servicer"]
    problems = []
    for method in descriptor.methods:
        overridden = getattr(impl_type, method.name) is not getattr(base, method.name)
        declared = contract.not_built(method)
        if not overridden and declared is None:
            problems.append(f"{descriptor.name}.{method.name} has no implementation in "
                            f"{impl_type.__name__} and is not declared not_built in the contract")
        elif overridden and declared is not None:
            problems.append(f"{descriptor.name}.{method.name} is implemented by "
                            f"{impl_type.__name__} but declared not_built in the contract")
    names = set(descriptor.methods_by_name)
    for klass in impl_type.__mro__:
        if klass is base or klass is object:
            break
        problems += [f"{impl_type.__name__}.{attr} names no RPC of {descriptor.name}"
                     for attr in vars(klass) if attr[:1].isupper() and attr not in names
                     and callable(vars(klass)[attr])]
    return problems


def generic_handler(descriptor: ServiceDescriptor, impl: object) -> grpc.GenericRpcHandler:
    """Method handlers built from the descriptor, so every RPC of the contract exists.
    Raises :class:`StartupError` when ``impl`` does not match its contract."""
    problems = binding_problems(descriptor, type(impl))
    if problems:
        raise StartupError("; ".join(problems))
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in descriptor.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        note = contract.not_built(method)
        behavior = getattr(impl, method.name) if note is None else _unimplemented(method, note)
        kwargs = {
            "request_deserializer": request_cls.FromString,
            "response_serializer": lambda m: m.SerializeToString(),
        }
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(behavior, **kwargs)
        elif method.client_streaming:
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(behavior, **kwargs)
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(behavior, **kwargs)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(behavior, **kwargs)
    return grpc.method_handlers_generic_handler(descriptor.full_name, handlers)


def interceptors(
    settings: Settings, name: str, authenticator: Authenticator | None
) -> list[grpc.aio.ServerInterceptor]:
    chain: list[grpc.aio.ServerInterceptor] = [
        TelemetryInterceptor(name, access_log=settings.trace_log),
        ErrorInterceptor(),
        DeadlineInterceptor(settings.default_deadline_s),
    ]
    if authenticator is not None:
        chain.append(AuthInterceptor(authenticator))
    chain.append(ValidationInterceptor())
    return chain


async def serve(settings: Settings, spec: ServiceSpec, *, ready: Callable[[int], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT, then drain. Returns after a clean shutdown."""
    telemetry.setup(f"testament-{spec.name}")
    server = grpc.aio.server(
        interceptors=interceptors(settings, spec.name, spec.authenticator),
        options=[
            ("grpc.max_receive_message_length", 16 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ],
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = []
    for item in spec.servicers:
        descriptor = contract.service(item.full_name)
        server.add_generic_rpc_handlers((generic_handler(descriptor, item.impl),))
        names.append(item.full_name)
    reflection.enable_server_reflection(
        (*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        server,
    )
    address = f"{settings.host}:{spec.port}"
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise StartupError(
            f"testament-{spec.name}: cannot listen on {address}: the port is in use or not "
            f"available ({exc})"
        ) from None
    if port == 0:
        raise StartupError(f"testament-{spec.name}: cannot listen on {address}: port in use")
    await server.start()
    for service_name in ("", *names):
        await health_servicer.set(service_name, health_pb2.HealthCheckResponse.SERVING)
    telemetry.access_log("started", service=spec.name, port=port)
    if ready is not None:
        ready(port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(task(stop)) for task in spec.background]
    await stop.wait()

    # Drain: advertise NOT_SERVING, refuse new calls, let in-flight calls and work finish.
    await health_servicer.enter_graceful_shutdown()
    await server.stop(settings.shutdown_grace_s)
    if tasks:
        _, late = await asyncio.wait(tasks, timeout=settings.shutdown_grace_s)
        for task in late:  # their units' leases expire and another worker runs them again
            task.cancel()
    for close in reversed(spec.closers):
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5.0):
                await close()
    telemetry.access_log("stopped", service=spec.name)


def run_service(build: Callable[[Settings], Awaitable[ServiceSpec]], settings: Settings) -> None:
    """Entry point of a service process: uvloop, build, serve, exit 0 after a drain."""
    import uvloop

    async def main() -> None:
        spec = await build(settings)
        await serve(settings, spec)

    try:
        uvloop.run(main())
    except StartupError as exc:
        print(exc.code if isinstance(exc.code, str) else exc, file=sys.stderr)
        sys.exit(1)


def free_ports(count: int, host: str = "127.0.0.1") -> Sequence[int]:
    import socket

    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
