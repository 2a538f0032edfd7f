"""Graph rules: arguments and their bounds, the two clocks, budgets, continuation tokens,
and the assembly of a bounded breadth-first walk into nodes, whole paths and truncation.

Pure: no transport, no driver. The walk itself runs in SQL (see ``adapters``); this
module only validates what goes in and shapes what comes out.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import struct
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from services.platform.errors import FieldViolation, ValidationFailed

# --------------------------------------------------------------------------------------
# arguments
# --------------------------------------------------------------------------------------

# Defaults of the request fields; their bounds, lengths and formats are the contract's
# buf.validate rules (graph.proto), checked before the servicer runs.
NEIGHBORHOOD_HOPS = 2
PATH_MAX_HOPS = 4
CITATION_MAX_HOPS = 6
LIMIT = 500
MAX_PATHS = 10
EXPAND_CAP = 20

StopReason = Literal["expansion_budget", "frontier_budget", "time_budget"]
TruncationReason = Literal["result_budget", "expansion_budget", "frontier_budget", "time_budget"]
NegativeKind = Literal["unknown_entity", "known_empty", "boundary"]


BUSY = "live graph is busy"
TIMED_OUT = "live graph timed out"
RESULT_UNAVAILABLE = "live graph result unavailable"


@dataclass(frozen=True)
class Visibility:
    """Who is reading: their space and principals (None = every document of the space)."""

    space_id: uuid.UUID
    principals: tuple[str, ...] | None


@dataclass(frozen=True)
class Budgets:
    """The caps of one traversal. Defaults are RememberStack's; tests may lower them."""

    expansion: int = 2000  # edges examined
    frontier: int = 1000  # entities admitted per level
    time_ms: float = 1000.0  # traversal time, checked before each level
    statement_timeout_ms: int = 5000  # hard stop: 503 `live graph timed out`


@dataclass(frozen=True)
class Clocks:
    """The requested clocks; both None means "the request instant" for both."""

    valid_at: dt.datetime | None = None
    believed_at: dt.datetime | None = None

    def applied(self, now: dt.datetime) -> AppliedClocks:
        return AppliedClocks(self.valid_at or now, self.believed_at or now)


@dataclass(frozen=True)
class AppliedClocks:
    valid_at: dt.datetime
    believed_at: dt.datetime


@dataclass(frozen=True)
class NeighborhoodQuery:
    entity_id: uuid.UUID
    hops: int = NEIGHBORHOOD_HOPS
    predicates: tuple[str, ...] = ()
    clocks: Clocks = Clocks()
    limit: int = LIMIT
    continuation: str | None = None
    include_paths: bool = False


@dataclass(frozen=True)
class PathQuery:
    from_entity_id: uuid.UUID
    to_entity_id: uuid.UUID
    max_hops: int = PATH_MAX_HOPS
    predicates: tuple[str, ...] = ()
    clocks: Clocks = Clocks()


@dataclass(frozen=True)
class CitationQuery:
    from_doc_id: uuid.UUID
    to_doc_id: uuid.UUID
    max_hops: int = CITATION_MAX_HOPS


@dataclass(frozen=True)
class ExpandQuery:
    anchors: tuple[uuid.UUID, ...]
    hops: int
    predicate: str | None = None
    valid_at: dt.datetime | None = None


# --- the checks that are not field rules: the clocks, in the pydantic/FastAPI wording ---


def parse_utc(name: str, raw: str, problems: list[FieldViolation]) -> dt.datetime | None:
    """An ISO 8601 date-time whose offset is exactly zero (``Z`` or ``+00:00``). A date, a
    naive value or any other offset is refused, never converted."""
    text = raw.strip()
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        problems.append(FieldViolation(name, "Input should be a valid datetime", "datetime_parsing", raw))
        return None
    if value.tzinfo is None:
        problems.append(FieldViolation(name, "Input should have timezone info", "timezone_aware", raw))
        return None
    if value.utcoffset() != dt.timedelta(0):
        problems.append(FieldViolation(name, "Input should have a zero UTC offset", "timezone_aware", raw))
        return None
    return value.astimezone(dt.UTC)


PAIR_MESSAGE = "Value error, valid_at and believed_at must be given together"


def clock_problems(valid_at: str | None, believed_at: str | None) -> list[FieldViolation]:
    """What is wrong with a request's clock pair (empty when nothing is)."""
    problems: list[FieldViolation] = []
    _clocks(valid_at, believed_at, problems)
    return problems


def _clocks(valid_at: str | None, believed_at: str | None, problems: list[FieldViolation]) -> Clocks:
    if (valid_at is None) != (believed_at is None):
        absent = "believed_at" if believed_at is None else "valid_at"
        problems.append(FieldViolation(absent, PAIR_MESSAGE, "value_error", None))
    parsed_valid = parse_utc("valid_at", valid_at, problems) if valid_at is not None else None
    parsed_believed = parse_utc("believed_at", believed_at, problems) if believed_at is not None else None
    if parsed_valid is None or parsed_believed is None:
        return Clocks()
    return Clocks(parsed_valid, parsed_believed)


def _raise(problems: list[FieldViolation]) -> None:
    if problems:
        raise ValidationFailed(problems)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def neighborhood_query(*, entity_id: str, hops: int | None = None, predicates: Sequence[str] = (),
                       valid_at: str | None = None, believed_at: str | None = None, limit: int | None = None,
                       continuation: str | None = None, include_paths: bool | None = None) -> NeighborhoodQuery:
    """The walk a request asks for; its fields already passed the contract's rules."""
    problems: list[FieldViolation] = []
    clocks = _clocks(valid_at, believed_at, problems)
    _raise(problems)
    return NeighborhoodQuery(uuid.UUID(entity_id), _or(hops, NEIGHBORHOOD_HOPS), _distinct(predicates), clocks,
                             _or(limit, LIMIT), continuation or None, bool(include_paths))


def _distinct(predicates: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(predicates))  # [] = every predicate; duplicates change nothing


def path_query(*, from_entity_id: str, to_entity_id: str, max_hops: int | None = None,
               predicates: Sequence[str] = (), valid_at: str | None = None,
               believed_at: str | None = None) -> PathQuery:
    problems: list[FieldViolation] = []
    clocks = _clocks(valid_at, believed_at, problems)
    _raise(problems)
    return PathQuery(uuid.UUID(from_entity_id), uuid.UUID(to_entity_id), _or(max_hops, PATH_MAX_HOPS),
                     _distinct(predicates), clocks)


def citation_query(*, from_doc_id: str, to_doc_id: str, max_hops: int | None = None) -> CitationQuery:
    return CitationQuery(uuid.UUID(from_doc_id), uuid.UUID(to_doc_id), _or(max_hops, CITATION_MAX_HOPS))


def expand_query(*, anchors: Sequence[str], hops: int, predicate: str | None = None,
                 valid_at: dt.datetime | None = None) -> ExpandQuery:
    unique = tuple(dict.fromkeys(uuid.UUID(raw) for raw in anchors))
    when = valid_at.astimezone(dt.UTC) if valid_at is not None else None
    return ExpandQuery(unique, hops, predicate, when)


# --------------------------------------------------------------------------------------
# continuation tokens
# --------------------------------------------------------------------------------------

_TOKEN_VERSION = 1
_TOKEN = struct.Struct(">BB16sqq16s")  # version, last hops, last entity, valid_at µs, believed_at µs, digest
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class ForeignContinuation(Exception):
    """The token was not issued for this caller and this query (or is not a token at all)."""


@dataclass(frozen=True)
class Continuation:
    after: tuple[int, uuid.UUID]  # (hops, entity_id) of the last node already returned
    clocks: AppliedClocks


def _micros(value: dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_micros(value: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=value)


def _digest(space_id: uuid.UUID, principals: Iterable[str] | None, query: NeighborhoodQuery,
            clocks: AppliedClocks, after: tuple[int, uuid.UUID]) -> bytes:
    """Binds a token to the caller (space and principals), the query and the applied clocks.
    A token cannot widen what its holder sees (every page re-applies the caller's ACL); the
    digest only makes a token from another caller or another query recognisable."""
    parts = [
        "testament.graph.neighborhood.v1", str(space_id),
        "*" if principals is None else "\x1f".join(sorted(principals)),
        str(query.entity_id), str(query.hops), "\x1f".join(sorted(query.predicates)),
        "1" if query.include_paths else "0", str(_micros(clocks.valid_at)), str(_micros(clocks.believed_at)),
        str(after[0]), str(after[1]),
    ]
    return hashlib.sha256("\x1e".join(parts).encode()).digest()[:16]


def encode_continuation(space_id: uuid.UUID, principals: Iterable[str] | None, query: NeighborhoodQuery,
                        clocks: AppliedClocks, after: tuple[int, uuid.UUID]) -> str:
    digest = _digest(space_id, principals, query, clocks, after)
    raw = _TOKEN.pack(_TOKEN_VERSION, after[0], after[1].bytes, _micros(clocks.valid_at),
                      _micros(clocks.believed_at), digest)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continuation(token: str, space_id: uuid.UUID, principals: Iterable[str] | None,
                        query: NeighborhoodQuery) -> Continuation:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        version, hops, entity, valid_us, believed_us, digest = _TOKEN.unpack(raw)
        clocks = AppliedClocks(_from_micros(valid_us), _from_micros(believed_us))
    except (binascii.Error, ValueError, struct.error, OverflowError):
        raise ForeignContinuation() from None
    if version != _TOKEN_VERSION:
        raise ForeignContinuation()
    after = (hops, uuid.UUID(bytes=entity))
    if digest != _digest(space_id, principals, query, clocks, after):
        raise ForeignContinuation()
    asked = query.clocks
    if asked.valid_at is not None and (asked.valid_at, asked.believed_at) != (clocks.valid_at, clocks.believed_at):
        raise ForeignContinuation()  # a page of another instant
    return Continuation(after, clocks)


# --------------------------------------------------------------------------------------
# the walk and what is made of it
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One edge crossed from ``near`` (reached one level earlier) to ``far`` (new)."""

    edge: uuid.UUID
    near: uuid.UUID
    far: uuid.UUID


@dataclass(frozen=True)
class Level:
    depth: int
    steps: tuple[Step, ...]  # every examined edge that reached an admitted new node
    fresh: tuple[uuid.UUID, ...]  # nodes first reached at this depth


@dataclass
class Walk:
    """A bounded breadth-first walk: levels in order, edges examined, and the budget that
    stopped it early (None when it ran to its depth or ran out of graph)."""

    starts: tuple[uuid.UUID, ...]
    levels: list[Level] = field(default_factory=list)
    examined: int = 0
    stop: StopReason | None = None

    def distances(self) -> dict[uuid.UUID, int]:
        seen = {start: 0 for start in self.starts}
        for level in self.levels:
            for node in level.fresh:
                seen.setdefault(node, level.depth)
        return seen

    def ordered(self) -> list[tuple[int, uuid.UUID]]:
        """Nearest first; within a distance by id (a stable order for pages)."""
        return sorted((hops, node) for node, hops in self.distances().items())

    def tree(self) -> dict[uuid.UUID, tuple[Step, ...]]:
        """One path per reached node: through the smallest edge id at every level."""
        paths: dict[uuid.UUID, tuple[Step, ...]] = {start: () for start in self.starts}
        for level in self.levels:
            best: dict[uuid.UUID, Step] = {}
            for step in level.steps:
                if step.near in paths and (step.far not in best or step.edge < best[step.far].edge):
                    best[step.far] = step
            for node, step in best.items():
                paths.setdefault(node, (*paths[step.near], step))
        return paths

    def reached(self, node: uuid.UUID) -> bool:
        return node in self.distances()


def shortest_paths(walk: Walk, target: uuid.UUID, cap: int = MAX_PATHS) -> tuple[list[tuple[Step, ...]], int]:
    """Up to ``cap`` distinct shortest paths to ``target`` (in a stable order) and how many
    shortest paths the walk saw in all. Paths are simple by construction: every step goes
    one level further from the start."""
    distances = walk.distances()
    if target not in distances or target in walk.starts:
        return [], 0
    into: dict[uuid.UUID, list[Step]] = {}
    for level in walk.levels:
        for step in level.steps:
            if distances.get(step.near) == level.depth - 1 and distances.get(step.far) == level.depth:
                into.setdefault(step.far, []).append(step)
    for steps in into.values():
        steps.sort(key=lambda s: (s.edge, s.near))
    counts: dict[uuid.UUID, int] = {start: 1 for start in walk.starts}

    def count(node: uuid.UUID) -> int:  # recursion depth <= the walk's depth (<= 6)
        if node not in counts:
            counts[node] = sum(count(step.near) for step in into.get(node, ()))
        return counts[node]

    total = count(target)
    found: list[tuple[Step, ...]] = []

    def extend(node: uuid.UUID, suffix: tuple[Step, ...]) -> None:
        if len(found) >= cap:
            return
        if node in walk.starts:
            found.append(suffix)
            return
        for step in into.get(node, ()):
            if counts.get(step.near, 0):
                extend(step.near, (step, *suffix))

    extend(target, ())
    return found, total


def path_nodes(start: uuid.UUID, steps: Sequence[Step]) -> list[uuid.UUID]:
    return [start, *(s.far for s in steps)]


# --------------------------------------------------------------------------------------
# results (transport-neutral)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    entity_id: uuid.UUID
    name: str
    hops: int


@dataclass(frozen=True)
class Edge:
    relation_id: uuid.UUID
    subject_id: uuid.UUID
    object_id: uuid.UUID
    predicate: str
    fact: str | None
    evidence_count: int = 0
    valid_from: dt.datetime | None = None
    valid_until: dt.datetime | None = None
    valid_precision: str = "unknown"
    ingested_at: dt.datetime | None = None
    invalidated_at: dt.datetime | None = None
    support: str = "current"


@dataclass(frozen=True)
class GraphPath:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]

    @property
    def length(self) -> int:
        return len(self.edges)


@dataclass(frozen=True)
class Truncation:
    truncated: bool
    returned: int
    estimated_total: int
    total_is_exact: bool = True
    continuation: str | None = None
    reason: TruncationReason | None = None


@dataclass(frozen=True)
class Negative:
    kind: NegativeKind
    explanation: str
    workaround: str | None = None


@dataclass(frozen=True)
class TemporalScope:
    mode: Literal["as_of", "current"]
    evaluated_at: dt.datetime
    believed_at: dt.datetime
    valid_at: dt.datetime | None = None


@dataclass(frozen=True)
class GraphResult:
    scope: TemporalScope
    read_at: dt.datetime
    truncation: Truncation
    nodes: tuple[Node, ...] = ()
    paths: tuple[GraphPath, ...] = ()
    edges: tuple[Edge, ...] = ()
    dropped_by_hydration: int = 0
    negative: Negative | None = None


@dataclass(frozen=True)
class Expansion:
    entities: tuple[tuple[uuid.UUID, int], ...]
    truncated: bool


def truncation(*, returned: int, total: int, more: bool, stop: StopReason | None,
               continuation: str | None = None) -> Truncation:
    """A cap is never silent: a traversal budget wins the reason (it also makes the total
    inexact); otherwise the route's result limit when more was found than returned."""
    reason: TruncationReason | None = stop if stop is not None else ("result_budget" if more else None)
    return Truncation(truncated=reason is not None, returned=returned, estimated_total=total,
                      total_is_exact=stop is None, continuation=continuation, reason=reason)


def distinct_edges(paths: Iterable[GraphPath]) -> tuple[Edge, ...]:
    out: dict[uuid.UUID, Edge] = {}
    for path in paths:
        for edge in path.edges:
            out.setdefault(edge.relation_id, edge)
    return tuple(out.values())


def distinct_nodes(paths: Iterable[GraphPath]) -> tuple[Node, ...]:
    out: dict[uuid.UUID, Node] = {}
    for path in paths:
        for node in path.nodes:
            out.setdefault(node.entity_id, node)
    return tuple(sorted(out.values(), key=lambda n: (n.hops, str(n.entity_id))))


# --- negatives (fixed wording) ---------------------------------------------------------

UNKNOWN_ENTITY = Negative("unknown_entity", "the entity is not in the graph", "re-resolve the name or search")
UNKNOWN_ENDPOINT = Negative("unknown_entity", "an entity of the path is not in the graph",
                            "re-resolve the names or search")
UNKNOWN_DOCUMENT = Negative("unknown_entity", "a document of the chain is not live", "list documents or search")
NO_NEIGHBOURS = Negative("known_empty", "the entity has no neighbours at these clocks")
NO_PATH = Negative("known_empty", "no path joins the entities within max_hops at these clocks")
SAME_ENDPOINTS = Negative("known_empty", "a path joins two different entities")
NO_CHAIN = Negative("known_empty", "no citation chain joins the documents within max_hops")
NO_MORE_PAGES = Negative("known_empty", "the continuation is past the last neighbour")
FOREIGN_CONTINUATION = Negative("boundary", "the continuation was not issued for this query",
                                "repeat the query without a continuation")
ALL_DROPPED = Negative("boundary", "every path found no longer held when re-read", "retry the query")


def budget_negative(stop: StopReason) -> Negative:
    return Negative("boundary", f"the traversal stopped at its {stop.replace('_', ' ')} before finding anything",
                    "narrow the query (fewer hops, predicates) or retry")


def scope_for(clocks: AppliedClocks, now: dt.datetime) -> TemporalScope:
    return TemporalScope("as_of", evaluated_at=now, believed_at=clocks.believed_at, valid_at=clocks.valid_at)
