"""Composition root of the queryspace service: wires adapters to servicers and serves them."""

from __future__ import annotations

from services.platform.bootstrap import open_platform
from services.platform.contract import SERVICE_FULL_NAMES
from services.platform.server import Servicer, ServiceSpec, run_service
from services.platform.settings import Settings, load_settings

NOT_BUILT = "the memory_v1 SQL query space is not scheduled yet"


async def build(settings: Settings) -> ServiceSpec:
    platform = await open_platform(settings, "queryspace")
    return ServiceSpec(
        name="queryspace",
        port=settings.port_for("queryspace"),
        servicers=[
            Servicer(SERVICE_FULL_NAMES["queryspace"], object(), not_built=NOT_BUILT),
            platform.deployment,
        ],
        authenticator=platform.authenticator,
        closers=platform.closers,
    )


def main() -> None:
    run_service(build, load_settings())
