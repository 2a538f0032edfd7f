"""`testament check-acl-exposure`: how much recall an ACL filter on an approximate vector
index loses on *this* database, and what this service's plan returns instead.

Offline and read-only; no embedding provider is called: stored claim vectors serve as
queries. For every principal that occurs in document ACLs it compares, against an exact
oracle computed inside PostgreSQL over the rows that principal may see:

* a bare scoped query: the HNSW index walked first, the ACL applied as a WHERE
  post-filter (no iterative scan) — what most stacks do;
* this service's plan (exact scan when few rows are eligible, iterative HNSW otherwise),
  and which plan it chose for that principal (``testament_plans``: exact | hnsw, counted
  over the sample queries).

The same for every principal set a live API key of the space holds (``principal_sets``:
what callers actually present), with the plan the rule gives it (``plan``, from the
visible and total rows), and its semantic leg's median latency beside a trusted caller's
over the same queries (``latency_vs_trusted``).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

from services.platform.auth import Caller, Scope
from services.platform.db import Database
from services.retrieval.adapters import CLAIM_VISIBLE, DIRECT_PRINCIPALS_MAX, SearchLegs, semantic_plan


@dataclass(frozen=True)
class PrincipalExposure:
    principal: str
    eligible: int
    queries: int
    bare_recall: float
    plan_recall: float
    bare_empty: int
    plans: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {"principal": self.principal, "eligible_rows": self.eligible, "queries": self.queries,
                "bare_scoped_recall_at_k": round(self.bare_recall, 4),
                "testament_recall_at_k": round(self.plan_recall, 4), "bare_scoped_empty_results": self.bare_empty,
                "testament_plans": self.plans}


@dataclass(frozen=True)
class SetExposure:
    principals: list[str]
    keys: int
    eligible: int
    total: int
    plan: str
    restricted: bool
    recall: float
    latency_ratio: float

    def as_json(self) -> dict[str, Any]:
        return {"principals": self.principals, "keys": self.keys, "eligible_rows": self.eligible,
                "space_rows": self.total, "plan": self.plan, "restricted": self.restricted,
                "testament_recall_at_k": round(self.recall, 4), "latency_vs_trusted": round(self.latency_ratio, 2)}


async def _oracle(conn: Any, caller: Caller, vector: Any, dim: int, k: int) -> list[uuid.UUID]:
    rows = await conn.fetch(
        f"""SELECT c.claim_id FROM claims c WHERE c.space_id = $1 AND c.embedding_dim = {dim}
              AND c.is_current_testimony AND {CLAIM_VISIBLE}
            ORDER BY c.embedding <=> $3, c.claim_id LIMIT $4""", caller.space_id, sorted(caller.principals or []),
        vector, k)  # ties by id, as the service's exact scans break them
    return [r[0] for r in rows]


async def _bare(conn: Any, caller: Caller, vector: Any, dim: int, k: int) -> list[uuid.UUID]:
    await conn.execute("SET LOCAL hnsw.iterative_scan = 'off'")
    await conn.execute("SET LOCAL enable_seqscan = off")
    rows = await conn.fetch(
        f"""SELECT c.claim_id FROM claims c WHERE c.space_id = $1 AND c.embedding_dim = {dim}
              AND c.is_current_testimony AND {CLAIM_VISIBLE}
            ORDER BY c.embedding::halfvec({dim}) <=> $3::vector({dim})::halfvec({dim}) LIMIT $4""",
        caller.space_id, sorted(caller.principals or []), vector, k)
    return [r[0] for r in rows]


def _recall(found: list[uuid.UUID], truth: list[uuid.UUID]) -> float:
    return len(set(found) & set(truth)) / len(truth) if truth else 1.0


async def check(db: Database, *, k: int = 10, queries: int = 20, max_principals: int = 20) -> dict[str, Any]:
    report: list[PrincipalExposure] = []
    sets: list[SetExposure] = []
    legs = SearchLegs()
    spaces = await db.fetch("SELECT DISTINCT space_id FROM documents")
    for space in spaces:
        principals = await db.fetch(
            """SELECT p, count(*) AS docs FROM documents, unnest(acl) AS p
                WHERE space_id = $1 AND deleted_at IS NULL GROUP BY p ORDER BY docs DESC LIMIT $2""",
            space[0], max_principals)
        samples = await db.fetch(
            """SELECT embedding, embedding_dim FROM claims WHERE space_id = $1 AND embedding IS NOT NULL
               ORDER BY md5(claim_id::text) LIMIT $2""", space[0], queries)
        for row in principals:
            caller = Caller(space[0], Scope.READ, frozenset({row["p"]}))
            bare, plan, empty = [], [], 0
            legs.plans.clear()
            async with db.transaction(isolation="repeatable_read", readonly=True) as conn:
                eligible = await legs.eligible(conn, "claim", caller)
                for sample in samples:
                    vector, dim = sample["embedding"], sample["embedding_dim"]
                    truth = await _oracle(conn, caller, vector, dim, k)
                    async with conn.transaction():
                        found = await _bare(conn, caller, vector, dim, k)
                    mine = [i for i, _ in await legs.semantic(conn, "claim", caller, vector.to_list(), k)]
                    bare.append(_recall(found, truth))
                    plan.append(_recall(mine, truth))
                    empty += 0 if found or not truth else 1
            if samples:
                report.append(PrincipalExposure(row["p"], eligible, len(samples), statistics.mean(bare),
                                                statistics.mean(plan), empty, dict(Counter(legs.plans))))
        sets.extend(await _principal_sets(db, legs, space[0], samples, k))
    worst = min((r.bare_recall for r in report), default=1.0)
    return {"k": k, "principals": [r.as_json() for r in report], "principal_sets": [s.as_json() for s in sets],
            "exposed": worst < 0.99,
            "summary": ("a bare scoped vector query loses recall for some principals here; this service's "
                        "plan does not") if worst < 0.99 else "no recall loss measured for the ACLs in this database"}


async def _principal_sets(db: Database, legs: SearchLegs, space: uuid.UUID, samples: list[Any], k: int
                          ) -> list[SetExposure]:
    """Every principal set of the space's live, untrusted keys: the plan it gets, its recall
    against the exact oracle and its latency beside a trusted caller's."""
    keys = await db.fetch(
        """SELECT principals, count(*) AS keys FROM (
               SELECT ARRAY(SELECT DISTINCT p FROM unnest(principals) AS p ORDER BY 1) AS principals
                 FROM credentials WHERE space_id = $1 AND revoked_at IS NULL AND NOT trusted) k
            GROUP BY principals ORDER BY keys DESC, principals""", space)
    if not keys or not samples:
        return []
    trusted = Caller(space, Scope.READ, None)
    out = []
    async with db.transaction(isolation="repeatable_read", readonly=True) as conn:
        await _timed(conn, legs, trusted, samples, k)  # warm
        base = await _timed(conn, legs, trusted, samples, k)
        for row in keys:
            held = list(row["principals"])
            if len(held) > DIRECT_PRINCIPALS_MAX:  # as the service narrows such a caller
                held = [r[0] for r in await conn.fetch(
                    "SELECT principal FROM acl_principals WHERE space_id = $1 AND principal = ANY($2::text[])",
                    space, held)]
            caller = Caller(space, Scope.READ, frozenset(held))
            eligible, total = await legs.counts(conn, "claim", caller)
            plan, restricted = semantic_plan(eligible, total)
            mine = await _timed(conn, legs, caller, samples, k)
            recalls = [_recall(found, await _oracle(conn, caller, sample["embedding"], sample["embedding_dim"], k))
                       for sample, (found, _) in zip(samples, mine, strict=True)]
            ratio = statistics.median(t for _, t in mine) / max(statistics.median(t for _, t in base), 1e-9)
            out.append(SetExposure(list(row["principals"]), row["keys"], eligible, total, plan, restricted,
                                   statistics.mean(recalls), ratio))
    return out


async def _timed(conn: Any, legs: SearchLegs, caller: Caller, samples: list[Any], k: int
                 ) -> list[tuple[list[uuid.UUID], float]]:
    out = []
    for sample in samples:
        started = time.perf_counter()
        found = [i for i, _ in await legs.semantic(conn, "claim", caller, sample["embedding"].to_list(), k)]
        out.append((found, time.perf_counter() - started))
    return out
