"""References from one document to another: links and cited titles.

A document refers to another by a link whose target is the other's source reference or
file name (``links_to``: ``[plan](notes/q3-plan.md)``, ``[[Q3 plan]]``, a bare URL), or by
naming its title after a citing cue or in quotes (``cites``: "see the Q3 plan", "as agreed
in the Platform charter", "“Q3 plan”"). Names of fewer than two words or six characters
are too generic to cite. Pure and deterministic; the pipeline writes what it finds to
``document_crossrefs``, which graph citation paths walk.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["DocumentNames", "Reference", "document_names", "find_references"]

CONTEXT_CHARS = 200


@dataclass(frozen=True)
class DocumentNames:
    doc_id: uuid.UUID
    titles: tuple[str, ...]  # titles and first headings
    refs: tuple[str, ...]  # source references, file names, URLs


@dataclass(frozen=True)
class Reference:
    to_doc_id: uuid.UUID
    kind: str  # links_to | cites
    context: str


_LINK_RE = re.compile(r"\[(?P<text>[^\]\n]{1,200})\]\((?P<target>[^)\s]{1,500})(?:\s+\"[^\"]*\")?\)")
_WIKI_RE = re.compile(r"\[\[(?P<target>[^\]|\n]{1,200})(?:\|[^\]\n]*)?\]\]")
_URL_RE = re.compile(r"(?<![(\w])(?P<target>https?://[^\s<>()\]]{3,500})")
_CUE = (r"(?:see|see also|per|cf\.?|refer to|as (?:described|noted|agreed|decided|discussed|planned|set out) in"
        r"|according to|in|from|following|under)\s+(?:the\s+|our\s+)?")
_H1_RE = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
_GENERIC = frozenset("notes note doc document readme index untitled draft page meeting minutes chat".split())


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[_\-]+", " ", text)).strip().lower()


def _stem(ref: str) -> str:
    base = ref.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"\.(?:md|markdown|txt|docx?|pdf|pptx?|xlsx?|html?)$", "", base, flags=re.IGNORECASE)


def document_names(doc_id: uuid.UUID, *, title: str | None, markdown: str | None, filename: str | None,
                   source_ref: str | None) -> DocumentNames:
    titles: list[str] = []
    for candidate in (title, _first_heading(markdown or "")):
        if candidate and candidate.strip() and candidate.strip() not in titles:
            titles.append(candidate.strip())
    refs = [r for r in (source_ref, filename) if r]
    for ref in list(refs):
        stem = _stem(ref)
        if len(stem) >= 6 and _norm(stem) not in _GENERIC and " " in _norm(stem):
            titles.append(_norm(stem))  # "q3-plan.md" is also cited as "the Q3 plan"
    return DocumentNames(doc_id, tuple(titles), tuple(refs))


def _first_heading(markdown: str) -> str | None:
    match = _H1_RE.search(markdown[:5000])
    if match is None:
        return None
    # a heading's date or trailing qualifier is not part of what others cite ("Q3 plan, draft 2")
    return re.split(r"\s+[—–|]\s+|,\s+|\s+\(", match.group(1), maxsplit=1)[0].strip() or None


def _citable(title: str) -> bool:
    words = _norm(title).split()
    return len(words) >= 2 and len(_norm(title)) >= 6 and not all(w in _GENERIC for w in words)


def _context(markdown: str, start: int, end: int) -> str:
    left = max(0, start - CONTEXT_CHARS // 2)
    return re.sub(r"\s+", " ", markdown[left:end + CONTEXT_CHARS // 2]).strip()[:500]


def _ref_matches(target: str, names: DocumentNames) -> bool:
    folded = target.strip().lower().removeprefix("./")
    for ref in names.refs:
        key = ref.strip().lower().removeprefix("./")
        if folded == key or folded.endswith("/" + key) or key.endswith("/" + folded):
            return True
        if _stem(folded) and _stem(folded) == _stem(key) and len(_stem(key)) >= 4:
            return True
    return any(_norm(target) == _norm(t) for t in names.titles)


def find_references(markdown: str, others: Iterable[DocumentNames], *, self_id: uuid.UUID | None = None
                    ) -> list[Reference]:
    """Every other document this Markdown links to or cites (one reference per document and kind)."""
    candidates = [o for o in others if o.doc_id != self_id]
    found: dict[tuple[uuid.UUID, str], Reference] = {}
    links: list[tuple[str, int, int]] = []
    for pattern in (_LINK_RE, _WIKI_RE, _URL_RE):
        for match in pattern.finditer(markdown):
            links.append((match.group("target"), match.start(), match.end()))
            if pattern is _LINK_RE:
                links.append((match.group("text"), match.start(), match.end()))
    for target, start, end in links:
        for names in candidates:
            if (names.doc_id, "links_to") not in found and _ref_matches(target, names):
                found[(names.doc_id, "links_to")] = Reference(names.doc_id, "links_to", _context(markdown, start, end))
    lowered = markdown.lower()
    for names in candidates:
        if (names.doc_id, "links_to") in found or (names.doc_id, "cites") in found:
            continue
        for title in names.titles:
            if not _citable(title):
                continue
            phrase = re.escape(_norm(title)).replace(r"\ ", r"[\s_-]+")
            if not re.search(phrase, lowered):
                continue
            cited = re.search(rf"(?:\b{_CUE}[\"“'*_]*|[\"“'*_]){phrase}(?![\w-])", lowered)
            if cited is not None:
                found[(names.doc_id, "cites")] = Reference(names.doc_id, "cites",
                                                           _context(markdown, cited.start(), cited.end()))
                break
    return sorted(found.values(), key=lambda r: (str(r.to_doc_id), r.kind))


def citing(markdowns: Sequence[tuple[uuid.UUID, str]], target: DocumentNames) -> list[tuple[uuid.UUID, Reference]]:
    """Which of these documents refer to ``target`` (a document that arrived after them)."""
    out = []
    for doc_id, markdown in markdowns:
        for reference in find_references(markdown, [target], self_id=doc_id):
            out.append((doc_id, reference))
    return out
