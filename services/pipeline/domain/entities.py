"""Entity resolution rules: which candidate a mention names, or a new entity.

The database finds candidates cheapest first (exact alias, trigram spelling, phonetic
sound, profile embedding); this module decides among them. It prefers an existing
compatible candidate unless the names positively distinguish a new referent (two full
names with different surnames are two people).

A profile-embedding candidate (T3) was found by what the mention *says*, not by its name,
so its name is not compared. The rules resolver has no model to ask, so it accepts a T3
candidate only on lexical evidence (see :func:`profile_usable`); anything less stays a
new entity, with the candidates recorded in the verdict's scores.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from services.platform.text import normalize_name

RESOLVER_VERSION = "rules-resolver/4"
TIER_WEIGHT = {"T0": 1.0, "T1": 0.8, "T2": 0.7, "T3": 0.6}

# T3 acceptance by the rules resolver (the cosine floor that *finds* T3 candidates lives
# with the query in facts_store): a description of at least two content words ("backend
# lead on billing"), at least 60 % of them found in the candidate's profile, no name word
# shared with the mention (a description that names "billing" is about something related
# to billing), the candidate not named elsewhere in the claim, and the best profile ahead
# of the runner-up by a margin; otherwise "new".
T3_MIN_WORDS = 2
T3_COVERAGE = 0.6
T3_MARGIN = 0.05

# Titles written before a person's name ("Mrs Helen Carter", "Cllr Owusu", "Capt. Nils Johansson"),
# and those of them written as abbreviations with a full stop.
ABBREVIATED_TITLES = frozenset("""mr mrs ms mx dr prof capt cllr rev revd fr sr sgt lt col gen maj cdr cmdr adm cpl
insp supt det gov sen rep hon""".split())
HONORIFICS = ABBREVIATED_TITLES | frozenset("""miss professor sister nurse sir dame captain councillor reverend
colonel major sergeant judge canon""".split())
# the titles as a regular expression alternative, capitalised as written before a name ("Cllr|Dr|…")
TITLE_PATTERN = "|".join(sorted((t.capitalize() for t in HONORIFICS), key=lambda t: (-len(t), t)))



def role_before_title(words: list[str]) -> bool:
    """"Landlord Ms Petra Novak", "Tenant Mr Olu Bankole": the first word is a role said before
    the title of a name, and no part of it."""
    return (len(words) > 3 and words[1].rstrip(".").lower() in HONORIFICS and words[0].isalpha()
            and words[0][:1].isupper() and words[0].lower() not in HONORIFICS and words[2][:1].isupper())


_DIGITS = re.compile(r"\d+")
_FUNCTION_WORDS = frozenset("""a an the of on in at for to from by with and or our my your their his her its this
that these those who which is are was were be""".split())


@dataclass(frozen=True)
class Candidate:
    entity_id: uuid.UUID
    alias: str  # normalised
    tier: str
    score: float  # the tier's own score (trigram similarity, cosine…)
    in_document: bool = False  # already named in the same document
    profile: str | None = None  # T3: the entity's profile text
    names: tuple[str, ...] = ()  # T3: every normalised alias of the entity
    named_in_claim: bool = False  # T3: the claim names this entity elsewhere
    surface: str | None = None  # the matched alias as written (its case tells a proper name)
    surfaces: tuple[str, ...] = ()  # T0-T2: every alias of the entity as written


@dataclass(frozen=True)
class ResolutionVerdict:
    entity_id: uuid.UUID | None  # None = a new entity
    method: str
    confidence: float
    scores: dict[str, object]


def _trigrams(word: str) -> set[str]:
    padded = f"  {word} "
    return {padded[i:i + 3] for i in range(len(padded) - 2)}


def _similar(a: str, b: str) -> float:
    ta, tb = _trigrams(a), _trigrams(b)
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0


def _token_compatible(mention: str, alias: str) -> bool:
    if mention == alias:
        return True
    if _DIGITS.findall(mention) != _DIGITS.findall(alias):
        # A number in a name tells referents apart ("Lead3" is not "Lead4", "module 1" is not
        # "module 12"); it is never a misspelling or an initial. Without this, numbered names
        # look alike, so which entity a mention joins depended on which arrived first.
        return False
    if len(mention) == 1:  # an initial: "S" for "Shankar"
        return alias.startswith(mention)
    if len(alias) == 1:
        return mention.startswith(alias)
    return len(mention) >= 4 and len(alias) >= 4 and _similar(mention, alias) >= 0.45  # a misspelling


# Nouns that say what kind of thing a name is: "Atlas service" is Atlas; "Helios roadmap"
# and "Orion database" are things of Helios and Orion.
KIND_NOUNS = frozenset("service system app application platform project programme program team squad tool "
                       "library product".split())


def proper_name(surface: str) -> bool:
    """A name one word of it may stand for: every word capitalised or an initial ("Ravi
    Shankar", "Ravi S."), or a name and the kind of thing it names ("Atlas service"); not a
    thing named after something ("Helios roadmap", "Orion database")."""
    words = surface.split()
    return bool(words) and all(w[:1].isupper() or not w[:1].isalpha() or (i and w.lower() in KIND_NOUNS)
                               for i, w in enumerate(words))


def _unpossessed(key: str) -> str:
    return key[:-2] if key.endswith("'s") else key


def better_name(surface: str, current: str) -> bool:
    """Whether ``surface`` should replace ``current`` as an entity's name: the fullest spelling
    wins ("Ravi" -> "Ravi Shankar") but a possessive "'s" is no part of it; between spellings
    of one name, one as written over one already normalised ("INC-4821" over "inc 4821"),
    then fewer capitals, then code-point order, so the name never depends on which document
    was read first."""
    key, held = normalize_name(surface), normalize_name(current)
    if key != held and _unpossessed(key) == _unpossessed(held):
        return not key.endswith("'s")  # "Grace" over "Grace's" (her sister, or "Grace's got")
    if len(key) != len(held):
        return len(key) > len(held)
    if key != held:
        return False

    def rank(name: str) -> tuple[bool, int, str]:
        return name == key, sum(c.isupper() for c in name), name

    return rank(surface) < rank(current)


def compatible(mention: str, alias: str, *, mention_surface: str | None = None,
               alias_surface: str | None = None) -> bool:
    """Can these two names refer to one referent? "Ravi" ~ "Ravi Shankar" ~ "Ravi S." ~
    "Ravi Shanker"; "Dana Kim" is not "Dana Lee". A name of its own stands for a longer name
    only when the longer one, as written (when known), is a proper name: "Helios" is not
    "Helios roadmap"; a common word may be short for the name it starts ("billing" for
    "billing migration")."""
    m, a = mention.split(), alias.split()
    if not m or not a or _DIGITS.findall(mention) != _DIGITS.findall(alias):
        return False  # "exporter module" is not "exporter module 9", nor "module 1" "module 12"
    if len(m) > 1 and len(a) > 1:
        if len(m) != len(a):
            short, long_ = (m, a) if len(m) < len(a) else (a, m)
            return all(_token_compatible(s, lg) for s, lg in zip(short, long_, strict=False))
        return all(_token_compatible(x, y) for x, y in zip(m, a, strict=True))
    one, many = (m, a) if len(m) == 1 else (a, m)
    if len(many) == 1:
        return _token_compatible(one[0], many[0])
    written, word = (alias_surface, mention_surface) if len(m) == 1 else (mention_surface, alias_surface)
    if written is not None and not proper_name(written) and not (word is not None and word.islower()):
        return False
    return _token_compatible(one[0], many[0])  # a single name matches the first name of a full one


def names_compatible(ours: Iterable[str], theirs: Iterable[str]) -> float:
    """The best trigram similarity over pairs of compatible aliases, 0.0 when none is."""
    best = 0.0
    theirs = list(theirs)
    for a in ours:
        for b in theirs:
            if compatible(a, b):
                best = max(best, 1.0 if a == b else _similar(a, b))
    return best


def content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[\w']+", text.lower()) if w not in _FUNCTION_WORDS]


def coverage(mention: str, profile: str) -> float:
    """The share of the mention's content words that the profile uses (a misspelling or an
    inflection counts: "lead" ~ "leads")."""
    words = content_words(mention)
    seen = set(content_words(profile))
    if not words or not seen:
        return 0.0
    found = sum(1 for w in words if w in seen or (len(w) >= 4 and any(
        len(p) >= 4 and _similar(w, p) >= 0.45 for p in seen)))
    return found / len(words)


def profile_usable(mention: str, candidate: Candidate) -> bool:
    """May the rules resolver take this T3 candidate for the mention? See the module note."""
    words = content_words(mention)
    if len(words) < T3_MIN_WORDS or candidate.named_in_claim or not candidate.profile:
        return False
    name_words = {w for n in (candidate.names or (candidate.alias,)) for w in content_words(n) if len(w) >= 3}
    if name_words & set(words):
        return False
    return coverage(mention, candidate.profile) >= T3_COVERAGE


def entity_compatible(mention: str, candidate: Candidate, surface: str | None = None) -> bool:
    """The mention fits the alias it matched and every full name the entity holds: "Ravi
    Patel" does not join the entity of "Ravi" and "Ravi Shankar" through "Ravi"."""
    if not compatible(mention, candidate.alias, mention_surface=surface, alias_surface=candidate.surface):
        return False
    return all(compatible(mention, normalize_name(other), mention_surface=surface, alias_surface=other)
               for other in candidate.surfaces if len(other.split()) > 1)


def choose(mention: str, candidates: Sequence[Candidate], surface: str | None = None) -> ResolutionVerdict:
    """The entity a mention names, or a new one. A single word that fits two or more entities
    ("Ravi" beside "Ravi Shankar" and "Ravi Patel") names none of them unless the document
    already named exactly one: a guess here would depend on which entity came first."""
    usable = [c for c in candidates
              if (profile_usable(mention, c) if c.tier == "T3" else entity_compatible(mention, c, surface))]
    scores: dict[str, dict[str, object]] = {}
    for c in candidates:
        entry: dict[str, object] = {"tier": c.tier, "score": round(c.score, 4), "alias": c.alias,
                                    "compatible": c in usable, "in_document": c.in_document}
        if c.tier == "T3":
            entry.update(coverage=round(coverage(mention, c.profile or ""), 4), named_in_claim=c.named_in_claim)
        scores[str(c.entity_id)] = entry
    if not usable:
        return ResolutionVerdict(None, "new", 1.0, {"candidates": scores})

    def rank(c: Candidate) -> float:
        return TIER_WEIGHT[c.tier] * 0.5 + c.score * 0.3 + (0.5 if c.in_document else 0.0)

    ordered = sorted(usable, key=rank, reverse=True)
    if len(mention.split()) == 1 and len({c.entity_id for c in usable}) > 1 and usable[0].tier != "T3":
        named = [c for c in usable if c.in_document]
        if len({c.entity_id for c in named}) != 1:
            # the bare name met before, itself left unresolved: the same mention again
            named = [c for c in usable if c.alias == mention and c.surfaces
                     and all(len(other.split()) == 1 for other in c.surfaces)]
        if len({c.entity_id for c in named}) != 1:
            return ResolutionVerdict(None, "new", 1.0, {"candidates": scores, "undecided": "first_name",
                                                        "ambiguous_with": sorted(str(c.entity_id) for c in usable)})
        ordered = named
    best = ordered[0]
    others = sorted(str(c.entity_id) for c in ordered[1:])
    if best.tier == "T3" and len(ordered) > 1 and best.score - ordered[1].score < T3_MARGIN:
        # Two profiles fit about equally: the rules resolver does not guess (a model would choose).
        return ResolutionVerdict(None, "new", 1.0, {"candidates": scores, "undecided": "T3",
                                                    "ambiguous_with": sorted(str(c.entity_id) for c in ordered)})
    confidence = min(1.0, rank(best))
    return ResolutionVerdict(best.entity_id, best.tier, round(confidence, 4),
                             {"candidates": scores, "ambiguous_with": others})
