"""Graph use cases: neighbourhoods, shortest paths, citation chains and the entity expansion
retrieval uses for ``facts_context``.

Each use case takes a concurrency slot (bounded wait), opens one snapshot, nominates with
a bounded walk, then re-reads every edge it is about to return in the same snapshot.
A path (or a node's path) with any edge that no longer holds is dropped whole and counted
in ``dropped_by_hydration``; nothing is shortened.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from services.graph.domain import (
    ALL_DROPPED,
    BUSY,
    EXPAND_CAP,
    FOREIGN_CONTINUATION,
    NO_CHAIN,
    NO_MORE_PAGES,
    NO_NEIGHBOURS,
    NO_PATH,
    RESULT_UNAVAILABLE,
    SAME_ENDPOINTS,
    TIMED_OUT,
    UNKNOWN_DOCUMENT,
    UNKNOWN_ENDPOINT,
    UNKNOWN_ENTITY,
    AppliedClocks,
    Budgets,
    CitationQuery,
    Edge,
    ExpandQuery,
    Expansion,
    ForeignContinuation,
    GraphPath,
    GraphResult,
    Negative,
    NeighborhoodQuery,
    Node,
    PathQuery,
    Step,
    StopReason,
    TemporalScope,
    Visibility,
    Walk,
    budget_negative,
    decode_continuation,
    distinct_edges,
    distinct_nodes,
    encode_continuation,
    path_nodes,
    scope_for,
    shortest_paths,
    truncation,
)
from services.platform.auth import Caller
from services.platform.errors import Unavailable


class Snapshot(Protocol):
    """The reads of one request in one database snapshot (see ``adapters.PgSnapshot``)."""

    async def now(self) -> dt.datetime: ...

    async def entity(self, entity_id: uuid.UUID) -> tuple[uuid.UUID, str] | None: ...

    async def anchors(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]: ...

    async def walk_relations(self, starts: Sequence[uuid.UUID], depth: int, predicates: Sequence[str],
                             clocks: AppliedClocks, budgets: Budgets, *, historical: bool,
                             target: uuid.UUID | None = None) -> Walk: ...

    async def walk_citations(self, start: uuid.UUID, depth: int, budgets: Budgets, *,
                             target: uuid.UUID) -> Walk: ...

    async def relations(self, ids: Sequence[uuid.UUID], predicates: Sequence[str],
                        clocks: AppliedClocks) -> dict[uuid.UUID, Edge]: ...

    async def names(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]: ...

    async def document(self, doc_id: uuid.UUID) -> tuple[uuid.UUID, str] | None: ...

    async def citations(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Edge]: ...

    async def titles(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]: ...


class GraphStore(Protocol):
    def snapshot(self, visibility: Visibility, statement_timeout_ms: int) -> AbstractAsyncContextManager[Snapshot]:
        ...


# Called between nomination and confirmation with the open snapshot and the route name.
# Production passes none; tests use it to change what the confirmation will read.
NominationHook = Callable[[Snapshot, str], Awaitable[None]]

DEFAULT_SLOTS = 2  # RememberStack: REMEMBERSTACK_SELFHOST_GRAPH_MAX_CONCURRENCY
SLOT_WAIT_S = 1.0


def visibility(caller: Caller) -> Visibility:
    principals = None if caller.principals is None else tuple(sorted(caller.principals))
    return Visibility(caller.space_id, principals)


def _holds(step: Step, edges: Mapping[uuid.UUID, Edge]) -> bool:
    """The re-read row exists and still joins the two nodes the walk crossed."""
    edge = edges.get(step.edge)
    return edge is not None and {edge.subject_id, edge.object_id} == {step.near, step.far}


def _crossed(step: Step, edges: Mapping[uuid.UUID, Edge]) -> bool:
    """A citation is directed: citing document first."""
    edge = edges.get(step.edge)
    return edge is not None and (edge.subject_id, edge.object_id) == (step.near, step.far)


class GraphService:
    def __init__(self, store: GraphStore, *, slots: int = DEFAULT_SLOTS, slot_wait_s: float = SLOT_WAIT_S,
                 budgets: Budgets | None = None, after_nomination: NominationHook | None = None) -> None:
        self.store = store
        self.budgets = budgets or Budgets()
        self.slot_wait_s = slot_wait_s
        self.after_nomination = after_nomination
        self._slots = asyncio.Semaphore(slots)

    # --- plumbing ------------------------------------------------------------------------

    @asynccontextmanager
    async def _read(self, vis: Visibility) -> AsyncIterator[Snapshot]:
        """A slot (waiting at most ``slot_wait_s``), then one snapshot under the statement
        timeout; the same limit, plus a margin, bounds the whole request on our side."""
        try:
            async with asyncio.timeout(self.slot_wait_s):
                await self._slots.acquire()
        except TimeoutError:
            raise Unavailable(BUSY, reason="GRAPH_BUSY") from None
        try:
            async with asyncio.timeout(self.budgets.statement_timeout_ms / 1000 + 1.0):
                async with self.store.snapshot(vis, self.budgets.statement_timeout_ms) as snap:
                    yield snap
        except TimeoutError:
            raise Unavailable(TIMED_OUT, reason="GRAPH_TIMED_OUT") from None
        finally:
            self._slots.release()

    async def _nominated(self, snap: Snapshot, route: str) -> None:
        if self.after_nomination is not None:
            await self.after_nomination(snap, route)

    async def _names(self, snap: Snapshot, ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
        names = await snap.names(list(ids))
        if len(names) != len(ids):  # the walk named a row the snapshot does not hold
            raise Unavailable(RESULT_UNAVAILABLE, reason="GRAPH_RESULT_UNAVAILABLE")
        return names

    @staticmethod
    def _empty(scope: TemporalScope, now: dt.datetime, negative: Negative, *, stop: StopReason | None = None,
               seen: int = 0, dropped: int = 0) -> GraphResult:
        return GraphResult(scope, now, truncation(returned=0, total=seen, more=False, stop=stop),
                           dropped_by_hydration=dropped, negative=negative)

    # --- neighbourhood -------------------------------------------------------------------

    async def neighborhood(self, caller: Caller, q: NeighborhoodQuery) -> GraphResult:
        vis = visibility(caller)
        async with self._read(vis) as snap:
            now = await snap.now()
            cont = None
            if q.continuation is not None:
                try:
                    cont = decode_continuation(q.continuation, vis.space_id, vis.principals, q)
                except ForeignContinuation:
                    return self._empty(scope_for(q.clocks.applied(now), now), now, FOREIGN_CONTINUATION)
            clocks = cont.clocks if cont is not None else q.clocks.applied(now)
            scope = scope_for(clocks, now)
            start = await snap.entity(q.entity_id)
            if start is None:
                return self._empty(scope, now, UNKNOWN_ENTITY)
            origin = start[0]
            walk = await snap.walk_relations([origin], q.hops, q.predicates, clocks, self.budgets,
                                             historical=clocks.believed_at < now)
            await self._nominated(snap, "neighborhood")
            ordered = walk.ordered()
            if len(ordered) <= 1:
                return self._empty(scope, now, budget_negative(walk.stop) if walk.stop else NO_NEIGHBOURS,
                                   stop=walk.stop)
            rest = [item for item in ordered if cont is None or item > cont.after]
            page, more = rest[:q.limit], len(rest) > q.limit
            tree = walk.tree()
            held = await snap.relations(list({s.edge for _, node in page for s in tree[node]}), q.predicates, clocks)
            kept = [(hops, node) for hops, node in page if all(_holds(s, held) for s in tree[node])]
            dropped = len(page) - len(kept)
            distances = walk.distances()
            wanted = {node for _, node in kept}
            if q.include_paths:
                wanted |= {n for _, node in kept for n in path_nodes(origin, [s for s in tree[node]])}
            names = await self._names(snap, wanted)
            nodes = tuple(Node(node, names[node], hops) for hops, node in kept)
            paths: tuple[GraphPath, ...] = ()
            if q.include_paths:
                paths = tuple(
                    GraphPath(tuple(Node(n, names[n], distances[n]) for n in path_nodes(origin, tree[node])),
                              tuple(held[s.edge] for s in tree[node]))
                    for _, node in kept if node != origin
                )
            token = encode_continuation(vis.space_id, vis.principals, q, clocks, page[-1]) if more else None
            trunc = truncation(returned=len(nodes), total=len(ordered), more=more, stop=walk.stop,
                               continuation=token)
            negative: Negative | None = None
            if not nodes:
                negative = NO_MORE_PAGES if not page else ALL_DROPPED
            return GraphResult(scope, now, trunc, nodes, paths, distinct_edges(paths), dropped, negative)

    # --- shortest paths ------------------------------------------------------------------

    async def path(self, caller: Caller, q: PathQuery) -> GraphResult:
        vis = visibility(caller)
        async with self._read(vis) as snap:
            now = await snap.now()
            clocks = q.clocks.applied(now)
            scope = scope_for(clocks, now)
            source, target = await snap.entity(q.from_entity_id), await snap.entity(q.to_entity_id)
            if source is None or target is None:
                return self._empty(scope, now, UNKNOWN_ENDPOINT)
            if source[0] == target[0]:
                return self._empty(scope, now, SAME_ENDPOINTS)
            walk = await snap.walk_relations([source[0]], q.max_hops, q.predicates, clocks, self.budgets,
                                             historical=clocks.believed_at < now, target=target[0])
            found, total = shortest_paths(walk, target[0])
            if not found:
                return self._empty(scope, now, budget_negative(walk.stop) if walk.stop else NO_PATH,
                                   stop=walk.stop)
            await self._nominated(snap, "path")
            held = await snap.relations(list({s.edge for p in found for s in p}), q.predicates, clocks)
            whole = [p for p in found if all(_holds(s, held) for s in p)]
            distances = walk.distances()
            names = await self._names(snap, {n for p in whole for n in path_nodes(source[0], p)})
            paths = tuple(
                GraphPath(tuple(Node(n, names[n], distances[n]) for n in path_nodes(source[0], p)),
                          tuple(held[s.edge] for s in p))
                for p in whole
            )
            return self._paths(scope, now, paths, total=total, nominated=len(found), stop=walk.stop)

    def _paths(self, scope: TemporalScope, now: dt.datetime, paths: tuple[GraphPath, ...], *, total: int,
               nominated: int, stop: StopReason | None) -> GraphResult:
        trunc = truncation(returned=len(paths), total=min(total, 2**62), more=total > nominated, stop=stop)
        negative = None if paths else ALL_DROPPED
        return GraphResult(scope, now, trunc, distinct_nodes(paths), paths, distinct_edges(paths),
                           nominated - len(paths), negative)

    # --- citation chains -----------------------------------------------------------------

    async def citation_path(self, caller: Caller, q: CitationQuery) -> GraphResult:
        vis = visibility(caller)
        async with self._read(vis) as snap:
            now = await snap.now()
            scope = TemporalScope("current", evaluated_at=now, believed_at=now)
            source, target = await snap.document(q.from_doc_id), await snap.document(q.to_doc_id)
            if source is None or target is None:
                return self._empty(scope, now, UNKNOWN_DOCUMENT)
            if source[0] == target[0]:
                return self._empty(scope, now, NO_CHAIN)
            walk = await snap.walk_citations(source[0], q.max_hops, self.budgets, target=target[0])
            found, total = shortest_paths(walk, target[0])
            if not found:
                return self._empty(scope, now, budget_negative(walk.stop) if walk.stop else NO_CHAIN,
                                   stop=walk.stop)
            await self._nominated(snap, "citation_path")
            held = await snap.citations(list({s.edge for p in found for s in p}))
            whole = [p for p in found if all(_crossed(s, held) for s in p)]
            distances = walk.distances()
            docs = {n for p in whole for n in path_nodes(source[0], p)}
            titles = await snap.titles(list(docs))
            if len(titles) != len(docs):
                raise Unavailable(RESULT_UNAVAILABLE, reason="GRAPH_RESULT_UNAVAILABLE")
            paths = tuple(
                GraphPath(tuple(Node(n, titles[n], distances[n]) for n in path_nodes(source[0], p)),
                          tuple(held[s.edge] for s in p))
                for p in whole
            )
            return self._paths(scope, now, paths, total=total, nominated=len(found), stop=walk.stop)

    # --- facts_context expansion ---------------------------------------------------------

    async def expand(self, caller: Caller, q: ExpandQuery) -> Expansion:
        vis = visibility(caller)
        async with self._read(vis) as snap:
            now = await snap.now()
            present = await snap.anchors(q.anchors)
            anchors = [a for a in q.anchors if a in present]
            if not anchors:
                return Expansion((), False)
            clocks = AppliedClocks(q.valid_at or now, now)
            predicates = [q.predicate] if q.predicate is not None else []
            walk = await snap.walk_relations(anchors, q.hops, predicates, clocks, self.budgets, historical=False)
            await self._nominated(snap, "expand")
            reached = [(hops, node) for hops, node in walk.ordered() if hops > 0]
            room = max(0, EXPAND_CAP - len(anchors))
            candidates = reached[:room]
            tree = walk.tree()
            held = await snap.relations(list({s.edge for _, n in candidates for s in tree[n]}), predicates, clocks)
            kept = [(hops, node) for hops, node in candidates if all(_holds(s, held) for s in tree[node])]
            entities = tuple((a, 0) for a in anchors[:EXPAND_CAP]) + tuple((node, hops) for hops, node in kept)
            return Expansion(entities, len(reached) > room or walk.stop is not None)
