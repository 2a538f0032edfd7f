"""The durable work queue against a real PostgreSQL.

The queue, the worker, LISTEN/NOTIFY and the database are real; only the stage work
is a scripted fake (each (stage, unit_key) answers ok / retryable failure / permanent
failure / park as the test says). Every assertion reads what an operator would see in
``work_units`` and ``document_versions``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from services.pipeline.adapters.queue import Claimed, LeaseLost, PgQueue, Wakeup
from services.pipeline.app import Done, Park, Worker
from services.pipeline.domain.work import FAILURE_SENTENCES, StageFailure
from services.platform.db import Database
from services.platform.locks import lock_space
from services.platform.stages import COMPONENT_VERSION, STAGE_NAMES

BASE_S = 0.05
MAX_S = 0.4
OK, RETRY, PERMANENT, PARK = "ok", "retry", "permanent", "park"
DONE = ("succeeded", "skipped")


# --- the scripted stand-in for the stage work -------------------------------------------


class ScriptedStages:
    """``script[(stage, unit_key)]`` lists the outcome of each successive run (then ``ok``)."""

    def __init__(self, script: dict[tuple[str, str], list[str]] | None = None, *, delay_s: float = 0.0,
                 reason: str = "provider_unavailable") -> None:
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.delay_s = delay_s
        self.reason = reason
        self.runs: Counter[uuid.UUID] = Counter()  # work_id -> invocations
        self.log: list[Claimed] = []
        self.hooks: dict[str, Callable[[Claimed], Awaitable[None]]] = {}
        self.delays: dict[tuple[str, str], float] = {}

    def count(self, stage: str, unit_key: str = "") -> int:
        return sum(1 for u in self.log if (u.stage, u.unit_key) == (stage, unit_key))

    async def run(self, unit: Claimed) -> Done | Park:
        self.runs[unit.work_id] += 1
        self.log.append(unit)
        if unit.stage in self.hooks:
            await self.hooks[unit.stage](unit)
        await asyncio.sleep(self.delays.get((unit.stage, unit.unit_key), self.delay_s))
        planned = self.script.get((unit.stage, unit.unit_key), [])
        outcome = planned.pop(0) if planned else OK
        if outcome == RETRY:
            raise StageFailure(self.reason, f"scripted retryable failure of {unit.stage}", permanent=False)
        if outcome == PERMANENT:
            raise StageFailure("extraction_failed", f"scripted permanent failure of {unit.stage}", permanent=True)
        if outcome == PARK:
            return Park("no_route")
        return Done(write=None)


# --- seeding and reading -----------------------------------------------------------------


async def default_space(conn: asyncpg.Connection) -> uuid.UUID:
    return await conn.fetchval("SELECT space_id FROM spaces WHERE is_default")


async def seed_version(conn: asyncpg.Connection, *, mime: str = "text/markdown", stage: str | None = "convert",
                       unit_keys: tuple[str, ...] = ("",)) -> uuid.UUID:
    """A content object, a document, its first version and (optionally) its first work units."""
    space = await default_space(conn)
    body = f"document {uuid.uuid4()}".encode()
    content_hash = hashlib.sha256(body).hexdigest()
    await conn.execute(
        """INSERT INTO content_objects (space_id, content_hash, byte_size, mime, object_key)
           VALUES ($1, $2, $3, $4, $5)""",
        space, content_hash, len(body), mime, f"originals/sha256/{content_hash[:2]}/{content_hash}.md")
    doc_id = uuid.uuid4()
    await conn.execute(
        """INSERT INTO documents (doc_id, space_id, source_kind, source_ref, identity_hash, title, versioning_mode, acl)
           VALUES ($1, $2, 'upload', NULL, $3, 'test doc', 'snapshot', '{}')""",
        doc_id, space, content_hash)
    version_id = await conn.fetchval(
        """INSERT INTO document_versions (doc_id, space_id, version_no, content_hash, filename)
           VALUES ($1, $2, 1, $3, 'doc.md') RETURNING version_id""",
        doc_id, space, content_hash)
    if stage is not None:
        await conn.executemany(
            """INSERT INTO work_units (space_id, version_id, stage, unit_key, component_version)
               VALUES ($1, $2, $3, $4, $5)""",
            [(space, version_id, stage, key, COMPONENT_VERSION[stage]) for key in unit_keys])
    return version_id


async def units(conn: asyncpg.Connection, version_id: uuid.UUID) -> dict[tuple[str, str], asyncpg.Record]:
    rows = await conn.fetch("SELECT * FROM work_units WHERE version_id = $1", version_id)
    return {(r["stage"], r["unit_key"]): r for r in rows}


async def version_row(conn: asyncpg.Connection, version_id: uuid.UUID) -> asyncpg.Record:
    return await conn.fetchrow("SELECT status, failure_reason, error FROM document_versions WHERE version_id = $1",
                               version_id)


async def eventually(check: Callable[[], Awaitable[Any]], timeout_s: float = 10.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.05)


def unit_is(conn: asyncpg.Connection, version_id: uuid.UUID, stage: str, *statuses: str,
            unit_key: str = "") -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        row = (await units(conn, version_id)).get((stage, unit_key))
        return row is not None and row["status"] in statuses
    return check


async def record_history(conn: asyncpg.Connection) -> None:
    """Test instrument: every transition of a work unit, as an operator polling would see it."""
    await conn.execute(
        """CREATE TABLE unit_history (seq bigserial PRIMARY KEY, work_id uuid, stage text, status text,
                                      attempts int, not_before timestamptz, updated_at timestamptz);
           CREATE FUNCTION log_unit() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
               INSERT INTO unit_history (work_id, stage, status, attempts, not_before, updated_at)
               VALUES (NEW.work_id, NEW.stage, NEW.status, NEW.attempts, NEW.not_before, NEW.updated_at);
               RETURN NULL;
           END $$;
           CREATE TRIGGER log_unit AFTER UPDATE ON work_units FOR EACH ROW EXECUTE FUNCTION log_unit();""")


# --- fixtures ----------------------------------------------------------------------------


@pytest.fixture()
async def db(fresh_dsn: str) -> AsyncIterator[Database]:
    database = await Database.connect(fresh_dsn, max_size=12)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture()
async def conn(fresh_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(fresh_dsn)
    try:
        yield connection
    finally:
        await connection.close()


def make_queue(db: Database, owner: str = "worker-a", *, lease_s: float = 30.0) -> PgQueue:
    return PgQueue(db, owner=owner, lease_s=lease_s, backoff_base_s=BASE_S, backoff_max_s=MAX_S, max_attempts=3)


@asynccontextmanager
async def running(queue: PgQueue, stages: ScriptedStages, dsn: str, *, concurrency: int = 4,
                  poll_s: float = 0.2) -> AsyncIterator[Worker]:
    worker = Worker(queue, stages, Wakeup(dsn), concurrency=concurrency, poll_s=poll_s)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await task


# --- retries, dead letters, replay -------------------------------------------------------


async def test_a_retryable_failure_backs_off_then_succeeds_on_the_third_attempt(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    await record_history(conn)
    version = await seed_version(conn)
    stages = ScriptedStages({("convert", ""): [RETRY, RETRY, OK]})
    async with running(make_queue(db), stages, fresh_dsn):
        await eventually(unit_is(conn, version, "structure", "succeeded"), what="structure to run")

    work = await units(conn, version)
    convert = work[("convert", "")]
    assert (convert["status"], convert["attempts"], convert["last_error"]) == ("succeeded", 3, None)
    assert stages.count("convert") == 3
    assert ("structure", "") in work  # the next stage was queued
    history = await conn.fetch("SELECT * FROM unit_history WHERE work_id = $1 ORDER BY seq", convert["work_id"])
    assert [(h["status"], h["attempts"]) for h in history] == [
        ("running", 1), ("failed", 1), ("running", 2), ("failed", 2), ("running", 3), ("succeeded", 3)]
    failures = [h for h in history if h["status"] == "failed"]
    for n, failed in enumerate(failures, start=1):
        delay = (failed["not_before"] - failed["updated_at"]).total_seconds()
        assert delay == pytest.approx(BASE_S * 2 ** (n - 1), abs=0.01), n  # 0.05 s, then 0.1 s
    # each retry was claimed only once its back-off had passed
    claims = [h for h in history if h["status"] == "running"]
    assert claims[1]["updated_at"] >= failures[0]["not_before"]
    assert claims[2]["updated_at"] >= failures[1]["not_before"]
    assert failures[1]["not_before"] > failures[0]["not_before"]
    assert dict(await version_row(conn, version)) == {"status": "ready", "failure_reason": None, "error": None}


async def test_exhausted_attempts_dead_letter_and_block_downstream(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    version = await seed_version(conn)
    stages = ScriptedStages({("convert", ""): [RETRY] * 5})
    async with running(make_queue(db), stages, fresh_dsn):
        await eventually(unit_is(conn, version, "convert", "dead_letter"), what="the dead letter")
        await asyncio.sleep(0.6)  # several polls: nothing more happens

    work = await units(conn, version)
    assert list(work) == [("convert", "")]  # no later stage was queued
    convert = work[("convert", "")]
    assert (convert["status"], convert["attempts"], convert["error_class"]) == ("dead_letter", 3,
                                                                                "provider_unavailable")
    assert "scripted retryable failure" in convert["last_error"]
    assert convert["lease_owner"] is None
    assert stages.count("convert") == 3
    assert dict(await version_row(conn, version)) == {
        "status": "failed", "failure_reason": "provider_unavailable",
        "error": FAILURE_SENTENCES["provider_unavailable"]}


async def test_a_permanent_failure_dead_letters_at_once(db: Database, conn: asyncpg.Connection,
                                                        fresh_dsn: str) -> None:
    version = await seed_version(conn)
    stages = ScriptedStages({("convert", ""): [PERMANENT]})
    async with running(make_queue(db), stages, fresh_dsn):
        await eventually(unit_is(conn, version, "convert", "dead_letter"), what="the dead letter")
        await asyncio.sleep(0.4)

    work = await units(conn, version)
    assert list(work) == [("convert", "")]
    assert (work[("convert", "")]["attempts"], work[("convert", "")]["error_class"]) == (1, "extraction_failed")
    assert stages.count("convert") == 1
    assert dict(await version_row(conn, version)) == {
        "status": "failed", "failure_reason": "extraction_failed", "error": FAILURE_SENTENCES["extraction_failed"]}


async def test_replaying_a_dead_letter_runs_it_again_and_downstream_proceeds(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    version = await seed_version(conn)
    stages = ScriptedStages({("convert", ""): [PERMANENT, OK]})
    queue = make_queue(db)
    async with running(queue, stages, fresh_dsn):
        await eventually(unit_is(conn, version, "convert", "dead_letter"), what="the dead letter")
    dead = (await units(conn, version))[("convert", "")]
    assert (await version_row(conn, version))["status"] == "failed"

    replayed = await queue.replay(dead["work_id"], attempts=None, not_before=None, space_id=None)
    assert replayed.outcome == "replayed" and replayed.row is not None and replayed.row["stage"] == "convert"
    again = (await units(conn, version))[("convert", "")]
    assert (again["status"], again["attempts"], again["last_error"], again["error_class"]) == ("pending", 0, None,
                                                                                               None)
    assert dict(await version_row(conn, version)) == {"status": "ingesting", "failure_reason": None, "error": None}
    # a replay of an unknown unit does nothing
    assert (await queue.replay(uuid.uuid4(), attempts=None, not_before=None, space_id=None)).outcome == "unknown"

    async with running(queue, stages, fresh_dsn):
        await eventually(unit_is(conn, version, "label_relation", *DONE), what="the whole graph")

    work = await units(conn, version)
    assert work[("convert", "")]["status"] == "succeeded" and work[("convert", "")]["attempts"] == 1
    assert all(u["status"] in DONE for u in work.values())
    assert {stage for stage, _ in work} == set(STAGE_NAMES)
    assert stages.count("convert") == 2
    assert dict(await version_row(conn, version)) == {"status": "ready", "failure_reason": None, "error": None}
    # nor does a replay of a unit that is no longer a dead letter
    again = await queue.replay(dead["work_id"], attempts=None, not_before=None, space_id=None)
    assert again.outcome == "not_dead_letter" and again.row is None


async def test_replaying_one_of_two_dead_letters_keeps_the_version_failed(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    version = await seed_version(conn, stage="embed_chunk")
    await seed_chunks(conn, version, 2)
    stages = ScriptedStages({("ground_claims", "0"): [PERMANENT], ("ground_claims", "1"): [PERMANENT]})
    queue = make_queue(db)
    async with running(queue, stages, fresh_dsn):
        await eventually(unit_is(conn, version, "ground_claims", "dead_letter", unit_key="0"))
        await eventually(unit_is(conn, version, "ground_claims", "dead_letter", unit_key="1"))
    first = (await units(conn, version))[("ground_claims", "0")]
    assert (await queue.replay(first["work_id"], attempts=None, not_before=None, space_id=None)).outcome == "replayed"
    async with running(queue, stages, fresh_dsn):
        await eventually(unit_is(conn, version, "ground_claims", "succeeded", unit_key="0"))
    # ground_claims/1 is still a dead letter: nothing downstream can run, so the version is still failed
    assert (await units(conn, version))[("ground_claims", "1")]["status"] == "dead_letter"
    assert ("normalize_relations", "") not in await units(conn, version)
    assert dict(await version_row(conn, version)) == {
        "status": "failed", "failure_reason": "extraction_failed", "error": FAILURE_SENTENCES["extraction_failed"]}


# --- leases -------------------------------------------------------------------------------


async def test_a_lost_lease_discards_the_late_completion(db: Database, conn: asyncpg.Connection) -> None:
    await conn.execute("CREATE TABLE lease_markers (owner text NOT NULL)")
    version = await seed_version(conn)
    a = make_queue(db, "owner-a", lease_s=1.0)
    b = make_queue(db, "owner-b", lease_s=30.0)

    def marker(owner: str) -> Callable[[asyncpg.Connection], Awaitable[None]]:
        async def write(c: asyncpg.Connection) -> None:
            await c.execute("INSERT INTO lease_markers (owner) VALUES ($1)", owner)
        return write

    (held,) = await a.claim(1)
    assert held.attempts == 1
    assert await b.claim(1) == []  # leased: not claimable while the lease runs
    await asyncio.sleep(1.2)  # A never renews; its lease expires

    (taken,) = await b.claim(1)
    assert (taken.work_id, taken.attempts) == (held.work_id, 2)
    assert not await a.renew(held)  # A cannot extend a lease it no longer holds
    await b.complete(taken, marker("owner-b"))
    with pytest.raises(LeaseLost):
        await a.complete(held, marker("owner-a"))
    with pytest.raises(LeaseLost):
        await a.fail(held, reason="unknown", error="late", permanent=False)

    assert [r["owner"] for r in await conn.fetch("SELECT owner FROM lease_markers")] == ["owner-b"]
    work = await units(conn, version)
    convert = work[("convert", "")]
    assert (convert["status"], convert["attempts"], convert["lease_owner"]) == ("succeeded", 2, None)
    assert list(work) == [("convert", ""), ("structure", "")]  # successors queued once
    assert (await version_row(conn, version))["status"] == "structuring"


async def test_concurrent_claims_never_hand_out_a_unit_twice(db: Database, conn: asyncpg.Connection) -> None:
    await seed_version(conn, stage="label_relation", unit_keys=tuple(str(i) for i in range(120)))
    queues = [make_queue(db, f"owner-{i}") for i in range(8)]
    batches = await asyncio.gather(*(q.claim(20) for q in queues))
    claimed = [u.work_id for batch in batches for u in batch]
    assert len(claimed) == len(set(claimed)) == 120
    owners = await conn.fetch("SELECT lease_owner, count(*) AS n FROM work_units GROUP BY lease_owner")
    assert sum(r["n"] for r in owners) == 120 and all(r["lease_owner"] for r in owners)


async def test_space_wide_units_have_a_budget_of_their_own(db: Database, conn: asyncpg.Connection) -> None:
    await seed_version(conn, stage="reconcile", unit_keys=("a", "b"))
    await seed_version(conn, stage="convert")
    queue = make_queue(db)
    (first,) = await queue.claim(1)  # one budget for every stage: the oldest
    assert first.stage == "reconcile"
    both = await queue.claim(1, space_wide=1)
    assert sorted(u.stage for u in both) == ["convert", "reconcile"]
    assert await queue.claim(1, space_wide=1) == []


async def test_a_unit_waiting_on_its_space_lock_does_not_hold_the_only_slot(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    waiting = await seed_version(conn, stage="reconcile")
    other = await seed_version(conn)  # convert, queued after it
    holder = await asyncpg.connect(fresh_dsn)
    try:
        tx = holder.transaction()
        await tx.start()
        await lock_space(holder, await default_space(conn))  # another version's fact stage, say
        async with running(make_queue(db), ScriptedStages(), fresh_dsn, concurrency=1):
            await eventually(unit_is(conn, other, "structure", *DONE), what="the other version to move on")
            assert (await units(conn, waiting))[("reconcile", "")]["status"] == "running"
            await tx.rollback()
            await eventually(unit_is(conn, waiting, "reconcile", "succeeded"), what="the lock's release")
    finally:
        await holder.close()


async def test_a_pool_without_custom_plans_keeps_the_plan_cache(fresh_dsn: str) -> None:
    # The read path's "$n IS NULL OR …" predicates need custom plans; the units' key lookups and
    # writes do not, and planning them on every run was a fifth of an ingest's database CPU.
    for custom, expected in ((True, "force_custom_plan"), (False, "auto")):
        database = await Database.connect(fresh_dsn, max_size=1, custom_plans=custom)
        try:
            assert await database.fetchval("SHOW plan_cache_mode") == expected
        finally:
            await database.close()


async def test_four_workers_run_every_unit_exactly_once(conn: asyncpg.Connection, fresh_dsn: str) -> None:
    for _ in range(6):
        await seed_version(conn, stage="label_relation", unit_keys=tuple(str(i) for i in range(20)))
    total = 120
    databases = [await Database.connect(fresh_dsn, max_size=6) for _ in range(4)]
    fakes = [ScriptedStages(delay_s=0.01) for _ in range(4)]
    try:
        async with running(make_queue(databases[0], "w0"), fakes[0], fresh_dsn), \
                running(make_queue(databases[1], "w1"), fakes[1], fresh_dsn), \
                running(make_queue(databases[2], "w2"), fakes[2], fresh_dsn), \
                running(make_queue(databases[3], "w3"), fakes[3], fresh_dsn):
            async def all_done() -> bool:
                return await conn.fetchval("SELECT count(*) FROM work_units WHERE status = 'succeeded'") == total
            await eventually(all_done, timeout_s=20, what="all 120 units")
    finally:
        for database in databases:
            await database.close()

    runs: Counter[uuid.UUID] = Counter()
    for fake in fakes:
        runs.update(fake.runs)
    work_ids = {r["work_id"] for r in await conn.fetch("SELECT work_id FROM work_units")}
    assert set(runs) == work_ids and len(work_ids) == total
    assert set(runs.values()) == {1}  # none twice
    assert sum(1 for fake in fakes if fake.runs) >= 2  # the work really was shared
    rows = await conn.fetch("SELECT status, attempts, count(*) AS n FROM work_units GROUP BY 1, 2")
    assert [tuple(r) for r in rows] == [("succeeded", 1, total)]


# --- the stage graph: fan-out and fan-in -----------------------------------------------------


async def seed_chunks(conn: asyncpg.Connection, version_id: uuid.UUID, count: int) -> None:
    row = await conn.fetchrow("SELECT space_id, doc_id FROM document_versions WHERE version_id = $1", version_id)
    representation = uuid.uuid4()
    await conn.execute(
        """INSERT INTO representations (representation_id, space_id, version_id, object_key, markdown_sha256,
                                        char_count, converter)
           VALUES ($1, $2, $3, 'representations/x.md', $4, $5, 'passthrough')""",
        representation, row["space_id"], version_id, "0" * 64, 100 * count)
    await conn.executemany(
        """INSERT INTO chunks (chunk_id, space_id, doc_id, version_id, representation_id, ordinal, block_start,
                               block_end, char_start, char_end, token_count, chunk_text, content_hash)
           VALUES ($1, $2, $3, $4, $5, $6, $6, $6 + 1, $6 * 100, $6 * 100 + 90, 20, $7, $8)""",
        [(uuid.uuid4(), row["space_id"], row["doc_id"], version_id, representation, i, f"passage {i}",
          hashlib.sha256(f"passage {i}".encode()).hexdigest()) for i in range(count)])


async def test_fan_in_queues_normalize_relations_once_after_every_chunk_is_grounded(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    version = await seed_version(conn, stage="embed_chunk")
    await seed_chunks(conn, version, 3)
    stages = ScriptedStages({("ground_claims", "1"): [RETRY, OK]}, delay_s=0.02)
    stages.delays[("ground_claims", "0")] = 0.3  # finishes last but one; chunk 1 retries
    seen_at_fan_in: list[dict[str, str]] = []

    async def inspect(unit: Claimed) -> None:
        # Through the pool, not the test's own connection: the poller below uses that one at
        # the same moment, and a second operation on it fails the stage (which then runs again).
        rows = await db.fetch(
            "SELECT unit_key, status FROM work_units WHERE version_id = $1 AND stage = 'ground_claims'", version)
        seen_at_fan_in.append({r["unit_key"]: r["status"] for r in rows})

    stages.hooks["normalize_relations"] = inspect
    async with running(make_queue(db), stages, fresh_dsn):
        await eventually(unit_is(conn, version, "label_relation", *DONE), what="the whole graph")
        await asyncio.sleep(0.3)

    work = await units(conn, version)
    per_chunk = {k: u for k, u in work.items() if k[0] in ("extract_claims", "ground_claims")}
    assert sorted(per_chunk) == [(s, str(i)) for s in ("extract_claims", "ground_claims") for i in range(3)]
    assert work[("ground_claims", "1")]["attempts"] == 2
    assert [k for k in work if k[0] == "normalize_relations"] == [("normalize_relations", "")]
    assert stages.count("normalize_relations") == 1
    assert seen_at_fan_in == [{"0": "succeeded", "1": "succeeded", "2": "succeeded"}]
    last_grounded = max(u["finished_at"] for k, u in work.items() if k[0] == "ground_claims")
    assert work[("normalize_relations", "")]["created_at"] >= last_grounded
    assert all(u["status"] in DONE for u in work.values())


async def test_fan_in_holds_when_many_chunks_finish_at_once_across_two_workers(
        conn: asyncpg.Connection, fresh_dsn: str) -> None:
    versions = []
    for _ in range(8):
        version = await seed_version(conn, stage="embed_chunk")
        await seed_chunks(conn, version, 4)
        versions.append(version)
    databases = [await Database.connect(fresh_dsn, max_size=10) for _ in range(2)]
    fakes = [ScriptedStages() for _ in range(2)]
    try:
        async with running(make_queue(databases[0], "w0"), fakes[0], fresh_dsn, concurrency=8), \
                running(make_queue(databases[1], "w1"), fakes[1], fresh_dsn, concurrency=8):
            async def all_done() -> bool:
                return await conn.fetchval(
                    "SELECT count(*) FROM work_units WHERE stage = 'label_relation' AND status = ANY($1::text[])",
                    list(DONE)) == len(versions)
            await eventually(all_done, timeout_s=20, what="every version's fan-in")
    finally:
        for database in databases:
            await database.close()

    rows = await conn.fetch("""SELECT version_id, count(*) AS n FROM work_units WHERE stage = 'normalize_relations'
                                GROUP BY version_id""")
    assert sorted(r["n"] for r in rows) == [1] * len(versions)
    assert await conn.fetchval("SELECT count(*) FROM work_units WHERE status NOT IN ('succeeded', 'skipped')") == 0


# --- parking and wake-ups ------------------------------------------------------------------


async def test_a_parked_unit_waits_without_spending_attempts_until_its_route_exists(
        db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    mime = "application/x-testament-unrouted"
    version = await seed_version(conn, mime=mime)
    stages = ScriptedStages({("convert", ""): [PARK]})
    queue = make_queue(db)
    async with running(queue, stages, fresh_dsn):
        async def parked() -> bool:
            row = (await units(conn, version))[("convert", "")]
            return row["defer_reason"] == "no_route"
        await eventually(parked, what="the park")
        await asyncio.sleep(0.7)  # several polls: the parked unit is not claimed again
        convert = (await units(conn, version))[("convert", "")]
        assert (convert["status"], convert["attempts"], convert["lease_owner"]) == ("pending", 0, None)
        assert stages.count("convert") == 1

        assert await queue.resume_no_route({"text/html"}, None) == []  # another route releases nothing
        await asyncio.sleep(0.3)
        assert stages.count("convert") == 1
        assert await queue.resume_no_route({mime}, None) == [version]
        await eventually(unit_is(conn, version, "convert", "succeeded"), what="the released unit")

    convert = (await units(conn, version))[("convert", "")]
    assert (convert["attempts"], convert["defer_reason"]) == (1, None)  # the park spent no attempt
    assert stages.count("convert") == 2


async def test_notify_wakes_a_sleeping_worker(db: Database, conn: asyncpg.Connection, fresh_dsn: str) -> None:
    stages = ScriptedStages()
    async with running(make_queue(db), stages, fresh_dsn, poll_s=30) as worker:
        async def listening() -> bool:
            return worker.wakeup._conn is not None
        await eventually(listening, what="the LISTEN connection")
        await asyncio.sleep(0.5)  # the worker has found nothing and sleeps for up to 30 s
        started = time.monotonic()
        version = await seed_version(conn)

        async def picked_up() -> bool:
            return stages.count("convert") == 1
        await eventually(picked_up, timeout_s=10, what="the wake-up")
        assert time.monotonic() - started < 5
        await eventually(unit_is(conn, version, "convert", "succeeded"))


async def test_a_unit_whose_worker_dies_on_every_attempt_is_dead_lettered(db: Database,
                                                                         conn: asyncpg.Connection) -> None:
    version = await seed_version(conn)
    await conn.execute(
        """UPDATE work_units SET status = 'running', attempts = max_attempts, lease_owner = 'gone',
                                 lease_expires_at = clock_timestamp() - interval '1 second' WHERE version_id = $1""",
        version)
    assert await make_queue(db).claim(5) == []
    unit = (await units(conn, version))[("convert", "")]
    assert unit["status"] == "dead_letter"
    assert dict(await version_row(conn, version))["failure_reason"] == "unknown"
