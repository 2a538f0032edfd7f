"""The grounding gate: deterministic pass/reject of any provider's claims."""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from services.pipeline.domain.claims import (
    ClaimDraft,
    Decision,
    EvidenceSpan,
    ExtractionInput,
    Passage,
    RulesClaimProvider,
)
from services.pipeline.domain.grounding import ground

DOCUMENT = (
    "# Stand-up, 17 September 2026\n"
    "\n"
    "Ravi said the billing migration moves from June to October, because the\n"
    "invoice exporter needs a rewrite. Dana agreed and will tell finance.\n"
    "Ravi owns the invoice exporter. The exporter handles 40 invoices an hour.\n"
    "\n"
    "Mei leads the search team.\n"
)
FIRST_BLOCK = (DOCUMENT.index("Ravi said"), DOCUMENT.index("an hour.") + len("an hour."))
ITEM = ExtractionInput(DOCUMENT, Passage("chunk-1", *FIRST_BLOCK), datetime(2026, 9, 17, 9, 30, tzinfo=UTC), None)


def draft(claim_text: str, source_span: str, *, start: int | None = None, evidence: tuple[EvidenceSpan, ...] = (),
          **fields: object) -> ClaimDraft:
    char_start = DOCUMENT.index(source_span) if start is None else start
    char_end = char_start + len(source_span)
    base = ClaimDraft(
        claim_text=claim_text, source_span=source_span, char_start=char_start, char_end=char_end,
        evidence_spans=(EvidenceSpan(char_start, char_end), *evidence), is_attributed=False, attributed_to=None,
        added_context=(), temporal_class=None, valid_from=None, valid_until=None, valid_precision="unknown",
        valid_kind=None, kept_flagged=False,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


class FakeProvider:
    """A provider that returns whatever it was given (stands in for a model-backed one)."""

    name = "fake"
    version = "fake/1"

    def __init__(self, drafts: list[ClaimDraft]) -> None:
        self.drafts = drafts

    async def extract(self, item: ExtractionInput) -> tuple[list[ClaimDraft], list[Decision]]:
        return list(self.drafts), [Decision("selection_drop", "question", 0, 1, None)]


VALID = draft("Ravi owns the invoice exporter.", "Ravi owns the invoice exporter.")
INVENTED = draft("Ravi owns the legacy invoice exporter.", "Ravi owns the invoice exporter.")
NUMBER = draft("The exporter handles 400 invoices an hour.", "The exporter handles 40 invoices an hour.")
OUTSIDE = draft("Mei leads the search team.", "Mei leads the search team.")
MISMATCH = replace(VALID, source_span="Ravi owns the invoice exporter!")


def test_fake_provider_claims_are_rejected_with_their_reason() -> None:
    provider = FakeProvider([VALID, INVENTED, NUMBER, OUTSIDE, MISMATCH])
    drafts, decisions = asyncio.run(provider.extract(ITEM))
    passed, ledger = ground(ITEM, drafts, decisions)
    assert passed == [VALID]
    assert passed[0] is VALID  # never edited
    assert ledger[0] == decisions[0]  # earlier decisions are kept, in order
    rejected = [(d.kind, d.reason, d.char_start) for d in ledger[1:]]
    assert rejected == [
        ("grounding_rejected", "invented_word", INVENTED.char_start),
        ("grounding_rejected", "number_not_in_source", NUMBER.char_start),
        ("grounding_rejected", "span_outside_chunk", OUTSIDE.char_start),
        ("grounding_rejected", "source_span_mismatch", MISMATCH.char_start),
    ]
    assert "legacy" in (ledger[1].detail or "") and "400" in (ledger[2].detail or "")


def test_permitted_context_and_normalisation() -> None:
    heading = DOCUMENT.index("Stand-up")
    claims = [
        # plural / possessive / case normalisation, words from elsewhere in the passage
        draft("Ravi's invoice exporters need a rewrite.", "invoice exporter needs a rewrite."),
        # attribution words and a resolved date recorded in the window, with the heading as evidence
        draft("Dana said that Dana will tell finance on 17 September 2026.", "will tell finance.",
              evidence=(EvidenceSpan(heading, heading + 29),), valid_from=datetime(2026, 9, 17, tzinfo=UTC),
              valid_until=datetime(2026, 9, 17, tzinfo=UTC), valid_precision="day", valid_kind="event_time"),
        draft("Ravi said the billing migration moves from June to October 2026, because the invoice exporter needs "
              "a rewrite.", DOCUMENT[FIRST_BLOCK[0]:DOCUMENT.index("rewrite.") + 8],
              valid_from=datetime(2026, 10, 1, tzinfo=UTC), valid_until=datetime(2026, 10, 31, tzinfo=UTC),
              valid_precision="month", valid_kind="event_time", is_attributed=True, attributed_to="Ravi"),
    ]
    passed, ledger = ground(ITEM, claims, [])
    assert passed == claims, ledger


def test_dates_must_be_recorded_and_windows_coherent() -> None:
    unrecorded = draft("Ravi owns the invoice exporter since 1 June 2026.", "Ravi owns the invoice exporter.")
    wrong_day = replace(
        draft("Dana will tell finance on 18 September 2026.", "will tell finance."),
        valid_from=datetime(2026, 9, 17, tzinfo=UTC), valid_until=datetime(2026, 9, 17, tzinfo=UTC),
        valid_precision="day", valid_kind="event_time")
    open_with_end = replace(VALID, valid_from=datetime(2026, 1, 1, tzinfo=UTC),
                            valid_until=datetime(2026, 2, 1, tzinfo=UTC), valid_precision="open")
    reversed_window = replace(VALID, valid_from=datetime(2026, 2, 1, tzinfo=UTC),
                              valid_until=datetime(2026, 1, 1, tzinfo=UTC), valid_precision="month")
    bad_evidence = replace(VALID, evidence_spans=(VALID.evidence_spans[0], EvidenceSpan(10, 10_000)))
    origin_not_first = replace(VALID, evidence_spans=(EvidenceSpan(0, 5),))
    passed, ledger = ground(ITEM, [unrecorded, wrong_day, open_with_end, reversed_window, bad_evidence,
                                   origin_not_first], [])
    assert passed == []
    assert [d.reason for d in ledger] == [
        "date_not_recorded", "date_not_recorded", "invalid_time_window", "invalid_time_window",
        "evidence_out_of_bounds", "evidence_origin_mismatch",
    ]


# --------------------------------------------------------------------------- property: rules output passes the gate

NAMES = ["Ravi", "Dana", "Chris", "Mei", "Aisha", "Lars", "Ravi S.", "Dr. Okafor"]
OBJECTS = ["the invoice exporter", "the billing migration", "the search index", "the payroll report",
           "the API gateway", "the Q3 budget", "3 open incidents", "the 2.5 release"]
VERBS = ["owns", "leads", "reviewed", "finished", "shipped", "rewrote", "tested", "needs"]
BASE_VERBS = ["review", "ship", "test", "own", "fix"]
DATES = ["yesterday", "today", "tomorrow", "last Friday", "next week", "on 1 June", "since January", "in Q2",
         "by October", "from June to October", "last month", "3 days ago", "on Friday", "in 2025",
         "a few weeks ago", "on 2026-03-04", "between May and July", "until next month", "", "", ""]
TEMPLATES = [
    "{N} {V} {O} {D}.", "{N} said {O} moves {D}.", "{N} {V} {O} and {N2} {V2} {O2}.",
    "{N} agreed and will {B} {O}.", "He {V} {O} {D}.", "She {V} {O}.", "It needs a rewrite {D}.",
    "I will {B} {O} {D}.", "We {V} {O} {D}.", "Is {O} done?", "You should {B} {O}.", "Meetings are useful.",
    "{O} is great.", "{N} thinks {O} is risky.", "According to {N}, {O} is late {D}.",
    "{N} probably {V} {O}.", "If we delay, {O} would slip.", "{N} told {N2} that {O} ships {D}.",
    "I think {O} is late.", "{O} ships {D}, {N} said.", "{N} has been on {O} {D}.",
    "Let's {B} {O} {D}.", "{N} and {N2} {B} {O} {D}.", "They {B} {O}.", "Our team {V} {O}.",
    "{N} {V} {O}; {N2} {V2} {O2} {D}.", "The migration {V} {O} {D}.", "I'm on call {D}.",
]


def _sentence(rng: random.Random) -> str:
    text = rng.choice(TEMPLATES).format(
        N=rng.choice(NAMES), N2=rng.choice(NAMES), V=rng.choice(VERBS), V2=rng.choice(VERBS),
        O=rng.choice(OBJECTS), O2=rng.choice(OBJECTS), B=rng.choice(BASE_VERBS), D=rng.choice(DATES))
    text = re.sub(r"\s+([.,;?])", r"\1", text)
    return text[0].upper() + text[1:]


def _document(rng: random.Random) -> tuple[str, str | None, datetime | None]:
    base = datetime(2026, rng.randint(1, 12), rng.randint(1, 28), 9, 0, tzinfo=UTC)
    lines: list[str] = []
    title: str | None = None
    if rng.random() < 0.7:
        title = rng.choice([f"Stand-up, {base.day} {base:%B} {base.year}", f"Billing migration sync — {base:%Y-%m-%d}",
                            "Weekly notes", "Search team retro"])
        lines += [f"# {title}", ""]
    shape = rng.choice(["plain", "turns", "labels"])
    if shape == "turns":
        people = rng.sample(["Dana", "Ravi", "Chris", "Mei"], 2)
        if rng.random() < 0.7:
            lines += [f"Participants: {', '.join(people)}", ""]
        for index in range(rng.randint(2, 6)):
            at = base + timedelta(days=rng.choice([0, 0, 1, 3]), minutes=index)
            text = " ".join(_sentence(rng) for _ in range(rng.randint(1, 3)))
            lines += [f"[t{index + 1} | {at:%Y-%m-%dT%H:%M:%SZ}] {rng.choice(people)}: {text}", ""]
    elif shape == "labels":
        for _ in range(rng.randint(2, 5)):
            speaker = rng.choice(["Dana", "**Ravi:**"])
            label = speaker if speaker.startswith("**") else f"{speaker}:"
            lines.append(f"{label} {' '.join(_sentence(rng) for _ in range(rng.randint(1, 2)))}")
        lines.append("")
    else:
        for _ in range(rng.randint(1, 4)):
            body = " ".join(_sentence(rng) for _ in range(rng.randint(1, 4)))
            if rng.random() < 0.3:
                words = body.split(" ")
                cut = rng.randint(1, len(words) - 1)
                body = " ".join(words[:cut]) + "\n" + " ".join(words[cut:])
            if rng.random() < 0.2:
                body = "- " + body
            lines += [body, ""]
    return "\n".join(lines), (title if rng.random() < 0.5 else None), (base if rng.random() < 0.8 else None)


def _passages(document: str, rng: random.Random) -> list[tuple[int, int]]:
    if rng.random() < 0.3:
        return [(0, len(document))]
    return [(m.start(), m.end()) for m in re.finditer(r"\S(?:.|\n(?!\n))*", document)]


def test_rules_output_always_passes_the_gate() -> None:
    provider = RulesClaimProvider()
    total = 0
    for seed in range(100):
        rng = random.Random(seed)
        document, title, asserted_at = _document(rng)
        for index, (start, end) in enumerate(_passages(document, rng)):
            item = ExtractionInput(document, Passage(f"c{index}", start, end), asserted_at, title)
            drafts, decisions = asyncio.run(provider.extract(item))
            passed, ledger = ground(item, drafts, decisions)
            rejected = [d for d in ledger if d.kind == "grounding_rejected"]
            assert not rejected, (seed, document, rejected)
            assert passed == drafts
            for claim in drafts:
                assert document[claim.char_start:claim.char_end] == claim.source_span
                assert start <= claim.char_start < claim.char_end <= end
            total += len(drafts)
    assert total > 300
