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
    change_kind: str = "none"  # of the assertion that made the fact
    previous_object_id: uuid.UUID | None = None
    said_at: dt.datetime | None = None  # when its first source said it


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
    ends: bool = False  # "left X", "stepped down", "no longer": ends the relation at the window's start
    said_at: dt.datetime | None = None
    # "from A to B": the A the same claim names, which held until B began
    until_claim: bool = False
    schedule: bool = False  # a date a thing is set for ("launch: 14 May"): its window is its value


def said_day(said_at: dt.datetime) -> dt.datetime:
    """The start of the day something was said on: the end an undated "no longer" gives (a
    day-precision bound, like every stated day)."""
    return said_at.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class PendingEnd:
    """An end ("left X", "no longer owns X") read before the fact it ends: its stated date,
    or none (then it holds from when it was said, for facts said before it)."""

    at: dt.datetime | None
    said_at: dt.datetime | None = None
    evidence: tuple[uuid.UUID, uuid.UUID] | None = None  # its claim and document
    precision: str | None = None  # its stated date's ("left in April": month)

    def closes(self, fact_said_at: dt.datetime | None, start: dt.datetime | None) -> dt.datetime | None:
        """When it ends a fact said at ``fact_said_at`` that starts at ``start`` (None: not)."""
        at = self.at
        if at is None and self.said_at is not None and fact_said_at is not None and fact_said_at < self.said_at:
            at = said_day(self.said_at)  # "no longer", undated: by the day it was said
        return at if at is not None and (start is None or at > start) else None


@dataclass(frozen=True)
class Verdict:
    outcome: str  # add | noop | update | contradict | contradict_evidence | drop | end
    confidence: float
    target: uuid.UUID | None = None
    window: Window | None = None
    supersede: tuple[tuple[uuid.UUID, dt.datetime | None], ...] = ()
    group_with: tuple[uuid.UUID, ...] = ()
    reason: str = ""
    features: dict[str, object] = field(default_factory=dict)
    # a held fact that starts later and would have closed this one had it arrived first:
    # the new fact is added already closed at that start (order independence)
    closed_by: tuple[uuid.UUID, dt.datetime | None] | None = None
    # an end that arrived before this fact ("left X on 1 May"): the new fact ends there, and
    # that end's claim (and document) is its evidence, as when the end arrives second
    ended_at: dt.datetime | None = None
    ended_by: tuple[uuid.UUID, uuid.UUID] | None = None
    # the precision of the end an "end" verdict (or an end read first) states
    end_precision: str | None = None

    def closed_at(self) -> dt.datetime | None:
        """When a fact this verdict adds is already over: the earlier of an end read before
        it and the start of a successor that arrived before it."""
        start = self.closed_by[1] if self.closed_by is not None else None
        return min((t for t in (self.ended_at, start) if t is not None), default=None)


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
    if new.precision == "open" and new.valid_from is not None and old.valid_from is not None and \
            new.valid_from < old.valid_from and (old.valid_until is None or new.valid_from < old.valid_until):
        # "since February" after "since April": both hold from February, whichever came first
        return True
    return (old.valid_from is None and new.valid_from is not None) or (
        old.valid_until is None and new.valid_until is not None and old.precision != "open")


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def _bounded(window: Window) -> bool:
    return window.valid_until is not None and window.precision != "open"


def _apart(a: Incoming, c: FactView) -> bool:
    """Values of one attribute held for periods that do not meet ("MRR reached 182,000 USD in
    March", "fell to 5.8 days in May"; not the dates a thing is set for): neither replaces the
    other, whichever is read first."""
    return not a.schedule and _bounded(a.window) and _bounded(c.window) and not _overlap(a.window, c.window)


def _closes(candidate: FactView, at: dt.datetime | None) -> bool:
    """A predecessor is closed only if the successor starts after it did. A predecessor
    already closed by a later successor is closed again, earlier, by one that falls between."""
    if candidate.superseded and (at is None or candidate.window.valid_from is None):
        return False
    if at is not None and candidate.window.valid_until is not None and candidate.window.valid_until < at:
        return False  # it ended before the successor started ("stepped down on 31 May", "since 1 June")
    if at is None or candidate.window.valid_from is None:
        return True
    if candidate.superseded and candidate.window.valid_until == at:
        return False  # already closed there by another successor
    return candidate.window.valid_from < at  # ending exactly at ``at`` ("from A to B"): A is B's predecessor


# A take-over or hand-over passes on whatever the previous holder held, led or owned.
_HOLDER_FAMILY = frozenset({"other:leads", "other:owns"})


def holder_predicates(predicate: str | None) -> frozenset[str]:
    """The predicates whose holder of one object a new fact of ``predicate`` may succeed
    (the candidates a fact store must return besides the subject's own facts)."""
    if predicate in _HOLDER_FAMILY:
        return _HOLDER_FAMILY
    return frozenset({predicate}) if predicate else frozenset()


def _later_successor(a: Incoming, candidates: Sequence[FactView], same: set[uuid.UUID]) -> FactView | None:
    """The earliest held fact that starts after ``a`` (or, both undated, was said after it)
    and would have closed it had it come first."""
    start = a.window.valid_from
    found: list[FactView] = []
    for c in candidates:
        if c.kind != "relation" or c.fact_id in same:
            continue
        if c.window.valid_from is None:
            # a predecessor read from a transition ("I handed it over to her") is followed by the
            # holder said with it ("Rhea owns the shader cache now") as by one said later
            said_later = (start is None and c.said_at is not None and a.said_at is not None
                          and (c.said_at > a.said_at or (a.until_claim and c.said_at == a.said_at))
                          and not c.superseded)
            if not said_later:
                continue
        elif start is not None and c.window.valid_from <= start:
            continue
        closes = False
        if c.subject_id == a.subject_id and c.object_id != a.object_id and c.predicate == a.predicate:
            # one person leads or owns many things: a new holding of theirs ends none of the others
            closes = a.predicate in FUNCTIONAL or (
                c.change_kind == "succession" and a.predicate in SUCCESSION_PREDICATES
                and (c.previous_object_id == a.object_id
                     or (c.previous_object_id is None and a.predicate not in INVERSE_FUNCTIONAL)))
        if (c.object_id == a.object_id and c.subject_id != a.subject_id and a.predicate in INVERSE_FUNCTIONAL
                and (c.predicate == a.predicate
                     or (c.change_kind == "succession" and {c.predicate, a.predicate} <= _HOLDER_FAMILY))):
            closes = True
        if c.subject_id == a.subject_id and c.previous_object_id is not None and c.previous_object_id == a.object_id:
            closes = True
        if closes:
            found.append(c)
    dated = [c for c in found if c.window.valid_from is not None]
    if dated:
        return min(dated, key=lambda c: (c.window.valid_from, str(c.fact_id)))
    return min(found, key=lambda c: (c.said_at, str(c.fact_id))) if found else None


def decide(incoming: Incoming, candidates: Sequence[FactView], *, floor: float = 0.75,
           pending_ends: Sequence[PendingEnd] = ()) -> Verdict:
    """``pending_ends``: ends ("left X", "no longer") already read for this subject and object
    that found no fact to end when they arrived."""
    verdict = _decide(incoming, candidates)
    if verdict.outcome in ("add", "contradict") and incoming.kind == "relation" and not incoming.ends:
        start = (verdict.window or incoming.window).valid_from
        ends = sorted(((t, e) for e in pending_ends if (t := e.closes(incoming.said_at, start)) is not None),
                      key=lambda pair: (pair[0], str(pair[1].evidence)))
        if ends:
            at, end = ends[0]
            verdict = Verdict(verdict.outcome, verdict.confidence, verdict.target, verdict.window, verdict.supersede,
                              verdict.group_with, verdict.reason, verdict.features, verdict.closed_by, at,
                              end.evidence, end.precision if end.at is not None else None)
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
    if a.ends:
        return _end(a, candidates)
    if a.change_kind == "negation":
        if same:
            return Verdict("contradict_evidence", 0.85, target=same[0].fact_id, reason="negated")
        return Verdict("drop", 1.0, reason="negation_of_unknown_relation")
    for c in same:
        if a.until_claim and c.window.valid_until is None:
            if c.superseded and a.window.valid_until is not None:
                # followed already by a holder whose start was not known then: the end the
                # transition states is when it ended
                return Verdict("update", 0.9, target=c.fact_id, reason="better_dates",
                               window=Window(c.window.valid_from, a.window.valid_until, a.window.precision))
            # held already: the successor in the same claim closes it, nothing to add
            return Verdict("drop", 1.0, reason="predecessor_held")
        distinct_events = (a.valid_kind == "event_time" and a.window.known and c.window.known
                           and not _overlap(a.window, c.window))
        if distinct_events:
            continue  # two dated events of the same kind stay two facts
        if a.change_kind == "correction" and a.window.known and a.window != c.window:
            return Verdict("update", 0.9, target=c.fact_id, window=a.window, reason="corrected_dates")
        if _better(a.window, c.window):
            kept_end = a.window.precision == "open" and c.window.valid_until is not None
            merged = Window(a.window.valid_from or c.window.valid_from,
                            c.window.valid_until if kept_end else a.window.valid_until,
                            c.window.precision if kept_end else a.window.precision)
            return Verdict("update", 0.9, target=c.fact_id, window=merged, reason="better_dates")
        return Verdict("noop", 0.95, target=c.fact_id, reason="same_relation")
    start = a.window.valid_from
    successor = _later_successor(a, candidates, {s.fact_id for s in same})
    closed_by = (successor.fact_id, successor.window.valid_from) if successor is not None else None
    closing: list[tuple[uuid.UUID, dt.datetime | None]] = []
    for c in candidates:
        if closed_by is not None and start is None:
            break  # an undated fact that a dated successor already follows closes nothing
        if c.kind != "relation" or c.fact_id in {s.fact_id for s in same}:
            continue
        same_predicate = c.predicate == a.predicate
        if not same_predicate and not (a.change_kind == "succession" and c.object_id == a.object_id
                                       and {c.predicate, a.predicate} <= _HOLDER_FAMILY):
            continue
        successor_of_subject = (
            same_predicate and c.subject_id == a.subject_id and c.object_id != a.object_id
            and ((a.change_kind == "succession" and a.predicate in SUCCESSION_PREDICATES
                  and (c.object_id == a.previous_object_id
                       or (a.previous_object_id is None and a.predicate not in INVERSE_FUNCTIONAL)))
                 or a.predicate in FUNCTIONAL)
        )
        new_holder = (c.object_id == a.object_id and c.subject_id != a.subject_id
                      and a.predicate in INVERSE_FUNCTIONAL)
        if start is None and c.window.valid_from is None and c.said_at is not None and a.said_at is not None \
                and c.said_at > a.said_at:
            continue  # two undated holders: the one said earlier never ends the one said later
        if start is None and c.window.valid_from is None and a.change_kind == "none" and c.change_kind == "none" \
                and c.said_at is not None and c.said_at == a.said_at:
            continue  # said together ("deployed in Frankfurt and Dublin"): both hold, neither follows
        if (successor_of_subject or new_holder) and _closes(c, start):
            closing.append((c.fact_id, start))
    # A "moved from X to Y" also closes X's relation of another predicate family.
    if a.previous_object_id is not None and not (closed_by is not None and start is None):
        for c in candidates:
            if (c.kind == "relation" and c.subject_id == a.subject_id and c.object_id == a.previous_object_id
                    and c.fact_id not in {f for f, _ in closing} and _closes(c, start)):
                closing.append((c.fact_id, start))
    return Verdict("add", 0.9 if closing else 1.0, window=a.window, supersede=tuple(closing),
                   reason="successor" if closing else "new_relation", closed_by=closed_by)


_ENDABLE = frozenset({"works_on", "works_for", "member_of", "other:leads", "other:owns", "other:sponsors",
                      "assigned_to", "reports_to", "participated_in"})


def _end(a: Incoming, candidates: Sequence[FactView]) -> Verdict:
    """"X left Y" / "stepped down as lead of Y" / "no longer works on Y": the held relation
    of X to Y ends at the stated date. One that arrives before the fact it ends is kept
    (``pending_end``) and applied when that fact arrives."""
    at = a.window.valid_from
    targets = [c for c in candidates if c.kind == "relation" and c.subject_id == a.subject_id
               and c.object_id == a.object_id and (c.predicate == a.predicate or (
                   c.predicate in _ENDABLE and a.predicate in ("works_on", "works_for", "member_of")))]
    if not targets:
        return Verdict("drop", 1.0, reason="pending_end")
    if at is None:
        # "Tomasz no longer owns it", undated: what was said before it had ended by the time
        # it was said; what was said with or after it only contradicts it
        said_before = [c for c in targets if c.said_at is not None and a.said_at is not None
                       and c.said_at < a.said_at]
        if not said_before or a.said_at is None:
            return Verdict("contradict_evidence", 0.85, target=targets[0].fact_id, reason="ended_undated")
        targets, at = said_before, said_day(a.said_at)
    live = [c for c in targets if c.window.valid_from is None or c.window.valid_from < at]
    live = [c for c in live if c.window.valid_until is None or c.window.valid_until > at]
    if not live:
        return Verdict("noop", 0.95, target=targets[0].fact_id, reason="already_ended")
    return Verdict("end", 0.9, target=live[0].fact_id, supersede=tuple((c.fact_id, at) for c in live),
                   reason="ended", end_precision=a.window.precision if a.window.valid_from is not None else None)


def _observation(a: Incoming, candidates: Sequence[FactView]) -> Verdict:
    mine = [c for c in candidates if c.kind == "observation" and c.subject_id == a.subject_id]
    for c in mine:
        if c.statement_key == a.statement_key and a.until_claim and c.window.valid_until is None:
            return Verdict("drop", 1.0, reason="predecessor_held")
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
    if a.change_kind == "none" and not a.until_claim:
        # a change of this attribute already held: a state that started later closes this
        # value at its start; a rescheduled date said later supersedes it (its window stays).
        # (A previous value a change names, "rises from 35 to 38.50", is closed by that
        # change, which comes next in the same claim.)
        start = a.window.valid_from
        later_state = [c for c, _ in related if c.change_kind == "succession" and c.window.precision == "open"
                       and c.window.valid_from is not None and (start is None or c.window.valid_from > start)]
        later_said = [c for c, _ in related if c.change_kind in ("succession", "correction")
                      and c.window.precision != "open" and c.said_at is not None and a.said_at is not None
                      and c.said_at > a.said_at and not _apart(a, c)]
        if later_state:
            first = min(later_state, key=lambda c: (c.window.valid_from, str(c.fact_id)))
            return Verdict("add", 0.9, window=a.window, reason="predecessor",
                           features={"attribute_overlap": related[0][1]},
                           closed_by=(first.fact_id, first.window.valid_from))
        if later_said:
            first = min(later_said, key=lambda c: (c.said_at, str(c.fact_id)))
            return Verdict("add", 0.9, window=a.window, reason="predecessor",
                           features={"attribute_overlap": related[0][1]}, closed_by=(first.fact_id, None))
    if a.change_kind in ("succession", "correction"):
        start = a.window.valid_from if (a.valid_kind in ("effective_period", "proposition_validity")
                                        or a.window.precision == "open") else None
        overlap = related[0][1]
        related = [(c, score) for c, score in related if not _apart(a, c)]
        # an undated change said before a value already held ("raised to 4.5" on 5 January,
        # "is now 4.4" on 16 February) is followed by it, as if it had come first
        later = [c for c, _ in related if start is None and not c.superseded and c.said_at is not None
                 and a.said_at is not None and c.said_at > a.said_at]
        closing = tuple((c.fact_id, start) for c, _ in related if _closes(c, start) and c not in later)
        closed_by = None
        if later:
            follower = min(later, key=lambda c: (c.said_at, str(c.fact_id)))
            closed_by = (follower.fact_id, follower.window.valid_from if follower.window.precision == "open" else None)
        return Verdict("add", 0.9, window=a.window, supersede=closing, reason="successor",
                       features={"attribute_overlap": overlap}, closed_by=closed_by)
    # two values held for periods that do not meet (March's and April's MRR) do not conflict;
    # two dates one thing is set for do
    conflicting = [c for c, _ in related if not c.superseded and a.window.known and c.window.known
                   and a.window != c.window and not _apart(a, c)]
    if conflicting:
        return Verdict("contradict", 0.85, window=a.window, group_with=tuple(c.fact_id for c in conflicting),
                       reason="incompatible_value", features={"attribute_overlap": related[0][1]})
    return Verdict("add", related[0][1], window=a.window, reason="related_but_distinct",
                   features={"attribute_overlap": related[0][1]})
