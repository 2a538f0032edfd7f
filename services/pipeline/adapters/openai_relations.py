"""The ``openai`` relation provider: claims → assertions by a chat model over the OpenAI API.

The same contract as :class:`~services.pipeline.domain.facts.RulesRelationProvider`, through
structured output. Claims go in batches, one ``POST {base_url}/chat/completions`` per batch,
temperature 0, with a strict ``json_schema`` response format (:func:`assertions_schema`): for
each claim (by a short batch-local id, ``c1``, ``c2``, …) zero or more assertions, each a
relation (subject, predicate from the governed vocabulary or ``other:<snake_case>``, object)
or an observation (subject; its statement is the claim text itself, never the model's words).

The reply is not trusted:

* a reply that breaks the schema (not JSON, a wrong type or value, an unknown key, a claim
  id missing, repeated or not asked about) fails the whole call with ``extraction_failed``
  (retryable) and nothing is returned: a version's claims are never half-normalised;
* within a sound reply, an assertion with a predicate outside the vocabulary is dropped
  (``invalid_predicate``), one whose subject or object is not an entity name (a bare head
  noun, a date, a value) is dropped (``no_entity``), one naming an entity the claim does not
  name is dropped (``name_not_in_claim``); the rest of the claim and of the batch stands.
  A claim left without assertions carries the first reason (``no_entity`` when the model
  found nothing).

An attributed claim with a known holder is decided here without a model call: one
observation on the holder's stance, never a fact about what the holder talked about.

HTTP failures follow the claim provider: 408/429/5xx, timeouts and connection errors are
``provider_unavailable`` (retryable, with Retry-After), other 4xx and refusals are
``provider_rejected`` (permanent). Each HTTP call is reported as a
:class:`~services.pipeline.adapters.openai_chat.ChatCall` (tokens, latency, outcome; never
the text) to an optional ``on_call`` callback, for the cost ledger.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Final

import httpx

from services.pipeline.adapters.openai_chat import ChatProvider, OnCall, _Malformed, _validate, strict_object
from services.pipeline.domain.facts import (
    CORE_PREDICATES,
    WORK_PACK,
    AssertionDraft,
    ClaimView,
    attribute_anchor,
    attribute_drafts,
    clean_surface,
    is_entity_name,
    relation_drafts,
    statement_label_features,
    valid_predicate,
)
from services.platform.text import fold, normalize_name

__all__ = ["CHANGE_KINDS", "PROMPT_VERSION", "SYSTEM_PROMPT", "OpenAIRelationProvider", "assertions_schema",
           "build_messages"]

log = logging.getLogger(__name__)

PROMPT_VERSION: Final = 2
CHANGE_KINDS: Final = ("none", "succession", "end", "correction", "negation")
KINDS: Final = ("relation", "observation")
MOODS: Final = ("fact", "plan")
MAX_ALIASES: Final = 200  # known names shown per batch (those the batch's claims mention)
_NAME_CHARS: Final = 200
_VALUE_CHARS: Final = 200


# --------------------------------------------------------------------------- the contract


_object = strict_object


_NULLABLE_STR: Final = {"type": ["string", "null"]}

_ASSERTION: Final = _object({
    "kind": {"type": "string", "enum": list(KINDS)},
    "subject": {"type": "string"},
    "predicate": _NULLABLE_STR,
    "object": _NULLABLE_STR,
    "change_kind": {"type": "string", "enum": list(CHANGE_KINDS)},
    "previous_object": _NULLABLE_STR,
    "previous_value": _NULLABLE_STR,
    "previous_holder": _NULLABLE_STR,
    "attribute": _NULLABLE_STR,
    "value": _NULLABLE_STR,
    "value_is_state": {"type": "boolean"},
    "mood": {"type": "string", "enum": list(MOODS)},
    "hedged": {"type": "boolean"},
})


def batch_ids(count: int) -> list[str]:
    return [f"c{i}" for i in range(1, count + 1)]


def assertions_schema(claim_ids: Sequence[str]) -> dict[str, Any]:
    """The strict reply schema for a batch: ``{"results": [{"claim_id", "assertions": [...]}]}``."""
    return _object({"results": {"type": "array", "items": _object({
        "claim_id": {"type": "string", "enum": list(claim_ids)},
        "assertions": {"type": "array", "items": _ASSERTION},
    })}})


SYSTEM_PROMPT: Final = f"""\
You normalise claims into assertions for a knowledge graph. A claim is one standalone \
statement a source made. You answer with JSON that matches the given schema: for EVERY claim id \
you are given, exactly one entry in "results" with that "claim_id" and zero or more "assertions".

Each assertion is one of:
- a relation between two entities: "kind": "relation", "subject", "predicate", "object". The \
predicate MUST be one of the vocabulary below, or the escape "other:<snake_case>" ("other:" then \
a lower-case letter and 1 to 40 lower-case letters, digits or underscores, e.g. "other:sponsors", \
"other:owns", "other:leads") when none fits. Map synonyms onto the vocabulary ("employed by" -> \
works_for, "is on the team of" -> member_of). Never invent any other predicate.
- an observation about one entity: "kind": "observation", "subject", with "predicate" and \
"object" null. Its statement is the claim text itself (filled in for you). Values, numbers, \
dates, descriptions, states, plans and anything that does not fit a predicate between two \
entities are observations.

Rules:
- Names exactly as written in the claim (same spelling, without a leading "the"/"a"/"our"). \
Never use a name the claim does not contain; never use outside knowledge.
- Bare head nouns are not entities: "the system", "the app", "a card", "the team", "the \
project", "the meeting", "it", "they" name nothing on their own. "the billing migration", \
"the search team", "Ravi" are entities. Dates, numbers and values are never entities.
- An attributed claim ("Dana believes ...", "Ravi said that ...") becomes exactly ONE \
observation on the holder (the person or body who holds the view), never a fact about what \
they talked about.
- A claim that names no entity gets no assertions.
- "change_kind": "succession" when the claim states a change of state ("moved to", "joined", \
"now leads", "took over", "was postponed to"), "end" when a state stops ("left", "stepped down \
as", "no longer works on"; the relation is the one that ends), "correction" when it corrects an \
earlier value ("actually 9 June, not 8 June"), "negation" when it denies ("is not", "never"), \
else "none".
- "previous_object": for a succession "from X to Y", the entity X it moved away from (Y is \
the object); else null. "previous_value": the old value a correction or change replaces \
("from 8 June to 9 June" -> "8 June"), as written in the claim; else null. \
"previous_holder": who held the object before ("took over X from A", "replaced A as owner of \
X" -> "A"); else null.
- A named value of one thing is an observation with "attribute" (the thing's named property, \
e.g. "Q3 marketing budget", "mobile app launch") and "value" as written ("90,000 EUR", "9 June \
2026"); "value_is_state" true for a state that holds until changed (a budget, a price, a \
status), false for a date or a figure measured over a period. Else both null and false.
- "mood": "plan" for an intention or a change not made yet ("will take over", "plans to"), \
else "fact". "hedged": true when the claim hedges ("probably", "seems to"). Questions, \
hypotheticals, conditionals and opinions get no assertions at all.
- When the claim mentions one of the known entity names, use that entity, written as in the claim.

Vocabulary:
- core: {", ".join(CORE_PREDICATES)}
- work pack: {", ".join(WORK_PACK)}
"""


def _mentioned_aliases(aliases: Iterable[str], texts: Sequence[str]) -> list[str]:
    """The known (normalised) names that occur as whole words in the texts, longest first."""
    folded = [f" {normalize_name(t)} " for t in texts]
    found = {a for a in aliases if a and any(f" {a} " in text for text in folded)}
    return sorted(found, key=lambda a: (-len(a), a))[:MAX_ALIASES]


def build_messages(claims: Sequence[ClaimView], known_aliases: Iterable[str]) -> list[dict[str, str]]:
    """The system and user messages for one batch (exposed for tests and prompt review)."""
    ids = batch_ids(len(claims))
    items = []
    for claim_id, claim in zip(ids, claims, strict=True):
        item: dict[str, Any] = {"id": claim_id, "text": claim.claim_text.strip()}
        if claim.is_attributed:
            item["attributed"] = True
        items.append(item)
    names = _mentioned_aliases(known_aliases, [c.claim_text for c in claims])
    user = "\n".join([
        "Known entity names (normalised; the claims mention them): " + (json.dumps(names) if names else "none"),
        "",
        f"Claims ({len(items)}), one JSON object a line:",
        *(json.dumps(item, ensure_ascii=False) for item in items),
    ])
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------- the provider

Result = tuple[list[AssertionDraft], str | None]


class OpenAIRelationProvider(ChatProvider):
    """Relation normalisation by any server that speaks the OpenAI ``POST /chat/completions`` API."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        *,
        timeout_s: float = 60,
        batch_size: int = 20,
        on_call: OnCall | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        super().__init__(base_url, api_key, model, timeout_s=timeout_s, on_call=on_call, transport=transport)
        self.version = f"openai-normalizer/{model}/{PROMPT_VERSION}"
        self.batch_size = batch_size

    def request_body(self, claims: Sequence[ClaimView], known_aliases: Iterable[str]) -> dict[str, Any]:
        return {
            "model": self.model,
            "temperature": 0,
            "messages": build_messages(claims, known_aliases),
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "assertions", "strict": True,
                                "schema": assertions_schema(batch_ids(len(claims)))},
            },
        }

    async def normalize(self, claims: Sequence[ClaimView], known_aliases: frozenset[str]) -> list[Result]:
        """One ``(drafts, reason)`` per claim, in order; a :class:`StageFailure` (and nothing) when a call fails."""
        results: list[Result | None] = [None] * len(claims)
        pending: list[int] = []
        for index, claim in enumerate(claims):
            if claim.is_attributed and claim.attributed_to:
                results[index] = _stance(claim)
            else:
                pending.append(index)
        aliases = set(known_aliases)
        for start in range(0, len(pending), self.batch_size):
            indices = pending[start:start + self.batch_size]
            batch = [claims[i] for i in indices]
            body = self.request_body(batch, aliases)
            schema = body["response_format"]["json_schema"]["schema"]

            def check(reply: Any, schema: dict[str, Any] = schema) -> list[list[dict[str, Any]]]:
                _validate(reply, schema, "$")
                return _answers(reply, schema["properties"]["results"]["items"]["properties"]["claim_id"]["enum"])

            answers = await self._chat.complete(body, check, what="assertions",
                                                refusal="the model refused to normalise these claims")
            for i, claim, raw in zip(indices, batch, answers, strict=True):
                result = results[i] = convert(claim, raw)
                aliases.update(normalize_name(n) for d in result[0] for n in (d.subject, d.object) if n)
        done = [r for r in results if r is not None]
        assert len(done) == len(claims)
        return done

    # ----------------------------------------------------------------- HTTP


# --------------------------------------------------------------------------- reply → drafts


def _stance(claim: ClaimView) -> Result:
    """An attributed claim: one observation on the holder's stance (as the rules provider does)."""
    holder = clean_surface(claim.attributed_to or "")
    if not is_entity_name(holder):
        return [], "no_entity"
    return [AssertionDraft("observation", holder, statement=claim.claim_text.strip(), change_kind="none",
                           features={"stance_of": holder})], None


def _answers(reply: dict[str, Any], ids: list[str]) -> list[list[dict[str, Any]]]:
    """The assertions of each asked id, in order; every id exactly once."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for entry in reply["results"]:
        claim_id = entry["claim_id"]
        if claim_id not in ids:
            raise _Malformed(f"an answer for claim id {claim_id[:40]!r}, which was not asked about")
        if claim_id in by_id:
            raise _Malformed(f"claim id {claim_id!r} answered more than once")
        by_id[claim_id] = entry["assertions"]
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise _Malformed(f"no answer for claim id(s) {', '.join(missing)}")
    return [by_id[i] for i in ids]


def _in_text(name: str, folded_text: str) -> bool:
    key = normalize_name(name)
    return bool(key) and f" {key} " in folded_text


def _name(raw: str | None) -> str:
    return clean_surface((raw or "")[:_NAME_CHARS])


def convert(claim: ClaimView, raw: list[dict[str, Any]]) -> Result:
    """A validated answer for one claim → its drafts, or ``([], reason)`` when none survives."""
    text = claim.claim_text.strip()
    folded = f" {normalize_name(text)} "
    drafts: list[AssertionDraft] = []
    reasons: list[str] = []
    seen: set[tuple[str, str, str | None, str | None]] = set()
    for entry in raw:
        kind = entry["kind"]
        subject = _name(entry["subject"])
        obj = _name(entry["object"]) if kind == "relation" else None
        predicate = (entry["predicate"] or "").strip() if kind == "relation" else None
        if predicate is not None and not valid_predicate(predicate):
            reasons.append("invalid_predicate")
            continue
        names = [subject] if obj is None else [subject, obj]
        if kind == "relation" and not obj:
            reasons.append("no_entity")
            continue
        if not all(is_entity_name(n) for n in names):
            reasons.append("no_entity")
            continue
        if not all(_in_text(n, folded) for n in names):
            reasons.append("name_not_in_claim")
            continue
        if obj is not None and normalize_name(subject) == normalize_name(obj):
            reasons.append("no_entity")
            continue
        key = (kind, normalize_name(subject), predicate, normalize_name(obj) if obj else None)
        if key in seen:
            continue
        seen.add(key)
        previous_object = _name(entry["previous_object"]) if kind == "relation" else ""
        if not (previous_object and is_entity_name(previous_object) and _in_text(previous_object, folded)
                and normalize_name(previous_object) != normalize_name(obj or "")):
            previous_object = ""
        previous_value = (entry["previous_value"] or "").strip()[:_VALUE_CHARS]
        if previous_value and fold(previous_value) not in fold(text):
            previous_value = ""  # a value the claim does not state is not a previous value
        holder = _name(entry["previous_holder"]) if kind == "relation" else ""
        if holder and not (is_entity_name(holder) and _in_text(holder, folded)):
            holder = ""
        extra: dict[str, object] = {"hedged": True} if entry["hedged"] else {}
        change = entry["change_kind"]
        if entry["mood"] == "plan" or entry["hedged"]:
            # an intention (an observation of kind plan) or a guess ("maybe Victor leads it",
            # flagged) is an observation, never state: the same rule as the parse reading's
            features = {**extra, **statement_label_features(text, subject)}
            if entry["mood"] == "plan":
                features["kind"] = "plan"
            drafts.append(AssertionDraft("observation", subject, statement=text, features=features))
            continue
        attribute = _name(entry["attribute"]) if kind == "observation" else ""
        value = (entry["value"] or "").strip()[:_VALUE_CHARS] if attribute else ""
        if kind == "relation":
            assert obj is not None and predicate is not None
            drafts.extend(relation_drafts(subject, predicate, obj, change, previous=previous_object or None,
                                          previous_holder=holder or None, extra=extra,
                                          dated=claim.valid_from is not None))
        elif value and fold(value) in fold(text):
            # the same canonical observation the parse reads ("Q3 marketing budget: 90,000 EUR"),
            # on the entity the attribute belongs to
            subject = attribute_anchor(attribute, frozenset()) or subject
            mapped = "negation" if change == "end" else change
            if entry["value_is_state"]:  # a changed state: the old value held until then
                drafts.extend(attribute_drafts(subject, attribute, value, mapped, previous=previous_value or None,
                                               state=True, extra=extra))
            else:  # a moved date corrects the old one
                drafts.extend(attribute_drafts(subject, attribute, value, "correction" if previous_value else mapped,
                                               previous_value=previous_value or None, extra=extra))
        else:
            drafts.append(AssertionDraft("observation", subject, statement=text,
                                         change_kind="negation" if change == "end" else change,
                                         previous_value=previous_value or None,
                                         features={**extra, **statement_label_features(text, subject)}))
    if drafts:
        return drafts, None
    return [], reasons[0] if reasons else "no_entity"


# --------------------------------------------------------------------------- checks
