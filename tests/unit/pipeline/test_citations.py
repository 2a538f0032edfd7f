"""References between documents: links to another's source or file, cited titles."""

from __future__ import annotations

import uuid

from services.pipeline.domain.citations import citing, document_names, find_references

PLAN = document_names(uuid.UUID(int=1), title=None, markdown="# Q3 plan, draft 2\n\nBudget lines.\n",
                      filename="q3-plan.md", source_ref="notes/q3-plan.md")
CHARTER = document_names(uuid.UUID(int=2), title="Platform charter", markdown=None, filename="charter.docx",
                         source_ref="wiki/platform-charter")
STANDUP = document_names(uuid.UUID(int=3), title=None, markdown="# Notes\n", filename="notes.md",
                         source_ref="notes/notes.md")


def kinds(markdown: str) -> set[tuple[int, str]]:
    return {(r.to_doc_id.int, r.kind) for r in find_references(markdown, [PLAN, CHARTER, STANDUP])}


def test_links_to_a_source_or_file_name() -> None:
    assert kinds("Numbers are in [the plan](notes/q3-plan.md).") == {(1, "links_to")}
    assert kinds("Background: [[Platform charter]].") == {(2, "links_to")}
    assert kinds("See ./q3-plan.md for the numbers.") == set()  # a bare file name is not a link


def test_a_cited_title_needs_a_cue_or_quotes() -> None:
    assert kinds("As agreed in the platform charter, each team owns its alerts.") == {(2, "cites")}
    assert kinds("See the Q3 plan for the numbers.") == {(1, "cites")}
    assert kinds("The “Q3 plan” is late.") == {(1, "cites")}
    assert kinds("Our q3 plan is to hire two people.") == set()


def test_generic_names_are_never_cited() -> None:
    assert kinds("See the notes from Monday.") == set()


def test_earlier_documents_citing_a_later_one() -> None:
    found = citing([(uuid.UUID(int=9), "Per the Q3 plan, we hire in October.")], PLAN)
    assert [(doc.int, r.kind) for doc, r in found] == [(9, "cites")]
    assert all(len(r.context) <= 500 for _, r in found)
