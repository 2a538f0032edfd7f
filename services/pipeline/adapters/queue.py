"""The durable work queue in PostgreSQL.

Claiming takes ready rows with ``FOR UPDATE SKIP LOCKED`` (several workers never take
the same unit) and gives each a lease. A unit whose lease expired (its worker died) is
claimable again. A stage's output, the unit's success and the queuing of what comes
next are one transaction that first checks the lease is still ours, so a unit's effects
happen exactly once even when it runs more than once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.pipeline.domain.work import (
    FAILURE_SENTENCES,
    PER_CHUNK,
    SPACE_WIDE,
    Unit,
    backoff_s,
    generation_suffix,
    successors,
)
from services.platform import locks
from services.platform.db import Database
from services.platform.stages import COMPONENT_VERSION

CHANNEL = "testament_work"


# Why a unit of a deleted version finished without writing anything.
VERSION_DELETED = "version deleted"


@dataclass(frozen=True)
class Replay:
    """What a replay did: ``replayed`` (with the unit's new row), ``unknown``,
    ``not_dead_letter`` or ``version_deleted``."""

    outcome: str
    row: asyncpg.Record | None = None


class LeaseLost(Exception):
    """Our lease expired and another worker took the unit: our results are discarded."""


@dataclass(frozen=True)
class Claimed:
    work_id: uuid.UUID
    space_id: uuid.UUID
    version_id: uuid.UUID
    stage: str
    unit_key: str
    attempts: int
    max_attempts: int


class PgQueue:
    def __init__(self, db: Database, *, owner: str, lease_s: float, backoff_base_s: float, backoff_max_s: float,
                 max_attempts: int) -> None:
        self.db = db
        self.owner = owner
        self.lease_s = lease_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.max_attempts = max_attempts

    async def claim(self, limit: int, *, space_wide: int | None = None) -> list[Claimed]:
        """Lease up to ``limit`` ready units, oldest first. With ``space_wide``, units of the
        space-wide stages (which queue on their space's lock) have that budget of their own
        and do not count against ``limit``; without it, one budget serves every stage."""
        await self._bury_poison()
        ready = """((status IN ('pending', 'failed') AND defer_reason IS DISTINCT FROM 'no_route'
                     AND not_before <= clock_timestamp())
                 OR (status = 'running' AND lease_expires_at < clock_timestamp() AND attempts < max_attempts))"""
        rows = await self.db.fetch(
            f"""WITH other AS (
                   SELECT work_id FROM work_units WHERE {ready} AND NOT (stage = ANY($4::text[]))
                    ORDER BY not_before, created_at LIMIT $1 FOR UPDATE SKIP LOCKED),
                 wide AS (
                   SELECT work_id FROM work_units WHERE {ready} AND stage = ANY($4::text[])
                    ORDER BY not_before, created_at LIMIT $5 FOR UPDATE SKIP LOCKED)
               UPDATE work_units w
                  SET status = 'running', attempts = w.attempts + 1, lease_owner = $2,
                      lease_expires_at = clock_timestamp() + make_interval(secs => $3),
                      defer_reason = NULL, updated_at = clock_timestamp(), started_at = clock_timestamp()
                 FROM (SELECT work_id FROM other UNION ALL SELECT work_id FROM wide) next
                WHERE w.work_id = next.work_id
             RETURNING w.work_id, w.space_id, w.version_id, w.stage, w.unit_key, w.attempts, w.max_attempts""",
            limit, self.owner, self.lease_s, sorted(SPACE_WIDE) if space_wide is not None else [], space_wide or 0,
        )
        claimed = [Claimed(**dict(r)) for r in rows]
        converting = [c.version_id for c in claimed if c.stage == "convert"]
        if converting:
            await self.db.execute(
                "UPDATE document_versions SET status = 'converting' WHERE version_id = ANY($1::uuid[]) "
                "AND status = 'ingesting'", converting)
        return claimed

    async def _bury_poison(self) -> None:
        """A unit whose worker died on every attempt (its lease expired with no failure
        recorded) would otherwise be reclaimed forever and take each new worker down with it."""
        found = await self.db.fetch(
            """SELECT work_id, version_id FROM work_units
                WHERE status = 'running' AND lease_expires_at < clock_timestamp() AND attempts >= max_attempts""")
        if not found:
            return

        async def body(conn: asyncpg.Connection) -> None:
            await locks.lock_versions(conn, [r["version_id"] for r in found])
            await conn.execute(
                """WITH poisoned AS (
                       UPDATE work_units
                          SET status = 'dead_letter', error_class = 'unknown', lease_owner = NULL,
                              lease_expires_at = NULL, updated_at = clock_timestamp(),
                              last_error = 'the worker running this unit stopped before finishing on every attempt'
                        WHERE work_id = ANY($2::uuid[]) AND status = 'running'
                          AND lease_expires_at < clock_timestamp() AND attempts >= max_attempts
                    RETURNING version_id)
                   UPDATE document_versions SET status = 'failed', failure_reason = 'unknown', error = $1
                    WHERE version_id IN (SELECT version_id FROM poisoned) AND status <> 'deleted'""",
                FAILURE_SENTENCES["unknown"], [r["work_id"] for r in found],
            )

        await self.db.unit_of_work(body, what="bury poisoned units")

    async def renew(self, unit: Claimed) -> bool:
        result = await self.db.execute(
            """UPDATE work_units SET lease_expires_at = clock_timestamp() + make_interval(secs => $3)
                WHERE work_id = $1 AND lease_owner = $2 AND status = 'running'""",
            unit.work_id, self.owner, self.lease_s,
        )
        return result.endswith(" 1")

    async def complete(self, unit: Claimed, write: Callable[[asyncpg.Connection], Awaitable[Any]] | None = None,
                       *, skipped_note: str | None = None) -> str:
        """Run the stage's writes, mark the unit done and queue its successors, atomically,
        in the lock order of :mod:`services.platform.locks`. A unit of a version deleted
        meanwhile writes nothing and finishes ``skipped``. Returns the unit's final status."""

        async def body(conn: asyncpg.Connection) -> str:
            if unit.stage in SPACE_WIDE:
                await locks.lock_space(conn, unit.space_id)
            # The version row also serialises completions of one version (fan-in sees every unit).
            deleted = (await locks.lock_versions(conn, [unit.version_id])).get(unit.version_id)
            await self._lock_own(conn, unit)
            if deleted is not None:
                await self._finish(conn, unit, "skipped", VERSION_DELETED)
                return "skipped"
            if write is not None:
                await write(conn)
            status = "skipped" if skipped_note else "succeeded"
            await self._finish(conn, unit, status, skipped_note)
            await self._queue_successors(conn, unit)
            return status

        return await self.db.unit_of_work(body, what=f"complete {unit.stage}")

    async def _lock_own(self, conn: asyncpg.Connection, unit: Claimed) -> None:
        mine = await conn.fetchval(
            """SELECT 1 FROM work_units WHERE work_id = $1 AND lease_owner = $2 AND status = 'running'
               FOR UPDATE""", unit.work_id, self.owner)
        if mine is None:
            raise LeaseLost(f"lease on {unit.stage}/{unit.unit_key} was lost")

    @staticmethod
    async def _finish(conn: asyncpg.Connection, unit: Claimed, status: str, note: str | None) -> None:
        await conn.execute(
            """UPDATE work_units SET status = $2, finished_at = clock_timestamp(), updated_at = clock_timestamp(),
                                     lease_owner = NULL, lease_expires_at = NULL, last_error = $3
                WHERE work_id = $1""",
            unit.work_id, status, note,
        )

    async def _queue_successors(self, conn: asyncpg.Connection, unit: Claimed) -> None:
        ordinals: list[int] = []
        stage_done = True
        if unit.stage == "embed_chunk":
            ordinals = [r["ordinal"] for r in await conn.fetch(
                "SELECT ordinal FROM chunks WHERE version_id = $1 ORDER BY ordinal", unit.version_id)]
        if unit.stage == "ground_claims":
            row = await conn.fetchrow(
                """SELECT count(*) FILTER (WHERE status NOT IN ('succeeded', 'skipped')) AS open,
                          count(*) FILTER (WHERE stage = 'extract_claims') AS extracted,
                          count(*) FILTER (WHERE stage = 'ground_claims') AS grounded
                     FROM work_units WHERE version_id = $1 AND stage = ANY($2::text[])
                      AND (CASE WHEN position('#' in unit_key) > 0
                                THEN substr(unit_key, position('#' in unit_key)) ELSE '' END) = $3""",
                unit.version_id, list(PER_CHUNK), generation_suffix(unit.unit_key))
            stage_done = row["open"] == 0 and row["extracted"] == row["grounded"]
        nxt = successors(unit.stage, unit.unit_key, chunk_ordinals=ordinals, stage_done=stage_done)
        if nxt:
            await self.enqueue(conn, unit.space_id, unit.version_id, nxt)
        if unit.stage == "convert":
            await conn.execute("UPDATE document_versions SET status = 'structuring' WHERE version_id = $1 "
                               "AND status IN ('ingesting', 'converting')", unit.version_id)
        elif unit.stage == "structure":
            await conn.execute("UPDATE document_versions SET status = 'ready', failure_reason = NULL, error = NULL "
                               "WHERE version_id = $1 AND status <> 'deleted'", unit.version_id)

    async def enqueue(self, conn: asyncpg.Connection, space_id: uuid.UUID, version_id: uuid.UUID,
                      units: list[Unit]) -> None:
        await conn.executemany(
            """INSERT INTO work_units (space_id, version_id, stage, unit_key, component_version, max_attempts)
               VALUES ($1, $2, $3, $4, $5, $6)
               ON CONFLICT (version_id, stage, unit_key, component_version, space_id) DO NOTHING""",
            [(space_id, version_id, u.stage, u.unit_key, COMPONENT_VERSION[u.stage], self.max_attempts)
             for u in units],
        )

    async def park(self, unit: Claimed, reason: str) -> None:
        """Back to pending with a defer reason; parking spends no attempt."""
        await self.db.execute(
            """UPDATE work_units SET status = 'pending', defer_reason = $3, attempts = greatest(attempts - 1, 0),
                                     lease_owner = NULL, lease_expires_at = NULL, updated_at = clock_timestamp()
                WHERE work_id = $1 AND lease_owner = $2 AND status = 'running'""",
            unit.work_id, self.owner, reason)

    async def fail(self, unit: Claimed, *, reason: str, error: str, permanent: bool,
                   retry_after_s: float | None = None) -> str:
        """Back off and retry, or dead-letter (permanent, or attempts exhausted). Returns the
        outcome; a unit of a version deleted meanwhile is simply ``skipped``."""
        dead = permanent or unit.attempts >= unit.max_attempts
        delay = retry_after_s if retry_after_s is not None else backoff_s(
            unit.attempts, base_s=self.backoff_base_s, max_s=self.backoff_max_s)

        async def body(conn: asyncpg.Connection) -> str:
            deleted = (await locks.lock_versions(conn, [unit.version_id])).get(unit.version_id)
            await self._lock_own(conn, unit)
            if deleted is not None:
                await self._finish(conn, unit, "skipped", VERSION_DELETED)
                return "skipped"
            await conn.execute(
                """UPDATE work_units
                      SET status = $2, last_error = $3, error_class = $4, lease_owner = NULL, lease_expires_at = NULL,
                          not_before = CASE WHEN $2 = 'failed' THEN clock_timestamp() + make_interval(secs => $5)
                                            ELSE not_before END,
                          updated_at = clock_timestamp()
                    WHERE work_id = $1""",
                unit.work_id, "dead_letter" if dead else "failed", error[:4000], reason, delay,
            )
            if dead:
                await conn.execute(
                    """UPDATE document_versions SET status = 'failed', failure_reason = $2, error = $3
                        WHERE version_id = $1 AND status <> 'deleted'""",
                    unit.version_id, reason, FAILURE_SENTENCES[reason],
                )
            return "dead_lettered" if dead else "retry_scheduled"

        try:
            return await self.db.unit_of_work(body, what=f"fail {unit.stage}")
        except LeaseLost:
            raise LeaseLost("lease lost before the failure was recorded") from None

    # --- operators -------------------------------------------------------------------

    async def replay(self, work_id: uuid.UUID, *, attempts: int | None, not_before: dt.datetime | None,
                     space_id: uuid.UUID | None) -> Replay:
        """Put a dead letter back in the queue. A unit of a deleted version is not replayed
        (deletion wins); neither is one that is no longer a dead letter."""
        unit = await self.db.fetchrow(
            "SELECT version_id FROM work_units WHERE work_id = $1 AND ($2::uuid IS NULL OR space_id = $2)",
            work_id, space_id)
        if unit is None:
            return Replay("unknown")

        async def body(conn: asyncpg.Connection) -> Replay:
            if (await locks.lock_versions(conn, [unit["version_id"]])).get(unit["version_id"]) is not None:
                return Replay("version_deleted")
            row = await conn.fetchrow(
                """UPDATE work_units
                      SET status = 'pending', attempts = 0, max_attempts = coalesce($2, max_attempts),
                          not_before = coalesce($3, clock_timestamp()), last_error = NULL, error_class = NULL,
                          finished_at = NULL, updated_at = clock_timestamp()
                    WHERE work_id = $1 AND status = 'dead_letter'
                RETURNING work_id, version_id, stage, unit_key, max_attempts, not_before""",
                work_id, attempts, not_before,
            )
            if row is None:
                return Replay("not_dead_letter")
            # The version is no longer failed: it is processing again.
            await conn.execute(
                """UPDATE document_versions v
                      SET status = CASE WHEN EXISTS (SELECT 1 FROM work_units s WHERE s.version_id = v.version_id
                                                       AND s.stage = 'structure' AND s.status = 'succeeded')
                                        THEN 'ready' ELSE 'ingesting' END,
                          failure_reason = NULL, error = NULL
                    WHERE version_id = $1 AND status = 'failed'
                      AND NOT EXISTS (SELECT 1 FROM work_units d WHERE d.version_id = v.version_id
                                        AND d.status = 'dead_letter')""", row["version_id"])
            return Replay("replayed", row)

        return await self.db.unit_of_work(body, what="replay a dead letter")

    async def reextract(self, version_id: uuid.UUID, space_id: uuid.UUID | None) -> str | None:
        """Run the claim stages of a version again (e.g. after an extractor upgrade) as a new
        generation; what follows them reruns too. Returns the generation, or None when the
        version has no finished extraction to redo (or was deleted)."""

        async def body(conn: asyncpg.Connection) -> str | None:
            live = await locks.lock_versions(conn, [version_id])
            if version_id not in live or live[version_id] is not None:
                return None  # no such version, or deleted
            row = await conn.fetchrow(
                """SELECT v.space_id, count(*) FILTER (WHERE w.stage = 'extract_claims') AS runs
                     FROM document_versions v
                          JOIN work_units w ON w.version_id = v.version_id AND w.space_id = v.space_id
                    WHERE v.version_id = $1 AND ($2::uuid IS NULL OR v.space_id = $2)
                      AND NOT EXISTS (SELECT 1 FROM work_units o WHERE o.version_id = v.version_id
                                        AND o.status IN ('pending', 'running', 'failed', 'dead_letter'))
                    GROUP BY v.space_id""", version_id, space_id)
            chunks = await conn.fetch("SELECT ordinal FROM chunks WHERE version_id = $1 ORDER BY ordinal", version_id)
            if row is None or not chunks:
                return None
            generations = await conn.fetchval(
                "SELECT count(DISTINCT split_part(unit_key, '#', 2)) FROM work_units "
                "WHERE version_id = $1 AND stage = 'extract_claims'", version_id)
            suffix = f"#{generations}"
            await self.enqueue(conn, row["space_id"], version_id,
                               [Unit("extract_claims", f"{c['ordinal']}{suffix}") for c in chunks])
            return suffix

        return await self.db.unit_of_work(body, what="re-extract a version")

    async def resume_no_route(self, routes: set[str], space_id: uuid.UUID | None) -> list[uuid.UUID]:
        rows = await self.db.fetch(
            """UPDATE work_units w SET defer_reason = NULL, not_before = clock_timestamp(),
                                       updated_at = clock_timestamp()
                 FROM document_versions v
                 JOIN content_objects c ON c.space_id = v.space_id AND c.content_hash = v.content_hash
                WHERE w.version_id = v.version_id AND w.defer_reason = 'no_route' AND w.status = 'pending'
                  AND c.mime = ANY($1::text[]) AND ($2::uuid IS NULL OR w.space_id = $2)
            RETURNING w.version_id""",
            sorted(routes), space_id,
        )
        return [r["version_id"] for r in rows]


class Wakeup:
    """LISTEN for new work on a dedicated connection; callers also poll as a fallback."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None
        self.event = asyncio.Event()

    async def start(self) -> None:
        try:
            self._conn = await asyncpg.connect(self._dsn, timeout=10)
            await self._conn.add_listener(CHANNEL, lambda *_: self.event.set())
        except (OSError, asyncpg.PostgresError):
            self._conn = None  # polling still finds the work

    async def wait(self, timeout_s: float) -> None:
        with suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self.event.wait()
        self.event.clear()

    async def close(self) -> None:
        if self._conn is not None:
            with suppress(Exception):
                await self._conn.close(timeout=5)
            self._conn = None
