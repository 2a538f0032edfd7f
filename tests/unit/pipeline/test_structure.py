"""Structure, chunking and reuse of a document's Markdown representation."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime

import pytest

from services.platform.structure import (
    Block,
    Chunk,
    Section,
    _is_natural_boundary,
    build_sections,
    chunk,
    default_token_count,
    embedding_inputs,
    normalize_title,
    normalized_hash,
    parse_blocks,
    retrieval_text,
    retrieval_unit_spans,
    retrieval_units,
    reuse_plan,
)

STANDUP = (
    "# Stand-up, 17 September 2026\n"
    "\n"
    "Ravi said the billing migration moves from June to October, because the\n"
    "invoice exporter needs a rewrite. Dana agreed and will tell finance.\n"
    "Ravi owns the invoice exporter.\n"
)

CONVERSATION = (
    "# Billing migration stand-up — 2026-09-17\n"
    "\n"
    "Participants: Dana, Ravi\n"
    "\n"
    "[t1 | 2026-09-17T09:30:00Z] Dana: Where are we on the invoice exporter?\n"
    "\n"
    "[t2 | 2026-09-17T09:31:10Z] Ravi: It needs a rewrite. The migration moves from June to October.\n"
    "\n"
    "[t3 | 2026-09-17T09:32:05Z] Dana: Agreed. I will tell finance today.\n"
)


def structure(markdown: str, token_budget: int = 400) -> tuple[list[Block], list[Section], list[Chunk]]:
    blocks = parse_blocks(markdown)
    sections = build_sections(blocks, markdown)
    return blocks, sections, chunk(blocks, sections, markdown=markdown, token_budget=token_budget)


# --------------------------------------------------------------------------- the quickstart document


def test_quickstart_standup_is_one_heading_one_paragraph_one_section_one_chunk() -> None:
    blocks, sections, chunks = structure(STANDUP)

    heading_end = len("# Stand-up, 17 September 2026")
    assert [(b.kind, b.char_start, b.char_end) for b in blocks] == [
        ("heading", 0, heading_end),
        ("paragraph", heading_end + 2, len(STANDUP) - 1),  # the final newline is not part of the block
    ]
    assert blocks[0].level == 1
    assert blocks[1].text.endswith("Ravi owns the invoice exporter.")

    [section] = sections
    assert (section.title, section.role, section.node_path, section.parent_index) == (
        "Stand-up, 17 September 2026",
        "body",
        "0",
        None,
    )
    assert (section.block_start, section.block_end, section.char_start, section.char_end) == (
        0,
        1,
        0,
        len(STANDUP) - 1,
    )

    [only] = chunks
    assert (only.block_start, only.block_end, only.section_index) == (0, 1, 0)
    assert only.text == STANDUP.rstrip("\n")
    assert only.location_header == "Stand-up, 17 September 2026"
    assert only.content_hash == normalized_hash(only.text)
    assert only.token_count == default_token_count(only.text) and not only.oversize


# --------------------------------------------------------------------------- conversations


def test_conversation_gives_one_speaker_turn_per_turn_with_speaker_id_and_time() -> None:
    blocks, sections, chunks = structure(CONVERSATION)

    assert [b.kind for b in blocks] == ["heading", "paragraph", "speaker_turn", "speaker_turn", "speaker_turn"]
    assert blocks[1].text == "Participants: Dana, Ravi"
    turns = [(b.turn_id, b.speaker, b.turn_time) for b in blocks[2:]]
    assert turns == [
        ("t1", "Dana", datetime(2026, 9, 17, 9, 30, tzinfo=UTC)),
        ("t2", "Ravi", datetime(2026, 9, 17, 9, 31, 10, tzinfo=UTC)),
        ("t3", "Dana", datetime(2026, 9, 17, 9, 32, 5, tzinfo=UTC)),
    ]
    assert blocks[4].text == "[t3 | 2026-09-17T09:32:05Z] Dana: Agreed. I will tell finance today."
    [section] = sections
    assert section.title == "Billing migration stand-up — 2026-09-17"
    # Turns pack into chunks at turn boundaries (content-defined cut points), never mid-turn.
    assert chunks[0].block_start == 0 and chunks[-1].block_end == 4
    assert all(blocks[c.block_start].kind in ("heading", "speaker_turn") for c in chunks)
    small = chunk(blocks, sections, markdown=CONVERSATION, token_budget=70)
    assert all(c.token_count <= 70 for c in small)
    assert all(blocks[c.block_end].kind == "speaker_turn" for c in small)


def test_plain_speaker_lines_are_turns_only_for_listed_participants() -> None:
    markdown = (
        "Note: this line comes before the participants are known.\n\n"
        "Participants: Dana Smith and Ravi\n\n"
        "Dana Smith: Shall we start?\n"
        "Ravi: Yes.\n"
        "Agenda: not a participant, so a paragraph.\n\n"
        "[2026-09-17T09:40:00+02:00] Ravi: stamped, without a turn id\n\n"
        "[t9 | sometime] Dana Smith: no parseable time\n"
    )
    blocks = parse_blocks(markdown)
    assert [(b.kind, b.speaker, b.turn_id) for b in blocks] == [
        ("paragraph", None, None),  # "Note:" before any Participants line
        ("paragraph", None, None),  # the Participants line itself
        ("speaker_turn", "Dana Smith", None),
        ("speaker_turn", "Ravi", None),
        ("speaker_turn", "Ravi", None),
        ("speaker_turn", "Dana Smith", "t9"),
    ]
    # A non-participant "Agenda:" line is lazy continuation of Ravi's turn, not a new turn.
    assert blocks[3].text == "Ravi: Yes.\nAgenda: not a participant, so a paragraph."
    assert blocks[4].turn_time == datetime(2026, 9, 17, 7, 40, tzinfo=UTC)
    assert (blocks[5].turn_id, blocks[5].turn_time) == ("t9", None)


# --------------------------------------------------------------------------- block kinds


def test_every_block_kind_with_exact_offsets() -> None:
    markdown = (
        "Intro line one\nintro line two   \n\n"
        "## Data  ##\n\n"
        "- first item\n  continues here\n- second item\n\n  second paragraph of item two\n"
        "1. ordered\n\n"
        "| a | b |\n|---|:-:|\n| 1 | 2 |\n\n"
        "```python\n# not a heading\n\nx = 1\n```\n\n"
        "> quoted\n> still quoted\n\n"
        "---\n\n"
        "Closing paragraph.\n\n\n"
    )
    blocks = parse_blocks(markdown)
    assert [(b.kind, b.text) for b in blocks] == [
        ("paragraph", "Intro line one\nintro line two"),
        ("heading", "## Data  ##"),
        ("list_item", "- first item\n  continues here"),
        ("list_item", "- second item\n\n  second paragraph of item two"),
        ("list_item", "1. ordered"),
        ("table_row", "| a | b |"),
        ("table_row", "| 1 | 2 |"),
        ("code", "```python\n# not a heading\n\nx = 1\n```"),
        ("quote", "> quoted\n> still quoted"),
        ("paragraph", "Closing paragraph."),
    ]
    assert all(markdown[b.char_start : b.char_end] == b.text for b in blocks)
    assert build_sections(blocks, markdown)[1].title == "Data"


# --------------------------------------------------------------------------- roles


def test_roles_from_titles_and_inheritance() -> None:
    markdown = (
        "Some untitled opening text.\n\n"
        "# Abstract\n\nWe study things.\n\n"
        "# 1. Introduction\n\nWhy it matters.\n\n"
        "## 1.1 Motivation\n\nMore why.\n\n"
        "# Results and discussion\n\nNumbers.\n\n"
        "## Table 2: Throughput\n\n| run | ops |\n|---|---|\n| 1 | 5 |\n\n"
        "## Per-site figures\n\n| site | ops |\n|---|---|\n| A | 3 |\n\n"
        "# Appendix B: Raw data\n\nSee below.\n\n"
        "## B.1 Sensor logs\n\nLog lines.\n\n"
        "# Contents\n\n- one\n\n"
        "# License\n\nMIT.\n\n"
        "# Figure 3: Latency over time\n\nCaption text.\n\n"
        "# References\n\n1. A paper.\n"
    )
    _, sections, _ = structure(markdown)
    got = {(s.title, s.role) for s in sections}
    assert got == {
        (None, "body"),
        ("Abstract", "abstract"),
        ("1. Introduction", "introduction"),
        ("1.1 Motivation", "introduction"),  # inherited
        ("Results and discussion", "results"),
        ("Table 2: Throughput", "table"),
        ("Per-site figures", "results"),  # inherited: a table under Results is still results
        ("Appendix B: Raw data", "appendix"),
        ("B.1 Sensor logs", "appendix"),  # everything under an appendix is appendix
        ("Contents", "nav"),
        ("License", "legal"),
        ("Figure 3: Latency over time", "figure_caption"),
        ("References", "references"),
    }
    by_title = {s.title: s for s in sections}
    assert by_title["1. Introduction"].normalized_title == "introduction"
    assert by_title["Appendix B: Raw data"].normalized_title == "appendix b: raw data"
    assert by_title["B.1 Sensor logs"].parent_index == by_title["Appendix B: Raw data"].index
    assert by_title["B.1 Sensor logs"].node_path == "4.0"
    assert by_title[None].node_path == "0" and by_title[None].normalized_title == ""


def test_untitled_table_section_and_untitled_text() -> None:
    _, [table], _ = structure("| k | v |\n|---|---|\n| a | 1 |\n")
    assert (table.title, table.role) == (None, "table")
    _, [body], _ = structure("Just some text.\n")
    assert (body.title, body.role, body.heading_level) == (None, "body", None)


def test_normalize_title() -> None:
    assert normalize_title("  1.2   Related   Work: ") == "related work"
    assert normalize_title("**Ｃonclusions**") == "conclusions"
    assert normalize_title("IV. Methods") == "methods"
    assert normalize_title("2026 roadmap") == "2026 roadmap"
    assert normalize_title(None) == ""


def test_nesting_and_section_ranges() -> None:
    markdown = "# A\n\na\n\n### A1\n\na1\n\n## A2\n\na2\n\n# B\n\nb\n"
    blocks, sections, chunks = structure(markdown)
    assert [(s.title, s.node_path, s.parent_index, s.block_start, s.block_end) for s in sections] == [
        ("A", "0", None, 0, 5),
        ("A1", "0.0", 0, 2, 3),
        ("A2", "0.1", 0, 4, 5),
        ("B", "1", None, 6, 7),
    ]
    assert [(c.text, c.location_header) for c in chunks] == [
        ("# A\n\na", "A"),
        ("### A1\n\na1", "A > A1"),
        ("## A2\n\na2", "A > A2"),
        ("# B\n\nb", "B"),
    ]


def test_heading_chunks() -> None:
    # A heading whose section has subsections but no text of its own is not a chunk (it lives on in the
    # location header); a heading with nothing at all under it is a chunk by itself.
    markdown = "# Stand-up, 17 September 2026\n\n## Decisions\n\nMove billing to October.\n\n## Open\n"
    _, _, chunks = structure(markdown)
    assert [(c.text, c.location_header) for c in chunks] == [
        ("## Decisions\n\nMove billing to October.", "Stand-up, 17 September 2026 > Decisions"),
        ("## Open", "Stand-up, 17 September 2026 > Open"),
    ]


def test_oversize_block_is_its_own_chunk() -> None:
    big = " ".join(f"word{i}" for i in range(60))
    markdown = f"# T\n\nsmall one\n\n{big}\n\nsmall two\n"
    blocks, sections, chunks = structure(markdown, token_budget=20)
    assert [(c.block_start, c.block_end, c.oversize) for c in chunks] == [(0, 1, False), (2, 2, True), (3, 3, False)]
    assert chunks[1].text == big

    # Without the markdown, chunk text is rebuilt exactly from the blocks.
    assert chunk(blocks, sections, token_budget=20) == chunks


# --------------------------------------------------------------------------- offsets, as a property

_SEP_OR_BREAK = re.compile(r"^\s*(?:\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?|([-*_])\s*(?:\1\s*){2,})\s*$")


def _random_document(rng: random.Random) -> str:
    words = ["alpha", "Beta", "gamma", "δέλτα", "naïve", "x=1", "(note)", "2024.", "a|b", "#tag", "Ravi", "—"]

    def sentence(n: int | None = None) -> str:
        return " ".join(rng.choice(words) for _ in range(n or rng.randint(1, 14)))

    parts: list[str] = []
    if rng.random() < 0.5:
        parts.append("Participants: Dana, Ravi")
    for _ in range(rng.randint(1, 25)):
        kind = rng.randrange(12)
        if kind == 0:
            title = rng.choice(["References", "Appendix A", "1. Intro", sentence(3)])
            parts.append("#" * rng.randint(1, 6) + " " + title)
        elif kind == 1:
            parts.append("\n".join(sentence() + " " * rng.randint(0, 2) for _ in range(rng.randint(1, 4))))
        elif kind == 2:
            items = []
            for _ in range(rng.randint(1, 4)):
                marker = rng.choice(["-", "*", "+", "1.", "2)"])
                indent = " " * rng.choice([0, 0, 2])
                item = f"{indent}{marker} {sentence()}"
                if rng.random() < 0.3:
                    item += f"\n{indent}  {sentence()}"
                if rng.random() < 0.2:
                    item += f"\n\n{indent}    {sentence()}"
                items.append(item)
            parts.append("\n".join(items))
        elif kind == 3:
            rows = ["| h1 | h2 |", "|---|---|"]
            rows += [f"| {sentence(2)} | {sentence(1)} |" for _ in range(rng.randint(0, 4))]
            parts.append("\n".join(rows))
        elif kind == 4:
            body = "\n".join(rng.choice(["# inside", "", sentence(), "  indented"]) for _ in range(rng.randint(0, 5)))
            close = "```" if rng.random() < 0.9 else ""
            parts.append(f"```text\n{body}\n{close}".rstrip("\n"))
        elif kind == 5:
            parts.append("\n".join(f"> {sentence()}" for _ in range(rng.randint(1, 3))))
        elif kind == 6:
            stamp = f"2026-09-{rng.randint(10, 28)}T09:{rng.randint(10, 59)}:00Z"
            parts.append(f"[t{rng.randint(1, 99)} | {stamp}] {rng.choice(['Dana', 'Ravi'])}: {sentence()}")
        elif kind == 7:
            parts.append(f"{rng.choice(['Dana', 'Ravi', 'Agenda'])}: {sentence()}")
        elif kind == 8:
            parts.append(rng.choice(["---", "***", "- - -"]))
        elif kind == 9:
            parts.append(" ".join(sentence(14) for _ in range(rng.randint(5, 12))))  # often oversize
        elif kind == 10:
            parts.append("   " + sentence() + "\t")
        else:
            parts.append(sentence())
    sep = rng.choice(["\n\n", "\n\n", "\n", "\n\n\n", "\n \n"])
    text = sep.join(parts) + rng.choice(["", "\n", "\n\n  \n"])
    return text.replace("\n", "\r\n") if rng.random() < 0.1 else text


def _innermost_section(sections: list[Section], ordinal: int) -> int:
    return max((s for s in sections if s.block_start <= ordinal <= s.block_end), key=lambda s: s.block_start).index


def test_offsets_sections_and_chunks_hold_over_generated_documents() -> None:
    rng = random.Random(20260917)
    for _ in range(200):
        markdown = _random_document(rng)
        budget = rng.choice([8, 30, 120, 400])
        blocks, sections, chunks = structure(markdown, token_budget=budget)

        # Blocks: exact slices, in order, no surrounding whitespace, nothing but whitespace
        # and separator/break lines left between them.
        prev_end = 0
        for pos, b in enumerate(blocks):
            assert b.ordinal == pos
            assert b.text == markdown[b.char_start : b.char_end]
            assert b.text and b.text == b.text.strip()
            assert b.char_start >= prev_end
            assert b.gap_before == markdown[prev_end : b.char_start]
            for gap_line in b.gap_before.split("\n"):
                assert not gap_line.strip() or _SEP_OR_BREAK.match(gap_line), (gap_line, markdown)
            prev_end = b.char_end
        for gap_line in markdown[prev_end:].split("\n"):
            assert not gap_line.strip() or _SEP_OR_BREAK.match(gap_line), (gap_line, markdown)
        if not blocks:
            assert sections == [] and chunks == []
            continue

        # Sections: tree over contiguous block ranges; top-level sections partition the blocks.
        tops = [s for s in sections if s.parent_index is None]
        assert tops[0].block_start == 0 and tops[-1].block_end == len(blocks) - 1
        assert all(this.block_end + 1 == nxt.block_start for this, nxt in zip(tops, tops[1:], strict=False))
        for s in sections:
            assert s.char_start == blocks[s.block_start].char_start and s.char_end == blocks[s.block_end].char_end
            if s.parent_index is not None:
                parent = sections[s.parent_index]
                assert parent.block_start < s.block_start <= s.block_end <= parent.block_end
                assert s.node_path.startswith(parent.node_path + ".")

        # Chunks: exact, ordered, non-overlapping, whole blocks, one section each, within budget.
        covered: list[int] = []
        for c in chunks:
            assert c.text == markdown[c.char_start : c.char_end]
            assert (c.char_start, c.char_end) == (blocks[c.block_start].char_start, blocks[c.block_end].char_end)
            assert c.token_count == default_token_count(c.text)
            assert c.oversize == (c.token_count > budget)
            if c.oversize:
                # One block, with the heading and (in a conversation) the header lines before
                # its first turn travelling with it.
                carried = [k for k in range(c.block_start, c.block_end + 1) if blocks[k].kind != "heading"]
                assert len(carried) <= 1 or (blocks[carried[-1]].kind == "speaker_turn" and all(
                    blocks[k].kind != "speaker_turn" for k in carried[:-1]))
            assert {_innermost_section(sections, k) for k in range(c.block_start, c.block_end + 1)} == {c.section_index}
            if c.block_start == c.block_end and blocks[c.block_start].kind == "heading":
                assert sections[c.section_index].block_end == c.block_start  # a heading alone: empty section
            covered.extend(range(c.block_start, c.block_end + 1))
        for this, nxt in zip(chunks, chunks[1:], strict=False):
            # packing stops only when the next block does not fit or at a content-defined cut point
            if this.section_index == nxt.section_index:
                assert default_token_count(markdown[this.char_start : blocks[nxt.block_start].char_end]) > budget \
                    or _is_natural_boundary(blocks[this.block_end])
        assert covered == sorted(set(covered))
        assert all(this.char_end <= nxt.char_start for this, nxt in zip(chunks, chunks[1:], strict=False))
        assert {b.ordinal for b in blocks if b.kind != "heading"} <= set(covered)
        assert chunk(blocks, sections, token_budget=budget) == chunks  # rebuilt from blocks alone


# --------------------------------------------------------------------------- hashing and reuse


def test_normalized_hash_ignores_case_width_and_whitespace() -> None:
    assert normalized_hash("Ravi  owns\nthe   EXPORTER ") == normalized_hash("ravi owns the exporter")
    assert normalized_hash("ｆｕｌｌ width") == normalized_hash("full width")
    assert normalized_hash("Ravi owns the exporter") != normalized_hash("Dana owns the exporter")
    assert re.fullmatch(r"[0-9a-f]{64}", normalized_hash(""))


def _fifty_paragraphs(edit: int | None = None, insert: int | None = None) -> str:
    paragraphs = [f"Paragraph {i}: the exporter handles batch number {i} for the finance team." for i in range(50)]
    if edit is not None:
        paragraphs[edit] = f"Paragraph {edit}: the exporter was REWRITTEN for the finance team."
    if insert is not None:
        paragraphs.insert(insert, "An entirely new paragraph about the October migration.")
    return "\n\n".join(paragraphs) + "\n"


def _plan(old_md: str, new_md: str, budget: int) -> tuple[list[Chunk], list[Chunk], list[int | None]]:
    *_, old = structure(old_md, token_budget=budget)
    *_, new = structure(new_md, token_budget=budget)
    return old, new, reuse_plan([(f"c{c.ordinal}", c.content_hash) for c in old], new)


def test_reuse_plan_one_edited_paragraph_reprocesses_only_its_chunk() -> None:
    # One paragraph per chunk: editing paragraph 20 leaves 49 of 50 chunks reusable.
    old, new, plan = _plan(_fifty_paragraphs(), _fifty_paragraphs(edit=20), budget=20)
    assert len(old) == len(new) == 50
    assert plan == [None if i == 20 else i for i in range(50)]

    # Unchanged document: everything is reused, in place.
    _, _, plan = _plan(_fifty_paragraphs(), _fifty_paragraphs(), budget=20)
    assert plan == list(range(50))


def test_reuse_plan_with_packed_chunks_and_with_an_insertion() -> None:
    # Several paragraphs per chunk: cut points depend on content, so only the chunk
    # holding the edit is redone (and a neighbour when the edit moved a cut point).
    old, new, plan = _plan(_fifty_paragraphs(), _fifty_paragraphs(edit=20), budget=400)
    assert len(old) > 3
    changed = next(c.ordinal for c in new if "REWRITTEN" in c.text)
    assert plan[changed] is None
    assert sum(p is None for p in plan) <= 2
    assert all(p is not None for i, p in enumerate(plan) if abs(i - changed) > 1)

    # Inserting a paragraph shifts later chunks; they are still reused, under their old index.
    old, new, plan = _plan(_fifty_paragraphs(), _fifty_paragraphs(insert=10), budget=20)
    assert len(new) == 51
    assert plan == [i if i < 10 else None if i == 10 else i - 1 for i in range(51)]


def test_reuse_plan_uses_each_old_chunk_at_most_once() -> None:
    repeated = "\n\n".join(["same text"] * 5) + "\n"
    old, new, plan = _plan(repeated, repeated, budget=3)
    assert len(new) == 5
    assert plan == [0, 1, 2, 3, 4]
    assert reuse_plan([], new) == [None] * 5


def test_invalid_budget_is_refused() -> None:
    blocks = parse_blocks(STANDUP)
    with pytest.raises(ValueError, match="token_budget"):
        chunk(blocks, build_sections(blocks, STANDUP), token_budget=0)


def _session(title: str, names: tuple[str, str], turns: int) -> str:
    lines = [f"# {title}", "", f"Participants: {names[0]}, {names[1]}"]
    for n in range(1, turns + 1):
        lines += ["", f"[s1-{n} | 2026-03-0{1 + n % 9}T10:{n:02d}:00Z] {names[n % 2]}: line {n} about topic {n * 7}."]
    return "\n".join(lines) + "\n"


def test_a_conversation_header_never_becomes_a_chunk_of_its_own() -> None:
    # Content-defined cut points fall on identical header text in a quarter of all sessions;
    # over many titles, some participants lines are such cut points. None may end a chunk.
    names = ["Melanie", "Caroline", "Jon", "Gina", "Priya", "Tom", "Aiko", "Dev", "Lucia", "Sam"]
    for i in range(80):
        pair = (names[i % len(names)], names[(i * 3 + 1) % len(names)])
        markdown = _session(f"Session {i} catch-up", pair, 3 + i % 5)
        blocks = parse_blocks(markdown)
        chunks = chunk(blocks, build_sections(blocks, markdown), markdown=markdown, token_budget=60)
        for c in chunks:
            assert any(blocks[k].kind == "speaker_turn" for k in range(c.block_start, c.block_end + 1)), c.text
        assert chunks[0].block_start == 0  # the header is still covered, by the first turn's chunk


def test_retrieval_text_keeps_what_was_said_and_drops_the_scaffolding() -> None:
    markdown = _session("Bakery chat", ("Grace", "Mateo"), 2)
    text = retrieval_text(markdown)
    assert "Participants" not in text and "s1-1" not in text and "2026" not in text
    assert "Mateo: line 1 about topic 7." in text and "Grace: line 2 about topic 14." in text
    assert text.startswith("# Bakery chat")
    plain = "# Notes\n\nRavi owns the invoice exporter.\n"
    assert retrieval_text(plain) == plain  # documents that are not conversations are untouched


def test_retrieval_units_are_the_turns_and_blocks_a_chunk_holds() -> None:
    assert retrieval_units(_session("Bakery chat", ("Grace", "Mateo"), 2)) == [
        "Mateo: line 1 about topic 7.", "Grace: line 2 about topic 14."]  # no header, id, clock or roster
    document = "# Notes\n\nRavi owns the exporter.\n\n- Dana reviews it\n- Mira ships it\n\n| who | what |\n|---|---|\n"
    assert retrieval_units(document) == ["Ravi owns the exporter.", "- Dana reviews it", "- Mira ships it",
                                         "| who | what |"]
    assert retrieval_units("# A heading alone\n") == ["# A heading alone\n"]  # still one unit, never none
    # Where each unit lies in the chunk (search returns a unit as its own slice of the chunk):
    # a turn's span keeps its anchor head, a block is itself.
    session = _session("Bakery chat", ("Grace", "Mateo"), 2)
    spans = retrieval_unit_spans(session)
    assert [unit for _, _, unit in spans] == retrieval_units(session)
    assert all(session[a:b].startswith("[s") and session[a:b].endswith(unit.split(": ", 1)[1]) for a, b, unit in spans)
    assert [document[a:b] for a, b, _ in retrieval_unit_spans(document)] == retrieval_units(document)
    assert retrieval_unit_spans("# A heading alone\n") == [(0, 18, "# A heading alone\n")]


def test_a_chunk_is_embedded_whole_and_unit_by_unit() -> None:
    text = _session("Bakery chat", ("Grace", "Mateo"), 2)
    assert embedding_inputs("chunks", "c", text) == [("c", None, retrieval_text(text)),
                                                     ("c", 0, "Mateo: line 1 about topic 7."),
                                                     ("c", 1, "Grace: line 2 about topic 14.")]
    assert embedding_inputs("claims", "k", "Ravi owns it.") == [("k", None, "Ravi owns it.")]
