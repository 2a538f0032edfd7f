"""DeploymentService: build info and database health, served by every service process."""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from testament.common.v1 import deployment_pb2

from services.platform.auth import Authenticator, Scope
from services.platform.db import Database
from services.platform.errors import Unavailable

# MCP tool -> tool version, for the tools whose routes this release actually serves.
# The real `remember` MCP server renders a tool only when its version matches, so a
# tool is listed here only once its routes answer (each issue adds its own).
SERVED_TOOLS: dict[str, int] = {
    "ingest": 1,
    "pipeline_readiness": 1,
    "delete_document": 1,
    "resolve_entity": 1,
    "claims_and_sources_context": 2,
    "facts_context": 3,
    "combined_context": 4,
    # The query space (issue 14): the seven SQL tools.
    "query_sql": 1,
    "explain_sql": 1,
    "describe_query_space": 1,
    "search_query_space": 1,
    "list_saved_queries": 1,
    "describe_saved_query": 1,
    "run_saved_query": 1,
}


class DeploymentServicer:
    def __init__(
        self,
        db: Database | None,
        *,
        build_revision: str,
        model_bindings: Mapping[str, str] | None = None,
        tools: Mapping[str, int] | None = None,
        authenticator: Authenticator | None = None,
    ) -> None:
        self._db = db
        self._authenticator = authenticator
        self._build_revision = build_revision
        self._model_bindings = dict(model_bindings or {})
        self._tools = dict(SERVED_TOOLS if tools is None else tools)

    async def GetDeployment(
        self, request: deployment_pb2.GetDeploymentRequest, context: grpc.aio.ServicerContext
    ) -> deployment_pb2.GetDeploymentResponse:
        return deployment_pb2.GetDeploymentResponse(
            build_revision=self._build_revision,
            model_bindings=self._model_bindings,
            tools=self._tools,
        )

    async def Authenticate(
        self, request: deployment_pb2.AuthenticateRequest, context: grpc.aio.ServicerContext
    ) -> deployment_pb2.AuthenticateResponse:
        if self._authenticator is None:
            raise Unavailable("this process does not check credentials", reason="NOT_SERVED")
        header = dict(context.invocation_metadata() or ()).get("authorization")
        caller = await self._authenticator.identify(header if isinstance(header, str) else None, Scope.NONE)
        reply = deployment_pb2.AuthenticateResponse(open=caller.open_mode, space_id=str(caller.space_id),
                                                    scope=caller.scope.value)
        if caller.credential_id is not None:
            reply.credential_id = str(caller.credential_id)
        return reply

    async def CheckHealth(
        self, request: deployment_pb2.CheckHealthRequest, context: grpc.aio.ServicerContext
    ) -> deployment_pb2.CheckHealthResponse:
        if self._db is None:
            return deployment_pb2.CheckHealthResponse(status="ok")
        try:
            await self._db.ping()
        except Exception:  # noqa: BLE001 - any failure means "the database does not answer"
            # RememberStack answers a bare 500 here, not 503.
            raise Unavailable(
                "Internal Server Error", reason="DATABASE_DOWN", http_status=500
            ) from None
        return deployment_pb2.CheckHealthResponse(status="ok")
