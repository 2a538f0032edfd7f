"""The ``openai`` claim provider: Selection → Claimify by a chat model over the OpenAI API.

One ``POST {base_url}/chat/completions`` per passage, temperature 0, with a strict
``json_schema`` response format (:data:`CLAIMS_SCHEMA`). The model judges every
statement of the passage (Selection: keep, keep flagged, or drop with a reason from
:data:`~services.pipeline.domain.claims.SELECTION_DROP_REASONS`) and rewrites each kept
one to stand alone (Claimify), quoting the exact passage characters it came from.

The reply is not trusted. It is validated against the schema it was asked for (a reply
that breaks it is ``extraction_failed``, retryable), every claim's ``source_span`` is
checked against the document (relocated when the offsets are off but the quoted text
occurs exactly once in the passage, else omitted with ``span_not_found``), time bounds
are parsed strictly (aware, UTC), and the output has the same shape as the rules
provider's. The deterministic grounding gate (:func:`services.pipeline.domain.grounding.ground`)
then checks every claim, whatever produced it.

Each HTTP call is reported as a :class:`ChatCall` (tokens, latency, outcome; never the
text) to an optional ``on_call`` callback, for the cost ledger.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, date, datetime
from typing import Any, Final

import httpx

from services.pipeline.adapters.openai_chat import ChatCall, ChatProvider, OnCall, _validate, strict_object
from services.pipeline.domain import timeparse
from services.pipeline.domain.claims import (
    CLAIMIFY_OMIT_REASONS,
    DECONTEXT_REASONS,
    KEEP_FLAG_REASONS,
    SELECTION_DROP_REASONS,
    ClaimDraft,
    Decision,
    EvidenceSpan,
    ExtractionInput,
    _added_words,
)

__all__ = ["CLAIMS_SCHEMA", "PROMPT_VERSION", "SYSTEM_PROMPT", "ChatCall", "OpenAIClaimProvider", "build_messages"]

log = logging.getLogger(__name__)

PROMPT_VERSION: Final = 2
TEMPORAL_CLASSES: Final = ("static", "dynamic", "atemporal")
_DETAIL_CHARS: Final = 200


# --------------------------------------------------------------------------- the contract


def _enum(values: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


_INT: Final = {"type": "integer"}
_STR: Final = {"type": "string"}
_NULLABLE_STR: Final = {"type": ["string", "null"]}

CLAIMS_SCHEMA: Final[dict[str, Any]] = strict_object({
    "dropped": {"type": "array", "items": strict_object({
        "statement": _STR,
        "start": _INT,
        "end": _INT,
        "reason": _enum(SELECTION_DROP_REASONS),
    })},
    "omitted": {"type": "array", "items": strict_object({
        "statement": _STR,
        "start": _INT,
        "end": _INT,
        "reason": _enum(CLAIMIFY_OMIT_REASONS),
        "detail": _STR,
    })},
    "claims": {"type": "array", "items": strict_object({
        "source_span": _STR,
        "start": _INT,
        "end": _INT,
        "claim_text": _STR,
        "evidence": {"type": "array", "items": _STR},
        "is_attributed": {"type": "boolean"},
        "attributed_to": _NULLABLE_STR,
        "edits": {"type": "array", "items": strict_object({"reason": _enum(DECONTEXT_REASONS), "detail": _STR})},
        "flags": {"type": "array", "items": _enum(KEEP_FLAG_REASONS)},
        "temporal_class": _enum(TEMPORAL_CLASSES),
        "valid_from": _NULLABLE_STR,
        "valid_until": _NULLABLE_STR,
        "valid_precision": _enum(timeparse.PRECISIONS),
        "valid_kind": {"anyOf": [_enum(timeparse.KINDS), {"type": "null"}]},
    })},
})

SYSTEM_PROMPT: Final = f"""\
You extract claims: what a source said, not whether it is true. You read ONE passage of a \
document and answer with JSON that matches the given schema. Work in two steps.

1. SELECTION. Judge every statement of the passage (and only of the passage). Each gets exactly one \
outcome: kept (it becomes a claim), kept flagged (a claim with "flags"), or dropped (an entry in \
"dropped" with one reason):
- question: a question;
- hypothetical: a conditional or hypothetical ("if we delayed, costs would rise");
- advice: advice, a recommendation or an instruction ("you should back up first");
- generic: a generic truism with no specific subject ("migrations are risky");
- opinion: an UNATTRIBUTED opinion ("this approach is cleaner"); an opinion with a holder \
("Dana thinks the date is too tight") is kept as an attributed claim;
- intro / conclusion: a section introduction / a wrap-up;
- no_info: says nothing is known ("we don't know yet");
- ambiguous: the source leaves its meaning open;
- references_boilerplate: reference lists, metadata lines and boilerplate;
- not_prose: code and table rows, which are not statements.
Keep specific, checkable statements about events, states, decisions, quantities, policies and \
relationships, including quantities, dates and changes of state phrased as opinions. When unsure, \
keep the statement with a flag rather than drop it. Flags: hedged (probably, maybe, likely, ...), \
unresolved_date (a relative date you could not resolve).

2. CLAIMIFY. Rewrite each kept statement as a standalone claim ("claim_text"):
- split independent assertions into separate claims; keep one assertion together;
- use ONLY words from the permitted context: the passage, the document title, and text you quote \
in "evidence" from the header or the surrounding text. Never use outside knowledge; never add a \
word, name or number that is not there. Function words, month and weekday names, and "said that" / \
"according to" are always allowed;
- resolve pronouns (I, we, he, she, it, they) and partial references ("the migration" -> "the \
billing migration") only when the permitted context makes them unambiguous; quote the words you \
used in "evidence". If a reference cannot be resolved, do not guess: put the statement in \
"omitted" with reason unresolved_reference; a statement that crosses the passage boundary is \
omitted with reason span_outside_chunk;
- resolve relative dates ("yesterday", "next week", "in Q2") against the SAID-ON time given in the \
message (or a date stated in the document) and write them as absolute dates ("2026-09-16", \
"June 2026", "Q2 2026"); without a usable anchor keep the words as spoken and flag unresolved_date;
- a speaker's turn becomes "<Speaker> said that ..."; a reported statement stays attributed: \
"Ravi said he finished" never becomes "Ravi finished". Set is_attributed and attributed_to;
- list every edit you made in "edits" with its reason ({", ".join(DECONTEXT_REASONS)}) and a short \
detail ("he -> Ravi", "yesterday -> 2026-09-16").

ORIGIN. For each claim give "source_span": the EXACT characters of the passage the claim comes \
from, copied verbatim (same spelling, spacing, punctuation and markup), and "start"/"end": \
character offsets of that span INTO THE PASSAGE (0 is the passage's first character; end is \
exclusive), so that passage[start:end] == source_span. Give "statement"/"start"/"end" the same way \
for every dropped or omitted statement.

WORLD TIME. For each claim state when it happened or holds (not when it was said): \
valid_precision is one of {", ".join(timeparse.PRECISIONS)}; valid_kind is one of \
{", ".join(timeparse.KINDS)} or null. valid_from / valid_until are ISO dates (YYYY-MM-DD; the \
first and the last day, inclusive: "June 2026" is 2026-06-01 to 2026-06-30) or, for precision \
instant, ISO 8601 timestamps with a UTC offset. "open" has valid_from and no valid_until; \
"unknown" has neither (use it when the claim states no time). temporal_class is static (a dated \
or finished event), dynamic (a state or plan that can change) or atemporal (a definition).
"""


def _shown(item: ExtractionInput, context_chars: int, header_chars: int) -> dict[str, tuple[int, int]]:
    """The document ranges put in front of the model: header, text before, passage, text after."""
    start, end = _passage_bounds(item)
    before_start = max(0, start - context_chars)
    return {
        "header": (0, min(header_chars, before_start)),
        "before": (before_start, start),
        "passage": (start, end),
        "after": (end, min(len(item.document), end + context_chars)),
    }


def build_messages(item: ExtractionInput, *, context_chars: int = 1500,
                   header_chars: int = 600) -> list[dict[str, str]]:
    """The system and user messages for one passage (exposed for tests and prompt review)."""
    document = item.document
    shown = {key: document[a:b] for key, (a, b) in _shown(item, context_chars, header_chars).items()}
    start, end = _passage_bounds(item)
    said_on = "unknown (do not resolve relative dates; flag them unresolved_date)"
    if item.asserted_at is not None:
        moment = item.asserted_at.astimezone(UTC) if item.asserted_at.tzinfo else item.asserted_at.replace(tzinfo=UTC)
        said_on = f"{moment.isoformat().replace('+00:00', 'Z')} ({moment.strftime('%A')})"
    user = "\n".join([
        f"Document title: {item.title or '(none)'}",
        f"Said on: {said_on}",
        f"Passage offset in the document: {start} (report every offset relative to the passage: 0 is its first "
        f"character)",
        f"Passage length: {end - start} characters",
        "",
        f"<document_header>\n{shown['header']}\n</document_header>",
        f"<surrounding_text_before>\n{shown['before']}\n</surrounding_text_before>",
        f"<passage>\n{shown['passage']}\n</passage>",
        f"<surrounding_text_after>\n{shown['after']}\n</surrounding_text_after>",
    ])
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------- the provider


class OpenAIClaimProvider(ChatProvider):
    """Claim extraction by any server that speaks the OpenAI ``POST /chat/completions`` API."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        timeout_s: float = 60,
        on_call: OnCall | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        context_chars: int = 1500,
        header_chars: int = 600,
    ) -> None:
        if context_chars < 0 or header_chars < 0:
            raise ValueError("context_chars and header_chars must not be negative")
        super().__init__(base_url, api_key, model, timeout_s=timeout_s, on_call=on_call, transport=transport)
        self.version = f"openai/{model}/{PROMPT_VERSION}"
        self.context_chars = context_chars
        self.header_chars = header_chars

    def request_body(self, item: ExtractionInput) -> dict[str, Any]:
        return {
            "model": self.model,
            "temperature": 0,
            "messages": build_messages(item, context_chars=self.context_chars, header_chars=self.header_chars),
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "claims", "strict": True, "schema": CLAIMS_SCHEMA},
            },
        }

    async def extract(self, item: ExtractionInput) -> tuple[list[ClaimDraft], list[Decision]]:
        reply = await self._chat.complete(
            self.request_body(item), _checked, what="claims",
            refusal="the model refused to extract claims from this passage")
        return convert_reply(item, reply, context_chars=self.context_chars, header_chars=self.header_chars)


def _checked(reply: Any) -> dict[str, Any]:
    _validate(reply, CLAIMS_SCHEMA, "$")
    return reply  # type: ignore[no-any-return]


def _passage_bounds(item: ExtractionInput) -> tuple[int, int]:
    length = len(item.document)
    start = min(max(0, item.passage.char_start), length)
    return start, min(max(start, item.passage.char_end), length)


def _locate(passage: str, text: str, start: int, end: int) -> tuple[int, int] | None:
    """Passage-relative offsets of ``text``: as given when they match, else its one occurrence, else None."""
    if not text:
        return None
    if 0 <= start < end <= len(passage) and passage[start:end] == text:
        return start, end
    first = passage.find(text)
    if first < 0 or passage.find(text, first + 1) >= 0:
        return None
    return first, first + len(text)


_DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MOMENT_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})")


def parse_bound(value: str | None) -> datetime | None:
    """``YYYY-MM-DD`` (UTC midnight) or an ISO 8601 timestamp WITH an offset, as an aware UTC datetime.

    Anything else (a naive timestamp, an impossible date, free text) raises ``ValueError``.
    """
    if value is None:
        return None
    if _DAY_RE.fullmatch(value):
        day = date.fromisoformat(value)
        return datetime(day.year, day.month, day.day, tzinfo=UTC)
    if _MOMENT_RE.fullmatch(value):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    raise ValueError(f"not an ISO date or an offset timestamp: {value[:40]!r}")


def _clip(text: str | None) -> str | None:
    return None if text is None else text[:_DETAIL_CHARS]


def convert_reply(item: ExtractionInput, reply: dict[str, Any], *, context_chars: int = 1500,
                  header_chars: int = 600) -> tuple[list[ClaimDraft], list[Decision]]:
    """Validated reply → drafts with DOCUMENT offsets and the decision ledger (rules-provider shape)."""
    document = item.document
    base, passage_end = _passage_bounds(item)
    passage = document[base:passage_end]
    decisions: list[Decision] = []
    drafts: list[ClaimDraft] = []

    def place(text: str, start: int, end: int) -> tuple[int, int, str]:
        found = _locate(passage, text, start, end)
        if found is None:  # keep the ledger entry, at the passage, saying so
            return base, passage_end, f"statement not located in the passage: {text}"
        return base + found[0], base + found[1], text

    for entry in reply["dropped"]:
        start, end, detail = place(entry["statement"], entry["start"], entry["end"])
        decisions.append(Decision("selection_drop", entry["reason"], start, end, _clip(detail)))
    for entry in reply["omitted"]:
        start, end, where = place(entry["statement"], entry["start"], entry["end"])
        detail = entry["detail"] if where == entry["statement"] else f"{entry['detail']} ({where})"
        decisions.append(Decision("claimify_omitted", entry["reason"], start, end, _clip(detail)))

    shown = _shown(item, context_chars, header_chars)
    surroundings = [shown["header"], shown["before"], shown["after"]]
    for claim in reply["claims"]:
        found = _locate(passage, claim["source_span"], claim["start"], claim["end"])
        if found is None:
            start = min(max(0, claim["start"]), len(passage))
            end = min(max(start, claim["end"]), len(passage))
            decisions.append(Decision("claimify_omitted", "span_not_found", base + start, base + end,
                                      _clip(f"source_span not found in the passage: {claim['source_span']}")))
            continue
        char_start, char_end = base + found[0], base + found[1]
        source_span = document[char_start:char_end]
        try:
            valid_from = parse_bound(claim["valid_from"])
            valid_until = parse_bound(claim["valid_until"])
        except ValueError as exc:
            decisions.append(Decision("claimify_omitted", "invalid_time_window", char_start, char_end,
                                      _clip(str(exc))))
            continue
        spans = [EvidenceSpan(char_start, char_end)]
        for quote in claim["evidence"]:
            located = _locate_evidence(document, quote, shown["passage"], surroundings)
            if located is None or (char_start <= located[0] and located[1] <= char_end):
                continue
            candidate = EvidenceSpan(*located)
            if candidate not in spans:
                spans.append(candidate)
        for edit in claim["edits"]:
            decisions.append(Decision("decontext_edit", edit["reason"], char_start, char_end, _clip(edit["detail"])))
        flags = list(dict.fromkeys(claim["flags"]))
        for flag in flags:
            decisions.append(Decision("selection_keep_flagged", flag, char_start, char_end, _clip(source_span)))
        claim_text = claim["claim_text"].strip()
        attributed_to = claim["attributed_to"] or None
        drafts.append(ClaimDraft(
            claim_text=claim_text,
            source_span=source_span,
            char_start=char_start,
            char_end=char_end,
            evidence_spans=tuple(spans),
            is_attributed=claim["is_attributed"] or attributed_to is not None,
            attributed_to=attributed_to,
            added_context=_added_words(claim_text, source_span),
            temporal_class=claim["temporal_class"],
            valid_from=valid_from,
            valid_until=valid_until,
            valid_precision=claim["valid_precision"],
            valid_kind=claim["valid_kind"],
            kept_flagged=bool(flags),
        ))
    return drafts, decisions


def _locate_evidence(document: str, quote: str, passage: tuple[int, int],
                     surroundings: list[tuple[int, int]]) -> tuple[int, int] | None:
    """Where ``quote`` is: its first occurrence in the passage, else the occurrence nearest the passage
    in the text the model was shown around it, else None (the quote is ignored)."""
    if not quote.strip():
        return None
    position = document.find(quote, *passage)
    if position >= 0:
        return position, position + len(quote)
    best: tuple[int, int] | None = None
    for region_start, region_end in surroundings:
        position = document.find(quote, region_start, region_end)
        while position >= 0:
            distance = passage[0] - position if position < passage[0] else position - passage[1]
            if best is None or distance < best[0]:
                best = (distance, position)
            position = document.find(quote, position + 1, region_end)
    return None if best is None else (best[1], best[1] + len(quote))
