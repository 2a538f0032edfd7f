"""Composition root of the retrieval service."""

from __future__ import annotations

from services.platform.bootstrap import open_platform
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.embeddings import EmbeddingUnavailable, provider_from_settings, warm_up
from services.platform.ledger import CostLedger, LedgeredEmbeddings
from services.platform.redaction import output_redaction
from services.platform.server import Servicer, ServiceSpec, StartupError, run_service
from services.platform.settings import Settings, load_settings
from services.retrieval.api import RetrievalServicer
from services.retrieval.app import Retrieval
from services.retrieval.changefeed import ChangeFeed
from services.retrieval.graph_client import GrpcGraphExpansion
from services.retrieval.primitives import Primitives


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "retrieval")
    try:
        embedder = LedgeredEmbeddings(provider_from_settings(settings), CostLedger(platform.db))
    except ValueError as exc:
        raise StartupError(f"testament-retrieval: {exc}") from None
    try:
        await warm_up(embedder)  # the model answers the first query at full speed: loaded before SERVING
    except EmbeddingUnavailable as exc:
        raise StartupError(f"testament-retrieval: TESTAMENT_EMBEDDING_PROVIDER: {exc}") from None
    redact = output_redaction(settings, "retrieval")
    graph = GrpcGraphExpansion(settings.graph_addr) if settings.graph_addr else None
    retrieval = Retrieval(platform.db, embedder, graph, redact=redact)
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
