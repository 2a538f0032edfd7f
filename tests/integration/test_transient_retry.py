"""Transient database errors are handled where they arise: a real deadlock between two units
of work rolls the loser back whole and runs it again; a unit that never gets through
becomes the documented ABORTED / 409, never INTERNAL / 500."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest
from google.rpc import code_pb2, error_details_pb2

from services.platform.db import Database, TransientConflict
from services.platform.interceptors import map_exception


@pytest.fixture()
async def db(fresh_dsn: str):
    database = await Database.connect(fresh_dsn, min_size=2, max_size=4)
    await database.execute("CREATE TABLE pair (id int PRIMARY KEY, hits int NOT NULL DEFAULT 0)")
    await database.execute("INSERT INTO pair (id) VALUES (1), (2)")
    await database.execute("CREATE TABLE side_effects (who text)")
    try:
        yield database
    finally:
        await database.close()


async def test_the_loser_of_a_real_deadlock_is_rolled_back_whole_and_run_again(db: Database) -> None:
    both_hold_one = asyncio.Barrier(2)
    runs = {"a": 0, "b": 0}

    def unit(name: str, first: int, second: int):
        async def body(conn: asyncpg.Connection) -> str:
            runs[name] += 1
            await conn.execute("INSERT INTO side_effects VALUES ($1)", name)
            await conn.execute("UPDATE pair SET hits = hits + 1 WHERE id = $1", first)
            if runs[name] == 1:
                await both_hold_one.wait()  # the first run of each holds one row: a lock cycle
            await conn.execute("UPDATE pair SET hits = hits + 1 WHERE id = $1", second)
            return name
        return body

    done = await asyncio.gather(db.unit_of_work(unit("a", 1, 2), what="a"),
                                db.unit_of_work(unit("b", 2, 1), what="b"))
    assert sorted(done) == ["a", "b"]
    assert sorted(runs.values()) == [1, 2]  # PostgreSQL aborted exactly one; it ran again
    assert db.transient_retries == 1
    # the aborted attempt left nothing behind: one side effect per unit, each row hit twice
    assert sorted(r["who"] for r in await db.fetch("SELECT who FROM side_effects")) == ["a", "b"]
    assert [r["hits"] for r in await db.fetch("SELECT hits FROM pair ORDER BY id")] == [2, 2]


async def test_a_unit_that_always_conflicts_gives_up_after_its_attempts(db: Database) -> None:
    calls = 0

    async def body(conn: asyncpg.Connection) -> None:
        nonlocal calls
        calls += 1
        await conn.execute("INSERT INTO side_effects VALUES ('never kept')")
        raise asyncpg.SerializationError("could not serialize access")

    with pytest.raises(TransientConflict) as raised:
        await db.unit_of_work(body, what="always conflicts", attempts=3, base_s=0.001)
    assert calls == 3 and raised.value.attempts == 3
    assert await db.fetchval("SELECT count(*) FROM side_effects") == 0


async def test_other_errors_are_not_retried(db: Database) -> None:
    calls = 0

    async def body(conn: asyncpg.Connection) -> None:
        nonlocal calls
        calls += 1
        await conn.execute("INSERT INTO pair (id) VALUES (1)")

    with pytest.raises(asyncpg.UniqueViolationError):
        await db.unit_of_work(body, what="duplicate")
    assert calls == 1


@pytest.mark.parametrize("error", [TransientConflict(6, asyncpg.DeadlockDetectedError("deadlock detected")),
                                   asyncpg.DeadlockDetectedError("deadlock detected"),
                                   asyncpg.SerializationError("could not serialize access")])
def test_a_conflict_that_reaches_a_caller_is_aborted_409_and_retryable(error: Exception) -> None:
    status = map_exception(error)
    assert status.code == code_pb2.ABORTED
    info = error_details_pb2.ErrorInfo()
    retry = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info) and status.details[1].Unpack(retry)
    assert (info.reason, info.metadata["http_status"]) == ("TRANSACTION_CONFLICT", "409")
    assert "send it again" in json.loads(info.metadata["detail"])
    assert retry.retry_delay.seconds >= 1


def test_too_many_connections_is_unavailable_not_internal() -> None:
    status = map_exception(asyncpg.TooManyConnectionsError("sorry, too many clients already"))
    assert status.code == code_pb2.UNAVAILABLE
