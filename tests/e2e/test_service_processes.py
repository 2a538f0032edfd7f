"""Each service as a real OS process: health, reflection, UNIMPLEMENTED, auth, scopes."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from testament.common.v1 import deployment_pb2, deployment_pb2_grpc
from testament.graph.v1 import graph_pb2_grpc
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc
from testament.pipeline.v1 import pipeline_pb2_grpc
from testament.queryspace.v1 import queryspace_pb2_grpc
from testament.retrieval.v1 import retrieval_pb2_grpc

from services.platform.auth import Scope
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from tests.support import REPO, run_service, service_env

# service -> (its full name, a stub factory, an RPC the service does not implement yet)
SERVICES = {
    "ingest": ("testament.ingest.v1.IngestService", ingest_pb2_grpc.IngestServiceStub, None, None),
    "pipeline": ("testament.pipeline.v1.PipelineService", pipeline_pb2_grpc.PipelineServiceStub, None, None),
    "retrieval": ("testament.retrieval.v1.RetrievalService", retrieval_pb2_grpc.RetrievalServiceStub, None, None),
    "graph": ("testament.graph.v1.GraphService", graph_pb2_grpc.GraphServiceStub, None, None),
    "queryspace": ("testament.queryspace.v1.QuerySpaceService",
                   queryspace_pb2_grpc.QuerySpaceServiceStub, None, None),
}


def _reflected_services(channel: grpc.Channel) -> set[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                        timeout=5)
    reply = next(iter(replies))
    return {s.name for s in reply.list_services_response.service}


@pytest.mark.parametrize("name", list(SERVICES))
def test_each_service_is_its_own_healthy_process(name: str, dsn: str, tmp: Path) -> None:
    full_name, stub_factory, unbuilt, request = SERVICES[name]
    with run_service(name, dsn, tmp) as svc, grpc.insecure_channel(svc.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", full_name):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

        listed = _reflected_services(channel)
        assert full_name in listed
        assert "testament.common.v1.DeploymentService" in listed

        if unbuilt is not None:
            with pytest.raises(grpc.RpcError) as info:
                getattr(stub_factory(channel), unbuilt)(request, timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert "not implemented" in info.value.details()

        deployment = deployment_pb2_grpc.DeploymentServiceStub(channel)
        assert deployment.CheckHealth(deployment_pb2.CheckHealthRequest(), timeout=5).status == "ok"


async def _issue(dsn: str, scope: Scope) -> str:
    db = await Database.connect(dsn, min_size=1, max_size=1)
    try:
        key, _ = await PgCredentials(db).create_key(scope=scope, label=f"test-{scope.value}")
        return key
    finally:
        await db.close()


def test_keys_and_scopes_are_enforced_by_the_contract(fresh_dsn: str, tmp: Path) -> None:
    with run_service("ingest", fresh_dsn, tmp) as svc, grpc.insecure_channel(svc.address) as channel:
        stub = ingest_pb2_grpc.IngestServiceStub(channel)
        delete = ingest_pb2.DeleteDocumentRequest(doc_id="00000000-0000-0000-0000-000000000001")
        # No key exists yet: the stack is open, so the call reaches the RPC itself.
        with pytest.raises(grpc.RpcError) as info:
            stub.DeleteDocument(delete, timeout=5)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND

        read_key = asyncio.run(_issue(fresh_dsn, Scope.READ))
        write_key = asyncio.run(_issue(fresh_dsn, Scope.WRITE))
        ingest_key = asyncio.run(_issue(fresh_dsn, Scope.INGEST))
        import time

        time.sleep(2.5)  # the "do any keys exist" cache expires

        cases = [
            (None, grpc.StatusCode.UNAUTHENTICATED, "a perimeter credential is required"),
            ("Bearer tsk_" + "x" * 40, grpc.StatusCode.UNAUTHENTICATED, "perimeter authentication failed"),
            ("Bearer not a key", grpc.StatusCode.UNAUTHENTICATED, "perimeter authentication failed"),
            ("Basic abc", grpc.StatusCode.UNAUTHENTICATED, "perimeter authentication failed"),
            (f"Bearer {read_key}", grpc.StatusCode.PERMISSION_DENIED,
             "credential may not perform this operation"),
            (f"Bearer {ingest_key}", grpc.StatusCode.PERMISSION_DENIED,
             "credential may not perform this operation"),
            (f"Bearer {write_key}", grpc.StatusCode.NOT_FOUND, "document_not_found"),
        ]
        for header, code, text in cases:
            metadata = [("authorization", header)] if header else []
            with pytest.raises(grpc.RpcError) as info:
                stub.DeleteDocument(delete, metadata=metadata, timeout=5)
            assert info.value.code() == code, header
            assert text in info.value.details(), header

        # read covers reads; ingest cannot read; health needs no key at all.
        listing = ingest_pb2.ListDocumentsRequest()
        page = stub.ListDocuments(listing, metadata=[("authorization", f"Bearer {read_key}")], timeout=5)
        assert list(page.documents) == []
        with pytest.raises(grpc.RpcError) as info:
            stub.ListDocuments(listing, metadata=[("authorization", f"Bearer {ingest_key}")], timeout=5)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        health = deployment_pb2_grpc.DeploymentServiceStub(channel)
        assert health.CheckHealth(deployment_pb2.CheckHealthRequest(), timeout=5).status == "ok"


def test_an_occupied_port_stops_the_process_with_a_message(dsn: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "services.retrieval"], cwd=REPO, capture_output=True, text=True,
            env=service_env(dsn, TESTAMENT_RETRIEVAL_PORT=str(port)), timeout=60,
        )
    assert result.returncode == 1
    assert f"127.0.0.1:{port}" in result.stderr and "in use" in result.stderr


def test_an_unreachable_database_stops_the_process_with_a_message() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-m", "services.graph"], cwd=REPO, capture_output=True, text=True,
        env=service_env(f"postgresql://postgres:secret@127.0.0.1:{port}/nowhere",
                        TESTAMENT_DB_CONNECT_TIMEOUT_S="2"),
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot reach the database" in result.stderr
    assert "TESTAMENT_DATABASE_URL" in result.stderr
    assert "secret" not in result.stderr
