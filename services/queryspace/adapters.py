"""PostgreSQL side of the query space: the sandboxed transaction, the schema check and the
saved-query registry.

A statement runs in one READ ONLY, REPEATABLE READ transaction (one snapshot, one
``evaluated_at``) with statement, lock and idle timeouts, work_mem, temp_file_limit and
parallel query off set locally, the caller's space and principals set as transaction-local
settings that the ``memory_v1`` views read, and then ``SET LOCAL ROLE testament_query_space``:
a role that holds USAGE on ``memory_v1`` and SELECT on its views and nothing else. So a
statement the guard wrongly admitted could still neither write nor read a base table.
Public functions that need the service (search, body fetch, graph) are evaluated first, in
the same transaction, as the service's own role; their rows reach the statement as a bound
jsonb parameter.
"""

from __future__ import annotations

import builtins
import datetime as dt
import decimal
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg

from services.platform.auth import Caller
from services.platform.db import Database, DeadlineSpent
from services.queryspace.manifest import SCHEMA, VIEWS

ROLE = "testament_query_space"


class StatementFailed(Exception):
    """A failure after the transaction opened: ``code`` is a public error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RegistryUnreadable(Exception):
    """The saved-query registry could not be read."""


@dataclass(frozen=True)
class Settings:
    statement_timeout_ms: int
    lock_timeout_ms: int
    idle_timeout_ms: int
    work_mem_kib: int
    temp_file_limit_kib: int


@dataclass
class Fetched:
    columns: list[tuple[str, str, str | None]]  # name, asyncpg type name, element type name (arrays)
    rows: list[asyncpg.Record]
    snapshot_at: dt.datetime


def _principals_setting(caller: Caller) -> str:
    if caller.principals is None:
        return "*"
    # A text[] literal: every element quoted, quotes and backslashes escaped.
    items = ['"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"' for p in sorted(caller.principals)]
    return "{" + ",".join(items) + "}"


def failure(exc: BaseException) -> StatementFailed:
    """A caller-safe failure for a database error: a code, the SQLSTATE and its condition
    name; the server's own text only for errors about the statement itself (class 42 except
    privileges), never for data errors, whose text can quote row values."""
    if isinstance(exc, asyncpg.QueryCanceledError):
        return StatementFailed("statement_timeout", "the statement ran past its statement timeout")
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return StatementFailed("lock_timeout", "the statement waited past its lock timeout")
    if isinstance(exc, DeadlineSpent | TimeoutError):
        return StatementFailed("statement_timeout", "the request deadline passed")
    if isinstance(exc, asyncpg.PostgresConnectionError | asyncpg.InterfaceError | asyncpg.CannotConnectNowError
                  | asyncpg.TooManyConnectionsError | ConnectionError | OSError):
        return StatementFailed("pg_unavailable", "the SQL store is unavailable")
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        condition = type(exc).__name__.removesuffix("Error")
        if state.startswith(("53", "54")):
            return StatementFailed("resource_limit", f"the statement hit a resource limit (SQLSTATE {state})")
        if state == "42501":
            return StatementFailed("execution_error", "the statement reached outside the query space")
        if state.startswith("42"):
            message = str(exc).splitlines()[0][:300]
            return StatementFailed("execution_error", f"{message} (SQLSTATE {state})")
        return StatementFailed("execution_error", f"the statement failed: {condition} (SQLSTATE {state})")
    return StatementFailed("execution_error", "the statement failed")


def convert_parameter(value: Any, type_name: str, element: str | None = None) -> Any:
    """A JSON parameter for the type PostgreSQL inferred for its placeholder (no guessing:
    the statement's casts decide). A value that does not fit is an execution error."""
    if value is None:
        return None
    if element is not None:
        if not isinstance(value, list):
            raise StatementFailed("execution_error", f"parameter must be a JSON array for {element}[]")
        return [convert_parameter(v, element) for v in value]
    try:
        if type_name in ("int2", "int4", "int8"):
            if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float)
                                                                          and value.is_integer())):
                raise ValueError
            return int(value)
        if type_name in ("float4", "float8"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError
            return float(value)
        if type_name == "numeric":
            return decimal.Decimal(str(value))
        if type_name == "bool":
            if not isinstance(value, bool):
                raise ValueError
            return value
        if type_name in ("timestamptz", "timestamp"):
            stamp = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            if type_name == "timestamptz" and stamp.tzinfo is None:
                raise ValueError
            return stamp
        if type_name == "date":
            return dt.date.fromisoformat(str(value))
        if type_name == "uuid":
            return uuid.UUID(str(value))
        if type_name in ("jsonb", "json"):
            return value
        if type_name == "interval":
            raise ValueError
    except (ValueError, TypeError, decimal.InvalidOperation):
        raise StatementFailed("execution_error", f"a parameter does not fit the type {type_name}") from None
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, dict | list) else str(value).lower() if isinstance(
        value, bool) else str(value)


def _element(t: Any) -> str | None:
    """The element type name of an array type (asyncpg names arrays ``_text`` or ``text[]``)."""
    if t.kind != "array":
        return None
    return t.name.removeprefix("_").removesuffix("[]")


class PgQuerySpace:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._temp_limit_settable: bool | None = None

    async def _temp_file_limit(self, conn: asyncpg.Connection, kib: int) -> None:
        """temp_file_limit needs superuser (or a grant); without it the other limits still apply.
        Tried once, in a savepoint of the statement's own transaction."""
        if self._temp_limit_settable is False:
            return
        try:
            async with conn.transaction():
                await conn.execute("SELECT set_config('temp_file_limit', $1, true)", f"{kib}kB")
            self._temp_limit_settable = True
        except asyncpg.InsufficientPrivilegeError:
            self._temp_limit_settable = False

    async def schema_differences(self) -> list[str]:
        """Where the database's memory_v1 views differ from the checked-in manifest."""
        rows = await self.db.fetch(
            """SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) AS type
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                WHERE n.nspname = $1 AND c.relkind = 'v' ORDER BY c.relname, a.attnum""", SCHEMA)
        found: dict[str, list[tuple[str, str]]] = {}
        for r in rows:
            found.setdefault(r["relname"], []).append((r["attname"], r["type"]))
        problems = []
        for name, view in VIEWS.items():
            expected = [(c.name, c.type) for c in view.columns]
            if found.get(name) != expected:
                problems.append(name)
        problems.extend(sorted(set(found) - set(VIEWS)))
        return problems

    @asynccontextmanager
    async def sandbox(self, caller: Caller, settings: Settings) -> AsyncIterator[asyncpg.Connection]:
        """One read-only repeatable-read transaction with the limits and the caller set."""
        try:
            async with self.db.acquire() as conn:
                tx = conn.transaction(isolation="repeatable_read", readonly=True)
                await tx.start()
                try:
                    await conn.execute(
                        """SELECT set_config('testament.qs_space', $1, true),
                                  set_config('testament.qs_principals', $2, true),
                                  set_config('statement_timeout', $3, true),
                                  set_config('lock_timeout', $4, true),
                                  set_config('idle_in_transaction_session_timeout', $5, true),
                                  set_config('work_mem', $6, true),
                                  set_config('max_parallel_workers_per_gather', '0', true),
                                  set_config('TimeZone', 'UTC', true),
                                  set_config('plan_cache_mode', 'force_custom_plan', true),
                                  set_config('join_collapse_limit', '16', true),
                                  set_config('from_collapse_limit', '16', true)""",
                        str(caller.space_id), _principals_setting(caller), f"{settings.statement_timeout_ms}ms",
                        f"{settings.lock_timeout_ms}ms", f"{settings.idle_timeout_ms}ms",
                        f"{settings.work_mem_kib}kB")
                    await self._temp_file_limit(conn, settings.temp_file_limit_kib)
                    yield conn
                finally:
                    if not conn.is_closed():
                        await tx.rollback()
        except StatementFailed:
            raise
        except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError, OSError, TimeoutError,
                DeadlineSpent) as exc:
            raise failure(exc) from None

    async def run(self, conn: asyncpg.Connection, sql: str, parameters: Sequence[Any], extra: Sequence[Any], *,
                  probe: int, timeout_s: float) -> Fetched:
        """Prepare and run the statement as the query-space role; fetch at most ``probe`` rows."""
        try:
            snapshot_at = await conn.fetchval("SELECT now()")
            # Bare names resolve to the views (pg_catalog after them), then the role drops every
            # privilege but SELECT on memory_v1.
            await conn.execute("SELECT set_config('search_path', 'memory_v1, pg_catalog', true)")
            await conn.execute(f"SET LOCAL ROLE {ROLE}")
            stmt = await conn.prepare(sql, timeout=timeout_s)
            types = stmt.get_parameters()
            args: list[Any] = []
            for i, value in enumerate(parameters):
                t = types[i]
                args.append(convert_parameter(value, t.name, _element(t)))
            args.extend(extra)
            columns = []
            for a in stmt.get_attributes():
                columns.append((a.name, a.type.name, _element(a.type)))
            rows: list[asyncpg.Record] = []
            if probe > 0:
                async for record in stmt.cursor(*args, prefetch=min(probe, 1000), timeout=timeout_s):
                    rows.append(record)
                    if len(rows) >= probe:
                        break
            return Fetched(columns, rows, snapshot_at)
        except StatementFailed:
            raise
        except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError, OSError, TimeoutError,
                DeadlineSpent) as exc:
            raise failure(exc) from None


# --------------------------------------------------------------------------------------
# saved queries
# --------------------------------------------------------------------------------------

SAVED_COLUMNS = """query_id, namespace, name, version, status, description, origin, assurance, sql, query_hash,
                   validated_surface_manifest_hash, parameter_schema, declared_result_schema,
                   declared_interpretation, default_max_rows, default_statement_timeout_ms, default_max_bytes,
                   validation_report, author_principal, approver_principal"""


class PgSavedQueries:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def spaces(self) -> list[uuid.UUID]:
        return [r[0] for r in await self.db.fetch("SELECT space_id FROM spaces ORDER BY created_at")]

    async def list(self, space: uuid.UUID, namespace: str | None, status: str | None) -> list[asyncpg.Record]:
        if status is None:
            where = "q.status = 'active'"
        elif status == "draft":
            where = """q.status = 'draft' AND q.version = (SELECT max(x.version) FROM saved_queries x
                         WHERE x.space_id = q.space_id AND x.namespace = q.namespace AND x.name = q.name
                           AND x.status = 'draft')"""
        else:
            where = "q.status = $3"
        args: list[Any] = [space, namespace]
        if status not in (None, "draft"):
            args.append(status)
        return await self.db.fetch(
            f"""SELECT {SAVED_COLUMNS} FROM saved_queries q
                 WHERE q.space_id = $1 AND ($2::text IS NULL OR q.namespace = $2) AND {where}
                 ORDER BY q.namespace, q.name, q.version""", *args)

    async def versions(self, space: uuid.UUID, namespace: str, name: str) -> builtins.list[asyncpg.Record]:
        try:
            return await self.db.fetch(
                f"""SELECT {SAVED_COLUMNS} FROM saved_queries WHERE space_id = $1 AND namespace = $2 AND name = $3
                     ORDER BY version""", space, namespace, name)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError, OSError, TimeoutError,
                DeadlineSpent) as exc:
            raise RegistryUnreadable(type(exc).__name__) from None

    async def insert(self, space: uuid.UUID, row: dict[str, Any]) -> asyncpg.Record:
        async with self.db.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('testament.saved_queries'), "
                               "hashtext($1 || $2 || $3))", str(space), row["namespace"], row["name"])
            version = await conn.fetchval(
                "SELECT coalesce(max(version), 0) + 1 FROM saved_queries WHERE space_id = $1 AND namespace = $2 "
                "AND name = $3", space, row["namespace"], row["name"])
            return await conn.fetchrow(
                f"""INSERT INTO saved_queries (space_id, namespace, name, version, status, description, origin,
                        assurance, sql, query_hash, validated_surface_manifest_hash, parameter_schema,
                        declared_result_schema, declared_interpretation, default_max_rows,
                        default_statement_timeout_ms, default_max_bytes, validation_report, author_principal,
                        approver_principal, activated_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
                            $20, CASE WHEN $5 = 'active' THEN clock_timestamp() END)
                    RETURNING {SAVED_COLUMNS}""",
                space, row["namespace"], row["name"], version, row["status"], row.get("description"),
                row["origin"], row.get("assurance"), row["sql"], row["query_hash"],
                row.get("validated_surface_manifest_hash", ""), row.get("parameter_schema", {}),
                row.get("declared_result_schema", {}), row.get("declared_interpretation", {}),
                row.get("default_max_rows"), row.get("default_statement_timeout_ms"), row.get("default_max_bytes"),
                row.get("validation_report", {}), row.get("author_principal"), row.get("approver_principal"))

    async def activate(self, query_id: uuid.UUID, approver: str, manifest_hash: str, report: dict[str, Any]
                       ) -> asyncpg.Record | None:
        """Deprecates the active predecessor and activates this version, recording the approver."""
        async with self.db.transaction() as conn:
            row = await conn.fetchrow("SELECT space_id, namespace, name FROM saved_queries WHERE query_id = $1 "
                                      "FOR UPDATE", query_id)
            if row is None:
                return None
            await conn.execute(
                "UPDATE saved_queries SET status = 'deprecated' WHERE space_id = $1 AND namespace = $2 AND name = $3 "
                "AND status = 'active' AND query_id <> $4", row["space_id"], row["namespace"], row["name"], query_id)
            return await conn.fetchrow(
                f"""UPDATE saved_queries SET status = 'active', approver_principal = $2,
                           validated_surface_manifest_hash = $3, validation_report = $4,
                           assurance = CASE WHEN origin = 'shipped_example' THEN assurance ELSE 'customer_reviewed' END,
                           activated_at = clock_timestamp()
                     WHERE query_id = $1 RETURNING {SAVED_COLUMNS}""", query_id, approver, manifest_hash, report)

    async def set_status(self, query_id: uuid.UUID, status: str) -> asyncpg.Record | None:
        return await self.db.fetchrow(
            f"UPDATE saved_queries SET status = $2 WHERE query_id = $1 RETURNING {SAVED_COLUMNS}", query_id, status)

    async def by_id(self, query_id: uuid.UUID) -> asyncpg.Record | None:
        return await self.db.fetchrow(f"SELECT space_id, {SAVED_COLUMNS} FROM saved_queries WHERE query_id = $1",
                                      query_id)

    async def revalidation_due(self, manifest_hash: str) -> int:
        """A manifest change moves every active version validated elsewhere to pending_revalidation."""
        status = await self.db.execute(
            "UPDATE saved_queries SET status = 'pending_revalidation' WHERE status = 'active' "
            "AND validated_surface_manifest_hash <> $1", manifest_hash)
        return int(status.split()[-1])

    async def seed(self, space: uuid.UUID, examples: Sequence[dict[str, Any]], manifest_hash: str) -> int:
        """Shipped examples: inserted once per space; a pending shipped version is re-activated
        when this release ships the same SQL. Never overwrites or re-enables anything else."""
        added = 0
        async with self.db.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('testament.saved_queries'), hashtext($1::text))",
                               str(space))
            for ex in examples:
                rows = await conn.fetch(
                    "SELECT query_id, status, origin, sql FROM saved_queries WHERE space_id = $1 "
                    "AND namespace = 'examples' AND name = $2 ORDER BY version DESC", space, ex["name"])
                if not rows:
                    await conn.execute(
                        """INSERT INTO saved_queries (space_id, namespace, name, version, status, description, origin,
                               assurance, sql, query_hash, validated_surface_manifest_hash, declared_interpretation,
                               default_max_rows, validation_report, author_principal, approver_principal,
                               activated_at)
                           VALUES ($1, 'examples', $2, 1, 'active', $3, 'shipped_example', 'shipped_example', $4, $5,
                                   $6, $7, $8, $9, 'testament', 'testament', clock_timestamp())""",
                        space, ex["name"], ex["description"], ex["sql"], ex["query_hash"], manifest_hash,
                        {"semantics": ex["description"], "parameters": ex["parameters"]}, ex.get("max_rows"),
                        {"status": "valid", "manifest": manifest_hash})
                    added += 1
                    continue
                latest = rows[0]
                if latest["status"] == "pending_revalidation" and latest["origin"] == "shipped_example" \
                        and latest["sql"] == ex["sql"]:
                    await conn.execute(
                        "UPDATE saved_queries SET status = 'active', validated_surface_manifest_hash = $2 "
                        "WHERE query_id = $1", latest["query_id"], manifest_hash)
        return added
