"""Retrieval use cases: nominate, fuse, confirm, and answer in typed envelopes.

Every candidate a search channel nominates is re-read from the authority tables in one
snapshot; what no longer holds is dropped and counted in ``dropped_by_hydration``. "No"
is a typed negative, never an empty list; a spent budget is ``boundary``, never a
silently smaller answer. No language model runs here: only the query is embedded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import asyncpg
from google.protobuf import struct_pb2, timestamp_pb2
from testament.common.v1 import types_pb2 as t

from services.platform.auth import Caller
from services.platform.errors import Unavailable
from services.platform.structure import retrieval_unit_spans
from services.platform.text import fold, normalize_name, query_tokens, tokens
from services.platform.wire import enum_value, timestamp
from services.retrieval import adapters as db
from services.retrieval.domain import (
    CURRENT,
    OPERATIONS,
    RRF_K,
    EvidenceCandidates,
    FusionWeights,
    TimeScope,
    UnitCandidates,
    UnitKey,
    Validity,
    bm25_rank,
    claims_by_unit,
    fuse_evidence,
    fuse_facts,
    fuse_units,
    holds,
    is_temporal_question,
    mentions_time,
    name_keys,
    operation,
    temporal_match,
    term_coverage,
    validate_arguments,
    weights_for,
)

FACTS_BUDGET_S = 25.0
# Candidates a fact leg nominates (and fusion reads). facts_context recall@10 on the labelled
# set (MiniLM, #15): 200, 100 and 50 all 0.378, 30 0.360.
NOMINATE = 50
MAX_EVIDENCE = 60
CO_MEMBERS = 25
EXPANSION_CAP = 20
DATED_CACHE = 200_000


class Embedder(Protocol):
    model: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class GraphExpansion(Protocol):
    async def expand(self, caller_metadata: Sequence[tuple[str, str]], anchors: Sequence[uuid.UUID], hops: int,
                     predicate: str | None, valid_at: dt.datetime | None) -> tuple[list[uuid.UUID], bool]: ...


def ts(value: dt.datetime | None) -> timestamp_pb2.Timestamp | None:
    return None if value is None else timestamp(value)


def _set_ts(message: Any, name: str, value: dt.datetime | None) -> None:
    if value is not None:
        getattr(message, name).CopyFrom(ts(value))


def scope_message(scope: TimeScope, now: dt.datetime) -> t.TemporalScope:
    regime = enum_value(t.IdentityRegime, "current")
    message = t.TemporalScope()
    if scope.mode == "at":
        message.at.CopyFrom(t.AtTemporalScope(mode="at", at=ts(scope.at), evaluated_at=ts(now), believed_at=ts(now),
                                              identity_regime=regime))
    elif scope.mode == "overlap":
        inner = t.OverlapTemporalScope(mode="overlap", evaluated_at=ts(now), believed_at=ts(now),
                                       identity_regime=regime)
        assert scope.start is not None and scope.end is not None
        getattr(inner, "from").CopyFrom(timestamp(scope.start))
        inner.to.CopyFrom(timestamp(scope.end))
        message.overlap.CopyFrom(inner)
    elif scope.mode == "history":
        message.history.CopyFrom(t.HistoryTemporalScope(mode="history", evaluated_at=ts(now), believed_at=ts(now),
                                                        identity_regime=regime))
    else:
        message.current.CopyFrom(t.CurrentTemporalScope(mode="current", evaluated_at=ts(now), believed_at=ts(now),
                                                        identity_regime=regime))
    return message


def envelope(grain: str, scope: TimeScope, now: dt.datetime) -> t.Envelope:
    env = t.Envelope(grain=enum_value(t.Grain, grain), temporal_scope=scope_message(scope, now))
    env.freshness.pg_live_ts.CopyFrom(timestamp(now))
    env.freshness.p1_written_inline = True
    return env


def negative(env: t.Envelope, kind: str, explanation: str, workaround: str | None = None) -> t.Envelope:
    env.negative.kind = enum_value(t.NegativeKind, kind)
    env.negative.explanation = explanation
    if workaround:
        env.negative.workaround = workaround
    return env


def truncation(env: t.Envelope, *, returned: int, estimated: int, exact: bool, reason: str | None,
               continuation: str | None = None) -> None:
    env.truncation.truncated = estimated > returned or continuation is not None
    env.truncation.returned = returned
    env.truncation.estimated_total = max(estimated, returned)
    env.truncation.total_is_exact = exact
    if reason is not None:
        env.truncation.reason = enum_value(t.TruncationReason, reason)
    if continuation is not None:
        env.truncation.continuation = continuation


def validity_message(row: Any) -> t.Validity:
    message = t.Validity(valid_precision=enum_value(t.ClaimValidPrecision, row["valid_precision"]),
                         ingested_at=ts(row["ingested_at"]))
    _set_ts(message, "valid_from", row["valid_from"])
    _set_ts(message, "valid_until", row["valid_until"])
    _set_ts(message, "invalidated_at", row["invalidated_at"])
    return message


def _validity(row: Any) -> Validity:
    return Validity(row["valid_from"], row["valid_until"], row["valid_precision"], row["superseded_by"] is not None)


def evidence_message(row: Any) -> t.EvidenceResult:
    message = t.EvidenceResult(
        claim_id=str(row["claim_id"]), doc_id=str(row["doc_id"]), chunk_id=str(row["chunk_id"]),
        claim_text=row["claim_text"], source_span=row["source_span"], char_start=row["char_start"],
        char_end=row["char_end"], is_attributed=row["is_attributed"],
        is_current_testimony=row["is_current_testimony"],
        claim_valid_precision=enum_value(t.ClaimValidPrecision, row["claim_valid_precision"]),
        source_kind=row["source_kind"])
    for span in row["evidence_spans"] or []:
        message.evidence_spans.add(char_start=span["char_start"], char_end=span["char_end"])
    _set_ts(message, "asserted_at", row["asserted_at"])
    if row["claim_valid_precision"] != "unknown":
        _set_ts(message, "claim_valid_from", row["claim_valid_from"])
        _set_ts(message, "claim_valid_until", row["claim_valid_until"])
    if row["claim_valid_kind"]:
        message.claim_valid_kind = enum_value(t.ClaimValidKind, row["claim_valid_kind"])
    if row["document_title"] is not None:
        message.document_title = row["document_title"]
    return message


def chunk_message(row: Any) -> t.ChunkEvidenceResult:
    message = t.ChunkEvidenceResult(
        chunk_id=str(row["chunk_id"]), doc_id=str(row["doc_id"]), version_id=str(row["version_id"]),
        representation_id=str(row["representation_id"]), chunk_text=row["chunk_text"],
        char_start=row["char_start"], char_end=row["char_end"], source_kind=row["source_kind"])
    if row["section_role"] is not None:
        message.section_role = row["section_role"]
    if row["document_title"] is not None:
        message.document_title = row["document_title"]
    if row["location_header"]:
        message.context_prefix = row["location_header"]
    _set_ts(message, "source_modified_at", row["source_modified_at"])
    return message


class Retrieval:
    def __init__(self, database: Any, embedder: Embedder, graph: GraphExpansion | None, *,
                 redact: Callable[[str, Caller], str] | None = None, weights: FusionWeights | None = None,
                 fact_depth: int = NOMINATE) -> None:
        self.database = database
        self.weights = weights or weights_for(embedder.model)
        # Facts: plain reciprocal rank over every nominee, as before, with the evidence's entity lift.
        self.fact_weights = FusionWeights(k=RRF_K, depth=fact_depth, entity_lift=self.weights.entity_lift)
        self.embedder = embedder
        self.graph = graph
        self.legs = db.SearchLegs(model=getattr(embedder, "model", None),
                                  database=database if hasattr(database, "acquire") else None)
        self.redact = redact or (lambda text, caller: text)
        self._dated: dict[uuid.UUID, bool] = {}
        self._folds: dict[uuid.UUID, str] = {}
        self._item_terms: dict[uuid.UUID, frozenset[str]] = {}
        self._units: dict[uuid.UUID, list[tuple[int, int, str]]] = {}
        self._unit_counts: dict[UnitKey, Counter[str]] = {}
        # Helper connections for concurrent legs: fewer than the pool holds (see concurrently).
        size = database.pool.get_max_size() if hasattr(database, "pool") else 0
        self._helper = _Slots(size // 2) if size >= 4 else None

    @asynccontextmanager
    async def snapshot(self) -> Any:
        """One repeatable-read, read-only snapshot for a whole answer."""
        async with self.database.transaction(isolation="repeatable_read", readonly=True) as conn:
            yield conn

    async def concurrently(self, conn: asyncpg.Connection,
                           calls: Sequence[Callable[[asyncpg.Connection], Awaitable[Any]]]) -> list[Any]:
        """Run independent legs of one answer at once, all in ``conn``'s snapshot: the first
        on ``conn``, each other on a pooled connection that imports the snapshot
        (``pg_export_snapshot``), while helper slots last; a leg without a slot runs on
        ``conn`` after the first. Slots are fewer than the pool's connections, so an answer
        holding its snapshot never waits for a connection that only answers could free."""
        helpers = [self._helper.acquire_nowait() for _ in calls[1:]] if self._helper else []
        if not any(helpers):
            return [await call(conn) for call in calls]
        try:
            exported = await conn.fetchval("SELECT pg_export_snapshot()")
        except BaseException:
            for _ in filter(None, helpers):
                self._helper.release()  # type: ignore[union-attr] # helpers is empty without slots
            raise

        async def on_helper(call: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
            try:
                async with self.database.transaction(isolation="repeatable_read", readonly=True) as other:
                    await other.execute(f"SET TRANSACTION SNAPSHOT '{exported}'")
                    return await call(other)
            finally:
                assert self._helper is not None
                self._helper.release()

        async def on_own(own: Sequence[int]) -> list[Any]:
            return [await calls[i](conn) for i in own]

        mine = [0, *(i + 1 for i, slot in enumerate(helpers) if not slot)]
        theirs = [i + 1 for i, slot in enumerate(helpers) if slot]
        try:
            async with asyncio.TaskGroup() as group:  # a failing leg cancels the others before conn is let go
                own = group.create_task(on_own(mine))
                others = [group.create_task(on_helper(calls[i])) for i in theirs]
        except BaseExceptionGroup as failed:
            # The leg's own error, as one after another would raise it (a timeout stays a
            # TimeoutError, which callers and the error mapping know; a group would be a 500).
            raise failed.exceptions[0] from None
        results: dict[int, Any] = dict(zip(mine, own.result(), strict=True)) | {
            i: task.result() for i, task in zip(theirs, others, strict=True)}
        return [results[i] for i in range(len(calls))]

    async def _now(self, conn: asyncpg.Connection) -> dt.datetime:
        return await conn.fetchval("SELECT now()")

    async def audience(self, caller: Caller) -> Caller:
        """The caller as its queries see it: beyond a few dozen principals, only those that
        occur in some ACL of its space (the same documents are visible, the ACL checks stay
        cheap for a caller with thousands of principals)."""
        if caller.principals is None or len(caller.principals) <= db.DIRECT_PRINCIPALS_MAX:
            return caller
        kept = await self.database.fetch(
            "SELECT principal FROM acl_principals WHERE space_id = $1 AND principal = ANY($2::text[])",
            caller.space_id, sorted(caller.principals))
        return dataclasses.replace(caller, principals=frozenset(r[0] for r in kept))

    async def embed_query(self, text: str) -> list[float]:
        try:
            (vector,) = await self.embedder.embed([text])
        except Exception as exc:  # noqa: BLE001 - any provider failure is the documented 503
            raise Unavailable("model provider unavailable", reason="MODEL_PROVIDER_UNAVAILABLE") from exc
        return vector

    # --- operations ------------------------------------------------------------------

    def descriptors(self) -> list[Any]:
        return list(OPERATIONS)

    async def run_operation(self, caller: Caller, name: str, arguments: dict[str, Any],
                            metadata: Sequence[tuple[str, str]] = ()) -> t.Envelope | t.ContextBundle:
        op = operation(name)
        args = validate_arguments(op.name, arguments)
        if op.name == "resolve_entity":
            return await self.resolve(caller, args["name"], ())
        if op.name == "claims_and_sources_context":
            return await self.claims_and_sources(caller, args["query"], args.get("entity_ids"), args["k"],
                                                 args["candidate_k"])
        if op.name == "facts_context":
            return await self.facts_context(caller, args["query"], args.get("entity_ids"), args["k"],
                                            args["evidence_per_fact"], args["hops"], args.get("predicate"),
                                            args["time"], metadata)
        vector = await self.embed_query(args["query"])  # once for both halves
        claims, facts = await asyncio.gather(
            self.claims_and_sources(caller, args["query"], args.get("entity_ids"), 50, 200, vector=vector),
            self.facts_context(caller, args["query"], args.get("entity_ids"), 15, 3, args["hops"],
                               args.get("predicate"), args["time"], metadata, vector=vector))
        return t.ContextBundle(contract="ContextBundle/v2", claims_and_sources=claims, facts=facts)

    # --- resolve ---------------------------------------------------------------------

    async def resolve(self, caller: Caller, name: str, context_ids: Sequence[uuid.UUID],
                      *, width: int = 8) -> t.Envelope:
        key = normalize_name(name)
        vector = None
        async with self.snapshot() as conn:
            now = await self._now(conn)
            env = envelope("fact", CURRENT, now)
            tier, rows, more = await db.resolve_tiers(conn, caller, name, key, width)
            if not rows and key:
                # T3: profile embeddings, only when no name matched.
                vector = await self.embed_query(name)
                hits = await self.legs.semantic(conn, "entity", caller, vector, width + 1)
                found = await db.entities(conn, caller, [h for h, score in hits if score >= 0.35])
                rows = [found[h] for h, score in hits if h in found][:width]
                tier, more = ("T3", len(hits) > width) if rows else ("", False)
            hits_by_entity: dict[uuid.UUID, int] = {}
            if context_ids and rows:
                hits_by_entity = await db.context_hits(conn, caller, [r["entity_id"] for r in rows], context_ids)
        ranked = sorted(rows, key=lambda r: -hits_by_entity.get(r["entity_id"], 0))  # stable: reorders only
        for r in ranked:
            env.entities.add(entity_id=str(r["entity_id"]), canonical_name=self.redact(r["canonical_name"], caller),
                             tier=enum_value(t.ResolutionTier, tier),
                             context_hits=hits_by_entity.get(r["entity_id"], 0))
        if tier in ("T1", "T2", "T3"):
            truncation(env, returned=len(ranked), estimated=len(ranked) + (1 if more else 0), exact=False,
                       reason="resolve_candidate_limit")
        if not ranked:
            negative(env, "unknown_entity", f"no entity is known by the name {name!r}",
                     "search claims for the name, or try another spelling")
        return env

    # --- facts -----------------------------------------------------------------------

    async def facts_context(self, caller: Caller, query: str, entity_ids: Sequence[uuid.UUID] | None, k: int,
                            per_stance: int, hops: int, predicate: str | None, scope: TimeScope,
                            metadata: Sequence[tuple[str, str]] = (), *, vector: list[float] | None = None
                            ) -> t.Envelope:
        try:
            async with asyncio.timeout(FACTS_BUDGET_S):
                return await self._facts_context(caller, query, entity_ids, k, per_stance, hops, predicate,
                                                 scope, metadata, vector or await self.embed_query(query))
        except TimeoutError:
            env = envelope("fact", scope, dt.datetime.now(dt.UTC))
            return negative(env, "boundary", f"the {FACTS_BUDGET_S:.0f} s fact retrieval budget ran out",
                            "narrow the question with entity_ids or a predicate, then retry")

    async def _facts_context(self, caller: Caller, query: str, entity_ids: Sequence[uuid.UUID] | None, k: int,
                             per_stance: int, hops: int, predicate: str | None, scope: TimeScope,
                             metadata: Sequence[tuple[str, str]], vector: list[float]) -> t.Envelope:
        expanded: list[uuid.UUID] = []
        expansion_truncated = False
        if entity_ids and scope.mode in ("current", "at") and self.graph is not None:
            try:
                expanded, expansion_truncated = await self.graph.expand(
                    metadata, entity_ids, hops, predicate, scope.at if scope.mode == "at" else None)
            except Exception:  # noqa: BLE001 - the graph could not answer: say so, never a smaller answer
                async with self.snapshot() as conn:
                    env = envelope("fact", scope, await self._now(conn))
                return negative(env, "boundary", "the live graph could not expand the anchors",
                                "retry, or ask with mode history/overlap (anchors only)")
        async with self.snapshot() as conn:
            now = await self._now(conn)
            env = envelope("fact", scope, now)
            if entity_ids:
                if await _unknown_anchors(conn, caller, env, entity_ids):
                    return env
            scope_ids = list(dict.fromkeys([*(entity_ids or []), *expanded]))[:EXPANSION_CAP]
            filters = db.Filters(entity_ids=scope_ids, predicate=predicate or None)
            depth = self.fact_weights.depth
            legs = [lambda c: self.legs.semantic(c, "fact", caller, vector, depth, filters=filters),
                    lambda c: self.legs.lexical(c, "fact", caller, query, depth, filters=filters)]
            if not entity_ids:  # entity profiles: facts of the best-matching entities join the fusion
                legs.append(lambda c: self.legs.semantic(c, "entity", caller, vector, EXPANSION_CAP))
            semantic, lexical, *rest = await self.concurrently(conn, legs)
            channels: dict[str, list[uuid.UUID]] = {"semantic": [i for i, _ in semantic],
                                                    "bm25": [i for i, _ in lexical]}
            near = vector if await self.legs.comparable(conn, caller.space_id) else None
            if rest:
                profiles = rest[0]
                if profiles:
                    channels["entity_profile"] = await db.facts_of_entities(conn, caller, [p for p, _ in profiles],
                                                                            depth, near)
            named: frozenset[uuid.UUID] = frozenset()
            if not entity_ids:  # anchors already confine the facts to their entities
                entities = await db.named_entities(conn, caller, name_keys(query))
                if entities:
                    named = frozenset(await db.facts_of_entities(conn, caller, entities, depth, near))
            fused = fuse_facts(channels, self.fact_weights, named=named)[:depth]
            confirmed: list[Any] = []
            dropped = 0
            for start in range(0, len(fused), 50):  # confirm in batches until k+1 hold
                batch = [f.item_id for f in fused[start:start + 50]]
                rows = await db.facts(conn, caller, batch)
                for fact_id in batch:
                    row = rows.get(fact_id)
                    if row is None or not holds(_validity(row), scope, now) or (
                            predicate and row["predicate"] != predicate):
                        dropped += 1
                        continue
                    confirmed.append(row)
                if len(confirmed) > k:
                    break
            more = len(confirmed) > k
            chosen = confirmed[:k]
            await self._attach_facts(conn, caller, env, chosen, per_stance)
            _ranking(env, fused, {r["fact_id"] for r in chosen})
            if expanded:
                names = await db.entities(conn, caller, [e for e in expanded if e not in (entity_ids or [])])
                for entity_id in expanded:
                    if entity_id in names:
                        env.nodes.add(entity_id=str(entity_id), name=self.redact(names[entity_id]["canonical_name"],
                                                                                 caller), hops=1)
        env.dropped_by_hydration = dropped
        if more or expansion_truncated:
            truncation(env, returned=len(chosen), estimated=len(confirmed), exact=False,
                       reason="expansion_budget" if expansion_truncated and not more else "result_budget")
        if not chosen:
            negative(env, "known_empty", "no held fact matches the question in this time scope",
                     "try mode history, or claims_and_sources_context for what sources said")
        return env

    async def _attach_facts(self, conn: asyncpg.Connection, caller: Caller, env: t.Envelope, rows: Sequence[Any],
                            per_stance: int) -> None:
        ids = [r["fact_id"] for r in rows]
        groups = [r["contradiction_group"] for r in rows if r["contradiction_group"]]
        members = await db.co_members(conn, caller, groups) if groups else {}
        # The facts' and their co-members' visible evidence, counted in one statement.
        counts, totals = await db.evidence_tallies(
            conn, caller, list(dict.fromkeys([*ids, *(m["fact_id"] for ms in members.values() for m in ms)])))
        for row in rows:
            fact = env.facts.add(
                fact_id=str(row["fact_id"]), kind=enum_value(t.FactKind, row["kind"]),
                label=self.redact(row["label"], caller), evidence_count=counts.get(row["fact_id"], 0),
                validity=validity_message(row), temporal_match=enum_value(t.TemporalMatch, temporal_match(
                    _validity(row))), support=enum_value(t.FactSupport, row["support_state"]))
            group = row["contradiction_group"]
            if group is not None:
                fact.contradiction_group = str(group)
                others = [m for m in members.get(group, []) if m["fact_id"] != row["fact_id"]]
                if others:
                    block = fact.contradiction
                    block.group_id = str(group)
                    for m in others[:CO_MEMBERS]:
                        block.co_members.add(fact_id=str(m["fact_id"]), label=self.redact(m["label"], caller),
                                             evidence_count=counts.get(m["fact_id"], 0),
                                             validity=validity_message(m))
                    block.returned = min(len(others), CO_MEMBERS)
                    block.total = len(others)
        # Evidence in the facts' order (best fact first), so the cap cuts the weakest facts'
        # claims; by key it read as a random sample of the facts' evidence.
        rank = {fact_id: i for i, fact_id in enumerate(ids)}
        links = sorted(await db.evidence_links(conn, caller, ids, per_stance=per_stance),
                       key=lambda link: (rank[link["fact_id"]], link["stance"] != "supports", link["n"]))
        kinds = {r["fact_id"]: r["kind"] for r in rows}
        kept = links[:MAX_EVIDENCE]
        returned: dict[tuple[uuid.UUID, str], int] = {}
        for link in kept:
            env.fact_evidence.add(fact_kind=enum_value(t.FactKind, kinds[link["fact_id"]]),
                                  fact_id=str(link["fact_id"]), claim_id=str(link["claim_id"]),
                                  stance=enum_value(t.Stance, link["stance"]))
            returned[(link["fact_id"], link["stance"])] = returned.get((link["fact_id"], link["stance"]), 0) + 1
        for row in rows:
            for stance in ("supports", "contradicts"):
                env.evidence_totals.add(fact_kind=enum_value(t.FactKind, row["kind"]), fact_id=str(row["fact_id"]),
                                        stance=enum_value(t.Stance, stance),
                                        returned=returned.get((row["fact_id"], stance), 0),
                                        total=totals.get((row["fact_id"], stance), 0))
        claim_rows = await db.claims(conn, caller, list(dict.fromkeys(link["claim_id"] for link in kept)))
        for claim_id in dict.fromkeys(link["claim_id"] for link in kept):
            if claim_id in claim_rows:
                env.evidence.append(self._evidence(claim_rows[claim_id], caller))

    def _evidence(self, row: Any, caller: Caller) -> t.EvidenceResult:
        message = evidence_message(row)
        message.claim_text = self.redact(message.claim_text, caller)
        message.source_span = self.redact(message.source_span, caller)
        return message

    # --- claims and sources ------------------------------------------------------------

    async def evidence_candidates(self, conn: asyncpg.Connection, caller: Caller, query: str,
                                  vector: Sequence[float], entity_ids: Sequence[uuid.UUID] | None,
                                  candidate_k: int) -> tuple[EvidenceCandidates, dict[uuid.UUID, Any],
                                                             dict[uuid.UUID, Any], bool]:
        """Every channel's nominations for one question, confirmed in this snapshot: the
        candidates (pure data, for :func:`fuse_evidence`), the claim rows, the chunk rows, and
        whether some channel filled its whole depth."""
        filters = db.Filters(entity_ids=list(entity_ids or ()))
        legs: dict[str, dict[str, list[uuid.UUID]]] = {"claim": {}, "chunk": {}}
        full = False
        # Fusion reads each channel to its depth only: nominating (and confirming) more would
        # cost time and change nothing.
        depth = min(candidate_k, self.weights.depth)
        kinds = ("claim", "chunk")
        by_unit = self.weights.by_unit
        # The unit leg (the units nearest the question) is read by the chunk leg's own walk.
        found = await self.concurrently(conn, [
            *(lambda c, kind=kind: self.legs.semantic(c, kind, caller, vector, depth, filters=filters,
                                                      units=depth if by_unit and kind == "chunk" else 0)
              for kind in kinds),
            *(lambda c, kind=kind: self.legs.lexical(c, kind, caller, query, depth, filters=filters)
              for kind in kinds)])
        for n, kind in enumerate(kinds):
            semantic, lexical = found[n], found[len(kinds) + n]
            legs[kind] = {"semantic": [i for i, _ in semantic], "bm25": [i for i, _ in lexical]}
            full = full or len(semantic) >= depth or len(lexical) >= depth
        nearest: list[tuple[UnitKey, float]] = found[kinds.index("chunk")].units
        claim_ids = list(dict.fromkeys(i for ranked in legs["claim"].values() for i in ranked))
        claim_rows = await db.claims(conn, caller, claim_ids)
        chunk_of = {cid: row["chunk_id"] for cid, row in claim_rows.items() if row["chunk_id"] is not None}
        chunk_ids = list(dict.fromkeys([*(i for ranked in legs["chunk"].values() for i in ranked),
                                        *chunk_of.values(), *(key[0] for key, _ in nearest)]))
        chunk_rows = await db.chunks(conn, caller, chunk_ids)
        named: set[uuid.UUID] = set()
        entities = await db.named_entities(conn, caller, name_keys(query))
        if entities:
            named = await db.mentioning(conn, caller.space_id, list(claim_rows), list(chunk_rows), entities)
        temporal = is_temporal_question(query)
        dated: set[uuid.UUID] = set()
        if temporal and self.weights.temporal_lift:  # read only by the temporal lift
            dated = {cid for cid, row in claim_rows.items()
                     if row["claim_valid_from"] is not None or self._mentions_time(cid, row["source_span"])}
            dated |= {cid for cid, row in chunk_rows.items() if self._mentions_time(cid, row["chunk_text"])}
        # The second stage's dense signal for every nominee, and every nominated passage's units'.
        dense = self.weights.dense
        similarity, unit_cosine = await self.legs.similarities(
            conn, caller.space_id, vector, claims=list(claim_rows) if dense else (),
            chunks=list(chunk_rows) if dense else (), units_of=list(chunk_rows) if by_unit else ())
        coverage: dict[uuid.UUID, float] = {}
        if self.weights.coverage:
            asked = frozenset(query_tokens(query))
            coverage = {cid: term_coverage(asked, self._terms(cid, row["claim_text"]))
                        for cid, row in claim_rows.items()}
            coverage |= {cid: term_coverage(asked, self._terms(cid, row["chunk_text"]))
                         for cid, row in chunk_rows.items()}
        units = self._unit_candidates(query, dict(nearest) | unit_cosine, claim_rows, chunk_rows) \
            if by_unit else UnitCandidates()
        candidates = EvidenceCandidates(claims=legs["claim"], chunks=legs["chunk"], chunk_of=chunk_of,
                                        named=frozenset(named), dated=frozenset(dated), temporal=temporal,
                                        similarity=similarity, term_coverage=coverage, units=units)
        return candidates, claim_rows, chunk_rows, full

    def _unit_candidates(self, query: str, cosine: dict[UnitKey, float], claim_rows: dict[uuid.UUID, Any],
                         chunk_rows: dict[uuid.UUID, Any]) -> UnitCandidates:
        """The units of every confirmed passage, ranked by their own vectors (``cosine``: the
        space's nearest units and every unit of the passages) and by BM25 over their own text;
        and which units each claim came from."""
        of_chunk = {cid: [(cid, n) for n in range(len(self.unit_spans(cid, row)))] for cid, row in chunk_rows.items()}
        semantic = sorted((key for key in cosine if key[0] in of_chunk and key[1] < len(of_chunk[key[0]])),
                          key=lambda key: (-cosine[key], str(key[0]), key[1]))
        lexical: list[UnitKey] = []
        if self.weights.unit_bm25:  # read only by its leg
            pool = [key for keys in of_chunk.values() for key in keys]
            lexical = bm25_rank(pool, [self._unit_terms(key, chunk_rows[key[0]]) for key in pool],
                                frozenset(query_tokens(query)))
        of_claim: dict[uuid.UUID, list[UnitKey]] = {}
        for cid, row in claim_rows.items():
            chunk = chunk_rows.get(row["chunk_id"])
            if chunk is None:
                continue
            spans = [(s["char_start"], s["char_end"]) for s in row["evidence_spans"] or []] or \
                [(row["char_start"], row["char_end"])]
            of_claim[cid] = [(chunk["chunk_id"], n) for n, (start, end, _) in enumerate(self.unit_spans(
                chunk["chunk_id"], chunk)) if any(a < end and b > start for a, b in spans)]
        return UnitCandidates(semantic=semantic, bm25=lexical, of_chunk=of_chunk, of_claim=of_claim)

    def unit_spans(self, chunk_id: uuid.UUID, row: Any) -> list[tuple[int, int, str]]:
        """A passage's retrieval units (``chunk_units`` ordinals) as ``(start, end, text)`` in
        document offsets, remembered by chunk id (chunk text never changes)."""
        known = self._units.get(chunk_id)
        if known is None:
            if len(self._units) >= DATED_CACHE:
                self._units.clear()
            base = row["char_start"]
            known = self._units[chunk_id] = [(base + a, base + b, unit)
                                             for a, b, unit in retrieval_unit_spans(row["chunk_text"])]
        return known

    def _unit_terms(self, key: UnitKey, row: Any) -> Counter[str]:
        known = self._unit_counts.get(key)
        if known is None:
            if len(self._unit_counts) >= DATED_CACHE:
                self._unit_counts.clear()
            known = self._unit_counts[key] = Counter(tokens(self.unit_spans(key[0], row)[key[1]][2]))
        return known

    def _terms(self, item_id: uuid.UUID, text: str) -> frozenset[str]:
        """The search terms of an immutable claim or chunk text, remembered by id."""
        known = self._item_terms.get(item_id)
        if known is None:
            if len(self._item_terms) >= DATED_CACHE:
                self._item_terms.clear()
            known = self._item_terms[item_id] = frozenset(tokens(text))
        return known

    def _mentions_time(self, item_id: uuid.UUID, text: str) -> bool:
        """:func:`mentions_time` of an immutable claim span or chunk text, remembered by id
        (the pattern costs ~0.3 ms a passage; one answer confirms hundreds)."""
        known = self._dated.get(item_id)
        if known is None:
            if len(self._dated) >= DATED_CACHE:
                self._dated.clear()
            known = self._dated[item_id] = mentions_time(text)
        return known

    def _folded(self, claim_id: uuid.UUID, text: str) -> str:
        """A claim's text as grouping compares it (folded, lower case, spaces collapsed),
        remembered by id: claim text never changes, and one answer groups hundreds."""
        known = self._folds.get(claim_id)
        if known is None:
            if len(self._folds) >= DATED_CACHE:
                self._folds.clear()
            known = self._folds[claim_id] = " ".join(fold(text).lower().split())
        return known

    async def claims_and_sources(self, caller: Caller, query: str, entity_ids: Sequence[uuid.UUID] | None, k: int,
                                 candidate_k: int, *, vector: list[float] | None = None) -> t.Envelope:
        vector = vector or await self.embed_query(query)
        async with self.snapshot() as conn:
            now = await self._now(conn)
            env = envelope("evidence", CURRENT, now)
            if entity_ids and await _unknown_anchors(conn, caller, env, entity_ids):
                return env
            candidates, claim_rows, chunk_rows, full = await self.evidence_candidates(
                conn, caller, query, vector, entity_ids, candidate_k)
        claim_order, chunk_order = fuse_evidence(candidates, self.weights)
        units = fuse_units(candidates.units, claim_order, chunk_order, self.weights) if self.weights.by_unit else []
        if units:
            claim_order = claims_by_unit(claim_order, units, candidates.units.of_claim)
        dropped = 0
        groups: dict[tuple[Any, ...], list[Any]] = {}
        for fused in claim_order:
            row = claim_rows.get(fused.item_id)
            if row is None:
                dropped += 1
                continue
            key = (self._folded(fused.item_id, row["claim_text"]), row["asserted_at"],
                   row["claim_valid_from"], row["claim_valid_until"], row["claim_valid_precision"],
                   row["is_attributed"], row["attributed_to"])
            groups.setdefault(key, []).append(row)
        grouped = list(groups.values())
        for members in grouped[:k]:
            message = self._evidence(members[0], caller)
            message.corroboration_count = len({m["doc_id"] for m in members})
            message.grouped_claim_ids.extend(str(m["claim_id"]) for m in members[1:])
            env.evidence.append(message)
        dropped += sum(1 for f in chunk_order if f.item_id not in chunk_rows)
        returned_claims = {m[0]["claim_id"] for m in grouped[:k]}
        claims_ranked = [f for f in claim_order if f.item_id in returned_claims]
        if units:
            # The passages are the best units themselves (a turn, a block), best first: each a
            # slice of its chunk (``chunk_id``) at the unit's own offsets, and each claim ranks
            # at the unit it was read from. ``adjacent_chunks(chunk_id, turn)`` widens a passage.
            for unit in units[:k]:
                row = chunk_rows[unit.key[0]]
                start, end, _ = self.unit_spans(unit.key[0], row)[unit.key[1]]
                chunk = chunk_message(row)
                chunk.char_start, chunk.char_end = start, end
                chunk.chunk_text = self.redact(row["chunk_text"][start - row["char_start"]:end - row["char_start"]],
                                               caller)
                env.chunks.append(chunk)
            passages: Sequence[Any] = units
        else:
            passages = [f for f in chunk_order if f.item_id in chunk_rows]
            for fused in passages[:k]:
                chunk = chunk_message(chunk_rows[fused.item_id])
                chunk.chunk_text = self.redact(chunk.chunk_text, caller)
                env.chunks.append(chunk)
        # The ranking is the answer's reading order. By unit: the passages best first, then the
        # claims read from them (each scored at its weakest unit: a claim never displaces a
        # turn). By chunk: claims and passages merged on one fused scale. Either way the
        # passages' entries come in the order of ``chunks``.
        ranked = [*passages[:k], *claims_ranked] if units else sorted(
            [*passages[:k], *claims_ranked], key=lambda f: (-f.score, str(f.item_id)))
        for item in ranked:
            env.ranking.add(item_id=str(item.item_id), score=item.score, signals=item.signals)
        env.dropped_by_hydration = dropped
        total = max(len(grouped), len(passages))
        if total > k or full:
            truncation(env, returned=max(len(env.evidence), len(env.chunks)), estimated=total, exact=not full,
                       reason="result_budget")
        if not env.evidence and not env.chunks:
            negative(env, "known_empty", "no current testimony matches the question",
                     "rephrase, or widen entity_ids")
        return env


class _Slots:
    """A counter of helper connections that never waits: a leg takes a slot or runs inline."""

    def __init__(self, count: int) -> None:
        self.free = count

    def acquire_nowait(self) -> bool:
        if self.free <= 0:
            return False
        self.free -= 1
        return True

    def release(self) -> None:
        self.free += 1


def _ranking(env: t.Envelope, fused: Sequence[Any], returned: set[uuid.UUID]) -> None:
    """Why each returned item ranked where it did: its fused score and each channel's share."""
    for item in fused:
        if item.item_id in returned:
            env.ranking.add(item_id=str(item.item_id), score=item.score, signals=item.signals)


async def _unknown_anchors(conn: asyncpg.Connection, caller: Caller, env: t.Envelope,
                           entity_ids: Sequence[uuid.UUID]) -> bool:
    """Every anchor must be a current entity the caller can see; otherwise the whole call is
    ``unknown_entity`` and nothing is searched."""
    known = await db.entities(conn, caller, entity_ids)
    missing = [str(e) for e in entity_ids if e not in known]
    if missing:
        negative(env, "unknown_entity", f"not a current entity: {', '.join(missing)}",
                 "resolve the name again with resolve_entity")
    return bool(missing)


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message

