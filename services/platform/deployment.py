"""DeploymentService: build info and database health, served by every service process."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import grpc
from testament.common.v1 import deployment_pb2, deployment_pb2_grpc

from services.platform.auth import Authenticator, Caller, Scope, require_caller
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from services.platform.errors import (
    AlreadyExists,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from services.platform.wire import timestamp

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


class DeploymentServicer(deployment_pb2_grpc.DeploymentServiceServicer):
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

    # --- keys of the caller's own space ----------------------------------------------

    def _credentials(self) -> PgCredentials:
        if self._db is None:
            raise Unavailable("this process does not manage keys", reason="NOT_SERVED")
        return PgCredentials(self._db)

    async def CreateKey(
        self, request: deployment_pb2.CreateKeyRequest, context: grpc.aio.ServicerContext
    ) -> deployment_pb2.CreateKeyResponse:
        caller = require_caller()
        if request.scope not in ("read", "ingest", "write"):
            raise InvalidArgument("scope must be read, ingest or write", reason="INVALID_SCOPE")
        if len(request.label) > 200:
            raise InvalidArgument("label must be at most 200 characters", reason="INVALID_LABEL")
        wanted = set(request.principals)
        if caller.principals is not None and (request.trusted or not wanted <= caller.principals):
            raise PermissionDenied("a key cannot see more than the key that issues it",
                                   reason="KEY_WIDER_THAN_CALLER")
        key, issued = await self._credentials().create_key_in(
            caller.space_id, scope=Scope(request.scope), principals=sorted(wanted), trusted=request.trusted,
            label=request.label)
        return deployment_pb2.CreateKeyResponse(key=key, credential_id=str(issued.credential_id))

    async def ListKeys(
        self, request: deployment_pb2.ListKeysRequest, context: grpc.aio.ServicerContext
    ) -> deployment_pb2.ListKeysResponse:
        reply = deployment_pb2.ListKeysResponse()
        for row in await self._credentials().keys_of(require_caller().space_id):
            item = reply.keys.add(credential_id=str(row["credential_id"]), key_prefix=row["key_prefix"],
                                  scope=row["scope"], principals=list(row["principals"]), trusted=row["trusted"],
                                  label=row["label"])
            item.created_at.CopyFrom(timestamp(row["created_at"]))
            if row["revoked_at"] is not None:
                item.revoked_at.CopyFrom(timestamp(row["revoked_at"]))
        return reply

    async def RevokeKey(
        self, request: deployment_pb2.RevokeKeyRequest, context: grpc.aio.ServicerContext
    ) -> deployment_pb2.RevokeKeyResponse:
        credential = uuid.UUID(request.credential_id)  # a UUID: the contract's rule
        if not await self._credentials().revoke_in(require_caller().space_id, credential):
            raise NotFound("no live key with that id in this space", reason="KEY_NOT_FOUND")
        return deployment_pb2.RevokeKeyResponse(credential_id=str(credential))

    async def _is_operator(self, caller: Caller) -> bool:
        """The deployment's operator: a trusted writer of the default space (any caller of an
        open stack is one)."""
        return (caller.principals is None and caller.scope is Scope.WRITE
                and caller.space_id == await self._credentials().default_space())

    async def CreateSpace(
        self, request: deployment_pb2.CreateSpaceRequest, context: grpc.aio.ServicerContext
    ) -> deployment_pb2.CreateSpaceResponse:
        if not await self._is_operator(require_caller()):
            raise PermissionDenied("only the deployment's operator creates spaces", reason="OPERATOR_ONLY")
        credentials = self._credentials()
        try:
            space = await credentials.create_space(request.slug, request.name or request.slug)
        except ValueError as exc:
            if "exists already" in str(exc):
                raise AlreadyExists(str(exc), reason="SPACE_EXISTS") from None
            raise InvalidArgument(str(exc), reason="INVALID_SLUG") from None
        return deployment_pb2.CreateSpaceResponse(space_id=str(space), slug=request.slug)

    async def ListSpaces(
        self, request: deployment_pb2.ListSpacesRequest, context: grpc.aio.ServicerContext
    ) -> deployment_pb2.ListSpacesResponse:
        caller = require_caller()
        operator = await self._is_operator(caller)
        reply = deployment_pb2.ListSpacesResponse()
        for row in await self._credentials().list_spaces():
            if operator or row["space_id"] == str(caller.space_id):
                reply.spaces.add(space_id=row["space_id"], slug=row["slug"], name=row["name"],
                                 is_default=row["is_default"])
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
