"""The English parse in its child process: the same claims and assertions as in-process, a
child that dies fails one call as retryable and the next call starts a new one, and closing
ends the child."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import UTC, datetime

import pytest

from services.pipeline.adapters.parse_process import ParseProcess, ParseProcessDied, ProcessClaims, ProcessRelations
from services.pipeline.domain.claims import ExtractionInput, ParsedClaimProvider, Passage
from services.pipeline.domain.facts import ClaimView, ParseRelationProvider

SAID_ON = datetime(2026, 9, 17, 9, 0, tzinfo=UTC)
DOCUMENT = (
    "# Platform sync, 17 September 2026\n"
    "\n"
    "Ines Moreau took over the billing service from Paul Kim on 3 September.\n"
    "The data warehouse migration now moves to 14 October. Maybe Victor leads the review.\n"
    "\n"
    "[t1 | 2026-09-17T09:30:00Z] Dana: I joined Brightwave as a designer last week.\n"
)


def _child_pids(parse: ParseProcess) -> list[int]:
    pool = parse._pool  # noqa: SLF001 - the test looks at the process it started
    return [] if pool is None else list(pool._processes)  # noqa: SLF001


@pytest.fixture
async def parse():  # type: ignore[no-untyped-def]
    process = ParseProcess()
    await process.warm()
    yield process
    await process.aclose()


async def test_the_child_reads_what_the_service_itself_would(parse: ParseProcess) -> None:
    item = ExtractionInput(DOCUMENT, Passage("c", 0, len(DOCUMENT)), SAID_ON, "Platform sync")
    here = await ParsedClaimProvider().extract(item)
    there = await ProcessClaims(parse).extract(item)
    assert there == here and here[0]
    views = [ClaimView(str(i), d.claim_text, d.is_attributed, d.attributed_to, d.valid_from, d.valid_until,
                       d.valid_precision, d.valid_kind, SAID_ON) for i, d in enumerate(here[0])]
    expected = await ParseRelationProvider().normalize(views, frozenset())
    assert await ProcessRelations(parse).normalize(views, frozenset()) == expected
    assert any(drafts for drafts, _ in expected)
    assert ProcessClaims(parse).version == ParsedClaimProvider().version  # same function, same claims
    assert ProcessRelations(parse).version == ParseRelationProvider().version


async def test_a_child_that_dies_fails_one_call_and_the_next_starts_a_new_one(parse: ParseProcess) -> None:
    item = ExtractionInput(DOCUMENT, Passage("c", 0, len(DOCUMENT)), SAID_ON, None)
    claims = ProcessClaims(parse)
    expected = await claims.extract(item)
    [first] = _child_pids(parse)
    os.kill(first, signal.SIGKILL)
    with pytest.raises(ParseProcessDied):
        await claims.extract(item)
    assert await claims.extract(item) == expected
    [second] = _child_pids(parse)
    assert second != first


async def test_closing_ends_the_child() -> None:
    parse = ParseProcess()
    await parse.warm()
    [child] = _child_pids(parse)
    await parse.aclose()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.05)
    pytest.fail("the parse process outlived aclose")
