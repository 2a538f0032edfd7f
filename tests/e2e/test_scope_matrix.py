"""Every HTTP route × every kind of credential gets its documented status: no key 401,
a revoked key 401, a key whose scope the route's contract scope does not allow 403, and
an allowed key never 401/403 and never a 5xx. Routes and scopes come from the contract,
so a new route is covered the day it is added."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest

from services.gateway.transcoder import routes_for
from services.platform import contract
from services.platform.auth import Scope, allows
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from tests.conftest import clone_database
from tests.support import gateway_stack

ROUTES = sorted(routes_for([contract.service(s) for s in contract.SERVICE_FULL_NAMES.values()]),
                key=lambda r: (r.template, r.http_method))
KINDS = ("none", "read", "ingest", "write", "revoked", "other_space")


@pytest.fixture(scope="module")
def stack(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp("matrix")

    async def keys() -> dict[str, str]:
        db = await Database.connect(dsn, min_size=1, max_size=1)
        try:
            creds = PgCredentials(db)
            await creds.create_space("other", "Another team")
            issued = {scope: (await creds.create_key(scope=Scope(scope), trusted=True))[0]
                      for scope in ("read", "ingest", "write")}
            issued["other_space"] = (await creds.create_key(scope=Scope.WRITE, space_slug="other", trusted=True))[0]
            revoked, caller = await creds.create_key(scope=Scope.WRITE, trusted=True)
            await creds.revoke(str(caller.credential_id))
            issued["revoked"] = revoked
            return issued
        finally:
            await db.close()

    issued = asyncio.run(keys())
    with gateway_stack(dsn, tmp, ("ingest", "pipeline", "retrieval", "queryspace")) as (url, _, _):
        yield url, issued


def _request(route, base: str, headers: dict[str, str]) -> httpx.Response:  # type: ignore[no-untyped-def]
    path = route.template
    for name in route.path_fields:
        value = "facts_context" if name == "name" else "examples" if name == "namespace" else str(uuid.uuid4())
        path = path.replace("{" + name + "}", value)
    if route.method.client_streaming:
        return httpx.post(f"{base}{path}", params={"filename": "m.md", "mime": "text/markdown"},
                          content=f"matrix {uuid.uuid4()}".encode(), headers=headers, timeout=30)
    if route.http_method in ("POST", "PUT", "PATCH"):
        return httpx.request(route.http_method, f"{base}{path}", json={}, headers=headers, timeout=30)
    return httpx.request(route.http_method, f"{base}{path}", headers=headers, timeout=30)


@pytest.mark.parametrize("route", ROUTES, ids=[f"{r.http_method} {r.template}" for r in ROUTES])
def test_every_route_and_credential(stack: tuple[str, dict[str, str]], route) -> None:  # type: ignore[no-untyped-def]
    base, keys = stack
    required = contract.method_scope(route.full_method)
    for kind in KINDS:
        headers = {} if kind == "none" else {"authorization": f"Bearer {keys[kind]}"}
        reply = _request(route, base, headers)
        status = reply.status_code
        where = f"{route.http_method} {route.template} as {kind}: {status} {reply.text[:200]}"
        if required is Scope.NONE:
            assert status == 200, where
        elif kind == "none":
            assert (status, reply.json()) == (401, {"detail": "a perimeter credential is required"}), where
        elif kind == "revoked":
            assert (status, reply.json()) == (401, {"detail": "perimeter authentication failed"}), where
        elif not allows(Scope("write" if kind == "other_space" else kind), required):
            assert (status, reply.json()) == (403, {"detail": "credential may not perform this operation"}), where
        else:
            assert status not in (401, 403) and status < 500, where
