"""Pure graph rules: argument bounds (the contract's rules, as the server checks them), the
clock pair, continuation tokens, and the assembly of a bounded walk into nodes, whole
shortest paths and truncation."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from testament.graph.v1 import graph_pb2

from services.graph.domain import (
    AppliedClocks,
    Clocks,
    ForeignContinuation,
    Level,
    NeighborhoodQuery,
    Step,
    Walk,
    citation_query,
    decode_continuation,
    encode_continuation,
    expand_query,
    neighborhood_query,
    path_query,
    shortest_paths,
    truncation,
)
from services.platform.errors import ValidationFailed
from services.platform.validation import check

E = [uuid.UUID(int=i + 1) for i in range(40)]
R = [uuid.UUID(int=1000 + i) for i in range(40)]
SPACE = uuid.UUID(int=99)


def problems(call, **kwargs) -> list[tuple[str, str]]:
    with pytest.raises(ValidationFailed) as caught:
        call(**kwargs)
    return [(v.field, v.type) for v in caught.value.violations]


# --- arguments -------------------------------------------------------------------------


def test_neighborhood_defaults() -> None:
    q = neighborhood_query(entity_id=str(E[0]))
    assert (q.hops, q.limit, q.predicates, q.include_paths, q.continuation) == (2, 500, (), False, None)
    assert q.clocks == Clocks()


def refused(request: object) -> list[tuple[str, str]]:
    """What the server's validation (the contract's rules) refuses in ``request``."""
    return problems(check, message=request)


@pytest.mark.parametrize(("field", "value", "kind"), [
    ("hops", 0, "greater_than_equal"), ("hops", 5, "less_than_equal"),
    ("limit", 0, "greater_than_equal"), ("limit", 501, "less_than_equal"),
])
def test_neighborhood_ranges(field: str, value: int, kind: str) -> None:
    assert refused(graph_pb2.NeighborhoodRequest(entity_id=str(E[0]), **{field: value})) == [(field, kind)]


def test_every_bad_field_is_listed_at_once() -> None:
    found = refused(graph_pb2.NeighborhoodRequest(entity_id="not-a-uuid", hops=9, predicates=["ok", "", "x" * 201],
                                                  limit=0, continuation="c" * 201))
    assert found == [
        ("entity_id", "uuid_parsing"), ("hops", "less_than_equal"), ("predicates.1", "string_too_short"),
        ("predicates.2", "string_too_long"), ("limit", "greater_than_equal"), ("continuation", "string_too_long"),
    ]
    with pytest.raises(ValidationFailed) as caught:
        check(graph_pb2.NeighborhoodRequest(entity_id=str(E[0]), predicates=["ok", "", "x" * 201]))
    assert [v.message for v in caught.value.violations] == [
        "String should have at least 1 character", "String should have at most 200 characters"]


def test_missing_ids_are_missing_fields() -> None:
    assert refused(graph_pb2.NeighborhoodRequest(entity_id="")) == [("entity_id", "missing")]
    assert refused(graph_pb2.PathRequest(to_entity_id=str(E[1]))) == [("from_entity_id", "missing")]


def test_too_many_predicates() -> None:
    assert refused(graph_pb2.NeighborhoodRequest(entity_id=str(E[0]), predicates=["p"] * 101)) == [
        ("predicates", "too_long")]
    check(graph_pb2.NeighborhoodRequest(entity_id=str(E[0]), predicates=["p"] * 100))
    assert neighborhood_query(entity_id=str(E[0]), predicates=["p"] * 100).predicates == ("p",)


@pytest.mark.parametrize(("valid_at", "believed_at", "expected"), [
    ("2026-03-01T00:00:00Z", None, [("believed_at", "value_error")]),
    (None, "2026-03-01T00:00:00Z", [("valid_at", "value_error")]),
    ("2026-03-01T00:00:00", "2026-03-01T00:00:00Z", [("valid_at", "timezone_aware")]),
    ("2026-03-01", "2026-03-01T00:00:00Z", [("valid_at", "timezone_aware")]),
    ("2026-03-01T00:00:00Z", "2026-03-01T05:00:00+05:00", [("believed_at", "timezone_aware")]),
    ("yesterday", "2026-03-01T00:00:00Z", [("valid_at", "datetime_parsing")]),
])
def test_clocks_are_a_zero_offset_pair(valid_at: str | None, believed_at: str | None, expected: list) -> None:
    assert problems(neighborhood_query, entity_id=str(E[0]), valid_at=valid_at, believed_at=believed_at) == expected


def test_zero_offsets_in_any_spelling() -> None:
    q = path_query(from_entity_id=str(E[0]), to_entity_id=str(E[1]), valid_at="2026-03-01T00:00:00+00:00",
                   believed_at="2026-06-02T12:00:00.5z")
    assert q.clocks.valid_at == dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    assert q.clocks.believed_at == dt.datetime(2026, 6, 2, 12, 0, 0, 500000, tzinfo=dt.UTC)
    assert q.max_hops == 4


def test_default_clocks_are_the_request_instant() -> None:
    now = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
    assert Clocks().applied(now) == AppliedClocks(now, now)


def test_path_and_citation_bounds() -> None:
    assert refused(graph_pb2.PathRequest(from_entity_id=str(E[0]), to_entity_id=str(E[1]), max_hops=7)) == [
        ("max_hops", "less_than_equal")]
    assert citation_query(from_doc_id=str(E[0]), to_doc_id=str(E[1])).max_hops == 6
    assert refused(graph_pb2.CitationPathRequest(from_doc_id=str(E[0]), to_doc_id="x", max_hops=0)) == [
        ("to_doc_id", "uuid_parsing"), ("max_hops", "greater_than_equal")]


def test_expand_bounds() -> None:
    def expand(anchors: list[str], hops: int, **extra: str) -> list[tuple[str, str]]:
        return refused(graph_pb2.ExpandEntitiesRequest(anchor_entity_ids=anchors, hops=hops, **extra))

    assert expand([], 1) == [("anchor_entity_ids", "too_short")]
    assert ("anchor_entity_ids", "too_long") in expand([str(e) for e in E[:20]], 1)
    assert expand([str(E[0]), "x"], 3) == [("anchor_entity_ids.1", "uuid_parsing"), ("hops", "less_than_equal")]
    assert expand([str(E[0])], 1, predicate="") == [("predicate", "string_too_short")]
    q = expand_query(anchors=[str(E[0]), str(E[0]), str(E[1])], hops=2)
    assert q.anchors == (E[0], E[1])


# --- continuation ----------------------------------------------------------------------

CLOCKS = AppliedClocks(dt.datetime(2026, 3, 1, tzinfo=dt.UTC), dt.datetime(2026, 3, 2, 7, 30, tzinfo=dt.UTC))


def test_a_continuation_round_trips_with_its_clocks() -> None:
    q = NeighborhoodQuery(E[0], predicates=("works_on",))
    token = encode_continuation(SPACE, ("alice",), q, CLOCKS, (1, E[5]))
    assert len(token) <= 200
    back = decode_continuation(token, SPACE, ("alice",), q)
    assert back.after == (1, E[5]) and back.clocks == CLOCKS
    # the same explicit clocks are fine, a limit change too
    same = NeighborhoodQuery(E[0], predicates=("works_on",), clocks=Clocks(*CLOCKS.__dict__.values()), limit=3)
    assert decode_continuation(token, SPACE, ("alice",), same).after == (1, E[5])


@pytest.mark.parametrize("change", ["space", "principals", "entity", "hops", "predicates", "paths", "clocks",
                                    "garbage", "tampered", "empty"])
def test_a_foreign_continuation_is_recognised(change: str) -> None:
    q = NeighborhoodQuery(E[0], predicates=("works_on",))
    token = encode_continuation(SPACE, ("alice",), q, CLOCKS, (1, E[5]))
    space, principals, other = SPACE, ("alice",), q
    if change == "space":
        space = uuid.UUID(int=7)
    elif change == "principals":
        principals = ("bob",)
    elif change == "entity":
        other = NeighborhoodQuery(E[1], predicates=("works_on",))
    elif change == "hops":
        other = NeighborhoodQuery(E[0], hops=3, predicates=("works_on",))
    elif change == "predicates":
        other = NeighborhoodQuery(E[0])
    elif change == "paths":
        other = NeighborhoodQuery(E[0], predicates=("works_on",), include_paths=True)
    elif change == "clocks":
        other = NeighborhoodQuery(E[0], predicates=("works_on",), clocks=Clocks(CLOCKS.valid_at, CLOCKS.valid_at))
    elif change == "garbage":
        token = "not a token at all!"
    elif change == "tampered":
        token = token[:10] + ("A" if token[10] != "A" else "B") + token[11:]
    elif change == "empty":
        token = "AAAA"
    with pytest.raises(ForeignContinuation):
        decode_continuation(token, space, principals, other)


# --- walks -----------------------------------------------------------------------------


def ladder(width: int) -> Walk:
    """E0 -> E[1..width] -> E[39]: `width` shortest paths of length 2."""
    first = tuple(Step(R[i], E[0], E[i]) for i in range(1, width + 1))
    second = tuple(Step(R[20 + i], E[i], E[39]) for i in range(1, width + 1))
    return Walk((E[0],), [Level(1, first, tuple(E[1:width + 1])), Level(2, second, (E[39],))], examined=2 * width)


def test_shortest_paths_are_capped_and_counted() -> None:
    found, total = shortest_paths(ladder(12), E[39], cap=10)
    assert total == 12 and len(found) == 10
    assert all(len(p) == 2 and p[0].near == E[0] and p[-1].far == E[39] for p in found)
    assert len({tuple(s.edge for s in p) for p in found}) == 10


def test_parallel_edges_make_distinct_paths() -> None:
    walk = Walk((E[0],), [Level(1, (Step(R[1], E[0], E[1]), Step(R[2], E[0], E[1])), (E[1],))])
    found, total = shortest_paths(walk, E[1])
    assert total == 2 and [p[0].edge for p in found] == [R[1], R[2]]


def test_no_path_to_an_unreached_node() -> None:
    assert shortest_paths(ladder(2), E[30]) == ([], 0)
    assert shortest_paths(ladder(2), E[0]) == ([], 0)


def test_walk_orders_nearest_first_and_keeps_one_tree_path_per_node() -> None:
    walk = ladder(3)
    ordered = walk.ordered()
    assert ordered[0] == (0, E[0]) and ordered[-1] == (2, E[39])
    assert [h for h, _ in ordered] == sorted(h for h, _ in ordered)
    tree = walk.tree()
    assert tree[E[0]] == ()
    assert [s.edge for s in tree[E[39]]] == [R[1], R[21]]  # the smallest edge ids


def test_truncation_never_silent() -> None:
    assert truncation(returned=5, total=5, more=False, stop=None).truncated is False
    page = truncation(returned=5, total=9, more=True, stop=None, continuation="t")
    assert (page.truncated, page.reason, page.total_is_exact, page.continuation) == (True, "result_budget", True, "t")
    capped = truncation(returned=5, total=9, more=True, stop="expansion_budget")
    assert (capped.reason, capped.total_is_exact) == ("expansion_budget", False)
    assert truncation(returned=0, total=0, more=False, stop="time_budget").truncated is True
