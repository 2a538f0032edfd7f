"""Graph adapters: the bounded walks as recursive CTEs over ``facts`` (relations) and
``document_crossrefs`` (citations), and the re-reads that confirm what a walk nominated.

Every read of one request runs on one connection inside one REPEATABLE READ, read-only
transaction (one snapshot) with the 5 s statement timeout set locally.

The walk is one row per level. Each level looks at the edges adjacent to the frontier
that hold for the caller (space, clocks, predicates, and at least one supporting claim
that is current testimony from a live document the caller may see), stops at the edge
budget (``LIMIT`` remaining + 1, so an overrun is detected without reading further),
admits at most the frontier budget of new nodes, and checks the time budget before it
starts. Only edges that hold for the caller are examined or counted, so an invisible
edge never shows, not even as budget spent.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import asyncpg

from services.graph.domain import TIMED_OUT, AppliedClocks, Budgets, Edge, Level, Step, Visibility, Walk
from services.platform.db import Database, DeadlineSpent
from services.platform.errors import Unavailable


# A document the caller may see: live, in the space, ACL empty or sharing a principal.
def _visible_doc(alias: str, space: str, principals: str) -> str:
    return (f"{alias}.space_id = {space} AND {alias}.deleted_at IS NULL"
            f" AND ({principals}::text[] IS NULL OR {alias}.acl = '{{}}' OR {alias}.acl && {principals}::text[])")


def _supported(fact: str, space: str, principals: str) -> str:
    """The fact has a supporting claim that is current testimony from a visible document."""
    return f"""EXISTS (SELECT 1 FROM fact_evidence fe
                  JOIN claims c ON c.claim_id = fe.claim_id AND c.space_id = fe.space_id
                  JOIN documents d ON d.doc_id = c.doc_id AND d.space_id = c.space_id
                 WHERE fe.fact_id = {fact}.fact_id AND fe.stance = 'supports' AND c.is_current_testimony
                   AND {_visible_doc('d', space, principals)})"""


def _holds(*, space: str, principals: str, predicates: str, valid_at: str, believed_at: str) -> str:
    """A relation counts at (valid_at, believed_at): learned by believed_at, not yet
    invalidated then (checked by the caller of this fragment), its world window (as it
    stands today) covers valid_at, a superseded fact with no end counts as ended."""
    return f"""f.space_id = {space} AND f.kind = 'relation'
           AND f.ingested_at <= {believed_at}
           AND (f.valid_from IS NULL OR f.valid_from <= {valid_at})
           AND (CASE WHEN f.valid_until IS NOT NULL THEN f.valid_until > {valid_at}
                     ELSE f.superseded_by IS NULL END)
           AND ({predicates}::text[] IS NULL OR f.predicate = ANY ({predicates}::text[]))
           AND {_supported('f', space, principals)}"""


# Walk parameters: $1 space, $2 starts, $3 expansion budget, $4 frontier budget, $5 time
# budget (ms), $6 depth, $7 target (NULL = none), $8 principals; relations add $9
# predicates, $10 valid_at, $11 believed_at, $12 "believed_at is in the past".
_REL_HOLDS = _holds(space="$1", principals="$8", predicates="$9", valid_at="$10", believed_at="$11")


def _relation_adjacency() -> str:
    branches = []
    for near, far in (("subject_entity_id", "object_entity_id"), ("object_entity_id", "subject_entity_id")):
        # Believed now: the partial index (`invalidated_at IS NULL`) serves the lookup.
        branches.append(f"""SELECT f.fact_id AS edge, f.{near} AS near, f.{far} AS far FROM facts f
             WHERE f.{near} = ANY (w.frontier) AND f.invalidated_at IS NULL AND {_REL_HOLDS}
               AND NOT (SELECT v FROM late)""")
        # Believed at a past instant: also the facts invalidated since then.
        branches.append(f"""SELECT f.fact_id, f.{near}, f.{far} FROM facts f
             WHERE $12 AND f.{near} = ANY (w.frontier) AND f.invalidated_at > $11 AND {_REL_HOLDS}
               AND NOT (SELECT v FROM late)""")
    return "\n UNION ALL\n".join(branches)


_CITATION_ADJACENCY = f"""SELECT x.crossref_id AS edge, x.from_doc_id AS near, x.to_doc_id AS far
      FROM document_crossrefs x JOIN documents d ON d.doc_id = x.to_doc_id AND d.space_id = x.space_id
     WHERE x.space_id = $1 AND x.from_doc_id = ANY (w.frontier) AND {_visible_doc('d', '$1', '$8')}
       AND NOT (SELECT v FROM late)"""


def _walk_sql(adjacency: str) -> str:
    return f"""
WITH RECURSIVE walk AS (
    SELECT 0 AS depth, $2::uuid[] AS frontier, $2::uuid[] AS seen, 0 AS examined, NULL::text AS stop,
           clock_timestamp() + make_interval(secs => $5::float8 / 1000) AS deadline,
           '{{}}'::uuid[] AS e_edge, '{{}}'::uuid[] AS e_near, '{{}}'::uuid[] AS e_far
  UNION ALL
    SELECT w.depth + 1, s.fresh, w.seen || s.fresh, w.examined + s.kept, s.stop, w.deadline,
           s.e_edge, s.e_near, s.e_far
      FROM walk w
      CROSS JOIN LATERAL (
        WITH late AS MATERIALIZED (SELECT clock_timestamp() > w.deadline AS v),
        adj AS MATERIALIZED (
            SELECT a.edge, a.near, a.far, row_number() OVER () AS rn
              FROM (SELECT * FROM ({adjacency}) x LIMIT $3::int - w.examined + 1) a
        ),
        dag AS (SELECT edge, near, far, dense_rank() OVER (ORDER BY far) AS fr
                  FROM adj WHERE rn <= $3::int - w.examined AND far <> ALL (w.seen))
        SELECT CASE WHEN (SELECT v FROM late) THEN 'time_budget'
                    WHEN (SELECT count(*) FROM adj) > $3::int - w.examined THEN 'expansion_budget'
                    WHEN (SELECT max(fr) FROM dag) > $4::int THEN 'frontier_budget' END AS stop,
               (SELECT count(*)::int FROM adj WHERE rn <= $3::int - w.examined) AS kept,
               coalesce(d.fresh, '{{}}') AS fresh, coalesce(d.e_edge, '{{}}') AS e_edge,
               coalesce(d.e_near, '{{}}') AS e_near, coalesce(d.e_far, '{{}}') AS e_far
          FROM (SELECT array_agg(DISTINCT far ORDER BY far) FILTER (WHERE fr <= $4::int) AS fresh,
                       array_agg(edge ORDER BY far, edge) FILTER (WHERE fr <= $4::int) AS e_edge,
                       array_agg(near ORDER BY far, edge) FILTER (WHERE fr <= $4::int) AS e_near,
                       array_agg(far ORDER BY far, edge) FILTER (WHERE fr <= $4::int) AS e_far
                  FROM dag) d
      ) s
     WHERE w.depth < $6::int AND w.stop IS NULL AND cardinality(w.frontier) > 0
       AND ($7::uuid IS NULL OR $7::uuid <> ALL (w.seen))
)
SELECT depth, examined, stop, frontier, e_edge, e_near, e_far FROM walk ORDER BY depth"""


WALK_RELATIONS = _walk_sql(_relation_adjacency())
WALK_CITATIONS = _walk_sql(_CITATION_ADJACENCY)

_CONFIRM_HOLDS = _holds(space="$1", principals="$3", predicates="$4", valid_at="$5", believed_at="$6")
CONFIRM_RELATIONS = f"""
SELECT f.fact_id, f.subject_entity_id, f.object_entity_id, f.predicate, f.label, f.evidence_count,
       f.valid_from, f.valid_until, f.valid_precision, f.ingested_at, f.invalidated_at, f.support_state
  FROM facts f
 WHERE f.fact_id = ANY ($2::uuid[]) AND (f.invalidated_at IS NULL OR f.invalidated_at > $6)
   AND {_CONFIRM_HOLDS}"""

CONFIRM_CITATIONS = f"""
SELECT x.crossref_id, x.from_doc_id, x.to_doc_id, x.kind, x.context
  FROM document_crossrefs x
  JOIN documents a ON a.doc_id = x.from_doc_id AND a.space_id = x.space_id
  JOIN documents b ON b.doc_id = x.to_doc_id AND b.space_id = x.space_id
 WHERE x.crossref_id = ANY ($2::uuid[]) AND x.space_id = $1
   AND {_visible_doc('a', '$1', '$3')} AND {_visible_doc('b', '$1', '$3')}"""

# An entity is in the caller's graph when it is in their space (after following merges to
# the survivor) and something they may see names it: a relation supported by a visible
# document (any time), or a mention in one. Cheapest evidence first.
ENTITY_IN_GRAPH = f"""
WITH RECURSIVE chain (entity_id, merged_into, n) AS (
    SELECT entity_id, merged_into, 0 FROM entities WHERE entity_id = $1 AND space_id = $2
  UNION ALL
    SELECT e.entity_id, e.merged_into, c.n + 1 FROM chain c JOIN entities e ON e.entity_id = c.merged_into
     WHERE c.n < 16 AND e.space_id = $2
)
SELECT e.entity_id, e.canonical_name
  FROM chain c JOIN entities e ON e.entity_id = c.entity_id
 WHERE c.merged_into IS NULL
   AND (EXISTS (SELECT 1 FROM facts f WHERE f.space_id = $2 AND f.subject_entity_id = e.entity_id
                   AND f.invalidated_at IS NULL AND {_supported('f', '$2', '$3')})
     OR EXISTS (SELECT 1 FROM facts f WHERE f.space_id = $2 AND f.object_entity_id = e.entity_id
                   AND f.invalidated_at IS NULL AND {_supported('f', '$2', '$3')})
     OR EXISTS (SELECT 1 FROM mentions m JOIN documents d ON d.doc_id = m.doc_id AND d.space_id = m.space_id
                 WHERE m.resolved_entity_id = e.entity_id AND {_visible_doc('d', '$2', '$3')})
     OR EXISTS (SELECT 1 FROM facts f WHERE f.space_id = $2 AND f.invalidated_at IS NOT NULL
                   AND (f.subject_entity_id = e.entity_id OR f.object_entity_id = e.entity_id)
                   AND {_supported('f', '$2', '$3')}))"""

ANCHORS = "SELECT entity_id FROM entities WHERE entity_id = ANY ($1::uuid[]) AND space_id = $2"
NAMES = "SELECT entity_id, canonical_name FROM entities WHERE entity_id = ANY ($1::uuid[]) AND space_id = $2"
LIVE_DOCUMENT = f"SELECT d.doc_id, d.title FROM documents d WHERE d.doc_id = $1 AND {_visible_doc('d', '$2', '$3')}"
TITLES = "SELECT doc_id, title FROM documents WHERE doc_id = ANY ($1::uuid[]) AND space_id = $2"


def _walk(rows: Sequence[asyncpg.Record], starts: Sequence[uuid.UUID]) -> Walk:
    walk = Walk(tuple(starts))
    for row in rows:
        walk.examined = row["examined"]
        if row["stop"] is not None:
            walk.stop = row["stop"]
        if row["depth"] == 0:
            continue
        steps = tuple(Step(e, n, f) for e, n, f in zip(row["e_edge"], row["e_near"], row["e_far"], strict=True))
        walk.levels.append(Level(row["depth"], steps, tuple(row["frontier"])))
    return walk


def _edge(row: asyncpg.Record) -> Edge:
    return Edge(
        relation_id=row["fact_id"], subject_id=row["subject_entity_id"], object_id=row["object_entity_id"],
        predicate=row["predicate"], fact=row["label"], evidence_count=row["evidence_count"],
        valid_from=row["valid_from"], valid_until=row["valid_until"], valid_precision=row["valid_precision"],
        ingested_at=row["ingested_at"], invalidated_at=row["invalidated_at"], support=row["support_state"],
    )


class PgSnapshot:
    """The reads of one request, on one connection, in one snapshot."""

    def __init__(self, conn: asyncpg.Connection, visibility: Visibility) -> None:
        self.conn = conn
        self.vis = visibility
        self.principals = None if visibility.principals is None else list(visibility.principals)

    async def now(self) -> dt.datetime:
        value: dt.datetime = await self.conn.fetchval("SELECT now()")
        return value

    async def entity(self, entity_id: uuid.UUID) -> tuple[uuid.UUID, str] | None:
        row = await self.conn.fetchrow(ENTITY_IN_GRAPH, entity_id, self.vis.space_id, self.principals)
        return None if row is None else (row["entity_id"], row["canonical_name"])

    async def anchors(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        rows = await self.conn.fetch(ANCHORS, list(ids), self.vis.space_id)
        return {r["entity_id"] for r in rows}

    async def walk_relations(self, starts: Sequence[uuid.UUID], depth: int, predicates: Sequence[str],
                             clocks: AppliedClocks, budgets: Budgets, *, historical: bool,
                             target: uuid.UUID | None = None) -> Walk:
        rows = await self.conn.fetch(
            WALK_RELATIONS, self.vis.space_id, list(starts), budgets.expansion, budgets.frontier,
            float(budgets.time_ms), depth, target, self.principals, list(predicates) or None,
            clocks.valid_at, clocks.believed_at, historical,
        )
        return _walk(rows, starts)

    async def walk_citations(self, start: uuid.UUID, depth: int, budgets: Budgets, *,
                             target: uuid.UUID) -> Walk:
        rows = await self.conn.fetch(
            WALK_CITATIONS, self.vis.space_id, [start], budgets.expansion, budgets.frontier,
            float(budgets.time_ms), depth, target, self.principals,
        )
        return _walk(rows, [start])

    async def relations(self, ids: Sequence[uuid.UUID], predicates: Sequence[str],
                        clocks: AppliedClocks) -> dict[uuid.UUID, Edge]:
        """The relations among ``ids`` that still hold for this caller at these clocks."""
        if not ids:
            return {}
        rows = await self.conn.fetch(CONFIRM_RELATIONS, self.vis.space_id, list(ids), self.principals,
                                     list(predicates) or None, clocks.valid_at, clocks.believed_at)
        return {r["fact_id"]: _edge(r) for r in rows}

    async def names(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        rows = await self.conn.fetch(NAMES, list(ids), self.vis.space_id)
        return {r["entity_id"]: r["canonical_name"] for r in rows}

    async def document(self, doc_id: uuid.UUID) -> tuple[uuid.UUID, str] | None:
        row = await self.conn.fetchrow(LIVE_DOCUMENT, doc_id, self.vis.space_id, self.principals)
        return None if row is None else (row["doc_id"], row["title"] or "")

    async def citations(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Edge]:
        if not ids:
            return {}
        rows = await self.conn.fetch(CONFIRM_CITATIONS, self.vis.space_id, list(ids), self.principals)
        return {r["crossref_id"]: Edge(relation_id=r["crossref_id"], subject_id=r["from_doc_id"],
                                       object_id=r["to_doc_id"], predicate=r["kind"], fact=r["context"])
                for r in rows}

    async def titles(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        rows = await self.conn.fetch(TITLES, list(ids), self.vis.space_id)
        return {r["doc_id"]: r["title"] or "" for r in rows}


class PgGraphStore:
    """Opens snapshots. ``readonly=False`` exists for tests that change the snapshot between
    nomination and confirmation from inside the same transaction (always rolled back)."""

    def __init__(self, db: Database, *, readonly: bool = True) -> None:
        self.db = db
        self.readonly = readonly

    @asynccontextmanager
    async def snapshot(self, visibility: Visibility, statement_timeout_ms: int) -> AsyncIterator[PgSnapshot]:
        try:
            async with self.db.acquire() as conn:
                tx = conn.transaction(isolation="repeatable_read", readonly=self.readonly)
                await tx.start()
                try:
                    await conn.execute(f"SET LOCAL statement_timeout = {int(statement_timeout_ms)}")
                    yield PgSnapshot(conn, visibility)
                finally:
                    await tx.rollback()  # nothing is ever written: the snapshot just ends
        except (asyncpg.QueryCanceledError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
                asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError, ConnectionError, OSError,
                TimeoutError, DeadlineSpent):
            raise Unavailable(TIMED_OUT, reason="GRAPH_TIMED_OUT") from None
