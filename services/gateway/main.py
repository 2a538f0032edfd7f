"""Composition root of the gateway: routes from the contract, channels to the services,
an HTTP server (uvicorn) and a gRPC health endpoint for the launcher and probes."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.gateway import openapi
from services.gateway.admission import CorsConfigError, Limits, parse_origins
from services.gateway.app import HOP_HEADERS, DoorPolicy, Gateway, Upstreams, authenticate
from services.gateway.frontdoor import MAX_MESSAGE_BYTES, GrpcProxy, HttpFrontDoor, rpc_table
from services.gateway.transcoder import Router, routes_for
from services.platform import contract, telemetry
from services.platform.bootstrap import LOOPBACK_HOSTS
from services.platform.server import StartupError
from services.platform.settings import SERVICE_NAMES, Settings, load_settings


def build_app(settings: Settings) -> Gateway:
    addresses = {name: getattr(settings, f"{name}_addr") for name in SERVICE_NAMES}
    addresses = {name: addr for name, addr in addresses.items() if addr}
    if not addresses:
        raise StartupError("testament-gateway: no service address is set (TESTAMENT_<SERVICE>_ADDR)")
    services = [contract.service(full) for full in contract.SERVICE_FULL_NAMES.values()]
    upstreams = Upstreams(addresses, deadline_s=settings.default_deadline_s)
    routes = routes_for(services)
    try:
        origins = parse_origins(settings.cors_origins)
    except CorsConfigError as exc:
        raise StartupError(f"testament-gateway: {exc}") from None
    door = DoorPolicy(
        limits=Limits(settings.admission_key_per_minute, settings.admission_key_in_flight,
                      settings.admission_space_per_minute, settings.admission_space_in_flight),
        max_in_flight=settings.gateway_max_in_flight, header_max_bytes=settings.http_header_max_bytes,
        body_max_bytes=settings.http_body_max_bytes, body_timeout_s=settings.http_body_timeout_s,
        cors_origins=origins)
    return Gateway(
        Router(routes),
        upstreams,
        body_max_bytes=settings.ingest_body_max_bytes,
        front_door=HttpFrontDoor(rpc_table(), upstreams.channel_for, default_deadline_s=settings.default_deadline_s,
                                 hop_headers=HOP_HEADERS, body_timeout_s=settings.http_body_timeout_s),
        openapi=openapi.document([r for r in routes if r.template != "/healthz"],
                                 version=settings.build_revision or "dev"),
        door=door,
    )


# An idle keep-alive connection is closed by the client, never by us: if both sides give up
# after the same 5 s (uvicorn's and httpx's defaults), a request sent on a connection just as
# the server times it out is lost with a reset. 75 s outlasts httpx (5 s) and the usual load
# balancers' idle timeouts (60 s), so the client side always closes first.
HTTP_KEEP_ALIVE_S = 75


class DrainingServer(uvicorn.Server):
    """On SIGTERM or SIGINT: stop admitting (every new request and /healthz answer 503
    with Retry-After), let each accepted request finish within the grace, then stop.
    ``cut`` counts the requests the grace did not cover."""

    def __init__(self, config: uvicorn.Config, app: Gateway, *, grace_s: float) -> None:
        super().__init__(config)
        self._app = app
        self._grace_s = grace_s
        self._drain: asyncio.Task[None] | None = None
        self.cut = 0

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._drain is not None:  # a second signal: stop now
            super().handle_exit(sig, frame)
            return
        self._app.draining = True
        self._drain = asyncio.get_event_loop().create_task(self._finish(sig, frame))

    async def _finish(self, sig: int, frame: Any) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._grace_s):
                await self._app.idle.wait()
        self.cut = self._app.in_flight
        super().handle_exit(sig, frame)
        # The drain was the signal's whole job: uvicorn would raise it again once stopped,
        # ending the process by the signal; the exit code is ours to say (0, or 1 when cut).
        self._captured_signals.clear()


async def refuse_open_network(settings: Settings, app: Gateway, *, wait_s: float = 30.0) -> None:
    """An open (keyless) stack listens on loopback only: bound elsewhere, the gateway starts
    only once the services confirm that a key exists."""
    if settings.host in LOOPBACK_HOSTS or settings.allow_open_network:
        return
    channel = app.upstreams.channel_for("testament.common.v1.DeploymentService")
    deadline = asyncio.get_running_loop().time() + wait_s
    while channel is not None:
        try:
            reply = await authenticate(channel, [], timeout_s=2.0)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                return  # keys exist: this call simply had none
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.5)
            continue
        if not reply.open:
            return
        break
    raise StartupError(f"testament-gateway: TESTAMENT_HOST={settings.host} is not a loopback address and no API "
                       "key exists (or none could be confirmed), so the stack would be open to the network; "
                       "create a key first (`testament keys create`), or set TESTAMENT_ALLOW_OPEN_NETWORK=true "
                       "when only a private network reaches it")


async def serve(settings: Settings) -> None:
    telemetry.setup("testament-gateway")
    app = build_app(settings)
    await refuse_open_network(settings, app)
    grpc_server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                           ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)])
    # Every contract method, proxied to its service: one address reaches everything.
    grpc_server.add_generic_rpc_handlers((GrpcProxy(rpc_table(), app.upstreams.channel_for,
                                                    default_deadline_s=settings.default_deadline_s),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, grpc_server)
    reflection.enable_server_reflection(
        (health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        grpc_server,
    )
    address = f"{settings.host}:{settings.gateway_grpc_port}"
    try:
        grpc_port = grpc_server.add_insecure_port(address)
    except RuntimeError:
        grpc_port = 0
    if grpc_port == 0:
        raise StartupError(f"testament-gateway: cannot listen on {address} (gRPC): port in use")
    config = uvicorn.Config(
        app, host=settings.host, port=settings.gateway_port, loop="uvloop", lifespan="on",
        log_level="warning", access_log=False, timeout_graceful_shutdown=int(settings.shutdown_grace_s),
        timeout_keep_alive=HTTP_KEEP_ALIVE_S,
    )
    server = DrainingServer(config, app, grace_s=settings.shutdown_grace_s)
    await grpc_server.start()
    serving = asyncio.create_task(server.serve())
    while not server.started and not serving.done():  # noqa: ASYNC110 - uvicorn exposes no event
        await asyncio.sleep(0.05)
    if not server.started:
        await grpc_server.stop(0)
        raise StartupError(
            f"testament-gateway: cannot listen on {settings.host}:{settings.gateway_port} "
            "(TESTAMENT_GATEWAY_PORT): the port is in use"
        )
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    telemetry.access_log("started", service="gateway", port=settings.gateway_port, grpc_port=grpc_port)
    await serving  # SIGTERM/SIGINT: DrainingServer stops admitting, then lets uvicorn finish
    await health_servicer.enter_graceful_shutdown()
    await grpc_server.stop(1)
    telemetry.access_log("stopped", service="gateway", cut_requests=server.cut)
    if server.cut:
        print(f"testament-gateway: {server.cut} request(s) were still running after the "
              f"{settings.shutdown_grace_s:g} s grace and were cut (TESTAMENT_SHUTDOWN_GRACE_S)", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    import uvloop

    settings = load_settings()
    try:
        uvloop.run(serve(settings))
    except StartupError as exc:
        print(exc.code, file=sys.stderr)
        sys.exit(1)
