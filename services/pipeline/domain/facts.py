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
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from services.pipeline.domain.entities import compatible
from services.platform.text import fold, normalize_name

CORE_PREDICATES = (
    "related_to", "works_for", "member_of", "affiliated_with", "founded", "located_in", "part_of", "authored",
    "created", "about", "knows_about", "knows", "participated_in", "works_on", "uses", "reports_to",
)
WORK_PACK = ("blocks", "depends_on", "concerns", "decided_by", "assigned_to", "pursues")
_OTHER = re.compile(r"^other:[a-z][a-z0-9_]{1,40}$")

# The state model: which governed predicates are functional, and on which side. "object":
# one holder per object at a time (one leader of a project, one owner of a system);
# "subject": one value per subject (one manager of a person, one host of a system). An
# incoming fact of a functional predicate closes the previous holder's window at its start.
FUNCTIONAL_SIDE: dict[str, str] = {
    "other:leads": "object", "other:owns": "object", "other:sponsors": "object",
    "reports_to": "subject", "located_in": "subject",
}
INVERSE_FUNCTIONAL = frozenset(p for p, side in FUNCTIONAL_SIDE.items() if side == "object")
FUNCTIONAL = frozenset(p for p, side in FUNCTIONAL_SIDE.items() if side == "subject")


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
something everything nothing it this that they we he she you i them us him her launch date company firm
organisation organization business employer""".split())

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
    if len(words) > 1 and words[0] in _TIME_OF_NAME and words[1][:1].isupper():
        words = words[1:]  # "the old ILLiad forms", "the new Eastfield store": the named thing
    return " ".join(words)


# a name's own time said before it: no part of the name
_TIME_OF_NAME = frozenset({"old", "new", "former", "previous", "existing", "current"})


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
    features: dict[str, Any] = field(default_factory=dict)


def _change_kind(text: str) -> str:
    if _NEGATION.search(text):
        return "negation"
    if _CORRECTION.search(text):
        return "correction"
    if _SUCCESSION.search(text):
        return "succession"
    return "none"


def _names_in(text: str, parsed: bool = False) -> list[str]:
    """The capitalised names in ``text``, in order; ``parsed``: each as the English parse reads
    it (``reading.name_at``), not as the surface run."""
    if parsed:
        from services.pipeline.domain import reading
    names = []
    for match in _NAME.finditer(text):
        found = reading.name_at(text, match.start(), match.end()) if parsed else match.group(0)
        candidate = clean_surface(found or "")
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
    are normalised names to anchor on besides the document's own; the pipeline passes none,
    so what a document yields does not depend on what the memory held when it was read."""

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


class ParseRelationProvider:
    """The default offline normaliser: each claim is read from its English parse
    (:mod:`services.pipeline.domain.reading`) onto the governed vocabulary. Relations get
    their change kind (succession, end, negation, correction) and "from A to B"; attribute
    values become canonical observations ("Q3 marketing budget: 90,000 EUR") that supersede
    their predecessors; questions, hypotheticals and opinions make no fact; a turn's claims
    are the speaker's testimony (their attribution stays on the claim)."""

    name = "rules"
    version = "parse-normalizer/1"

    async def normalize(self, claims: Sequence[ClaimView], known_aliases: frozenset[str]
                        ) -> list[tuple[list[AssertionDraft], str | None]]:
        return read_claims(claims, known_aliases)


def read_claims(claims: Sequence[ClaimView], known_aliases: frozenset[str]
                ) -> list[tuple[list[AssertionDraft], str | None]]:
    """What :class:`ParseRelationProvider` makes of a batch of claims, read in order (a
    plain function, so the parse can run in another process)."""
    from services.pipeline.domain import nlp, reading

    nlp.prefetch(reading.prepared(c.claim_text.strip()) for c in claims)
    aliases = set(known_aliases)
    definitions: dict[str, str] = {}
    roles: dict[str, list[tuple[str, str, dt.datetime | None]]] = {}
    ended: dict[str, list[tuple[str, str, dt.datetime | None]]] = {}
    out = []
    for claim in claims:
        drafts, reason = read_claim(claim, frozenset(aliases), definitions, roles, ended)
        drafts = [d for d in drafts if d.kind == "observation" or valid_predicate(d.predicate or "")]
        drafts += _held_until_last_day(claim, drafts, ended)
        for draft in drafts:
            aliases.update(normalize_name(n) for n in (draft.subject, draft.object) if n)
            if draft.kind == "relation" and draft.predicate in INVERSE_FUNCTIONAL and draft.object and not (
                    draft.features.get("until_claim") or draft.features.get("ends")
                    or draft.change_kind == "negation"):
                roles.setdefault(normalize_name(draft.subject), []).append(
                    (draft.predicate, draft.object, claim_window(claim, draft).valid_from))
            elif draft.kind == "relation" and draft.predicate in INVERSE_FUNCTIONAL and draft.object and (
                    draft.features.get("ends")):  # "X stepped down as chair of Y on 9 October"
                ended.setdefault(normalize_name(draft.subject), []).append(
                    (draft.predicate, draft.object, claim.valid_from))
            if draft.features.get("attribute"):  # "the new deadline" can refer back to it
                aliases.add(normalize_name(str(draft.features["attribute"])))
        aliases.update(_attributes_named(claim.claim_text, aliases))
        out.append((drafts, None if drafts else (reason or "unknown_predicate")))
    return out


def _held_after_end(r: Any, released: Sequence[tuple[str | None, str | None, str]]) -> Any:
    """"Tomasz no longer owns the DNS config, it's Beatriz now" (one claim, or two: "… The
    DNS config is Beatriz now.", "Bo does now."): a clause that only names a holder
    (``reading`` marks it) takes over what an end of this claim or an earlier one of the
    batch let go (``released``: predicate, object, normalised holder), of the thing it names
    when it names one. Only one such thing may fit: which of several it means is not guessed."""
    from services.pipeline.domain import reading

    holder, of = r.features.get("holder"), r.features.get("holder_of")
    if holder is None:
        return r
    fits = {(p, o) for p, o, was in released if p and o and was != normalize_name(holder)
            and (of is None or normalize_name(o) == normalize_name(of))}
    if len(fits) != 1:
        return replace(r, features={k: v for k, v in r.features.items() if k not in ("holder", "holder_of")})
    [(predicate, obj)] = fits
    return reading.Reading("relation", subject=holder, predicate=predicate, object=obj, change="succession",
                           hedged=r.hedged, label=r.label)


_LAST_DAY = re.compile(r"^(?P<person>.+?)['’]s? (?:last|final) (?:working )?day$", re.IGNORECASE)


def _held_until_last_day(claim: ClaimView, drafts: list[AssertionDraft],
                         ended: dict[str, list[tuple[str, str, dt.datetime | None]]]) -> list[AssertionDraft]:
    """"Irene has resigned as head of finance; her last day is 30 June": each role an earlier
    claim of the batch ended without a date was held until that last day."""
    out = []
    for draft in drafts:
        match = _LAST_DAY.match(str(draft.features.get("attribute") or ""))
        if match is None or claim.valid_from is None:
            continue
        person = clean_surface(match.group("person"))
        for predicate, obj, end in ended.get(normalize_name(person), []):
            if end is None:
                out.append(AssertionDraft("relation", person, predicate=predicate, object=obj,
                                          features={"until_claim": True,
                                                    "until": _floor(claim.valid_from, "day").isoformat()}))
    return out


_CHANGE = {"none": "none", "succession": "succession", "correction": "correction", "negation": "negation",
           "end": "negation"}


def read_claim(claim: ClaimView, known_aliases: frozenset[str] = frozenset(),
               definitions: dict[str, str] | None = None,
               roles: dict[str, list[tuple[str, str, dt.datetime | None]]] | None = None,
               ended: dict[str, list[tuple[str, str, dt.datetime | None]]] | None = None,
               ) -> tuple[list[AssertionDraft], str | None]:
    """A claim's assertions from its parse, or ([], reason). ``definitions`` carries what
    earlier claims of the batch defined ("Kestrel is the team …" → "team": "Kestrel") and is
    updated with this claim's definitions; ``roles`` the functional roles (leads, owns,
    sponsors) earlier claims of the batch gave each holder, with their start, for "X succeeds
    Y" said without a role; ``ended`` those earlier claims ended, with their end, for "Y was
    succeeded by X" after Y stepped down."""
    from services.pipeline.domain import reading

    text = claim.claim_text.strip()
    readings = reading.read(text)
    released = [(r.predicate, r.object, normalize_name(r.subject or "")) for r in readings
                if r.kind == "relation" and r.change == "end" and r.object]
    released += [(p, o, s) for s, ends in (ended or {}).items() for p, o, _ in ends]
    readings = [_held_after_end(r, released) for r in readings]
    definitions = {} if definitions is None else definitions

    def refer(surface: str) -> str:
        resolved = _bare_reference(surface, known_aliases)
        # "Pixelmoor is a design studio" … "the studio" / "the design studio": Pixelmoor
        return definitions.get(normalize_name(resolved), definitions.get(normalize_name(surface), resolved))

    for r in readings:
        defined = r.features.get("defines")
        if r.kind in ("statement", "relation") and r.subject and isinstance(defined, str):
            for noun in {defined, str(r.features.get("defines_phrase") or defined)}:
                definitions.setdefault(normalize_name(noun), clean_surface(r.subject))
    holder = clean_surface(claim.attributed_to) if claim.is_attributed and claim.attributed_to else None
    reported = next((r for r in readings if r.kind == "reported"), None)
    if holder is None and reported is not None and reported.subject:
        holder = clean_surface(reported.subject)  # "Dana told the team that …": Dana's stance
        if is_entity_name(holder):
            return [AssertionDraft("observation", holder, statement=text, features={"stance_of": holder}),
                    *_of_the_reporter(readings, holder, claim)], None
        holder = None
    if holder is not None and reported is not None:
        if not is_entity_name(holder):
            return [], "no_entity"
        return [AssertionDraft("observation", holder, statement=text, features={"stance_of": holder})], None
    drafts: list[AssertionDraft] = []
    reason: str | None = None
    structured = [r for r in readings if r.kind in ("relation", "attribute")]
    # structured readings first; a clause read only as a statement is the claim's observation
    # when nothing structured came out of it
    ordered = [*structured, *[r for r in readings if r.kind not in ("relation", "attribute")]]
    for n, r in enumerate(ordered):
        extra: dict[str, object] = {"attributed_to": holder} if holder else {}
        if r.features.get("undated"):
            extra["undated"] = True  # the claim's date belongs to another clause of it
        if r.hedged:
            extra["hedged"] = True
            if r.kind in ("relation", "attribute", "succession"):
                # "Maybe Victor leads the review": what is guessed is no state; the claim stays
                # as a flagged observation, its sentence the statement
                r = reading.Reading("statement", subject=r.subject, hedged=True, label=r.label)
        if r.kind == "nonfact":
            if holder is not None and r.mood == "opinion" and is_entity_name(holder):
                drafts.append(AssertionDraft("observation", holder, statement=text,
                                             features={"stance_of": holder, "mood": r.mood}))
            reason = reason or f"not_a_fact:{r.mood}"
            continue
        if r.kind == "reported":
            reason = reason or "reported_speech"
            continue
        if r.kind == "succession":
            successor_drafts = succession_drafts(claim, r.subject or "", r.previous_holder or "", roles or {}, extra,
                                                 ended or {})
            drafts.extend(successor_drafts)
            reason = reason or (None if successor_drafts else "succession_without_role")
            continue
        if r.kind in ("relation", "attribute") and r.change == "succession" and not r.features.get("schedule") \
                and _in_future(claim, text):
            r = reading.Reading("plan", subject=r.subject, mood="plan", label=r.label)  # a move not made yet
        if r.kind == "relation":
            subject = refer(clean_surface(r.subject or ""))
            obj = refer(clean_surface(r.object or ""))
            if is_entity_name(subject) and is_entity_name(obj) and normalize_name(subject) != normalize_name(obj):
                previous = clean_surface(r.previous) if r.previous else None
                drafts.extend(relation_drafts(subject, r.predicate or "", obj, r.change, previous=previous,
                                              previous_holder=r.previous_holder, extra=extra,
                                              dated=claim.valid_from is not None))
                continue
        if r.kind == "attribute" and r.attribute and r.value:
            value = r.value
            attribute, renewed = _attribute_reference(r.attribute, known_aliases)
            if renewed and r.change == "none":
                r = reading.Reading(**{**r.__dict__, "change": "succession"})
            if attribute != r.attribute:
                r = reading.Reading(**{**r.__dict__, "attribute": attribute,
                                       "label": f"{attribute}: {r.value}"})
            anchor = attribute_anchor(attribute, known_aliases)
            if anchor is not None:
                change = _CHANGE[r.change]
                previous_value = None
                if r.previous and r.features.get("schedule"):
                    change, previous_value = "correction", r.previous
                # a value measured over a period ("fell to 0.4 percent in June") holds for that period
                state = bool(r.features.get("state")) and claim.valid_kind != "measurement_period"
                drafts.extend(attribute_drafts(anchor, attribute, value, change, previous=r.previous,
                                               previous_value=previous_value, state=state,
                                               schedule=bool(r.features.get("schedule")), extra=extra))
                continue
        if r.kind == "nonfact":
            continue
        if r.kind in ("relation", "attribute") and any(o.kind in ("relation", "attribute") for o in ordered[n + 1:]):
            continue  # "your account manager is Jun, who reports to Tiago": the relative clause may hold
        if r.kind == "statement" and any(d.kind == "relation" or d.features.get("attribute") for d in drafts):
            continue
        if r.kind == "statement" and r.subject:
            resolved = _bare_reference(clean_surface(r.subject), known_aliases)
            if resolved != clean_surface(r.subject):
                known_aliases = known_aliases | {normalize_name(resolved)}
        if not _has_predicate(text):
            reason = reason or "no_predicate"
            continue
        anchor = _observation_anchor(text, known_aliases, parsed=True, subject=r.subject)
        if anchor is None and holder is not None and is_entity_name(holder) and not (
                r.subject and reading.is_pronoun(r.subject)):
            anchor = holder  # a speaker's "Bought the boots!" is about the speaker ("That's …" is not)
        if anchor is None:
            reason = reason or "no_entity"
            continue
        features = dict(extra)
        if r.kind == "plan":
            features["kind"] = "plan"
        features.update(_label_features(r, anchor))
        change = _CHANGE[r.change]
        drafts.append(AssertionDraft("observation", anchor, statement=text,
                                     change_kind="negation" if change == "negation" else _change_kind(text)
                                     if r.kind != "plan" else "none", features=features))
        break  # one observation per claim: its text is the statement
    return drafts, (None if drafts else reason)


def _of_the_reporter(readings: Sequence[Any], reporter: str, claim: ClaimView) -> list[AssertionDraft]:
    """What the writer says of whoever reports ("Gareth Morgan, who manages the co-op, says
    …"): a relative clause on the reporter is no part of the report."""
    drafts: list[AssertionDraft] = []
    for r in readings:
        if r.kind == "relation" and r.features.get("relative") and not r.hedged and r.object \
                and normalize_name(clean_surface(r.subject or "")) == normalize_name(reporter):
            obj = clean_surface(r.object)
            if is_entity_name(obj) and normalize_name(obj) != normalize_name(reporter):
                drafts.extend(relation_drafts(reporter, r.predicate or "", obj, r.change,
                                              previous_holder=r.previous_holder, dated=claim.valid_from is not None))
    return drafts


def _label_features(r: Any, anchor: str) -> dict[str, object]:
    """What an observation's canonical label is made of, from a statement or plan reading:
    the parse's predicate phrase, said of the entity's current name, or of the subject as
    written when the parse's subject is not the anchor."""
    rest = r.features.get("predicate_text")
    if r.kind not in ("statement", "plan") or not rest or not r.subject:
        return {}
    features: dict[str, object] = {"label_rest": rest}
    if normalize_name(clean_surface(r.subject)) != normalize_name(anchor):
        features["label_subject"] = clean_surface(r.subject)
    return features


def statement_label_features(text: str, anchor: str) -> dict[str, object]:
    """The label features of an observation or plan that another provider (a model) read from
    ``text``: the same parse phrase the offline reading uses, so labels do not depend on which
    provider read the claim."""
    from services.pipeline.domain import reading

    for r in reading.read(text):
        features = _label_features(r, anchor)
        if features:
            return features
    return {}


def relation_drafts(subject: str, predicate: str, obj: str, change: str, *, previous: str | None = None,
                    previous_holder: str | None = None, extra: dict[str, object] | None = None,
                    dated: bool = False) -> list[AssertionDraft]:
    """The drafts one relation reading makes, whichever provider read it: the relation with its
    change kind ("end" is a negation that ``ends`` the fact), and for a succession what held
    until then: "from Frankfurt to Dublin" (the previous object) and "took over from Lena" (the
    previous holder), each a fact that ends at the claim's time (``until_claim``). An end the
    claim dates (``dated``: "is leaving Finch Analytics on 4 December") also says the relation
    held until then, so the fact is there whether or not another document stated it."""
    extra = dict(extra or {})
    features = dict(extra)
    if change == "end":
        features["ends"] = True
    if previous_holder:
        features["previous_holder"] = previous_holder
    drafts: list[AssertionDraft] = []
    previous = previous if previous and is_entity_name(previous) else None
    if previous is not None and change == "succession" and normalize_name(previous) != normalize_name(obj):
        drafts.append(AssertionDraft("relation", subject, predicate=predicate, object=previous,
                                     features={**extra, "until_claim": True}))
    holder = clean_surface(previous_holder) if previous_holder else None
    if holder and change == "succession" and is_entity_name(holder) and normalize_name(holder) != normalize_name(
            subject):
        # "Oren handed the restore drill over to Mateo": Oren held it until then
        drafts.append(AssertionDraft("relation", holder, predicate=predicate, object=obj,
                                     features={**extra, "until_claim": True}))
    if change == "end" and dated:
        drafts.append(AssertionDraft("relation", subject, predicate=predicate, object=obj,
                                     features={**extra, "until_claim": True}))
    drafts.append(AssertionDraft("relation", subject, predicate=predicate, object=obj,
                                 change_kind=_CHANGE[change], previous_object=previous, features=features))
    return drafts


def succession_drafts(claim: ClaimView, successor: str, predecessor: str,
                      roles: dict[str, list[tuple[str, str, dt.datetime | None]]],
                      extra: dict[str, object] | None = None,
                      ended: dict[str, list[tuple[str, str, dt.datetime | None]]] | None = None
                      ) -> list[AssertionDraft]:
    """"He succeeds Paula Greco" with no role named: Paula held each functional role the
    successor holds in the same document, until the claim's date, else the successor's start,
    else the day it was said. "Paula stepped down as chair …, and was succeeded by Ines": Ines
    holds each role Paula's earlier claim ended, from its end (when this claim has no date)."""
    predecessor = clean_surface(predecessor)
    key = normalize_name(clean_surface(successor))
    if not key or not is_entity_name(predecessor):
        return []
    drafts = []
    for predicate, obj, end in (ended or {}).get(normalize_name(predecessor), []):
        if normalize_name(obj) == key:
            continue
        since = {"since": _floor(end, "day").isoformat()} if claim.valid_from is None and end is not None else {}
        drafts.append(AssertionDraft("relation", clean_surface(successor), predicate=predicate, object=obj,
                                     change_kind="succession", features={**(extra or {}), **since}))
    if drafts:
        return drafts
    for holder, held in sorted(roles.items()):
        if not compatible(key, holder):
            continue
        for predicate, obj, start in held:
            if normalize_name(obj) == normalize_name(predecessor):
                continue
            features: dict[str, object] = {**(extra or {}), "until_claim": True}
            until = start or claim.asserted_at
            if claim.valid_from is None and until is not None:  # else the claim's own date ends it
                features["until"] = _floor(until, "day").isoformat()
            drafts.append(AssertionDraft("relation", predecessor, predicate=predicate, object=obj, features=features))
    return drafts


def attribute_drafts(anchor: str, attribute: str, value: str, change: str, *, previous: str | None = None,
                     previous_value: str | None = None, state: bool = False, schedule: bool = False,
                     extra: dict[str, object] | None = None) -> list[AssertionDraft]:
    """The drafts one attribute value makes: the canonical observation ("Q3 marketing budget:
    90,000 EUR") and, for a state changed "from 40,000 EUR to 25,000 EUR", the old value that
    held until then. ``schedule``: the value is the date a thing is set for."""
    extra = dict(extra or {})
    drafts: list[AssertionDraft] = []
    if state and previous and change == "succession":
        drafts.append(AssertionDraft("observation", anchor, statement=f"{attribute}: {previous}",
                                     features={**extra, "attribute": attribute, "value": previous,
                                               "until_claim": True}))
    drafts.append(AssertionDraft("observation", anchor, statement=f"{attribute}: {value}", change_kind=change,
                                 previous_value=previous_value,
                                 features={**extra, "attribute": attribute, "value": value,
                                           "state": state, **({"schedule": True} if schedule else {})}))
    return drafts


_FORWARD = re.compile(r"\b(?:next|coming|upcoming)\s+(?:week|sprint|month|quarter|year|release|cycle)\b"
                      r"|\bsoon\b|\blater this\b", re.IGNORECASE)


def _in_future(claim: ClaimView, text: str) -> bool:
    """A transition said with "next sprint", or dated vaguely after it was said ("moves to the
    new portal in June"): a plan, not a state. An announced day ("takes over as head of sales
    on 1 July") is a scheduled state with a window that starts then."""
    later = claim.valid_from is not None and claim.asserted_at is not None and \
        claim.valid_from.date() > claim.asserted_at.date()
    if later and claim.valid_precision not in ("day", "instant", "open"):
        return True
    return bool(_FORWARD.search(text))


# Nouns that name an attribute of the thing before them ("the migration deadline").
_ATTRIBUTE_HEADS = frozenset("""deadline date budget cost costs price fee target status launch cutover size headcount
rate count release kickoff start end name owner version score""".split())
_RENEWAL_WORDS = frozenset("new revised updated latest current final adjusted".split())


def _attributes_named(text: str, aliases: set[str]) -> set[str]:
    """"<known name> <attribute noun>" said in a claim ("the data warehouse migration deadline
    was pushed back"): attribute names a later "the new deadline" may refer to."""
    folded = normalize_name(text)
    found = set()
    for head in _ATTRIBUTE_HEADS:
        if f" {head}" not in f" {folded}":
            continue
        for alias in aliases:
            if alias and f"{alias} {head}" in folded:
                found.add(f"{alias} {head}")
    return found


def _attribute_reference(attribute: str, known_aliases: frozenset[str]) -> tuple[str, bool]:
    """"the new deadline" after "the data warehouse migration deadline": that attribute, and
    whether the words say it replaces the old value."""
    words = attribute.split()
    renewed = bool(words) and words[0].lower() in _RENEWAL_WORDS
    rest = " ".join(words[1:]) if renewed else attribute
    if len(rest.split()) == 1 and rest[:1].islower():
        matches = {alias for alias in known_aliases if len(alias.split()) > 1 and alias.split()[-1] == rest.lower()}
        if len(matches) == 1:
            return next(iter(matches)), renewed
    return attribute, renewed and rest != attribute


_TEAM_WORDS = frozenset("team squad crew tribe pod".split())


def _bare_reference(surface: str, known_aliases: frozenset[str]) -> str:
    """"the service" after "the feature flag service": the one known name with that head."""
    key = normalize_name(surface)
    if key and " " not in key and surface[:1].isupper() and key not in known_aliases:
        # "Osprey also maintains …" after "Team Osprey owns …": the one team of that name
        teams = {alias for alias in known_aliases if len(alias.split()) == 2 and key in alias.split()
                 and set(alias.split()) - {key} <= _TEAM_WORDS}
        if len(teams) == 1:
            return next(iter(teams))
    if not key or " " in key or surface[:1].isupper() and key not in BARE_HEAD_NOUNS:
        return surface
    matches = {alias for alias in known_aliases if alias != key and len(alias.split()) > 1
               and (alias.split()[-1] == key or (alias.split()[0] == key and len(alias.split()) == 2))}
    return next(iter(matches)) if len(matches) == 1 else surface


def _has_predicate(text: str) -> bool:
    from services.pipeline.domain import nlp, reading
    from services.pipeline.domain.claims import _is_fragment

    return not _is_fragment(nlp.parse(reading.prepared(text)))


def attribute_anchor(attribute: str, known_aliases: frozenset[str]) -> str | None:
    """The entity an attribute belongs to: the longest known name inside it ("billing
    migration" in "billing migration launch"), else the attribute's own noun phrase."""
    folded = normalize_name(attribute)
    best = None
    for alias in known_aliases:
        if alias and alias != folded and re.search(rf"(?:^|\s){re.escape(alias)}(?:\s|$)", folded):
            if is_entity_name(alias) and (best is None or len(alias) > len(best)):
                best = alias
    if best is not None:
        return best
    surface = clean_surface(attribute)
    words = surface.split()
    if len(words) > 2 and words[-1].lower() in _ATTRIBUTE_HEADS and is_entity_name(" ".join(words[:-1])):
        return " ".join(words[:-1])  # "data warehouse migration deadline": the migration's deadline
    if is_entity_name(surface):
        return surface
    head = clean_surface(re.split(r"\s+(?:for|of|in|during)\s+", attribute, maxsplit=1)[0])
    return head if is_entity_name(head) else None  # "storage budget for Q4 2026": the storage budget


def _observation_anchor(text: str, known_aliases: frozenset[str], parsed: bool = False,
                        subject: str | None = None) -> str | None:
    """What an observation is about: the longest known alias in it, else its first name, else
    (``parsed``) the parse's ``subject`` of it ("the freeholder replied …"; a pronoun names
    nothing: "That's the whole job"), else its leading noun phrase (``parsed``: if it opens
    with a noun)."""
    folded = normalize_name(text)
    best = None
    for alias in known_aliases:
        if alias and re.search(rf"(?:^|\s){re.escape(alias)}(?:\s|$)", folded):
            if best is None or len(alias) > len(best):
                best = alias
    if best is not None:
        return best
    names = _names_in(text, parsed)
    if names:
        return names[0]
    if parsed:
        from services.pipeline.domain import reading

        if subject:
            held = clean_surface(subject)
            return held if is_entity_name(held) else None
        if not reading.opens_with_a_noun(text):
            return None
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

    def ended(self, at: dt.datetime | None, precision: str | None = None) -> Window:
        """This window closed at ``at``: with the precision of the end when it says one ("left at
        the end of April": month), else this window's, and a day for one that was open or
        unknown. The same whichever of the start and the end was read first."""
        if precision in (None, "open", "unknown"):
            precision = "day" if self.precision in ("open", "unknown") else self.precision
        return Window(self.valid_from, at, precision)

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


_PERIOD_END = re.compile(r"\b(?:at|by)\s+the\s+end\s+of\b|(?<!\w)end\s+of\s+(?!the\s+(?:day|week)\b)",
                         re.IGNORECASE)


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


def claim_window(claim: ClaimView, draft: AssertionDraft) -> Window:
    """The world window an assertion starts with: the claim's stated window; a succession's
    new state goes on from the event; a predecessor named in the same claim ("from
    Frankfurt to Dublin on 20 February") held until the event."""
    if draft.features.get("undated"):
        return UNKNOWN
    window = canonical_window(claim.valid_from, claim.valid_until, claim.valid_precision)
    if (draft.features.get("ends") or draft.features.get("until_claim")) and window.valid_until is not None \
            and window.precision in ("month", "quarter", "year") and _PERIOD_END.search(claim.claim_text):
        # "left the rota at the end of April": what ends, ends as the period closes
        window = Window(window.valid_until, _next(window.valid_until, window.precision), window.precision)
    until, since = draft.features.get("until"), draft.features.get("since")
    if isinstance(since, str):
        return Window(dt.datetime.fromisoformat(since), None, "open")  # a start another claim dated
    if draft.features.get("until_claim") and isinstance(until, str):
        return Window(None, dt.datetime.fromisoformat(until), "day")  # an end another claim dated
    if draft.features.get("until_claim"):
        if window.valid_from is None:
            return UNKNOWN
        return Window(None, window.valid_from, "day" if window.precision in ("open", "unknown") else window.precision)
    if draft.kind == "relation" or draft.features.get("state"):
        window = state_window(window, draft.change_kind)
    return window


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


def observation_label(subject: str, statement: str, features: dict[str, object]) -> str:
    """An observation's label: a canonical statement of the subject's current name when the
    parse gave one ("Wen Zhou finished export API"), an attribute value as it is ("Q3
    marketing budget: 90,000 EUR"), else the statement itself."""
    rest = features.get("label_rest")
    written = features.get("label_subject")
    subject = written if isinstance(written, str) and written else subject
    return f"{subject} {rest}" if isinstance(rest, str) and rest else statement


_CANONICAL_ATTRIBUTE = re.compile(r"^(?P<name>[^:]{1,200}):\s+\S")


def attribute_key(statement: str, subject_key: str) -> frozenset[str]:
    """What an observation is about, without its value: content words minus the subject,
    dates, numbers and value verbs ("cutover", "launch"). A canonical attribute statement
    ("Q3 marketing budget: 90,000 EUR") is about exactly its named attribute."""
    canonical = _CANONICAL_ATTRIBUTE.match(statement or "")
    if canonical and " " not in canonical.group("name").strip()[-1:]:
        return frozenset({"attribute=" + normalize_name(canonical.group("name"))})
    subject_words = set(subject_key.split())
    words = {w for w in re.findall(r"[a-z][a-z'-]+", fold(statement).lower())
             if w not in _VALUE_WORDS and w not in _DATE_WORDS and len(w) > 2}
    # When the subject itself is the attribute ("the cutover is on 8 June") keep its words.
    return frozenset(words - subject_words) or frozenset(words)
