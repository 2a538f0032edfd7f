"""Composition root of the retrieval service."""

from __future__ import annotations

from services.platform.bootstrap import open_platform, open_query_embedder, open_reads
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.redaction import output_redaction
from services.platform.server import Servicer, ServiceSpec, run_service
from services.platform.settings import Settings, load_settings
from services.retrieval.api import RetrievalServicer
from services.retrieval.app import Retrieval
from services.retrieval.changefeed import ChangeFeed
from services.retrieval.graph_client import GrpcGraphExpansion
from services.retrieval.primitives import Primitives


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "retrieval")
    embedder = await open_query_embedder(settings, platform.db, "retrieval")
    redact = output_redaction(settings, "retrieval")
    graph = GrpcGraphExpansion(settings.graph_addr) if settings.graph_addr else None
    # reads within the replica's staleness bound; the change feed stays on the primary
    retrieval = Retrieval(await open_reads(settings, "retrieval", platform), embedder, graph,  # type: ignore[arg-type]
                          redact=redact)
    assert settings.database_url is not None
    changes = ChangeFeed(platform.db, settings.database_url, redact or (lambda text, caller: text))
    closers = [*platform.closers]
    if graph is not None:
        closers.insert(0, graph.close)
    return ServiceSpec(
        name="retrieval",
        port=settings.port_for("retrieval"),
        servicers=[Servicer(SERVICE_FULL_NAMES["retrieval"],
                            RetrievalServicer(retrieval, Primitives(retrieval, changes))),
                   platform.deployment],
        authenticator=platform.authenticator,
        closers=closers,
    )


def main() -> None:
    run_service(build, load_settings())
