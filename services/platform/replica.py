"""Reads from a streaming standby within a stated staleness bound.

``TESTAMENT_READ_DATABASE_URL`` names a hot standby of the primary. Retrieval, graph and
the query space read through a :class:`RoutedReads`, which hands out the replica while it
is *fresh enough* and the primary otherwise:

* Freshness is measured, not guessed from ``pg_last_xact_replay_timestamp()`` (that only
  moves when the primary writes). Every ``probe_s`` the primary's WAL position is sampled
  with the wall-clock instant of the sample; once the replica has replayed up to a
  sample's position, everything committed on the primary before that instant is visible on
  the replica. The newest such instant is the replica's *replay point*.
* The bound: while ``now - replay point`` is at most ``TESTAMENT_REPLICA_MAX_LAG_S`` reads
  go to the replica, so a read may miss at most the writes of the last bound seconds.
  Beyond it (a lagging, paused or unreachable replica) every read goes to the primary.
* A read that must see what was just committed asks for the primary: a belief-time "as of"
  later than the replay point (:func:`fresh_as_of`), and, by construction, readiness and
  the change feed, which are never given a :class:`RoutedReads`. Writes always use the
  primary.

At start the replica must be a standby (``pg_is_in_recovery()``) of the same cluster
(``system_identifier``): a URL that names the primary, or another cluster, is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from services.platform import telemetry
from services.platform.db import Database

# The newest belief-time instant the current request needs to see (None: any fresh replica).
_needs: contextvars.ContextVar[dt.datetime | None] = contextvars.ContextVar("replica_needs", default=None)


class ReplicaMisconfigured(Exception):
    """TESTAMENT_READ_DATABASE_URL does not name a standby of TESTAMENT_DATABASE_URL."""


@contextlib.contextmanager
def fresh_as_of(*instants: object) -> Iterator[None]:
    """Reads in this block must see every write committed before the latest of ``instants``
    (belief-time "as of"); a replica whose replay point is earlier is not used."""
    parsed = [t for t in map(_instant, instants) if t is not None]
    token = _needs.set(max(parsed) if parsed else None)
    try:
        yield
    finally:
        _needs.reset(token)


def _instant(value: object) -> dt.datetime | None:
    """An instant, or None for what is not one (the caller's own validation refuses it)."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, dt.datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


async def check_standby(primary: Database, replica: Database) -> None:
    """Refuse a replica URL that names a primary or a server of another cluster."""
    if not await replica.fetchval("SELECT pg_is_in_recovery()"):
        raise ReplicaMisconfigured(
            "TESTAMENT_READ_DATABASE_URL points at a primary server (pg_is_in_recovery() is false), not at a "
            "streaming standby of TESTAMENT_DATABASE_URL; reads there could never be bounded by replication")
    ids = []
    for db in (primary, replica):
        try:
            ids.append(await db.fetchval("SELECT system_identifier FROM pg_control_system()"))
        except asyncpg.InsufficientPrivilegeError:
            return  # a managed service may hide it; the recovery check above still holds
    if ids[0] != ids[1]:
        raise ReplicaMisconfigured(
            "TESTAMENT_READ_DATABASE_URL is a standby of another cluster (system identifier "
            f"{ids[1]} against the primary's {ids[0]})")


class RoutedReads:
    """A :class:`Database` for reads: the replica while it is fresh, else the primary."""

    def __init__(self, primary: Database, replica: Database, *, max_lag_s: float, probe_s: float = 0.5) -> None:
        self.primary = primary
        self.replica = replica
        self.max_lag_s = max_lag_s
        self.probe_s = probe_s
        self.query_timeout_s = primary.query_timeout_s
        self.replay_point: dt.datetime | None = None  # writes before it are visible on the replica
        self.routed = {"replica": 0, "primary": 0}
        self._samples: deque[tuple[dt.datetime, int]] = deque(maxlen=max(4, int(max_lag_s / probe_s) * 2 + 4))
        self._task: asyncio.Task[None] | None = None
        self._was_fresh: bool | None = None

    # --- freshness ---------------------------------------------------------------------
    async def probe(self) -> None:
        """One sample of the primary's WAL position, and how far the replica has replayed."""
        now = dt.datetime.now(dt.UTC)
        position = int(await self.primary.fetchval("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"))
        self._samples.append((now, position))
        try:
            replayed = await self.replica.fetchval(
                "SELECT (coalesce(pg_last_wal_replay_lsn(), '0/0'::pg_lsn) - '0/0'::pg_lsn)::bigint")
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return  # unreachable: the replay point stays where it was and ages past the bound
        caught_up = [at for at, pos in self._samples if pos <= int(replayed)]
        if caught_up:
            self.replay_point = max(caught_up)

    def lag_s(self) -> float | None:
        if self.replay_point is None:
            return None
        return (dt.datetime.now(dt.UTC) - self.replay_point).total_seconds()

    def fresh(self) -> bool:
        lag = self.lag_s()
        return lag is not None and lag <= self.max_lag_s

    def target(self) -> Database:
        needs = _needs.get()
        fresh = self.fresh()
        if fresh != self._was_fresh:
            self._was_fresh = fresh
            telemetry.access_log("replica.fresh" if fresh else "replica.stale", lag_s=self.lag_s(),
                                 bound_s=self.max_lag_s)
        use = fresh and (needs is None or (self.replay_point is not None and needs <= self.replay_point))
        self.routed["replica" if use else "primary"] += 1
        return self.replica if use else self.primary

    async def start(self) -> None:
        await self.probe()
        await self.probe()  # the second sample confirms the first one's position was replayed
        self._task = asyncio.create_task(self._probing())

    async def _probing(self) -> None:
        while True:
            await asyncio.sleep(self.probe_s)
            try:
                await self.probe()
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                telemetry.access_log("replica.probe_failed", error=type(exc).__name__)

    # --- the Database surface the read paths use (writes go to the primary) -------------
    def timeout(self) -> float:
        return self.primary.timeout()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        async with self.target().acquire() as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self, *, isolation: str = "read_committed",
                          readonly: bool = False) -> AsyncIterator[asyncpg.Connection]:
        db = self.target() if readonly else self.primary
        async with db.transaction(isolation=isolation, readonly=readonly) as conn:
            yield conn

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self.target().fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        return await self.target().fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self.target().fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> str:
        return await self.primary.execute(sql, *args)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.replica.close()
