"""Retrieval reads in PostgreSQL. The caller's space and principals are part of the SQL
predicate of every leg, so an invisible document is never fetched, ranked, counted or
named; facts and entities are visible through visible evidence only.

Parameter conventions in every query: $1 = space id, $2 = principals (NULL = all).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from services.platform.auth import Caller
from services.platform.text import query_tokens
from services.retrieval import lexical

DOC_VISIBLE = ("(d.space_id = $1 AND d.deleted_at IS NULL"
               " AND ($2::text[] IS NULL OR d.acl = '{}' OR d.acl && $2::text[]))")
CLAIM_VISIBLE = f"""EXISTS (SELECT 1 FROM documents d WHERE d.doc_id = c.doc_id AND {DOC_VISIBLE})"""
FACT_SUPPORTED = f"""EXISTS (SELECT 1 FROM fact_evidence e JOIN claims c ON c.claim_id = e.claim_id
                          JOIN documents d ON d.doc_id = c.doc_id
                         WHERE e.fact_id = f.fact_id AND e.stance = 'supports'
                           AND (c.is_current_testimony OR f.support_state = 'withdrawn') AND {DOC_VISIBLE})"""
# Hydrate and transcript also show facts that were retracted: any evidence from a visible,
# non-deleted document will do.
FACT_TRACEABLE = f"""EXISTS (SELECT 1 FROM fact_evidence e JOIN claims c ON c.claim_id = e.claim_id
                          JOIN documents d ON d.doc_id = c.doc_id
                         WHERE e.fact_id = f.fact_id AND {DOC_VISIBLE})"""
ENTITY_VISIBLE = f"""EXISTS (SELECT 1 FROM mentions m JOIN claims c ON c.claim_id = m.claim_id
                          JOIN documents d ON d.doc_id = c.doc_id
                         WHERE m.resolved_entity_id = x.entity_id AND c.is_current_testimony AND {DOC_VISIBLE})"""

# Below this many eligible rows an exact scan is cheaper than the index and can never
# lose recall to the caller's filter; above it HNSW runs with iterative scans.
EXACT_SCAN_MAX = 20_000
# A caller who sees less than FULL_VIEW_SHARE of the space is "restricted": its rows may sit
# far from the query in the index graph (ACLs cluster by team and topic), where even a
# widened strict-order walk (ef_search HNSW_EF_MAX) measured recall@10 0.93 at 30 %
# clustered visibility of 116k claims (0.58 with the unrestricted settings). Up to
# RESTRICTED_EXACT_SCAN_MAX visible rows it therefore scans exactly, reading the rows of the
# documents it may see (``_BY_DOCUMENT``; at 100k claims 16 ms for a 10% caller, 39 ms at
# 30%, against 14 ms for a trusted caller's walk); beyond that the widened walk is the fallback.
FULL_VIEW_SHARE = 0.9
# Callers with more principals are first narrowed to the principals their space's ACLs use
# (``Retrieval.audience``).
DIRECT_PRINCIPALS_MAX = 64
RESTRICTED_EXACT_SCAN_MAX = 100_000
HNSW_EF_MAX = 1000
# An unrestricted HNSW walk keeps this many candidates per row it must return (ef_search).
HNSW_EF_PER_ROW = 4
# The semantic chunk leg scores a chunk by the mean of two cosine distances: its best unit's
# (turn, block) and its whole text's. On the labelled set (MiniLM) chunk-semantic recall@10,
# even/odd questions: whole text 0.718/0.722, best unit 0.714/0.650, both 0.768/0.744; the
# chunk's vector as the mean of its units' 0.677/0.670, so the whole text is embedded too.
# Both distances are taken per row before grouping (in a materialized CTE, which the planner
# cannot fold into the aggregate), so the grouping sorts (id, distance) pairs, not rows wide with
# two vectors (those spilled to disk: 150 ms for 7.5k units).
_CHUNK_DISTANCE = "(min(s.unit_distance) + min(s.chunk_distance)) / 2"


def _chunk_scores(rows: str, units: str | None = None, *, before: str = "") -> str:
    """Chunks scored by ``_CHUNK_DISTANCE`` over ``rows`` (a FROM … WHERE … of chunk units),
    best first, as ``(id, NULL, score)``; with ``units`` (a placeholder), after them that many
    of the same rows' units nearest the query by their own distance, as ``(chunk id,
    ordinal, score)`` (ties broken by key): the unit leg, read in the same statement.
    ``before``: CTEs (each ending in a comma) that ``rows`` reads."""
    scored = (f"SELECT s.id, NULL::int AS ordinal, 1 - {_CHUNK_DISTANCE} AS score FROM s "
              f"GROUP BY s.id ORDER BY {_CHUNK_DISTANCE}, s.id LIMIT $4")
    nearest = "" if units is None else (f" UNION ALL (SELECT s.id, s.ordinal, 1 - s.unit_distance FROM s "
                                        f"ORDER BY s.unit_distance, s.id, s.ordinal LIMIT {units})")
    return (f"WITH {before}s AS MATERIALIZED (SELECT c.chunk_id AS id, u.ordinal, u.embedding <=> $3 AS unit_distance, "
            f"c.embedding <=> $3 AS chunk_distance {rows}) ({scored}){nearest}")
# Its HNSW walk reads this many unit hits per chunk wanted (a chunk holds about three turns
# or blocks; several of them may be near one query).
UNITS_PER_CHUNK_HIT = 4
# How long a caller's row counts (``SearchLegs.counts``) stand before they are recounted.
COUNTS_FRESH_S = 30.0


def principals(caller: Caller) -> list[str] | None:
    return None if caller.principals is None else sorted(caller.principals)


def semantic_plan(eligible: int, total: int, *, filtered: bool = False) -> tuple[str, bool]:
    """How the semantic leg searches for a caller who may see ``eligible`` of the space's
    ``total`` embedded rows: ``exact`` (distances over exactly the visible rows; always with
    filters) or ``hnsw`` (the graph, iterative scans); and whether the caller is restricted
    (then the walk is widened and kept in strict order). `testament check-acl-exposure`
    reports it per principal set."""
    restricted = eligible < total * FULL_VIEW_SHARE
    exact = filtered or eligible <= (RESTRICTED_EXACT_SCAN_MAX if restricted else EXACT_SCAN_MAX)
    return ("exact" if exact else "hnsw"), restricted


_TARGETS: dict[str, dict[str, str]] = {
    "claim": {"table": "claims c", "id": "c.claim_id", "where": f"c.is_current_testimony AND {CLAIM_VISIBLE}",
              "space": "c.space_id", "vec": "c.embedding", "dim": "c.embedding_dim", "graph": "halfvec"},
    "chunk": {"table": "chunks c JOIN document_versions v ON v.version_id = c.version_id", "id": "c.chunk_id",
              "where": f"v.deleted_at IS NULL AND {CLAIM_VISIBLE}", "space": "c.space_id", "vec": "c.embedding",
              "dim": "c.embedding_dim", "graph": "halfvec"},
    # The semantic chunk leg searches the chunks' unit vectors (turns, blocks) with the chunks'
    # own (``_CHUNK_DISTANCE``); a unit is visible exactly when its chunk is.
    "chunk_unit": {"table": "chunk_units u JOIN chunks c ON c.chunk_id = u.chunk_id AND c.space_id = u.space_id "
                            "JOIN document_versions v ON v.version_id = c.version_id", "id": "c.chunk_id",
                   "where": f"v.deleted_at IS NULL AND {CLAIM_VISIBLE}", "space": "u.space_id", "vec": "u.embedding",
                   "dim": "u.embedding_dim", "graph": "halfvec"},
    "fact": {"table": "facts f", "id": "f.fact_id", "where": f"f.invalidated_at IS NULL AND {FACT_SUPPORTED}",
             "space": "f.space_id", "vec": "f.embedding", "dim": "f.embedding_dim", "graph": "halfvec"},
    "entity": {"table": "entities x", "id": "x.entity_id", "where": f"x.merged_into IS NULL AND {ENTITY_VISIBLE}",
               "space": "x.space_id", "vec": "x.profile_embedding", "dim": "x.profile_dim", "graph": "vector"},
}


# The same rows for a restricted caller's exact scan, read from the documents it may see
# rather than checked row by row: the space's documents are few beside their claims, and a
# restricted caller's rows sit in its documents (claims by ``claims_doc``, chunks by
# ``chunks_doc``), so the scan reads the visible rows only, not the whole table (a seq scan
# of 100k claims' vectors to keep the 10% one caller sees: ~200 ms; facts and entities
# sorted whole by distance, then probed through their evidence: ~250 ms). OFFSET 0 keeps
# each document's rows a lookup of its own (flattened, the planner scans the table). Facts
# and entities are visible through visible evidence, exactly as FACT_SUPPORTED and
# ENTITY_VISIBLE say; the aliases are those of ``_TARGETS``.


def _of_documents(table: str, alias: str, columns: str = "*") -> str:
    return (f"documents d CROSS JOIN LATERAL (SELECT {columns} FROM {table} {alias} WHERE {alias}.doc_id = d.doc_id "
            f"AND {alias}.space_id = d.space_id OFFSET 0) {alias}")


_SEEN_CLAIMS = _of_documents("claims", "c")
# Only what the evidence walk reads (migration 0017's claims_doc carries it: index-only).
_SEEN_CLAIM_KEYS = _of_documents("claims", "c", "c.claim_id, c.space_id, c.is_current_testimony")
_SEEN_CHUNKS = (f"{_of_documents('chunks', 'c')} JOIN document_versions v ON v.version_id = c.version_id "
                "AND v.space_id = c.space_id")
_BY_DOCUMENT: dict[str, dict[str, str]] = {
    "claim": {"table": _SEEN_CLAIMS, "where": f"{DOC_VISIBLE} AND c.is_current_testimony"},
    "chunk": {"table": _SEEN_CHUNKS, "where": f"{DOC_VISIBLE} AND v.deleted_at IS NULL"},
    "chunk_unit": {"table": f"{_SEEN_CHUNKS} JOIN chunk_units u ON u.chunk_id = c.chunk_id AND u.space_id = c.space_id",
                   "where": f"{DOC_VISIBLE} AND v.deleted_at IS NULL"},
    "fact": {"table": f"""(SELECT c.space_id, e.fact_id, bool_or(c.is_current_testimony) AS current
                             FROM {_SEEN_CLAIM_KEYS}
                             JOIN fact_evidence e ON e.claim_id = c.claim_id AND e.space_id = c.space_id
                            WHERE {DOC_VISIBLE} AND e.stance = 'supports' GROUP BY c.space_id, e.fact_id) s
                          JOIN facts f ON f.fact_id = s.fact_id AND f.space_id = s.space_id""",
             "where": "f.invalidated_at IS NULL AND (s.current OR f.support_state = 'withdrawn')"},
    # The visible entities as an array of keys (each then read by primary key): as a join, the
    # planner hashed every entity of the space, vectors and all, to keep the ~10% mentioned.
    "entity": {"table": "entities x",
               "where": f"""x.merged_into IS NULL AND x.entity_id = ANY(ARRAY(
                              SELECT DISTINCT m.resolved_entity_id FROM {_SEEN_CLAIM_KEYS}
                                JOIN mentions m ON m.claim_id = c.claim_id AND m.space_id = c.space_id
                               WHERE {DOC_VISIBLE} AND c.is_current_testimony))"""},
}


def _rows(kind: str, restricted: bool) -> dict[str, str]:
    """The ``_TARGETS`` entry of ``kind``, read from the caller's documents when it is restricted."""
    return _TARGETS[kind] | _BY_DOCUMENT[kind] if restricted else _TARGETS[kind]


_EXHAUSTIVE_SUM = lexical.BM25_SUM_SQL.format(term=lexical.BM25_TERM_SQL.format(idf="q.idf", avgdl="q.avgdl"))
# A lexical leg's statistics (CTEs ``d`` and ``s`` over $1 space and placeholders ``kind``, ``terms``): each
# term's df and the kind's counters, from the writers' counters; and each term's idf and the
# average length as every path computes them (one expression, so every path gets the same bits).
_BM25_STATS = """d AS MATERIALIZED (
                   SELECT term, sum(df)::float8 AS df FROM bm25_df
                    WHERE space_id = $1 AND target_kind = {kind} AND term = ANY({terms}::text[]) GROUP BY term),
                 s AS MATERIALIZED (
                   SELECT coalesce(sum(n), 0)::float8 AS n, coalesce(sum(total_length), 0)::float8 AS total,
                          (SELECT coalesce(sum(df), 0)::float8 FROM d) AS postings,
                          ARRAY(SELECT coalesce(d.df, 0) FROM unnest({terms}::text[]) WITH ORDINALITY AS u(term, i)
                                  LEFT JOIN d USING (term) ORDER BY u.i) AS dfs
                     FROM bm25_stats WHERE space_id = $1 AND target_kind = {kind})"""
_BM25_IDF = """ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5)) AS idf,
               CASE WHEN s.n > 0 THEN greatest(s.total / s.n, 1.0::float8) ELSE 1.0::float8 END AS avgdl"""


@dataclass(frozen=True)
class Filters:
    """What narrows a search leg, as data: the legs render it into their own SQL with their
    own placeholder numbers (callers never write SQL fragments).

    ``entity_ids``: claims that mention one of them, chunks holding such a claim, facts
    whose subject or object is one of them. ``predicate``, ``fact_kind``, ``subject_id``:
    facts only."""

    entity_ids: Sequence[uuid.UUID] = ()
    predicate: str | None = None
    fact_kind: str | None = None
    subject_id: uuid.UUID | None = None

    def render(self, kind: str, first: int) -> tuple[str, list[Any]]:
        """The ``AND …`` clause and its arguments, numbered from ``$first``."""
        clauses: list[str] = []
        args: list[Any] = []

        def arg(value: Any) -> str:
            args.append(value)
            return f"${first + len(args) - 1}"

        if self.entity_ids:
            ids = arg(list(self.entity_ids))
            clauses.append({
                "claim": f"EXISTS (SELECT 1 FROM mentions m WHERE m.claim_id = c.claim_id "
                         f"AND m.resolved_entity_id = ANY({ids}::uuid[]))",
                "chunk": f"EXISTS (SELECT 1 FROM claims mc JOIN mentions m ON m.claim_id = mc.claim_id "
                         f"WHERE mc.chunk_id = c.chunk_id AND m.resolved_entity_id = ANY({ids}::uuid[]))",
                "fact": f"(f.subject_entity_id = ANY({ids}::uuid[]) OR f.object_entity_id = ANY({ids}::uuid[]))",
            }[kind])
        if kind == "fact":
            if self.predicate is not None:
                clauses.append(f"f.predicate = {arg(self.predicate)}")
            if self.fact_kind is not None:
                clauses.append(f"f.kind = {arg(self.fact_kind)}")
            if self.subject_id is not None:
                clauses.append(f"f.subject_entity_id = {arg(self.subject_id)}")
        elif self.predicate is not None or self.fact_kind is not None or self.subject_id is not None:
            raise ValueError(f"predicate, fact_kind and subject_id filter facts, not {kind}s")
        return "".join(f" AND {c}" for c in clauses), args


NO_FILTERS = Filters()


class SearchLegs:
    """Nomination channels: semantic (pgvector) and lexical (BM25) over chunks, claims,
    facts and entity profiles, each returning ids in rank order."""

    def __init__(self, model: str | None = None, *, database: Any = None) -> None:
        # The model queries are embedded with; vectors of another model are never compared.
        self.model = model
        # Where stale row counts are recounted, off the answer (see ``counts``); without it the
        # answer that finds them stale recounts them.
        self.database = database
        self._space_models: dict[uuid.UUID, tuple[float, str | None]] = {}
        self._counts: dict[tuple[str, uuid.UUID, tuple[str, ...] | None], tuple[float, int, int]] = {}
        self._recounting: dict[tuple[str, uuid.UUID, tuple[str, ...] | None], asyncio.Task[Any]] = {}
        # The plans of recent searches (exact | hnsw), bounded: benchmarks and operators read it.
        self.plans: deque[str] = deque(maxlen=1000)

    async def counts(self, conn: asyncpg.Connection, kind: str, caller: Caller) -> tuple[int, int]:
        """How many embedded rows the caller may see, and how many the space holds (cached
        briefly): decides exact scan vs index, and how hard the index must search. Only the
        plan depends on them, never what a caller may see; so once known, stale counts serve
        while they are recounted on a connection of their own (a recount reads the whole
        table: ~0.4 s for 100k claims, which every 30 s one answer used to wait for)."""
        key = (kind, caller.space_id, tuple(sorted(caller.principals)) if caller.principals is not None else None)
        cached = self._counts.get(key)
        if cached and time.monotonic() - cached[0] < COUNTS_FRESH_S:
            return cached[1], cached[2]
        if cached and self.database is not None:
            if key not in self._recounting:
                self._recounting[key] = asyncio.create_task(self._recount(key, kind, caller))
            return cached[1], cached[2]
        return await self._count(conn, key, kind, caller)

    async def _recount(self, key: tuple[str, uuid.UUID, tuple[str, ...] | None], kind: str, caller: Caller) -> None:
        try:
            async with self.database.acquire() as conn:
                await self._count(conn, key, kind, caller)
        except Exception:  # noqa: BLE001, S110 - the stale counts serve; the next call tries again
            pass
        finally:
            del self._recounting[key]

    async def _count(self, conn: asyncpg.Connection, key: tuple[str, uuid.UUID, tuple[str, ...] | None], kind: str,
                     caller: Caller) -> tuple[int, int]:
        t = _TARGETS[kind]
        if kind in ("claim", "chunk"):
            row = await conn.fetchrow(
                f"SELECT count(*) FILTER (WHERE {t['where']}) AS visible, count(*) AS total "
                f"FROM {t['table']} WHERE {t['space']} = $1 AND {t['vec']} IS NOT NULL",
                caller.space_id, principals(caller))
            visible, total = int(row["visible"]), int(row["total"])
        else:
            # Facts and entities are visible through evidence: counting them exactly checks
            # every row's evidence (seconds at 100k claims, past the query timeout for a
            # caller's first call). The share of visible live documents estimates it; only
            # the plan (exact scan or graph, how wide a walk) depends on it, never what is
            # returned.
            row = await conn.fetchrow(
                f"""SELECT (SELECT count(*) FROM {t['table']} WHERE {t['space']} = $1 AND {t['vec']} IS NOT NULL)
                           AS total,
                           (SELECT count(*) FILTER (WHERE {DOC_VISIBLE}) / greatest(count(*), 1)::float8
                              FROM documents d WHERE d.space_id = $1 AND d.deleted_at IS NULL) AS share""",
                caller.space_id, principals(caller))
            total = int(row["total"])
            visible = round(total * float(row["share"] or 0.0))
        self._counts[key] = (time.monotonic(), visible, total)
        return visible, total

    async def space_model(self, conn: asyncpg.Connection, space_id: uuid.UUID) -> str | None:
        """The model the space's vectors were made with (None before the first embed), cached briefly."""
        cached = self._space_models.get(space_id)
        if cached and time.monotonic() - cached[0] < 30:
            return cached[1]
        model = await conn.fetchval("SELECT model FROM space_embedding_models WHERE space_id = $1", space_id)
        self._space_models[space_id] = (time.monotonic(), model)
        return model

    async def comparable(self, conn: asyncpg.Connection, space_id: uuid.UUID) -> bool:
        """Are the space's vectors of the query model? (True when either is unknown.)"""
        model = await self.space_model(conn, space_id)
        return self.model is None or model is None or model == self.model

    async def eligible(self, conn: asyncpg.Connection, kind: str, caller: Caller) -> int:
        return (await self.counts(conn, kind, caller))[0]

    async def semantic(self, conn: asyncpg.Connection, kind: str, caller: Caller, vector: Sequence[float], k: int,
                       *, filters: Filters = NO_FILTERS, units: int = 0) -> Ranked:
        """The k rows of ``kind`` nearest the question that the caller may see, best first.
        For chunks, ``units`` > 0 also reads the unit leg in the same statement (``Ranked.units``):
        that many units (turns, blocks) nearest the question by their own vectors, among every
        unit the chunk scoring read, which holds the units the walk or the exact scan found
        nearest (one walk of the unit graph serves both legs)."""
        grouped = kind == "chunk"
        t = _TARGETS["chunk_unit" if grouped else kind]
        extra, extra_args = filters.render(kind, 5)
        nearest = f"${5 + len(extra_args)}" if grouped and units > 0 else None  # the units' LIMIT
        if not await self.comparable(conn, caller.space_id):
            # Another model made these vectors: a distance between them and the query means
            # nothing. The channel is empty until `testament ops reembed` (lexical legs still run).
            self.plans.append("model_mismatch")
            return Ranked()
        dim = len(vector)
        query = np.asarray(vector, dtype=np.float32)
        eligible, total = await self.counts(conn, "chunk_unit" if grouped else kind, caller)
        plan, restricted = semantic_plan(eligible, total, filtered=bool(extra))
        if plan == "exact" and restricted:  # the rows of the caller's documents, read from them
            t = _rows("chunk_unit" if grouped else kind, True)
        base = (f"FROM {t['table']} WHERE {t['space']} = $1 AND {t['dim']} = {dim} AND {t['where']} {extra}")
        args = [caller.space_id, principals(caller), query, k, *extra_args]
        more: list[Any] = [units] if nearest is not None else []  # the scoring statement's own arguments
        if plan == "exact":
            # Exact: distances over exactly the rows the caller may see (no index, full recall).
            self.plans.append("exact")
            rows: list[Any] = []
            if grouped:
                rows = await conn.fetch(_chunk_scores(base, nearest), *args, *more)
            elif not (restricted or extra) and eligible > k:
                # The caller sees (nearly) everything: take the nearest rows by distance alone
                # (a bounded top-N), then probe visibility in that order until k hold; checking
                # every row first costs a join per row for facts and entities. Should too few
                # of them be visible, the joined form below answers.
                rows = await conn.fetch(
                    f"SELECT r.id, 1 - r.distance AS score FROM ("
                    f"SELECT {t['id']} AS id, {t['vec']} <=> $3 AS distance FROM {t['table']} "
                    f"WHERE {t['space']} = $1 AND {t['dim']} = {dim} ORDER BY 2, 1 LIMIT $4 * 2 + 20) r "
                    f"WHERE (SELECT true FROM {t['table']} WHERE {t['space']} = $1 AND {t['id']} = r.id "
                    f"AND {t['where']} LIMIT 1) ORDER BY r.distance, r.id LIMIT $4", *args)
            if not grouped and len(rows) < k:
                # Ties broken by id: the same rows in the same order whichever way they were read.
                rows = await conn.fetch(f"SELECT {t['id']} AS id, 1 - ({t['vec']} <=> $3) AS score {base} "
                                        f"ORDER BY {t['vec']} <=> $3, {t['id']} LIMIT $4", *args)
        else:
            # HNSW with iterative scans: the index keeps walking until k rows pass the filter;
            # for a restricted caller the walk is widened and kept in strict order.
            self.plans.append("hnsw")
            order = "strict_order" if restricted else "relaxed_order"
            fanout = UNITS_PER_CHUNK_HIT if grouped else 1

            def walk(rows: int) -> str:
                """The settings of a walk for ``rows`` rows, as one simple-protocol batch (one round trip)."""
                ef_search = HNSW_EF_MAX if restricted else max(40, min(HNSW_EF_MAX, rows * HNSW_EF_PER_ROW))
                return (f"SET LOCAL hnsw.iterative_scan = '{order}'; SET LOCAL hnsw.ef_search = {ef_search}; "
                        "SET LOCAL hnsw.max_scan_tuples = 200000")

            # Each graph orders by its own (half-precision, migrations 0013 and 0015) distance;
            # the score and the final order are the float distance.
            def graph(target: dict[str, str]) -> str:
                return f"{target['vec']}::{target['graph']}({dim}) <=> $3::vector({dim})::{target['graph']}({dim})"
            near: list[uuid.UUID] = []
            if grouped:
                # The nearest whole chunks, in a walk of their own: it needs k rows, the unit walk
                # below k * fanout (one shared walk cost the chunk graph four times the width).
                c = _TARGETS["chunk"]
                await conn.execute(walk(k))
                near = [r[0] for r in await conn.fetch(
                    f"SELECT {c['id']} FROM {c['table']} WHERE {c['space']} = $1 AND {c['dim']} = {dim} "
                    f"AND {c['where']} {extra} ORDER BY {graph(c)} LIMIT $4", *args)]
            await conn.execute(walk(k * fanout))
            hits = (f"hits AS MATERIALIZED (SELECT {t['id']} AS id, {t['vec']} <=> $3::vector({dim}) AS distance "
                    f"{base} ORDER BY {graph(t)} LIMIT $4 * {fanout})")
            if grouped:
                # Nominated by the nearest units and the nearest whole chunks, then scored exactly.
                more.append(near)
                sql = _chunk_scores(f"FROM {t['table']} WHERE {t['space']} = $1 AND {t['id']} IN "
                                    f"(SELECT id FROM hits UNION SELECT unnest(${len(args) + len(more)}::uuid[]))",
                                    nearest, before=f"{hits}, ")
            else:
                sql = f"WITH {hits} SELECT id, 1 - distance AS score FROM hits ORDER BY distance, id"
            rows = await conn.fetch(sql, *args, *more)
        if nearest is None:
            return Ranked((r["id"], float(r["score"])) for r in rows)
        return Ranked(((r["id"], float(r["score"])) for r in rows if r["ordinal"] is None),
                      units=[((r["id"], r["ordinal"]), float(r["score"])) for r in rows if r["ordinal"] is not None])

    async def similarities(self, conn: asyncpg.Connection, space_id: uuid.UUID, vector: Sequence[float], *,
                           claims: Sequence[uuid.UUID] = (), chunks: Sequence[uuid.UUID] = (),
                           units_of: Sequence[uuid.UUID] = ()
                           ) -> tuple[dict[uuid.UUID, float], dict[tuple[uuid.UUID, int], float]]:
        """Cosine similarity of the query to each of ``claims`` and ``chunks`` (rows another leg
        nominated and hydration confirmed), by primary key: the dense signal for the second
        stage of fusion; and to every unit of the chunks ``units_of``, by key. One statement
        for all three. Empty when the space's vectors come from another model."""
        if not (claims or chunks or units_of) or not await self.comparable(conn, space_id):
            return {}, {}
        dim = len(vector)

        def cosine(table: str, key: str, ordinal: str, arg: str) -> str:
            return (f"SELECT {key} AS id, {ordinal} AS ordinal, 1 - (embedding::vector({dim}) <=> $2::vector({dim})) "
                    f"AS score FROM {table} WHERE space_id = $1 AND {key} = ANY({arg}::uuid[]) "
                    f"AND embedding_dim = {dim}")
        rows = await conn.fetch(" UNION ALL ".join((
            cosine("claims", "claim_id", "NULL::int", "$3"), cosine("chunks", "chunk_id", "NULL::int", "$4"),
            cosine("chunk_units", "chunk_id", "ordinal", "$5"))),
            space_id, np.asarray(vector, dtype=np.float32), list(claims), list(chunks), list(units_of))
        return ({r["id"]: float(r["score"]) for r in rows if r["ordinal"] is None},
                {(r["id"], r["ordinal"]): float(r["score"]) for r in rows if r["ordinal"] is not None})

    async def lexical(self, conn: asyncpg.Connection, kind: str, caller: Caller, text: str, k: int,
                      *, filters: Filters = NO_FILTERS) -> Ranked:
        """Okapi BM25 (IDF over the space, k1 saturation, b length normalisation), top k of
        what the caller may see, read from a bounded prefix of each term's impact-ordered
        postings. The statistics are the writers' counters. The answer is the exhaustive
        one whenever the threshold test proves it (plan ``bm25_exact``); when the prefix
        cap is reached first it is the best of what was read (``bm25_bounded``)."""
        terms = sorted(set(query_tokens(text)))
        if not terms:
            return Ranked()
        t = _TARGETS[kind]
        # Each round reads the first ``depth`` postings of every term by impact (bounded
        # work whatever the caller sees) and bounds each target's score in SQL: its parts
        # read, plus each missing term's bound (zero for a list read to its end, else the
        # term's lowest impact read times the slack). Visibility is then probed in that
        # order, one primary-key lookup per target, until ``$6`` targets are visible: only
        # those come back, with their postings, beside each term's count read and lowest
        # impact, and the ``$6``-th bound (no visible target left out can score more).
        # Checking every target read instead cost a join over the whole target table
        # (0.5 s at 100k claims).
        extra, extra_args = filters.render(kind, 10)
        part = lexical.BM25_TERM_SQL.format(idf="p.idf", avgdl="$8")
        # The impact as migration 0008's bm25_impact computes it, written out: the function
        # call cost 6 µs a posting (the index orders by it but cannot return it).
        impact = lexical.BM25_TERM_SQL.format(idf="1", avgdl=f"{lexical.BM25_REFERENCE_LENGTHS[kind]}::float8")
        sql = f"""WITH prefix AS MATERIALIZED (
                    SELECT q.term, q.idf, p.target_id, p.tf, p.length, {impact} AS impact
                      FROM unnest($4::text[], $7::float8[]) AS q(term, idf)
                      CROSS JOIN LATERAL (
                        SELECT target_id, tf, length FROM bm25_postings
                         WHERE space_id = $1 AND target_kind = $3 AND term = q.term
                         ORDER BY bm25_impact(target_kind, tf, length) DESC LIMIT $5) p),
                  walk AS MATERIALIZED (
                    SELECT term, min(impact) AS floor, count(*) AS walked,
                           CASE WHEN count(*) < $5 THEN 0::float8 ELSE min(idf) * min(impact) * $9::float8 END AS bound
                      FROM prefix GROUP BY term),
                  upper AS MATERIALIZED (
                    SELECT p.target_id, {lexical.BM25_SUM_SQL.format(term=part)}
                           + greatest((SELECT sum(bound) FROM walk) - sum(w.bound), 0::float8) AS score
                      FROM prefix p JOIN walk w USING (term) GROUP BY p.target_id),
                  chosen AS MATERIALIZED (
                    SELECT r.target_id, r.score
                      FROM (SELECT * FROM upper ORDER BY score DESC, target_id OFFSET 0) r
                     WHERE (SELECT true FROM {t['table']} WHERE {t['space']} = $1 AND {t['id']} = r.target_id
                               AND {t['where']} {extra} LIMIT 1)
                     LIMIT $6)
                SELECT p.term, p.target_id, p.tf, p.length, NULL::float8 AS floor, NULL::bigint AS walked
                  FROM prefix p WHERE p.target_id IN (SELECT target_id FROM chosen)
                UNION ALL
                SELECT term, NULL, NULL, NULL, floor, walked FROM walk
                UNION ALL
                SELECT NULL, NULL, NULL, NULL, min(score), count(*) FROM chosen"""
        # One statement: the space's counters, and when the query's terms have few postings
        # (known from the counters) every one of them scored, best first. The caller's
        # visibility is then probed in score order, one primary-key lookup per target, until
        # k are visible (a join would read the whole target table to keep the best ten). The
        # LIMIT (never reached: the counters bound the postings) keeps each term's read a
        # lookup in the term index; without it the planner may hash-join every posting of
        # the kind.
        where, where_args = filters.render(kind, 7)
        exhaustive = f"""WITH {_BM25_STATS.format(kind="$3", terms="$4")},
                     q AS MATERIALIZED (SELECT d.term, {_BM25_IDF} FROM d, s WHERE s.postings <= $5),
                     ranked AS MATERIALIZED (
                       SELECT p.target_id, {_EXHAUSTIVE_SUM} AS score
                         FROM q CROSS JOIN LATERAL (
                                SELECT term, target_id, tf, length FROM bm25_postings
                                 WHERE space_id = $1 AND target_kind = $3 AND term = q.term LIMIT $5) p
                        GROUP BY p.target_id)
                SELECT NULL::uuid AS id, NULL::float8 AS score, n, total, postings, dfs,
                       (SELECT count(*) FROM ranked) AS scored FROM s
                UNION ALL
                (SELECT r.target_id, r.score, NULL, NULL, NULL, NULL, NULL
                   FROM (SELECT * FROM ranked ORDER BY score DESC, target_id LIMIT ${7 + len(where_args)}) r
                  WHERE (SELECT true FROM {t['table']} WHERE {t['space']} = $1 AND {t['id']} = r.target_id
                            AND {t['where']} {where} LIMIT 1)
                  LIMIT $6)"""
        # A caller who sees everything (no principals, no filter) probes a bounded top-N of
        # the scores instead of sorting all of them (~14k targets for a common word at 100k
        # claims); should too few of those be visible, the unbounded statement answers.
        bound = 2 * k + 20 if caller.principals is None and not where else None
        args = (caller.space_id, principals(caller), kind, terms, lexical.BM25_EXHAUSTIVE_MAX, k, *where_args)
        # MaxScore for a caller who sees everything: for one who sees a tenth, the top k often
        # holds targets with none of the rare terms (few of its own have them), the proof fails
        # (nearly half the time at 100k claims) and the exhaustive statement runs after it.
        maxscore = await self._maxscore(conn, kind, caller, terms, k, filters) if bound is not None else None
        if maxscore is not None:
            self.plans.append("bm25_maxscore")
            return maxscore
        rows = await conn.fetch(exhaustive, *args, bound)
        if bound is not None and len(rows) - 1 < k and rows[0]["scored"] > bound:
            rows = await conn.fetch(exhaustive, *args, None)
        stats = rows[0]
        n = stats["n"]
        avgdl = max(stats["total"] / n, 1.0) if n else 1.0
        if not stats["postings"]:  # no term of the query occurs in the space
            self.plans.append("none")
            return Ranked()
        if stats["postings"] <= lexical.BM25_EXHAUSTIVE_MAX:
            # Few postings: scoring all of them is cheaper than proving a prefix (short,
            # uniform texts give the threshold test little to prune).
            self.plans.append("bm25_exhaustive")
            return Ranked((r["id"], float(r["score"])) for r in rows[1:])
        df = {term: int(d) for term, d in zip(terms, stats["dfs"], strict=True)}
        idf = [lexical.bm25_idf(int(n), df[term]) for term in terms]
        # What an unread posting's part can be at most, per unit of its stored impact (the
        # tiny margin covers the impact's rounding to float8).
        slack = max(1.0, avgdl / lexical.BM25_REFERENCE_LENGTHS[kind]) * (1 + 1e-9)
        depth = max(lexical.BM25_FIRST_DEPTH, 4 * k)
        # The whole read is bounded, however many terms the query has.
        deepest = max(depth, lexical.BM25_READ_MAX // len(terms))
        returned = lexical.returned_per_round(k)
        while True:
            final = depth >= deepest
            # The last round brings back and completes as many as random access may read:
            # its answer is proven, or the best of them.
            wide = lexical.BM25_COMPLETE_MAX if final else returned
            rows = await conn.fetch(sql, caller.space_id, principals(caller), kind, terms, depth, wide, idf,
                                    avgdl, slack, *extra_args)
            prefixes = lexical.ThresholdTopK(rows, terms, df, n, avgdl, slack, depth, wide)
            wanted = prefixes.contenders(k)
            if wanted:  # read targets whose other parts could still decide their place
                prefixes.complete(wanted, await conn.fetch(
                    "SELECT term, target_id, tf, length FROM bm25_postings WHERE space_id = $1 "
                    "AND target_kind = $2 AND term = ANY($3::text[]) AND target_id = ANY($4::uuid[])",
                    caller.space_id, kind, terms, wanted))
            top, proven = prefixes.top(k)
            if proven or final:
                break
            depth = prefixes.next_depth(depth, deepest)
        self.plans.append("bm25_exact" if proven else "bm25_bounded")
        # A bounded answer is the best of what was read: at least the longest list matched.
        return Ranked(top, matched=None if proven else max(df.values()))

    async def _maxscore(self, conn: asyncpg.Connection, kind: str, caller: Caller, terms: list[str], k: int,
                        filters: Filters) -> Ranked | None:
        """The exact top k by MaxScore (``lexical.essential_terms``), or None when it does not
        apply or could not prove its answer. Scores are the exhaustive statement's to the bit:
        the same part of each posting, summed in term order."""
        dfs = await conn.fetchval(f"WITH {_BM25_STATS.format(kind='$2', terms='$3')} SELECT dfs FROM s",
                                  caller.space_id, kind, terms)
        essential = lexical.essential_terms(dict(zip(terms, map(int, dfs), strict=True)))
        if essential is None:
            return None
        t = _TARGETS[kind]
        where, where_args = filters.render(kind, 9)
        part = lexical.BM25_TERM_SQL.format(idf="q.idf", avgdl="q.avgdl")
        impact = lexical.BM25_TERM_SQL.format(idf="1", avgdl=f"{lexical.BM25_REFERENCE_LENGTHS[kind]}::float8")
        rows = await conn.fetch(
            f"""WITH {_BM25_STATS.format(kind="$3", terms="$4")},
                 q AS MATERIALIZED (SELECT d.term, d.term = ANY($7::text[]) AS essential, {_BM25_IDF} FROM d, s),
                 ep AS MATERIALIZED (
                   SELECT p.term, p.target_id, {part} AS part
                     FROM q CROSS JOIN LATERAL (
                            SELECT term, target_id, tf, length FROM bm25_postings
                             WHERE space_id = $1 AND target_kind = $3 AND term = q.term LIMIT $5) p
                    WHERE q.essential),
                 partial AS MATERIALIZED (SELECT target_id, sum(part) AS partial FROM ep GROUP BY target_id),
                 cand AS MATERIALIZED (SELECT target_id FROM partial ORDER BY partial DESC, target_id LIMIT $8),
                 ranked AS MATERIALIZED (
                   SELECT x.target_id, sum(x.part ORDER BY x.term COLLATE "C") AS score
                     FROM (SELECT ep.target_id, ep.term, ep.part FROM ep JOIN cand USING (target_id)
                           UNION ALL
                           SELECT p.target_id, p.term, {part}
                             FROM cand c CROSS JOIN q
                             JOIN bm25_postings p ON p.space_id = $1 AND p.target_kind = $3 AND p.term = q.term
                                               AND p.target_id = c.target_id
                            WHERE NOT q.essential) x
                    GROUP BY x.target_id)
            SELECT NULL::uuid AS id, NULL::float8 AS score,
                   (SELECT partial FROM partial ORDER BY partial DESC, target_id OFFSET $8 LIMIT 1) AS cut,
                   (SELECT coalesce(sum(q.idf * (
                             SELECT {impact} FROM bm25_postings p
                              WHERE p.space_id = $1 AND p.target_kind = $3 AND p.term = q.term
                              ORDER BY bm25_impact(p.target_kind, p.tf, p.length) DESC LIMIT 1)), 0)
                      FROM q WHERE NOT q.essential) AS rest,
                   (SELECT avgdl FROM q LIMIT 1) AS avgdl
            UNION ALL
            (SELECT r.target_id, r.score, NULL, NULL, NULL
               FROM (SELECT * FROM ranked ORDER BY score DESC, target_id OFFSET 0) r
              WHERE (SELECT true FROM {t['table']} WHERE {t['space']} = $1 AND {t['id']} = r.target_id
                        AND {t['where']} {where} LIMIT 1)
              LIMIT $6)""",
            caller.space_id, principals(caller), kind, terms, lexical.BM25_EXHAUSTIVE_MAX, k, essential,
            lexical.maxscore_candidates(k), *where_args)
        head, found = rows[0], rows[1:]
        slack = max(1.0, head["avgdl"] / lexical.BM25_REFERENCE_LENGTHS[kind]) * (1 + 1e-9)
        if not lexical.maxscore_proven([r["score"] for r in found], k, head["cut"], head["rest"], slack):
            return None
        return Ranked((r["id"], float(r["score"])) for r in found)


class Ranked(list[tuple[uuid.UUID, float]]):
    """A leg's ids and scores in rank order; ``matched`` is set when a bounded read cut the
    ranking short (plan ``bm25_bounded``): how many targets at least match (seen before the cap);
    ``units``: the nearest units read with a semantic chunk leg (``SearchLegs.semantic``),
    ``((chunk_id, ordinal), cosine)`` best first."""

    def __init__(self, items: Any = (), *, matched: int | None = None,
                 units: Sequence[tuple[tuple[uuid.UUID, int], float]] = ()) -> None:
        super().__init__(items)
        self.matched = matched
        self.units = list(units)


# --------------------------------------------------------------------------------------
# hydration: re-read candidates from the authority tables, in the caller's snapshot
# --------------------------------------------------------------------------------------

FACT_COLUMNS = """f.fact_id, f.kind, f.label, f.subject_entity_id, f.predicate, f.object_entity_id, f.statement,
                  f.valid_from, f.valid_until, f.valid_precision, f.ingested_at, f.invalidated_at,
                  f.superseded_by, f.contradiction_group, f.support_state, f.evidence_count, f.contradict_count"""


async def facts(conn: asyncpg.Connection, caller: Caller, ids: Sequence[uuid.UUID], *,
                traceable: bool = False) -> dict[uuid.UUID, asyncpg.Record]:
    visible = FACT_TRACEABLE if traceable else f"f.invalidated_at IS NULL AND {FACT_SUPPORTED}"
    rows = await conn.fetch(
        f"SELECT {FACT_COLUMNS} FROM facts f WHERE f.space_id = $1 AND f.fact_id = ANY($3::uuid[]) AND {visible}",
        caller.space_id, principals(caller), list(ids))
    return {r["fact_id"]: r for r in rows}


async def evidence_links(conn: asyncpg.Connection, caller: Caller, fact_ids: Sequence[uuid.UUID], *,
                         per_stance: int) -> list[asyncpg.Record]:
    """Up to ``per_stance`` visible current claims per fact and stance, newest testimony first
    (of one time, the latest said in its document: the order depends on what was said, not on
    the claims' random keys)."""
    return await conn.fetch(
        f"""SELECT * FROM (
               SELECT e.fact_id, e.claim_id, e.stance,
                      row_number() OVER (PARTITION BY e.fact_id, e.stance
                                         ORDER BY c.asserted_at DESC NULLS LAST, c.char_start DESC,
                                                  c.claim_text, c.claim_id) AS n
                 FROM fact_evidence e JOIN claims c ON c.claim_id = e.claim_id AND c.space_id = e.space_id
                WHERE c.space_id = $1 AND e.fact_id = ANY($3::uuid[]) AND c.is_current_testimony
                  AND {CLAIM_VISIBLE}) ranked
            WHERE n <= $4 ORDER BY fact_id, stance, n""",
        caller.space_id, principals(caller), list(fact_ids), per_stance)


async def evidence_tallies(conn: asyncpg.Connection, caller: Caller, fact_ids: Sequence[uuid.UUID]
                           ) -> tuple[dict[uuid.UUID, int], dict[tuple[uuid.UUID, str], int]]:
    """For each fact, from its visible current evidence only (counts never include what the
    caller cannot see): the distinct documents that support it, and the claims per stance."""
    rows = await conn.fetch(
        f"""SELECT e.fact_id, e.stance, count(*) AS n, count(DISTINCT c.doc_id) AS docs FROM fact_evidence e
              JOIN claims c ON c.claim_id = e.claim_id AND c.space_id = e.space_id
             WHERE c.space_id = $1 AND e.fact_id = ANY($3::uuid[]) AND c.is_current_testimony AND {CLAIM_VISIBLE}
             GROUP BY e.fact_id, e.stance""", caller.space_id, principals(caller), list(fact_ids))
    return ({r["fact_id"]: r["docs"] for r in rows if r["stance"] == "supports"},
            {(r["fact_id"], r["stance"]): r["n"] for r in rows})


async def co_members(conn: asyncpg.Connection, caller: Caller, groups: Sequence[uuid.UUID], limit: int = 25
                     ) -> dict[uuid.UUID, list[asyncpg.Record]]:
    rows = await conn.fetch(
        f"""SELECT {FACT_COLUMNS} FROM facts f
             WHERE f.space_id = $1 AND f.contradiction_group = ANY($3::uuid[]) AND f.invalidated_at IS NULL
               AND {FACT_SUPPORTED}
             ORDER BY f.contradiction_group, f.evidence_count DESC, f.ingested_at""",
        caller.space_id, principals(caller), list(groups))
    out: dict[uuid.UUID, list[asyncpg.Record]] = {}
    for r in rows:
        out.setdefault(r["contradiction_group"], []).append(r)
    return out


CLAIM_COLUMNS = """c.claim_id, c.doc_id, c.chunk_id, c.version_id, c.claim_text, c.source_span, c.char_start,
                   c.char_end, c.evidence_spans, c.is_attributed, c.is_current_testimony, c.asserted_at,
                   c.claim_valid_from, c.claim_valid_until, c.claim_valid_precision, c.claim_valid_kind,
                   c.attributed_to, d.title AS document_title, d.source_kind"""


async def claims(conn: asyncpg.Connection, caller: Caller, ids: Sequence[uuid.UUID], *,
                 current_only: bool = True) -> dict[uuid.UUID, asyncpg.Record]:
    rows = await conn.fetch(
        f"""SELECT {CLAIM_COLUMNS} FROM claims c JOIN documents d ON d.doc_id = c.doc_id AND d.space_id = c.space_id
             WHERE c.space_id = $1 AND c.claim_id = ANY($3::uuid[]) AND {DOC_VISIBLE}
               AND ($4::boolean = false OR c.is_current_testimony)""",
        caller.space_id, principals(caller), list(ids), current_only)
    return {r["claim_id"]: r for r in rows}


CHUNK_COLUMNS = """c.chunk_id, c.doc_id, c.version_id, c.representation_id, c.chunk_text, c.char_start, c.char_end,
                   c.ordinal, c.location_header, s.role AS section_role, d.title AS document_title, d.source_kind,
                   v.source_modified_at"""


async def chunks(conn: asyncpg.Connection, caller: Caller, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID,
                                                                                            asyncpg.Record]:
    rows = await conn.fetch(
        f"""SELECT {CHUNK_COLUMNS} FROM chunks c
              JOIN documents d ON d.doc_id = c.doc_id AND d.space_id = c.space_id
              JOIN document_versions v ON v.version_id = c.version_id AND v.space_id = c.space_id
         LEFT JOIN sections s ON s.section_id = c.section_id AND s.space_id = c.space_id
             WHERE c.space_id = $1 AND c.chunk_id = ANY($3::uuid[]) AND v.deleted_at IS NULL AND {DOC_VISIBLE}""",
        caller.space_id, principals(caller), list(ids))
    return {r["chunk_id"]: r for r in rows}


async def chunk_ids_between(conn: asyncpg.Connection, version_id: uuid.UUID, first: int, last: int
                            ) -> list[uuid.UUID]:
    """The chunks of one version with ordinals in [first, last], in order (not yet confirmed)."""
    rows = await conn.fetch("SELECT chunk_id FROM chunks WHERE version_id = $1 AND ordinal BETWEEN $2 AND $3 "
                            "ORDER BY ordinal", version_id, first, last)
    return [r["chunk_id"] for r in rows]


async def entities(conn: asyncpg.Connection, caller: Caller, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID,
                                                                                              asyncpg.Record]:
    rows = await conn.fetch(
        f"""SELECT x.entity_id, x.canonical_name FROM entities x
             WHERE x.space_id = $1 AND x.entity_id = ANY($3::uuid[]) AND x.merged_into IS NULL AND {ENTITY_VISIBLE}""",
        caller.space_id, principals(caller), list(ids))
    return {r["entity_id"]: r for r in rows}


async def resolve_tiers(conn: asyncpg.Connection, caller: Caller, name: str, key: str, width: int
                        ) -> tuple[str, list[asyncpg.Record], bool]:
    """T0 exact alias (every match, uncapped), else T1 trigram, else T2 phonetic; capped tiers
    report whether more candidates existed. Visible entities only."""
    rows = await conn.fetch(
        f"""SELECT DISTINCT x.entity_id, x.canonical_name FROM entity_aliases a
             JOIN entities x USING (entity_id, space_id)
             WHERE a.space_id = $1 AND a.normalized_alias = $3 AND x.merged_into IS NULL AND {ENTITY_VISIBLE}
             ORDER BY x.canonical_name, x.entity_id""", caller.space_id, principals(caller), key)
    if rows:
        return "T0", list(rows), False
    # T1 and T2 rank the matching aliases first and then probe visibility in that order, one
    # entity at a time, until ``width + 1`` are visible: checking every match first (each
    # through all its mentions) cost 100 ms for a common first name and a caller who sees a
    # tenth of a 100k-claim space.
    rows = await conn.fetch(
        _visible_in_order("SELECT a.entity_id, max(similarity(a.normalized_alias, $3)) AS score FROM entity_aliases a "
                          "WHERE a.space_id = $1 AND a.normalized_alias % $3 GROUP BY a.entity_id"),
        caller.space_id, principals(caller), key, width + 1)
    if rows:
        return "T1", list(rows[:width]), len(rows) > width
    first = key.split()[0] if key else ""
    if first:
        codes = await conn.fetchval("SELECT daitch_mokotoff($1)", first)
        if codes:
            rows = await conn.fetch(
                _visible_in_order("SELECT DISTINCT a.entity_id, 0::float8 AS score FROM entity_aliases a "
                                  "WHERE a.space_id = $1 AND a.phonetic && $3::text[]"),
                caller.space_id, principals(caller), list(codes), width + 1)
            if rows:
                return "T2", list(rows[:width]), len(rows) > width
    return "", [], False


def _visible_in_order(matches: str) -> str:
    """The first ``$4`` current entities of ``matches`` (``entity_id, score`` rows), best
    score first and then by key, that the caller may see, with their canonical names."""
    order = "score DESC, entity_id"
    return f"""WITH m AS MATERIALIZED ({matches}),
                chosen AS MATERIALIZED (
                  SELECT m.entity_id, m.score FROM (SELECT * FROM m ORDER BY {order} OFFSET 0) m
                   WHERE (SELECT true FROM entities x WHERE x.space_id = $1 AND x.entity_id = m.entity_id
                             AND x.merged_into IS NULL AND {ENTITY_VISIBLE} LIMIT 1)
                   LIMIT $4)
              SELECT * FROM (SELECT x.entity_id, x.canonical_name, m.score FROM chosen m
                               JOIN entities x ON x.space_id = $1 AND x.entity_id = m.entity_id) r
               ORDER BY {order}"""


async def named_entities(conn: asyncpg.Connection, caller: Caller, keys: Sequence[str]) -> list[uuid.UUID]:
    """Visible current entities one of whose aliases is exactly one of ``keys`` (normalised
    names found in a question). Uses the alias index; never a scan."""
    if not keys:
        return []
    rows = await conn.fetch(
        f"""SELECT DISTINCT x.entity_id FROM entity_aliases a JOIN entities x USING (entity_id, space_id)
             WHERE a.space_id = $1 AND a.normalized_alias = ANY($3::text[]) AND x.merged_into IS NULL
               AND {ENTITY_VISIBLE}""", caller.space_id, principals(caller), list(keys))
    return [r["entity_id"] for r in rows]


async def mentioning(conn: asyncpg.Connection, space_id: uuid.UUID, claim_ids: Sequence[uuid.UUID],
                     chunk_ids: Sequence[uuid.UUID], entity_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of these (already visible) claims and chunks mention one of the entities: a claim
    through its resolved mentions, a chunk through any claim read from it."""
    if not entity_ids or not (claim_ids or chunk_ids):
        return set()
    rows = await conn.fetch(
        """SELECT c.claim_id, c.chunk_id FROM claims c
            WHERE c.space_id = $1 AND (c.claim_id = ANY($2::uuid[]) OR c.chunk_id = ANY($3::uuid[]))
              AND EXISTS (SELECT 1 FROM mentions m WHERE m.claim_id = c.claim_id
                             AND m.resolved_entity_id = ANY($4::uuid[]))""",
        space_id, list(claim_ids), list(chunk_ids), list(entity_ids))
    wanted_claims, wanted_chunks = set(claim_ids), set(chunk_ids)
    out: set[uuid.UUID] = set()
    for r in rows:
        if r["claim_id"] in wanted_claims:
            out.add(r["claim_id"])
        if r["chunk_id"] in wanted_chunks:
            out.add(r["chunk_id"])
    return out


# facts_of_entities reads this many of an entity's facts per fact it nominates.
ENTITY_FACTS_READ = 4


async def facts_of_entities(conn: asyncpg.Connection, caller: Caller, entity_ids: Sequence[uuid.UUID],
                            limit: int, vector: Sequence[float] | None = None) -> list[uuid.UUID]:
    """Current facts about these entities (subject or object) that the caller may see (what it
    may not is never nominated, so never counted as dropped): with ``vector`` (the question's,
    of the space's model) those whose labels are nearest it first, then the best supported;
    ties by label and key, so the order depends on what the space holds, not on when it was
    read (ingest time ordered them before: the same documents answered differently)."""
    args: list[Any] = [caller.space_id, principals(caller), list(entity_ids), limit]
    order = "f.evidence_count DESC, f.label, f.fact_id"
    if vector is not None:
        args.append(np.asarray(vector, dtype=np.float32))
        order = f"CASE WHEN f.embedding_dim = {len(vector)} THEN f.embedding <=> $5 END NULLS LAST, {order}"
    # The order first, over a bounded prefix, then the caller's view of it: checking every
    # fact of a busy entity first made facts_context's p95 at 100k claims 40% slower. A caller
    # who sees few of the prefix gets fewer nominations, never another's.
    rows = await conn.fetch(
        f"""SELECT o.fact_id FROM (
               SELECT f.fact_id, f.space_id, row_number() OVER (ORDER BY {order}) AS n FROM facts f
                WHERE f.space_id = $1 AND f.invalidated_at IS NULL
                  AND (f.subject_entity_id = ANY($3::uuid[]) OR f.object_entity_id = ANY($3::uuid[]))
                ORDER BY n LIMIT $4 * {ENTITY_FACTS_READ}) o
             JOIN facts f ON f.fact_id = o.fact_id AND f.space_id = o.space_id
            WHERE {FACT_SUPPORTED} ORDER BY o.n LIMIT $4""", *args)
    return [r[0] for r in rows]


async def context_hits(conn: asyncpg.Connection, caller: Caller, candidates: Sequence[uuid.UUID],
                       context: Sequence[uuid.UUID]) -> dict[uuid.UUID, int]:
    """For each candidate entity, how many visible current relations link it to the context."""
    rows = await conn.fetch(
        f"""SELECT x.entity_id, count(*) AS n FROM (SELECT unnest($3::uuid[]) AS entity_id) x
              JOIN facts f ON f.kind = 'relation' AND f.invalidated_at IS NULL
                          AND ((f.subject_entity_id = x.entity_id AND f.object_entity_id = ANY($4::uuid[]))
                            OR (f.object_entity_id = x.entity_id AND f.subject_entity_id = ANY($4::uuid[])))
             WHERE f.space_id = $1 AND {FACT_SUPPORTED}
             GROUP BY x.entity_id""", caller.space_id, principals(caller), list(candidates), list(context))
    return {r["entity_id"]: r["n"] for r in rows}
