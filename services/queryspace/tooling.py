"""Saved-query authoring for operators (`testament queries …`), straight against PostgreSQL.

There is no HTTP route to create, approve or disable a saved query: deployment tooling does
it, and review needs two people (the approver of a version is never its author).
"""

from __future__ import annotations

import uuid
from typing import Any

from services.platform.db import Database
from services.platform.errors import TestamentError
from services.queryspace.adapters import PgQuerySpace, PgSavedQueries
from services.queryspace.app import QuerySpace
from services.queryspace.functions import Evaluator
from services.retrieval.adapters import SearchLegs


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in row.items()}


async def run(db: Database, command: str, options: dict[str, Any]) -> tuple[int, Any]:
    """One `testament queries` command; returns (exit code, JSON document)."""
    service = QuerySpace(PgQuerySpace(db), PgSavedQueries(db), Evaluator(SearchLegs(), None))
    space = await db.fetchval("SELECT space_id FROM spaces WHERE slug = $1", options.get("space") or "default")
    if space is None:
        return 2, {"error": f"no space {options.get('space')!r}"}
    try:
        if command == "list":
            await service.ensure_examples(space)
            rows = await service.saved.list(space, options.get("namespace"), options.get("status"))
            return 0, [_plain({k: r[k] for k in ("query_id", "namespace", "name", "version", "status", "origin",
                                                  "author_principal", "approver_principal")}) for r in rows]
        if command == "author":
            row = await service.author(space, options["namespace"], options["name"], options["sql"],
                                       author=options["author"], description=options.get("description"),
                                       max_rows=options.get("max_rows"))
            return 0, _plain({k: row[k] for k in ("query_id", "namespace", "name", "version", "status",
                                                  "query_hash")})
        if command == "approve":
            row = await service.approve(uuid.UUID(options["query_id"]), options["approver"])
            return 0, _plain({k: row[k] for k in ("query_id", "namespace", "name", "version", "status",
                                                  "author_principal", "approver_principal")})
        if command in ("disable", "deprecate"):
            row = await service.set_status(uuid.UUID(options["query_id"]),
                                           "disabled" if command == "disable" else "deprecated")
            return 0, _plain({k: row[k] for k in ("query_id", "namespace", "name", "version", "status")})
    except TestamentError as exc:
        return 1, {"refused": exc.reason.lower(), "detail": exc.message}
    except ValueError as exc:
        return 2, {"error": str(exc)}
    return 2, {"error": f"unknown command {command!r}"}
