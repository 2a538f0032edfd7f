"""Composition root of the pipeline service: wires adapters to servicers and serves them."""

from __future__ import annotations

from services.platform.bootstrap import open_platform
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.server import Servicer, ServiceSpec, run_service
from services.platform.settings import Settings, load_settings

NOT_BUILT = "the work queue and stage workers arrive with the Pipeline issues"


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "pipeline")
    return ServiceSpec(
        name="pipeline",
        port=settings.port_for("pipeline"),
        servicers=[
            Servicer(SERVICE_FULL_NAMES["pipeline"], object(), not_built=NOT_BUILT),
            platform.deployment,
        ],
        authenticator=platform.authenticator,
        closers=platform.closers,
    )


def main() -> None:
    run_service(build, load_settings())
