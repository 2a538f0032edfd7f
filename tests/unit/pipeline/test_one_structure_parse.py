"""Chunks and claims read one structure parse (``structure.parse_blocks``): on one document
with the shapes the two parsers used to disagree on (a closed ATX heading, list numbers
above 999, a turn header with a bare time, a naive timestamp, a fenced block, a table) every
claim lies inside one chunked block of the kind it was read as, and a turn's claims carry
the speaker and the time the block carries."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from services.pipeline.domain.claims import ExtractionInput, ParsedClaimProvider, Passage
from services.platform import structure

DOCUMENT = (
    "## Ops review, 2 March 2026 ##\n"
    "\n"
    "1000. Lena Park leads the on-call rotation for Orion.\n"
    "1001. The pager budget for Orion is 40 hours per month.\n"
    "\n"
    "```\n"
    "Kofi Mensah owns the deploy scripts.\n"
    "```\n"
    "\n"
    "| Service | Owner |\n"
    "|---|---|\n"
    "| Ledger | Carmen Ruiz |\n"
    "\n"
    "[2026-03-01T22:30:00-05:00] Sam: I started at Nimbus Labs last week.\n"
    "[t2 | 2026-03-02T09:00:00] Dana: I moved to the search team yesterday.\n"
)
SAID_ON = datetime(2026, 3, 5, 12, tzinfo=UTC)


def _claims():
    item = ExtractionInput(DOCUMENT, Passage("p", 0, len(DOCUMENT)), SAID_ON, None)
    drafts, _ = asyncio.run(ParsedClaimProvider().extract(item))
    return drafts


def test_every_claim_lies_in_one_chunked_block_of_its_kind() -> None:
    blocks = structure.parse_blocks(DOCUMENT)
    chunks = structure.chunk(blocks, structure.build_sections(blocks, DOCUMENT), markdown=DOCUMENT)
    chunked = [b for c in chunks for b in blocks[c.block_start:c.block_end + 1]]  # block_end is inclusive
    drafts = _claims()
    assert drafts
    for draft in drafts:
        home = [b for b in chunked if b.char_start <= draft.char_start and draft.char_end <= b.char_end]
        assert len(home) == 1, draft
        assert home[0].kind in ("list_item", "paragraph", "speaker_turn", "quote", "table_row"), (draft, home[0].kind)
        if home[0].kind == "speaker_turn":
            assert draft.attributed_to == home[0].speaker
        else:
            assert not draft.is_attributed
    texts = " ".join(d.claim_text for d in drafts)
    assert "Kofi Mensah" not in texts  # code is not prose
    # a table's data row under its header is read as fields: the cell is the claim's span
    owner = next(d for d in drafts if "Carmen Ruiz" in d.claim_text)
    assert owner.claim_text == "The owner of Ledger is Carmen Ruiz." and owner.source_span == "Carmen Ruiz"
    assert any(d.claim_text.startswith("Lena Park leads") for d in drafts)  # "1000." is a list number


def test_turn_times_are_the_blocks_times() -> None:
    blocks = {b.speaker: b for b in structure.parse_blocks(DOCUMENT) if b.kind == "speaker_turn"}
    assert set(blocks) == {"Sam", "Dana"}  # "[time] Sam:" is a turn to both
    by_speaker = {d.attributed_to: d for d in _claims()}
    # Sam's turn time is aware: "last week" is the week before 2 March 2026 (UTC), not the said-on day
    sam_turn = blocks["Sam"].turn_time
    assert sam_turn is not None and sam_turn.astimezone(UTC).date().isoformat() == "2026-03-02"
    assert by_speaker["Sam"].valid_from is not None
    assert by_speaker["Sam"].valid_from.date().isoformat() == "2026-02-23"
    # Dana's is naive: no zone, so no turn time for the chunk, and the claim resolves against the
    # document (a dated heading) instead of guessing a zone
    assert blocks["Dana"].turn_time is None
    assert by_speaker["Dana"].valid_from is not None
    assert by_speaker["Dana"].valid_from.date().isoformat() == "2026-03-01"
