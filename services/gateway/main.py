"""Composition root of the gateway: routes from the contract, channels to the services,
an HTTP server (uvicorn) and a gRPC health endpoint for the launcher and probes."""

from __future__ import annotations

import asyncio
import sys

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.gateway import openapi
from services.gateway.app import HOP_HEADERS, Gateway, Upstreams
from services.gateway.frontdoor import MAX_MESSAGE_BYTES, GrpcProxy, HttpFrontDoor, rpc_table
from services.gateway.transcoder import Router, routes_for
from services.platform import contract, telemetry
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
    return Gateway(
        Router(routes),
        upstreams,
        body_max_bytes=settings.ingest_body_max_bytes,
        front_door=HttpFrontDoor(rpc_table(), upstreams.channel_for, default_deadline_s=settings.default_deadline_s,
                                 hop_headers=HOP_HEADERS),
        openapi=openapi.document(routes, version=settings.build_revision or "dev"),
    )


async def serve(settings: Settings) -> None:
    telemetry.setup("testament-gateway")
    app = build_app(settings)
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
    )
    server = uvicorn.Server(config)
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
    await serving  # uvicorn handles SIGTERM/SIGINT and drains in-flight requests
    await health_servicer.enter_graceful_shutdown()
    await grpc_server.stop(1)
    telemetry.access_log("stopped", service="gateway")


def main() -> None:
    import uvloop

    settings = load_settings()
    try:
        uvloop.run(serve(settings))
    except StartupError as exc:
        print(exc.code, file=sys.stderr)
        sys.exit(1)
