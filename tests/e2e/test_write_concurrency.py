"""Deadlock-free under any interleaving (issue #10), against running processes.

Real ingest, several pipeline worker processes and the gateway over one real PostgreSQL:
ingest, new versions, living edits, deletions, re-extractions and dead-letter replays are
interleaved at random over documents that share entities. Afterwards the write side must
be whole: every version final exactly once, deleted documents' facts retracted, no fact
held up only by a deleted document, no 5xx answered, and no deadlock left unretried in
any server log.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
import httpx
import pytest
from testament.pipeline.v1 import pipeline_pb2, pipeline_pb2_grpc

from services.pipeline.adapters.queue import PgQueue
from services.pipeline.domain.work import SPACE_WIDE
from services.platform.db import Database
from services.platform.stages import STAGE_NAMES
from tests.conftest import clone_database
from tests.support import Proc, run_gateway, run_service, shared_entity_document

WORKERS = 3
STRESS_S = float(os.environ.get("TESTAMENT_STRESS_S", "25"))


@dataclass
class Stack:
    dsn: str
    base: str
    pipeline: str
    procs: list[Proc] = field(default_factory=list)

    def server_events(self) -> Counter[str]:
        """Events of interest across every process's log."""
        seen: Counter[str] = Counter()
        for proc in self.procs:
            for line in proc.log_lines():
                event = str(line.get("event"))
                if event in ("db.transient_retry", "db.transient_gave_up", "defect"):
                    seen[event] += 1
                if "Deadlock" in str(line.get("error", "")) and event != "db.transient_retry":
                    seen["unretried_deadlock"] += 1
                # The stages that write entities and facts (label_relation among them) take the
                # space lock first (services/platform/locks.py): a deadlock between them, even a
                # retried one, would mean the lock order is broken
                if "Deadlock" in str(line.get("error", "")) and str(line.get("unit", "")).removeprefix(
                        "complete ") in SPACE_WIDE:
                    seen["space_wide_deadlock"] += 1
        return seen


@contextmanager
def write_stack(pg, tmp: Path, workers: int = WORKERS) -> Iterator[Stack]:
    dsn = clone_database(pg)
    env = {"TESTAMENT_DATA_DIR": str(tmp), "TESTAMENT_WORKER_POLL_S": "0.3", "TESTAMENT_WORKER_CONCURRENCY": "4",
           "TESTAMENT_WORK_RETRY_BACKOFF_BASE_S": "0.2", "TESTAMENT_WORK_RETRY_BACKOFF_MAX_S": "1"}
    with ExitStack() as stack:
        ingest = stack.enter_context(run_service("ingest", dsn, tmp, **env))
        pipelines = [stack.enter_context(run_service("pipeline", dsn, tmp, **env)) for _ in range(workers)]
        gateway = stack.enter_context(run_gateway(dsn, tmp, ingest=ingest.address, pipeline=pipelines[0].address))
        yield Stack(dsn, f"http://127.0.0.1:{gateway.extra['http']}", pipelines[0].address,
                    [ingest, *pipelines, gateway])


async def _fetch(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def sql(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    return asyncio.run(_fetch(dsn, query, *args))


def wait_drained(dsn: str, timeout_s: float = 240) -> None:
    """Until no unit is pending, running or waiting to retry."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        (row,) = sql(dsn, "SELECT count(*) AS open FROM work_units WHERE status IN ('pending', 'running', 'failed')")
        if row["open"] == 0:
            return
        time.sleep(0.3)
    raise TimeoutError("the pipeline did not drain")


def check_write_side_whole(dsn: str) -> None:
    """The invariants every interleaving must leave behind."""
    # Every unit ended, once: nothing open, and no (version, stage, unit) twice.
    open_units = sql(dsn, "SELECT stage, status FROM work_units WHERE status IN ('pending', 'running', 'failed')")
    assert open_units == []
    doubled = sql(dsn, """SELECT version_id, stage, unit_key FROM work_units
                           GROUP BY 1, 2, 3 HAVING count(*) FILTER (WHERE status = 'succeeded') > 1""")
    assert doubled == []
    # Every live version is final: ready with its whole stage graph, or failed with a dead letter.
    versions = sql(dsn, """SELECT v.version_id, v.status,
                                  array_agg(DISTINCT w.stage) FILTER (WHERE w.status = 'succeeded') AS done,
                                  count(*) FILTER (WHERE w.status = 'dead_letter') AS dead
                             FROM document_versions v LEFT JOIN work_units w USING (version_id)
                            WHERE v.deleted_at IS NULL GROUP BY 1, 2""")
    for v in versions:
        if v["dead"]:
            assert v["status"] == "failed", dict(v)
        else:
            assert v["status"] == "ready" and set(v["done"] or ()) == set(STAGE_NAMES), dict(v)
    # Deleted documents: every version deleted, none of their claims current testimony.
    assert sql(dsn, """SELECT v.version_id FROM document_versions v JOIN documents d USING (doc_id)
                        WHERE d.deleted_at IS NOT NULL AND v.deleted_at IS NULL""") == []
    assert sql(dsn, """SELECT c.claim_id FROM claims c JOIN documents d USING (doc_id)
                        WHERE d.deleted_at IS NOT NULL AND c.is_current_testimony""") == []
    # Deletion wins: no unit of a deleted version committed work after the deletion.
    late = sql(dsn, """SELECT w.stage, w.status FROM work_units w JOIN document_versions v USING (version_id)
                        WHERE v.deleted_at IS NOT NULL AND w.status = 'succeeded' AND w.finished_at > v.deleted_at""")
    assert late == []
    # No fact still held up only by deleted documents.
    orphaned = sql(dsn, """SELECT f.fact_id, f.label FROM facts f
                            WHERE f.invalidated_at IS NULL
                              AND EXISTS (SELECT 1 FROM fact_evidence e WHERE e.fact_id = f.fact_id)
                              AND NOT EXISTS (SELECT 1 FROM fact_evidence e JOIN documents d USING (doc_id)
                                               WHERE e.fact_id = f.fact_id AND e.stance = 'supports'
                                                 AND d.deleted_at IS NULL)""")
    assert orphaned == [], [(r["label"], [dict(e) for e in sql(
        dsn, """SELECT e.stance, c.is_current_testimony, d.deleted_at IS NOT NULL AS deleted, f.support_state,
                       f.evidence_count, (SELECT array_agg(outcome || '/' || method ORDER BY decided_at)
                                            FROM fact_decisions x WHERE x.fact_id = f.fact_id) AS decisions
                  FROM fact_evidence e JOIN claims c USING (claim_id) JOIN documents d ON d.doc_id = e.doc_id
                  JOIN facts f ON f.fact_id = e.fact_id WHERE e.fact_id = $1""", r["fact_id"])]) for r in orphaned]
    # Evidence counts agree with the evidence (distinct current documents).
    wrong = sql(dsn, """SELECT f.fact_id FROM facts f
                         WHERE f.invalidated_at IS NULL AND f.evidence_count <> (
                               SELECT count(DISTINCT e.doc_id) FROM fact_evidence e
                                 JOIN claims c USING (claim_id) JOIN documents d ON d.doc_id = e.doc_id
                                WHERE e.fact_id = f.fact_id AND e.stance = 'supports'
                                  AND c.is_current_testimony AND d.deleted_at IS NULL)""")
    assert wrong == []


# --- the reported sequence ----------------------------------------------------------------

REMEMBER_SEQUENCE = """
import json, sys, tempfile, pathlib, remember
base, rounds = sys.argv[1], int(sys.argv[2])
c = remember.Client(base_url=base)
out = []
tmp = pathlib.Path(tempfile.mkdtemp())
for i in range(rounds):
    ref = f"notes/sequence-{i}.md"
    first = None
    for n in range(3):
        path = tmp / f"s{i}-{n}.md"
        path.write_text(DOCS[(i + n) % len(DOCS)] + f"\\nRevision {n} of round {i}.\\n")
        v = c.ingest(str(path), source_kind="file", source_ref=ref)
        first = first or v
    try:
        c.delete_document(doc_id=first.doc_id)
        status = 200
    except remember.MemoryApiError as e:
        status = e.status_code
    out.append(status)
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.environ.get("REMEMBER_PYTHON"), reason="REMEMBER_PYTHON not set")
def test_ingest_two_more_versions_then_delete_at_once_never_answers_500(pg, tmp_path: Path) -> None:
    docs = [shared_entity_document(random.Random(seed)) for seed in range(6)]
    script = f"DOCS = {json.dumps(docs)}\n" + REMEMBER_SEQUENCE
    with write_stack(pg, tmp_path) as stack:
        result = subprocess.run([os.environ["REMEMBER_PYTHON"], "-c", script, stack.base, "20"],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        statuses = json.loads(result.stdout)
        assert len(statuses) == 20 and set(statuses) <= {200, 404}, statuses
        wait_drained(stack.dsn)
        check_write_side_whole(stack.dsn)
        events = stack.server_events()
        print(f"\nsequence x20: deletes {Counter(statuses)}; deadlocks retried {events['db.transient_retry']}")
        assert events["db.transient_gave_up"] == 0 and events["defect"] == 0
        assert events["unretried_deadlock"] == 0 and events["space_wide_deadlock"] == 0


# --- random interleavings -------------------------------------------------------------------

BAD_BYTES = b"\xff\xfe not UTF-8 at all "


async def _interleave(stack: Stack, seconds: float, seed: int) -> tuple[Counter[str], Counter[int]]:
    rng = random.Random(seed)
    ops: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    docs: dict[str, str] = {}  # source_ref -> doc_id, for documents believed live
    db = await Database.connect(stack.dsn, min_size=1, max_size=2)
    queue = PgQueue(db, owner="stress-ops", lease_s=30, backoff_base_s=0.2, backoff_max_s=1, max_attempts=3)
    deadline = time.monotonic() + seconds

    async with httpx.AsyncClient(base_url=stack.base, timeout=60) as http, \
            grpc.aio.insecure_channel(stack.pipeline) as channel:
        pipeline = pipeline_pb2_grpc.PipelineServiceStub(channel)

        async def ingest(ref: str, body: str | bytes, *, living: bool = False) -> None:
            params = {"filename": f"{ref}.md", "mime": "text/markdown", "source_kind": "file", "source_ref": ref}
            if living:
                params["versioning_mode"] = "living"
            reply = await http.post("/ingest", params=params, content=body if isinstance(body, bytes)
                                    else body.encode(), headers={"content-type": "application/octet-stream"})
            statuses[reply.status_code] += 1
            if reply.status_code == 200:
                docs[ref] = reply.json()["doc_id"]

        async def one() -> None:
            kind = rng.choice(["new", "version", "version", "living", "delete", "delete", "reextract", "replay",
                               "bad"])
            ops[kind] += 1
            if kind == "new":
                await ingest(f"doc-{uuid.uuid4().hex[:8]}", shared_entity_document(rng))
            elif kind == "version":
                ref = rng.choice(sorted(docs)) if docs else f"doc-{uuid.uuid4().hex[:8]}"
                await ingest(ref, shared_entity_document(rng))
            elif kind == "living":
                # one living document per few edits: paragraphs come and go
                ref = f"living-{rng.randrange(3)}"
                await ingest(ref, "\n\n".join(shared_entity_document(rng).split("\n\n")[:rng.randint(2, 4)]),
                             living=True)
            elif kind == "delete" and docs:
                ref = rng.choice(sorted(docs))
                reply = await http.delete(f"/documents/{docs.pop(ref)}")
                statuses[reply.status_code] += 1
            elif kind == "reextract":
                rows = await db.fetch("""SELECT version_id FROM document_versions
                                          WHERE status = 'ready' ORDER BY random() LIMIT 1""")
                if rows:
                    await queue.reextract(rows[0]["version_id"], None)
            elif kind == "replay":
                rows = await db.fetch("SELECT work_id FROM work_units WHERE status = 'dead_letter' "
                                      "ORDER BY random() LIMIT 1")
                if rows:
                    try:
                        await pipeline.ReplayDeadLetter(pipeline_pb2.ReplayDeadLetterRequest(
                            work_unit_id=str(rows[0]["work_id"])), timeout=30)
                        statuses[200] += 1
                    except grpc.aio.AioRpcError as exc:
                        # another replay or a deletion got there first: the documented 404/409
                        assert exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION), exc
                        statuses[409 if exc.code() == grpc.StatusCode.FAILED_PRECONDITION else 404] += 1
            elif kind == "bad":
                await ingest(f"bad-{rng.randrange(4)}", BAD_BYTES + uuid.uuid4().hex.encode())

        async def client() -> None:
            while time.monotonic() < deadline:
                await one()

        try:
            await asyncio.gather(*(client() for _ in range(5)))
        finally:
            await db.close()
    return ops, statuses


def test_random_interleavings_leave_the_write_side_whole(pg, tmp_path: Path) -> None:
    with write_stack(pg, tmp_path) as stack:
        ops, statuses = asyncio.run(_interleave(stack, STRESS_S, seed=10))
        assert not [s for s in statuses if s >= 500], statuses
        assert set(statuses) <= {200, 404, 409}, statuses
        wait_drained(stack.dsn)
        check_write_side_whole(stack.dsn)
        events = stack.server_events()
        print(f"\ninterleavings for {STRESS_S:.0f} s with {WORKERS} pipeline workers: ops {dict(ops)}, "
              f"answers {dict(statuses)}, deadlocks retried {events['db.transient_retry']}")
        assert ops["delete"] and ops["version"] and ops["reextract"]
        assert events["db.transient_gave_up"] == 0 and events["defect"] == 0
        assert events["unretried_deadlock"] == 0 and events["space_wide_deadlock"] == 0


# --- bad timing ------------------------------------------------------------------------------

def test_two_deletes_at_once_and_a_delete_before_the_first_version_is_recorded(pg, tmp_path: Path) -> None:
    from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

    from services.ingest.domain import IngestCommand

    with write_stack(pg, tmp_path, workers=1) as stack:
        params = {"filename": "twice.md", "mime": "text/markdown", "source_kind": "file", "source_ref": "twice"}
        doc_id = httpx.post(f"{stack.base}/ingest", params=params, content=b"# Twice\n\nDana owns the ledger.\n",
                            timeout=30).json()["doc_id"]

        async def both() -> list[int]:
            async with httpx.AsyncClient(base_url=stack.base, timeout=30) as http:
                replies = await asyncio.gather(*(http.delete(f"/documents/{doc_id}") for _ in range(2)))
            return sorted(r.status_code for r in replies)

        assert asyncio.run(both()) == [200, 404]

        # The pair names the document before its first version is recorded: a delete then is
        # the documented 404, and the upload still lands whole.
        space = sql(stack.dsn, "SELECT space_id FROM spaces WHERE is_default")[0][0]
        pending = IngestCommand(filename="slow.md", mime="text/markdown", title="slow.md", source_kind="file",
                                source_ref="slow", source_modified_at=None, versioning_mode="snapshot",
                                source_version_ref=None, attribution=None, acl=())
        slow_id = str(pending.doc_id(space, ""))
        sent_first = asyncio.Event()

        async def upload_slowly() -> ingest_pb2.UploadResponse:
            async def stream():  # type: ignore[no-untyped-def]
                yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(
                    filename="slow.md", mime="text/markdown", source_kind="file", source_ref="slow"))
                yield ingest_pb2.UploadRequest(chunk=b"# Slow\n\n")
                sent_first.set()
                await asyncio.sleep(1.0)
                yield ingest_pb2.UploadRequest(chunk=b"Lena owns the search index.\n")
            async with grpc.aio.insecure_channel(stack.procs[0].address) as channel:
                return await ingest_pb2_grpc.IngestServiceStub(channel).Upload(stream(), timeout=30)

        async def race() -> tuple[ingest_pb2.UploadResponse, int]:
            upload = asyncio.create_task(upload_slowly())
            await sent_first.wait()
            async with httpx.AsyncClient(base_url=stack.base, timeout=30) as http:
                early = await http.delete(f"/documents/{slow_id}")
            return await upload, early.status_code

        recorded, early = asyncio.run(race())
        assert early == 404
        assert recorded.created and recorded.doc_id == slow_id
        assert httpx.delete(f"{stack.base}/documents/{slow_id}", timeout=30).status_code == 200
        wait_drained(stack.dsn)
        check_write_side_whole(stack.dsn)


# --- order independence across workers (issue #12) --------------------------------------------

def _held_facts(stack: Stack, documents: list[bytes], order: list[int]) -> list[tuple[object, ...]]:
    """Upload the documents in ``order`` (all at once, one said-on time) and return what is held:
    label, window and whether it is current, sorted."""
    from testament.ingest.v1 import ingest_pb2, ingest_pb2_grpc

    async def upload_all() -> None:
        async with grpc.aio.insecure_channel(stack.procs[0].address) as channel:
            stub = ingest_pb2_grpc.IngestServiceStub(channel)

            async def one(i: int) -> None:
                async def stream():  # type: ignore[no-untyped-def]
                    yield ingest_pb2.UploadRequest(options=ingest_pb2.UploadOptions(
                        filename=f"n{i}.md", mime="text/markdown", source_kind="file", source_ref=f"n{i}",
                        source_modified_at="2026-07-01T09:00:00Z"))
                    yield ingest_pb2.UploadRequest(chunk=documents[i])
                await stub.Upload(stream(), timeout=60)

            await asyncio.gather(*(one(i) for i in order))

    asyncio.run(upload_all())
    wait_drained(stack.dsn, timeout_s=600)
    return sorted(tuple(r) for r in sql(stack.dsn, """
        SELECT label, valid_from, valid_until, valid_precision, superseded_by IS NULL, invalidated_at IS NULL
          FROM facts"""))


def test_one_and_three_workers_hold_the_same_facts_windows_and_labels(pg, tmp_path: Path) -> None:
    """The bench's generated documents (numbered people and a shared cast), ingested in two
    orders through one pipeline worker and through three: the same facts, windows and labels."""
    from bench.bench_pipeline import _doc

    rng = random.Random(7)
    documents = [_doc(i) for i in range(12)] + [shared_entity_document(rng).encode() for _ in range(12)]
    held = []
    for workers, order in ((1, list(range(len(documents)))), (3, list(reversed(range(len(documents)))))):
        (tmp_path / f"w{workers}").mkdir()
        with write_stack(pg, tmp_path / f"w{workers}", workers=workers) as stack:
            held.append(_held_facts(stack, documents, order))
    assert len(held[0]) > 40
    assert held[0] == held[1], sorted(set(held[0]) ^ set(held[1]))
