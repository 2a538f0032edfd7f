"""Composition root of the queryspace service: wires adapters to the servicer and serves it."""

from __future__ import annotations

from services.platform.auth import Caller
from services.platform.bootstrap import open_platform, open_query_embedder, open_reads
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.redaction import redactor_from_settings
from services.platform.server import Servicer, ServiceSpec, StartupError, run_service
from services.platform.settings import Settings, load_settings
from services.queryspace.adapters import PgQuerySpace, PgSavedQueries
from services.queryspace.api import QuerySpaceServicer
from services.queryspace.app import ANALYTICAL, QuerySpace
from services.queryspace.functions import Evaluator
from services.retrieval.adapters import SearchLegs


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "queryspace")
    embedder = await open_query_embedder(settings, platform.db, "queryspace")
    try:
        redactor = redactor_from_settings(settings)
    except ValueError as exc:
        raise StartupError(f"testament-queryspace: TESTAMENT_REDACTION_POLICY: {exc}") from None
    redact = None
    if redactor is not None:
        def redact(text: str, caller: Caller) -> str:
            return redactor.redact_output(text, caller.principals).text
    reads = await open_reads(settings, "queryspace", platform)  # saved queries are written: the primary
    store, saved = PgQuerySpace(reads), PgSavedQueries(platform.db)  # type: ignore[arg-type]
    evaluator = Evaluator(SearchLegs(), embedder)
    service = QuerySpace(store, saved, evaluator, redact=redact)
    await service.start()
    exports = QuerySpace(store, saved, evaluator, redact=redact, tier=ANALYTICAL)
    exports.schema_problems = service.schema_problems
    return ServiceSpec(
        name="queryspace",
        port=settings.port_for("queryspace"),
        servicers=[Servicer(SERVICE_FULL_NAMES["queryspace"], QuerySpaceServicer(service, exports)),
                   platform.deployment],
        authenticator=platform.authenticator,
        closers=platform.closers,
    )


def main() -> None:
    run_service(build, load_settings())
