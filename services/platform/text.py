"""The one text analyzer for lexical search: indexing (pipeline) and querying (retrieval)
must tokenise identically, so both import it from here.

Lower case, accents folded (NFKD), words of letters and digits, English stop words
dropped, and a light suffix stemmer so "migrations"/"migration" and "owns"/"owned"/"owning"
meet. Deterministic and dependency free.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    s t""".split()
)


def fold(text: str) -> str:
    if text.isascii():  # NFKD leaves ASCII as it is and it has no combining marks
        return text.lower()
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@lru_cache(maxsize=1 << 16)  # a pure function of a word, called for every token read (5 µs each)
def stem(word: str) -> str:
    """A small, conservative English suffix stripper (not Porter; predictable)."""
    if len(word) <= 3 or word.isdigit():
        return word
    for suffix, keep in (("ational", "ate"), ("ization", "ize"), ("iveness", "ive"), ("fulness", "ful"),
                         ("ousness", "ous"), ("ations", "ate"), ("ation", "ate"), ("ements", "e"), ("ement", "e"),
                         ("ments", ""), ("ment", ""), ("ings", ""), ("ing", ""), ("edly", ""), ("ies", "y"),
                         ("ied", "y"), ("sses", "ss"), ("ed", ""), ("es", "e"), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)] + keep
            if suffix in ("ing", "ed", "ings") and len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]  # running -> run, planned -> plan
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                return word
            return base
    return word


def _words(text: str) -> list[str]:
    """The folded words of ``text``, each cut at its apostrophe ("tom's" -> "tom")."""
    return [w.replace("’", "'").split("'")[0] if "'" in w or "’" in w else w for w in _WORD.findall(fold(text))]


def tokens(text: str) -> list[str]:
    return [stem(word) for word in _words(text) if word not in STOP_WORDS]


# Words that shape a question but say nothing about its answer: "What did Tom say about
# the flat?" is about the flat. Dropped from queries only (a passage that says "said" still
# indexes it). After "how", the measure word goes too ("how long", "how many"), except
# "old", which is usually the thing asked ("how old is the oven" ~ "11 years old").
QUESTION_WORDS = frozenset(
    """tell told know say says said saying mention mentioned mentions talk talked talking think thought
    describe explain ever also actually please happen happened happens anything something someone
    anyone thing things kind sort""".split()
)
_HOW_MEASURES = frozenset("much many long often soon far".split())


def query_tokens(text: str) -> list[str]:
    """The analyser for a search query: :func:`tokens` without question scaffolding.
    Empty when the query holds only stop words, question words or symbols."""
    out = []
    previous = ""
    for word in _words(text):
        how_measure = previous == "how" and word in _HOW_MEASURES
        previous = word
        if word in STOP_WORDS or word in QUESTION_WORDS or how_measure:
            continue
        out.append(stem(word))
    return out


def term_frequencies(text: str) -> tuple[Counter[str], int]:
    found = tokens(text)
    return Counter(found), len(found)


_LEADING_ARTICLES = {"the", "a", "an", "our", "their", "his", "her", "its", "this", "that", "these", "those", "my",
                     "your"}


def normalize_name(name: str) -> str:
    """An entity alias key: lower case, accents folded, punctuation dropped, leading articles
    removed. Shared by resolution at write time (pipeline) and at query time (retrieval)."""
    words = re.findall(r"[\w'’]+", fold(name))
    while words and words[0] in _LEADING_ARTICLES:
        words = words[1:]
    return " ".join(w.replace("’", "'") for w in words)
