"""Composition root of the ingest service: wires adapters to servicers and serves them."""

from __future__ import annotations

from services.platform.bootstrap import open_platform
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.server import Servicer, ServiceSpec, run_service
from services.platform.settings import Settings, load_settings

NOT_BUILT = "documents, versions and readiness arrive with the Ingest issue"


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "ingest")
    return ServiceSpec(
        name="ingest",
        port=settings.port_for("ingest"),
        servicers=[
            Servicer(SERVICE_FULL_NAMES["ingest"], object(), not_built=NOT_BUILT),
            platform.deployment,
        ],
        authenticator=platform.authenticator,
        closers=platform.closers,
    )


def main() -> None:
    run_service(build, load_settings())
