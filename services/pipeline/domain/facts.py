"""From claims to assertions: the governed predicate vocabulary, the rules normaliser,
entity names, canonical world-time windows and labels.

Pure and deterministic. A claim becomes zero or more assertions: relations between two
entities with a predicate from the vocabulary, or observations about one entity. An
attributed claim ("Dana said…") is always an observation on the holder's stance.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.platform.text import fold, normalize_name

CORE_PREDICATES = (
    "related_to", "works_for", "member_of", "affiliated_with", "founded", "located_in", "part_of", "authored",
    "created", "about", "knows_about", "knows", "participated_in", "works_on", "uses", "reports_to",
)
WORK_PACK = ("blocks", "depends_on", "concerns", "decided_by", "assigned_to", "pursues")
_OTHER = re.compile(r"^other:[a-z][a-z0-9_]{1,40}$")

# One leader, one manager at a time: a new holder succeeds the old one.
INVERSE_FUNCTIONAL = frozenset({"other:leads", "other:owns"})
FUNCTIONAL = frozenset({"reports_to"})


def valid_predicate(predicate: str) -> bool:
    return predicate in CORE_PREDICATES or predicate in WORK_PACK or bool(_OTHER.match(predicate))


# Verb phrases onto predicates. Order matters: the first pattern found wins.
_VERBS: tuple[tuple[str, str], ...] = (
    (r"(?:has been|have been|is|are|was|were) (?:working on|on)", "works_on"),
    (r"(?:works|worked|working|work) on", "works_on"),
    (r"(?:moved|moves|switched|transferred) from", "works_on"),
    (r"(?:joined|moved to|moves to|switched to|transferred to)", "works_on"),
    (r"(?:works|worked|work) for|(?:is|was) employed by|is employed at", "works_for"),
    (r"(?:reports|reported|report) to", "reports_to"),
    (r"(?:is|are|was|were) (?:a )?members? of|belongs? to", "member_of"),
    (r"(?:is|are|was|were) part of", "part_of"),
    (r"(?:is|are|was|were) (?:located|based) in", "located_in"),
    (r"(?:is|are|was|were) affiliated with", "affiliated_with"),
    (r"(?:founded|co-founded)", "founded"),
    (r"(?:wrote|authored|has written)", "authored"),
    (r"(?:created|built|designed|developed)", "created"),
    (r"(?:knows about|is an expert (?:in|on))", "knows_about"),
    (r"knows", "knows"),
    (r"(?:participated in|attended|took part in)", "participated_in"),
    (r"(?:uses|used|relies on)", "uses"),
    (r"(?:depends on|depend on|depended on)", "depends_on"),
    (r"(?:blocks|blocked|is blocking)", "blocks"),
    (r"(?:is|was) assigned to", "assigned_to"),
    (r"(?:was|were|is) decided by", "decided_by"),
    (r"(?:now )?(?:leads|led|is leading|heads|runs|manages)", "other:leads"),
    (r"(?:now )?(?:owns|owned|is the owner of|maintains)", "other:owns"),
    (r"(?:sponsors|sponsored)", "other:sponsors"),
)
_VERB_RE = [(re.compile(rf"\s(?:{pattern})\s", re.IGNORECASE), predicate) for pattern, predicate in _VERBS]

_PHRASE = {
    "works_on": "works on", "works_for": "works for", "reports_to": "reports to", "member_of": "is a member of",
    "part_of": "is part of", "located_in": "is located in", "affiliated_with": "is affiliated with",
    "knows_about": "knows about", "participated_in": "participated in", "depends_on": "depends on",
    "assigned_to": "is assigned to", "decided_by": "was decided by", "related_to": "is related to",
}

# Nouns too generic to name one referent on their own ("the system", "a card").
BARE_HEAD_NOUNS = frozenset("""system app application card thing things team project document documents meeting
plan plans issue issues problem process page service tool data work task tasks item items one people person
something everything nothing it this that they we he she you i them us him her launch date""".split())

_STOP_LEADING = {"the", "a", "an", "our", "their", "his", "her", "its", "this", "that", "these", "those", "my",
                 "your"}
_NAME = re.compile(r"[A-Z][\w'’-]*(?:\s+(?:[A-Z]\.|[A-Z][\w'’-]*))*")
_SUCCESSION = re.compile(r"\b(?:moved|moves|move|switched|switches|transferred|joined|joins|now|took over|"
                         r"takes over|replaced|replaces|postponed|rescheduled|pushed|slipped|changed to|"
                         r"no longer)\b", re.IGNORECASE)
_CORRECTION = re.compile(r"\b(?:correction|corrected|actually|not\s+\d|instead of)\b", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:did not|didn't|does not|doesn't|is not|isn't|was not|wasn't|never)\b",
                       re.IGNORECASE)
_FROM_TO = re.compile(r"\bfrom\s+(?P<old>.+?)\s+to\s+(?P<new>.+?)(?:[.,;]|$)", re.IGNORECASE)
_VERBISH = frozenset("""is are was were has have had will would need needs needed move moves moved get gets got
should can could must may might does did do be been being said says agreed agrees approved approves""".split())
_DATE_WORDS = frozenset("""january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday q1 q2 q3 q4 today yesterday tomorrow""".split())
_VALUE_WORDS = frozenset("""is are was were be been being will would scheduled planned plan moves moved move
set postponed rescheduled expected due happens happen happened now to for from on in by at the a an of and or
since until starts start started ends end ended moved pushed slipped changed""".split())


def clean_surface(phrase: str) -> str:
    words = phrase.strip(" ,.;:!?\"'()[]").split()
    while words and words[0].lower() in _STOP_LEADING:
        words = words[1:]
    return " ".join(words)


def is_entity_name(phrase: str) -> bool:
    """A named referent: a capitalised name, or a noun phrase that is not a bare head noun."""
    key = normalize_name(phrase)
    if not key or key.isdigit() or len(key) > 120:
        return False
    words = key.split()
    if len(words) == 1 and words[0] in BARE_HEAD_NOUNS:
        return False
    if any(w in _DATE_WORDS for w in words) and any(w.isdigit() for w in words):
        return False  # a date, not a referent
    return not all(w in _VALUE_WORDS or w in _DATE_WORDS or w.isdigit() for w in words)


@dataclass(frozen=True)
class ClaimView:
    claim_id: str
    claim_text: str
    is_attributed: bool
    attributed_to: str | None
    valid_from: dt.datetime | None
    valid_until: dt.datetime | None  # as stated: inclusive
    valid_precision: str
    valid_kind: str | None
    asserted_at: dt.datetime | None


@dataclass(frozen=True)
class AssertionDraft:
    kind: str  # relation | observation
    subject: str
    predicate: str | None = None
    object: str | None = None
    statement: str | None = None
    change_kind: str = "none"  # none | succession | correction | negation
    previous_object: str | None = None  # "moved from <previous_object> to <object>"
    previous_value: str | None = None  # a correction's old value ("from 8 June to 9 June")
    features: dict[str, object] = field(default_factory=dict)


def _change_kind(text: str) -> str:
    if _NEGATION.search(text):
        return "negation"
    if _CORRECTION.search(text):
        return "correction"
    if _SUCCESSION.search(text):
        return "succession"
    return "none"


def _subject_and_rest(text: str, start: int) -> str:
    return text[:start]


def _names_in(text: str) -> list[str]:
    names = []
    for match in _NAME.finditer(text):
        candidate = clean_surface(match.group(0))
        if candidate and is_entity_name(candidate) and normalize_name(candidate) not in _DATE_WORDS:
            names.append(candidate)
    return names


def _noun_phrase(fragment: str) -> str | None:
    """The entity a sentence fragment names: its leading noun phrase, without dates, clauses
    and trailing prepositional phrases about time."""
    piece = re.split(r"\s(?:since|until|from|on|in|by|at|because|as of|after|before|during|,|;|and then)\s|[.,;:]",
                     " " + fragment.strip() + " ", maxsplit=1)[0]
    words = piece.split()
    for index, word in enumerate(words):
        if index and word.lower() in _VERBISH:
            words = words[:index]
            break
    piece = clean_surface(" ".join(words))
    piece = re.sub(r"\s+\d.*$", "", piece)
    return piece if piece and is_entity_name(piece) else None


def normalize_claim(claim: ClaimView, known_aliases: frozenset[str] = frozenset()) -> tuple[list[AssertionDraft],
                                                                                             str | None]:
    """A claim's assertions, or ([], reason) when it names no entity.

    ``known_aliases`` (normalised) lets an observation anchor on an entity the memory
    already knows even when the name is not capitalised ("the billing migration launch").
    """
    text = claim.claim_text.strip()
    change = _change_kind(text)
    if claim.is_attributed and claim.attributed_to:
        holder = clean_surface(claim.attributed_to)
        if not is_entity_name(holder):
            return [], "no_entity"
        return [AssertionDraft("observation", holder, statement=text, change_kind="none",
                               features={"stance_of": holder})], None
    body = f" {text.rstrip('.')} "
    for pattern, predicate in _VERB_RE:
        match = pattern.search(body)
        if match is None:
            continue
        subject = _noun_phrase(body[:match.start()]) if body[:match.start()].strip() else None
        rest = body[match.end():]
        previous = None
        if match.group(0).strip().lower().endswith(" from") and " to " in rest:
            old, _, new = rest.partition(" to ")
            previous, obj = _noun_phrase(old), _noun_phrase(new)
        else:
            obj = _noun_phrase(rest)
        if subject and obj and normalize_name(subject) != normalize_name(obj):
            kind = "succession" if re.search(r"\b(moved|moves|switched|transferred|joined|now)\b", match.group(0) +
                                             body[:match.end()], re.IGNORECASE) else change
            return [AssertionDraft("relation", subject, predicate=predicate, object=obj, change_kind=kind,
                                   previous_object=previous)], None
        break
    anchor = _observation_anchor(text, known_aliases)
    if anchor is None:
        return [], "no_entity"
    previous_value = None
    if change in ("succession", "correction"):
        moved = _FROM_TO.search(text)
        if moved and re.search(r"\d", moved.group("old")):
            change, previous_value = "correction", moved.group("old").strip()
    return [AssertionDraft("observation", anchor, statement=text, change_kind=change,
                           previous_value=previous_value)], None


class RelationProvider(Protocol):
    """Turns a version's claims (in document order) into assertion drafts. ``known_aliases``
    are the normalised names the memory already holds."""

    name: str
    version: str

    async def normalize(self, claims: Sequence[ClaimView], known_aliases: frozenset[str]
                        ) -> list[tuple[list[AssertionDraft], str | None]]: ...


class RulesRelationProvider:
    """The deterministic normaliser: verb phrases onto the governed vocabulary, the rest as
    observations. Names found earlier in the document anchor later observations."""

    name = "rules"
    version = "rules-normalizer/1"

    async def normalize(self, claims: Sequence[ClaimView], known_aliases: frozenset[str]
                        ) -> list[tuple[list[AssertionDraft], str | None]]:
        aliases = set(known_aliases)
        out = []
        for claim in claims:
            drafts, reason = normalize_claim(claim, frozenset(aliases))
            drafts = [d for d in drafts if d.kind == "observation" or valid_predicate(d.predicate or "")]
            for draft in drafts:
                aliases.update(normalize_name(n) for n in (draft.subject, draft.object) if n)
            out.append((drafts, None if drafts else (reason or "unknown_predicate")))
        return out


def _observation_anchor(text: str, known_aliases: frozenset[str]) -> str | None:
    folded = normalize_name(text)
    best = None
    for alias in known_aliases:
        if alias and re.search(rf"(?:^|\s){re.escape(alias)}(?:\s|$)", folded):
            if best is None or len(alias) > len(best):
                best = alias
    if best is not None:
        return best
    names = _names_in(text)
    if names:
        return names[0]
    return _noun_phrase(text)


# --------------------------------------------------------------------------------------
# time
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """A fact's canonical world-time window: [valid_from, valid_until), with its precision."""

    valid_from: dt.datetime | None
    valid_until: dt.datetime | None
    precision: str

    @property
    def known(self) -> bool:
        return self.valid_from is not None or self.valid_until is not None

    @property
    def complete(self) -> bool:
        return self.valid_from is not None and (self.valid_until is not None or self.precision == "open")

    def as_json(self) -> dict[str, object]:
        return {"valid_from": self.valid_from.isoformat() if self.valid_from else None,
                "valid_until": self.valid_until.isoformat() if self.valid_until else None,
                "valid_precision": self.precision}


UNKNOWN = Window(None, None, "unknown")


def _next(value: dt.datetime, precision: str) -> dt.datetime:
    if precision == "instant":
        return value + dt.timedelta(microseconds=1)
    if precision == "day":
        return value + dt.timedelta(days=1)
    if precision == "month":
        return (value.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
    if precision == "quarter":
        month = value.month + 3
        return value.replace(year=value.year + (month - 1) // 12, month=(month - 1) % 12 + 1, day=1)
    if precision == "year":
        return value.replace(year=value.year + 1, month=1, day=1)
    return value


def canonical_window(valid_from: dt.datetime | None, valid_until: dt.datetime | None, precision: str) -> Window:
    """A claim's stated window (inclusive end) as a fact window (exclusive end). Partial
    windows stay partial; nothing is invented."""
    if precision == "unknown" or (valid_from is None and valid_until is None):
        return UNKNOWN
    if precision == "open":
        return Window(_floor(valid_from, "day") if valid_from else None, None, "open")
    start = _floor(valid_from, precision) if valid_from else None
    end = _next(_floor(valid_until, precision), precision) if valid_until else None
    return Window(start, end, precision)


def _floor(value: dt.datetime, precision: str) -> dt.datetime:
    value = value.astimezone(dt.UTC)
    if precision in ("day", "open"):
        return value.replace(hour=0, minute=0, second=0, microsecond=0)
    if precision == "month":
        return value.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if precision == "quarter":
        return value.replace(month=(value.month - 1) // 3 * 3 + 1, day=1, hour=0, minute=0, second=0, microsecond=0)
    if precision == "year":
        return value.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    return value


def state_window(claim_window: Window, change_kind: str) -> Window:
    """A succession's new state starts at the event and goes on ("moved to X on 1 June")."""
    if change_kind == "succession" and claim_window.valid_from is not None:
        return Window(claim_window.valid_from, None, "open")
    return claim_window


# --------------------------------------------------------------------------------------
# labels
# --------------------------------------------------------------------------------------

def relation_label(subject: str, predicate: str, obj: str) -> str:
    """Readable, undated: "Ravi works on billing migration"."""
    phrase = _PHRASE.get(predicate) or predicate.removeprefix("other:").replace("_", " ")
    return f"{subject} {phrase} {obj}"


def attribute_key(statement: str, subject_key: str) -> frozenset[str]:
    """What an observation is about, without its value: content words minus the subject,
    dates, numbers and value verbs ("cutover", "launch")."""
    subject_words = set(subject_key.split())
    words = {w for w in re.findall(r"[a-z][a-z'-]+", fold(statement).lower())
             if w not in _VALUE_WORDS and w not in _DATE_WORDS and len(w) > 2}
    # When the subject itself is the attribute ("the cutover is on 8 June") keep its words.
    return frozenset(words - subject_words) or frozenset(words)
