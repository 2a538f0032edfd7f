"""Redaction on every text retrieval returns (and at ingest), and the change feed, through
real processes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack

import grpc
import pytest
from testament.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc

from services.platform.auth import Scope
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from tests.conftest import clone_database
from tests.e2e.test_pipeline import Pipeline
from tests.support import run_service

POLICY = {"rules": [
    {"name": "email", "detector": "email", "action": "mask", "apply_at": "output", "unless": ["hr"]},
    {"name": "ssn", "detector": "ssn", "action": "mask", "apply_at": "ingest"},
    {"name": "codename", "pattern": "Blackbird", "action": "mask", "apply_at": "output", "unless": ["hr"]},
]}


GRAPH: dict[str, str] = {}


@pytest.fixture(scope="module")
def stack(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pipeline, str, dict[str, str]]]:
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp("redaction")
    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.5",
           "TESTAMENT_REDACTION_POLICY": json.dumps(POLICY)}

    async def keys() -> dict[str, str]:
        db = await Database.connect(dsn, min_size=1, max_size=1)
        try:
            creds = PgCredentials(db)
            hr, _ = await creds.create_key(scope=Scope.READ, principals=["hr"])
            staff, _ = await creds.create_key(scope=Scope.READ, principals=["staff"])
            admin, _ = await creds.create_key(scope=Scope.WRITE, trusted=True)
            return {"hr": hr, "staff": staff, "admin": admin}
        finally:
            await db.close()

    issued = asyncio.run(keys())
    with ExitStack() as stack:
        ingest = stack.enter_context(run_service("ingest", dsn, tmp, **env))
        pipeline = stack.enter_context(run_service("pipeline", dsn, tmp, **env))
        graph = stack.enter_context(run_service("graph", dsn, tmp, **env))
        retrieval = stack.enter_context(run_service("retrieval", dsn, tmp, TESTAMENT_GRAPH_ADDR=graph.address, **env))
        GRAPH["address"] = graph.address
        yield Pipeline(dsn, ingest.address, pipeline.address, tmp), retrieval.address, issued


def _upload(stack: Pipeline, key: str, body: bytes, name: str) -> str:
    with grpc.insecure_channel(stack.ingest) as channel:
        from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

        def stream():
            yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(filename=name, mime="text/markdown"))
            yield ingest_pb2.UploadRequest(chunk=body)
        reply = ingest_pb2_grpc.IngestServiceStub(channel).Upload(
            stream(), metadata=[("authorization", f"Bearer {key}")], timeout=30)
    return reply.version_id


def _wait(stack: Pipeline, key: str, version: str) -> None:
    from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

    require = ingest_pb2.ReadinessRequirements(pipeline=True, p1=True, live_graph=False, p3=False)
    with grpc.insecure_channel(stack.ingest) as channel:
        stub = ingest_pb2_grpc.IngestServiceStub(channel)
        for _ in range(300):
            report = stub.GetReadiness(ingest_pb2.GetReadinessRequest(version_ids=[version], require=require),
                                       metadata=[("authorization", f"Bearer {key}")], timeout=10).report
            if report.ready:
                return
            import time

            time.sleep(0.1)
    raise AssertionError("not ready")


def _search(address: str, key: str, query: str) -> list[str]:
    with grpc.insecure_channel(address) as channel:
        reply = retrieval_pb2_grpc.RetrievalServiceStub(channel).SearchClaims(
            retrieval_pb2.SearchClaimsRequest(query=query, channel=retrieval_pb2.SEARCH_CHANNEL_BM25),
            metadata=[("authorization", f"Bearer {key}")], timeout=10)
    return [e.claim_text for e in reply.envelope.evidence]


def test_output_redaction_masks_unless_the_caller_is_exempt(stack) -> None:
    pipeline, retrieval, keys = stack
    version = _upload(pipeline, keys["admin"], b"# Contacts\n\nRavi owns the payroll inbox ravi@example.com.\n",
                      "contacts.md")
    _wait(pipeline, keys["admin"], version)
    staff = _search(retrieval, keys["staff"], "payroll inbox")
    hr = _search(retrieval, keys["hr"], "payroll inbox")
    assert staff and all("ravi@example.com" not in text for text in staff)
    assert any("[EMAIL]" in text for text in staff)
    assert any("ravi@example.com" in text for text in hr)


def test_graph_routes_redact_names_and_labels_too(stack) -> None:
    from testament.graph.v1 import graph_pb2, graph_pb2_grpc

    pipeline, retrieval, keys = stack
    version = _upload(pipeline, keys["admin"], b"# Escalation\n\nDana Kim owns Project Blackbird.\n",
                      "escalation.md")
    _wait(pipeline, keys["admin"], version)

    def texts(key: str) -> list[str]:
        auth = [("authorization", f"Bearer {key}")]
        with grpc.insecure_channel(retrieval) as channel:
            found = retrieval_pb2_grpc.RetrievalServiceStub(channel).Resolve(
                retrieval_pb2.ResolveRequest(name="Dana Kim"), metadata=auth, timeout=10)
        dana = found.envelope.entities[0].entity_id
        with grpc.insecure_channel(GRAPH["address"]) as channel:
            env = graph_pb2_grpc.GraphServiceStub(channel).Neighborhood(
                graph_pb2.NeighborhoodRequest(entity_id=dana, hops=1, include_paths=True), metadata=auth,
                timeout=10).envelope
        return ([n.name for n in env.nodes] + [e.fact for e in env.edges]
                + [n.name for p in env.paths for n in p.nodes] + [e.fact for p in env.paths for e in p.edges])

    hr, staff = texts(keys["hr"]), texts(keys["staff"])
    assert any("Blackbird" in t for t in hr), hr  # the exempt principal sees it
    assert staff and not any("Blackbird" in t for t in staff), staff
    assert any("[CODENAME]" in t for t in staff), staff


def test_ingest_redaction_never_stores_the_value(stack) -> None:
    pipeline, retrieval, keys = stack
    version = _upload(pipeline, keys["admin"], b"# HR\n\nOmar has the social security number 123-45-6789.\n",
                      "hr.md")
    _wait(pipeline, keys["admin"], version)
    stored = pipeline.sql("SELECT chunk_text FROM chunks WHERE chunk_text LIKE '%social security%'")
    assert stored and all("123-45-6789" not in r[0] for r in stored)
    assert all("123-45-6789" not in text for text in _search(retrieval, keys["hr"], "social security number"))


def _follow(address: str, key: str, cursor: str | None, seconds: float, sink: list) -> None:
    with grpc.insecure_channel(address) as channel:
        request = retrieval_pb2.WatchChangesRequest()
        if cursor:
            request.cursor = cursor
        stream = retrieval_pb2_grpc.RetrievalServiceStub(channel).WatchChanges(
            request, metadata=[("authorization", f"Bearer {key}")], timeout=seconds)
        try:
            for message in stream:
                sink.append(message)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_the_change_feed_follows_live_then_resumes_without_repeats(stack) -> None:
    import threading

    pipeline, retrieval, keys = stack
    admin, staff = [], []
    followers = [threading.Thread(target=_follow, args=(retrieval, keys["admin"], None, 12, admin)),
                 threading.Thread(target=_follow, args=(retrieval, keys["staff"], None, 12, staff))]
    for follower in followers:
        follower.start()
    import time

    time.sleep(1.5)  # both followers are at the live tail
    version = _upload(pipeline, keys["admin"], b"# Feed\n\nLena owns the release calendar.\n\n"
                      b"Mira writes to mira@example.com.\n", "feed.md")
    _wait(pipeline, keys["admin"], version)
    for follower in followers:
        follower.join()
    labels = [m.change.label for m in admin if m.WhichOneof("event") == "change"]
    assert any("release calendar" in label for label in labels)
    cursors = [m.change.cursor for m in admin]
    assert len(cursors) == len(set(cursors)) >= 2
    # Resuming from any cursor delivers exactly what came after it, nothing twice.
    rest: list = []
    _follow(retrieval, keys["admin"], cursors[0], 3, rest)
    assert [m.change.cursor for m in rest] == cursors[1:]
    # Every label a caller receives is redacted for that caller.
    assert all("mira@example.com" not in m.change.label for m in staff + admin)
