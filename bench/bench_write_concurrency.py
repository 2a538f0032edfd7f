"""Pipeline throughput with 1 and with 3 worker processes (one unit at a time each), on
independent documents and on a corpus whose documents share entities (so the fact stages
of different documents contend for the same entities and facts); and how many deadlocks
had to be retried.

Baseline in the same run: the single worker on the same corpus. On this 2-core machine
(shared with PostgreSQL and the other services) three workers cannot be three times
faster; the ratio shows what replicas buy, that contention (the space lock the fact stages
take, the version locks) does not make more workers slower, and the retry count shows
whether the lock order holds (goal: zero).
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import asyncpg
import grpc
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from bench._common import Row, running_stack
from bench.bench_pipeline import _doc, _wait_all
from tests.support import shared_entity_document

DOCS = 80


async def _load(workers: int, shared: bool) -> Row:
    os.environ["TESTAMENT_PIPELINE_PROCESSES"] = str(workers)
    os.environ["TESTAMENT_WORKER_CONCURRENCY"] = "1"
    os.environ["TESTAMENT_WORKER_POLL_S"] = "0.5"
    try:
        async with running_stack() as (stack, _port):
            assert stack.dsn is not None
            ingest = next(c for c in stack.children if c.name == "ingest")
            rng = random.Random(7)
            bodies = [shared_entity_document(rng).encode() if shared else _doc(i) for i in range(DOCS)]
            started = time.perf_counter()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{ingest.port}") as channel:
                stub = ingest_pb2_grpc.IngestServiceStub(channel)

                async def upload(i: int, body: bytes) -> str:
                    async def stream():  # type: ignore[no-untyped-def]
                        yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(
                            filename=f"n{i}.md", mime="text/markdown"))
                        yield ingest_pb2.UploadRequest(chunk=body)
                    return (await stub.Upload(stream(), timeout=60)).version_id

                versions = list(await asyncio.gather(*(upload(i, b) for i, b in enumerate(bodies))))
            conn = await asyncpg.connect(stack.dsn)
            try:
                await _wait_all(conn, versions)
                wall = time.perf_counter() - started
                facts = await conn.fetchval("SELECT count(*) FROM facts")
                deadlocks = await conn.fetchval(
                    "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            finally:
                await conn.close()
    finally:
        for key in ("TESTAMENT_PIPELINE_PROCESSES", "TESTAMENT_WORKER_CONCURRENCY", "TESTAMENT_WORKER_POLL_S"):
            os.environ.pop(key, None)
    per_doc = wall * 1000 / DOCS
    corpus = "shared entities" if shared else "independent documents"
    return Row("write concurrency", f"{workers} pipeline worker process(es), {corpus}", DOCS, per_doc, per_doc,
               extra=f"{DOCS / wall * 60:,.0f} docs/min, {facts} facts, {deadlocks} deadlocks met "
                     "(each retried by its unit of work)")


async def run() -> list[Row]:
    rows = []
    for shared in (False, True):
        one = await _load(1, shared)
        three = await _load(3, shared)
        three.baseline_p50_ms = one.p50_ms
        rows += [one, three]
    return rows
