"""Composition root of the pipeline service: the queue, the stages with their providers,
the workers, and the operator servicer."""

from __future__ import annotations

import os
import socket

from services.pipeline.adapters.converters import build_converters
from services.pipeline.adapters.facts_writer import FactsWriter
from services.pipeline.adapters.queue import PgQueue, Wakeup
from services.pipeline.adapters.store import PgStageStore
from services.pipeline.api import PipelineServicer
from services.pipeline.app import Stages, Worker
from services.pipeline.domain.claims import ClaimProvider, RulesClaimProvider
from services.platform.bootstrap import open_object_store, open_platform
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.embeddings import provider_from_settings
from services.platform.redaction import redactor_from_settings
from services.platform.server import Servicer, ServiceSpec, StartupError, run_service
from services.platform.settings import Settings, load_settings


def claim_provider(settings: Settings) -> ClaimProvider:
    if settings.claims_provider == "rules":
        return RulesClaimProvider()
    raise StartupError("testament-pipeline: TESTAMENT_CLAIMS_PROVIDER=openai is not built yet; use 'rules'")


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "pipeline")
    store = await open_object_store(settings, "pipeline")
    queue = PgQueue(platform.db, owner=f"{socket.gethostname()}:{os.getpid()}", lease_s=settings.worker_lease_s,
                    backoff_base_s=settings.work_retry_backoff_base_s,
                    backoff_max_s=settings.work_retry_backoff_max_s, max_attempts=settings.work_max_attempts)
    try:
        redactor = redactor_from_settings(settings)
    except ValueError as exc:
        raise StartupError(f"testament-pipeline: TESTAMENT_REDACTION_POLICY: {exc}") from None
    stages = Stages(PgStageStore(platform.db), store, build_converters(settings.conversion_routes),
                    provider_from_settings(settings), claim_provider(settings), FactsWriter(platform.db),
                    chunk_token_budget=settings.chunk_token_budget, embed_batch_size=settings.embed_batch_size,
                    redact_ingest=(lambda text: redactor.redact_ingest(text).text) if redactor else None)
    assert settings.database_url is not None
    worker = Worker(queue, stages, Wakeup(settings.database_url), concurrency=settings.worker_concurrency,
                    poll_s=settings.worker_poll_s)
    return ServiceSpec(
        name="pipeline",
        port=settings.port_for("pipeline"),
        servicers=[
            Servicer(SERVICE_FULL_NAMES["pipeline"], PipelineServicer(platform.db, queue,
                                                                      set(settings.conversion_routes))),
            platform.deployment,
        ],
        authenticator=platform.authenticator,
        closers=[store.close, *platform.closers],
        background=[worker.run],
    )


def main() -> None:
    run_service(build, load_settings())
