"""Composition root of the ingest service: wires adapters to the servicer and serves it."""

from __future__ import annotations

from services.ingest.adapters import GrpcGraphHealth, PgIngestRepository
from services.ingest.api import IngestServicer
from services.ingest.app import IngestService
from services.platform.bootstrap import model_bindings, open_object_store, open_platform
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.server import Servicer, ServiceSpec, run_service
from services.platform.settings import Settings, load_settings


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "ingest")
    store = await open_object_store(settings, "ingest")
    graph = GrpcGraphHealth(settings.graph_addr)
    service = IngestService(
        PgIngestRepository(platform.db), store, graph,
        spool_dir=settings.spool_root, routes=settings.conversion_routes,
        body_max_bytes=settings.ingest_body_max_bytes,
        trusted_attribution=settings.trusted_principal_source,
    )
    servicer = IngestServicer(service, model_bindings=model_bindings(settings), build_revision=settings.build_revision)
    return ServiceSpec(
        name="ingest",
        port=settings.port_for("ingest"),
        servicers=[Servicer(SERVICE_FULL_NAMES["ingest"], servicer), platform.deployment],
        authenticator=platform.authenticator,
        closers=[graph.close, store.close, *platform.closers],
    )


def main() -> None:
    run_service(build, load_settings())
