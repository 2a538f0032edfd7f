"""The asyncpg pool every service shares the shape of.

Every query carries a timeout: the configured default, shortened to what is
left of the caller's deadline (set per RPC by the deadline interceptor through
:data:`request_deadline`). Codecs (pgvector, jsonb) are registered in the
pool's ``init`` so each connection is ready when it is handed out.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg
from pgvector.asyncpg import register_vector

from services.platform import telemetry

# Absolute loop time by which the current request must be answered (None = no deadline).
request_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "request_deadline", default=None
)

# Below this, a query would only start to be cancelled: refuse it instead.
_MIN_QUERY_TIMEOUT_S = 0.05


class DeadlineSpent(Exception):
    """The caller's deadline has passed before the query could start."""


# A deadlock or a serialization failure aborts the whole transaction, and running the same
# unit again is the documented remedy; anything else is not retried here.
TRANSIENT = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)


class TransientConflict(Exception):
    """A unit of work kept meeting deadlocks or serialization failures after every retry."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"gave up after {attempts} attempts: {type(last).__name__}: {last}")
        self.attempts = attempts
        self.last = last


T = TypeVar("T")


def remaining_timeout(default_s: float) -> float:
    """The timeout for the next I/O step: the default, capped by the request deadline."""
    deadline = request_deadline.get()
    if deadline is None:
        return default_s
    left = deadline - asyncio.get_running_loop().time()
    if left < _MIN_QUERY_TIMEOUT_S:
        raise DeadlineSpent("the request deadline passed before the query could run")
    return min(default_s, left)


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
    )
    await conn.set_type_codec(
        "json", encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
    )
    try:
        await register_vector(conn)
    except ValueError:
        # The vector extension is not installed yet (before the first migration).
        pass


class Database:
    """A pool plus timeout discipline. Use :meth:`acquire`/:meth:`transaction` for several
    statements, or the one-shot helpers for a single statement."""

    def __init__(self, pool: asyncpg.Pool, *, query_timeout_s: float) -> None:
        self._pool = pool
        self.query_timeout_s = query_timeout_s
        # Transactions rolled back and run again after a deadlock or serialization failure.
        self.transient_retries = 0

    @classmethod
    async def connect(
        cls,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        query_timeout_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        application_name: str = "testament",
        custom_plans: bool = True,
    ) -> Database:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=connect_timeout_s,
            command_timeout=query_timeout_s,
            init=_init_connection,
            # The ACL predicates read "$n IS NULL OR acl && $n": a generic plan (which PostgreSQL
            # may pick for a prepared statement after five runs) cannot drop the branch that
            # does not apply and scans every space's documents (213 ms vs 26 ms measured).
            # ``custom_plans=False`` is for pools whose statements are key lookups and writes,
            # run thousands of times: planning each run would be most of their cost.
            server_settings={"application_name": application_name,
                             "plan_cache_mode": "force_custom_plan" if custom_plans else "auto"},
        )
        assert pool is not None
        return cls(pool, query_timeout_s=query_timeout_s)

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool

    def timeout(self) -> float:
        return remaining_timeout(self.query_timeout_s)

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        async with self._pool.acquire(timeout=self.timeout()) as conn:
            yield conn

    @asynccontextmanager
    async def transaction(
        self, *, isolation: str = "read_committed", readonly: bool = False
    ) -> AsyncIterator[asyncpg.Connection]:
        async with self.acquire() as conn, conn.transaction(
            isolation=isolation, readonly=readonly
        ):
            yield conn

    async def unit_of_work(self, body: Callable[[asyncpg.Connection], Awaitable[T]], *, what: str,
                           attempts: int = 6, base_s: float = 0.02, max_s: float = 0.5,
                           isolation: str = "read_committed") -> T:
        """Run ``body`` in one transaction; on a deadlock or serialization failure roll all of
        it back and run it again after a jittered exponential pause, at most ``attempts``
        times and never past the request deadline. ``body`` must be safe to run again: it
        may only change the database (through ``conn``), never state outside it.

        Raises :class:`TransientConflict` when every attempt failed."""
        for attempt in range(1, attempts + 1):
            try:
                async with self.transaction(isolation=isolation) as conn:
                    return await body(conn)
            except TRANSIENT as exc:
                pause = random.uniform(0, min(max_s, base_s * 2 ** (attempt - 1)))
                deadline = request_deadline.get()
                out_of_time = deadline is not None and (
                    deadline - asyncio.get_running_loop().time() < pause + _MIN_QUERY_TIMEOUT_S)
                telemetry.access_log("db.transient_retry" if attempt < attempts and not out_of_time
                                     else "db.transient_gave_up", unit=what, attempt=attempt,
                                     error=type(exc).__name__)
                if attempt == attempts or out_of_time:
                    raise TransientConflict(attempt, exc) from exc
                self.transient_retries += 1
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._pool.fetch(sql, *args, timeout=self.timeout())

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        return await self._pool.fetchrow(sql, *args, timeout=self.timeout())

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._pool.fetchval(sql, *args, timeout=self.timeout())

    async def execute(self, sql: str, *args: Any) -> str:
        return await self._pool.execute(sql, *args, timeout=self.timeout())

    async def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None:
        await self._pool.executemany(sql, args, timeout=self.timeout())

    async def ping(self) -> None:
        await self.fetchval("SELECT 1")

    async def close(self) -> None:
        """Idempotent."""
        if not self._pool.is_closing():
            try:
                async with asyncio.timeout(5.0):
                    await self._pool.close()
            except TimeoutError:
                self._pool.terminate()
