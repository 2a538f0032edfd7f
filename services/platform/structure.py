"""Structure and chunking of a document's Markdown representation.

Every document is first converted to Markdown (its *representation*). This module
reads that string and derives, deterministically and without any model:

* the **block grid** (:func:`parse_blocks`): headings, paragraphs, list items, table
  rows, fenced code, quotes and speaker turns, each with exact half-open character
  offsets into the representation (``Block.text == markdown[char_start:char_end]``);
* the **section tree** (:func:`build_sections`) from the headings, with a role for
  each section derived from its title;
* the **chunks** (:func:`chunk`): non-overlapping runs of whole blocks that never cross
  a section boundary and stay within a token budget;
* the **reuse plan** (:func:`reuse_plan`) that lets a new version of a document keep
  the chunks, vectors and claims of passages that did not change.

All offsets are Python ``str`` indices (code points), half-open.

It lives in ``services/platform`` because one parse serves every service: the pipeline
chunks and extracts with it, retrieval maps a hit back to its turn or block
(:func:`retrieval_unit_spans`), and the query space hashes blocks with it.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Literal, TypeVar

__all__ = [
    "Block",
    "BlockKind",
    "Chunk",
    "Section",
    "SectionRole",
    "build_sections",
    "chunk",
    "content_start",
    "default_token_count",
    "embedding_inputs",
    "heading_span",
    "normalize_title",
    "normalized_hash",
    "parse_blocks",
    "retrieval_text",
    "retrieval_unit_spans",
    "retrieval_units",
    "reuse_plan",
    "title_role",
    "turn_spans",
]

K = TypeVar("K")
BlockKind = Literal["heading", "paragraph", "list_item", "table_row", "code", "quote", "speaker_turn"]
SectionRole = Literal[
    "body",
    "abstract",
    "introduction",
    "methods",
    "results",
    "discussion",
    "conclusion",
    "references",
    "appendix",
    "table",
    "figure_caption",
    "nav",
    "boilerplate",
    "legal",
]


@dataclass(frozen=True, slots=True)
class Block:
    """One block of the representation.

    ``text`` is always ``markdown[char_start:char_end]``; it never starts or ends with
    whitespace. ``gap_before`` is the representation text between the previous block's
    end (or the start of the document) and this block's start: whitespace, plus lines
    that are deliberately not blocks (table separator rows, thematic breaks). Together,
    ``gap_before + text`` of all blocks in order reproduce the representation up to the
    last block's end, which lets :func:`chunk` rebuild exact chunk text from blocks alone.
    """

    ordinal: int
    kind: BlockKind
    char_start: int
    char_end: int
    text: str
    level: int | None = None  # heading level 1..6, headings only
    speaker: str | None = None  # speaker turns only
    turn_id: str | None = None  # speaker turns in the "[<turn-id> | <time>]" form
    turn_time: datetime | None = None  # aware; None when absent or without a time zone
    gap_before: str = ""


@dataclass(frozen=True, slots=True)
class Section:
    """A node of the section tree.

    ``node_path`` is the materialised path of 0-based sibling ordinals: top-level
    sections are ``"0"``, ``"1"``, …; the children of ``"1"`` are ``"1.0"``, ``"1.1"``, ….
    Text before the first heading forms an untitled top-level section (``title=None``,
    ``heading_level=None``). ``block_end`` is inclusive and covers nested subsections;
    ``char_start``/``char_end`` run from the first block's start to the last block's end.
    ``ordinal`` is the position among siblings.
    """

    index: int
    parent_index: int | None
    node_path: str
    heading_level: int | None
    title: str | None
    normalized_title: str
    role: SectionRole
    block_start: int
    block_end: int
    char_start: int
    char_end: int
    ordinal: int = 0


@dataclass(frozen=True, slots=True)
class Chunk:
    """A non-overlapping run of whole blocks inside one section.

    ``block_end`` is inclusive; ``text == markdown[char_start:char_end]``. ``oversize``
    is true when ``token_count`` exceeds the budget, which happens only when a single
    block (possibly with its section heading attached) is larger than the budget.
    """

    ordinal: int
    section_index: int
    block_start: int
    block_end: int
    char_start: int
    char_end: int
    text: str
    token_count: int
    content_hash: str
    location_header: str | None
    oversize: bool = False


# --------------------------------------------------------------------------- tokens, hashes

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def default_token_count(text: str) -> int:
    """Approximate the token count of ``text`` without a tokenizer.

    Counts regex tokens (runs of word characters, and each other non-space character
    separately), multiplies by 1.3 for sub-word splitting and rounds up:
    ``ceil(n * 1.3)``, computed in integers so it is exact and deterministic.
    """

    n = len(_TOKEN_RE.findall(text))
    return (n * 13 + 9) // 10


def normalized_hash(text: str) -> str:
    """SHA-256 hex of ``text`` normalised for reuse matching.

    Normalisation: Unicode NFKC, lowercase, every whitespace run collapsed to one
    space, stripped. Texts that differ only in case, width forms or whitespace hash
    the same.
    """

    normal = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- block grid

_ATX_RE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSE_RE = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_THEMATIC_RE = re.compile(r"^ {0,3}([-*_])[ \t]*(?:\1[ \t]*){2,}$")
_LIST_RE = re.compile(r"^([ \t]*)([-*+]|\d{1,9}[.)])([ \t]+|$)")
_QUOTE_RE = re.compile(r"^ {0,3}>")
_TABLE_SEP_RE = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_BRACKET_TURN_RE = re.compile(r"^\[(?P<head>[^\]\n]*)\][ \t]*(?P<speaker>[^:\s(\[][^:\n]{0,79}?)[ \t]*:(?:[ \t].*)?$")
_PLAIN_TURN_RE = re.compile(r"^(?P<speaker>[^\s:\[\]|#>*`][^:\[\]|\n]{0,79}?)[ \t]*:(?:[ \t].*)?$")
_PARTICIPANTS_RE = re.compile(r"^[*_]*participants[*_]*[ \t]*:[*_]*[ \t]*(?P<names>.+)$", re.IGNORECASE)
_NAME_SPLIT_RE = re.compile(r"\s*(?:,|;|\band\b|&)\s*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Line:
    start: int  # offset of the line's first character
    text: str  # without the "\n"
    content_start: int  # first non-whitespace character
    content_end: int  # just after the last non-whitespace character

    @property
    def blank(self) -> bool:
        return self.content_end <= self.content_start

    @property
    def content(self) -> str:
        return self.text.strip()

    @property
    def indent(self) -> int:
        raw = self.text[: len(self.text) - len(self.text.lstrip())]
        return len(raw.expandtabs(4))


def _split_lines(markdown: str) -> list[_Line]:
    lines: list[_Line] = []
    pos = 0
    while True:
        nl = markdown.find("\n", pos)
        end = len(markdown) if nl == -1 else nl
        text = markdown[pos:end]
        stripped_left = text.lstrip()
        content_start = pos + len(text) - len(stripped_left)
        content_end = pos + len(text.rstrip())
        lines.append(_Line(pos, text, content_start, max(content_start, content_end)))
        if nl == -1:
            return lines
        pos = nl + 1


def _parse_time(raw: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(raw.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


@dataclass(frozen=True, slots=True)
class _Turn:
    speaker: str
    turn_id: str | None
    turn_time: datetime | None


def _match_turn(line: _Line, participants: frozenset[str]) -> _Turn | None:
    content = line.content
    m = _BRACKET_TURN_RE.match(content)
    if m is not None:
        head = m.group("head")
        if "|" in head:
            raw_id, raw_time = head.split("|", 1)
            return _Turn(m.group("speaker").strip(), raw_id.strip() or None, _parse_time(raw_time))
        when = _parse_time(head)
        if when is not None:
            return _Turn(m.group("speaker").strip(), None, when)
        return None
    if participants:
        m = _PLAIN_TURN_RE.match(content)
        if m is not None and m.group("speaker").strip().casefold() in participants:
            return _Turn(m.group("speaker").strip(), None, None)
    return None


def _participants(line: _Line) -> frozenset[str]:
    m = _PARTICIPANTS_RE.match(line.content)
    if m is None:
        return frozenset()
    names = (name.strip(" \t*_").casefold() for name in _NAME_SPLIT_RE.split(m.group("names")))
    return frozenset(name for name in names if name)


def _is_table_sep(line: _Line) -> bool:
    return "|" in line.text and _TABLE_SEP_RE.match(line.text) is not None


def _starts_table(lines: list[_Line], i: int) -> bool:
    line = lines[i]
    if line.content.startswith("|"):
        return True
    return "|" in line.text and i + 1 < len(lines) and _is_table_sep(lines[i + 1])


def _list_marker(line: _Line) -> re.Match[str] | None:
    if _THEMATIC_RE.match(line.text):
        return None
    return _LIST_RE.match(line.text)


def _interrupts(lines: list[_Line], i: int, participants: frozenset[str], *, in_list: bool = False) -> bool:
    """Whether line ``i`` starts a new block rather than continuing the current one.

    Outside a list, an ordered marker other than ``1.``/``1)`` does not interrupt (so a
    wrapped line starting with "2024." stays in its paragraph), as in CommonMark.
    """

    line = lines[i]
    text = line.text
    if _FENCE_RE.match(text) or _ATX_RE.match(text) or _THEMATIC_RE.match(text) or _QUOTE_RE.match(text):
        return True
    m = _list_marker(line)
    if m is not None and (in_list or not m.group(2)[0].isdigit() or m.group(2)[:-1] == "1"):
        return True
    if _starts_table(lines, i):
        return True
    return _match_turn(line, participants) is not None


def parse_blocks(markdown: str) -> list[Block]:
    """Split the representation into blocks with exact offsets.

    Not blocks (they stay in the gaps between blocks): blank lines, table separator
    rows (``|---|``) and thematic breaks (``---``). A ``Participants: A, B`` line is a
    paragraph; after it, ``A: text`` lines of a listed participant are speaker turns.
    """

    lines = _split_lines(markdown)
    n = len(lines)
    blocks: list[Block] = []
    participants: frozenset[str] = frozenset()
    prev_end = 0

    def emit(
        kind: BlockKind,
        first: int,
        last: int,
        *,
        level: int | None = None,
        turn: _Turn | None = None,
    ) -> None:
        nonlocal prev_end
        start, end = lines[first].content_start, lines[last].content_end
        blocks.append(
            Block(
                ordinal=len(blocks),
                kind=kind,
                char_start=start,
                char_end=end,
                text=markdown[start:end],
                level=level,
                speaker=turn.speaker if turn else None,
                turn_id=turn.turn_id if turn else None,
                turn_time=turn.turn_time if turn else None,
                gap_before=markdown[prev_end:start],
            )
        )
        prev_end = end

    def continuation(i: int) -> int:
        """Last line of a paragraph-like block starting at ``i`` (lazy continuation)."""

        nonlocal participants
        last = i
        j = i + 1
        while j < n and not lines[j].blank and not _interrupts(lines, j, participants):
            participants |= _participants(lines[j])
            last = j
            j += 1
        return last

    i = 0
    while i < n:
        line = lines[i]
        if line.blank:
            i += 1
            continue
        text = line.text

        fence = _FENCE_RE.match(text)
        if fence is not None and not (fence.group(1)[0] == "`" and "`" in fence.group(2)):
            marker = fence.group(1)
            close_re = re.compile(r"^ {0,3}" + re.escape(marker[0]) + "{" + str(len(marker)) + r",}[ \t]*$")
            last = i
            j = i + 1
            closed = False
            while j < n:
                if close_re.match(lines[j].text):
                    last, closed = j, True
                    break
                if not lines[j].blank:
                    last = j
                j += 1
            emit("code", i, last)
            i = last + 1 if closed else n
            continue

        heading = _ATX_RE.match(text)
        if heading is not None:
            emit("heading", i, i, level=len(heading.group(1)))
            i += 1
            continue

        if _THEMATIC_RE.match(text):
            i += 1
            continue

        if _QUOTE_RE.match(text):
            j = i
            while j + 1 < n and _QUOTE_RE.match(lines[j + 1].text):
                j += 1
            emit("quote", i, j)
            i = j + 1
            continue

        if _starts_table(lines, i):
            j = i
            while j < n and not lines[j].blank:
                if j - i <= 1 and _is_table_sep(lines[j]):
                    j += 1
                    continue
                if "|" not in lines[j].text:
                    break
                if j > i and _interrupts(lines, j, participants) and not _starts_table(lines, j):
                    break
                emit("table_row", j, j)
                j += 1
            i = j
            continue

        item = _list_marker(line)
        if item is not None:
            space = item.group(3)
            width = len(space.expandtabs(4)) if 0 < len(space.expandtabs(4)) <= 4 else 1
            content_col = len(item.group(1).expandtabs(4)) + len(item.group(2)) + width
            last = i
            j = i + 1
            while j < n:
                if lines[j].blank:
                    k = j
                    while k < n and lines[k].blank:
                        k += 1
                    if (
                        k < n
                        and lines[k].indent >= content_col
                        and not _interrupts(lines, k, participants, in_list=True)
                    ):
                        last, j = k, k + 1
                        continue
                    break
                if _interrupts(lines, j, participants, in_list=True):
                    break
                last = j
                j += 1
            emit("list_item", i, last)
            i = last + 1
            continue

        turn = _match_turn(line, participants)
        if turn is not None:
            last = continuation(i)
            emit("speaker_turn", i, last, turn=turn)
            i = last + 1
            continue

        participants |= _participants(line)
        last = continuation(i)
        emit("paragraph", i, last)
        i = last + 1

    return blocks


# --------------------------------------------------------------------------- sections

_EMPHASIS_RE = re.compile(r"^(\*\*|__|\*|_|`)(.+)\1$")
_NUMBERING_RE = re.compile(r"^(?:\d{1,3}(?:\.\d{1,3})*[.)]?|[ivxlc]{1,6}[.)]|§\s*\d+(?:\.\d+)*\.?)\s+")

_ROLE_PATTERNS: tuple[tuple[SectionRole, str], ...] = (
    (
        "nav",
        r"^(?:table of contents|contents|toc|navigation|on this page|in this (?:article|page)|"
        r"site ?map|menu|breadcrumbs?)$",
    ),
    ("figure_caption", r"^(?:figure|fig\.?)\s*\d"),
    ("table", r"^table\s*\d"),
    (
        "references",
        r"^(?:(?:references?|bibliography|works cited|literature cited|reference list|"
        r"notes and references)\b|(?:sources|citations)$)",
    ),
    (
        "appendix",
        r"^(?:appendix|appendices|annex(?:es)?|supplementary (?:material|materials|information|data)|"
        r"supplemental (?:material|materials|information|data))\b",
    ),
    (
        "legal",
        r"^(?:licen[cs]e|licensing|terms|terms of (?:use|service)|terms and conditions|disclaimers?|"
        r"copyright|privacy policy|privacy notice|legal notice|imprint|impressum)\b",
    ),
    (
        "boilerplate",
        r"^(?:footer|cookies?|cookie (?:policy|settings|preferences|notice)|share this|"
        r"related (?:posts|articles|stories|content|links)|subscribe|newsletter|follow us|"
        r"advertisement|skip to content)\b",
    ),
    ("abstract", r"^(?:abstract\b|summary$|executive summary$|tl;?dr$)"),
    ("introduction", r"^(?:introduction|intro)\b"),
    (
        "methods",
        r"^(?:methods?|methodology|materials and methods|methods and materials|"
        r"experimental (?:setup|design|methods|procedures?)|study design)\b",
    ),
    ("results", r"^(?:results?|findings)\b"),
    ("discussion", r"^discussion\b"),
    ("conclusion", r"^(?:conclusions?|concluding remarks|summary and conclusions?|closing remarks)\b"),
)
_ROLE_RULES: tuple[tuple[SectionRole, re.Pattern[str]], ...] = tuple(
    (role, re.compile(pattern)) for role, pattern in _ROLE_PATTERNS
)

# Roles that describe a section's content, not its place in the document: a subsection
# does not inherit them.
_NON_INHERITED: frozenset[SectionRole] = frozenset({"body", "table", "figure_caption"})


def normalize_title(title: str | None) -> str:
    """Normalise a heading title for stable matching ('' when untitled).

    NFKC, lowercase (case-folded), whitespace collapsed, one level of wrapping
    emphasis removed, leading numbering ("1.2 ", "1. ", "IV. ", "§ 3 ") and trailing
    colons stripped.
    """

    if not title:
        return ""
    text = " ".join(unicodedata.normalize("NFKC", title).casefold().split())
    m = _EMPHASIS_RE.match(text)
    if m is not None:
        text = m.group(2).strip()
    text = _NUMBERING_RE.sub("", text, count=1)
    return text.rstrip(": ").strip()


def title_role(normalized_title: str) -> SectionRole | None:
    """The role a normalised title names by itself, or None when it names none."""

    for role, pattern in _ROLE_RULES:
        if pattern.search(normalized_title):
            return role
    return None


def _heading_title(text: str) -> str | None:
    m = _ATX_RE.match(text)
    if m is None:
        return text.strip() or None
    body = (m.group(2) or "").strip()
    body = _ATX_CLOSE_RE.sub("", body).strip()
    return body or None


def heading_span(block: Block) -> tuple[int, int]:
    """Offsets of a heading block's title in the representation (no ``#`` marks, no closing
    sequence); empty at the block's end for a bare ``#``."""
    m = _ATX_RE.match(block.text)
    body = (m.group(2) or "") if m is not None else block.text
    start = block.char_start + (m.start(2) if m is not None and m.group(2) is not None else len(block.text))
    trimmed = _ATX_CLOSE_RE.sub("", body).rstrip()
    lead = len(trimmed) - len(trimmed.lstrip())
    return start + lead, start + len(trimmed)


def turn_spans(block: Block) -> tuple[tuple[int, int], tuple[int, int] | None, int]:
    """A speaker turn's speaker name span, the span of its time (the ``[… | time]`` or
    ``[time]`` head, None without one) and the offset where the spoken text starts."""
    first_line = block.text.split("\n", 1)[0]
    m = _BRACKET_TURN_RE.match(first_line) or _PLAIN_TURN_RE.match(first_line)
    assert m is not None, "not a speaker turn"
    speaker = m.group("speaker").rstrip()
    speaker_span = (block.char_start + m.start("speaker"), block.char_start + m.start("speaker") + len(speaker))
    time_span = None
    if "head" in m.groupdict():
        head_start, head = m.start("head"), m.group("head")
        offset = head.index("|") + 1 if "|" in head else 0
        raw = head[offset:]
        lead = len(raw) - len(raw.lstrip())
        time_span = (block.char_start + head_start + offset + lead,
                     block.char_start + head_start + offset + len(raw.rstrip()))
    colon = first_line.index(":", m.end("speaker"))
    rest = block.text[colon + 1:]
    return speaker_span, time_span, block.char_start + colon + 1 + (len(rest) - len(rest.lstrip(" \t")))


def content_start(block: Block) -> int:
    """Where a list item's or quote's own text starts (after the marker, an optional task box)."""
    if block.kind == "list_item":
        m = _LIST_RE.match(block.text)
        end = m.end() if m is not None else 0
        box = re.match(r"\[[ xX]\][ \t]+", block.text[end:])
        return block.char_start + end + (box.end() if box else 0)
    if block.kind == "quote":
        m = re.match(r" {0,3}>[ \t]?", block.text)
        return block.char_start + (m.end() if m else 0)
    return block.char_start


def build_sections(blocks: Sequence[Block], markdown: str) -> list[Section]:
    """Build the section tree from the headings of ``blocks``.

    A heading opens a section that runs until the next heading of the same or a
    higher level (a smaller or equal ``level``). Blocks before the first heading form
    an untitled top-level section. Sections are returned in document order (pre-order).

    Role: the role named by the section's own title (:func:`title_role`); otherwise the
    parent's role, unless that is ``body``, ``table`` or ``figure_caption``; otherwise
    ``table`` when the section's own blocks (after its heading, before any subsection)
    are all table rows; otherwise ``body``.
    """

    if not blocks:
        return []

    # (heading ordinal or None, level) per section, in document order.
    opened: list[tuple[int | None, int | None]] = []
    if blocks[0].kind != "heading":
        opened.append((None, None))
    opened.extend((b.ordinal, b.level or 1) for b in blocks if b.kind == "heading")

    starts = [0 if h is None else h for h, _ in opened]
    parents: list[int | None] = []
    ends: list[int] = [len(blocks) - 1] * len(opened)
    stack: list[int] = []  # indices of open titled sections
    for idx, (head, level) in enumerate(opened):
        if head is None:
            parents.append(None)
            ends[idx] = (starts[1] - 1) if len(opened) > 1 else len(blocks) - 1
            continue
        assert level is not None
        while stack and (opened[stack[-1]][1] or 0) >= level:
            ends[stack.pop()] = starts[idx] - 1
        parents.append(stack[-1] if stack else None)
        stack.append(idx)

    first_child: dict[int, int] = {}
    sibling_count: defaultdict[int | None, int] = defaultdict(int)
    sections: list[Section] = []
    for idx, (head, level) in enumerate(opened):
        parent = parents[idx]
        if parent is not None:
            first_child.setdefault(parent, idx)
        ordinal = sibling_count[parent]
        sibling_count[parent] += 1
        node_path = str(ordinal) if parent is None else f"{sections[parent].node_path}.{ordinal}"

        head_block = blocks[head] if head is not None else None
        title = (
            _heading_title(markdown[head_block.char_start : head_block.char_end]) if head_block is not None else None
        )
        normalized = normalize_title(title)
        sections.append(
            Section(
                index=idx,
                parent_index=parent,
                node_path=node_path,
                heading_level=level,
                title=title,
                normalized_title=normalized,
                role="body",  # settled below, once subsections are known
                block_start=starts[idx],
                block_end=ends[idx],
                char_start=blocks[starts[idx]].char_start,
                char_end=blocks[ends[idx]].char_end,
                ordinal=ordinal,
            )
        )

    resolved: list[Section] = []
    for sec in sections:
        role = title_role(sec.normalized_title)
        if role is None and sec.parent_index is not None and resolved[sec.parent_index].role not in _NON_INHERITED:
            role = resolved[sec.parent_index].role
        if role is None:
            own_end = _own_end(sec, sections, first_child)
            content = blocks[sec.block_start + (0 if sec.heading_level is None else 1) : own_end + 1]
            role = "table" if content and all(b.kind == "table_row" for b in content) else "body"
        resolved.append(_replace_role(sec, role))
    return resolved


def _replace_role(sec: Section, role: SectionRole) -> Section:
    return Section(
        index=sec.index,
        parent_index=sec.parent_index,
        node_path=sec.node_path,
        heading_level=sec.heading_level,
        title=sec.title,
        normalized_title=sec.normalized_title,
        role=role,
        block_start=sec.block_start,
        block_end=sec.block_end,
        char_start=sec.char_start,
        char_end=sec.char_end,
        ordinal=sec.ordinal,
    )


def _own_end(sec: Section, sections: Sequence[Section], first_child: dict[int, int]) -> int:
    """Last block ordinal that belongs to ``sec`` itself rather than to a subsection."""

    child = first_child.get(sec.index)
    return sec.block_end if child is None else sections[child].block_start - 1


# --------------------------------------------------------------------------- chunks


def _location_header(sec: Section, sections: Sequence[Section]) -> str | None:
    titles: list[str] = []
    cur: Section | None = sec
    while cur is not None:
        if cur.title:
            titles.append(cur.title)
        cur = sections[cur.parent_index] if cur.parent_index is not None else None
    return " > ".join(reversed(titles)) or None


def chunk(
    blocks: Sequence[Block],
    sections: Sequence[Section],
    *,
    markdown: str | None = None,
    token_budget: int = 400,
    count_tokens: Callable[[str], int] = default_token_count,
) -> list[Chunk]:
    """Cut the blocks into chunks: non-overlapping runs of whole blocks.

    Each section's own blocks (those before its first subsection) are packed greedily
    in order while the chunk text fits ``token_budget`` (measured by ``count_tokens``
    on the exact chunk text). A chunk never crosses a section boundary and never splits
    a block; a block that alone exceeds the budget becomes its own chunk with
    ``oversize=True``. A heading always travels with the block after it (so heading +
    an oversize block is one oversize chunk). A heading forms a chunk alone only in a
    section with no other block at all; the heading of a section whose only own block
    is the heading but which has subsections is not chunked (its title is in every
    subsection chunk's ``location_header``).

    Chunk text is ``markdown[char_start:char_end]``; without ``markdown`` it is rebuilt
    from the blocks' ``text`` and ``gap_before``, which is exact for blocks produced by
    :func:`parse_blocks`.
    """

    if token_budget < 1:
        raise ValueError(f"token_budget must be at least 1, got {token_budget}")
    for pos, block in enumerate(blocks):
        if block.ordinal != pos:
            raise ValueError(f"block at position {pos} has ordinal {block.ordinal}; pass blocks in order")
        if markdown is None and pos and len(block.gap_before) != block.char_start - blocks[pos - 1].char_end:
            raise ValueError(f"block {pos} has no exact gap_before; pass markdown= to chunk()")

    def text_of(first: int, last: int) -> str:
        if markdown is not None:
            return markdown[blocks[first].char_start : blocks[last].char_end]
        return blocks[first].text + "".join(blocks[k].gap_before + blocks[k].text for k in range(first + 1, last + 1))

    def tokens_of(first: int, last: int) -> int:
        return count_tokens(text_of(first, last))

    first_child: dict[int, int] = {}
    for sec in sections:
        if sec.parent_index is not None:
            first_child.setdefault(sec.parent_index, sec.index)

    chunks: list[Chunk] = []

    def emit(sec: Section, header: str | None, first: int, last: int) -> None:
        text = text_of(first, last)
        tokens = count_tokens(text)
        chunks.append(
            Chunk(
                ordinal=len(chunks),
                section_index=sec.index,
                block_start=first,
                block_end=last,
                char_start=blocks[first].char_start,
                char_end=blocks[last].char_end,
                text=text,
                token_count=tokens,
                content_hash=normalized_hash(text),
                location_header=header,
                oversize=tokens > token_budget,
            )
        )

    for sec in sections:
        start, end = sec.block_start, _own_end(sec, sections, first_child)
        if end < start:
            continue
        if start == end and blocks[start].kind == "heading" and sec.index in first_child:
            continue
        header = _location_header(sec, sections)
        turns = [k for k in range(start, end + 1) if blocks[k].kind == "speaker_turn"]
        run_start = start
        while run_start <= end:
            # A heading always takes the next block with it.
            least = run_start + 1 if blocks[run_start].kind == "heading" and run_start < end else run_start
            # In a conversation the blocks before a turn (the title, the participants
            # line) travel with the next turn: a chunk is never a header alone, whatever
            # the content-defined cut points say.
            if blocks[run_start].kind != "speaker_turn":
                following = next((k for k in turns if k >= run_start), None)
                if following is not None:
                    least = max(least, following)
            run_end = _longest_fit(partial(tokens_of, run_start), least, end, token_budget)
            run_end = _natural_cut(blocks, least, run_end)
            emit(sec, header, run_start, run_end)
            run_start = run_end + 1
    return chunks


def _longest_fit(tokens_to: Callable[[int], int], least: int, most: int, budget: int) -> int:
    """The largest ``last`` in ``[least, most]`` with ``tokens_to(last) <= budget``, else ``least``.

    Token counts grow with the run, so this is what greedy block-by-block packing gives,
    found by galloping and bisection in O(log n) counts instead of one count per block.
    """

    if least >= most or tokens_to(least + 1) > budget:
        return least
    good, step = least + 1, 1
    while good < most:
        probe = min(good + step, most)
        if tokens_to(probe) > budget:
            bad = probe
            break
        good, step = probe, step * 2
    else:
        return good
    while bad - good > 1:
        mid = (good + bad) // 2
        if tokens_to(mid) <= budget:
            good = mid
        else:
            bad = mid
    return good


# --------------------------------------------------------------------------- reuse


# A block whose normalised-text hash falls in 1/BOUNDARY_EVERY of the hash space ends a
# chunk even when more would fit. Cut points then depend on content, not on position:
# editing one paragraph moves at most the boundaries around it, so every other chunk of
# a new version keeps its text, its hash, and with them its vectors and claims.
BOUNDARY_EVERY = 4


def _is_natural_boundary(block: Block) -> bool:
    return block.kind != "heading" and int(normalized_hash(block.text)[:8], 16) % BOUNDARY_EVERY == 0


def _natural_cut(blocks: Sequence[Block], least: int, fitted_end: int) -> int:
    for k in range(least, fitted_end):
        if _is_natural_boundary(blocks[k]):
            return k
    return fitted_end


def reuse_plan(old_chunks: Sequence[tuple[str, str]], new_chunks: Sequence[Chunk]) -> list[int | None]:
    """For each new chunk, the index into ``old_chunks`` whose work it can reuse, or None.

    ``old_chunks`` are the previous version's ``(chunk_id, content_hash)`` pairs in
    ordinal order. A chunk is reused when its normalised text is unchanged: extraction
    reads a passage on its own (plus document-level context such as the said-on date), so
    an unchanged passage yields the same claims. Each old chunk is reused at most once,
    the earliest unused one first. With content-defined cut points (see
    :data:`BOUNDARY_EVERY`) editing one paragraph re-processes only the chunk holding it,
    and at most its neighbours when the edit moves a cut point.
    """
    candidates: defaultdict[str, deque[int]] = defaultdict(deque)
    for j, (_, content_hash) in enumerate(old_chunks):
        candidates[content_hash].append(j)
    plan: list[int | None] = []
    for chunk_ in new_chunks:
        queue = candidates.get(chunk_.content_hash)
        plan.append(queue.popleft() if queue else None)
    return plan


# --------------------------------------------------------------------------- retrieval text


def _search_blocks(text: str) -> list[tuple[Block, str]]:
    """The blocks of a chunk as search sees them (see ``retrieval_text``)."""
    blocks = parse_blocks(text)
    turns = any(b.kind == "speaker_turn" for b in blocks)
    parts: list[tuple[Block, str]] = []
    for block in blocks:
        if turns and block.kind == "speaker_turn":
            m = _BRACKET_TURN_RE.match(block.text.split("\n", 1)[0])
            if m is not None:
                parts.append((block, block.text[m.start("speaker"):]))
                continue
        elif turns and block.kind == "paragraph" and _participants(_line_of(block.text)):
            continue
        parts.append((block, block.text))
    return parts


def retrieval_text(text: str) -> str:
    """What search indexes and embeds for a chunk: its text with the conversation scaffolding
    thinned out, so that what was said decides a match, not who was present.

    A ``[<turn-id> | <time>] Speaker: words`` turn becomes ``Speaker: words`` (the id and the
    clock are anchors, not content: as tokens they only add noise), and ``Participants:``
    lines are dropped (they name everyone in every session and would make each header match
    any question naming a speaker). Any other block is kept as it is. The stored chunk text
    and its offsets are untouched: this only shapes the search representation.
    """
    parts = _search_blocks(text)
    if not any(b.kind == "speaker_turn" for b, _ in parts):
        return text
    return "\n\n".join(part for _, part in parts)


def retrieval_units(text: str) -> list[str]:
    """The retrieval units of a chunk, each embedded on its own: a conversation turn as
    ``Speaker: words``, a document block (paragraph, list item, table row, …) as it is;
    headings are not units. A chunk of headings alone is one unit, its retrieval text."""
    return [unit for _, _, unit in retrieval_unit_spans(text)]


def retrieval_unit_spans(text: str) -> list[tuple[int, int, str]]:
    """:func:`retrieval_units` with where each lies in the chunk text: ``(start, end, unit)``,
    in unit ordinal order (the ``chunk_units`` rows). A turn's span keeps its anchor head; a
    chunk of headings alone is one unit spanning the whole text."""
    units = [(block.char_start, block.char_end, part) for block, part in _search_blocks(text)
             if block.kind != "heading" and part.strip()]
    return units or [(0, len(text), retrieval_text(text))]


def embedding_inputs(table: str, owner: K, text: str) -> list[tuple[K, int | None, str]]:
    """What is embedded for a row: ``(owner, None, text)`` for the row itself and, for a chunk,
    ``(owner, n, unit)`` for each of its retrieval units. A chunk is searched by both its
    whole text and its best unit (the semantic chunk leg in services/retrieval/adapters.py)."""
    if table != "chunks":
        return [(owner, None, text)]
    return [(owner, None, retrieval_text(text)), *((owner, n, u) for n, u in enumerate(retrieval_units(text)))]


def _line_of(text: str) -> _Line:
    first = text.split("\n", 1)[0]
    return _Line(0, first, 0, len(first.rstrip()))
