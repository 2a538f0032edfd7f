"""Composition root of the pipeline service: the queue, the stages with their providers,
the workers, and the operator servicer."""

from __future__ import annotations

import os
import socket

from services.pipeline.adapters.converters import build_converters
from services.pipeline.adapters.facts_writer import FactsWriter
from services.pipeline.adapters.openai_claims import ChatCall, OpenAIClaimProvider
from services.pipeline.adapters.openai_relations import OpenAIRelationProvider
from services.pipeline.adapters.parse_process import ParseProcess, ProcessClaims, ProcessRelations
from services.pipeline.adapters.queue import PgQueue, Wakeup
from services.pipeline.adapters.store import PgStageStore
from services.pipeline.api import PipelineServicer
from services.pipeline.app import Stages, Worker, current_unit
from services.pipeline.domain.claims import ClaimProvider, ParsedClaimProvider
from services.pipeline.domain.facts import ParseRelationProvider, RelationProvider
from services.platform.bootstrap import open_database, open_object_store, open_platform
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.embeddings import EmbeddingUnavailable, provider_from_settings, warm_up
from services.platform.redaction import redactor_from_settings
from services.platform.server import Servicer, ServiceSpec, StartupError, run_service
from services.platform.settings import Settings, load_settings


def _openai(settings: Settings, what: str) -> dict[str, object]:
    if not settings.openai_api_key:
        raise StartupError(f"testament-pipeline: TESTAMENT_OPENAI_API_KEY is required for the openai {what} provider")
    return {"base_url": settings.openai_base_url, "api_key": settings.openai_api_key,
            "model": settings.openai_chat_model, "timeout_s": settings.openai_timeout_s}


def cost_ledger(store: PgStageStore):  # type: ignore[no-untyped-def]
    """Every model call is recorded with the unit it served (tokens, latency, outcome; never text)."""
    async def record(call: ChatCall) -> None:
        unit = current_unit.get()
        await store.record_call(space_id=unit.space_id if unit else None, work_id=unit.work_id if unit else None,
                                stage=unit.stage if unit else None, attempt=unit.attempts if unit else None,
                                provider=call.provider, model=call.model, tokens_in=call.tokens_in,
                                tokens_out=call.tokens_out, latency_ms=call.latency_ms, outcome=call.outcome)
    return record


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "pipeline")
    # The units' own pool. Their statements are key lookups and writes run thousands of times, so
    # they keep PostgreSQL's plan cache (a fifth of the database's CPU in an ingest went to planning
    # them afresh); the operator queries keep the platform pool's custom plans. Sized for both of
    # the worker's lanes, each unit holding a connection while it completes.
    work_db = await open_database(settings, "pipeline", custom_plans=False,
                                  max_size=max(settings.db_pool_max, 2 * settings.worker_concurrency + 2))
    store = await open_object_store(settings, "pipeline")
    queue = PgQueue(work_db, owner=f"{socket.gethostname()}:{os.getpid()}", lease_s=settings.worker_lease_s,
                    backoff_base_s=settings.work_retry_backoff_base_s,
                    backoff_max_s=settings.work_retry_backoff_max_s, max_attempts=settings.work_max_attempts)
    try:
        redactor = redactor_from_settings(settings)
    except ValueError as exc:
        raise StartupError(f"testament-pipeline: TESTAMENT_REDACTION_POLICY: {exc}") from None
    stage_store = PgStageStore(work_db)
    ledger = cost_ledger(stage_store)
    closers = [store.close, work_db.close, *platform.closers]
    parse = ParseProcess() if settings.parse_process else None
    if parse is not None:
        closers.append(parse.aclose)
    claims: ClaimProvider = ProcessClaims(parse) if parse else ParsedClaimProvider()
    if settings.claims_provider == "openai":
        openai_claims = OpenAIClaimProvider(**_openai(settings, "claims"), on_call=ledger)  # type: ignore[arg-type]
        claims = openai_claims
        closers.insert(0, openai_claims.aclose)
    relations: RelationProvider = ProcessRelations(parse) if parse else ParseRelationProvider()
    if settings.relations_provider == "openai":
        openai_relations = OpenAIRelationProvider(**_openai(settings, "relations"), on_call=ledger)  # type: ignore[arg-type]
        relations = openai_relations
        closers.insert(0, openai_relations.aclose)
    try:
        embeddings = provider_from_settings(settings, background=True)  # ingest yields to its transactions
        await warm_up(embeddings)  # a local model loads before the service reports SERVING, not on first use
    except (ValueError, EmbeddingUnavailable) as exc:
        raise StartupError(f"testament-pipeline: TESTAMENT_EMBEDDING_PROVIDER: {exc}") from None
    if parse is not None and "rules" in (settings.claims_provider, settings.relations_provider):
        await parse.warm()  # so does the English pipeline, in its own process
    stages = Stages(stage_store, store, build_converters(settings.conversion_routes),
                    embeddings, claims, FactsWriter(work_db),
                    chunk_token_budget=settings.chunk_token_budget, embed_batch_size=settings.embed_batch_size,
                    redact_ingest=(lambda text: redactor.redact_ingest(text).text) if redactor else None,
                    relations=relations)
    assert settings.database_url is not None
    worker = Worker(queue, stages, Wakeup(settings.database_url), concurrency=settings.worker_concurrency,
                    poll_s=settings.worker_poll_s)
    return ServiceSpec(
        name="pipeline",
        port=settings.port_for("pipeline"),
        servicers=[
            Servicer(SERVICE_FULL_NAMES["pipeline"], PipelineServicer(
                platform.db, queue, set(settings.conversion_routes), embeddings, settings.embed_batch_size)),
            platform.deployment,
        ],
        authenticator=platform.authenticator,
        closers=closers,
        background=[worker.run],
    )


def main() -> None:
    run_service(build, load_settings())
