"""Ingest through the gateway and through gRPC, on both object-store backends.

Every test runs against real processes (ingest service, gateway), a real PostgreSQL
and a real object store (a local directory, or an S3-protocol server).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import httpx
import psutil
import pytest
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.platform.auth import Scope
from services.platform.credentials_pg import PgCredentials
from services.platform.db import Database
from tests.conftest import clone_database
from tests.integration.s3server import run_moto_server
from tests.support import run_gateway, run_service

STANDUP = b"""# Stand-up, 17 September 2026

Ravi said the billing migration moves from June to October, because the
invoice exporter needs a rewrite. Dana agreed and will tell finance.
Ravi owns the invoice exporter.
"""


@dataclass
class Stack:
    base: str
    grpc: str
    dsn: str
    objects: Path | None
    backend: str

    def ingest(self, body: bytes, *, headers: dict[str, str] | None = None, **params: str) -> httpx.Response:
        params.setdefault("filename", "doc.md")
        params.setdefault("mime", "text/markdown")
        return httpx.post(f"{self.base}/ingest", params=params, content=body, timeout=60,
                          headers={"content-type": "application/octet-stream", **(headers or {})})

    def sql(self, query: str, *args: object) -> list[asyncpg.Record]:
        async def run() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(self.dsn)
            try:
                return await conn.fetch(query, *args)
            finally:
                await conn.close()

        return asyncio.run(run())


@pytest.fixture(scope="session")
def moto() -> Iterator[str]:
    with run_moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="module", params=["local", "s3"])
def stack(request: pytest.FixtureRequest, pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    backend = request.param
    dsn = clone_database(pg)
    tmp = tmp_path_factory.mktemp(f"ingest-{backend}")
    env = {"TESTAMENT_DATA_DIR": str(tmp)}
    objects = None
    if backend == "s3":
        endpoint = request.getfixturevalue("moto")
        env.update(TESTAMENT_OBJECT_STORE="s3", TESTAMENT_S3_ENDPOINT_URL=endpoint,
                   TESTAMENT_S3_BUCKET=f"b-{uuid.uuid4().hex[:12]}", TESTAMENT_S3_ACCESS_KEY="test",
                   TESTAMENT_S3_SECRET_KEY="test", TESTAMENT_S3_CREATE_BUCKET="true")
    else:
        objects = tmp / "objects"
    with run_service("ingest", dsn, tmp, **env) as ingest, \
            run_gateway(dsn, tmp, ingest=ingest.address) as gateway:
        yield Stack(f"http://127.0.0.1:{gateway.extra['http']}", ingest.address, dsn, objects, backend)


def _objects(stack: Stack) -> int:
    if stack.objects is None:
        return -1
    return sum(1 for p in stack.objects.rglob("*") if p.is_file())


def test_a_new_document_is_stored_once_with_its_first_work(stack: Stack) -> None:
    reply = stack.ingest(STANDUP, filename="standup.md", source_kind="file", source_ref="notes/standup.md",
                         source_modified_at="2026-09-17T09:30:00Z")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"deployment_id", "doc_id", "version_id", "content_hash", "created", "mime", "title",
                         "versioning_mode", "parked"}
    assert body["created"] is True and body["parked"] is None
    assert body["content_hash"] == hashlib.sha256(STANDUP).hexdigest()
    assert (body["title"], body["versioning_mode"], body["mime"]) == ("standup", "snapshot", "text/markdown")
    work = stack.sql("SELECT stage, status FROM work_units WHERE version_id = $1", uuid.UUID(body["version_id"]))
    assert [(w["stage"], w["status"]) for w in work] == [("convert", "pending")]
    stored = stack.sql("SELECT source_modified_at FROM document_versions WHERE version_id = $1",
                       uuid.UUID(body["version_id"]))
    assert stored[0]["source_modified_at"].isoformat() == "2026-09-17T09:30:00+00:00"

    objects_before = _objects(stack)
    again = stack.ingest(STANDUP, filename="standup.md", source_kind="file", source_ref="notes/standup.md")
    assert again.json()["created"] is False and again.json()["version_id"] == body["version_id"]
    assert _objects(stack) == objects_before
    assert len(stack.sql("SELECT 1 FROM work_units WHERE version_id = $1", uuid.UUID(body["version_id"]))) == 1


def test_versions_move_forward_even_on_a_revert(stack: Stack) -> None:
    pair = {"source_kind": "file", "source_ref": f"spec-{stack.backend}.md"}
    first = stack.ingest(b"v1 text", **pair, title="Spec", versioning_mode="living").json()
    second = stack.ingest(b"v2 text", **pair, title="Renamed", versioning_mode="snapshot").json()
    revert = stack.ingest(b"v1 text", **pair).json()
    assert first["doc_id"] == second["doc_id"] == revert["doc_id"]
    assert first["created"] and second["created"] and revert["created"]
    assert len({first["version_id"], second["version_id"], revert["version_id"]}) == 3
    # title and mode are fixed by the first ingest; the response reports what is in force
    assert (second["title"], second["versioning_mode"]) == ("Spec", "living")
    numbers = stack.sql("SELECT version_no FROM document_versions WHERE doc_id = $1 ORDER BY version_no",
                        uuid.UUID(first["doc_id"]))
    assert [r["version_no"] for r in numbers] == [1, 2, 3]


def test_without_a_pair_the_bytes_are_the_identity(stack: Stack) -> None:
    a = stack.ingest(b"unpaired A " + stack.backend.encode()).json()
    again = stack.ingest(b"unpaired A " + stack.backend.encode(), filename="other-name.txt").json()
    b = stack.ingest(b"unpaired B " + stack.backend.encode()).json()
    assert a["doc_id"] == again["doc_id"] and again["created"] is False
    assert b["doc_id"] != a["doc_id"]


def test_source_version_ref_advances_on_unchanged_bytes(stack: Stack) -> None:
    pair = {"source_kind": "git", "source_ref": f"README-{stack.backend}"}
    first = stack.ingest(b"readme", **pair, source_version_ref="abc1").json()
    same = stack.ingest(b"readme", **pair, source_version_ref="abc2").json()
    assert same["created"] is False
    ref = stack.sql("SELECT source_version_ref FROM document_versions WHERE version_id = $1",
                    uuid.UUID(first["version_id"]))
    assert ref[0]["source_version_ref"] == "abc2"


@pytest.mark.parametrize(("params", "detail"), [
    ({"source_ref": "x"}, "source_kind and source_ref must be supplied together"),
    ({"source_kind": "file"}, "source_kind and source_ref must be supplied together"),
    ({"versioning_mode": "living"}, "source timestamps, revisions, and living mode require source_kind/source_ref"),
    ({"source_modified_at": "2026-09-17T09:30:00Z"},
     "source timestamps, revisions, and living mode require source_kind/source_ref"),
    ({"source_version_ref": "r1"}, "source timestamps, revisions, and living mode require source_kind/source_ref"),
    ({"source_kind": "f", "source_ref": "r", "source_modified_at": "2026-09-17T09:30:00"},
     "source_modified_at must be timezone-aware UTC"),
    ({"source_kind": "f", "source_ref": "r", "source_modified_at": "2026-09-17T11:30:00+02:00"},
     "source_modified_at must be timezone-aware UTC"),
])
def test_lineage_errors_use_the_documented_messages(stack: Stack, params: dict[str, str], detail: str) -> None:
    before = stack.sql("SELECT count(*) AS n FROM document_versions")[0]["n"]
    reply = stack.ingest(b"refused " + json.dumps(params).encode(), **params)
    assert (reply.status_code, reply.json()) == (422, {"detail": detail})
    assert stack.sql("SELECT count(*) AS n FROM document_versions")[0]["n"] == before


def test_bad_values_get_the_validation_list(stack: Stack) -> None:
    reply = stack.ingest(b"x", filename="")
    assert reply.status_code == 422
    assert reply.json()["detail"][0]["loc"] == ["query", "filename"]
    reply = httpx.post(f"{stack.base}/ingest", params={"mime": "text/plain"}, content=b"x")
    assert reply.status_code == 422 and reply.json()["detail"][0]["type"] == "missing"
    reply = stack.ingest(b"x", versioning_mode="sometimes")
    assert reply.status_code == 422 and reply.json()["detail"][0]["loc"] == ["query", "versioning_mode"]


def test_an_unknown_mime_is_parked_and_released_by_a_routable_resend(stack: Stack) -> None:
    body = b"%%image-ish bytes " + stack.backend.encode()
    parked = stack.ingest(body, filename="scan.xyz", mime="application/x-unknown")
    assert parked.status_code == 200 and parked.json()["parked"] == "no_route"
    version = uuid.UUID(parked.json()["version_id"])
    report = httpx.post(f"{stack.base}/readiness", json={
        "version_ids": [str(version)], "require": {"pipeline": True, "p1": False, "live_graph": False, "p3": False},
    }).json()
    convert = report["versions"][0]["stages"][0]
    assert (convert["stage"], convert["status"], convert["defer_reason"]) == ("convert", "pending", "no_route")

    released = stack.ingest(body, filename="scan.md", mime="text/markdown")
    assert released.json()["created"] is False and released.json()["parked"] is None
    assert released.json()["mime"] == "text/markdown"
    unit = stack.sql("SELECT defer_reason FROM work_units WHERE version_id = $1", version)
    assert unit[0]["defer_reason"] is None


def test_concurrent_ingests_of_new_bytes_make_one_version(stack: Stack) -> None:
    body = f"raced {uuid.uuid4()}".encode()

    async def race() -> list[bool]:
        async with grpc.aio.insecure_channel(stack.grpc) as channel:
            stub = ingest_pb2_grpc.IngestServiceStub(channel)

            async def one() -> bool:
                async def stream():
                    yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(filename="r.md",
                                                                                    mime="text/markdown"))
                    yield ingest_pb2.UploadRequest(chunk=body)
                return (await stub.Upload(stream(), timeout=30)).created

            return await asyncio.gather(*(one() for _ in range(8)))

    created = asyncio.run(race())
    assert sorted(created) == [False] * 7 + [True]
    rows = stack.sql("SELECT count(*) AS n FROM document_versions WHERE content_hash = $1",
                     hashlib.sha256(body).hexdigest())
    assert rows[0]["n"] == 1


def test_a_cut_off_stream_leaves_nothing_behind(stack: Stack, tmp_path: Path) -> None:
    marker = f"cut {uuid.uuid4()}".encode()
    counts = "SELECT (SELECT count(*) FROM document_versions) + (SELECT count(*) FROM work_units) AS n"
    before, objects = stack.sql(counts)[0]["n"], _objects(stack)

    async def upload_and_vanish() -> None:
        async with grpc.aio.insecure_channel(stack.grpc) as channel:
            stub = ingest_pb2_grpc.IngestServiceStub(channel)

            async def stream():
                yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(filename="c.md", mime="text/markdown"))
                yield ingest_pb2.UploadRequest(chunk=marker * 10000)
                await asyncio.sleep(0.5)
                raise RuntimeError("client went away")

            with pytest.raises((grpc.aio.AioRpcError, RuntimeError, asyncio.CancelledError)):
                await stub.Upload(stream(), timeout=10)

    asyncio.run(upload_and_vanish())
    # the service notices the cut and cleans up on its own time: on a loaded machine, later
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (stack.sql(counts)[0]["n"], _objects(stack)) != (before, objects):
        time.sleep(0.2)
    assert stack.sql(counts)[0]["n"] == before
    assert _objects(stack) == objects


def test_listing_is_newest_first_with_an_exact_cursor(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:6]
    ids = [stack.ingest(f"page doc {i} {tag}".encode(), source_kind="page", source_ref=f"{tag}-{i}").json()["doc_id"]
           for i in range(5)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"{stack.base}/documents", params=params).json()
        assert set(page) == {"documents", "cursor"}
        seen.extend(d["doc_id"] for d in page["documents"])
        cursor = page["cursor"]
        if cursor is None:
            break
    mine = [d for d in seen if d in ids]
    assert mine == list(reversed(ids))
    assert len(seen) == len(set(seen))
    first = httpx.get(f"{stack.base}/documents", params={"limit": "1"}).json()["documents"][0]
    assert set(first) == {"doc_id", "title", "source_kind", "source_uri", "first_seen_at", "latest", "serving"}
    assert set(first["latest"]) == {"version_id", "version_no", "status", "ingested_at", "error"}
    assert first["serving"] is False and first["latest"]["status"] == "ingesting"

    bad = httpx.get(f"{stack.base}/documents", params={"cursor": "not-a-cursor"})
    assert (bad.status_code, bad.json()) == (400, {"detail": "cursor is malformed"})
    assert httpx.get(f"{stack.base}/documents", params={"limit": "0"}).status_code == 422
    assert httpx.get(f"{stack.base}/documents", params={"limit": "201"}).status_code == 422
    assert httpx.get(f"{stack.base}/documents", params={"status": "deleted"}).status_code == 422
    ready = httpx.get(f"{stack.base}/documents", params={"status": "ready"}).json()
    assert ready["documents"] == [] and ready["cursor"] is None


def test_delete_removes_every_version_at_once_and_a_repeat_is_404(stack: Stack) -> None:
    pair = {"source_kind": "file", "source_ref": f"doomed-{stack.backend}"}
    v1 = stack.ingest(b"doomed one", **pair).json()
    stack.ingest(b"doomed two", **pair)
    doc = v1["doc_id"]
    reply = httpx.delete(f"{stack.base}/documents/{doc}")
    assert reply.status_code == 200, reply.text
    assert set(reply.json()) == {"doc_id", "deleted_at", "claims_retired", "relations_closed", "observations_closed"}
    versions = stack.sql("SELECT status, deleted_at FROM document_versions WHERE doc_id = $1", uuid.UUID(doc))
    assert all(v["status"] == "deleted" and v["deleted_at"] is not None for v in versions)
    pending = stack.sql("""SELECT count(*) AS n FROM work_units w JOIN document_versions v USING (version_id)
                           WHERE v.doc_id = $1 AND w.status = 'pending'""", uuid.UUID(doc))
    assert pending[0]["n"] == 0
    listed = httpx.get(f"{stack.base}/documents", params={"limit": "200"}).json()["documents"]
    assert doc not in {d["doc_id"] for d in listed}

    again = httpx.delete(f"{stack.base}/documents/{doc}")
    assert (again.status_code, again.json()) == (404, {"detail": "document_not_found"})
    assert httpx.delete(f"{stack.base}/documents/{uuid.uuid4()}").status_code == 404
    assert httpx.delete(f"{stack.base}/documents/not-a-uuid").status_code == 422

    back = stack.ingest(b"doomed one", **pair).json()
    assert back["created"] is True and back["doc_id"] == doc
    numbers = stack.sql("SELECT version_no FROM document_versions WHERE doc_id = $1 AND deleted_at IS NULL",
                        uuid.UUID(doc))
    assert [r["version_no"] for r in numbers] == [3]


def test_readiness_reports_every_stage_and_capability(stack: Stack) -> None:
    version = stack.ingest(f"ready? {uuid.uuid4()}".encode()).json()["version_id"]
    unknown = str(uuid.uuid4())
    require = {"pipeline": True, "p1": True, "live_graph": False, "p3": False}
    report = httpx.post(f"{stack.base}/readiness", json={"version_ids": [version, unknown, version],
                                                          "require": require}).json()
    assert report["ready"] is False
    assert [v["version_id"] for v in report["versions"]] == [version, unknown]  # duplicates collapse
    stages = report["versions"][0]["stages"]
    assert [s["stage"] for s in stages][:3] == ["convert", "structure", "chunk"] and len(stages) == 12
    assert stages[0]["status"] == "pending" and stages[1]["status"] == "missing"
    assert {s["status"] for s in report["versions"][1]["stages"]} == {"missing"}
    caps = report["capabilities"]
    assert set(caps) == {"pipeline", "p1", "live_graph", "p3"}
    assert caps["pipeline"]["reason"] == "stage_incomplete" and caps["p3"]["reason"] == "corpus_snapshot_incomplete"
    assert caps["live_graph"]["required"] is False and caps["live_graph"]["ready"] is False

    for body in ({"version_ids": [], "require": require},
                 {"version_ids": [str(uuid.uuid4())] * 1001, "require": require},
                 {"version_ids": ["nope"], "require": require},
                 {"version_ids": [version], "require": {"pipeline": True}},
                 {"version_ids": [version], "require": require, "extra": True}):
        assert httpx.post(f"{stack.base}/readiness", json=body).status_code == 422, body


def test_watch_readiness_pushes_reports_until_a_dead_letter(stack: Stack) -> None:
    version = stack.ingest(f"watch me {uuid.uuid4()}".encode()).json()["version_id"]
    require = ingest_pb2.ReadinessRequirements(pipeline=True, p1=True, live_graph=False, p3=False)
    channel = grpc.insecure_channel(stack.grpc)
    stream = ingest_pb2_grpc.IngestServiceStub(channel).WatchReadiness(
        ingest_pb2.WatchReadinessRequest(version_ids=[version], require=require), timeout=30)
    first = next(stream).report
    assert first.versions[0].stages[0].stage == "convert" and not first.ready
    stack.sql("UPDATE work_units SET status = 'dead_letter', attempts = 3 WHERE version_id = $1", uuid.UUID(version))
    rest = list(stream)
    assert rest and rest[-1].report.versions[0].stages[0].status == 6  # dead_letter ends the stream
    channel.close()


def test_acl_and_spaces_confine_what_callers_file_and_see(pg, tmp_path: Path) -> None:
    dsn = clone_database(pg)

    async def keys() -> dict[str, str]:
        db = await Database.connect(dsn, min_size=1, max_size=1)
        try:
            creds = PgCredentials(db)
            await creds.ensure_space("other", "Other tenant")
            out = {}
            for name, scope, principals, space in (("a", Scope.WRITE, ["team-a"], "default"),
                                                   ("b", Scope.WRITE, ["team-b"], "default"),
                                                   ("admin", Scope.WRITE, None, "default"),
                                                   ("other", Scope.WRITE, None, "other")):
                out[name], _ = await creds.create_key(scope=scope, principals=principals, trusted=principals is None,
                                                      space_slug=space)
            return out
        finally:
            await db.close()

    k = asyncio.run(keys())
    with run_service("ingest", dsn, tmp_path) as ingest, run_gateway(dsn, tmp_path, ingest=ingest.address) as gw:
        base = f"http://127.0.0.1:{gw.extra['http']}"

        def call(who: str, method: str, path: str, **kw: object) -> httpx.Response:
            return httpx.request(method, f"{base}{path}", headers={"authorization": f"Bearer {k[who]}"}, **kw)

        filed = call("a", "POST", "/ingest", params={"filename": "a.md", "mime": "text/markdown", "acl": "team-a"},
                     content=b"team a secret")
        assert filed.status_code == 200, filed.text
        refused = call("a", "POST", "/ingest", params={"filename": "b.md", "mime": "text/markdown", "acl": "team-b"},
                       content=b"not yours to file")
        assert (refused.status_code, refused.json()) == (403, {"detail": "credential may not perform this operation"})

        doc = filed.json()["doc_id"]
        listed = {who: {d["doc_id"] for d in call(who, "GET", "/documents").json()["documents"]}
                  for who in ("a", "b", "admin", "other")}
        assert doc in listed["a"] and doc in listed["admin"]
        assert doc not in listed["b"] and doc not in listed["other"]
        # invisible documents cannot be deleted (and look exactly like missing ones)
        assert call("b", "DELETE", f"/documents/{doc}").json() == {"detail": "document_not_found"}
        assert call("other", "DELETE", f"/documents/{doc}").json() == {"detail": "document_not_found"}
        # readiness of an invisible version says nothing about it
        report = call("b", "POST", "/readiness", json={
            "version_ids": [filed.json()["version_id"]],
            "require": {"pipeline": True, "p1": False, "live_graph": False, "p3": False}}).json()
        assert {s["status"] for s in report["versions"][0]["stages"]} == {"missing"}
        # the same bytes filed for another audience are a different document
        same = call("b", "POST", "/ingest", params={"filename": "a.md", "mime": "text/markdown", "acl": "team-b"},
                    content=b"team a secret")
        assert same.status_code == 200 and same.json()["doc_id"] != doc and same.json()["created"] is True
        assert call("other", "POST", "/ingest", params={"filename": "a.md", "mime": "text/markdown"},
                    content=b"team a secret").json()["deployment_id"] != filed.json()["deployment_id"]


def test_body_cap_answers_413_and_411(pg, tmp_path: Path) -> None:
    dsn = clone_database(pg)
    env = {"TESTAMENT_INGEST_BODY_MAX_BYTES": "100"}
    with run_service("ingest", dsn, tmp_path, **env) as ingest, \
            run_gateway(dsn, tmp_path, ingest=ingest.address, extra_env=env) as gw:
        base = f"http://127.0.0.1:{gw.extra['http']}"
        params = {"filename": "x.md", "mime": "text/markdown"}
        big = httpx.post(f"{base}/ingest", params=params, content=b"x" * 101)
        assert (big.status_code, big.json()) == (413, {"detail": "body_too_large"})

        def chunked():
            yield b"no length"

        unsized = httpx.post(f"{base}/ingest", params=params, content=chunked())
        assert (unsized.status_code, unsized.json()) == (411, {"detail": "length_required"})
        assert httpx.post(f"{base}/ingest", params=params, content=b"small").status_code == 200

        async def lie() -> grpc.StatusCode:  # a gRPC caller cannot bypass the cap either
            async with grpc.aio.insecure_channel(ingest.address) as channel:
                async def stream():
                    yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(**params))
                    yield ingest_pb2.UploadRequest(chunk=b"y" * 200)
                try:
                    await ingest_pb2_grpc.IngestServiceStub(channel).Upload(stream(), timeout=10)
                except grpc.aio.AioRpcError as error:
                    return error.code()
                return grpc.StatusCode.OK

        assert asyncio.run(lie()) != grpc.StatusCode.OK


def test_a_large_upload_streams_with_bounded_memory(pg, tmp_path: Path) -> None:
    dsn = clone_database(pg)
    size = 96 * 1024 * 1024
    with run_service("ingest", dsn, tmp_path, TESTAMENT_DATA_DIR=str(tmp_path)) as ingest, \
            run_gateway(dsn, tmp_path, ingest=ingest.address) as gw:
        service = psutil.Process(ingest.proc.pid)
        baseline = service.memory_info().rss
        peak = [baseline]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], service.memory_info().rss)
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()

        def body():
            block = os.urandom(1 << 20)
            for _ in range(size >> 20):
                yield block

        try:
            reply = httpx.post(f"http://127.0.0.1:{gw.extra['http']}/ingest",
                               params={"filename": "big.bin", "mime": "application/octet-stream"},
                               content=body(), headers={"content-length": str(size)}, timeout=300)
        finally:
            done.set()
            sampler.join()
        assert reply.status_code == 200 and reply.json()["parked"] == "no_route"
        growth = peak[0] - baseline
        assert growth < size / 2, f"ingest grew by {growth >> 20} MiB for a {size >> 20} MiB upload"


@pytest.mark.skipif(not os.environ.get("REMEMBER_PYTHON"), reason="REMEMBER_PYTHON not set")
def test_the_real_remember_client_ingests_lists_deletes_and_polls(stack: Stack, tmp_path: Path) -> None:
    if stack.backend != "local":
        pytest.skip("one backend is enough for the client check")
    path = tmp_path / "standup.md"
    path.write_bytes(STANDUP + b"\nclient check\n")
    script = f"""
import json, remember
from datetime import UTC, datetime
c = remember.Client(base_url={stack.base!r})
v = c.ingest({str(path)!r}, source_kind="file", source_ref="notes/client.md",
             source_modified_at=datetime(2026, 9, 17, 9, 30, tzinfo=UTC))
again = c.ingest({str(path)!r}, source_kind="file", source_ref="notes/client.md")
page = c.list_documents(limit=200)
report = c.pipeline_readiness(version_ids=(v.version_id,),
    require=remember.models.ReadinessRequirements(pipeline=True, p1=True, live_graph=True, p3=False))
deleted = c.delete_document(doc_id=v.doc_id)
try:
    c.delete_document(doc_id=v.doc_id)
    repeat = None
except remember.MemoryApiError as e:
    repeat = [e.status_code, e.detail]
listed = str(v.doc_id) in {{str(d.doc_id) for d in page.documents}}
print(json.dumps({{"created": [v.created, again.created], "listed": listed,
    "ready": report.ready, "stages": len(report.versions[0].stages), "deleted": str(deleted.doc_id) == str(v.doc_id),
    "repeat": repeat}}))
"""
    result = subprocess.run([os.environ["REMEMBER_PYTHON"], "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out == {"created": [True, False], "listed": True, "ready": False, "stages": 12, "deleted": True,
                   "repeat": [404, "document_not_found"]}
