"""An object store that stops answering is a retryable 503, not a 500 (real S3 server, stopped)."""

from __future__ import annotations

import asyncio
import json
import uuid

import asyncpg
import httpx
import pytest
from google.rpc import error_details_pb2

from tests.conftest import clone_database
from tests.integration.s3server import run_moto_server
from tests.support import run_gateway, run_service


def test_an_upload_while_the_object_store_is_down_is_unavailable_and_records_nothing(
        pg: str, tmp_path: pytest.TempPathFactory) -> None:
    dsn = clone_database(pg)
    with run_moto_server() as endpoint:
        env = {"TESTAMENT_DATA_DIR": str(tmp_path), "TESTAMENT_OBJECT_STORE": "s3",
               "TESTAMENT_S3_ENDPOINT_URL": endpoint, "TESTAMENT_S3_BUCKET": f"b-{uuid.uuid4().hex[:12]}",
               "TESTAMENT_S3_ACCESS_KEY": "test", "TESTAMENT_S3_SECRET_KEY": "test",
               "TESTAMENT_S3_CREATE_BUCKET": "true"}
        ingest_cm = run_service("ingest", dsn, tmp_path, **env)
        ingest = ingest_cm.__enter__()
    # moto is stopped now; the ingest service and its gateway are still up.
    try:
        with run_gateway(dsn, tmp_path, ingest=ingest.address) as gateway:
            reply = httpx.post(f"http://127.0.0.1:{gateway.extra['http']}/ingest",
                               params={"filename": "a.md", "mime": "text/markdown"}, content=b"# hello",
                               headers={"content-type": "application/octet-stream"}, timeout=120)
            assert reply.status_code == 503, reply.text
            assert "object store is unavailable" in json.dumps(reply.json())
            assert reply.headers.get("retry-after") == "1"
    finally:
        ingest_cm.__exit__(None, None, None)

    async def documents() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM documents"))
        finally:
            await conn.close()

    assert asyncio.run(documents()) == 0


def test_the_outage_maps_to_reason_object_store_unavailable() -> None:
    from google.rpc import code_pb2

    from services.platform.interceptors import map_exception
    from services.platform.objectstore import ObjectStoreUnavailable

    status = map_exception(ObjectStoreUnavailable("connect refused"))
    info = error_details_pb2.ErrorInfo()
    assert status.code == code_pb2.UNAVAILABLE and status.details[0].Unpack(info)
    assert (info.reason, info.metadata["http_status"]) == ("OBJECT_STORE_UNAVAILABLE", "503")
