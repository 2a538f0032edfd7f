"""Ingest throughput: small Markdown documents per second and large-file MB/s, through gRPC
and through the gateway, plus the ingest process's peak memory on a 200 MB upload.

Baseline in the same run: writing the same bytes to a local file (the disk's own speed).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
import uuid

import grpc
import httpx
import psutil
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from bench._common import Row, running_stack

SMALL = 300
LARGE_MB = 200


def _small(i: int) -> bytes:
    return f"# Note {i} {uuid.uuid4()}\n\nRavi met Dana about the billing migration on day {i}.\n".encode()


def _row(case: str, n: int, seconds: float, unit: str, amount: float, baseline: float | None = None) -> Row:
    rate = amount / seconds
    return Row("ingest", case, n, seconds * 1000 / n, seconds * 1000 / n,
               extra=f"{rate:,.1f} {unit}", baseline_p50_ms=baseline)


async def run() -> list[Row]:
    rows: list[Row] = []
    block = os.urandom(1 << 20)
    with tempfile.NamedTemporaryFile() as handle:
        started = time.perf_counter()
        for _ in range(LARGE_MB):
            handle.write(block)
        handle.flush()
        os.fsync(handle.fileno())
        disk = time.perf_counter() - started
    rows.append(_row(f"baseline: write {LARGE_MB} MB to local disk", 1, disk, "MB/s", LARGE_MB))
    async with running_stack(embedding="hash") as (stack, port):
        ingest = next(c for c in stack.children if c.name == "ingest")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ingest.port}") as channel:
            stub = ingest_pb2_grpc.IngestServiceStub(channel)

            async def upload(body: bytes | None, name: str, chunks: int = 0) -> None:
                async def stream():
                    options = ingest_pb2.UploadOptions(filename=name, mime="text/markdown")
                    yield ingest_pb2.UploadRequest(options=options)
                    if body is not None:
                        yield ingest_pb2.UploadRequest(chunk=body)
                    for _ in range(chunks):
                        yield ingest_pb2.UploadRequest(chunk=block)
                await stub.Upload(stream(), timeout=600)

            started = time.perf_counter()
            sem = asyncio.Semaphore(8)

            async def one(i: int) -> None:
                async with sem:
                    await upload(_small(i), f"n{i}.md")

            await asyncio.gather(*(one(i) for i in range(SMALL)))
            rows.append(_row("small Markdown via gRPC (8 in flight)", SMALL, time.perf_counter() - started,
                             "docs/s", SMALL))

            service = psutil.Process(ingest.proc.pid)
            baseline_rss, peak = service.memory_info().rss, [0]
            done = threading.Event()

            def sample() -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], service.memory_info().rss)
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample)
            sampler.start()
            started = time.perf_counter()
            await upload(None, "large.bin", LARGE_MB)
            large = time.perf_counter() - started
            done.set()
            sampler.join()
            rows.append(_row(f"{LARGE_MB} MB via gRPC", 1, large, "MB/s", LARGE_MB, baseline=disk * 1000))
            rows[-1].extra += f"; ingest RSS +{(peak[0] - baseline_rss) / 2**20:.0f} MiB (peak {peak[0] / 2**20:.0f})"

        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            started = time.perf_counter()
            sem = asyncio.Semaphore(8)

            async def post(i: int) -> None:
                async with sem:
                    reply = await client.post("/ingest", params={"filename": f"g{i}.md", "mime": "text/markdown"},
                                              content=_small(i))
                    reply.raise_for_status()

            await asyncio.gather(*(post(i) for i in range(SMALL)))
            rows.append(_row("small Markdown via gateway (8 in flight)", SMALL, time.perf_counter() - started,
                             "docs/s", SMALL))

            async def body():
                for _ in range(LARGE_MB):
                    yield block

            started = time.perf_counter()
            reply = await client.post("/ingest", params={"filename": "big.bin", "mime": "application/octet-stream"},
                                      content=body(), headers={"content-length": str(LARGE_MB << 20)})
            reply.raise_for_status()
            rows.append(_row(f"{LARGE_MB} MB via gateway", 1, time.perf_counter() - started, "MB/s", LARGE_MB,
                             baseline=disk * 1000))
    return rows
