"""The gateway process in front of a real service process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from services.platform.embedded_pg import EmbeddedPostgres
from services.platform.migrations import migrate
from tests.support import Proc, run_gateway, run_service


@pytest.fixture(scope="module")
def stack(dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, Proc, str]]:
    tmp = tmp_path_factory.mktemp("gw")
    with run_service("ingest", dsn, tmp) as ingest, run_service("queryspace", dsn, tmp) as queryspace, \
            run_gateway(dsn, tmp, ingest=ingest.address, queryspace=queryspace.address) as gateway:
        yield ingest, gateway, f"http://127.0.0.1:{gateway.extra['http']}"


def test_healthz_answers_ok(stack: tuple[Proc, Proc, str]) -> None:
    _, _, base = stack
    reply = httpx.get(f"{base}/healthz", timeout=10)
    assert reply.status_code == 200
    assert reply.json() == {"status": "ok"}


def test_a_trace_started_at_the_gateway_reaches_the_service(stack: tuple[Proc, Proc, str]) -> None:
    ingest, _, base = stack
    reply = httpx.get(f"{base}/deployment", timeout=10)
    trace_id = reply.headers["x-trace-id"]
    assert len(trace_id) == 32
    seen = [line for line in ingest.log_lines() if line.get("event") == "rpc"
            and line.get("method") == "/testament.common.v1.DeploymentService/GetDeployment"]
    assert any(line["trace_id"] == trace_id for line in seen)
    # A caller's own W3C context is continued, not replaced.
    parent = "4bf92f3577b34da6a3ce929d0e0e4736"
    reply = httpx.get(f"{base}/healthz", headers={"traceparent": f"00-{parent}-00f067aa0ba902b7-01"})
    assert reply.headers["x-trace-id"] == parent
    assert any(line.get("trace_id") == parent for line in ingest.log_lines())


def test_the_query_space_routes_are_transcoded_from_their_annotations(stack: tuple[Proc, Proc, str]) -> None:
    _, _, base = stack
    reply = httpx.get(f"{base}/query/space", timeout=10)
    assert reply.status_code == 200
    assert reply.json()["schema"] == "memory_v1"


def test_a_route_whose_service_is_not_deployed_is_503(stack: tuple[Proc, Proc, str]) -> None:
    _, _, base = stack
    reply = httpx.post(f"{base}/graph/neighborhood", json={"entity_id": "x"}, timeout=10)
    assert (reply.status_code, reply.json()) == (503, {"detail": "service unavailable"})


def test_unknown_paths_and_methods(stack: tuple[Proc, Proc, str]) -> None:
    _, _, base = stack
    assert httpx.get(f"{base}/no-such-route").json() == {"detail": "Not Found"}
    assert httpx.get(f"{base}/connectors").status_code == 404
    reply = httpx.put(f"{base}/documents")
    assert (reply.status_code, reply.json()) == (405, {"detail": "Method Not Allowed"})


def test_bad_input_gets_the_validation_list(stack: tuple[Proc, Proc, str]) -> None:
    _, _, base = stack
    reply = httpx.get(f"{base}/documents", params={"limit": "many"})
    assert reply.status_code == 422
    (item,) = reply.json()["detail"]
    assert item["loc"] == ["query", "limit"] and item["type"] == "int_parsing"

    reply = httpx.post(f"{base}/readiness", json={"version_ids": ["x"], "require": {}, "extra": 1})
    assert reply.status_code == 422
    problems = {tuple(p["loc"]): p["type"] for p in reply.json()["detail"]}
    assert problems[("body", "extra")] == "extra_forbidden"

    reply = httpx.post(f"{base}/readiness", content=b"{not json", headers={"content-type": "application/json"})
    assert reply.status_code == 422 and reply.json()["detail"][0]["type"] == "json_invalid"


@pytest.mark.skipif(not os.environ.get("REMEMBER_PYTHON"), reason="REMEMBER_PYTHON (remember 0.17.2) not set")
def test_the_real_remember_client_accepts_deployment_and_health(stack: tuple[Proc, Proc, str]) -> None:
    _, _, base = stack
    script = (
        "import json, remember\n"
        f"c = remember.Client(base_url={base!r})\n"
        "info = c.deployment_build_info()\n"
        "print(json.dumps(info.model_dump(mode='json')))\n"
    )
    result = subprocess.run([os.environ["REMEMBER_PYTHON"], "-c", script], capture_output=True,
                            text=True, timeout=60, env={"PATH": os.environ.get("PATH", "")})
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert set(info) == {"build_revision", "model_bindings", "document_binding_generation", "tools"}


def test_healthz_is_500_when_the_database_is_down(tmp_path: Path) -> None:
    server = EmbeddedPostgres(tmp_path / "pg", fast=True)
    server.start()
    try:
        asyncio.run(migrate(server.dsn))
        with run_service("queryspace", server.dsn, tmp_path) as svc, \
                run_gateway(server.dsn, tmp_path, queryspace=svc.address) as gateway:
            base = f"http://127.0.0.1:{gateway.extra['http']}"
            assert httpx.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
            server.stop()
            reply = httpx.get(f"{base}/healthz", timeout=30)
            assert reply.status_code == 500
            assert reply.json() == {"detail": "Internal Server Error"}
    finally:
        server.stop()
