"""The Python SDK against a running ingest service: sync and async, unary and streams."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest
from testament import AsyncClient, Client, RPCError
from testament.common.v1 import deployment_pb2

from tests.support import run_service


@pytest.fixture(scope="module")
def address(dsn: str, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("sdk")
    with run_service("ingest", dsn, tmp, TESTAMENT_DATA_DIR=str(tmp)) as ingest:
        yield ingest.address


def test_sync_client_uploads_a_file_and_watches_readiness(address: str, tmp_path: Path) -> None:
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\nRavi owns the invoice exporter.\n")
    with Client(address, timeout=10) as client:
        assert client.deployment.CheckHealth(deployment_pb2.CheckHealthRequest()).status == "ok"
        first = client.upload(path, source_kind="file", source_ref="notes.md",
                              source_modified_at=dt.datetime(2026, 9, 17, 9, 30, tzinfo=dt.UTC))
        assert first.created and first.title == "notes" and first.mime == "text/markdown"
        again = client.upload(path.read_bytes(), filename="notes.md", source_kind="file", source_ref="notes.md")
        assert not again.created and again.version_id == first.version_id
        report = next(client.watch_readiness([first.version_id], live_graph=False, timeout_s=10))
        assert report.versions[0].stages[0].stage == "convert"


def test_errors_carry_the_http_status_and_detail(address: str) -> None:
    with Client(address, timeout=10) as client:
        with pytest.raises(RPCError) as info:
            client.upload(b"x", filename="a.md", source_ref="lonely")
    assert info.value.http_status == 422
    assert info.value.detail == "source_kind and source_ref must be supplied together"
    with pytest.raises(ValueError, match="timezone-aware"):
        Client(address).upload(b"x", filename="a.md", source_kind="f", source_ref="r",
                               source_modified_at=dt.datetime(2026, 1, 1))


def test_async_client_streams_chunks_from_an_async_iterator(address: str) -> None:
    async def run() -> tuple[bool, str]:
        async def chunks():
            for part in (b"# Async\n\n", b"Dana leads finance.\n"):
                yield part

        async with AsyncClient(address, timeout=10) as client:
            reply = await client.upload(chunks(), filename="async.md")
            watch = client.watch_readiness([reply.version_id], live_graph=False, timeout_s=10)
            first = await anext(watch)
            await watch.aclose()
            return reply.created, first.versions[0].version_id

    created, version = asyncio.run(run())
    assert created and version
