"""A pipeline process killed mid-load loses nothing and duplicates nothing.

Real processes (ingest, pipeline), a real PostgreSQL and a shared local object store:
200 Markdown documents are uploaded through gRPC while the pipeline works; it is
SIGKILLed half-way, a new pipeline process takes over (expired leases are claimed
again) and every version must end exactly as a clean run would leave it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.platform.stages import STAGE_NAMES
from tests.conftest import clone_database
from tests.support import run_service

DOCUMENTS = 200
FINAL = ("succeeded", "skipped")
PER_CHUNK = ("extract_claims", "ground_claims")

# Only the heading carries the number: chunk boundaries depend on the content of the
# paragraphs, so every document of one template has the same shape (chunks, claims).
TEMPLATES = (
    "# Exporter notes {i:03d}\n\n"
    "Ravi owns the invoice exporter. Dana reviewed the exporter design in June.\n\n"
    "Priya moved the billing migration to October because the ledger needs a rewrite.\n\n"
    "Omar said the payments team will ship the refund flow next quarter.\n",
    "# Team update {i:03d}\n\n"
    "Lena leads the search team. Marco joined the search team in March.\n\n"
    "The indexer runs every night. Lena said the indexer needs more memory.\n\n"
    "Ravi approved the budget for the new cluster on Tuesday.\n",
    "# Incident review {i:03d}\n\n"
    "Sofia ran the incident review. The outage lasted forty minutes.\n\n"
    "Tom fixed the certificate rotation and wrote the postmortem.\n",
)


def document(i: int) -> bytes:
    return TEMPLATES[i % len(TEMPLATES)].format(i=i).encode()


def sql(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetch(query, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


async def upload_all(address: str, numbers: range, *, per_batch: int, pause_s: float) -> dict[int, str]:
    """Upload through the gRPC client stream, a batch at a time; returns number -> version_id."""
    versions: dict[int, str] = {}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = ingest_pb2_grpc.IngestServiceStub(channel)

        async def one(i: int) -> None:
            async def stream():  # type: ignore[no-untyped-def]
                yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(
                    filename=f"notes-{i:03d}.md", mime="text/markdown", source_kind="test",
                    source_ref=f"crash/notes-{i:03d}.md"))
                yield ingest_pb2.UploadRequest(chunk=document(i))

            reply = await stub.Upload(stream(), timeout=30)
            assert reply.created
            versions[i] = reply.version_id

        batch = list(numbers)
        for start in range(0, len(batch), per_batch):
            await asyncio.gather(*(one(i) for i in batch[start:start + per_batch]))
            await asyncio.sleep(pause_s)
    return versions


def progress(dsn: str) -> asyncpg.Record:
    return sql(dsn, """SELECT count(*) FILTER (WHERE stage = 'label_relation' AND status IN ('succeeded', 'skipped'))
                                  AS finished,
                              count(*) FILTER (WHERE status = 'running') AS running,
                              count(*) FILTER (WHERE status NOT IN ('succeeded', 'skipped')) AS open,
                              count(*) FILTER (WHERE status = 'dead_letter') AS dead
                         FROM work_units""")[0]


def wait_until_finished(dsn: str, versions: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        state = progress(dsn)
        assert state["dead"] == 0, "a unit was dead-lettered"
        if state["finished"] == versions and state["open"] == 0:
            return
        assert time.monotonic() < deadline, f"the pipeline did not finish: {dict(state)}"
        time.sleep(0.25)


def per_version_counts(dsn: str) -> dict[uuid.UUID, tuple[int, ...]]:
    rows = sql(dsn, """SELECT v.version_id,
                              (SELECT count(*) FROM sections s WHERE s.version_id = v.version_id) AS sections,
                              (SELECT count(*) FROM chunks c WHERE c.version_id = v.version_id) AS chunks,
                              (SELECT count(*) FROM claims c WHERE c.version_id = v.version_id) AS claims,
                              (SELECT count(*) FROM claim_occurrences o WHERE o.version_id = v.version_id)
                                  AS occurrences,
                              (SELECT count(*) FROM extraction_decisions d WHERE d.version_id = v.version_id)
                                  AS decisions
                         FROM document_versions v""")
    return {r["version_id"]: tuple(r)[1:] for r in rows}


def test_a_killed_pipeline_resumes_without_loss_or_duplicates(pg, tmp_path: Path) -> None:
    dsn = clone_database(pg)
    env = {"TESTAMENT_DATA_DIR": str(tmp_path), "TESTAMENT_WORKER_LEASE_S": "2",
           "TESTAMENT_WORKER_CONCURRENCY": "4", "TESTAMENT_CHUNK_TOKEN_BUDGET": "48"}
    uploaded: dict[int, str] = {}
    errors: list[BaseException] = []

    def ingest_in_background(address: str) -> None:
        try:
            uploaded.update(asyncio.run(upload_all(address, range(DOCUMENTS), per_batch=5, pause_s=0.15)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)

    with run_service("ingest", dsn, tmp_path, **env) as ingest:
        with run_service("pipeline", dsn, tmp_path, **env) as first:
            uploader = threading.Thread(target=ingest_in_background, args=(ingest.address,), daemon=True)
            uploader.start()
            deadline = time.monotonic() + 60
            while True:  # kill in the middle of the load, while units are in flight
                state = progress(dsn)
                if state["finished"] >= DOCUMENTS // 4 and state["running"] > 0:
                    break
                assert state["finished"] < DOCUMENTS, "the load finished before the pipeline could be killed"
                assert time.monotonic() < deadline and not errors, (dict(state), errors)
                time.sleep(0.05)
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(10)
            owner_suffix = f":{first.proc.pid}"

        at_kill = sql(dsn, "SELECT work_id, attempts, lease_owner FROM work_units WHERE status = 'running'")
        orphaned = {r["work_id"]: r["attempts"] for r in at_kill if r["lease_owner"].endswith(owner_suffix)}
        finished_at_kill = progress(dsn)["finished"]
        assert finished_at_kill < DOCUMENTS

        with run_service("pipeline", dsn, tmp_path, **env):
            uploader.join(60)
            assert not errors, errors
            assert len(uploaded) == DOCUMENTS
            wait_until_finished(dsn, DOCUMENTS, timeout_s=120)
            # the reference: the same shapes processed by a pipeline that is never interrupted
            reference = asyncio.run(upload_all(ingest.address, range(900, 900 + len(TEMPLATES)), per_batch=3,
                                               pause_s=0))
            wait_until_finished(dsn, DOCUMENTS + len(TEMPLATES), timeout_s=60)

    # the units the killed process held were claimed again once their leases expired, and finished
    assert orphaned, "no unit was in flight when the pipeline was killed"
    rerun = {r["work_id"]: r for r in sql(dsn, "SELECT work_id, status, attempts FROM work_units "
                                               "WHERE work_id = ANY($1::uuid[])", list(orphaned))}
    for work_id, attempts in orphaned.items():
        assert rerun[work_id]["status"] in FINAL
        assert rerun[work_id]["attempts"] > attempts

    # every version reached its final state, through every stage exactly once
    versions = sql(dsn, "SELECT version_id, status, failure_reason FROM document_versions")
    assert len(versions) == DOCUMENTS + len(TEMPLATES)
    assert {(v["status"], v["failure_reason"]) for v in versions} == {("ready", None)}
    assert sql(dsn, "SELECT status, count(*) FROM work_units WHERE status NOT IN ('succeeded', 'skipped') "
                    "GROUP BY status") == []
    assert sql(dsn, "SELECT version_id, stage, unit_key FROM work_units GROUP BY 1, 2, 3 HAVING count(*) > 1") == []
    units: dict[uuid.UUID, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for row in sql(dsn, "SELECT version_id, stage, unit_key FROM work_units"):
        units[row["version_id"]][row["stage"]].add(row["unit_key"])
    chunk_ordinals: dict[uuid.UUID, set[str]] = defaultdict(set)
    for row in sql(dsn, "SELECT version_id, ordinal FROM chunks"):
        chunk_ordinals[row["version_id"]].add(str(row["ordinal"]))
    for v in versions:
        stages = units[v["version_id"]]
        assert set(stages) == set(STAGE_NAMES), v["version_id"]
        for stage in PER_CHUNK:
            assert stages[stage] == (chunk_ordinals[v["version_id"]] or {""}), (v["version_id"], stage)
        for stage in set(STAGE_NAMES) - set(PER_CHUNK):
            assert stages[stage] == {""}
    assert sql(dsn, "SELECT 1 FROM chunks WHERE embedding IS NULL UNION ALL "
                    "SELECT 1 FROM claims WHERE embedding IS NULL") == []

    # every document has exactly what a clean run of the same shape produced
    counts = per_version_counts(dsn)
    by_number = {i: uuid.UUID(v) for i, v in {**uploaded, **reference}.items()}
    expected = {i % len(TEMPLATES): counts[by_number[i]] for i in reference}
    assert all(shape[1] > 0 and shape[2] > 0 for shape in expected.values()), expected  # chunks and claims
    assert any(shape[1] > 1 for shape in expected.values())  # some documents fan out over several chunks
    mismatched = {i: counts[by_number[i]] for i in uploaded if counts[by_number[i]] != expected[i % len(TEMPLATES)]}
    assert mismatched == {}, expected

    # and no row was written twice
    duplicates = {
        "chunks": "SELECT version_id, ordinal FROM chunks GROUP BY 1, 2 HAVING count(*) > 1",
        "chunk spans": "SELECT version_id, char_start, char_end FROM chunks GROUP BY 1, 2, 3 HAVING count(*) > 1",
        "sections": "SELECT version_id, node_path FROM sections GROUP BY 1, 2 HAVING count(*) > 1",
        "representations": "SELECT version_id FROM representations GROUP BY 1 HAVING count(*) > 1",
        "claims": "SELECT chunk_id, ordinal FROM claims GROUP BY 1, 2 HAVING count(*) > 1",
        "claim spans": "SELECT chunk_id, char_start, char_end, claim_text FROM claims GROUP BY 1, 2, 3, 4 "
                       "HAVING count(*) > 1",
        "claim_occurrences": "SELECT claim_id, chunk_id FROM claim_occurrences GROUP BY 1, 2 HAVING count(*) > 1",
        "claim_drafts": "SELECT chunk_id FROM claim_drafts GROUP BY 1 HAVING count(*) > 1",
        "extraction_decisions": "SELECT chunk_id, kind, reason, char_start, char_end, detail FROM "
                                "extraction_decisions GROUP BY 1, 2, 3, 4, 5, 6 HAVING count(*) > 1",
    }
    found = {name: len(sql(dsn, query)) for name, query in duplicates.items()}
    assert found == dict.fromkeys(duplicates, 0)


def test_three_workers_share_the_queue_and_one_killed_loses_and_repeats_nothing(pg, tmp_path: Path) -> None:
    """Three pipeline processes on one database: all three take units, one is killed with
    units in flight, the other two finish them; every unit is done exactly once."""
    dsn = clone_database(pg)
    env = {"TESTAMENT_DATA_DIR": str(tmp_path), "TESTAMENT_WORKER_LEASE_S": "2",
           "TESTAMENT_WORKER_CONCURRENCY": "2", "TESTAMENT_CHUNK_TOKEN_BUDGET": "48"}
    count = 90
    holders: set[str] = set()
    with run_service("ingest", dsn, tmp_path, **env) as ingest, \
            run_service("pipeline", dsn, tmp_path, **env) as first, \
            run_service("pipeline", dsn, tmp_path, **env), run_service("pipeline", dsn, tmp_path, **env):
        uploaded = asyncio.run(upload_all(ingest.address, range(count), per_batch=10, pause_s=0))
        deadline = time.monotonic() + 120
        victim = f":{first.proc.pid}"
        while True:  # until each worker has been seen holding units and the victim holds one now
            owners = {r["lease_owner"] for r in sql(dsn, "SELECT lease_owner FROM work_units "
                                                         "WHERE status = 'running'")}
            holders |= {o.rsplit(":", 1)[1] for o in owners}
            if len(holders) == 3 and any(o.endswith(victim) for o in owners):
                break
            assert progress(dsn)["finished"] < count, f"finished before all three were seen: {holders}"
            assert time.monotonic() < deadline, holders
            time.sleep(0.02)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        wait_until_finished(dsn, count, timeout_s=240)

    assert len(holders) == 3
    assert sql(dsn, "SELECT version_id, stage, unit_key FROM work_units GROUP BY 1, 2, 3 HAVING count(*) > 1") == []
    assert {(v["status"]) for v in sql(dsn, "SELECT status FROM document_versions")} == {"ready"}
    counts = per_version_counts(dsn)
    by_shape: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    for i, version in uploaded.items():
        by_shape[i % len(TEMPLATES)].add(counts[uuid.UUID(version)])
    assert all(len(shapes) == 1 for shapes in by_shape.values()), by_shape  # same text, same rows: none twice
    assert sql(dsn, "SELECT chunk_id, ordinal FROM claims GROUP BY 1, 2 HAVING count(*) > 1") == []
