"""Fact support, shared by deletion (ingest) and reconciliation (pipeline): recount the
distinct current documents behind facts and retract those left with none."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg


async def facts_of_claims(conn: asyncpg.Connection, claim_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    rows = await conn.fetch("SELECT DISTINCT fact_id FROM fact_evidence WHERE claim_id = ANY($1::uuid[])",
                            list(claim_ids))
    return [r[0] for r in rows]


async def refresh_support(conn: asyncpg.Connection, space_id: uuid.UUID, fact_ids: Sequence[uuid.UUID], *,
                          retract: bool) -> tuple[int, int]:
    """Recount evidence; when ``retract``, close facts left with no current support (belief
    ends, the world window is untouched) with a ``retracted_source_removal`` decision.
    Returns (relations closed, observations closed)."""
    if not fact_ids:
        return 0, 0
    rows = await conn.fetch("SELECT fact_id, kind FROM refresh_fact_support($1::uuid[], $2)", list(fact_ids), retract)
    await conn.executemany(
        """INSERT INTO fact_decisions (space_id, fact_id, subject_kind, outcome, method, features)
           VALUES ($1, $2, $3, 'retracted_source_removal', 'reconcile', $4)""",
        [(space_id, r["fact_id"], r["kind"], {"reason": "last_support_removed"}) for r in rows])
    relations = sum(1 for r in rows if r["kind"] == "relation")
    return relations, len(rows) - relations
