"""Query-space use cases: run and explain statements, describe and search the manifest, and
the saved-query registry. Free of transport: results are plain dicts in the wire vocabulary
(QueryResult/v1 field names, enum values as their wire strings), which the servicer turns
into messages.

Every statement outcome is a QueryResult: rejections (before a transaction opens) and
failures (after) carry ``termination_reason`` and ``error_code``; nothing a statement does
becomes an RPC error.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fnmatch
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from services.platform import telemetry
from services.platform.auth import Caller
from services.platform.errors import Conflict, InvalidArgument, NotFound, TestamentError
from services.platform.replica import fresh_as_of
from services.queryspace import manifest as m
from services.queryspace.adapters import PgQuerySpace, PgSavedQueries, RegistryUnreadable, Settings, StatementFailed
from services.queryspace.encoding import display_type, encode, row_bytes
from services.queryspace.examples import EXAMPLES
from services.queryspace.functions import Evaluator, Resolved, payload, resolve, substitute
from services.queryspace.guard import Admitted, Rejected, admit, query_hash

CONTRACT = "QueryResult/v1"
STATUSES = ("draft", "pending_revalidation", "active", "deprecated", "disabled", "broken")
_IDENT = re.compile(r"^[a-z][a-z0-9_]*$")
_TEXT_TYPES = frozenset({"text", "varchar", "bpchar", "name"})


def _not_found(message: str) -> NotFound:
    return NotFound({"code": "saved_query_not_found", "message": message}, reason="SAVED_QUERY_NOT_FOUND",
                    message=message)


def _conflict(message: str, *, reason: str) -> Conflict:
    """A saved-query refusal: detail {code, message} with the code in lower case."""
    return Conflict({"code": reason.lower(), "message": message}, reason=reason, message=message)


@dataclass(frozen=True)
class Tier:
    analytical: bool
    limits: dict[str, Any]

    def settings(self, timeout_ms: int) -> Settings:
        return Settings(statement_timeout_ms=timeout_ms, lock_timeout_ms=self.limits["lock_timeout_ms"],
                        idle_timeout_ms=self.limits["idle_in_transaction_timeout_ms"],
                        work_mem_kib=self.limits["work_mem_kib"],
                        temp_file_limit_kib=self.limits["temp_file_limit_kib"])


INTERACTIVE = Tier(False, m.LIMITS["interactive"])
ANALYTICAL = Tier(True, m.LIMITS["analytical"])


class Admission:
    """Concurrency and per-minute statement-time budgets, per caller and per deployment.

    The caller is the credential (open stacks share one bucket); budgets count the wall time
    of statements that finished in the last 60 seconds."""

    def __init__(self, tier: Tier, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.tier = tier
        self.clock = clock
        self.running: dict[str, int] = {}
        self.spent: dict[str, deque[tuple[float, float]]] = {}
        self.disabled = False

    def _keys(self, caller: Caller) -> tuple[str, str]:
        return f"caller:{caller.credential_id or 'open'}", f"space:{caller.space_id}"

    def _spent(self, key: str, now: float) -> float:
        window = self.spent.setdefault(key, deque())
        while window and window[0][0] < now - 60:
            window.popleft()
        return sum(s for _, s in window)

    def enter(self, caller: Caller) -> tuple[str, str]:
        if self.disabled:
            raise Rejected("quota_exceeded", "SQL is disabled on this deployment")
        own, space = self._keys(caller)
        limits = self.tier.limits
        if self.running.get(own, 0) >= limits["concurrent_per_caller"] or \
                self.running.get(space, 0) >= limits["concurrent_per_deployment"]:
            raise Rejected("concurrency_exceeded", "too many statements are running for this caller or deployment")
        now = self.clock()
        if self._spent(own, now) >= limits["statement_seconds_per_minute_caller"] or \
                self._spent(space, now) >= limits["statement_seconds_per_minute_deployment"]:
            raise Rejected("quota_exceeded", "the per-minute statement-time budget is spent; retry in a minute")
        for key in (own, space):
            self.running[key] = self.running.get(key, 0) + 1
        return own, space

    def leave(self, keys: tuple[str, str], seconds: float) -> None:
        now = self.clock()
        for key in keys:
            self.running[key] = max(0, self.running.get(key, 0) - 1)
            self.spent.setdefault(key, deque()).append((now, seconds))


@dataclass
class Request:
    sql: str
    parameters: list[Any]
    max_rows: int | None = None
    explain: bool = False
    saved: dict[str, str] | None = None
    statement_timeout_ms: int | None = None
    max_bytes: int | None = None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class QuerySpace:
    def __init__(self, store: PgQuerySpace, saved: PgSavedQueries, evaluator: Evaluator, *,
                 redact: Callable[[str, Caller], str] | None = None, tier: Tier = INTERACTIVE) -> None:
        self.store = store
        self.saved = saved
        self.evaluator = evaluator
        self.redact = redact
        self.tier = tier
        self.admission = Admission(tier)
        self.schema_problems: list[str] | None = None
        self._seeded: set[uuid.UUID] = set()
        self._seed_lock = asyncio.Lock()

    async def start(self) -> None:
        """At start-up: compare the database's views with the manifest, move saved queries
        validated against another manifest to pending_revalidation, seed the examples."""
        self.schema_problems = await self.store.schema_differences()
        await self.saved.revalidation_due(m.MANIFEST_HASH)
        for space in await self.saved.spaces():
            await self.ensure_examples(space)

    async def ensure_examples(self, space: uuid.UUID) -> None:
        if space in self._seeded:
            return
        async with self._seed_lock:
            if space not in self._seeded:
                await self.saved.seed(space, shipped_examples(), m.MANIFEST_HASH)
                self._seeded.add(space)

    # --- statements --------------------------------------------------------------------

    def _base(self, caller: Caller, request: Request, row_cap: int, byte_cap: int, timeout_ms: int) -> dict[str, Any]:
        return {
            "contract": CONTRACT, "grade": "exploratory_tabular", "request_id": str(uuid.uuid4()),
            "deployment_id": str(caller.space_id), "surface_manifest_hash": m.MANIFEST_HASH,
            "query_space_schema": m.SCHEMA, "query_hash": "", "query_language": "sql",
            "saved_query": request.saved, "referenced_views": [], "referenced_functions": [],
            "source_grain_tags": [], "columns": [], "rows": [], "returned_row_count": 0, "returned_byte_count": 0,
            "limits": {"row_cap": row_cap, "byte_cap": byte_cap, "statement_timeout_ms": timeout_ms,
                       "analytical_tier": self.tier.analytical},
            "truncated": False, "truncation_reason": None, "exact_total_known": False, "exact_total": None,
            "ordered_result": False, "empty_result": True, "negative_kind": None,
            "execution_started_at": _now(), "evaluated_at": None, "pg_snapshot_at": None, "elapsed_ms": 0.0,
            "termination_reason": "completed", "error_code": None, "error_message": None, "warnings": [],
            "semantic_invocations": [], "graph_invocations": [],
        }

    def _caps(self, request: Request) -> tuple[int, int, int, list[str]]:
        limits = self.tier.limits
        warnings = []
        rows = limits["max_rows_default"] if request.max_rows is None else max(0, request.max_rows)
        if rows > limits["max_rows_cap"]:
            warnings.append(f"max_rows clamped to {limits['max_rows_cap']}")
            rows = limits["max_rows_cap"]
        byte_cap = min(request.max_bytes or limits["max_bytes_default"], limits["max_bytes_cap"])
        timeout = min(request.statement_timeout_ms or limits["statement_timeout_ms_default"],
                      limits["statement_timeout_ms_cap"])
        return rows, byte_cap, timeout, warnings

    async def run(self, caller: Caller, request: Request) -> dict[str, Any]:
        started = time.perf_counter()
        row_cap, byte_cap, timeout_ms, warnings = self._caps(request)
        result = self._base(caller, request, row_cap, byte_cap, timeout_ms)
        result["warnings"].extend(warnings)
        keys = None
        try:
            try:
                admitted = admit(request.sql, request.parameters, max_parameters=self.tier.limits["parameters_max"],
                                 max_parameter_bytes=self.tier.limits["parameters_max_bytes"])
            except Rejected:
                raise
            except Exception as exc:  # noqa: BLE001 - a shape the walk does not know is not on the allowlist
                telemetry.access_log("defect", where="queryspace.guard", error=repr(exc))
                raise Rejected("statement_not_allowed", "the statement uses a construct the guard does not admit") \
                    from None
            result["query_hash"] = admitted.query_hash(request.parameters)
            result["referenced_views"] = list(admitted.views)
            result["referenced_functions"] = list(admitted.functions)
            result["source_grain_tags"] = list(dict.fromkeys(m.VIEWS[v].grain for v in admitted.views))
            result["ordered_result"] = admitted.ordered
            if self.schema_problems:
                raise Rejected("schema_version_mismatch",
                               "the database's memory_v1 views differ from this release's manifest")
            resolved = [resolve(call, request.parameters, caller) for call in admitted.calls]
            if any(r.function.category == "graph" for r in resolved):
                timeout_ms = min(timeout_ms, self.tier.limits["graph_statement_timeout_ms"])
                result["limits"]["statement_timeout_ms"] = timeout_ms
            evaluated = [r for r in resolved if r.function.service_evaluated]
            if not request.explain:
                await self.evaluator.prepare(evaluated)
            keys = self.admission.enter(caller)
            # facts_as_of(…, believed_at) later than a read replica's replay point runs on the primary
            with fresh_as_of(*(r.args.get("believed_at") for r in resolved)):
                await self._execute(caller, request, admitted, evaluated, result, row_cap, byte_cap, timeout_ms)
        except Rejected as exc:
            result.update(termination_reason="rejected", error_code=exc.code, error_message=exc.message)
        except StatementFailed as exc:
            self._failed(result, exc.code, exc.message)
        except TestamentError:
            raise
        except Exception as exc:  # noqa: BLE001 - a defect is still a failed statement, never a 500
            telemetry.access_log("defect", where="queryspace.run", error=repr(exc))
            self._failed(result, "execution_error", "the statement failed inside the query space service")
        finally:
            elapsed = time.perf_counter() - started
            if keys is not None:
                self.admission.leave(keys, elapsed)
            result["elapsed_ms"] = elapsed * 1000
            result["empty_result"] = result["returned_row_count"] == 0
        return result

    @staticmethod
    def _failed(result: dict[str, Any], code: str, message: str) -> None:
        result.update(termination_reason="failed", error_code=code, error_message=message, columns=[], rows=[],
                      returned_row_count=0, returned_byte_count=0, truncated=False, truncation_reason=None,
                      evaluated_at=None)

    async def _execute(self, caller: Caller, request: Request, admitted: Admitted, evaluated: list[Resolved],
                       result: dict[str, Any], row_cap: int, byte_cap: int, timeout_ms: int) -> None:
        async with self.store.sandbox(caller, self.tier.settings(timeout_ms)) as conn:
            extra: list[Any] = []
            body_bytes = [0]
            for r in evaluated:
                if request.explain:
                    rows: list[dict[str, Any]] = []
                else:
                    outcome = await self.evaluator.evaluate(conn, caller, r, body_bytes=body_bytes)
                    rows = outcome.rows
                    if outcome.semantic is not None:
                        result["semantic_invocations"].append(outcome.semantic)
                    if outcome.graph is not None:
                        result["graph_invocations"].append({"ordinal": len(result["graph_invocations"]),
                                                            **outcome.graph})
                    result["warnings"].extend(outcome.warnings)
                    if outcome.truncation_reason and not result["truncated"]:
                        result["truncated"] = True
                        result["truncation_reason"] = outcome.truncation_reason
                substitute(r.call, admitted.parameter_count + len(extra) + 1)
                extra.append(payload(rows))
            sql = admitted.render() if evaluated else admitted.sql
            if request.explain:
                sql = f"EXPLAIN (FORMAT JSON) {sql}"
            probe = 1 if request.explain else row_cap + 1
            fetched = await self.store.run(conn, sql, request.parameters, extra, probe=probe,
                                           timeout_s=timeout_ms / 1000 + 1.0)
        result["pg_snapshot_at"] = fetched.snapshot_at
        names = set(admitted.views) | {f for f in admitted.functions if f in m.FUNCTIONS}
        if names and names <= m.SINGLE_INSTANT:
            result["evaluated_at"] = fetched.snapshot_at
        result["columns"] = [{"name": name, "type": display_type(t, element), "nullable": True}
                             for name, t, element in fetched.columns]
        rows_out: list[list[Any]] = []
        size = 2  # the enclosing brackets
        truncated_by = None
        for i, record in enumerate(fetched.rows):
            row = [self._cell(record[j], t, element, caller) for j, (_, t, element) in enumerate(fetched.columns)]
            extra_size = row_bytes(row) + (1 if rows_out else 0)
            if size + extra_size > byte_cap:
                truncated_by = "byte_cap"
                break
            if i >= row_cap and not request.explain:
                truncated_by = "row_cap"
                break
            rows_out.append(row)
            size += extra_size
        if truncated_by is not None:
            result["truncated"] = True
            result["truncation_reason"] = truncated_by
        result["rows"] = rows_out
        result["returned_row_count"] = len(rows_out)
        result["returned_byte_count"] = size if rows_out else 2

    def _cell(self, value: Any, type_name: str, element: str | None, caller: Caller) -> Any:
        cell = encode(value, type_name, element)
        if self.redact is not None:
            if type_name in _TEXT_TYPES and isinstance(cell, str):
                return self.redact(cell, caller)
            if element in _TEXT_TYPES and isinstance(cell, list):
                return [self.redact(c, caller) if isinstance(c, str) else c for c in cell]
        return cell

    # --- discovery ---------------------------------------------------------------------

    def describe(self, pattern: str | None, include_examples: bool) -> dict[str, Any]:
        views = [m.view_json(v) for v in m.VIEWS.values() if pattern is None or fnmatch.fnmatchcase(v.name, pattern)]
        return {
            "schema": m.SCHEMA, "schema_major": m.SCHEMA_MAJOR, "surface_manifest_hash": m.MANIFEST_HASH,
            "headline": m.HEADLINE, "retrieval_choices": m.RETRIEVAL_CHOICES, "honesty_warnings": m.HONESTY_WARNINGS,
            "worked_examples": m.WORKED_EXAMPLES, "views": views, "functions": list(m.FUNCTIONS),
            "limits": m.LIMITS, "core_operation_descriptors": m.CORE_OPERATIONS,
            "function_signatures": m.function_signatures(), "sql_grammar": m.grammar_json(),
            "examples": [{"name": f"examples.{e['name']}", "sql": e["sql"], "description": e["description"],
                          "parameters": e["parameters"]} for e in EXAMPLES] if include_examples else [],
        }

    def search(self, query: str, k: int | None) -> list[dict[str, Any]]:
        words = _words(query)
        if not words:
            raise InvalidArgument({"code": "invalid_parameter", "message": "query must be non-empty"},
                                  reason="INVALID_PARAMETER", message="query must be non-empty")
        limit = 10 if k is None else k
        hits = []
        for entry in _entries():
            name_words = set(_words(entry["name"].replace("_", " ")))
            text_words = set(_words(" ".join([entry["purpose"], *entry["tags"], entry.get("text", "")])))
            score = sum(2.0 for w in words if w in name_words) + sum(1.0 for w in words if w in text_words)
            if score > 0:
                hits.append({**{k2: v for k2, v in entry.items() if k2 != "text"}, "score": score})
        hits.sort(key=lambda h: (-h["score"], h["kind"], h["name"]))
        return hits[:limit]

    # --- saved queries -----------------------------------------------------------------

    async def list_saved(self, caller: Caller, namespace: str | None, status: str | None) -> list[dict[str, Any]]:
        await self.ensure_examples(caller.space_id)
        rows = await self.saved.list(caller.space_id, namespace, status)
        return [dict(r) for r in rows]

    async def _version(self, caller: Caller, namespace: str, name: str, version: int | None) -> dict[str, Any]:
        await self.ensure_examples(caller.space_id)
        if not (_IDENT.match(namespace) and _IDENT.match(name)):
            raise _not_found(f"no saved query {namespace}.{name}")
        versions = [dict(r) for r in await self.saved.versions(caller.space_id, namespace, name)]
        if not versions:
            raise _not_found(f"no saved query {namespace}.{name}")
        if version is not None:
            for v in versions:
                if v["version"] == version:
                    return v
            raise _not_found(f"no version {version} of {namespace}.{name}")
        active = [v for v in versions if v["status"] == "active"]
        if active:
            return active[-1]
        latest = versions[-1]
        return latest

    async def describe_saved(self, caller: Caller, namespace: str, name: str, version: int | None
                             ) -> dict[str, Any]:
        return await self._version(caller, namespace, name, version)

    async def run_saved(self, caller: Caller, namespace: str, name: str, version: int | None,
                        parameters: list[Any], max_rows: int | None) -> dict[str, Any]:
        try:
            row = await self._version(caller, namespace, name, version)
        except RegistryUnreadable:
            raise TestamentError({"code": "execution_error", "message": "the saved-query registry is unreadable"},
                                 reason="EXECUTION_ERROR", http_status=500,
                                 message="the saved-query registry is unreadable") from None
        status = row["status"]
        if status == "pending_revalidation":
            raise _conflict(f"{namespace}.{name} v{row['version']} awaits revalidation against this query space",
                            reason="SAVED_QUERY_REVALIDATION_PENDING")
        if status != "active":
            raise _conflict(f"{namespace}.{name} v{row['version']} is {status}, not active",
                            reason="SAVED_QUERY_DISABLED")
        ref = {"query_id": str(row["query_id"]), "namespace": namespace, "name": name,
               "version": str(row["version"]), "query_hash": row["query_hash"]}
        request = Request(row["sql"], parameters,
                          max_rows=max_rows if max_rows is not None else row["default_max_rows"], saved=ref,
                          statement_timeout_ms=row["default_statement_timeout_ms"],
                          max_bytes=row["default_max_bytes"])
        return await self.run(caller, request)

    # --- authoring (tooling and admin RPCs) --------------------------------------------

    async def author(self, space: uuid.UUID, namespace: str, name: str, sql: str, *, author: str,
                     description: str | None = None, origin: str = "human", max_rows: int | None = None
                     ) -> dict[str, Any]:
        if namespace == "examples":
            raise InvalidArgument("the examples namespace belongs to the platform; copy the query elsewhere",
                                  reason="INVALID_ARGUMENT")
        if not (_IDENT.match(namespace) and _IDENT.match(name)):
            raise InvalidArgument("namespace and name must match ^[a-z][a-z0-9_]*$", reason="INVALID_ARGUMENT")
        report = validate(sql)
        if report["status"] != "valid":
            raise _conflict(f"the SQL is not admissible: {report['error']}", reason="SAVED_QUERY_INCOMPATIBLE")
        row = await self.saved.insert(space, {
            "namespace": namespace, "name": name, "status": "draft", "description": description, "origin": origin,
            "assurance": "customer_authored", "sql": sql, "query_hash": report["query_hash"],
            "validated_surface_manifest_hash": m.MANIFEST_HASH, "validation_report": report,
            "author_principal": author, "default_max_rows": max_rows})
        return dict(row)

    async def approve(self, query_id: uuid.UUID, approver: str, *, space: uuid.UUID | None = None
                      ) -> dict[str, Any]:
        row = await self.saved.by_id(query_id)
        if row is None or (space is not None and row["space_id"] != space):
            raise _not_found(f"no saved query version {query_id}")
        if row["author_principal"] == approver:
            raise _conflict("the author of a version cannot approve it", reason="SAVED_QUERY_DISABLED")
        if row["status"] not in ("draft", "pending_revalidation"):
            raise _conflict(f"a {row['status']} version cannot be approved", reason="SAVED_QUERY_DISABLED")
        report = validate(row["sql"])
        if report["status"] != "valid":
            await self.saved.set_status(query_id, "broken")
            raise _conflict(f"the SQL no longer validates: {report['error']}", reason="SAVED_QUERY_INCOMPATIBLE")
        activated = await self.saved.activate(query_id, approver, m.MANIFEST_HASH, report)
        assert activated is not None
        return dict(activated)

    async def set_status(self, query_id: uuid.UUID, status: str, *, space: uuid.UUID | None = None
                         ) -> dict[str, Any]:
        if status not in ("disabled", "deprecated"):
            raise InvalidArgument("only disabled or deprecated can be set directly", reason="INVALID_ARGUMENT")
        current = await self.saved.by_id(query_id)
        if current is None or (space is not None and current["space_id"] != space):
            raise _not_found(f"no saved query version {query_id}")
        row = await self.saved.set_status(query_id, status)
        if row is None:
            raise _not_found(f"no saved query version {query_id}")
        return dict(row)


def validate(sql: str) -> dict[str, Any]:
    """The guard's verdict on a saved query's SQL (parameters are positional and untyped, so
    the placeholder count is taken from the statement itself)."""
    try:
        placeholders = _placeholders(sql)
        admitted = admit(sql, [None] * placeholders)
    except Rejected as exc:
        return {"status": "invalid", "error": exc.code, "message": exc.message, "manifest": m.MANIFEST_HASH}
    return {"status": "valid", "query_hash": query_hash(admitted.normalized, []), "views": admitted.views,
            "functions": admitted.functions, "parameters": admitted.parameter_count, "manifest": m.MANIFEST_HASH}


def _placeholders(sql: str) -> int:
    import pglast

    try:
        tokens = pglast.parser.scan(sql)
    except Exception:  # noqa: BLE001 - the guard reports the parse error
        return 0
    highest = 0
    for t in tokens:
        if t.name == "PARAM":
            highest = max(highest, int(sql[t.start + 1:t.end + 1]))
    return highest


def shipped_examples() -> list[dict[str, Any]]:
    out = []
    for e in EXAMPLES:
        report = validate(e["sql"])
        if report["status"] != "valid":  # pragma: no cover - a test keeps every example valid
            raise RuntimeError(f"example {e['name']} does not validate: {report}")
        out.append({**e, "query_hash": report["query_hash"]})
    return out


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 1]


def _entries() -> list[dict[str, Any]]:
    entries = []
    for v in m.VIEWS.values():
        entries.append({"kind": "view", "name": v.name, "purpose": v.comment,
                        "tags": [v.grain, ",".join(v.key)], "text": " ".join(c.name for c in v.columns)})
    for f in m.FUNCTIONS.values():
        entries.append({"kind": "function", "name": f.name, "purpose": f.purpose,
                        "tags": [t for t in (f.channel, f.target, f.category) if t],
                        "text": " ".join(c.name for c in f.columns)})
    for op in m.CORE_OPERATIONS:
        entries.append({"kind": "core_operation", "name": op["name"], "purpose": op["purpose"], "tags": [op["route"]]})
    for e in EXAMPLES:
        entries.append({"kind": "example", "name": f"examples.{e['name']}", "purpose": e["description"],
                        "tags": ["saved_query"], "text": e["sql"]})
    return entries
