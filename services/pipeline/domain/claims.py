"""Claims: what a source said. Types, the provider protocol, and the offline ``rules`` provider.

A claim is one standalone assertion from one document version, tied to the exact
characters that support it. Extraction has two steps per passage (chunk):

1. **Selection** judges every statement: keep, keep_flagged (hedged, or a date left as
   spoken), or drop with a reason from a fixed list (question, hypothetical, advice,
   generic, opinion, intro, conclusion, no_info, ambiguous, references_boilerplate).
2. **Claimify** makes each kept statement stand alone: splits independent conjuncts,
   resolves "I"/"we"/"he"/"she"/"it" where the document makes it unambiguous (else the
   statement is omitted with ``unresolved_reference``), expands a partial reference from
   the title ("the migration" -> "the billing migration"), writes relative dates as
   absolute ones, and prefixes a speaker's turn with "<Speaker> said that".

The rules provider is deterministic and offline (regular expressions and closed word
lists); every claim it emits passes :func:`services.pipeline.domain.grounding.ground`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any, Protocol

from services.pipeline.domain import timeparse
from services.pipeline.domain.entities import ABBREVIATED_TITLES, TITLE_PATTERN, role_before_title
from services.pipeline.domain.reading import GRADED_HEADS
from services.platform import structure

__all__ = [
    "CLAIMIFY_OMIT_REASONS",
    "DECISION_KINDS",
    "DECONTEXT_REASONS",
    "ENGINE_DROP_REASONS",
    "KEEP_FLAG_REASONS",
    "SELECTION_DROP_REASONS",
    "ClaimDraft",
    "ClaimProvider",
    "Decision",
    "EvidenceSpan",
    "ExtractionInput",
    "Passage",
    "RulesClaimProvider",
    "extract_claims",
]

DECISION_KINDS: tuple[str, ...] = (
    "selection_drop", "selection_keep_flagged", "decontext_edit", "claimify_omitted", "grounding_rejected",
)
SELECTION_DROP_REASONS: tuple[str, ...] = (
    "opinion", "advice", "hypothetical", "generic", "question", "intro", "conclusion", "no_info", "ambiguous",
    "references_boilerplate", "not_prose",
)
# drops the engine makes whichever provider read the passage (never asked of a model)
ENGINE_DROP_REASONS: tuple[str, ...] = ("duplicate",)
KEEP_FLAG_REASONS: tuple[str, ...] = ("hedged", "unresolved_date")
DECONTEXT_REASONS: tuple[str, ...] = (
    "pronoun_resolved", "reference_expanded", "date_resolved", "speaker_attributed", "subject_copied",
)
CLAIMIFY_OMIT_REASONS: tuple[str, ...] = ("unresolved_reference", "span_outside_chunk", "no_predicate")


# --------------------------------------------------------------------------- public types


@dataclass(frozen=True)
class Passage:
    """One chunk of the version's Markdown representation (half-open offsets into the document)."""

    chunk_id: str
    char_start: int
    char_end: int


@dataclass(frozen=True)
class ExtractionInput:
    document: str
    passage: Passage
    asserted_at: datetime | None
    title: str | None


@dataclass(frozen=True)
class EvidenceSpan:
    char_start: int
    char_end: int


@dataclass(frozen=True)
class ClaimDraft:
    claim_text: str
    source_span: str
    char_start: int
    char_end: int
    evidence_spans: tuple[EvidenceSpan, ...]
    is_attributed: bool
    attributed_to: str | None
    added_context: tuple[str, ...]
    temporal_class: str | None
    valid_from: datetime | None
    valid_until: datetime | None
    valid_precision: str
    valid_kind: str | None
    kept_flagged: bool


@dataclass(frozen=True)
class Decision:
    kind: str
    reason: str
    char_start: int
    char_end: int
    detail: str | None


class ClaimProvider(Protocol):
    name: str
    version: str

    async def extract(self, item: ExtractionInput) -> tuple[list[ClaimDraft], list[Decision]]: ...


class RulesClaimProvider:
    """Deterministic, offline claim extraction for plain English."""

    name: str = "rules"
    version: str = "rules/1"

    async def extract(self, item: ExtractionInput) -> tuple[list[ClaimDraft], list[Decision]]:
        return extract_claims(item)


class ParsedClaimProvider:
    """The default offline extractor: the rules selection and decontextualisation, with a
    turn's speaker carried in the attribution fields only (never "X said that X …" in the
    text), "since then" resolved to the date of the event just told, and every statement
    checked against its English parse: a fragment without a predicate ("My kids.") is no
    claim. What each claim asserts is read from the parse by the normaliser
    (:class:`services.pipeline.domain.facts.ParseRelationProvider`)."""

    name: str = "rules"
    version: str = "rules-parse/1"

    async def extract(self, item: ExtractionInput) -> tuple[list[ClaimDraft], list[Decision]]:
        return extract_parsed_claims(item)


_SINCE_THEN_RE = re.compile(r"\b(?:[Ss]ince then|[Ee]ver since(?=\s*(?:[,.;!?]|$))|[Ff]rom then on"
                            r"|[Ss]ince that (?:day|date|time))\b")  # ("ever since the merger …" says when)
# (and "Since 1 April the age has been 16; previously it was 18": a statement opening with
# "previously" or "formerly" held up to the change just told)
_UNTIL_THEN_RE = re.compile(r"\b(?:[Uu]ntil then|[Tt]ill then|[Bb]efore that|[Uu]p to then"
                            r"|[Uu]ntil that (?:day|date))\b|^(?:Previously|Formerly|Before then)(?=[\s,])")



def _is_fragment(doc: object) -> bool:
    """No predicate in the parse: no verb, and no noun-tagged word in a verb's place (the
    small pipeline tags "moves" in "the launch moves to October" as a plural noun, and
    "report" in "ski school staff report to Heike" as the compound's head)."""
    from services.pipeline.domain.reading import is_prepositional_verb

    tokens = list(doc)  # type: ignore[call-overload]
    if any(t.pos_ in ("VERB", "AUX") or t.tag_.startswith("VB") or t.tag_ == "MD" for t in tokens):
        return False
    if any(t.dep_ == "ROOT" and {"nsubj", "dobj"} <= {c.dep_ for c in t.children} for t in tokens):
        return False  # "that Ms Onyango chair the committee": a word with a subject and an object is a verb
    for index in range(1, len(tokens) - 1):
        word, before, after = tokens[index], tokens[index - 1], tokens[index + 1]
        if (word.lower_.endswith(("s", "ed")) and before.pos_ in ("NOUN", "PROPN", "NUM")
                and (after.pos_ in ("ADP", "DET", "NUM", "PART", "ADV") or after.ent_type_ in ("DATE", "TIME"))):
            return False
        if before.pos_ in ("NOUN", "PROPN") and is_prepositional_verb(word.lower_, after.lower_):
            return False
    return True


def extract_parsed_claims(item: ExtractionInput) -> tuple[list[ClaimDraft], list[Decision]]:
    from services.pipeline.domain import nlp, reading

    drafts, decisions = extract_claims(item, speaker_prefix=False, keep_unresolved_we=True, parsed=True)
    nlp.prefetch(reading.prepared(d.claim_text) for d in drafts)
    kept: list[ClaimDraft] = []
    last_event: ClaimDraft | None = None
    for draft in drafts:
        if _is_fragment(nlp.parse(reading.prepared(draft.claim_text))) and not reading.is_key_value(
                draft.claim_text):
            decisions.append(Decision("claimify_omitted", "no_predicate", draft.char_start, draft.char_end,
                                      draft.claim_text[:200]))
            continue
        same = timeparse.SAME_DAY_RE.search(draft.claim_text)
        if same is not None and draft.valid_precision == "unknown" and last_event is not None \
                and last_event.valid_from is not None and last_event.valid_precision == "day":
            # "he joined the risk team on the same day": the day of the event just told
            day = last_event.valid_from.date()
            text = draft.claim_text[:same.start()] + f"on {timeparse.render_day(day)}" + draft.claim_text[same.end():]
            decisions.append(Decision("decontext_edit", "date_resolved", draft.char_start, draft.char_end,
                                      f"{same.group()} -> {timeparse.render_day(day)} (the event just told)"))
            draft = ClaimDraft(text, draft.source_span, draft.char_start, draft.char_end,
                               (*draft.evidence_spans, EvidenceSpan(last_event.char_start, last_event.char_end)),
                               draft.is_attributed, draft.attributed_to, _added_words(text, draft.source_span),
                               "dynamic", last_event.valid_from, last_event.valid_until, "day", last_event.valid_kind,
                               draft.kept_flagged)
        since = _SINCE_THEN_RE.search(draft.claim_text)
        until = _UNTIL_THEN_RE.search(draft.claim_text) if since is None else None
        if until is not None and draft.valid_precision == "unknown" and last_event is not None \
                and last_event.valid_from is not None:
            # "Until then the team was led by Sara": it held up to the event just told (exclusive)
            day = last_event.valid_from.date()
            word = "Until" if until.group()[0].isupper() else "until"
            text = draft.claim_text[:until.start()] + f"{word} {timeparse.render_day(day)}" + \
                draft.claim_text[until.end():]
            decisions.append(Decision("decontext_edit", "date_resolved", draft.char_start, draft.char_end,
                                      f"{until.group()} -> {timeparse.render_day(day)} (the event just told)"))
            draft = ClaimDraft(text, draft.source_span, draft.char_start, draft.char_end,
                               (*draft.evidence_spans, EvidenceSpan(last_event.char_start, last_event.char_end)),
                               draft.is_attributed, draft.attributed_to, _added_words(text, draft.source_span),
                               "dynamic", None, last_event.valid_from - timedelta(days=1), "day", "effective_period",
                               draft.kept_flagged)
            kept.append(draft)
            continue
        if since is not None and draft.valid_precision == "unknown":
            if last_event is not None and last_event.valid_from is not None:
                day = last_event.valid_from.date()
                word = "Since" if since.group()[0].isupper() else "since"
                text = draft.claim_text[:since.start()] + f"{word} {timeparse.render_day(day)}" + \
                    draft.claim_text[since.end():]
                spans = (*draft.evidence_spans, EvidenceSpan(last_event.char_start, last_event.char_end))
                decisions.append(Decision("decontext_edit", "date_resolved", draft.char_start, draft.char_end,
                                          f"{since.group()} -> {timeparse.render_day(day)} (the event just told)"))
                draft = ClaimDraft(text, draft.source_span, draft.char_start, draft.char_end, spans,
                                   draft.is_attributed, draft.attributed_to, _added_words(text, draft.source_span),
                                   "dynamic", last_event.valid_from, None, "open", "effective_period",
                                   draft.kept_flagged)
            else:
                decisions.append(Decision("selection_keep_flagged", "unresolved_date", draft.char_start,
                                          draft.char_end, since.group()))
                draft = ClaimDraft(draft.claim_text, draft.source_span, draft.char_start, draft.char_end,
                                   draft.evidence_spans, draft.is_attributed, draft.attributed_to,
                                   draft.added_context, draft.temporal_class, None, None, "unknown", None, True)
        if draft.valid_from is not None and draft.valid_precision in ("day", "month", "instant", "open"):
            last_event = draft
        kept.append(draft)
    return kept, decisions


# --------------------------------------------------------------------------- word lists

_FUNCTION_WORDS = frozenset("""
a an the of in on at by for from to with into onto over under about as than and or but nor so yet because
that which who whom whose what when where why how this these those there here then also just very too not no
is are was were be been being am has have had do does did will would can could shall should may might must
it its he she they we i you me us him her them my our your his their
""".split())
_AUX = frozenset("""
is are was were be been am has have had do does did will would can could shall should may might must
won't can't cannot didn't doesn't don't isn't wasn't aren't weren't hasn't haven't hadn't wouldn't couldn't
shouldn't
""".split())
_MODALS = frozenset("will would can could shall should may might must won't can't cannot wouldn't couldn't".split())
_IRREGULAR_PAST = frozenset("""
said told left made took met wrote began came got ran sent found gave built brought bought paid lost won went saw
knew thought felt kept led held put set cut read spent sold taught understood drove chose broke spoke forgot stood
became fell grew drew flew hid rode rose shook threw woke wore did had was were
""".split())
_SINGULAR_NEGATED_AUX = frozenset("doesn't isn't wasn't hasn't doesn’t isn’t wasn’t hasn’t".split())
_PLURAL_AUX = frozenset("are were have do don't aren't weren't haven't don’t aren’t weren’t haven’t".split())
_ADVERBS = frozenset("""
also really just still already never always usually currently now only actually definitely probably often sometimes
personally strongly mostly then later finally
""".split())
_CAPITALISED_STOP = frozenset("""
I The A An This That These Those It Its We He She They You Our My His Her Their Your If When While But And Or So
Yes No OK Okay Also Then Today Tomorrow Yesterday According Where What Who Why How Which There Here Let Please Thanks
Thank Hi Hello Well Right Sure After Before Since During Until In On At For From To With By As Of Participants
Attendees Agenda Notes Summary Every Each All Some Most Many Few Everyone Everybody Everything Nobody Nothing Someone
Somebody Something Anyone People Once Because Although Though However Meanwhile Overall Last Next Early Late Mid
Q1 Q2 Q3 Q4 Note Update Status Decision Action
""".split())
_MONTH_WORDS = frozenset(timeparse.MONTH_NAMES)
_WEEKDAY_WORDS = frozenset(timeparse.WEEKDAY_NAMES)
_DECAP_WORDS = frozenset("""
the a an it its this that these those there here our my your their his her we they some all each every no one
according
""".split())

_META_BOILERPLATE_KEYS = frozenset("""
participants attendees present date time location duration tags author authors facilitator chair cc to from subject
title url link source venue where when recorded timezone scribe notetaker
""".split()) | {"time zone", "note taker"}
_PARTICIPANT_KEYS = frozenset({"participants", "attendees", "present"})
# a field whose key names a role: "Owner: Sam Ortiz" (the value holds that role of the section's thing)
_FIELD_ROLES = {"owner": "owner", "owners": "owner", "lead": "lead", "leads": "lead", "tech lead": "lead",
                "manager": "manager", "maintainer": "maintainer", "maintainers": "maintainer", "sponsor": "sponsor",
                "chair": "chair", "head": "head", "led by": "lead", "owned by": "owner", "managed by": "manager",
                "maintained by": "maintainer", "run by": "lead", "steward": "owner",
                "members": "member", "member": "member", "assignee": "assignee", "assigned to": "assignee",
                "account owner": "owner", "account manager": "owner", "account lead": "owner",
                "account executive": "owner"}
# a field of a customer's record that is about its account ("Acct owner: Priya"): the account's
_ACCOUNT_FIELDS = frozenset(key for key in _FIELD_ROLES if key.startswith("account "))
_PLACE_KEYS = frozenset({"region", "location", "hosted in", "host region", "data centre", "data center", "site",
                         "office", "based in", "located in"})
# a field whose key names the team a person is in ("Dept: Finance Ops" on a person's record)
_MEMBERSHIP_KEYS = frozenset({"department", "team", "squad", "unit", "group", "division", "function"})
# abbreviations notes write for common words ("the Vestby Hotels acct", "IT mgr at Kestrel"):
# spelled out in claims (lower case only: "Acct" may start a name) and in field keys
_WORD_ABBREVIATIONS = {"acct": "account", "mgr": "manager", "dept": "department", "mgmt": "management"}
# and those only field keys are written with ("Acct owner", "Loc", "Account exec")
_KEY_ABBREVIATIONS = {**_WORD_ABBREVIATIONS, "loc": "location", "org": "organisation", "exec": "executive"}
_SHORTHAND = {**_WORD_ABBREVIATIONS, **{f"{k}s": f"{v}s" for k, v in _WORD_ABBREVIATIONS.items() if k != "mgmt"},
              "w/": "with", "w/o": "without", "thru": "through"}  # not units a value keeps ("3 yr", "5 hrs")
_SHORTHAND_RE = re.compile(rf"(?<![\w/])(?:{'|'.join(sorted(map(re.escape, _SHORTHAND), key=len, reverse=True))})"
                           r"(?![\w/])")


def _field_key(key: str) -> str:
    """A field's key, lower-cased with its abbreviations spelled out ("Acct owner" → "account owner")."""
    return " ".join(_KEY_ABBREVIATIONS.get(w.rstrip("."), w) for w in key.lower().split())
# section headings that name no thing a field could be about
_GENERIC_HEADINGS = frozenset("""notes note summary status update updates agenda actions decisions overview background
details owners ownership contacts people links references questions risks timeline history faq misc other
minutes sync meeting standup stand-up retro retrospective review weekly daily chat dm call report changes
next steps context team teams""".split())
_DATE_KEYS = frozenset({"date", "when"})
# a field line's key that names a value of the section's thing ("Severity: high"), not a speaker
_VALUE_KEYS = frozenset("""status severity priority impact tier stage phase plan version environment eta deadline
budget renewal""".split()) | {"renewal date", "due date", "target date", "go-live", "start date", "end date"}
_LABEL_KEYS = frozenset("""
summary decision decisions note notes update updates status action actions outcome outcomes result results context
background
""".split()) | {"action items", "next steps"}

_ABBREVIATIONS = frozenset("""
e.g. i.e. etc. vs. v. dr. mr. mrs. ms. prof. sr. jr. st. inc. ltd. co. corp. approx. no. nos. fig. cf. al. a.m. p.m.
u.s. u.k. jan. feb. mar. apr. jun. jul. aug. sep. sept. oct. nov. dec. mt. ave. dept. est. min. max. ca. incl. resp.
""".split()) | {f"{title}." for title in ABBREVIATED_TITLES}

# --------------------------------------------------------------------------- regular expressions

# Letters of the Latin scripts (ASCII, Latin-1 and Latin Extended-A/B), by case: names such
# as "Graça", "Łukasz", "Dvořák" or "Şahin" are one word, not cut at their first accent.
_UPPER = "A-Z" + "".join(c for c in map(chr, range(0xC0, 0x250)) if c.isupper())
_LOWER = "a-z" + "".join(c for c in map(chr, range(0xC0, 0x250)) if c.islower())
_TOKEN_RE = re.compile(rf"[{_UPPER}{_LOWER}0-9]+(?:['’][{_UPPER}{_LOWER}]+)*")
# ("Jean-Luc", "O'Brien", and given names whose second part is lower-case: "Sun-hee", "Min-jun")
_NAME_WORD = rf"[{_UPPER}][{_LOWER}]+(?:[-'’][{_UPPER}][{_LOWER}]+|-[{_LOWER}]{{2,}})*"
_NAME = rf"{_NAME_WORD}(?:\s+(?:[{_UPPER}]\.(?!\w)|{_NAME_WORD}))*"
_NAME_RE = re.compile(rf"(?<![\w'’]){_NAME}")
_BOLD_SPEAKER_RE = re.compile(rf"^\*\*(?P<speaker>[{_UPPER}][^*:\n]{{0,60}}?)(?::\*\*|\*\*:)\s+")
_PLAIN_LABEL_RE = re.compile(rf"^(?P<speaker>[{_UPPER}][{_UPPER}{_LOWER}'’-]*"
                             rf"(?:\s+(?:[{_UPPER}{_LOWER}][{_UPPER}{_LOWER}'’-]*|[{_UPPER}]\.)){{0,3}}):\s+(?=\S)")
_RULE_RE = re.compile(r"^\s*(?:[-*_]\s*){3,}$")
_INTERJECTION_RE = re.compile(
    r"^(?:yes|yeah|yep|no|nope|ok|okay|sure|right|well|so|also|and|but|alright|great|thanks|guess what|oh|wow"
    r"|btw|by the way|fyi|fwiw|heads up|heads-up|psa|good news|quick update|update|sorry|apologies|oops"
    r"|not anymore|nah|not really)\s*[,!:]\s+(?=\S)"
    # "Update from Haruto Sato (Infrastructure): the portal was migrated …": who the news is from
    r"|^(?:(?:quick\s+|status\s+)?update|news|note|heads[- ]up)\s+(?:from|by)\s+[^:.!?]{1,60}:\s+(?=\S)",
    re.IGNORECASE,
)
# the writer's frame around what they announce ("I'm delighted to share that …", "Please note that
# …"): the statement is what follows; the frame's "I" is no part of it
# an outline number or an item label before a minuted statement ("3.1 ", "Resolution 2026/14. ")
_OUTLINE_RE = re.compile(r"^(?:\d+(?:\.\d+)+\.?|\(?[a-z]\)|(?:item|resolution|minute|motion)\s+[\w/.-]*\w[.:])"
                         r"\s+(?=\S)", re.IGNORECASE)
# the record's own frame around what a body decided or noted ("RESOLVED: that …", "It was
# noted that …", "The Board agreed that …"): what follows is the statement
_MINUTES_FRAME_RE = re.compile(
    # "RESOLVED: that …", "RESOLVED (2026/M/09): that …", "C/26/42 RESOLVED that …"
    r"^(?:(?:(?:[A-Z]{1,4}/)?\d{1,4}(?:[/.]\d{1,4})*\s+)?(?:RESOLVED|AGREED|NOTED|DECIDED)"
    r"(?:\s*\([^()]{1,40}\))?(?:\s*:\s*(?:that\s+)?|\s+that\s+)"
    r"|it\s+was\s+(?:noted|resolved|agreed|decided|confirmed|reported)\s+that\s+"
    r"|the\s+(?:board|committee|council|trustees|meeting|panel|group)\s+(?:noted|agreed|resolved|confirmed|decided)"
    r"\s+that\s+)(?=\S)", re.IGNORECASE)
_AUTHOR_FRAME_RE = re.compile(
    r"^(?:(?:I|we)(?:['’]m|['’]re|\s+am|\s+are)\s+(?:(?:very|so|really|truly)\s+)?"
    r"(?:delighted|pleased|happy|glad|excited|thrilled|proud|sad|sorry)\s+to\s+"
    r"|(?:I|we)\s+(?:can|wanted to|want to|would like to|['’]d like to)\s+|just\s+to\s+"
    r"|(?:just\s+)?a\s+(?:quick\s+)?note\s+to\s+)"
    r"(?:share|announce|report|confirm|say|inform you|let (?:you|everyone|you all|the team|all of you) know)"
    r"(?:\s+that)?\s*[,:]?\s+(?=\S)|^please\s+(?:note|be aware)(?:\s+that)?\s*[,:]?\s+(?=\S)",
    re.IGNORECASE,
)
# "Correction to my last mail: …": the words before the colon frame the correction (their "my"
# is the writer's and needs no resolving; the reading keeps the correction)
_CORRECTION_FRAME_RE = re.compile(r"^\s*(?:a\s+)?(?:correction|erratum)\s+(?:to|on|from|for)\s+[^:]{1,60}:\s+",
                                  re.IGNORECASE)

# chat fillers that need no comma ("btw Wen joined", "ok. fyi the build is green")
_CHAT_FILLER_RE = re.compile(r"^(?:btw|fyi|fwiw|ok|okay|oh|lol|heads up|also|(?:big|good|great|some) news)"
                             r"\s*[.,!:]?"
                             r"\s+(?=\S)", re.IGNORECASE)
_QUESTION_END_RE = re.compile(r"\?[\"'’”)*_\]]*\s*$")
_BOILERPLATE_RE = re.compile(
    r"^\s*(?:copyright\b|©|all rights reserved|see also\b|references\s*$|further reading|https?://\S+\s*$)",
    re.IGNORECASE,
)
_INTRO_RE = re.compile(
    r"^\s*(?:(?:this|the following)\s+(?:section|document|page|chapter|note|post|article|guide|doc|memo)\b"
    r"(?:\s+\w+)?\s+(?:covers|describes|explains|summari[sz]es|outlines|lists|introduces|presents|contains|is about)"
    r"\b|in this (?:section|document|page|chapter|note|post|article|guide|memo)\b|(?:below|here),? (?:we|you)\b)",
    re.IGNORECASE,
)
_CONCLUSION_RE = re.compile(
    r"^\s*(?:in summary|in conclusion|to sum up|to summari[sz]e|in short|that's all|that is all|thanks|thank you"
    r"|cheers|see you|talk soon)\b",
    re.IGNORECASE,
)
_NO_INFO_RE = re.compile(
    r"\b(?:(?:don't|do not|doesn't|does not|didn't|did not|don’t|doesn’t)\s+know|not sure|no idea|unclear|unknown"
    r"|tbd|to be (?:determined|decided|confirmed)|not (?:yet )?(?:known|decided)|nobody knows|remains to be seen)\b",
    re.IGNORECASE,
)
_LEADING_CONDITIONAL_RE = re.compile(
    r"^\s*(?:if|unless|suppose|supposing|assuming|imagine|in case|hypothetically|what if|were we|had we|should we)\b",
    re.IGNORECASE,
)
_HYPOTHETICAL_RE = re.compile(r"\b(?:would|wouldn't|wouldn’t|might|mightn't|could(?!\s+not|n't|n’t)|if)\b"
                              r"|(?<![A-Z])\bmay\b|['’]d\b")
_ADVICE_RE = re.compile(
    r"\b(?:should|shouldn't|shouldn’t|ought to|had better|make sure|be sure to|remember to|don't forget|do not forget"
    r"|we recommend|i recommend|is recommended|recommended to|it's best to|it is best to|you need to|you must"
    r"|you have to|you'll want to)\b|^\s*(?:let's|let’s|let us)\b",
    re.IGNORECASE,
)
_IMPERATIVE_STARTS = frozenset("""
use make check try avoid ensure remember keep add set send call ask take read write install run consider don't
do please stop start go get put see follow open click review update create delete remove contact email book
schedule prepare verify test always never configure enable disable restart back avoid
""".split())
_HEDGE_RE = re.compile(
    r"\b(?:probably|likely|unlikely|maybe|perhaps|possibly|apparently|presumably|roughly|approximately"
    r"|seems to|appears to|supposedly|allegedly|tentatively)\b",
    re.IGNORECASE,
)
_OPINION_ADJECTIVES = (
    "great|good|bad|terrible|awful|awesome|amazing|excellent|wonderful|fantastic|brilliant|horrible|nice|lovely|ugly"
    "|beautiful|elegant|clean|cleaner|cleanest|messy|better|best|worse|worst|risky|dangerous|useful|useless|pointless"
    "|important|unimportant|overrated|underrated|interesting|boring|exciting|confusing|easy|easier|hard|harder"
    "|difficult|simple|simpler|complicated|annoying|frustrating|impressive|disappointing|promising|ridiculous|stupid"
    "|smart|clever|perfect|tight|wrong|silly|weird|strange|cool|fun|painful|crazy|solid|sensible|reasonable"
)
_OPINION_RE = re.compile(
    r"\b(?:is|are|was|were|looks|look|seems|seem|sounds|sound|feels|feel|remains|remain|became|becomes|'s|’s)\s+"
    r"(?:(?:very|really|so|too|quite|pretty|extremely|super|rather|fairly|incredibly|totally|absolutely|definitely"
    r"|a bit|a little|kind of|sort of|much|way|more|less|the|a|an|most|least)\s+)*"
    rf"(?:{_OPINION_ADJECTIVES})\b"
    r"|\b(?:i|we)\s+(?:love|like|hate|prefer|enjoy|dislike)\b",
    re.IGNORECASE,
)
_AGREEMENT_ONLY_RE = re.compile(
    rf"^\s*(?:{_NAME}\s+|I\s+|we\s+|We\s+|he\s+|He\s+|she\s+|She\s+)?(?:also\s+)?"
    r"(?:agreed|agrees|agree|concurred|nodded|acknowledged|disagreed|objected)\s*[.!]?\s*$"
)
# verbs of a quantity that moved on its own ("latency rose from 180 ms to 240 ms in October");
# "increased" and "decreased" may also be someone's change of a state, so they only mark a measurement
_MEASURED_VERBS = r"fell|rose|grew|dropped|declined|climbed|totall?ed|reached|averaged|hit"
_MEASUREMENT_RE = re.compile(
    rf"\b(?:{_MEASURED_VERBS}|increased|decreased|count|total"
    r"|revenue|sales|errors?|rate|percent|per cent|costs?|spend|spent)\b|[%$€£]",
    re.IGNORECASE,
)
_FROM_TO_RE = re.compile(r"\bfrom\s+\S.*\bto\s+\S", re.IGNORECASE)
_MEASURED_CHANGE_RE = re.compile(rf"\b(?:{_MEASURED_VERBS})\b", re.IGNORECASE)
_ATEMPORAL_RE = re.compile(r"\b(?:is defined as|means|stands for|consists of|is a type of|is a kind of)\b")
_PAST_RE = re.compile(r"\b(?:\w{3,}ed|" + "|".join(sorted(_IRREGULAR_PAST)) + r")\b", re.IGNORECASE)

_SPEECH_VERBS = (
    "said|says|stated|states|reported|reports|announced|announces|confirmed|confirms|mentioned|mentions|noted|notes"
    "|explained|explains|claimed|claims|added|adds|argued|argues|warned|warns|promised|promises|insisted|insists"
    "|replied|replies|wrote|writes|suggested|suggests|thinks|think|thought|believes|believe|believed|feels|feel|felt"
    "|expects|expect|expected|hopes|hope|hoped|worries|worry|worried|suspects|suspect|suspected|doubts|doubt|doubted"
    "|fears|fear|feared|guesses|guess|guessed|reckons|reckon|reckoned|estimates|estimated|predicts|predicted"
    "|knows|know|knew|understands|understood"
)
_ATTR_SUBJECT = rf"(?P<subj>{_NAME}|I|We|we|He|he|She|she|They|they)"
_ATTR_ADVERB = r"(?:(?:also|later|then|still|strongly|previously|already|initially|firmly|clearly|now|really)\s+)?"
_ATTR_SAY_RE = re.compile(
    rf"^{_ATTR_SUBJECT}\s+{_ATTR_ADVERB}(?P<verb>{_SPEECH_VERBS})\b,?\s+(?:that\s+)?(?P<content>\S.*)$", re.S,
)
_ATTR_AGREE_RE = re.compile(
    rf"^{_ATTR_SUBJECT}\s+{_ATTR_ADVERB}(?P<verb>agreed|agrees|agree)\s+that\s+(?P<content>\S.*)$", re.S,
)
_ATTR_TELL_RE = re.compile(
    rf"^{_ATTR_SUBJECT}\s+{_ATTR_ADVERB}(?P<verb>told|tells|tell|informed|informs|assured|assures|reminded|reminds)"
    rf"\s+(?:me|us|him|her|them|everyone|the team|{_NAME}|[a-z]+)\s+(?:that\s+)?(?P<content>\S.*)$",
    re.S,
)
_ATTR_ACCORDING_RE = re.compile(rf"^[Aa]ccording to (?P<subj>{_NAME}),\s+(?P<content>\S.*)$", re.S)
_ATTR_TRAILING_RE = re.compile(
    rf"^(?P<content>.+?),\s+(?:(?P<subj>{_NAME}|he|she)\s+(?P<verb>said|says|added|explained|noted|confirmed|wrote"
    rf"|reported|argued|claimed)|(?P<verb2>said|says|added|explained|noted|confirmed|wrote|reported)\s+"
    rf"(?P<subj2>{_NAME}))\s*[.!]?\s*$",
    re.S,
)
_BAD_CONTENT_START = frozenset("and or but to so about of for with in on at by as it's".split())

_SEPARATOR_RE = re.compile(r"\s*;\s+|,?\s+(?:and|but)\s+")
_COMMA_SEPARATOR_RE = re.compile(r"\s*;\s+|,?\s+(?:and|but)\s+|,\s+")
_CONTRACTED_SUBJECT_RE = re.compile(r"^(?:I|[Ww]e|[Hh]e|[Ss]he|[Tt]hey|[Ii]t)['’](?:m|re|s|ve|ll)\s+\w")
_LEADING_PRONOUN_RE = re.compile(r"^(I|We|we|He|he|She|she|They|they|It|it)(?![\w'’])")
_LEADING_NP_RE = re.compile(
    r"^(?:The|the|This|this|That|that|Our|our|My|my|His|his|Her|her|Their|their|Its|its)\s+"
    r"(?:[a-z][\w-]*\s+){0,2}?[a-z][\w-]*(?=\s+(\S+))"
)
_DEFINITE_NP_RE = re.compile(
    r"(?<![\w])[Tt]he\s+((?:[a-z][a-z-]*\s+){0,2}[a-z][a-z-]*)"
    r"(?=\s*(?:[?.!,;:)]|$)|\s+(?:is|was|are|were|has|had|have|needs|need|will|would|can|could|should|in|on|at|for"
    r"|to|from|with|by|of|and|or|but|because|that|which|since|until|after|before|during|as|into|over)\b)"
)
# The parse-backed provider's antecedents also take capitalised modifiers ("the Atlas service")
# and a verb-like next word ("the notification service sends …").
_DEFINITE_NAMED_NP_RE = re.compile(
    r"(?<![\w])[Tt]he\s+((?:[A-Za-z][\w-]*\s+){0,2}[a-z][a-z-]*)"
    r"(?=\s*(?:[?.!,;:)]|$)|\s+(?:is|was|are|were|has|had|have|needs|need|will|would|can|could|should|in|on|at|for"
    r"|to|from|with|by|of|and|or|but|because|that|which|since|until|after|before|during|as|into|over)\b"
    r"|\s+[a-z]+(?:s|ed)\b)"
)
_TITLE_REFERENCE_RE = re.compile(r"(?<![\w])([Tt]he)\s+([a-z][a-z-]+)(?![\w-])")
_PRONOUN_RE = re.compile(
    r"(?<![\w'’])([Ii]['’](?:m|ve|ll|d)|[Ii](?:m|ve)(?=\s)|I|i(?=\s)|[Mm]e|[Mm]y|[Mm]ine|[Mm]yself|[Ww]e['’](?:re|ve|ll|d)|[Ww]e|[Uu]s|[Oo]ur"
    r"|[Oo]urs|[Oo]urselves|[Hh]e['’](?:s|ll|d)|[Hh]e|[Hh]im|[Hh]is|[Hh]imself|[Ss]he['’](?:s|ll|d)|[Ss]he|[Hh]er"
    r"|[Hh]ers|[Hh]erself|[Ii]t['’]s|[Ii]t|[Ii]ts|[Ii]tself|[Tt]hey['’](?:re|ve|ll|d)|[Tt]hey|[Tt]hem|[Tt]heir"
    r"|[Tt]heirs|[Tt]hemselves|[Yy]ou['’](?:re|ve|ll|d)|[Yy]ou|[Yy]our|[Yy]ours|[Yy]ourself)(?![\w'’])"
)
_DEMONSTRATIVE_SUBJECT_RE = re.compile(
    r"^(?:This|That|These|Those)\s+(?:is|was|are|were|will|has|had|needs|means|should|would|can|could|must)\b"
)
_EXPLETIVE_IT_RE = re.compile(
    r"^\s+(?:is|was|'s|’s|has been|seems|seemed|appears|appeared|looks|remains|became)\s+(?:\w+\s+){0,2}?"
    r"(?:that|to|likely|unlikely|clear|unclear|possible|impossible|important|necessary|hard|easy|time|true|false"
    r"|raining|worth)\b"
)
_MARKDOWN_LINK_RE = re.compile(r"\[([^\]\n]+)\]\([^)\n]*\)")
_MARKDOWN_EMPHASIS_RE = re.compile(r"(\*\*|__|\*|`)")
_QUOTE_CONTINUATION_RE = re.compile(r"\n\s*>\s?")


# --------------------------------------------------------------------------- document model


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    kind: str  # paragraph | turn | speaker | list | quote
    speaker: str | None = None
    speaker_span: tuple[int, int] | None = None
    turn_anchor: date | None = None
    turn_anchor_span: tuple[int, int] | None = None


@dataclass(frozen=True)
class _Sentence:
    start: int
    end: int
    unit: _Unit
    index: int


@dataclass(frozen=True)
class _Model:
    text: str
    sentences: tuple[_Sentence, ...]
    anchors: tuple[tuple[int, date, tuple[int, int]], ...]  # (position, day, span) from dated headings / Date: lines
    meta_spans: tuple[tuple[int, int], ...]
    participants: tuple[str, ...]
    participants_span: tuple[int, int] | None
    first_heading: tuple[str, tuple[int, int]] | None
    known_names: frozenset[str]
    noninitial_caps: frozenset[str]
    not_prose: tuple[tuple[int, int, str], ...] = ()  # code blocks, table header rows: read by no rule
    headings: tuple[tuple[int, str, tuple[int, int]], ...] = ()  # (position, text, span) of every heading
    # a table's data cell: its start -> (its column's header, the row's first cell, that cell's span)
    table_cells: dict[int, tuple[str, str, tuple[int, int]]] = field(default_factory=dict)
    addressee: tuple[str, tuple[int, int]] | None = None  # the one person a letter greets: its "you"


@dataclass
class _UnitBuilder:
    start: int
    end: int
    kind: str
    speaker: str | None = None
    speaker_span: tuple[int, int] | None = None
    turn_anchor: date | None = None
    turn_anchor_span: tuple[int, int] | None = None

    def freeze(self) -> _Unit:
        return _Unit(self.start, self.end, self.kind, self.speaker, self.speaker_span, self.turn_anchor,
                     self.turn_anchor_span)


def _split_names(value: str) -> tuple[str, ...]:
    names = []
    for piece in re.split(r"\s*(?:,|;|\band\b|&)\s*", value):
        piece = piece.strip().strip(".")
        if piece and re.fullmatch(_NAME, piece):
            names.append(piece)
    return tuple(names)


@lru_cache(maxsize=16)
def _parse_document(document: str) -> _Model:
    units: list[_Unit] = []
    anchors: list[tuple[int, date, tuple[int, int]]] = []
    meta_spans: list[tuple[int, int]] = []
    participants: tuple[str, ...] = ()
    participants_span: tuple[int, int] | None = None
    first_heading: tuple[str, tuple[int, int]] | None = None
    speakers: set[str] = set()
    current: _UnitBuilder | None = None
    not_prose: list[tuple[int, int, str]] = []
    headings: list[tuple[int, str, tuple[int, int]]] = []
    table_cells: dict[int, tuple[str, str, tuple[int, int]]] = {}
    header: list[str] = []
    previous_kind_was_row = False

    def close() -> None:
        nonlocal current
        if current is not None and current.end > current.start:
            units.append(current.freeze())
        current = None

    # One structure parse: the blocks the chunker cuts are the units claims are read from, so
    # headings, list items, turn headers and turn times mean the same to chunks and claims.
    for block in structure.parse_blocks(document):
        close()
        kind = block.kind
        if kind == "table_row" and previous_kind_was_row and header:
            # a data row under a header: each cell after the first is a field of the row's first
            # cell ("| Ledger API | Payments core team |" under "| Service | Owner |")
            cells = _table_cells(block)
            if len(cells) == len(header) and cells[0][2]:
                for (start, end, _), column in zip(cells[1:], header[1:], strict=True):
                    if end > start and column:
                        table_cells[start] = (column, cells[0][2], (cells[0][0], cells[0][1]))
                        units.append(_Unit(start, end, "table_cell"))
                previous_kind_was_row = True
                continue
        if kind == "table_row":
            header = [cell[2] for cell in _table_cells(block)] if not previous_kind_was_row else header
        previous_kind_was_row = kind == "table_row"
        if block.kind in ("code", "table_row"):
            not_prose.append((block.char_start, block.char_end, block.kind))
            continue
        if block.kind == "heading":
            span = structure.heading_span(block)
            title = document[span[0]:span[1]]
            if first_heading is None and title:
                first_heading = (title, span)
            headings.append((block.char_start, title, span))
            day = timeparse.find_anchor_date(title)
            if day is not None:
                anchors.append((block.char_start, day, span))
            continue
        if block.kind == "speaker_turn":
            assert block.speaker is not None
            speaker_span, time_span, text_start = structure.turn_spans(block)
            speakers.add(block.speaker)
            turn_day = block.turn_time.astimezone(UTC).date() if block.turn_time is not None else None
            current = _UnitBuilder(text_start, block.char_end, "turn", block.speaker, speaker_span, turn_day,
                                   time_span if turn_day is not None else None)
            continue
        if block.kind in ("list_item", "quote"):
            current = _UnitBuilder(structure.content_start(block), block.char_end,
                                   "list" if block.kind == "list_item" else "quote")
            continue
        # a paragraph: its lines may be meta lines ("Attendees: …", "Date: …"), labels
        # ("Summary: …") or speaker labels ("Dana: …", "**Dana:** …"), each starting a unit
        position = block.char_start
        fields = _field_block(block.text, participants)
        for raw in block.text.splitlines(keepends=True):
            line_start = position
            position += len(raw)
            line = raw.rstrip("\r\n")
            stripped = line.strip()
            indent = len(line) - len(line.lstrip())
            content_end = line_start + len(line.rstrip())
            if stripped.startswith(("<!--", "<")) or _RULE_RE.match(line):
                close()
                continue
            label = _BOLD_SPEAKER_RE.match(line.lstrip()) or _PLAIN_LABEL_RE.match(line.lstrip())
            if label:
                key = label.group("speaker").strip()
                lowered = key.lower()
                value_start = line_start + indent + label.end()
                if lowered in _META_BOILERPLATE_KEYS:
                    close()
                    meta_spans.append((line_start + indent, content_end))
                    value = document[value_start:content_end]
                    if lowered in _PARTICIPANT_KEYS and not participants:
                        participants = _split_names(value)
                        participants_span = (value_start, content_end)
                    if lowered in _DATE_KEYS:
                        day = timeparse.find_anchor_date(value)
                        if day is not None:
                            anchors.append((line_start, day, (value_start, content_end)))
                    continue
                short = len(document[value_start:content_end].split()) <= 3
                field = _field_key(key)
                if field in _FIELD_ROLES or _is_field_key(field) and short or (
                        _SUBJECTLESS_RE.match(document[value_start:content_end])) or (
                        fields and lowered not in _LABEL_KEYS
                        and len(document[value_start:content_end].split()) <= _FIELD_VALUE_WORDS):
                    # "Owner: Sam Ortiz", "Status: blocked" are fields, not Owner speaking or a label
                    close()
                    current = _UnitBuilder(line_start + indent, content_end, "list")
                    close()
                    continue
                if lowered in _LABEL_KEYS:
                    close()
                    current = _UnitBuilder(value_start, content_end, "paragraph")
                    continue
                if re.fullmatch(_NAME, key) and not any(ch.isdigit() for ch in key):
                    close()
                    speakers.add(key)
                    current = _UnitBuilder(value_start, content_end, "speaker", key,
                                           (line_start + indent + label.start("speaker"),
                                            line_start + indent + label.end("speaker")))
                    continue
            if current is not None:
                current.end = content_end
            else:
                current = _UnitBuilder(line_start + indent, content_end, "paragraph")
    close()

    sentences: list[_Sentence] = []
    for unit in units:
        for start, end in _split_sentences(document, unit.start, unit.end):
            sentences.append(_Sentence(start, end, unit, len(sentences)))

    noninitial: set[str] = set()
    for sentence in sentences:
        for match in _NAME_RE.finditer(document, sentence.start, sentence.end):
            if match.start() > sentence.start:
                for word in match.group().split():
                    noninitial.add(_strip_possessive(word))
    known = set(speakers) | set(participants)
    for sentence in sentences:
        for pattern in (_ATTR_SAY_RE, _ATTR_TELL_RE, _ATTR_ACCORDING_RE):
            found = pattern.match(document[sentence.start:sentence.end])
            if found and found.group("subj") and found.group("subj")[0].isupper():
                subject = found.group("subj")
                if subject.split()[0] not in _CAPITALISED_STOP and subject.split()[0] not in _MONTH_WORDS:
                    known.add(subject)
    known_words = {word for name in known for word in name.split()}
    return _Model(document, tuple(sentences), tuple(anchors), tuple(meta_spans), participants, participants_span,
                  first_heading, frozenset(known | known_words), frozenset(noninitial), tuple(not_prose),
                  tuple(headings), table_cells, None if speakers else _addressee(document))


_FIELD_VALUE_WORDS = 4  # a field's value is short; a longer line after a key is somebody speaking


def _field_block(text: str, participants: Sequence[str]) -> bool:
    """A run of "Key: value" lines that is a record's fields ("Reporter: …", "Priority: P2",
    "ACV: 310,000 GBP", "Health: Green"), not a chat of speaker labels: at least two such
    lines, one of them a key known as a field's, none of them a participant's name."""
    keys = [m.group("speaker").strip() for line in text.splitlines()
            if (m := _BOLD_SPEAKER_RE.match(line.lstrip()) or _PLAIN_LABEL_RE.match(line.lstrip()))]
    keys = [k for k in keys if k.lower() not in _META_BOILERPLATE_KEYS]
    known = [k for k in keys if _field_key(k) in _FIELD_ROLES or _is_field_key(_field_key(k))]
    return len(keys) >= 2 and bool(known) and not any(k in participants for k in keys)


def _is_field_key(field: str) -> bool:
    """A key (as :func:`_field_key` spells it) that names a value, a place or a membership."""
    return field in _VALUE_KEYS or field in _PLACE_KEYS or field in _MEMBERSHIP_KEYS


_GREETING_RE = re.compile(r"^[ \t]*(?i:hi|hello|hey|dear|good\s+morning|morning)[ \t]+"
                          rf"(?:(?:{TITLE_PATTERN})\.?[ \t]+)?"
                          r"(?P<name>[A-Z][\w'’-]+(?:[ \t]+[A-Z][\w'’-]+)?)[ \t]*[,!:]", re.MULTILINE)
_GROUP_GREETINGS = frozenset("all team everyone everybody folks colleagues friends there both you".split())


def _addressee(document: str) -> tuple[str, tuple[int, int]] | None:
    """The one person a letter or an email greets at its start ("Hi Rosa,"): who "you" is."""
    found = _GREETING_RE.search(document, 0, min(len(document), 400))
    if found is None or found.group("name").split()[0].lower() in _GROUP_GREETINGS:
        return None
    return found.group("name"), (found.start("name"), found.end("name"))


def _table_cells(block: structure.Block) -> list[tuple[int, int, str]]:
    """A table row's cells: (start, end, text), offsets in the document, without the pipes."""
    cells = []
    for match in re.finditer(r"[^|]+", block.text.strip().strip("|")):
        offset = block.char_start + block.text.index(block.text.strip().strip("|")) + match.start()
        text = match.group()
        lead = len(text) - len(text.lstrip())
        cells.append((offset + lead, offset + len(text.rstrip()), _clean_markdown(text.strip())))
    return cells


def _split_sentences(document: str, start: int, end: int) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    sentence_start = start
    i = start
    while i < end:
        char = document[i]
        # "yes for now 🙃 NMR bookings use the sheet": in chat an emoji between words ends what
        # was said before it, as a full stop would
        emoji = _is_emoji(char) and i > sentence_start and document[i - 1].isspace()
        if char in ".!?" or emoji:
            j = i + 1
            while j < end and (document[j] in ".!?\"'’”)]*_" if not emoji
                               else _is_emoji(document[j]) or document[j] in "\ufe0f\u200d"):
                j += 1
            if j < end and document[j].isspace():
                k = j
                while k < end and document[k].isspace():
                    k += 1
                if k < end and (_is_emoji_boundary(document, sentence_start, i, document[k]) if emoji
                                else _is_boundary(document, sentence_start, i, char, document[k])):
                    spans.append((sentence_start, j))
                    sentence_start = k
                    i = k
                    continue
            i = j
            continue
        if char == "\n":
            k = i
            while k < end and document[k].isspace():
                k += 1
            if k < end and _is_line_boundary(document, sentence_start, i, document[k]):
                spans.append((sentence_start, i))
                sentence_start = k
                i = k
                continue
        i += 1
    spans.append((sentence_start, end))
    trimmed = []
    for s, e in spans:
        while s < e and document[s].isspace():
            s += 1
        while e > s and document[e - 1].isspace():
            e -= 1
        if e > s:
            trimmed.append((s, e))
    return trimmed


def _is_emoji(char: str) -> bool:
    return unicodedata.category(char) == "So" and ord(char) >= 0x2190


def _is_emoji_boundary(document: str, sentence_start: int, index: int, following: str) -> bool:
    before = document[sentence_start:index].split()[-1:]
    return following.isalnum() and bool(before) and before[0].lower() not in _FUNCTION_WORDS  # ("the ☕ machine")


# nouns a letter names one of ("Block C", "Gate B", "Plan A"): the letter is not an initial
_LETTERED_PLACES = frozenset("block building wing gate hall level floor bay zone platform terminal unit annex annexe "
                             "phase plan option tier grade row section area room ward pier berth stand lot".split())


def _is_boundary(document: str, sentence_start: int, index: int, char: str, following: str) -> bool:
    if char in "!?" and following.isalpha():
        return True  # "congrats to Ahmed! fuel card spend was …": chats start sentences lower-case
    if not (following.isupper() or following.isdigit() or following in "\"'“‘([*_"):
        return False
    if char != ".":
        return True
    word_start = index
    while word_start > sentence_start and not document[word_start - 1].isspace():
        word_start -= 1
    word = document[word_start:index + 1].lstrip("(\"'“‘*_")
    previous_word = document[sentence_start:word_start].split()[-1:] if word_start > sentence_start else []
    if word.lower() in _ABBREVIATIONS and not (previous_word and previous_word[0][-1:].isdigit()):
        # (after a number it is a unit, "180 ms.", and the period closes the sentence)
        # "… works for Acme Corp.⏎He is …": notes are written a line a sentence, so an
        # abbreviation at a line's end closes the sentence (a title before a name does not)
        k = index + 1
        while k < len(document) and document[k].isspace() and document[k] != "\n":
            k += 1
        at_line_end = k < len(document) and document[k] == "\n"
        return at_line_end and word.lower() not in ("dr.", "mr.", "mrs.", "ms.", "prof.", "st.", "mt.")
    if re.fullmatch(r"[A-Z]\.", word):
        # an initial: "Ravi S. owns ..."; but a name's last letter ("hosted in Building C.")
        # before a word that starts sentences, not surnames ("The vendor says …"), ends one,
        # as does the letter of a block, a wing or a gate ("in Block C. Ward 7 uses …")
        if previous_word and previous_word[0].lower() in _LETTERED_PLACES:
            return True
        following_word = re.match(r"[\w’']+", document[index + 1:].lstrip())
        return following_word is not None and following_word.group() in _CAPITALISED_STOP \
            and following_word.group().lower() in _FUNCTION_WORDS
    return re.fullmatch(r"(?:[A-Za-z]\.){2,}", word) is None


def _is_line_boundary(document: str, sentence_start: int, newline: int, following: str) -> bool:
    previous = document[sentence_start:newline].rstrip()
    line = document[document.rfind("\n", 0, newline) + 1:newline].strip()
    if re.fullmatch(r"\*\*[^*\n]+\*\*|__[^_\n]+__", line):
        return True  # "**Item 3. Venue**": a bold line is a label of its own, not the start of the next line
    if line.endswith(":") and following.isupper() and _is_byline(line):
        return True  # "**Kwabena Asare** (Data), 28 Jul:": who wrote what follows and when, not its time
    if not previous or previous[-1] in ".!?:;,-–—(":
        return False
    if not following.isupper():
        return False
    last_word = previous.split()[-1].lower().strip("*_")
    return last_word not in _FUNCTION_WORDS


def _is_byline(line: str) -> bool:
    """A comment's or a reply's heading: names (a team in brackets), a comma, a date or time,
    and no other word ("Maeve Doherty, 28 Jul:", "**Ana Ruiz** (Support), 3 March 2026:"); not
    a lead-in that dates what follows ("Changes effective 14 September:")."""
    spans = timeparse.find_time_expressions(line, None)
    if not spans or not line[:min(e.start for e in spans)].rstrip().endswith(","):
        return False
    rest = line
    for e in sorted(spans, key=lambda e: e.start, reverse=True):
        rest = rest[:e.start] + " " + rest[e.end:]
    words = re.findall(r"[^\W\d_][\w'’.-]*", re.sub(r"\([^)]*\)", " ", rest))
    return bool(words) and all(w[:1].isupper() for w in words)


# --------------------------------------------------------------------------- helpers


def _strip_possessive(word: str) -> str:
    for suffix in ("'s", "’s"):
        if word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _tokens(text: str) -> list[str]:
    return _TOKEN_RE.findall(text)


def _normalise_space(text: str) -> str:
    return " ".join(text.split())


def _is_verbish(token: str) -> bool:
    word = token.lower()
    if word in _AUX or word in _IRREGULAR_PAST:
        return True
    if len(word) > 3 and word.endswith("ed"):
        return True
    return len(word) > 2 and word.endswith("s") and not word.endswith("ss") and word.isalpha()


def _is_strong_verb(token: str) -> bool:
    word = token.lower()
    return word in _AUX or word in _IRREGULAR_PAST or (len(word) > 3 and word.endswith("ed"))


def _has_predicate(text: str) -> bool:
    words = _tokens(text)
    return len(words) >= 2 and any(w.islower() and w.isalpha() and w not in _FUNCTION_WORDS for w in words)


def _name_like_initial(model: _Model, word: str, following: Sequence[str]) -> bool:
    """Is a sentence-initial capitalised word a name (rather than a capitalised common noun)?"""
    if not word[:1].isupper() or word in _CAPITALISED_STOP or word in _MONTH_WORDS or word in _WEEKDAY_WORDS:
        return False
    if word.isupper() and len(word) > 1:
        return False
    if word in model.known_names or word in model.noninitial_caps:
        return True
    rest = [w for w in following if w.lower() not in _ADVERBS]
    if len(rest) > 2 and rest[0].lower() == "no" and rest[1].lower() == "longer":
        rest = rest[2:]  # "Ana no longer leads the guild"
    if not rest:
        return False
    lowered = rest[0].lower()
    if lowered in _SINGULAR_NEGATED_AUX:
        return True  # "Ana doesn't lead the guild anymore", "Jonas isn't on the squad"
    if lowered in ("and", "or") and len(rest) > 1 and rest[1][:1].isupper():
        return True
    if lowered in _PLURAL_AUX:
        return False  # "Meetings are", "Migrations were"
    return _is_strong_verb(lowered) or (
        len(lowered) > 2 and lowered.endswith("s") and not lowered.endswith("ss") and rest[0].islower()
    )


def _person_mentions(model: _Model, start: int, end: int, sentence_start: int) -> list[tuple[int, int, str]]:
    """Capitalised name sequences in ``document[start:end]`` (a conservative over-approximation of people)."""
    document = model.text
    found: list[tuple[int, int, str]] = []
    for match in _NAME_RE.finditer(document, start, end):
        words = match.group().split()
        first = _strip_possessive(words[0])
        if first in _CAPITALISED_STOP or first in _MONTH_WORDS or first in _WEEKDAY_WORDS:
            continue
        before = document[max(sentence_start, match.start() - 4):match.start()].lower()
        if before.endswith("the "):
            continue
        if match.start() == sentence_start:
            tail = _tokens(document[match.end():min(end, match.end() + 60)])
            if not _name_like_initial(model, first, tail):
                continue
        if _NUMBERED_RE.match(document, match.end()):
            continue  # "Store 214", "Block C", "Pump 2": a numbered thing, not a person
        name = _strip_possessive(match.group())
        found.append((match.start(), match.start() + len(name), name))
    return found


_NUMBERED_RE = re.compile(r"[ \t]+(?:\d+[A-Za-z]?|[A-Z])\b(?![.'’]\w)")


def _third_person(word: str) -> str:
    lowered = word.lower()
    irregular = {"am": "is", "have": "has", "do": "does", "don't": "doesn't", "don’t": "doesn’t",
                 "haven't": "hasn't", "haven’t": "hasn’t", "go": "goes", "are": "is", "aren't": "isn't"}
    if lowered in irregular:
        return irregular[lowered]
    if lowered in _AUX or lowered in _IRREGULAR_PAST or lowered in _MODALS or not lowered.isalpha():
        return word
    if lowered.endswith("ed"):
        return word
    if lowered.endswith(("s", "sh", "ch", "x", "z", "o")):
        return word + "es"
    if lowered.endswith("y") and len(lowered) > 1 and lowered[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _join_names(names: Sequence[str]) -> str:
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


# --------------------------------------------------------------------------- extraction


@dataclass
class _Edit:
    start: int
    end: int
    replacement: str
    reason: str
    detail: str
    evidence: tuple[tuple[int, int], ...] = ()


@dataclass
class _Part:
    start: int
    end: int
    subject: str | None = None  # copied subject (shared-subject conjunct)
    subject_span: tuple[int, int] | None = None
    edits: tuple[_Edit, ...] = ()  # made before the part was cut (a field line's case)


@dataclass
class _Attribution:
    holder_text: str  # as written ("Ravi", "I", "he")
    holder_span: tuple[int, int]
    content_start: int
    verb: str | None


@dataclass
class _Context:
    item: ExtractionInput
    model: _Model
    title: str | None
    title_span: tuple[int, int] | None
    drafts: list[ClaimDraft] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    # "Dana said that …" written into a turn's claim text (the regex extractor's form); without
    # it a turn's claims carry their speaker in the attribution fields only.
    speaker_prefix: bool = True
    # an unresolvable "we" (no participant list) stays "we" instead of omitting the statement
    keep_unresolved_we: bool = False
    # the parse provider's readings: a comma before a clause with its own subject and verb
    # separates two statements ("I report to Hamid, he runs the platform group"), and a field
    # line or list item takes the thing its section heading names ("- Owner: Sam")
    parsed: bool = False
    # the document's full names of two or three words, in order (see _first_name_expansions)
    full_names: list[tuple[int, int, str]] | None = None

    def decide(self, kind: str, reason: str, start: int, end: int, detail: str | None = None) -> None:
        self.decisions.append(Decision(kind, reason, start, end, detail))


def extract_claims(item: ExtractionInput, *, speaker_prefix: bool = True, keep_unresolved_we: bool = False,
                   parsed: bool = False) -> tuple[list[ClaimDraft], list[Decision]]:
    """Run the rules provider on one passage (synchronous core of :class:`RulesClaimProvider`)."""
    model = _parse_document(item.document)
    title = item.title
    title_span: tuple[int, int] | None = None
    if model.first_heading is not None and (title is None or title.strip() == model.first_heading[0].strip()):
        title, title_span = model.first_heading
    ctx = _Context(item, model, title, title_span, speaker_prefix=speaker_prefix,
                   keep_unresolved_we=keep_unresolved_we, parsed=parsed)
    passage_start = max(0, item.passage.char_start)
    passage_end = min(len(item.document), item.passage.char_end)
    for start, end in model.meta_spans:
        if passage_start <= start and end <= passage_end:
            ctx.decide("selection_drop", "references_boilerplate", start, end,
                       _normalise_space(item.document[start:end]))
    for start, end, kind in model.not_prose:
        if passage_start <= start and end <= passage_end:
            ctx.decide("selection_drop", "not_prose", start, end, kind)
    if parsed:  # the weekday sentences' parses, in one batch (see _weekday_tenses)
        from services.pipeline.domain import nlp

        nlp.prefetch(model.text[s.start:s.end] for s in model.sentences
                     if passage_start <= s.start and s.end <= passage_end
                     and _WEEKDAY_RE.search(model.text, s.start, s.end))
    for sentence in model.sentences:
        if sentence.end <= passage_start or sentence.start >= passage_end:
            continue
        if sentence.start < passage_start or sentence.end > passage_end:
            ctx.decide("claimify_omitted", "span_outside_chunk", sentence.start, sentence.end,
                       "the statement crosses the passage boundary")
            continue
        _process_sentence(ctx, sentence)
    return ctx.drafts, ctx.decisions


_POSSESSIVE_AFTER_RE = re.compile(r"['’]s\b")
# "Sunday's total delay was 2 h 10 min", "March's churn rate was 2.1 percent": a possessive
# date before a measured noun and its figure is when the figure was measured, not a thing's name
_POSSESSIVE_MEASURE_RE = re.compile(
    r"['’]s\s+(?P<noun>(?:[A-Za-z][\w-]*\s+){0,3}?[a-z][\w-]*)\s+(?P<verb>was|were|is|are|came\s+(?:in\s+at|to)"
    r"|totall?ed|stood\s+at|reached|hit|averaged)\s+(?:(?:about|around|roughly|nearly|almost|just|over|under|down"
    r"|up|at|by)\s+)*[-+]?[£$€]?\d")
_PRESENT_MEASURE_VERBS = frozenset({"is", "are"})
_FOR_BEFORE_RE = re.compile(r"[a-z]\s+(for)\s+$")
_PAST_COPULA_RE = re.compile(r"\s+(?:was|were|came\s+(?:in\s+at|to)|totall?ed|stood\s+at|averaged)\s+[^.;]*\d")
# the time a figure is measured against: "up 12 percent on last year", "higher than last
# week", "versus Q1" (a change needs its figure: "stepped down from the committee on 9 May" is no comparison)
_COMPARED_WITH_RE = re.compile(
    r"(?:\b(?:up|down|rose|fell|grew|increased|decreased|dropped|gained|lost)\s+(?:by\s+)?[-+]?\d[\d.,]*\s*"
    r"(?:%|percent|per\s+cent|points?|pts?|[A-Za-z]{1,5})?\s+(?:on|over|from)"
    r"|\b(?:higher|lower|more|less|better|worse|bigger|smaller|greater|fewer)\s+than"
    r"|\b(?:compared\s+(?:with|to)|versus|vs\.?|relative\s+to|against))\s+$", re.IGNORECASE)
_MODIFIER_BEFORE_RE = re.compile(r"(?:^|\s)(?:the|our|their|its|this|his|her|my|your|a|an)\s+$", re.IGNORECASE)


def _subordinate_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the relative clauses and appositions in ``text``, from its English parse."""
    from services.pipeline.domain import nlp

    spans = []
    for token in nlp.parse(text):
        if token.dep_ in ("relcl", "appos", "acl"):
            subtree = list(token.subtree)
            spans.append((subtree[0].idx, subtree[-1].idx + len(subtree[-1].text)))
    return spans


def _bare_date(replacement: str) -> str:
    """A resolved date without the preposition it was resolved with ("on 9 June 2026" -> "9 June 2026")."""
    return re.sub(r"^(?:in|on|during)\s+", "", replacement)


def _possessive_measures(text: str, expressions: Sequence[timeparse.TimeExpression]
                         ) -> list[tuple[timeparse.TimeExpression, re.Match[str]]]:
    """The dates of ``text`` that open it as the possessor of a measured noun, with the match
    (the noun and the verb before the figure)."""
    found = []
    for e in expressions:
        match = _POSSESSIVE_MEASURE_RE.match(text, e.end)
        if match is not None and not text[:e.start].strip():
            found.append((e, match))
    return found


def _date_as_modifier(text: str, expression: timeparse.TimeExpression) -> bool:
    """"the Q3 marketing budget", "our 2026 roadmap": a date naming a thing, not the time of
    the statement (no preposition, a determiner before it and a noun after it); "this morning's
    call", "last week's incident": a possessive date names a thing too."""
    if _POSSESSIVE_AFTER_RE.match(text, expression.end):
        return True
    if expression.deictic or expression.edit_start != expression.start:
        return False
    after = text[expression.end:expression.end + 30].lstrip()
    if bool(_MODIFIER_BEFORE_RE.search(text[:expression.start])) and after[:1].islower():
        return True
    return bool(re.search(r"[a-z]\s+(?:for|of)\s+$", text[:expression.start])) and _names_a_noun(text, expression)


_WEEKDAY_RE = re.compile(rf"\b(?:{'|'.join(timeparse.WEEKDAY_NAMES)})\b")


def _weekday_tenses(document: str, sentence: _Sentence, start: int, end: int) -> dict[int, int]:
    """Each bare weekday of ``document[start:end]`` (a part of ``sentence``; "on Friday", not
    "last Friday" or "since Friday", which have rules of their own) with the direction the
    tense of the verb it dates gives: -1 for a past verb ("we met on Tuesday"), +1 for a present
    or future one ("takes over from Monday", "I'm leaving on Friday"). A weekday no verb
    governs is left out. Offsets are the part's; the parse is the whole sentence's, which
    :func:`extract_claims` reads in one batch with the passage's other dated sentences."""
    if not (_WEEKDAY_RE.search(document, start, end) or timeparse.SHORT_WEEKDAY_RE.search(document, start, end)):
        return {}
    from services.pipeline.domain import nlp

    out = {}
    for token in nlp.parse(document[sentence.start:sentence.end]):
        shortened = token.lower_.rstrip(".") in timeparse.WEEKDAY_ABBREVIATIONS and token.i > 0 \
            and token.nbor(-1).lower_ in timeparse.SHORT_DATE_WORDS  # "from mon"
        if not (token.text in _WEEKDAY_WORDS or shortened) or not start <= sentence.start + token.idx < end:
            continue  # "last Friday", "since Friday": timeparse's own rules win
        verb = token.head
        while verb.pos_ not in ("VERB", "AUX") and verb.head.i != verb.i:
            verb = verb.head
        direction = _tense_direction(verb) if verb.pos_ in ("VERB", "AUX") else None
        if direction is not None:
            out[sentence.start + token.idx - start] = direction
    return out


def _tense_direction(verb: Any) -> int | None:
    auxiliaries = [c for c in verb.children if c.dep_ in ("aux", "auxpass")]
    if verb.tag_ == "VBD" or any(a.tag_ == "VBD" for a in auxiliaries) or (
            verb.tag_ == "VBN" and any(a.lemma_ == "have" for a in auxiliaries)):
        return -1
    if verb.tag_ in ("VB", "VBZ", "VBP", "MD") or (verb.tag_ in ("VBG", "VBN") and auxiliaries):
        return 1
    return None


def _names_a_noun(text: str, expression: timeparse.TimeExpression) -> bool:
    """"the cloud budget for Q4 2026 is 70,000 EUR": a date in a noun's "for"/"of" phrase names
    the thing (which budget), it is not the time the statement holds (from the English parse)."""
    from services.pipeline.domain import nlp

    for token in nlp.parse(text):
        if token.idx == expression.start:
            preposition = token.head
            return (token.dep_ == "pobj" and preposition.lower_ in ("for", "of")
                    and preposition.head.pos_ in ("NOUN", "PROPN") and preposition.head.ent_type_ not in ("DATE",))
    return False


# "Jonas Eide (Ops Dir at Halvorsen Freight, our champion)": a role at an organisation, in brackets
_PAREN_ROLE_RE = re.compile(rf"\(\s*((?:[A-Za-z][\w&.'’-]*\s+){{1,5}}?)(?:at|@)\s+({_NAME})\s*(?=[,;)])")


# the last word of a company's name ("Marlow Legal", "Orchard Health Group", "Brightline Foods")
_COMPANY_HEADS = frozenset("""ltd limited plc llc llp inc gmbh ag sa bv corp corporation company co group holdings
partners legal law foods health healthcare logistics freight shipping hotels retail bank energy studios clinics
solutions services systems technologies labs consulting capital media insurance""".split())
# "Leila Farahani from the warehouse systems team is looking into it": the team a person is from
_FROM_TEAM_RE = re.compile(r"(?<=\s)from\s+((?:the\s+)?(?:[\w&'’-]+\s+){0,3}(?:team|squad|department|desk|unit))\b")
_OF_COMPANY_RE = re.compile(rf"(?<=\s)(?:of|from)\s+({_NAME}(?:\s+&\s+{_NAME})?)\b")  # "Dana Cole of Brightline Labs"
_PAREN_COMPANY_RE = re.compile(rf"\(\s*({_NAME}(?:\s+&\s+{_NAME})?)\s*\)")


def _parenthetical_roles(ctx: _Context, sentence: _Sentence) -> None:
    """A claim of each description of a person after their full name, whatever becomes of the
    sentence around it (the writer's own description of the person): a role in brackets ("Call
    w/ Jonas Eide (Ops Dir at Halvorsen Freight)"), a company in brackets or after "of" / "from"
    ("Beth Crane (Marlow Legal)", "Dana Cole of Brightline Labs": works for it), a team after
    "from" ("Leila Farahani from the warehouse systems team": works on it)."""
    document = ctx.model.text
    companies = [m for pattern in (_PAREN_COMPANY_RE, _OF_COMPANY_RE)
                 for m in pattern.finditer(document, sentence.start, sentence.end)
                 if len(m.group(1).split()) >= 2 and m.group(1).split()[-1].lower().rstrip(".") in _COMPANY_HEADS]
    # the sentence (or a field's value) may open with the name ("Reporter: Beth Crane (Marlow Legal)",
    # "Leila Farahani from the warehouse team is ..."): then the parse must call it a person
    field_value = document[document.rfind("\n", 0, sentence.start) + 1:sentence.start].rstrip().endswith(":")
    for match, says in [*((m, "is") for m in _PAREN_ROLE_RE.finditer(document, sentence.start, sentence.end)),
                        *((m, "works for") for m in companies),
                        *((m, "works on") for m in _FROM_TEAM_RE.finditer(document, sentence.start, sentence.end))]:
        named_end = sentence.start + len(document[sentence.start:match.start()].rstrip())
        person = next((m for m in _person_mentions(ctx.model, sentence.start, named_end, sentence.start - 1)
                       if m[1] == named_end and len(m[2].split()) >= 2), None)
        if person is not None and person[0] == sentence.start and not field_value:
            person = _parsed_person_span(document, sentence.start, person)
        if person is None:
            continue
        part = _Part(match.start(1), match.end(match.lastindex or 1), f"{person[2]} {says}", (person[0], person[1]))
        _claimify(ctx, sentence, part, None, _normalise_space(f"{person[2]} {says} {document[part.start:part.end]}"))


def _process_sentence(ctx: _Context, sentence: _Sentence) -> None:
    document = ctx.model.text
    start, end = sentence.start, sentence.end
    for _ in range(3):  # "ok. btw Wen joined …": each leading interjection
        interjection = (_INTERJECTION_RE.match(document[start:end]) or _CHAT_FILLER_RE.match(document[start:end])
                        or _AUTHOR_FRAME_RE.match(document[start:end]) or _OUTLINE_RE.match(document[start:end])
                        or _MINUTES_FRAME_RE.match(document[start:end]))
        if not interjection or end - (start + interjection.end()) <= 0:
            break
        start += interjection.end()
    text = _normalise_space(_clean_markdown(document[start:end]))
    in_turn = sentence.unit.speaker is not None
    if ctx.parsed:
        _parenthetical_roles(ctx, sentence)

    def drop(reason: str, detail: str | None = None) -> None:
        ctx.decide("selection_drop", reason, start, end, detail or text[:200])

    if _QUESTION_END_RE.search(document[start:end]):
        return drop("question")
    if _BOILERPLATE_RE.search(text):
        return drop("references_boilerplate")
    if _INTRO_RE.search(text):
        return drop("intro")
    if _CONCLUSION_RE.search(text):
        return drop("conclusion")
    if _NO_INFO_RE.search(text):
        return drop("no_info")
    if _LEADING_CONDITIONAL_RE.search(text):
        return drop("hypothetical")

    if sentence.unit.kind == "table_cell":
        part = _table_part(ctx, sentence) if ctx.parsed else None
        if part is None:
            return drop("not_prose", "table_row")
        _claimify(ctx, sentence, part, None, _normalise_space(f"{part.subject} {document[part.start:part.end]}"))
        return None
    # a list item or field line; in prose, a telegraphic line with no subject ("Reassigned to Ken
    # on 15 April.") under a heading that names its thing
    field = _field_part(ctx, sentence, start, end) if ctx.parsed and (sentence.unit.kind == "list" or (
        sentence.unit.kind == "paragraph" and _SUBJECTLESS_RE.match(document[start:end]))) else None
    attribution = None if field is not None else _detect_attribution(ctx, start, end)
    parts = [field] if field is not None else [_Part(start, end)] if attribution else _split_conjunctions(
        ctx, sentence, start, end)
    for part in parts:
        statement = _normalise_space(_clean_markdown(
            (part.subject + " " if part.subject else "") + document[part.start:part.end]))
        if attribution is None:
            reason = _select(ctx, statement, in_turn)
            if reason == "generic" and field is not None:
                reason = None  # the heading names what the field is about
            if reason is not None:
                ctx.decide("selection_drop", reason, part.start, part.end, statement[:200])
                continue
        _claimify(ctx, sentence, part, attribution, statement)


_FIELD_RE = re.compile(r"^(?P<key>[A-Za-z][\w '’/&.-]{0,60}?)\s*:\s+(?P<value>\S.*?)\s*\.?\s*$")
_DASHED_FIELD_RE = re.compile(r"^(?P<key>[A-Za-z][\w '’/&.-]{0,60}?)\s+[—–-]{1,2}\s+(?P<value>\S.*?)\s*\.?\s*$")
_PARTICIPLES = frozenset({"run", "built", "kept"})  # irregular past participles the subjectless forms start with
_SUBJECTLESS_RE = re.compile(r"^(?:[Oo]wned|[Ll]ed|[Rr]un|[Mm]anaged|[Mm]aintained|[Hh]osted|[Dd]eployed|[Bb]uilt"
                             r"|[Ss]ponsored|[Cc]haired|[Hh]eaded|(?:[Rr]e)?[Aa]ssigned|[Hh]anded|[Tt]ransferred"
                             r"|[Bb]ased|[Ll]ocated|[Ss]tored|[Kk]ept|[Rr]uns"
                             r"|[Ll]ives|[Ss]its|[Dd]epends|[Uu]ses|[Rr]eports|[Ll]eads|[Oo]wns|[Mm]anages|[Jj]oins"
                             r"|[Ss]tarts|[Ww]orks)\b")


_TICKET_HEADING_RE = re.compile(r"^([A-Z][A-Z0-9]{1,9}-\d{1,7})(?=\s*[:—–-]|\s*$)")
# "# Account: Brightline Foods", "# Account plan: Dunmore Logistics", "# Fire safety inspection: Millbrook Depot"
_KIND_HEADING_RE = re.compile(r"^([A-Za-z]+(?:[ -][A-Za-z]+){0,3}):\s+(\S.*)$")
_REPLY_PREFIXES = frozenset({"re", "fwd", "fw", "aw", "wg", "sv", "tr"})


def _last_heading(ctx: _Context, position: int) -> tuple[str, tuple[int, int]] | None:
    found = None
    for at, title, span in ctx.model.headings:
        if at < position:
            found = (_clean_markdown(title).strip().rstrip(":"), span)
    return found


def _heading_subject(ctx: _Context, position: int) -> tuple[str, tuple[int, int]] | None:
    """The thing the section before ``position`` is about, when its heading names one: "##
    Billing service" (not "Notes", "Stand-up, 17 September" or a heading with a date)."""
    found = _last_heading(ctx, position)
    if found is None:
        return None
    title, span = found
    ticket = _TICKET_HEADING_RE.match(title)
    if ticket is not None:  # "# INC-4821: checkout timeouts": the ticket
        return ticket.group(1), (span[0], span[0] + ticket.end(1))
    kind = _KIND_HEADING_RE.match(title)
    if kind is not None and _field_key(kind.group(1)) not in _REPLY_PREFIXES | _GENERIC_HEADINGS | _LABEL_KEYS:
        # "# Account: Brightline Foods", "# Customer: Acme": the named thing
        found = kind.group(2), (span[0] + kind.start(2), span[1])
    found = _record_name(found[0], found[1][0]) or found
    words = found[0].lower().replace("-", " ").split()
    # "## Team" names nothing, "## Quokka team" names a team
    generic = [w for w in words if w in _GENERIC_HEADINGS]
    if (not words or len(words) > 6 or len(generic) == len(words) or any(w not in ("team", "teams") for w in generic)
            or re.search(r"[\d,;?!]", found[0])
            or timeparse.find_time_expressions(found[0], None)):
        return None
    return found


_HEADING_PARTS_RE = re.compile(r"\s+[—–|]\s+|\s+-\s+")
_INVERTED_NAME_RE = re.compile(rf"^({_NAME_WORD}),\s+({_NAME_WORD}(?:\s+{_NAME_WORD})?)$")
# what a heading says a record is, beside the name it is about ("Employee record — Alvarez, Nuria")
_RECORD_WORDS = frozenset("""record profile file card sheet page log notes note call calls changes change history
visit visits debrief recap handover checklist""".split())


def _record_name(title: str, offset: int) -> tuple[str, tuple[int, int]] | None:
    """The name in a heading of parts ("Halvorsen Freight — call notes", "Employee record —
    Alvarez, Nuria (change log)"): the one part that is not a description of the record,
    a "Surname, First" written as the name."""
    cut = re.sub(r"\s*\([^)]*\)\s*$", "", title)
    bounds = [0, *[i for m in _HEADING_PARTS_RE.finditer(cut) for i in (m.start(), m.end())], len(cut)]
    parts = [(cut[bounds[i]:bounds[i + 1]], bounds[i]) for i in range(0, len(bounds), 2)]
    if len(parts) < 2 and cut == title:
        return None
    named = [(text, at) for text, at in parts if text.strip() and not all(
        w in _RECORD_WORDS or w in _GENERIC_HEADINGS or w.isdigit() for w in re.findall(r"[a-z0-9]+", text.lower()))
        and not all(w in _RECORD_WORDS | _GENERIC_HEADINGS | {"employee", "customer", "account", "client", "staff",
                                                               "supplier", "vendor", "site"}
                    for w in re.findall(r"[a-z]+", text.lower()))]
    if len(named) != 1:
        return None
    text, at = named[0]
    inverted = _INVERTED_NAME_RE.match(text.strip())
    span = (offset + at, offset + at + len(text))
    return (f"{inverted.group(2)} {inverted.group(1)}", span) if inverted else (text.strip(), span)


# a list item that opens with a name and a dash or colon ("- Bianca Ferraro - Data Analyst, Growth team.")
_ITEM_LEAD_RE = re.compile(rf"\s*(?:[-*•]\s+|\d+[.)]\s+)?(?:\*\*)?(?P<name>{_NAME})(?:\*\*)?\s*(?:[—–-]{{1,2}}|:)\s+")


def _item_subject(ctx: _Context, sentence: _Sentence) -> tuple[str, tuple[int, int]] | None:
    """The name a list item opens with, for the item's later sentences that have no subject
    ("Based in Milan." after "- Bianca Ferraro - Data Analyst, Growth team."): nearer than
    any heading."""
    unit = sentence.unit
    lead = _ITEM_LEAD_RE.match(ctx.model.text, unit.start, sentence.start) if unit.kind == "list" else None
    if lead is None or sentence.start < unit.start + lead.end():
        return None
    return lead.group("name"), lead.span("name")


def _subjectless(subject: str, subject_span: tuple[int, int], start: int, end: int, verb: str) -> _Part:
    """"owned by Priya" / "runs on Kubernetes" said of ``subject``: "<subject> is owned by …"."""
    copula = " is" if verb.lower().endswith("ed") or verb.lower() in _PARTICIPLES else ""
    lowered = _Edit(start, start + len(verb), verb.lower(), "reference_expanded", f"{verb} -> {verb.lower()}")
    return _Part(start, end, subject + copula, subject_span, (lowered,))


def _field_part(ctx: _Context, sentence: _Sentence, start: int, end: int) -> _Part | None:
    """A list item or field line read as the statement it abbreviates:

    - "Owner: Sam Ortiz" under "## Billing service" → "The owner of Billing service is Sam Ortiz";
    - "Region: Frankfurt", "Status: live", "Vendor: Stripe" under it → its place, status, vendor;
    - "Billing service: Priya Raman" under "## Service owners" → "The owner of Billing service is Priya Raman";
    - "Billing service: owned by Priya Raman" → "Billing service is owned by Priya Raman";
    - "Owned by Priya Raman" under "## Billing service" → "Billing service is owned by Priya Raman".
    """
    text = ctx.model.text[start:end]
    match = _FIELD_RE.match(text)
    dashed = _DASHED_FIELD_RE.match(text)
    if match is None and dashed is not None and _SUBJECTLESS_RE.match(dashed.group("value")):
        # "Billing exporter — owned by Tereza Novak": a dash where a colon would be
        value_start = start + dashed.start("value")
        return _subjectless(dashed.group("key").strip(), (start, start + dashed.end("key")), value_start,
                            start + dashed.end("value"), dashed.group("value").split()[0])
    if dashed is not None and re.search(r"[—–]|\s--\s", text[:dashed.end("key") + 4]):
        key, value = dashed.group("key").strip(), dashed.group("value")
        value_start, value_end = start + dashed.start("value"), start + dashed.end("value")
        inner = _FIELD_RE.match(value)
        role = _FIELD_ROLES.get(inner.group("key").strip().lower()) if inner is not None else None
        if inner is not None and role is not None and re.fullmatch(_NAME, inner.group("value").strip()):
            # "Hiring plan — owner: Greta Lind": the dashed line's thing has the field's holder
            return _Part(value_start + inner.start("value"), value_end, f"The {role} of {key} is",
                         (start, start + dashed.end("key")))
        if match is None and len(value.split()) <= 4 and value[:1].islower() and not re.search(r"\d", value):
            # "Payroll export — done", "Vendor portal — blocked on legal": a status line
            return _Part(value_start, value_end, f"{key} is", (start, start + dashed.end("key")))
    lead = _item_subject(ctx, sentence)
    if match is None and lead is not None and _SUBJECTLESS_RE.match(text):
        return _subjectless(lead[0], lead[1], start, end, text.split()[0])
    heading = _heading_subject(ctx, sentence.start)
    if match is None:
        if heading is None or not _SUBJECTLESS_RE.match(text):
            return None
        return _subjectless(heading[0], heading[1], start, end, text.split()[0])
    key, value = match.group("key").strip(), match.group("value")
    value_start, value_end = start + match.start("value"), start + match.end("value")
    if _SUBJECTLESS_RE.match(value) and _FIELD_ROLES.get(_field_key(key)) is None:
        return _subjectless(key, (start, value_start), value_start, value_end, value.split()[0])
    if heading is not None:
        part = _heading_field(ctx, heading, key, value, value_start, value_end)
        if part is not None:
            return part
    name = _only_names(value)
    # a heading that names the role: "## Service owners" / "- Billing service: Priya Raman"
    section = _last_heading(ctx, sentence.start)
    if section is not None and name and not re.search(r"\d", key):
        role = _FIELD_ROLES.get((section[0].lower().split()[-1:] or [""])[0])
        if role is not None:
            return _Part(value_start, value_end, f"The {role} of {key} is", section[1])
    return None


def _only_names(value: str) -> bool:
    """"Sam Ortiz", "Ana Reyes and Tom Li": a field value that is names and nothing else."""
    return re.fullmatch(rf"{_NAME}(?:\s*(?:,|and|&)\s*{_NAME})*", value.strip()) is not None


def _heading_field(ctx: _Context, heading: tuple[str, tuple[int, int]], key: str, value: str, value_start: int,
                   value_end: int) -> _Part | None:
    """A field of the thing (or person) a heading names: "Owner: Sam Ortiz", "Region: Frankfurt",
    "Status: live", "Manager: Greg Huxley" and "Dept: Finance Ops" on a person's record."""
    field = _field_key(key)
    role = _FIELD_ROLES.get(field)
    name = _only_names(value)
    # a person's record: "# Employee record — Alvarez, Nuria", "# Leaver checklist: Petra Holub"
    person = _INVERTED_NAME_RE.match(ctx.model.text[heading[1][0]:heading[1][1]].strip()) is not None or (
        (role == "manager" or field in _MEMBERSHIP_KEYS) and _names_a_person(heading[0]))
    if person and role == "manager" and name:
        # "Manager: Greg Huxley" on a person's record: the person reports to them
        return _Part(value_start, value_end, f"{heading[0]} reports to", heading[1])
    if person and field in _MEMBERSHIP_KEYS and len(value.split()) <= 5:
        return _Part(value_start, value_end, f"{heading[0]} works on", heading[1])
    if role is not None and name:
        of = f"the {heading[0]} account" if field in _ACCOUNT_FIELDS else heading[0]
        subject = f"{heading[0]} is assigned to" if role == "assignee" else f"The {role} of {of} is"
        return _Part(value_start, value_end, subject, heading[1])
    if role is None and len(value.split()) <= _FIELD_VALUE_WORDS and not re.search(r"\d", key) \
            and len(key.split()) <= 3 and (
            not re.search(r"\d", value) or _names_a_thing(heading[0])):
        subject = (f"{heading[0]} is located in" if field in _PLACE_KEYS else f"{heading[0]} is"
                   if field == "status" else f"The {heading[0]} {key if key.isupper() else field} is")  # "ACV"
        return _Part(value_start, value_end, subject, heading[1])
    return None


# the value column of a two-column table of fields ("| Field | Value |")
_VALUE_COLUMNS = frozenset({"value", "values", "details", "detail", "info", "data", "entry"})


def _table_part(ctx: _Context, sentence: _Sentence) -> _Part | None:
    """A table's data cell read as the field it is: the column's header names a role ("Owner"),
    a place ("Region") or the status of the row's first cell, or a value with a number."""
    column, key, key_span = ctx.model.table_cells[sentence.start]
    value = ctx.model.text[sentence.start:sentence.end]
    lowered = column.lower()
    heading = _heading_subject(ctx, sentence.start) if lowered in _VALUE_COLUMNS else None
    if heading is not None:  # "| Manager | Greg Huxley |" under "# Employee record — Alvarez, Nuria"
        return _heading_field(ctx, heading, key, value, sentence.start, sentence.end)
    role = _FIELD_ROLES.get(lowered)
    if role is not None:
        return _Part(sentence.start, sentence.end, f"The {role} of {key} is", key_span)
    if lowered in _PLACE_KEYS:
        return _Part(sentence.start, sentence.end, f"{key} is located in", key_span)
    if lowered == "status":
        return _Part(sentence.start, sentence.end, f"{key} is", key_span)
    if re.search(r"\d", value) and not re.search(r"\d", key) and len(column.split()) <= 3:
        return _Part(sentence.start, sentence.end, f"The {key} {lowered} is", key_span)
    return None


def _names_a_role(statement: str) -> bool:
    """"Please welcome Ines, our new head of procurement": advice that names who holds a role."""
    from services.pipeline.domain import reading

    return any(r.kind == "relation" for r in reading.read(statement))


def _names_a_person(heading: str) -> bool:
    """"Petra Holub" (a leaver's checklist, a starter's record): a heading that is a person's name."""
    from services.pipeline.domain import reading

    return heading.split()[-1].lower() not in _COMPANY_HEADS and reading.is_person_name(heading)


def _names_a_thing(heading: str) -> bool:
    """"Project Orca", "Lumos team": a heading with a proper name, whose "Budget: 40,000 EUR"
    is that thing's budget ("Numbers", "Key figures" name no thing); a ticket ("SUP-4471") is one."""
    from services.pipeline.domain import nlp

    return _TICKET_HEADING_RE.fullmatch(heading) is not None or any(
        token.pos_ == "PROPN" for token in nlp.parse(heading))


def _select(ctx: _Context, statement: str, in_turn: bool) -> str | None:
    words = _tokens(statement)
    if len(words) < 2 or not any(w.isalpha() and w.islower() for w in words) or _AGREEMENT_ONLY_RE.match(statement):
        return "ambiguous"
    if (_ADVICE_RE.search(statement) or (words[0].lower() in _IMPERATIVE_STARTS and words[0][0].isupper()
                                         and not (len(words) > 1 and _is_verbish(words[1])))) \
            and not (ctx.parsed and "," in statement and _names_a_role(statement)):
        return "advice"
    if _HYPOTHETICAL_RE.search(statement):
        return "hypothetical"
    if not _has_anchor(ctx, statement, in_turn):
        return "generic"
    opinion = None if in_turn else _OPINION_RE.search(statement)
    if opinion is not None and not re.search(r"\d", statement[opinion.start():]):
        return "opinion"  # a quantity stated as an opinion ("is too slow at 300 ms") is kept
    return None


def _has_anchor(ctx: _Context, statement: str, in_turn: bool) -> bool:
    if re.search(r"\d", statement) or timeparse.find_time_expressions(statement, None):
        return True
    words = _tokens(statement)
    for index, word in enumerate(words):
        if index > 0 and word[0].isupper() and word != "I" and _strip_possessive(word) not in _CAPITALISED_STOP:
            return True
    if words and _name_like_initial(ctx.model, _strip_possessive(words[0]), words[1:]):
        return True
    if words and words[0][:1].isupper() and _strip_possessive(words[0]) != words[0] \
            and _strip_possessive(words[0]) not in _CAPITALISED_STOP:
        return True  # "Priya's team owns …": a named possessor makes the noun specific
    lowered = [w.lower() for w in words]
    pronouns = {"i", "we", "he", "she", "it", "they", "my", "our", "his", "her", "its", "their", "me", "us", "him",
                "them", "i'm", "we're", "he's", "she's", "it's", "i'll", "we'll", "i've", "we've"}
    if any(w in pronouns for w in lowered):
        return True
    if in_turn and any(w in ("you", "your", "you're", "you've", "you'll") for w in lowered):
        return True  # "you" in a turn is the other party
    specific = {"the", "this", "that", "these", "those", "my", "our", "your", "his", "her", "its", "their"}
    return any(w in specific for w in lowered[:3])


def _detect_attribution(ctx: _Context, start: int, end: int) -> _Attribution | None:
    document = ctx.model.text
    text = document[start:end]
    for pattern in (_ATTR_AGREE_RE, _ATTR_TELL_RE, _ATTR_SAY_RE, _ATTR_ACCORDING_RE):
        match = pattern.match(text)
        if match is None:
            continue
        subject = match.group("subj")
        if subject[0].isupper() and subject not in ("I", "We", "He", "She", "They"):
            if subject.split()[0] in _CAPITALISED_STOP:
                continue
            if pattern is not _ATTR_ACCORDING_RE and not _name_like_initial(
                    ctx.model, subject.split()[0], [match.group("verb")]):
                continue
        content = match.group("content")
        content_words = _tokens(content)
        if len(content_words) < 2 or content_words[0].lower() in _BAD_CONTENT_START:
            continue
        verb = match.group("verb") if "verb" in pattern.groupindex else None
        return _Attribution(subject, (start + match.start("subj"), start + match.end("subj")),
                            start + match.start("content"), verb)
    match = _ATTR_TRAILING_RE.match(text)
    if match is not None:
        group = "subj" if match.group("subj") else "subj2"
        subject = match.group(group)
        if len(_tokens(match.group("content"))) >= 2 and subject.split()[0] not in _CAPITALISED_STOP:
            return _Attribution(subject, (start + match.start(group), start + match.end(group)), start,
                                match.group("verb") or match.group("verb2"))
    return None


def _split_conjunctions(ctx: _Context, sentence: _Sentence, start: int, end: int) -> list[_Part]:
    document = ctx.model.text
    text = document[start:end]
    protected = [(e.start, e.end) for e in timeparse.find_time_expressions(text, None)]
    parts: list[_Part] = []
    cursor = 0
    pending_subject: tuple[str, tuple[int, int]] | None = None
    sentence_subject = _leading_subject(ctx, text, 0)
    for match in (_COMMA_SEPARATOR_RE if ctx.parsed else _SEPARATOR_RE).finditer(text):
        bare_comma = match.group().strip() == ","
        if match.start() < cursor or any(s <= match.start() < e for s, e in protected):
            continue
        if text.count("(", 0, match.start()) > text.count(")", 0, match.start()):
            continue
        if text.count('"', 0, match.start()) % 2 == 1:
            continue
        left = text[cursor:match.start()]
        right = text[match.end():]
        if not _has_predicate(left if pending_subject is None else pending_subject[0] + " " + left):
            continue
        subject: tuple[str, tuple[int, int]] | None = None
        if ";" in match.group():
            if len(_tokens(right)) < 2:
                continue
        elif bare_comma:
            if not _independent_clause(ctx, right) or len(_tokens(left)) < 3 or _only_time(left):
                continue
        elif _independent_clause(ctx, right):
            pass
        elif _shared_subject_start(right) and sentence_subject is not None:
            subject = (sentence_subject[0], (start + sentence_subject[1][0], start + sentence_subject[1][1]))
        else:
            continue
        parts.append(_make_part(document, start + cursor, start + match.start(), pending_subject))
        pending_subject = subject
        cursor = match.end()
    parts.append(_make_part(document, start + cursor, end, pending_subject))
    return [p for p in parts if p.end > p.start]


def _only_time(text: str) -> bool:
    """"Starting next Monday", "From 1 June 2026": a leading time adjunct, no clause of its own."""
    return any(not text[:e.start].strip() and not text[e.end:].strip(" ,")
               for e in timeparse.find_time_expressions(text, None))


def _make_part(document: str, start: int, end: int, subject: tuple[str, tuple[int, int]] | None) -> _Part:
    while end > start and document[end - 1] in " \t\n,;:":
        end -= 1
    if subject is None:
        return _Part(start, end)
    return _Part(start, end, subject[0], subject[1])


def _leading_subject(ctx: _Context, text: str, offset: int) -> tuple[str, tuple[int, int]] | None:
    body = text[offset:]
    pronoun = _LEADING_PRONOUN_RE.match(body)
    if pronoun:
        return pronoun.group(1), (offset, offset + pronoun.end(1))
    name = _NAME_RE.match(body)
    if name:
        tail = _tokens(body[name.end():name.end() + 60])
        first = name.group().split()[0]
        if _name_like_initial(ctx.model, first, tail):
            return name.group(), (offset, offset + name.end())
        return None
    np = _LEADING_NP_RE.match(body)
    if np and _is_verbish(np.group(1)):
        return np.group(), (offset, offset + np.end())
    return None


def _independent_clause(ctx: _Context, right: str) -> bool:
    if _CONTRACTED_SUBJECT_RE.match(right):
        return True
    subject = _leading_subject(ctx, right, 0)
    if subject is None:
        return False
    first = subject[0].split()[0]
    if first in _MONTH_WORDS or first in _WEEKDAY_WORDS:
        return False
    rest = _tokens(right[subject[1][1]:])
    while rest and rest[0].lower() in _ADVERBS:
        rest = rest[1:]
    if not rest or not _is_verbish(rest[0]):
        return False
    return len(rest) >= 2 or _is_strong_verb(rest[0])


def _shared_subject_start(right: str) -> bool:
    words = _tokens(right)
    while words and words[0].lower() in _ADVERBS:
        words = words[1:]
    return bool(words) and words[0].islower() and _is_strong_verb(words[0])


def _dated_section(ctx: _Context, sentence: _Sentence, statement: str) -> date | None:
    """The day of the section a change is listed under, when the section (not the document)
    is dated: a changelog's "## 4.2.0 (2026-06-15)", a journal's "### 3 March 2026". Only a
    statement of a change takes it ("raised from 30 to 45 seconds", "now depends on X")."""
    from services.pipeline.domain import reading

    section = _last_heading(ctx, sentence.start)
    first = ctx.model.first_heading
    if section is None or first is None or section[1] == first[1]:
        return None
    day = timeparse.find_anchor_date(section[0])
    if day is None or not (re.search(r"\bnow\b", statement, re.IGNORECASE) or any(
            r.change == "succession" or r.kind == "attribute" and r.previous for r in reading.read(statement))):
        return None
    return day


def _lead_in_day(ctx: _Context, sentence: _Sentence, statement: str) -> date | None:
    """The day a list's lead-in gives its changes ("A few changes, effective Monday 14
    September 2026:" over "- Nadia takes over the business desk from Piers."). As with a dated
    section, only a statement of a change takes it."""
    from services.pipeline.domain import reading

    if sentence.unit.kind != "list":
        return None
    lead = next((s for s in reversed(ctx.model.sentences[:sentence.index]) if s.unit.kind != "list"), None)
    if lead is None:
        return None
    heading = _last_heading(ctx, sentence.start)
    text = ctx.model.text[lead.start:lead.end].rstrip()
    if not text.endswith(":") or (heading is not None and heading[1][0] > lead.start):
        return None
    anchor = _anchor_for(ctx, lead)[0]
    # "effective 14 September 2026:" reads as an open period from that day
    days = [e for e in timeparse.find_time_expressions(text, anchor) if e.resolved and e.precision in ("day", "open")
            and e.valid_from is not None]
    if not days or not any(r.change == "succession" for r in reading.read(statement)):
        return None
    assert days[-1].valid_from is not None
    return days[-1].valid_from.date()


def _anchor_for(ctx: _Context, sentence: _Sentence) -> tuple[date | None, tuple[int, int] | None]:
    unit = sentence.unit
    if unit.turn_anchor is not None:
        return unit.turn_anchor, unit.turn_anchor_span
    best: tuple[date, tuple[int, int]] | None = None
    for position, day, span in ctx.model.anchors:
        if position < sentence.start:
            best = (day, span)
    if best is not None:
        return best
    if ctx.title:
        title_day = timeparse.find_anchor_date(ctx.title)
        if title_day is not None:
            return title_day, ctx.title_span
    if ctx.item.asserted_at is not None:
        moment = ctx.item.asserted_at
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC)
        return moment.date(), None
    return None, None


def _claimify(ctx: _Context, sentence: _Sentence, part: _Part, attribution: _Attribution | None,
              statement: str) -> None:
    document = ctx.model.text
    unit = sentence.unit
    edits: list[_Edit] = []
    evidence: list[tuple[int, int]] = []
    flags: list[tuple[str, str]] = []
    subject_text = part.subject
    edits.extend(part.edits)

    # 1. references: pronouns
    resolution = _resolve_pronouns(ctx, sentence, part)
    if isinstance(resolution, str):
        ctx.decide("claimify_omitted", "unresolved_reference", part.start, part.end, resolution)
        return
    edits.extend(resolution)
    if subject_text is not None and _LEADING_PRONOUN_RE.fullmatch(subject_text):
        assert part.subject_span is not None
        replaced = _resolve_subject_pronoun(ctx, sentence, part.subject_span)
        if replaced is None:
            ctx.decide("claimify_omitted", "unresolved_reference", part.start, part.end, subject_text)
            return
        subject_text, subject_evidence = replaced
        evidence.extend(subject_evidence)
        if part.subject == "I":
            edits.extend(_conjugation_edit(document, part.start, part.end))
    # 2. references: a partial reference the title completes
    edits.extend(_title_expansions(ctx, part, edits))
    if ctx.parsed:
        edits.extend(_first_name_expansions(ctx, sentence, part, edits))
        edits.extend(_role_expansions(ctx, sentence, part, edits))
    # 3. dates
    anchor, anchor_span = _anchor_for(ctx, sentence)
    weekdays = _weekday_tenses(document, sentence, part.start, part.end) if ctx.parsed and anchor is not None \
        else None
    dated_by = (anchor_span,) if anchor_span is not None else ()  # the evidence of a resolved date
    text = document[part.start:part.end]
    expressions = [e for e in timeparse.find_time_expressions(text, anchor, weekdays)]
    measured = _possessive_measures(text, expressions)
    if any(not e.resolved and e.text in timeparse.WEEKDAY_NAMES for e, _ in measured) and anchor is not None:
        # the weekday of a figure said in the past is the one before ("Sunday's delay was …")
        weekdays = {**(weekdays or {}), **{e.start: -1 for e, m in measured
                                           if m.group("verb") not in _PRESENT_MEASURE_VERBS}}
        expressions = [e for e in timeparse.find_time_expressions(text, anchor, weekdays)]
        measured = _possessive_measures(text, expressions)
    timed = {id(e) for e, _ in measured}  # dates that are the statement's time, though they look like names
    for e, m in measured:
        if e.resolved and e.replacement is not None:
            when = e.replacement if _bare_date(e.replacement) != e.replacement else \
                f"{'on' if e.precision == 'day' else 'in'} {e.replacement}"
            edits.append(_Edit(part.start + e.start, part.start + m.end("noun"), f"The {m.group('noun')} {when}",
                               "date_resolved", f"{e.text}'s {m.group('noun')} -> the {m.group('noun')} {when}",
                               dated_by))
    for e in [e for e in expressions if _COMPARED_WITH_RE.search(text[:e.edit_start])]:
        # "up 12 percent on last year": the time compared with, not the statement's
        expressions.remove(e)
        if e.resolved and e.replacement is not None:
            edits.append(_Edit(part.start + e.edit_start, part.start + e.edit_end, _bare_date(e.replacement),
                               "date_resolved", f"{e.text} -> {e.replacement}", dated_by))
    for e in expressions:
        preposition = _FOR_BEFORE_RE.search(text, 0, e.start)
        if preposition is not None and e.resolved and e.replacement is not None and anchor is not None \
                and e.valid_until is not None and e.valid_until.date() < anchor and _PAST_COPULA_RE.match(text, e.end):
            # "the milk price for January was 41.2 pence": a figure of a period already over was
            # measured over it, not the name of a target ("the storage budget for Q4 is …")
            edits.append(_Edit(part.start + preposition.start(1), part.start + e.edit_end,
                               f"in {_bare_date(e.replacement)}", "date_resolved",
                               f"for {e.text} -> in {e.replacement}", dated_by))
            timed.add(id(e))
    if not ctx.speaker_prefix:
        named = [e for e in expressions if _date_as_modifier(text, e) and id(e) not in timed]
        expressions = [e for e in expressions if e not in named]
        for e in named:  # "the budget for Q4" is the budget for Q4 2026: completed, but no window
            if e.resolved and e.replacement is not None and e.start == e.edit_start and not _MODIFIER_BEFORE_RE.search(
                    document[part.start:part.start + e.start]) and not _POSSESSIVE_AFTER_RE.match(
                    document, part.start + e.end):
                edits.append(_Edit(part.start + e.edit_start, part.start + e.edit_end, e.replacement, "date_resolved",
                                   f"{e.text} -> {e.replacement}", dated_by))
    chosen = None
    resolved = [e for e in expressions if e.resolved]
    if resolved:
        # a deictic phrase needs the anchor most; then a phrase with its own preposition or range ("by
        # October", "from June to October") over a bare modifier ("the Q3 budget").
        # A date inside a relative clause ("Hugo, who joined in April, took over … on 25 May") is that
        # clause's time, not the statement's, when the main clause has its own.
        inside = _subordinate_spans(document[part.start:part.end]) if len(resolved) > 1 else []
        chosen = max(resolved, key=lambda e: (not any(a <= e.start < b for a, b in inside), e.deictic,
                                              e.start < e.edit_start, -e.start))
    for expression in expressions:
        if expression is chosen:
            continue
        if expression.deictic:
            flags.append(("unresolved_date", expression.text))
    valid_from = valid_until = None
    precision, kind = "unknown", None
    if chosen is None and not expressions and ctx.parsed:
        dated = _dated_section(ctx, sentence, statement) or _lead_in_day(ctx, sentence, statement)
        if dated is not None:  # "## 4.2.0 (2026-06-15)" / "- The timeout was raised to 45 seconds."
            valid_from = valid_until = datetime(dated.year, dated.month, dated.day, tzinfo=UTC)
            precision, kind = "day", "event_time"
    if chosen is not None:
        valid_from, valid_until, precision, kind = chosen.valid_from, chosen.valid_until, chosen.precision, chosen.kind
        if kind == "event_time" and precision in ("month", "quarter", "year"):
            outside = document[part.start:part.end]
            outside = outside[:chosen.start] + outside[chosen.end:]
            # "cut the spend from 42,000 USD to 35,000 USD in August": a change of state, not a measurement
            if re.search(r"\d", outside) and _MEASUREMENT_RE.search(outside) and not (
                    _FROM_TO_RE.search(outside) and not _MEASURED_CHANGE_RE.search(outside)):
                kind = "measurement_period"
        if chosen.replacement is not None:
            edit = _Edit(part.start + chosen.edit_start, part.start + chosen.edit_end, chosen.replacement,
                         "date_resolved", f"{chosen.text} -> {chosen.replacement}",
                         dated_by)
            if not any(_overlaps(edit, other) for other in edits):
                edits.append(edit)
    # 4. the shorthand of notes spelled out ("Vestby Hotels acct", "IT mgr at Kestrel Optics")
    shorthand = [_Edit(m.start(), m.end(), _SHORTHAND[m.group()], "reference_expanded",
                       f"{m.group()} -> {_SHORTHAND[m.group()]}")
                 for m in _SHORTHAND_RE.finditer(document, part.start, part.end)]
    # "Health moved Green → Amber": a change written with an arrow is one from the first to the second
    shorthand += [_Edit(m.start(), m.end(), f"from {m.group('was')} to ", "reference_expanded",
                        f"{m.group().strip()} -> from {m.group('was')} to")
                  for m in _ARROW_RE.finditer(document, part.start, part.end)]
    edits.extend(edit for edit in shorthand if not any(_overlaps(edit, other) for other in edits))
    # "Health moved Green → Amber" in a record's notes: the record's health (as its fields are)
    field = _BARE_FIELD_RE.match(document, part.start, part.end) if ctx.parsed and not part.subject else None
    record = _heading_subject(ctx, sentence.start) if field is not None else None
    if field is not None and record is not None and _names_a_thing(record[0]):
        word = field.group("field")
        edit = _Edit(field.start(), field.end(), f"The {record[0]} {word if word.isupper() else word.lower()}",
                     "subject_copied", f"{word} -> the {record[0]} {word.lower()}", (record[1],))
        if not any(_overlaps(edit, other) for other in edits):
            edits.append(edit)
    # 5. build the text
    body = _apply_edits(document, part.start, part.end, edits)
    content = f"{subject_text} {body}" if subject_text else body
    if part.subject_span is not None:
        evidence.append(part.subject_span)
        ctx.decide("decontext_edit", "subject_copied", part.start, part.end,
                   f"{part.subject} (from the same sentence)")
    attributed_to: str | None = None
    is_attributed = False
    if attribution is not None:
        is_attributed = True
        holder = attribution.holder_text
        if holder in ("I",) and unit.speaker:
            holder = unit.speaker
        elif holder.lower() in ("he", "she", "we", "they"):
            holder = _first_replacement(edits, attribution.holder_span) or holder
        attributed_to = holder
    if unit.speaker is not None:
        is_attributed = True
        own_statement = attribution is not None and attribution.holder_text == "I"
        if not own_statement and ctx.speaker_prefix:
            content = f"{unit.speaker} said that {_decapitalise(content)}"
            ctx.decide("decontext_edit", "speaker_attributed", part.start, part.end,
                       f"turn by {unit.speaker}")
        attributed_to = unit.speaker
        if unit.speaker_span is not None:
            evidence.append(unit.speaker_span)
    claim_text = _finalise(content)

    for edit in edits:
        ctx.decide("decontext_edit", edit.reason, edit.start, edit.end, edit.detail)
        evidence.extend(edit.evidence)
    if _HEDGE_RE.search(statement):
        flags.append(("hedged", statement[:200]))
    for reason, detail in flags:
        ctx.decide("selection_keep_flagged", reason, part.start, part.end, detail)

    origin = (part.start, part.end)
    spans: list[EvidenceSpan] = [EvidenceSpan(*origin)]
    for span in evidence:
        if span[1] <= span[0] or (origin[0] <= span[0] and span[1] <= origin[1]):
            continue
        candidate = EvidenceSpan(*span)
        if candidate not in spans:
            spans.append(candidate)
    source_span = document[part.start:part.end]
    ctx.drafts.append(ClaimDraft(
        claim_text=claim_text,
        source_span=source_span,
        char_start=part.start,
        char_end=part.end,
        evidence_spans=tuple(spans),
        is_attributed=is_attributed,
        attributed_to=attributed_to,
        added_context=_added_words(claim_text, source_span),
        temporal_class=_temporal_class(_content_text(document, part, attribution), precision),
        valid_from=valid_from,
        valid_until=valid_until,
        valid_precision=precision,
        valid_kind=kind,
        kept_flagged=bool(flags),
    ))


# a record's field named bare at the start of a note about the record ("Priority raised to P1",
# "Health moved Green → Amber", "ACV cut to 262,000 GBP"): a one-word key that names a value, a
# graded noun, or a recurring-revenue figure
_METRIC_ACRONYMS = frozenset({"ACV", "ARR", "MRR", "TCV"})
_BARE_FIELDS = sorted({k for k in _VALUE_KEYS if " " not in k} | GRADED_HEADS, key=len, reverse=True)
_BARE_FIELD_RE = re.compile(rf"(?P<field>(?i:{'|'.join(_BARE_FIELDS)})|{'|'.join(_METRIC_ACRONYMS)})"
                            r"(?=\s+(?!of\b|is\b|was\b|to\b)[a-z])")  # not "Plan to hire …"
_ARROW_RE = re.compile(r"(?<![\w£$€.,])(?P<was>(?:\d[\d.,]*\s+)?[\w£$€][\w£$€.,%-]*)\s*(?:→|->)\s*(?=[\w£$€])")


def _overlaps(a: _Edit, b: _Edit) -> bool:
    return a.start < b.end and b.start < a.end


def _first_replacement(edits: Sequence[_Edit], span: tuple[int, int]) -> str | None:
    for edit in edits:
        if edit.start == span[0] and edit.end == span[1]:
            return edit.replacement
    return None


def _apply_edits(document: str, start: int, end: int, edits: Sequence[_Edit]) -> str:
    pieces: list[str] = []
    cursor = start
    for edit in sorted(edits, key=lambda e: e.start):
        if edit.start < cursor:
            continue
        pieces.append(document[cursor:edit.start])
        pieces.append(edit.replacement)
        cursor = edit.end
    pieces.append(document[cursor:end])
    return "".join(pieces)


def _clean_markdown(text: str) -> str:
    text = _QUOTE_CONTINUATION_RE.sub(" ", text)
    text = _MARKDOWN_LINK_RE.sub(r"\1", text)
    return _MARKDOWN_EMPHASIS_RE.sub("", text)


def _decapitalise(text: str) -> str:
    words = text.split(" ", 1)
    if words and words[0].lower() in _DECAP_WORDS and words[0] != "I":
        return text[:1].lower() + text[1:]
    return text


def _finalise(content: str) -> str:
    text = _normalise_space(_clean_markdown(content))
    text = text.rstrip(",;:—–- ")
    if text and text[-1] not in ".!?\"'’”)":
        text += "."
    if text and text[0].islower():
        text = text[0].upper() + text[1:]
    return text


def _added_words(claim_text: str, source_span: str) -> tuple[str, ...]:
    source = {_strip_possessive(w).lower() for w in _tokens(source_span)}
    added: list[str] = []
    for word in _tokens(claim_text):
        key = _strip_possessive(word).lower()
        if key not in source and word not in added:
            added.append(word)
    return tuple(added)


def _content_text(document: str, part: _Part, attribution: _Attribution | None) -> str:
    """The asserted content of a part, without its attribution frame ("Ravi said", ", Dana said")."""
    text = document[part.start:part.end]
    if attribution is None:
        return text
    if attribution.content_start > part.start:
        return document[attribution.content_start:part.end]
    trailing = _ATTR_TRAILING_RE.match(text)
    return trailing.group("content") if trailing else text


def _temporal_class(content: str, precision: str) -> str:
    """static: a dated or finished event; dynamic: a state or plan that can change; atemporal: a definition."""
    if _ATEMPORAL_RE.search(content) and precision == "unknown":
        return "atemporal"
    if precision == "open":
        return "dynamic"
    if _PAST_RE.search(content) and not re.search(r"\b(?:will|is|are|am|has|have|owns|leads|needs)\b", content,
                                                   re.IGNORECASE):
        return "static"
    return "dynamic"


# --------------------------------------------------------------------------- reference resolution


_RELATIVE_ANTECEDENT_RE = re.compile(r"\b([A-Z][\w'’-]+(?:\s+[A-Z][\w'’-]+){0,3}),\s+who\b[^,;:.!?()]*$")


_OPENING_IT_RE = re.compile(r"^\W*(?:it|it['’]s|its)\b", re.IGNORECASE)


def _continued_it(ctx: _Context, sentence: _Sentence, start: int) -> tuple[str, tuple[int, int]] | None:
    """"The notifications-service is owned by Team Pulse. It depends on RabbitMQ and the
    templates-service. It is hosted in Frankfurt.": an "It" opening a sentence after one that
    opened with "It" goes on about the same thing, not the nearest noun before it."""
    document = ctx.model.text
    if not _OPENING_IT_RE.match(document[sentence.start:start + 4]) or document[sentence.start:start].strip(" *-"):
        return None
    index = sentence.index
    while index > 0 and _OPENING_IT_RE.match(document[ctx.model.sentences[index - 1].start:]):
        index -= 1
    if index == sentence.index or index == 0:
        return None
    opening = ctx.model.sentences[index]
    return _unique_definite_np(ctx, opening, opening.start)


def _possessor_subject(document: str, part: _Part, start: int) -> tuple[str, tuple[int, int]] | None:
    """"Blood Sciences uses WinPath as its laboratory system", "Osteria Lume gets its truffles
    from …": a possessive "its" is bound by the subject of its own clause when that subject
    is a named thing (not a person, not a pronoun) written before it."""
    from services.pipeline.domain import nlp

    doc = nlp.parse(document[part.start:part.end])
    token = next((t for t in doc if t.idx == start - part.start), None)
    if token is None or token.dep_ != "poss":
        return None
    verb = token.head
    while verb.pos_ not in ("VERB", "AUX") and verb.head.i != verb.i:
        verb = verb.head
    subject = next((c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass")), None)
    if subject is None or subject.i > token.i or subject.pos_ != "PROPN" or subject.ent_type_ == "PERSON":
        return None
    first = subject  # the name's own words: its compounds, not a date the parser hung on it
    while first.i > 0 and doc[first.i - 1].head.i in (subject.i, first.i) and doc[first.i - 1].dep_ == "compound" \
            and doc[first.i - 1].ent_type_ not in ("DATE", "TIME"):
        first = doc[first.i - 1]
    begin, finish = part.start + first.idx, part.start + subject.idx + len(subject.text)
    return document[begin:finish], (begin, finish)


# reflexives other than the speaker's: each is its own clause's subject, said there in words
_BOUND_REFLEXIVES = frozenset({"himself", "herself", "itself", "themselves", "ourselves", "yourself"})


def _relative_antecedent(document: str, sentence: _Sentence, start: int) -> tuple[str, tuple[int, int]] | None:
    """"replacing Marco Bellini, who is now writing up his thesis": a pronoun inside a "who"
    clause is the person the clause is about."""
    match = _RELATIVE_ANTECEDENT_RE.search(document, sentence.start, start)
    if match is None:
        return None
    return match.group(1), (match.start(1), match.end(1))


def _resolve_pronouns(ctx: _Context, sentence: _Sentence, part: _Part) -> list[_Edit] | str:
    """Edits that replace every pronoun in the part, or the pronoun that could not be resolved."""
    document = ctx.model.text
    text = document[part.start:part.end]
    edits: list[_Edit] = []
    if part.start == sentence.start and _DEMONSTRATIVE_SUBJECT_RE.match(text):
        return text.split()[0]
    frame = _CORRECTION_FRAME_RE.match(text)
    for match in _PRONOUN_RE.finditer(text, frame.end() if frame else 0):
        word = match.group(1)
        lowered = word.lower().replace("’", "'")
        if lowered in ("im", "ive"):  # "im on the netcode team now": chat leaves out the apostrophe
            if sentence.unit.speaker is None:
                continue
            lowered = {"im": "i'm", "ive": "i've"}[lowered]
        start, end = part.start + match.start(1), part.start + match.end(1)
        following = _tokens(text[match.end(1):match.end(1) + 40])
        next_word = following[0] if following else None
        base = lowered.split("'")[0]
        if base in _BOUND_REFLEXIVES and _tokens(text[:match.start(1)]):
            continue  # "the dryer should pay for itself": bound by its own clause, which says what it is
        if base in ("i", "me", "my", "mine", "myself"):
            speaker = sentence.unit.speaker
            if speaker is None:
                return word
            replacement = _contracted(speaker, lowered, next_word, possessive=base in ("my", "mine"))
            edits.append(_Edit(start, end, replacement, "pronoun_resolved", f"{word} -> {speaker}",
                               (sentence.unit.speaker_span,) if sentence.unit.speaker_span else ()))
            if lowered == "i":
                edits.extend(_conjugation_edit(document, end, part.end))
        elif base in ("we", "us", "our", "ours", "ourselves"):
            group = ctx.model.participants
            speaker = sentence.unit.speaker
            if len(group) < 2 and ctx.parsed and speaker is not None:
                # "we use Terraform" in a turn, with no participant list: the speaker says it of
                # their side, so the speaker holds it
                replacement = _contracted(speaker, lowered, next_word, possessive=base in ("our", "ours"))
                edits.append(_Edit(start, end, replacement, "pronoun_resolved", f"{word} -> {speaker}",
                                   (sentence.unit.speaker_span,) if sentence.unit.speaker_span else ()))
                if lowered == "we":
                    edits.extend(_conjugation_edit(document, end, part.end))
                continue
            if len(group) < 2:
                if ctx.keep_unresolved_we and base in ("we", "our", "us", "ours"):
                    continue
                return word
            names = _join_names(group)
            replacement = _contracted(names, lowered, next_word, possessive=base in ("our", "ours"), plural=True)
            if base == "our":
                # "Our route planner uses OptiRoute" in a meeting's notes: the team's, not each
                # attendee's ("Rukmini, Tomasz and Efua's route planner" reads as three owners)
                replacement = "The" if word[:1].isupper() else "the"
            edits.append(_Edit(start, end, replacement, "pronoun_resolved", f"{word} -> {names}",
                               (ctx.model.participants_span,) if ctx.model.participants_span else ()))
        elif base in ("he", "him", "his", "himself", "she", "her", "hers", "herself"):
            objective = base == "him" or (base == "her" and (next_word is None or not next_word.islower()
                                                             or next_word in _FUNCTION_WORDS))
            # "Wiebke handed it over to him": an object pronoun is not its own clause's subject
            person = _relative_antecedent(document, sentence, start) or _unique_person_before(
                ctx, sentence, start, clause_start=part.start if objective else None)
            if person is None:
                return word
            name, span = person
            if objective and ctx.parsed and _same_as_its_subject(ctx, sentence, start, name, edits):
                return word  # "she thanked him", both read as Tom Reyes: one of them is wrong
            possessive = base in ("his", "hers") or (
                base == "her" and next_word is not None and next_word.islower() and next_word not in _FUNCTION_WORDS
                and next_word not in _AUX)
            replacement = _contracted(name, lowered, next_word, possessive=possessive)
            edits.append(_Edit(start, end, replacement, "pronoun_resolved", f"{word} -> {name}", (span,)))
        elif base in ("it", "its", "itself"):
            if base == "it" and _EXPLETIVE_IT_RE.match(text[match.end(1) - (2 if "'" in lowered else 0):]):
                continue
            antecedent = (_continued_it(ctx, sentence, start) if ctx.parsed else None) or _unique_definite_np(
                ctx, sentence, start) or (_possessor_subject(document, part, start) if base == "its" and ctx.parsed
                                          else None)
            if antecedent is None:
                return word
            noun, span = antecedent
            replacement = _contracted(noun, lowered, next_word, possessive=base == "its")
            edits.append(_Edit(start, end, replacement, "pronoun_resolved", f"{word} -> {noun}", (span,)))
        elif base in ("you", "your", "yours", "yourself") and not ctx.speaker_prefix:
            other = _other_party(ctx, sentence)
            if sentence.unit.speaker is None and base in ("your", "yours"):
                other = None  # "your renewal date" in a letter stays the reader's, as written
            if other is None and base == "your" and ctx.keep_unresolved_we:
                continue  # "your renewal date" in a letter: the reader's, kept as written
            if other is None:
                return word
            replacement = _contracted(other, lowered, next_word, possessive=base in ("your", "yours"))
            greeted = ctx.model.addressee if sentence.unit.speaker is None else None
            where = greeted[1] if greeted is not None else ctx.model.participants_span
            edits.append(_Edit(start, end, replacement, "pronoun_resolved", f"{word} -> {other}",
                               (where,) if where else ()))
            if lowered == "you":
                edits.extend(_agreement_edit(document, end, part.end) or _conjugation_edit(document, end, part.end))
        elif base in ("they", "them") and ctx.parsed and (
                pair := _both_of(ctx, sentence, part.start + match.start(1), part.start + match.end(1))) is not None:
            # "Both of them report to me", "They both joined in May": the people the sentence
            # before joins with "and"
            (names, span), (start, end) = pair
            edits.append(_Edit(start, end, names, "pronoun_resolved", f"{document[start:end]} -> {names}", (span,)))
        elif base in ("they", "them", "their", "theirs") and ctx.parsed and (
                customer := _customer_record(ctx, sentence.start)) is not None:
            # "They're still on the Fleet Pro plan" in an account's notes: the customer
            name, span = customer
            replacement = _contracted(name, lowered, next_word, possessive=base in ("their", "theirs"), plural=True)
            edits.append(_Edit(start, end, replacement, "pronoun_resolved", f"{word} -> {name}", (span,)))
        else:
            return word
    return edits


_BOTH_BEFORE_RE = re.compile(r"(?:\b(?:both|all|each)\s+of\s+)$", re.IGNORECASE)
_BOTH_AFTER_RE = re.compile(r"^\s+(?:both|all)\b", re.IGNORECASE)
_CONJOINED_NAMES_RE = re.compile(rf"(?<![\w'’])({_NAME}(?:,\s+{_NAME})*,?\s+and\s+{_NAME})(?![\w'’])")


def _both_of(ctx: _Context, sentence: _Sentence, start: int, end: int
             ) -> tuple[tuple[str, tuple[int, int]], tuple[int, int]] | None:
    """"Both of them" / "they both" after a sentence that names people joined by "and": those
    people (one group only), and the span the names replace ("Both of them", "they both")."""
    document = ctx.model.text
    before = _BOTH_BEFORE_RE.search(document, sentence.start, start)
    after = _BOTH_AFTER_RE.match(document[end:end + 12])
    if (before is None) == (after is None) or sentence.index == 0:
        return None
    previous = ctx.model.sentences[sentence.index - 1]
    groups = [m for m in _CONJOINED_NAMES_RE.finditer(document, previous.start, previous.end)
              if all(n.split()[0] not in _CAPITALISED_STOP for n in re.split(r",\s+|,?\s+and\s+", m.group(1)))]
    if len(groups) != 1:
        return None
    group = groups[0]
    span = (before.start(), end) if before is not None else (start, end + after.end())  # type: ignore[union-attr]
    return (group.group(1), (group.start(1), group.end(1))), span


# the kinds of record whose notes say "they" of the organisation they are about
_CUSTOMER_KINDS = frozenset("account customer client company vendor supplier partner prospect".split())


def _customer_record(ctx: _Context, position: int) -> tuple[str, tuple[int, int]] | None:
    """The organisation an account's or customer's notes are about ("# Acct: Halvorsen Freight")."""
    found = _last_heading(ctx, position)
    kind = _KIND_HEADING_RE.match(found[0]) if found is not None else None
    if kind is None or _field_key(kind.group(1)) not in _CUSTOMER_KINDS:
        return None
    return _heading_subject(ctx, position)


def _other_party(ctx: _Context, sentence: _Sentence) -> str | None:
    """"you" in a two-person chat: the party who is not speaking; in a letter, whom it greets."""
    speaker = sentence.unit.speaker
    if speaker is None:
        return ctx.model.addressee[0] if ctx.parsed and ctx.model.addressee is not None else None
    parties = {p.split()[0]: p for p in ctx.model.participants}
    for other in ctx.model.sentences:
        if other.unit.speaker:
            parties.setdefault(other.unit.speaker.split()[0], other.unit.speaker)
    parties.pop(speaker.split()[0], None)
    return next(iter(parties.values())) if len(parties) == 1 else None


_YOU_VERBS = {"are": "is", "were": "was", "have": "has", "aren't": "isn't", "weren't": "wasn't", "haven't": "hasn't"}


def _agreement_edit(document: str, after: int, limit: int) -> list[_Edit]:
    match = _TOKEN_RE.search(document, after, limit)
    if match is None or match.group().lower() not in _YOU_VERBS:
        return []
    word = match.group()
    return [_Edit(match.start(), match.end(), _YOU_VERBS[word.lower()], "pronoun_resolved", f"{word} -> "
                  f"{_YOU_VERBS[word.lower()]}")]


def _resolve_subject_pronoun(ctx: _Context, sentence: _Sentence,
                             span: tuple[int, int]) -> tuple[str, list[tuple[int, int]]] | None:
    word = ctx.model.text[span[0]:span[1]]
    lowered = word.lower()
    if lowered == "i" and sentence.unit.speaker:
        return sentence.unit.speaker, [sentence.unit.speaker_span] if sentence.unit.speaker_span else []
    if lowered == "we" and len(ctx.model.participants) >= 2:
        return _join_names(ctx.model.participants), [ctx.model.participants_span] if ctx.model.participants_span else []
    if lowered in ("he", "she"):
        person = _unique_person_before(ctx, sentence, span[0])
        if person is not None:
            return person[0], [person[1]]
    if lowered == "it":
        antecedent = _unique_definite_np(ctx, sentence, span[0])
        if antecedent is not None:
            return antecedent[0], [antecedent[1]]
    return None


def _contracted(base: str, pronoun: str, next_word: str | None, *, possessive: bool = False,
                plural: bool = False) -> str:
    if possessive:
        return f"{base}'s"
    if "'" not in pronoun:
        return base
    suffix = pronoun.split("'", 1)[1]
    if suffix == "m":
        return f"{base} is"
    if suffix == "re":
        return f"{base} {'are' if plural else 'is'}"
    if suffix == "ve":
        return f"{base} {'have' if plural else 'has'}"
    if suffix == "ll":
        return f"{base} will"
    if suffix == "d":
        return f"{base} would"
    # 's: "is" or "has"
    if next_word is not None and (next_word.lower() in ("been", "got") or next_word.lower().endswith("ed")):
        return f"{base} has"
    return f"{base} is"


def _conjugation_edit(document: str, after: int, limit: int) -> list[_Edit]:
    """Make the verb after a first-person subject agree with a third-person name ("I think" -> "thinks")."""
    for match in _TOKEN_RE.finditer(document, after, limit):
        word = match.group()
        if word.lower() in _ADVERBS:
            continue
        if not word.islower() and word.lower() not in ("don't", "don’t"):
            return []
        conjugated = _third_person(word)
        if conjugated == word:
            return []
        return [_Edit(match.start(), match.end(), conjugated, "pronoun_resolved", f"{word} -> {conjugated}")]
    return []


def _unique_person_before(ctx: _Context, sentence: _Sentence, position: int,
                          clause_start: int | None = None) -> tuple[str, tuple[int, int]] | None:
    """The one person named in the passage before ``position``; None when there is none or more than one.

    In a conversation the other speakers and participants also count as candidates (a "she" may be one
    of them), so a pronoun resolves only when the text names exactly one person and nobody else is in play.
    """
    passage = ctx.item.passage
    # "I report to Hamid Rahimi, he runs the platform group": a later clause's pronoun takes the
    # one person its own sentence named before it
    own = {m[2].split()[0]: m for m in _person_mentions(ctx.model, sentence.start, position, sentence.start)}
    if len(own) > 1 and clause_start is not None and clause_start > sentence.start:
        own = {k: m for k, m in own.items() if m[0] < clause_start}  # an object pronoun's clause subject is not it
    if len(own) > 1 and clause_start is not None and ctx.parsed:
        # "…, and Ben Cartwright now works on it with her": nor is the subject of its own verb
        own_subject = _clause_subject_span(ctx.model.text, sentence.start, sentence.end, position)
        if own_subject is not None:
            own = {k: m for k, m in own.items() if not (own_subject[0] <= m[0] < own_subject[1])}
    if len(own) > 1:  # "Noah Berg joined Kestrel Labs …, and he …": the names the parse calls people
        own = {k: m for k, m in own.items() if _parsed_person(ctx.model.text, sentence.start, m)}
    if len(own) == 1 and position > sentence.start:
        start, end, name = next(iter(own.values()))
        if not sentence.unit.speaker or name.split()[0] != sentence.unit.speaker.split()[0]:
            return name, (start, end)
    names: dict[str, tuple[str, tuple[int, int]]] = {}
    last: list[tuple[int, int, str]] = []
    last_sentence: _Sentence | None = None
    for other in ctx.model.sentences:
        if other.start >= position:
            break
        if other.start < passage.char_start or other.end > passage.char_end:
            continue
        mentions = _person_mentions(ctx.model, other.start, min(other.end, position), other.start)
        if other.end <= position:
            last, last_sentence = mentions, other
        for start, end, name in mentions:
            names[name.split()[0]] = (name, (start, end))
    if len(names) > 1 and last_sentence is not None and _QUESTION_END_RE.search(
            ctx.model.text[last_sentence.start:last_sentence.end]):
        # "is Marco leaving the company?" / "no, he joined the risk team": the answer's pronoun
        # is the one person the question just asked about
        asked = {m[2].split()[0]: m for m in last}
        if len(asked) == 1:
            start, end, name = next(iter(asked.values()))
            return name, (start, end)
    if len(names) > 1 and last_sentence is not None:
        # several names ("Yuki Mori joined Brightwave …. She …"): a subject pronoun continues the
        # previous sentence's grammatical subject when that subject is one of them
        subject = _parsed_subject(ctx.model.text, last_sentence.start, last_sentence.end)
        chosen = [m for m in last if subject is not None and m[0] <= subject < m[1]]
        names = {chosen[0][2].split()[0]: (chosen[0][2], (chosen[0][0], chosen[0][1]))} if chosen else names
    if len(names) != 1:
        return None
    speaker = sentence.unit.speaker
    if speaker is not None:
        others = {p.split()[0] for p in ctx.model.participants} | {
            s.unit.speaker.split()[0] for s in ctx.model.sentences
            if s.unit.speaker and passage.char_start <= s.start < passage.char_end}
        others.discard(speaker.split()[0])
        if others - set(names):
            return None
    return next(iter(names.values()))


def _first_person_word(document: str, sentence_start: int, mention: tuple[int, int, str]) -> int | None:
    """Where the first word of ``mention`` the English parse of its sentence (up to the
    mention's end) tags a person starts, or None."""
    from services.pipeline.domain import nlp

    doc = nlp.parse(document[sentence_start:mention[1]])
    return next((sentence_start + t.idx for t in doc if t.idx >= mention[0] - sentence_start
                 and t.ent_type_ == "PERSON"), None)


def _parsed_person_span(document: str, sentence_start: int, mention: tuple[int, int, str]
                        ) -> tuple[int, int, str] | None:
    """The part of a name at a sentence's start the parse calls a person, from its first word
    tagged so ("Call Dana Cole" -> "Dana Cole"), if two words or more."""
    start = _first_person_word(document, sentence_start, mention)
    name = document[start:mention[1]] if start is not None else ""
    return (start, mention[1], name) if start is not None and len(name.split()) >= 2 else None


def _parsed_person(document: str, sentence_start: int, mention: tuple[int, int, str]) -> bool:
    """Does the English parse of the sentence up to the mention's end tag the mention a person?"""
    from services.pipeline.domain.reading import ORG_WORDS

    if mention[2].split()[-1].lower() in ORG_WORDS:
        return False  # "Kestrel Labs", which the small model tags a person
    return _first_person_word(document, sentence_start, mention) is not None


def _same_as_its_subject(ctx: _Context, sentence: _Sentence, position: int, name: str,
                         edits: Sequence[_Edit]) -> bool:
    """Whether an object pronoun at ``position`` would name the person its own clause's
    subject is, as written or as a pronoun already resolved."""
    subject = _clause_subject_span(ctx.model.text, sentence.start, sentence.end, position)
    if subject is None:
        return False
    said = ctx.model.text[subject[0]:subject[1]]
    return name in said or any(subject[0] <= e.start < subject[1] and name in e.replacement for e in edits)


def _clause_subject_span(document: str, start: int, end: int, position: int) -> tuple[int, int] | None:
    """Offsets of the subject of the verb that governs the word at ``position`` in
    ``document[start:end]`` (one sentence), from the English parse."""
    from services.pipeline.domain import nlp

    doc = nlp.parse(document[start:end])
    token = next((t for t in doc if t.idx == position - start), None)
    while token is not None and token.pos_ not in ("VERB", "AUX") and token.head is not token:
        token = token.head
    subject = None if token is None else next(
        (t for t in token.children if t.dep_ in ("nsubj", "nsubjpass")), None)
    if subject is None:
        return None
    return start + subject.left_edge.idx, start + subject.right_edge.idx + len(subject.right_edge.text)


def _parsed_subject(document: str, start: int, end: int) -> int | None:
    """Offset of the main clause's subject in ``document[start:end]``, from the English parse."""
    from services.pipeline.domain import nlp

    doc = nlp.parse(document[start:end])
    for sentence in doc.sents:
        subject = next((t for t in sentence.root.children if t.dep_ in ("nsubj", "nsubjpass")), None)
        if subject is not None and subject.pos_ == "PROPN":
            return start + subject.idx
        return None
    return None


def _definite_nps(document: str, start: int, end: int, *, named: bool = False) -> list[tuple[str, tuple[int, int]]]:
    found = []
    for match in (_DEFINITE_NAMED_NP_RE if named else _DEFINITE_NP_RE).finditer(document, start, end):
        words = list(re.finditer(r"\S+", match.group(1)))
        if named:  # "the Atlas service is maintained": the noun phrase ends before the verb
            cut = next((i for i, w in enumerate(words) if w.group() in _AUX), len(words))
            words = words[:cut]
            if not words or not words[-1].group()[:1].islower():
                continue
        if any(w.group() in _FUNCTION_WORDS or w.group() in _AUX for w in words):
            continue
        while len(words) > 1 and words[-1].group() in _TRAILING_ADVERBS:
            words = words[:-1]  # "the pricing experiment now, …": the adverb is no part of the noun phrase
        following = document[match.end():match.end() + 2]
        if len(words) > 1 and _is_verbish(words[-1].group()) and following[:1] == " " and following[1:2].isalpha():
            # "the billing migration moves in Q2": the last word is the verb, not part of the noun phrase
            words = words[:-1]
        elif len(words) > 1 and _is_strong_verb(words[-1].group()) and following[:1] in (".", "!", "?", ";", ""):
            words = words[:-1]  # "The export job failed.": a past verb that ends the sentence
        np_end = match.start(1) + words[-1].end()
        found.append(("the " + " ".join(w.group() for w in words), (match.start(), np_end)))
    return found


_TRAILING_ADVERBS = frozenset("now today again too also still already yet anymore soon".split())


# Heads that name a person's role: "it" never refers to them ("the owner of the checklist … owns it").
_ROLE_HEADS = frozenset("""owner owners lead leads leader head manager director chair sponsor maintainer engineer
engineers member members person people team""".split())


_FRONTED_PHRASE_RE = re.compile(r"(?:under|in|at|on|for|by|with|after|before|during|over|behind|beyond|within"
                                r"|throughout|without|despite|since)\s+[^,.;:!?]*?,?\s*", re.IGNORECASE)


def _unique_definite_np(ctx: _Context, sentence: _Sentence, position: int) -> tuple[str, tuple[int, int]] | None:
    named = not ctx.speaker_prefix
    # "Under the hood it runs on Kafka": a noun in the phrase that opens the pronoun's own
    # clause is not what the pronoun stands for
    fronted = _FRONTED_PHRASE_RE.fullmatch(ctx.model.text[sentence.start:position]) is not None
    candidates = [] if fronted else [c for c in _definite_nps(ctx.model.text, sentence.start, position, named=named)
                                     if c[0].split()[-1] not in _ROLE_HEADS]
    if not candidates and sentence.index > 0:
        previous = ctx.model.sentences[sentence.index - 1]
        candidates = [c for c in _definite_nps(ctx.model.text, previous.start, previous.end, named=named)
                      if c[0].split()[-1] not in _ROLE_HEADS]
    distinct = {text for text, _ in candidates}
    if len(distinct) != 1:
        return None
    return candidates[-1]


_BARE_ROLE_RE = re.compile(r"\b(?:elected|appointed|named|made|became|becomes|become|as)\s+(?:the\s+)?(?:new\s+)?"
                           r"(chair|chairperson|head|lead|director|manager|coordinator|owner|captain|president"
                           r"|treasurer|secretary)\b(?!\s+(?:of|for)\b)", re.IGNORECASE)


def _role_expansions(ctx: _Context, sentence: _Sentence, part: _Part, existing: Sequence[_Edit]) -> list[_Edit]:
    """"Patrice stood down as chair of the board, and Kemi was elected chair": a role without
    its object, in a statement split from one that names it, is that role."""
    document = ctx.model.text
    edits: list[_Edit] = []
    for match in _BARE_ROLE_RE.finditer(document, part.start, part.end):
        role = match.group(1)
        named = re.search(rf"\b{role}\s+(of\s+(?:the\s+)?[^,.;:()]+?)(?=\s*[,.;:()]|\s+(?:on|in|from|since|until|"
                          rf"and|effective)\b|\s*$)", document[sentence.start:sentence.end], re.IGNORECASE)
        start, end = match.start(1), match.end(1)
        if named is None or any(e.start < end and start < e.end for e in existing):
            continue
        edits.append(_Edit(start, end, f"{role} {named.group(1)}", "reference_expanded",
                           f"{role} -> {role} {named.group(1)}",
                           ((sentence.start + named.start(), sentence.start + named.end()),)))
    return edits


def _first_name_expansions(ctx: _Context, sentence: _Sentence, part: _Part, existing: Sequence[_Edit]
                           ) -> list[_Edit]:
    """"Tomasz takes over the mobile team" after "Tomasz Wrobel has been promoted …": a first
    name alone is the one full name the document gave it before (not when it gave two)."""
    document = ctx.model.text
    if ctx.full_names is None:  # one line's words, not a heading and the line after it
        ctx.full_names = [m for m in map(_without_role, _person_mentions(ctx.model, 0, len(document), 0))
                          if 2 <= len(m[2].split()) <= 3 and m[2] == " ".join(m[2].split())]
    full: dict[str, set[str]] = {}
    spans: dict[str, tuple[int, int]] = {}
    for start, end, name in ctx.full_names:
        if start >= part.start:
            break
        full.setdefault(name.split()[0], set()).add(name)
        spans.setdefault(name, (start, end))
    edits: list[_Edit] = []
    for start, end, name in _person_mentions(ctx.model, part.start, part.end, sentence.start):
        if " " in name or any(e.start < end and start < e.end for e in existing):
            continue
        if document[end:end + 1] in ("-", "'", "’") or document[max(0, start - 1):start] in ("-", "@", "#"):
            continue
        names = full.get(name, set())
        if len(names) == 1:
            (whole,) = names
            edits.append(_Edit(start, end, whole, "reference_expanded", f"{name} -> {whole}", (spans[whole],)))
    # "Cllr Owusu chairs the committee" after "Present: Cllr Abena Owusu, …": a title and a
    # surname are the one full name the document gave that surname before
    by_surname: dict[str, set[str]] = {}
    for name in spans:
        if not _TITLED_SURNAME_RE.fullmatch(name):  # "Cllr Owusu" itself names no first name
            by_surname.setdefault(name.split()[-1], set()).add(name)
    for match in _TITLED_SURNAME_RE.finditer(document, part.start, part.end):
        start, end = match.span()
        names = by_surname.get(match.group(1), set())
        if len(names) == 1 and not any(e.start < end and start < e.end for e in [*existing, *edits]):
            (whole,) = names
            edits.append(_Edit(start, end, whole, "reference_expanded", f"{match.group()} -> {whole}",
                               (spans[whole],)))
    return edits


def _without_role(mention: tuple[int, int, str]) -> tuple[int, int, str]:
    """"Landlord Ms Petra Novak": the titled name, without the role said before its title."""
    start, end, name = mention
    if not role_before_title(name.split()):
        return mention
    role, _, rest = name.partition(" ")
    return start + len(role) + 1, end, rest


_TITLED_SURNAME_RE = re.compile(rf"(?<![\w'’])(?:{TITLE_PATTERN})\.?\s+([A-Z][\w'’-]+)(?![\w'’-]|\s+[A-Z])")


def _title_expansions(ctx: _Context, part: _Part, existing: Sequence[_Edit]) -> list[_Edit]:
    if not ctx.title:
        return []
    found = list(_TOKEN_RE.finditer(ctx.title))
    title_words = [m.group() for m in found]
    modifiers: dict[str, str] = {}
    counts: dict[str, int] = {}
    for word in title_words:
        counts[word.lower()] = counts.get(word.lower(), 0) + 1
    # words across a colon, comma or dash do not modify each other ("Incident review: checkout outage")
    segment_of = [len(re.findall(r"[:;,|()—–]|\s-\s", ctx.title[:m.start()])) for m in found]
    for index, word in enumerate(title_words[1:], start=1):
        previous = title_words[index - 1]
        if segment_of[index] != segment_of[index - 1]:
            continue
        if not word.isalpha() or not previous.isalpha() or counts[word.lower()] != 1:
            continue
        if previous.lower() in _FUNCTION_WORDS or previous in _MONTH_WORDS or previous in ctx.model.known_names:
            continue
        # the whole compound the previous word ends: "Cold-chain haulage" modifies by "cold-chain"
        first = index - 1
        while first > 0 and ctx.title[found[first - 1].end():found[first].start()] == "-":
            first -= 1
        if first > 0 and title_words[first][0].isupper():
            continue  # a proper noun inside the title
        modifiers[word.lower()] = ctx.title[found[first].start():found[index - 1].end()].lower()
    edits: list[_Edit] = []
    document = ctx.model.text
    for match in _TITLE_REFERENCE_RE.finditer(document, part.start, part.end):
        head = match.group(2)
        modifier = modifiers.get(head)
        if modifier is None:
            continue
        start, end = match.start(2), match.end(2)
        edit = _Edit(start, end, f"{modifier} {head}", "reference_expanded",
                     f"the {head} -> the {modifier} {head} (title)", (ctx.title_span,) if ctx.title_span else ())
        if not any(_overlaps(edit, other) for other in [*existing, *edits]):
            edits.append(edit)
    return edits
