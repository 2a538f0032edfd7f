"""Adjudication: one incoming assertion against the facts the memory already holds.

Outcomes (recorded on the fact's transcript): ``add`` a new fact; ``noop`` the assertion
confirms a fact (its claim becomes supporting evidence); ``update`` the same fact with
better or corrected dates (its window is replaced); ``supersede`` closes a predecessor's
world window at the successor's start in the world, never at the said-on time;
``contradict`` links incompatible facts in a contradiction group, or attaches the claim
with stance ``contradicts``. Below the confidence floor nothing merges: a new fact is made.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.pipeline.domain.facts import FUNCTIONAL, INVERSE_FUNCTIONAL, Window

PRECISION_RANK = {"unknown": 0, "year": 1, "quarter": 2, "month": 3, "open": 3, "day": 4, "instant": 5}
SUCCESSION_PREDICATES = frozenset({"works_on", "member_of", "works_for", "other:leads", "other:owns",
                                   "reports_to", "assigned_to", "located_in"})


@dataclass(frozen=True)
class FactView:
    fact_id: uuid.UUID
    kind: str
    subject_id: uuid.UUID
    predicate: str | None
    object_id: uuid.UUID | None
    statement: str | None
    window: Window
    superseded: bool
    contradiction_group: uuid.UUID | None
    attribute: frozenset[str] = frozenset()
    statement_key: str = ""


@dataclass(frozen=True)
class Incoming:
    kind: str
    subject_id: uuid.UUID
    predicate: str | None
    object_id: uuid.UUID | None
    statement: str | None
    window: Window
    valid_kind: str | None
    change_kind: str
    previous_object_id: uuid.UUID | None = None
    previous_value: str | None = None
    attribute: frozenset[str] = frozenset()
    statement_key: str = ""


@dataclass(frozen=True)
class Verdict:
    outcome: str  # add | noop | update | contradict | contradict_evidence | drop
    confidence: float
    target: uuid.UUID | None = None
    window: Window | None = None
    supersede: tuple[tuple[uuid.UUID, dt.datetime | None], ...] = ()
    group_with: tuple[uuid.UUID, ...] = ()
    reason: str = ""
    features: dict[str, object] = field(default_factory=dict)


def _overlap(a: Window, b: Window) -> bool:
    if not a.known or not b.known:
        return True
    a_start = a.valid_from or dt.datetime.min.replace(tzinfo=dt.UTC)
    b_start = b.valid_from or dt.datetime.min.replace(tzinfo=dt.UTC)
    a_end = a.valid_until or dt.datetime.max.replace(tzinfo=dt.UTC)
    b_end = b.valid_until or dt.datetime.max.replace(tzinfo=dt.UTC)
    return a_start < b_end and b_start < a_end


def _better(new: Window, old: Window) -> bool:
    """New dates that say more: a window where there was none, a finer precision, or a
    partial window completed."""
    if not new.known:
        return False
    if not old.known:
        return True
    if PRECISION_RANK[new.precision] > PRECISION_RANK[old.precision] and _overlap(new, old):
        return True
    return (old.valid_from is None and new.valid_from is not None) or (
        old.valid_until is None and new.valid_until is not None and old.precision != "open")


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def _closes(candidate: FactView, at: dt.datetime | None) -> bool:
    """A predecessor is closed only if the successor starts after it did."""
    if candidate.superseded:
        return False
    if at is None or candidate.window.valid_from is None:
        return True
    if candidate.window.valid_until is not None and candidate.window.valid_until <= at:
        return False
    return candidate.window.valid_from < at


def decide(incoming: Incoming, candidates: Sequence[FactView], *, floor: float = 0.75) -> Verdict:
    verdict = _decide(incoming, candidates)
    if verdict.outcome in ("noop", "update") and verdict.confidence < floor:
        return Verdict("add", verdict.confidence, window=incoming.window, reason="below_confidence_floor",
                       features={"would_have": verdict.outcome, "target": str(verdict.target)})
    return verdict


def _decide(incoming: Incoming, candidates: Sequence[FactView]) -> Verdict:
    if incoming.kind == "relation":
        return _relation(incoming, candidates)
    return _observation(incoming, candidates)


def _relation(a: Incoming, candidates: Sequence[FactView]) -> Verdict:
    same = [c for c in candidates if c.kind == "relation" and c.subject_id == a.subject_id
            and c.predicate == a.predicate and c.object_id == a.object_id]
    if a.change_kind == "negation":
        if same:
            return Verdict("contradict_evidence", 0.85, target=same[0].fact_id, reason="negated")
        return Verdict("drop", 1.0, reason="negation_of_unknown_relation")
    for c in same:
        distinct_events = (a.valid_kind == "event_time" and a.window.known and c.window.known
                           and not _overlap(a.window, c.window))
        if distinct_events:
            continue  # two dated events of the same kind stay two facts
        if a.change_kind == "correction" and a.window.known and a.window != c.window:
            return Verdict("update", 0.9, target=c.fact_id, window=a.window, reason="corrected_dates")
        if _better(a.window, c.window):
            merged = Window(a.window.valid_from or c.window.valid_from,
                            c.window.valid_until if a.window.precision == "open" and c.window.valid_until
                            else a.window.valid_until, a.window.precision)
            return Verdict("update", 0.9, target=c.fact_id, window=merged, reason="better_dates")
        return Verdict("noop", 0.95, target=c.fact_id, reason="same_relation")
    start = a.window.valid_from
    closing: list[tuple[uuid.UUID, dt.datetime | None]] = []
    for c in candidates:
        if c.kind != "relation" or c.fact_id in {s.fact_id for s in same}:
            continue
        same_predicate = c.predicate == a.predicate
        if not same_predicate:
            continue
        successor_of_subject = (
            c.subject_id == a.subject_id and c.object_id != a.object_id
            and ((a.change_kind == "succession" and a.predicate in SUCCESSION_PREDICATES
                  and (a.previous_object_id is None or c.object_id == a.previous_object_id))
                 or a.predicate in FUNCTIONAL)
        )
        new_holder = (c.object_id == a.object_id and c.subject_id != a.subject_id
                      and a.predicate in INVERSE_FUNCTIONAL)
        if (successor_of_subject or new_holder) and _closes(c, start):
            closing.append((c.fact_id, start))
    # A "moved from X to Y" also closes X's relation of another predicate family.
    if a.previous_object_id is not None:
        for c in candidates:
            if (c.kind == "relation" and c.subject_id == a.subject_id and c.object_id == a.previous_object_id
                    and c.fact_id not in {f for f, _ in closing} and _closes(c, start)):
                closing.append((c.fact_id, start))
    return Verdict("add", 0.9 if closing else 1.0, window=a.window, supersede=tuple(closing),
                   reason="successor" if closing else "new_relation")


def _observation(a: Incoming, candidates: Sequence[FactView]) -> Verdict:
    mine = [c for c in candidates if c.kind == "observation" and c.subject_id == a.subject_id]
    for c in mine:
        if c.statement_key == a.statement_key:
            if _better(a.window, c.window):
                return Verdict("update", 0.9, target=c.fact_id, window=a.window, reason="better_dates")
            return Verdict("noop", 0.95, target=c.fact_id, reason="same_statement")
    related = sorted(((c, _jaccard(a.attribute, c.attribute)) for c in mine), key=lambda t: -t[1])
    related = [(c, score) for c, score in related if score >= 0.5]
    if not related:
        return Verdict("add", 1.0, window=a.window, reason="new_observation")
    if a.change_kind == "correction" and a.previous_value:
        for c, score in related:
            if a.previous_value.lower() in (c.statement or "").lower():
                return Verdict("update", min(0.95, 0.6 + score), target=c.fact_id, window=a.window,
                               reason="corrected_value", features={"attribute_overlap": score})
    if a.change_kind in ("succession", "correction"):
        start = a.window.valid_from if a.valid_kind in ("effective_period", "proposition_validity") else None
        closing = tuple((c.fact_id, start) for c, _ in related if _closes(c, start))
        return Verdict("add", 0.9, window=a.window, supersede=closing, reason="successor",
                       features={"attribute_overlap": related[0][1]})
    conflicting = [c for c, _ in related if not c.superseded and a.window.known and c.window.known
                   and a.window != c.window]
    if conflicting:
        return Verdict("contradict", 0.85, window=a.window, group_with=tuple(c.fact_id for c in conflicting),
                       reason="incompatible_value", features={"attribute_overlap": related[0][1]})
    return Verdict("add", related[0][1], window=a.window, reason="related_but_distinct",
                   features={"attribute_overlap": related[0][1]})
