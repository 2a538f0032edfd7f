"""Bad input through the offline extractor and normaliser: a 20,000-character sentence
without punctuation, a table, a code block, mixed scripts and emoji, a document of only
questions. No crash and no hang; every statement either becomes a claim whose
normalisation has an outcome, or has a named decision in the extraction ledger."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from services.pipeline.domain.claims import DECISION_KINDS, ExtractionInput, ParsedClaimProvider, Passage
from services.pipeline.domain.facts import ClaimView, ParseRelationProvider
from services.platform import structure

RUN_ON = ("alpha beta gamma delta owns the exporter and Ravi moved the cluster to Dublin " * 400)[:20_000]
TABLE = "| Service | Owner |\n|---|---|\n| Ledger | Carmen Ruiz |\n"
CODE = "```python\nprint('Ravi owns the exporter')\n```\n"
SCRIPTS = "Ravi 拥有 the exporter 🚀 and Zoë runs Ünïcode ops ✨.\nСергей leads the платформа team.\n"
QUESTIONS = "Who owns the exporter? Is Dublin the host? Why?\n"
SAID_ON = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)


def ledger(document: str) -> list[tuple[tuple[int, int], str]]:
    """(span, outcome) for every statement and skipped block of every block-sized passage."""
    out: list[tuple[tuple[int, int], str]] = []
    for block in structure.parse_blocks(document):
        if block.kind == "heading":
            continue
        item = ExtractionInput(document, Passage("p", block.char_start, block.char_end), SAID_ON, None)
        drafts, decisions = asyncio.run(ParsedClaimProvider().extract(item))
        assert all(d.kind in DECISION_KINDS and d.reason for d in decisions)
        out += [((d.char_start, d.char_end), f"{d.kind}:{d.reason}") for d in decisions]
        views = [ClaimView(str(i), d.claim_text, d.is_attributed, d.attributed_to, d.valid_from, d.valid_until,
                           d.valid_precision, d.valid_kind, SAID_ON) for i, d in enumerate(drafts)]
        results = asyncio.run(ParseRelationProvider().normalize(views, frozenset()))
        for draft, (assertions, reason) in zip(drafts, results, strict=True):
            assert assertions or reason, draft  # a claim without assertions says why
            out.append(((draft.char_start, draft.char_end), "claim" if assertions else f"normalized:{reason}"))
    return out


@pytest.mark.parametrize("body", [RUN_ON, TABLE, CODE, SCRIPTS, QUESTIONS],
                         ids=["run-on", "table", "code", "scripts", "questions"])
def test_every_block_has_named_outcomes(body: str) -> None:
    document = f"# Bad input\n\n{body}"
    outcomes = ledger(document)
    blocks = [b for b in structure.parse_blocks(document) if b.kind != "heading"]
    for block in blocks:  # every block is accounted for
        assert any(block.char_start <= s < block.char_end for (s, _), _ in outcomes), (block.kind, outcomes)


def test_what_each_shape_leads_to() -> None:
    # a table's header row is not prose; a data row under a header whose column names a role
    # ("Owner") is that field of the row's first cell
    assert {o for _, o in ledger(f"# T\n\n{TABLE}")} == {"claim", "decontext_edit:subject_copied",
                                                           "selection_drop:not_prose"}
    assert {o for _, o in ledger(f"# C\n\n{CODE}")} == {"selection_drop:not_prose"}
    assert [o for _, o in ledger(f"# Q\n\n{QUESTIONS}")] == ["selection_drop:question"] * 3
    scripts = [o for _, o in ledger(f"# S\n\n{SCRIPTS}")]
    assert "claim" in scripts and "claimify_omitted:no_predicate" in scripts


def test_a_run_on_line_repeating_itself_is_one_claim_per_statement_and_the_rest_is_ledgered() -> None:
    from services.pipeline.domain.grounding import ground

    document = f"# Bad input\n\n{RUN_ON}\n"
    item = ExtractionInput(document, Passage("p", document.index("alpha"), len(document)), SAID_ON, None)
    drafts, decisions = asyncio.run(ParsedClaimProvider().extract(item))
    kept, ledger = ground(item, drafts, decisions)
    assert len(drafts) > 100  # the line says the same thing hundreds of times
    texts = [c.claim_text for c in kept]
    assert len(texts) == len(set(texts)) and len(texts) <= 3
    duplicates = [d for d in ledger if d.reason == "duplicate"]
    assert len(duplicates) + len(kept) + sum(1 for d in ledger if d.kind == "grounding_rejected") == len(drafts)
    assert all(d.kind == "selection_drop" for d in duplicates)
