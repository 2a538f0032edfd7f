"""The grounding gate: no claim text without a source.

A deterministic check (no model) applied to the output of ANY claim provider before
a claim is stored. It never edits a claim; it passes it, or rejects it with a
``grounding_rejected`` decision naming the failed check:

- ``span_outside_chunk``: the origin span is not inside the passage (or the document);
- ``source_span_mismatch``: ``source_span`` is not exactly ``document[char_start:char_end]``;
- ``evidence_out_of_bounds`` / ``evidence_origin_mismatch``: an evidence span is empty or
  outside the document, or the first evidence span is not the origin;
- ``invalid_time_window``: an unknown precision/kind, bounds that contradict the
  precision (unknown with bounds, open with an end), or a start after the end;
- ``empty_claim``;
- ``date_not_recorded``: a calendar date written in the claim that the source does not
  contain and that is not one of the claim's recorded bounds (``valid_from``/``valid_until``);
- ``number_not_in_source``: a number that is not in the source span, the evidence
  spans or the title (a resolved, recorded date is the only exception);
- ``invented_word``: a word (case-insensitive; possessive and plural "s" ignored) that
  is not in the permitted context: the source span, the evidence spans, the passage,
  the document title, and a closed list of function words and the words a resolved
  date or an attribution legitimately adds (month and weekday names, "said", "that",
  "according", "to", ...).

A matching word is not proof of meaning; the gate only guarantees that nothing was
made up from outside the document.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import date, datetime

from services.pipeline.domain import timeparse
from services.pipeline.domain.claims import ClaimDraft, Decision, ExtractionInput

__all__ = ["PERMITTED_EXTRA_WORDS", "check_claim", "ground", "normalise_word", "word_variants"]

_FUNCTION_WORDS = frozenset("""
a an the of in on at by for from to with and or as that which who whom whose than between during since until
this these those there it its is are was were be been has have had does do did will would doesn't hasn't isn't
""".split())
_ATTRIBUTION_WORDS = frozenset({"said", "says", "that", "according", "to", "stated"})
_DATE_WORDS = frozenset(
    [name.lower() for name in timeparse.MONTH_NAMES]
    + [name.lower() for name in timeparse.WEEKDAY_NAMES]
    + ["jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mid", "week"]
)
PERMITTED_EXTRA_WORDS: frozenset[str] = _FUNCTION_WORDS | _ATTRIBUTION_WORDS | _DATE_WORDS

_WORD_RE = re.compile(r"\d+(?:[.,]\d+)+|[^\W_]+(?:['’][^\W_]+)*")
_MONTH_ALTERNATION = "|".join(
    [*timeparse.MONTH_NAMES, "Sept", "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
)
_DATE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ymd", re.compile(r"(?<![\w-])(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})(?![\w-])")),
    ("dmy", re.compile(rf"(?<![\w.])(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mn>{_MONTH_ALTERNATION})\.?,?"
                       r"\s+(?P<y>\d{4})(?!\d)", re.IGNORECASE)),
    ("mdy", re.compile(rf"(?<![\w])(?P<mn>{_MONTH_ALTERNATION})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?,?"
                       r"\s+(?P<y>\d{4})(?!\d)", re.IGNORECASE)),
    ("my", re.compile(rf"(?<![\w])(?P<mn>{_MONTH_ALTERNATION})\.?,?\s+(?P<y>\d{{4}})(?!\d)", re.IGNORECASE)),
    ("qy", re.compile(r"(?<![\w])Q(?P<q>[1-4])\s+(?P<y>\d{4})(?!\d)", re.IGNORECASE)),
    ("y", re.compile(r"(?<![\w.,-])(?P<y>(?:19|20)\d{2})(?![\w-])")),
)
_PRECISIONS = frozenset(timeparse.PRECISIONS)
_KINDS = frozenset(timeparse.KINDS)


def normalise_word(word: str) -> str:
    """Lower-case, curly apostrophes straightened, possessive and surrounding punctuation stripped."""
    text = word.lower().replace("’", "'").strip("'")
    if text.endswith("'s"):
        text = text[:-2]
    return text.replace(",", "") if any(ch.isdigit() for ch in text) else text


def word_variants(word: str) -> set[str]:
    """A normalised word and its singular candidates ("exporters" -> "exporter", "carries" -> "carry")."""
    variants = {word}
    if len(word) > 3 and word.isalpha():
        if word.endswith("ies"):
            variants.add(word[:-3] + "y")
        if word.endswith("es"):
            variants.add(word[:-2])
        if word.endswith("s") and not word.endswith("ss"):
            variants.add(word[:-1])
    return variants


def _words(text: str) -> list[re.Match[str]]:
    return list(_WORD_RE.finditer(text))


def _vocabulary(texts: Iterable[str]) -> set[str]:
    vocabulary: set[str] = set()
    for text in texts:
        for match in _WORD_RE.finditer(text):
            vocabulary |= word_variants(normalise_word(match.group()))
    return vocabulary


def _numbers(texts: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for text in texts:
        for match in _WORD_RE.finditer(text):
            token = normalise_word(match.group())
            if any(ch.isdigit() for ch in token):
                found.add(token)
                found.add(token.lstrip("0") or "0")
    return found


def _date_mentions(text: str) -> list[tuple[int, int, str, dict[str, int]]]:
    taken: list[tuple[int, int]] = []
    mentions: list[tuple[int, int, str, dict[str, int]]] = []
    for shape, pattern in _DATE_PATTERNS:
        for match in pattern.finditer(text):
            if any(match.start() < e and s < match.end() for s, e in taken):
                continue
            parts: dict[str, int] = {"y": int(match.group("y"))}
            if "mn" in pattern.groupindex:
                month = timeparse.month_number(match.group("mn"))
                if month is None:
                    continue
                parts["m"] = month
            if "m" in pattern.groupindex:
                parts["m"] = int(match.group("m"))
            if "d" in pattern.groupindex:
                parts["d"] = int(match.group("d"))
            if "q" in pattern.groupindex:
                parts["q"] = int(match.group("q"))
            taken.append((match.start(), match.end()))
            mentions.append((match.start(), match.end(), shape, parts))
    return mentions


def _matches_bound(parts: dict[str, int], bound: date) -> bool:
    if parts["y"] != bound.year:
        return False
    if "q" in parts:
        return (bound.month - 1) // 3 + 1 == parts["q"]
    if "m" in parts and parts["m"] != bound.month:
        return False
    return not ("d" in parts and parts["d"] != bound.day)


def _squash(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def _window_problem(draft: ClaimDraft) -> str | None:
    if draft.valid_precision not in _PRECISIONS:
        return f"unknown precision {draft.valid_precision!r}"
    if draft.valid_kind is not None and draft.valid_kind not in _KINDS:
        return f"unknown kind {draft.valid_kind!r}"
    bounds = [b for b in (draft.valid_from, draft.valid_until) if b is not None]
    if any(b.tzinfo is None for b in bounds):
        return "naive datetime bound"
    if draft.valid_precision == "unknown" and bounds:
        return "bounds recorded with unknown precision"
    if draft.valid_precision == "open" and (draft.valid_from is None or draft.valid_until is not None):
        return "open precision needs a start and no end"
    if draft.valid_precision not in ("unknown", "open") and not bounds:
        return f"precision {draft.valid_precision} without bounds"
    if draft.valid_from is not None and draft.valid_until is not None and draft.valid_from > draft.valid_until:
        return "valid_from after valid_until"
    return None


def check_claim(item: ExtractionInput, draft: ClaimDraft) -> tuple[str, str] | None:
    """``None`` when the claim passes; otherwise ``(reason, detail)`` for the first failed check."""
    document = item.document
    length = len(document)
    passage = item.passage
    if not (0 <= passage.char_start <= draft.char_start < draft.char_end <= passage.char_end <= length):
        return "span_outside_chunk", (f"origin [{draft.char_start}, {draft.char_end}) not inside passage "
                                      f"[{passage.char_start}, {passage.char_end})")
    if document[draft.char_start:draft.char_end] != draft.source_span:
        return "source_span_mismatch", "source_span differs from document[char_start:char_end]"
    for span in draft.evidence_spans:
        if not (0 <= span.char_start < span.char_end <= length):
            return "evidence_out_of_bounds", f"evidence span [{span.char_start}, {span.char_end})"
    if draft.evidence_spans and (draft.evidence_spans[0].char_start, draft.evidence_spans[0].char_end) != (
            draft.char_start, draft.char_end):
        return "evidence_origin_mismatch", "the first evidence span must be the origin span"
    problem = _window_problem(draft)
    if problem is not None:
        return "invalid_time_window", problem
    claim_text = draft.claim_text
    if not claim_text.strip():
        return "empty_claim", "claim_text is empty"

    sources = [draft.source_span] + [document[s.char_start:s.char_end] for s in draft.evidence_spans]
    if item.title:
        sources.append(item.title)
    squashed_sources = " ".join(_squash(text) for text in sources)
    bounds = [b.date() if isinstance(b, datetime) else b for b in (draft.valid_from, draft.valid_until)
              if b is not None]
    consumed: list[tuple[int, int]] = []
    for start, end, _, parts in _date_mentions(claim_text):
        consumed.append((start, end))
        mention = claim_text[start:end]
        if f" {_squash(mention)} " in f" {squashed_sources} ":
            continue
        if not any(_matches_bound(parts, bound) for bound in bounds):
            return "date_not_recorded", f"{mention!r} is neither in the source nor a recorded bound"

    numbers = _numbers(sources)
    vocabulary = _vocabulary([*sources, document[passage.char_start:passage.char_end]])
    for match in _words(claim_text):
        if any(s <= match.start() < e for s, e in consumed):
            continue
        token = normalise_word(match.group())
        if not token:
            continue
        if any(ch.isdigit() for ch in token):
            if token not in numbers and (token.lstrip("0") or "0") not in numbers:
                return "number_not_in_source", f"{match.group()!r} is not in the source"
            continue
        variants = word_variants(token)
        if variants & vocabulary or variants & PERMITTED_EXTRA_WORDS:
            continue
        return "invented_word", f"{match.group()!r} is not in the permitted context"
    return None


def ground(item: ExtractionInput, drafts: Sequence[ClaimDraft],
           decisions: Sequence[Decision]) -> tuple[list[ClaimDraft], list[Decision]]:
    """Pass or reject each draft; rejected ones add a ``grounding_rejected`` decision. Nothing is
    edited. A statement the passage already made (same words, speaker and window: a run-on line
    repeating itself) is one claim; each repetition is ledgered as a ``duplicate`` drop."""
    passed: list[ClaimDraft] = []
    ledger = list(decisions)
    seen: dict[tuple[object, ...], ClaimDraft] = {}
    for draft in drafts:
        same = (" ".join(draft.claim_text.casefold().split()), draft.attributed_to, draft.valid_from,
                draft.valid_until, draft.valid_precision)
        failure = check_claim(item, draft)
        if failure is None and same in seen:
            first = seen[same]
            ledger.append(Decision("selection_drop", "duplicate", draft.char_start, draft.char_end,
                                   f"the statement at {first.char_start}-{first.char_end}"))
            continue
        if failure is None:
            passed.append(draft)
            seen[same] = draft
            continue
        reason, detail = failure
        ledger.append(Decision("grounding_rejected", reason, draft.char_start, draft.char_end, detail))
    return passed, ledger
