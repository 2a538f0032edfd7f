"""Composition root of the graph service: wires adapters to the servicer and serves it."""

from __future__ import annotations

from services.graph.adapters import PgGraphStore
from services.graph.api import GraphServicer
from services.graph.app import GraphService
from services.platform.bootstrap import open_platform, open_reads
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.redaction import output_redaction
from services.platform.server import Servicer, ServiceSpec, run_service
from services.platform.settings import Settings, load_settings


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "graph")
    service = GraphService(PgGraphStore(await open_reads(settings, "graph", platform)))  # type: ignore[arg-type]
    redact = output_redaction(settings, "graph")
    return ServiceSpec(
        name="graph",
        port=settings.port_for("graph"),
        servicers=[Servicer(SERVICE_FULL_NAMES["graph"], GraphServicer(service, redact=redact)),
                   platform.deployment],
        authenticator=platform.authenticator,
        closers=platform.closers,
    )


def main() -> None:
    run_service(build, load_settings())
