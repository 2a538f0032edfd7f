"""The labelled retrieval set under tests/data/retrieval: loading, rendering, evidence units.

A *unit* is what evidence recall counts: a speaker turn of a conversation, or a block
(paragraph, list item, table row) of a document, as the structure stage's
``parse_blocks`` cuts it. Gold evidence is written as exact quotes; each must fall in
exactly one unit of its set, or loading fails (a typo in the set never silently lowers
recall). Anything Testament returns with a character range (a chunk, a claim's span) is
mapped back to the units it overlaps, in order.
"""

from __future__ import annotations

import bisect
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from services.platform.structure import parse_blocks

DATA_DIR = Path(__file__).resolve().parent.parent / "tests" / "data" / "retrieval"
BLIND_DIR = DATA_DIR.with_name("retrieval_blind")  # scored apart, never tuned on
KINDS = ("single", "multi", "temporal", "open", "adversarial")
TURN_STEP_S = 97


@dataclass(frozen=True)
class Unit:
    unit_id: str
    filename: str
    char_start: int
    char_end: int
    text: str  # the block's text as in the document (a turn keeps its "[id | time] Speaker:" head)
    body: str  # what a reader means by the unit: for a turn "Speaker: text", else the block text


@dataclass
class Document:
    filename: str
    title: str
    markdown: str
    modified_at: dt.datetime
    kind: str  # conversation | document
    units: list[Unit] = field(default_factory=list)

    def units_in(self, start: int, end: int) -> list[Unit]:
        """The units a half-open character range overlaps, in document order."""
        starts = [u.char_start for u in self.units]
        i = max(0, bisect.bisect_right(starts, start) - 1)
        out = []
        for unit in self.units[i:]:
            if unit.char_start >= end:
                break
            if unit.char_end > start:
                out.append(unit)
        return out


@dataclass(frozen=True)
class Question:
    qid: str
    set_name: str
    kind: str
    text: str
    gold: frozenset[str]  # unit ids


@dataclass
class LabelledSet:
    name: str
    documents: list[Document]
    questions: list[Question]

    @property
    def units(self) -> dict[str, Unit]:
        return {u.unit_id: u for d in self.documents for u in d.units}


def _render_session(participants: list[str], number: int, start: dt.datetime, title: str,
                    turns: list[tuple[str, str]]) -> str:
    lines = [f"# {title}", "", f"Participants: {', '.join(participants)}"]
    for n, (speaker, text) in enumerate(turns, start=1):
        when = (start + dt.timedelta(seconds=TURN_STEP_S * (n - 1))).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines += ["", f"[s{number}-{n} | {when}] {speaker}: {text}"]
    return "\n".join(lines) + "\n"


def _units(doc: Document) -> list[Unit]:
    units = []
    for block in parse_blocks(doc.markdown):
        if block.kind == "heading":
            continue
        if block.kind == "speaker_turn" and block.turn_id:
            # What was said after the "[<turn-id> | <time>] Speaker:" head (the clock holds colons too).
            said = block.text.split("]", 1)[-1].split(":", 1)[-1].strip()
            body = f"{block.speaker}: {said}"
            uid = f"{doc.filename}#{block.turn_id}"
        else:
            body = block.text
            uid = f"{doc.filename}#{block.ordinal}"
        units.append(Unit(uid, doc.filename, block.char_start, block.char_end, block.text, body))
    return units


def _parse_time(raw: str) -> dt.datetime:
    return dt.datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))


def parse_set(name: str, source: str) -> LabelledSet:
    documents: list[Document] = []
    raw_questions: list[tuple[str, str, list[str]]] = []
    participants: list[str] = []
    mode = ""
    session: tuple[int, dt.datetime, str, list[tuple[str, str]]] | None = None
    doc_lines: list[str] = []
    doc_head: tuple[str, dt.datetime] | None = None
    sessions = 0

    def close() -> None:
        nonlocal session, doc_head, doc_lines
        if session is not None:
            number, start, title, turns = session
            filename = f"{name}-session-{number:02d}.md"
            documents.append(Document(filename, title, _render_session(participants, number, start, title, turns),
                                      start, "conversation"))
            session = None
        if doc_head is not None:
            filename, when = doc_head
            markdown = "\n".join(doc_lines).strip() + "\n"
            title = next((line[2:].strip() for line in doc_lines if line.startswith("# ")), filename)
            documents.append(Document(filename, title, markdown, when, "document"))
            doc_head, doc_lines = None, []

    for lineno, line in enumerate(source.splitlines(), start=1):
        if line.startswith("participants:"):
            participants = [p.strip() for p in line.split(":", 1)[1].split(",")]
        elif line.startswith("session:"):
            close()
            when, title = (part.strip() for part in line.split(":", 1)[1].split("|", 1))
            sessions += 1
            session = (sessions, _parse_time(when), title, [])
            mode = "session"
        elif line.startswith("doc:"):
            close()
            filename, when = (part.strip() for part in line.split(":", 1)[1].split("|", 1))
            doc_head = (filename, _parse_time(when))
            mode = "doc"
        elif line.strip() == "questions:":
            close()
            mode = "questions"
        elif mode == "session" and line.strip():
            assert session is not None
            speaker, text = line.split(":", 1)
            if speaker not in participants:
                raise ValueError(f"{name}:{lineno}: {speaker!r} is not a participant")
            session[3].append((speaker, text.strip()))
        elif mode == "doc":
            doc_lines.append(line)
        elif mode == "questions" and line.strip():
            parts = [p.strip() for p in line.split(" | ")]
            if len(parts) != 3 or parts[0] not in KINDS:
                raise ValueError(f"{name}:{lineno}: expected 'kind | question | quote || quote'")
            raw_questions.append((parts[0], parts[1], [q.strip() for q in parts[2].split(" || ")]))
    close()

    for doc in documents:
        doc.units = _units(doc)
    questions = []
    for n, (kind, text, quotes) in enumerate(raw_questions, start=1):
        gold = set()
        for quote in quotes:
            hits = [u.unit_id for d in documents for u in d.units if quote in u.text]
            if len(hits) != 1:
                raise ValueError(f"{name}: gold quote {quote!r} of {text!r} is in {len(hits)} units (need 1)")
            gold.add(hits[0])
        questions.append(Question(f"{name}:{n}", name, kind, text, frozenset(gold)))
    return LabelledSet(name, documents, questions)


def load(names: list[str] | None = None, directory: Path = DATA_DIR) -> list[LabelledSet]:
    paths = sorted(directory.glob("*.txt"))
    return [parse_set(p.stem, p.read_text(encoding="utf-8")) for p in paths if names is None or p.stem in names]


_FILLER_NAMES = ("Amara", "Bilal", "Chiara", "Dmitri", "Esme", "Farid", "Greta", "Hiro", "Ines", "Jasper", "Kalani",
                 "Leon", "Mirela", "Nikhil", "Odette", "Pavel", "Quinn", "Rosalind", "Soren", "Talia")
_FILLER_SURNAMES = ("Okoro", "Lindqvist", "Ferreira", "Nakamura", "Byrne", "Haddad", "Kowalski", "Mensah", "Rossi",
                    "Varga", "Ahmadi", "Dubois", "Quispe")


def filler(sets: list[LabelledSet], copies: int) -> list[Document]:
    """Other people's conversations for scale: each labelled conversation again with its two
    speakers renamed (in the turns' heads and text) and its dates moved on by a year per
    copy. Not labelled; they make a space the size of a real one around the labelled set."""
    import re

    out = []
    for copy in range(1, copies + 1):
        for s in sets:
            conversation = [d for d in s.documents if d.kind == "conversation"]
            if not conversation:
                continue
            header = conversation[0].markdown.split("\n")[2]
            names = [n.strip() for n in header.removeprefix("Participants:").split(",")]
            k = copy * 7 + int(s.name[-2:]) * 5
            pick = {n: f"{_FILLER_NAMES[(k + i * 3) % len(_FILLER_NAMES)]} {_FILLER_SURNAMES[(k + i) % 13]}"
                    for i, n in enumerate(names)}
            pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b")
            for d in conversation:
                text = pattern.sub(lambda m, pick=pick: pick[m.group(1)], d.markdown)
                text = re.sub(r"\b(20\d\d)-", lambda m, copy=copy: f"{int(m.group(1)) + copy}-", text)
                when = d.modified_at.replace(year=d.modified_at.year + copy)
                doc = Document(f"filler-{copy}-{d.filename}", d.title, text, when, "conversation")
                doc.units = _units(doc)
                out.append(doc)
    return out
