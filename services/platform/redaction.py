"""Span-level PII redaction: detectors, rules, policy, and the transform itself.

Pure domain code — no I/O, no model, no network. The default policy (no rules) is a guaranteed no-op.

Rules
    A rule has a ``name`` and exactly one of ``detector`` (a built-in — email, phone, ssn, credit_card, iban,
    api_key — or a custom callable handed to :class:`Redactor`) or ``pattern`` (a regex). A pattern whose regex
    names a group ``value`` — ``(?P<value>...)`` or ``(?<value>...)``, normalised on load — redacts only that
    group's span; a match where ``value`` did not participate redacts nothing. A pattern without a ``value``
    group redacts the whole match (seed 002: ``\\bORD-\\d{6}\\b`` -> ``[ORDER_ID]``). A regex that does not
    compile, or one that can match the empty string, is refused when the rule is built, naming the rule.

Actions and tokens
    ``mask``    -> ``[NAME]``, the rule name upper-cased (seed 002: rule ``emails`` -> ``[EMAILS]``).
    ``hash``    -> ``[NAME:<16 hex>]``: HMAC-SHA256 under the configured secret key, hex digest truncated to
                   16 characters (64 bits — a birthday collision needs ~4e9 distinct values, so joins hold).
                   The message is the match normalised per detector, so one value written two ways gives one
                   token: phone -> ASCII digits (Unicode decimals folded), a 10-digit number prefixed with 1;
                   email -> trimmed, lower-cased; ssn / credit_card -> ASCII digits; iban -> whitespace
                   stripped, upper-cased; api_key, custom detectors and patterns -> the raw match. The rule
                   name is not part of the message, so equal values join across rules under one key and never
                   across keys. A policy with a hash rule and no key is refused when the :class:`Redactor` is
                   built.
    ``remove``  -> the span is deleted (surrounding whitespace is left as is, so offsets stay simple).

apply_at
    ``output`` (default) redacts what retrieval returns and may be principal-conditional (``unless``);
    ``ingest`` is for the pipeline to scrub before storing (:meth:`Redactor.redact_ingest`); ``both`` does
    both. ``unless`` on an ``ingest``/``both`` rule is refused: the value is gone before any caller exists.

Principals
    A caller holding any principal in a rule's ``unless`` set is exempt from that rule on output. ``None``
    principals (the trusted caller, who skips ACL) hold no principal and are therefore NOT exempt: ACL decides
    which documents are visible, redaction decides what inside them leaves the process — seed 002 places the
    masking before the reranker POST and the audit row, which must hold for every caller. Grant a trusted
    surface an exemption by giving it a principal named in ``unless``.

Overlaps
    Spans of every applicable rule are merged when they overlap (half-open: touching spans stay separate).
    A merged span is replaced by one token; the winning rule is the most protective action
    (remove > mask > hash), ties broken by policy order. A hash over a merged span that is wider than the
    winner's own match hashes the raw union text.

Offsets
    :class:`RedactionResult` lists every applied redaction with its original and new span, in text order.
    :meth:`RedactionResult.map_offset` / :meth:`RedactionResult.map_span` carry original offsets into the
    redacted text. An endpoint that falls strictly inside a redaction snaps OUTWARD to the replacement's
    bounds, so a span inside (or straddling) a redaction maps to a span covering the whole token — for a
    ``remove`` redaction, the empty span at the deletion point. Evidence never points into masked text.

Detectors (each yields half-open spans, in text order)
    email        ASCII local@domain.tld, local part <= 64, TLD letters only.
    phone        seed 002's two forms: without a country code the same - or . in both gaps, or (415) 555-0123,
                 optionally behind 1 / +1; behind a leading + a 9..15-digit run split by single spaces or
                 dashes. A digit or a digit+separator right before, or a separator+digit right after, rejects
                 (dates, versions, longer numbers). Unicode decimal digits count.
    ssn          ddd-dd-dddd or ddd dd dddd, never-issued areas/groups/serials (000, 666, 9xx, 00, 0000) refused.
    credit_card  13..19 digits, contiguous or in printed groups (4-4-4-4[-n], 4-6-4/5), Luhn-checked.
    iban         2 letters + 2 check digits + BBAN, optionally in space-separated groups, any case; the length
                 must be the registry's for that country and ISO 7064 mod-97 must hold.
    api_key      sk-, sk_/pk_/rk_live|test_, ghp_/gho_/ghu_/ghs_/ghr_, github_pat_, AKIA/ASIA.., xox?-, AIza,
                 glpat-; and any short lower-case prefix + _ or - + a 24+ character base62 body that looks
                 random (upper, lower and digits, >= 25% non-lower-case, Shannon entropy >= 3.5 bits/char).

Performance
    Regexes are compiled once at import (custom patterns once per :class:`Redactor`). Every repetition in a
    built-in is bounded and every candidate start is guarded by a look-behind, so no input is super-linear.
    The numeric detectors share one scan for runs of 9+ digits and search only windows around them; email
    searches around each "@", api_key inside whitespace-free tokens of 20+ characters — 10 kB of prose with
    all six detectors costs ~0.5 ms. The new text is spliced from the ORIGINAL left to right (equivalent to
    replacing right to left: no replacement ever shifts another's offsets). Custom patterns run on Python's
    backtracking engine: a catastrophic custom regex is the policy author's responsibility.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, cast, get_args

Action = Literal["mask", "hash", "remove"]
ApplyAt = Literal["output", "ingest", "both"]
Stage = Literal["output", "ingest"]
DetectorFn = Callable[[str], Iterable[tuple[int, int]]]

ACTIONS: Final[tuple[str, ...]] = get_args(Action)
APPLY_AT: Final[tuple[str, ...]] = get_args(ApplyAt)
STAGES: Final[tuple[str, ...]] = get_args(Stage)
HASH_HEX_CHARS: Final = 16
PATTERN_DETECTOR: Final = "pattern"

_RULE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{0,63}")
# "more protective" sorts first when overlapping spans merge
_ACTION_STRENGTH: Final[Mapping[str, int]] = MappingProxyType({"remove": 0, "mask": 1, "hash": 2})


# --- detectors -----------------------------------------------------------------------------------------


def _fold_digits(text: str) -> str:
    """The decimal digits of ``text`` as ASCII (an Arabic-Indic 3 counts as 3)."""
    return "".join(str(unicodedata.decimal(ch)) for ch in text if ch.isdecimal())


# Every phone, ssn, credit_card and iban match holds a run of 9+ digits split by at most two separator
# characters at a time. One scan finds those runs; the numeric detectors then run only in windows around
# them (look-behinds still see the whole text), which keeps prose with no long numbers nearly free.
_DIGIT_RUN = re.compile(r"\d(?:[ ()+.\-]{0,2}\d){8,}")
_NUMERIC_MARGIN: Final = 3  # a numeric match may start with "+1 (" ahead of its run; look-aheads read 2 chars
_IBAN_MARGIN: Final = 45  # an IBAN (34 characters + 8 spaces) may start or end up to this far from its run


_MIN_KEY_LENGTH: Final = 20  # the shortest api_key shape (an AWS key id)


class _Scan:
    """One text and, computed once on demand, the digit runs the numeric detectors share."""

    __slots__ = ("text", "_runs")

    def __init__(self, text: str) -> None:
        self.text = text
        self._runs: list[tuple[int, int]] | None = None

    def long_tokens(self, min_length: int) -> list[tuple[int, int]]:
        """Spans of the whitespace-separated tokens at least ``min_length`` long (str.split runs in C)."""
        spans = []
        pos = 0
        for token in self.text.split():
            if len(token) >= min_length:
                # a shorter token cannot contain this one, and every longer one before it was passed already
                start = self.text.find(token, pos)
                pos = start + len(token)
                spans.append((start, pos))
        return spans

    def windows(self, margin: int) -> list[tuple[int, int]]:
        if self._runs is None:
            self._runs = [m.span() for m in _DIGIT_RUN.finditer(self.text)]
        merged: list[tuple[int, int]] = []
        for s, e in self._runs:
            s, e = max(0, s - margin), min(len(self.text), e + margin)
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        return merged

    def finditer(self, regex: re.Pattern[str], margin: int) -> Iterator[re.Match[str]]:
        for s, e in self.windows(margin):
            yield from regex.finditer(self.text, s, e)


_EMAIL_RE = re.compile(
    r"(?<![A-Za-z0-9._%+\-])"
    r"[A-Za-z0-9._%+\-]{1,64}@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,63}"
    r"(?![\w\-]|\.[A-Za-z0-9])"
)


_EMAIL_BEFORE_AT: Final = 65  # the local part is at most 64 characters
_EMAIL_AFTER_AT: Final = 8 * 64 + 64  # at most 8 labels and a top-level domain


def _email(scan: _Scan) -> list[tuple[int, int]]:
    # look only around each "@" (str.find runs in C); windows merge so a match is found once
    text = scan.text
    windows: list[tuple[int, int]] = []
    at = text.find("@")
    while at != -1:
        s, e = max(0, at - _EMAIL_BEFORE_AT), min(len(text), at + _EMAIL_AFTER_AT)
        if windows and s <= windows[-1][1]:
            windows[-1] = (windows[-1][0], e)
        else:
            windows.append((s, e))
        at = text.find("@", at + 1)
    return [m.span() for s, e in windows for m in _EMAIL_RE.finditer(text, s, e)]


# Without a country code: the same - or . in both gaps, or the (415) 555-0123 form, optionally behind 1 / +1.
# Behind a leading +: a digit run (9..15 digits) that may be split by single spaces or dashes.
_PHONE_RE = re.compile(
    r"""
    (?<![\w+])(?<!\d[.\-])
    (?:
        (?:\+?1[ \-]?)?\(\d{3}\)[ ]?\d{3}-\d{4}
      | 1(?P<s1>[\-.])\d{3}(?P=s1)\d{3}(?P=s1)\d{4}
      | \d{3}(?P<s2>[\-.])\d{3}(?P=s2)\d{4}
      | \+\d(?:[ \-]?\d){8,14}
    )
    (?!\w)(?![.\-]\d)
    """,
    re.VERBOSE,
)


def _phone(scan: _Scan) -> list[tuple[int, int]]:
    return [m.span() for m in scan.finditer(_PHONE_RE, _NUMERIC_MARGIN)]


_SSN_RE = re.compile(r"(?<!\w)(?<!\d[\-.])\d{3}(?P<s>[\- ])\d{2}(?P=s)\d{4}(?!\w)(?![\-.]\d)")


def _ssn(scan: _Scan) -> list[tuple[int, int]]:
    found = []
    for m in scan.finditer(_SSN_RE, _NUMERIC_MARGIN):
        digits = _fold_digits(m.group())
        area, group, serial = digits[:3], digits[3:5], digits[5:]
        if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
            continue  # never issued
        found.append(m.span())
    return found


def luhn_valid(digits: str) -> bool:
    """Luhn checksum over ASCII digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# A contiguous 13..19-digit run, or the printed groupings split by one consistent space or dash:
# 4-4-4-4 with an optional short fifth group (19-digit cards, or an expiry right behind the number —
# dropped again if the longer form fails Luhn) and 4-6-4 / 4-6-5 (Diners, Amex).
_CARD_RE = re.compile(
    r"(?<!\w)(?<!\d[ \-])"
    r"(?:\d{13,19}"
    r"|\d{4}(?P<sep>[ \-])(?:\d{4}(?P=sep)\d{4}(?P=sep)\d{1,4}(?:(?P=sep)\d{1,4})?|\d{6}(?P=sep)\d{4,5}))"
    r"(?!\w)"
)


def _credit_card(scan: _Scan) -> list[tuple[int, int]]:
    found = []
    for m in scan.finditer(_CARD_RE, _NUMERIC_MARGIN):
        sep = m.group("sep")
        groups = [m.group()] if sep is None else m.group().split(sep)
        end = m.end()
        for k in range(len(groups), 0, -1):
            digits = _fold_digits("".join(groups[:k]))
            if 13 <= len(digits) <= 19 and luhn_valid(digits):
                found.append((m.start(), end))
                break
            end -= len(groups[k - 1]) + 1
    return found


# ISO 13616 lengths per country (SWIFT IBAN registry).
IBAN_LENGTHS: Final[Mapping[str, int]] = MappingProxyType({
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
    "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
    "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
    "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33,
    "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
})

# Zero-width with a capturing look-ahead so candidates may overlap; length and mod-97 are checked in code.
_IBAN_RE = re.compile(r"(?<![A-Za-z0-9])(?=([A-Za-z]{2}[0-9]{2}(?:[ ]?[A-Za-z0-9]){11,30}))")


def iban_valid(iban: str) -> bool:
    """The registry length for its country and the ISO 7064 mod-97 check, over an upper-case IBAN, no spaces."""
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban.isascii() or not iban.isalnum():
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def _iban(scan: _Scan) -> list[tuple[int, int]]:
    text = scan.text
    found: list[tuple[int, int]] = []
    covered = 0
    for m in scan.finditer(_IBAN_RE, _IBAN_MARGIN):
        start = m.start()
        if start < covered:
            continue
        candidate = m.group(1)
        length = IBAN_LENGTHS.get(candidate[:2].upper())
        if length is None:
            continue
        chars: list[str] = []
        end = start
        for i, ch in enumerate(candidate):
            if ch != " ":
                chars.append(ch)
                if len(chars) == length:
                    end = start + i + 1
                    break
        if len(chars) < length or (end < len(text) and text[end].isalnum()):
            continue
        if iban_valid("".join(chars).upper()):
            found.append((start, end))
            covered = end
    return found


_API_KEY_RE = re.compile(
    r"""
    (?<![A-Za-z0-9_\-])
    (?:
        sk-[A-Za-z0-9_\-]{32,512}                               # OpenAI / Anthropic (sk-, sk-proj-, sk-ant-)
      | (?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,256}          # Stripe
      | gh[pousr]_[A-Za-z0-9]{36,255}                           # GitHub tokens
      | github_pat_[A-Za-z0-9_]{40,255}                         # GitHub fine-grained PAT
      | (?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16} # AWS access key ids
      | xox[abposr]-[A-Za-z0-9\-]{20,255}                       # Slack
      | AIza[A-Za-z0-9_\-]{35}                                  # Google API key
      | glpat-[A-Za-z0-9_\-]{20,255}                            # GitLab PAT
      | [a-z][a-z0-9]{1,11}[_\-](?P<body>[A-Za-z0-9]{24,256})   # any long random token behind a short prefix
    )
    (?![A-Za-z0-9_\-])
    """,
    re.VERBOSE,
)
_MIN_TOKEN_ENTROPY: Final = 3.5  # bits per character; random base62 of 24 characters averages ~4.2, rarely < 3.6
_MIN_TOKEN_NON_LOWER: Final = 0.25  # random base62 is ~58% upper case and digits; a camelCase identifier ~15%


def shannon_entropy(text: str) -> float:
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def _looks_random(body: str) -> bool:
    return (
        any(c.isdigit() for c in body)
        and any(c.isupper() for c in body)
        and any(c.islower() for c in body)
        and sum(not c.islower() for c in body) >= _MIN_TOKEN_NON_LOWER * len(body)
        and shannon_entropy(body) >= _MIN_TOKEN_ENTROPY
    )


def _api_key(scan: _Scan) -> list[tuple[int, int]]:
    # every shape is one whitespace-free token of 20+ characters: look only inside those
    return [
        m.span()
        for s, e in scan.long_tokens(_MIN_KEY_LENGTH)
        for m in _API_KEY_RE.finditer(scan.text, s, e)
        if m.group("body") is None or _looks_random(m.group("body"))
    ]


_BUILTIN: Final[Mapping[str, Callable[[_Scan], list[tuple[int, int]]]]] = MappingProxyType({
    "email": _email,
    "phone": _phone,
    "ssn": _ssn,
    "credit_card": _credit_card,
    "iban": _iban,
    "api_key": _api_key,
})


def _as_text_detector(scanner: Callable[[_Scan], list[tuple[int, int]]]) -> DetectorFn:
    def run(text: str) -> list[tuple[int, int]]:
        return scanner(_Scan(text))

    run.__name__ = f"detect{scanner.__name__}"
    return run


# name -> Callable[[str], list[(start, end)]]: the built-ins, each yielding half-open spans in text order.
DETECTORS: Final[Mapping[str, DetectorFn]] = MappingProxyType({n: _as_text_detector(f) for n, f in _BUILTIN.items()})


def _normalise_phone(raw: str) -> str:
    digits = _fold_digits(raw)
    return "1" + digits if len(digits) == 10 else digits


_NORMALISERS: Final[Mapping[str, Callable[[str], str]]] = MappingProxyType({
    "phone": _normalise_phone,
    "email": lambda raw: raw.strip().lower(),
    "ssn": _fold_digits,
    "credit_card": _fold_digits,
    "iban": lambda raw: "".join(raw.split()).upper(),
})


@dataclass(frozen=True, slots=True)
class Detection:
    """A half-open span ``[start, end)`` a detector found."""

    detector: str
    start: int
    end: int


def detect(text: str, detectors: Collection[str] | None = None) -> list[Detection]:
    """Run built-in detectors (all by default) and list what they found, in text order."""
    names = list(_BUILTIN) if detectors is None else list(detectors)
    scan = _Scan(text)
    found: list[Detection] = []
    for name in names:
        if name not in _BUILTIN:
            raise ValueError(f"unknown detector {name!r} (known: {', '.join(_BUILTIN)})")
        found.extend(Detection(name, s, e) for s, e in _BUILTIN[name](scan))
    found.sort(key=lambda d: (d.start, d.end, d.detector))
    return found


# --- rules and policy ----------------------------------------------------------------------------------

_PCRE_NAMED_GROUP = re.compile(r"(?<!\\)((?:\\\\)*)\(\?<(?![=!])([A-Za-z_]\w*)>")


def _normalise_pattern(pattern: str) -> str:
    """``(?<name>...)`` (PCRE/.NET spelling) -> ``(?P<name>...)``."""
    return _PCRE_NAMED_GROUP.sub(r"\1(?P<\2>", pattern)


@dataclass(frozen=True, slots=True)
class RedactionRule:
    name: str
    detector: str | None = None
    pattern: str | None = None
    action: Action = "mask"
    apply_at: ApplyAt = "output"
    unless: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        where = f"redaction rule {self.name!r}"
        if not isinstance(self.name, str) or not _RULE_NAME.fullmatch(self.name):
            raise ValueError(
                f"{where}: name must be 1-64 characters of letters, digits, '_' or '-', starting with a letter"
            )
        if (self.detector is None) == (self.pattern is None):
            raise ValueError(f"{where}: give exactly one of 'detector' or 'pattern'")
        if self.detector is not None and (not isinstance(self.detector, str) or not self.detector):
            raise ValueError(f"{where}: 'detector' must be a non-empty string")
        if self.pattern is not None:
            if not isinstance(self.pattern, str) or not self.pattern:
                raise ValueError(f"{where}: 'pattern' must be a non-empty string")
            pattern = _normalise_pattern(self.pattern)
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{where}: invalid regex {self.pattern!r}: {exc}") from exc
            if compiled.fullmatch(""):
                raise ValueError(f"{where}: regex {self.pattern!r} matches the empty string")
            object.__setattr__(self, "pattern", pattern)
        if self.action not in ACTIONS:
            raise ValueError(f"{where}: action {self.action!r} is not one of {', '.join(ACTIONS)}")
        if self.apply_at not in APPLY_AT:
            raise ValueError(f"{where}: apply_at {self.apply_at!r} is not one of {', '.join(APPLY_AT)}")
        if isinstance(self.unless, str):
            raise ValueError(f"{where}: 'unless' must be a list of principals, not a string")
        unless = frozenset(self.unless)
        if any(not isinstance(p, str) or not p for p in unless):
            raise ValueError(f"{where}: 'unless' must hold non-empty principal strings")
        if unless and self.apply_at != "output":
            raise ValueError(
                f"{where}: 'unless' only applies to apply_at 'output' — a rule applied at ingest has removed "
                "the value before any caller exists"
            )
        object.__setattr__(self, "unless", unless)

    @property
    def source(self) -> str:
        """The detector name, or ``"pattern"`` for a regex rule."""
        return self.detector if self.detector is not None else PATTERN_DETECTOR

    def applies_at(self, stage: Stage) -> bool:
        return self.apply_at == "both" or self.apply_at == stage

    def exempts(self, principals: Collection[str] | None) -> bool:
        """Whether a caller holding ``principals`` is exempt. ``None`` (trusted) holds none: not exempt."""
        return bool(principals) and not self.unless.isdisjoint(cast("Collection[str]", principals))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.detector is not None:
            out["detector"] = self.detector
        else:
            out["pattern"] = self.pattern
        out["action"] = self.action
        out["apply_at"] = self.apply_at
        if self.unless:
            out["unless"] = sorted(self.unless)
        return out


_RULE_KEYS: Final = frozenset({"name", "detector", "pattern", "action", "apply_at", "unless"})
_POLICY_KEYS: Final = frozenset({"rules", "exemptions"})


@dataclass(frozen=True, slots=True)
class RedactionPolicy:
    """An ordered set of rules; earlier rules win ties when overlapping spans merge. Empty = no-op."""

    rules: tuple[RedactionRule, ...] = ()

    def __post_init__(self) -> None:
        rules = tuple(self.rules)
        seen: set[str] = set()
        for i, rule in enumerate(rules):
            if not isinstance(rule, RedactionRule):
                raise ValueError(f"redaction policy: rules[{i}] is not a RedactionRule")
            if rule.name in seen:
                raise ValueError(f"redaction policy: rules[{i}]: duplicate rule name {rule.name!r}")
            seen.add(rule.name)
        object.__setattr__(self, "rules", rules)

    @property
    def is_noop(self) -> bool:
        return not self.rules

    @property
    def needs_key(self) -> bool:
        return any(r.action == "hash" for r in self.rules)

    @classmethod
    def from_json(cls, text: str | None) -> RedactionPolicy:
        """Parse a JSON policy (e.g. from an environment variable); empty or ``None`` is the no-op policy."""
        if text is None or not text.strip():
            return cls()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"redaction policy: not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RedactionPolicy:
        """Build from plain data::

            {"rules": [{"name": "emails", "detector": "email", "action": "mask", "apply_at": "output",
                        "unless": ["group:hr"]},
                       {"name": "acct", "pattern": "Account:\\\\s*(?P<value>\\\\d+)", "action": "hash"}],
             "exemptions": {"group:hr": ["ssn"]}}

        ``exemptions`` maps a principal to rule names or detector names it is exempt from on output; it is
        folded into the matching rules' ``unless``. Every error names the offending key.
        """
        if not isinstance(data, Mapping):
            raise ValueError("redaction policy: must be an object with 'rules'")
        unknown = sorted(set(data) - _POLICY_KEYS)
        if unknown:
            allowed = ", ".join(sorted(_POLICY_KEYS))
            raise ValueError(f"redaction policy: unknown key {unknown[0]!r} (allowed: {allowed})")
        raw_rules = data.get("rules", [])
        if not isinstance(raw_rules, list):
            raise ValueError("redaction policy: 'rules' must be a list")
        rules = [_rule_from_dict(i, raw) for i, raw in enumerate(raw_rules)]
        exemptions = data.get("exemptions", {})
        if not isinstance(exemptions, Mapping):
            raise ValueError("redaction policy: 'exemptions' must be an object of principal -> [rule or detector]")
        for principal, targets in exemptions.items():
            where = f"redaction policy: exemptions[{principal!r}]"
            if not isinstance(principal, str) or not principal:
                raise ValueError(f"{where}: principal must be a non-empty string")
            if not isinstance(targets, list):
                raise ValueError(f"{where}: must be a list of rule or detector names")
            for j, target in enumerate(targets):
                hits = [k for k, r in enumerate(rules) if target in (r.name, r.detector)]
                if not isinstance(target, str) or not hits:
                    raise ValueError(f"{where}[{j}]: {target!r} names no rule or detector in this policy")
                for k in hits:
                    rule = rules[k]
                    if rule.apply_at != "output":
                        raise ValueError(
                            f"{where}[{j}]: rule {rule.name!r} applies at {rule.apply_at!r}; "
                            "only 'output' rules can exempt a caller"
                        )
                    rules[k] = RedactionRule(
                        name=rule.name, detector=rule.detector, pattern=rule.pattern, action=rule.action,
                        apply_at=rule.apply_at, unless=rule.unless | {principal},
                    )
        return cls(rules=tuple(rules))

    def to_dict(self) -> dict[str, Any]:
        return {"rules": [r.to_dict() for r in self.rules]}


def _rule_from_dict(index: int, raw: Any) -> RedactionRule:
    where = f"redaction policy: rules[{index}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be an object")
    unknown = sorted(set(raw) - _RULE_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_RULE_KEYS))})")
    if "name" not in raw:
        raise ValueError(f"{where}: missing key 'name'")
    for key in ("name", "detector", "pattern", "action", "apply_at"):
        if key in raw and not isinstance(raw[key], str):
            raise ValueError(f"{where}.{key}: must be a string")
    unless = raw.get("unless", [])
    if not isinstance(unless, list) or not all(isinstance(p, str) for p in unless):
        raise ValueError(f"{where}.unless: must be a list of principal strings")
    try:
        return RedactionRule(
            name=raw["name"], detector=raw.get("detector"), pattern=raw.get("pattern"),
            action=raw.get("action", "mask"), apply_at=raw.get("apply_at", "output"), unless=frozenset(unless),
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


# --- the transform -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppliedRedaction:
    """One replacement: the original span ``[start, end)`` and the replacement's span in the new text.

    ``rule``/``detector``/``action`` are the winner's; ``rules`` names every rule whose span merged into it.
    """

    rule: str
    detector: str
    action: Action
    start: int
    end: int
    new_start: int
    new_end: int
    rules: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RedactionResult:
    text: str
    redactions: tuple[AppliedRedaction, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.redactions)

    def map_offset(self, offset: int, *, side: Literal["start", "end"] = "start") -> int:
        """Carry an offset of the original text into the redacted text.

        Outside every redaction it shifts by the size change of the redactions before it. Strictly inside a
        redaction it snaps outward: to the replacement's start for ``side="start"``, its end for ``"end"``.
        """
        delta = 0
        for r in self.redactions:
            if offset <= r.start:
                break
            if offset < r.end:
                return r.new_start if side == "start" else r.new_end
            delta = r.new_end - r.end
        return offset + delta

    def map_span(self, start: int, end: int) -> tuple[int, int]:
        """Carry a half-open span into the redacted text; a span touching a redaction covers its whole token."""
        if start > end:
            raise ValueError(f"span start {start} is after its end {end}")
        return self.map_offset(start, side="start"), self.map_offset(end, side="end")

    def overlapping(self, start: int, end: int) -> tuple[AppliedRedaction, ...]:
        """The redactions an original span intersects (a caller may want to flag a quote as redacted)."""
        return tuple(r for r in self.redactions if r.start < end and start < r.end)


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    index: int
    rule: RedactionRule
    scanner: Callable[[_Scan], Iterable[tuple[int, int]]] | None
    trusted: bool  # a built-in detector: its spans need no bounds check
    regex: re.Pattern[str] | None
    has_value_group: bool


def _on_text(fn: DetectorFn) -> Callable[[_Scan], Iterable[tuple[int, int]]]:
    return lambda scan: fn(scan.text)


class Redactor:
    """A policy compiled once, with its hash key and any custom detectors. Thread-safe; reuse it."""

    __slots__ = ("policy", "_key", "_rules", "_by_stage")

    def __init__(
        self,
        policy: RedactionPolicy,
        *,
        secret_key: bytes | str | None = None,
        custom_detectors: Mapping[str, DetectorFn] | None = None,
    ) -> None:
        custom = dict(custom_detectors or {})
        for name, fn in custom.items():
            if name in _BUILTIN:
                raise ValueError(f"custom detector {name!r} shadows a built-in detector")
            if not callable(fn):
                raise ValueError(f"custom detector {name!r} is not callable")
        key = secret_key.encode("utf-8") if isinstance(secret_key, str) else secret_key
        if key is not None and not key:
            raise ValueError("redaction secret key must not be empty")
        compiled: list[_CompiledRule] = []
        for i, rule in enumerate(policy.rules):
            if rule.action == "hash" and key is None:
                raise ValueError(f"redaction rule {rule.name!r} hashes but no redaction secret key is configured")
            if rule.detector is not None and rule.detector in _BUILTIN:
                compiled.append(_CompiledRule(i, rule, _BUILTIN[rule.detector], True, None, False))
            elif rule.detector is not None and rule.detector in custom:
                compiled.append(_CompiledRule(i, rule, _on_text(custom[rule.detector]), False, None, False))
            elif rule.detector is not None:
                raise ValueError(
                    f"redaction rule {rule.name!r}: unknown detector {rule.detector!r} "
                    f"(known: {', '.join([*_BUILTIN, *custom])})"
                )
            else:
                regex = re.compile(cast(str, rule.pattern))
                compiled.append(_CompiledRule(i, rule, None, False, regex, "value" in regex.groupindex))
        self.policy = policy
        self._key = key
        self._rules = tuple(compiled)
        self._by_stage: Mapping[str, tuple[_CompiledRule, ...]] = MappingProxyType(
            {stage: tuple(c for c in compiled if c.rule.applies_at(cast(Stage, stage))) for stage in STAGES}
        )

    @property
    def is_noop(self) -> bool:
        return not self._rules

    def active(self, stage: Stage, principals: Collection[str] | None = None) -> bool:
        """Whether anything would be redacted for this stage and caller (cheap; lets callers skip work)."""
        return bool(self._active_rules(stage, principals))

    def redact_output(self, text: str, principals: Collection[str] | None) -> RedactionResult:
        """Redact text retrieval is about to return to (or send on behalf of) a caller."""
        return self.redact(text, stage="output", principals=principals)

    def redact_ingest(self, text: str) -> RedactionResult:
        """Scrub text before it is stored — the pipeline's entry point. Principals play no part here."""
        return self.redact(text, stage="ingest")

    def redact(
        self, text: str, *, stage: Stage = "output", principals: Collection[str] | None = None
    ) -> RedactionResult:
        rules = self._active_rules(stage, principals)
        if not rules or not text:
            return RedactionResult(text)
        hits: list[tuple[int, int, _CompiledRule]] = []
        by_detector: dict[str, list[tuple[int, int]]] = {}
        scan = _Scan(text)
        for c in rules:
            if c.scanner is not None:
                name = cast(str, c.rule.detector)
                if name not in by_detector:
                    by_detector[name] = self._run_detector(name, c, scan)
                hits.extend((s, e, c) for s, e in by_detector[name])
            else:
                regex = cast("re.Pattern[str]", c.regex)
                for m in regex.finditer(text):
                    s, e = m.span("value") if c.has_value_group else m.span()
                    if s < e:  # a non-participating value group (-1, -1) or an empty match redacts nothing
                        hits.append((s, e, c))
        if not hits:
            return RedactionResult(text)
        return self._apply(text, hits)

    def _active_rules(self, stage: Stage, principals: Collection[str] | None) -> tuple[_CompiledRule, ...]:
        if stage not in STAGES:
            raise ValueError(f"redaction stage {stage!r} is not one of {', '.join(STAGES)}")
        if isinstance(principals, str):
            raise ValueError("principals must be a collection of principal strings, not one string")
        rules = self._by_stage[stage]
        if stage == "output" and principals:
            rules = tuple(c for c in rules if not c.rule.exempts(principals))
        return rules

    @staticmethod
    def _run_detector(name: str, c: _CompiledRule, scan: _Scan) -> list[tuple[int, int]]:
        found = cast("Callable[[_Scan], Iterable[tuple[int, int]]]", c.scanner)(scan)
        if c.trusted:
            return list(found)
        text = scan.text
        spans = []
        for span in found:
            s, e = span
            if not (isinstance(s, int) and isinstance(e, int) and 0 <= s <= e <= len(text)):
                raise ValueError(f"detector {name!r} returned span {span!r} outside the text (length {len(text)})")
            if s < e:
                spans.append((s, e))
        return spans

    def _apply(self, text: str, hits: list[tuple[int, int, _CompiledRule]]) -> RedactionResult:
        hits.sort(key=lambda h: (h[0], -h[1]))
        clusters: list[list[tuple[int, int, _CompiledRule]]] = []
        cluster_end = -1
        for hit in hits:
            if clusters and hit[0] < cluster_end:
                clusters[-1].append(hit)
                cluster_end = max(cluster_end, hit[1])
            else:
                clusters.append([hit])
                cluster_end = hit[1]
        pieces: list[str] = []
        applied: list[AppliedRedaction] = []
        cursor = 0
        new_len = 0
        for cluster in clusters:
            start = cluster[0][0]
            end = max(h[1] for h in cluster)
            ws, we, winner = min(cluster, key=lambda h: (_ACTION_STRENGTH[h[2].rule.action], h[2].index))
            replacement = self._replacement(text, start, end, winner.rule, own_span=(ws, we) == (start, end))
            pieces.append(text[cursor:start])
            new_len += start - cursor
            pieces.append(replacement)
            names = tuple(dict.fromkeys(h[2].rule.name for h in sorted(cluster, key=lambda h: h[2].index)))
            applied.append(AppliedRedaction(
                rule=winner.rule.name, detector=winner.rule.source, action=winner.rule.action,
                start=start, end=end, new_start=new_len, new_end=new_len + len(replacement), rules=names,
            ))
            new_len += len(replacement)
            cursor = end
        pieces.append(text[cursor:])
        return RedactionResult("".join(pieces), tuple(applied))

    def _replacement(self, text: str, start: int, end: int, rule: RedactionRule, *, own_span: bool) -> str:
        if rule.action == "remove":
            return ""
        label = rule.name.upper()
        if rule.action == "mask":
            return f"[{label}]"
        raw = text[start:end]
        normalise = _NORMALISERS.get(rule.detector or "") if own_span else None
        return f"[{label}:{self.hash_value(normalise(raw) if normalise else raw)}]"

    def hash_value(self, normalised: str) -> str:
        """The truncated keyed hash of an already-normalised value (for joining against tokens)."""
        if self._key is None:
            raise ValueError("no redaction secret key is configured")
        digest = hmac.new(self._key, normalised.encode("utf-8"), hashlib.sha256).hexdigest()
        return digest[:HASH_HEX_CHARS]


def redactor_from_settings(settings: Any) -> Redactor | None:
    """The configured redactor (TESTAMENT_REDACTION_POLICY / _KEY), or None when there is no policy."""
    policy = RedactionPolicy.from_json(settings.redaction_policy)
    if policy.is_noop:
        return None
    return Redactor(policy, secret_key=settings.redaction_key)


def output_redaction(settings: Any, service: str) -> Callable[[str, Any], str] | None:
    """``redact(text, caller)`` for every text a service returns, or None without a policy.
    A bad policy stops the service naming the variable."""
    from services.platform.server import StartupError

    try:
        redactor = redactor_from_settings(settings)
    except ValueError as exc:
        raise StartupError(f"testament-{service}: TESTAMENT_REDACTION_POLICY: {exc}") from None
    if redactor is None:
        return None

    def redact(text: str, caller: Any) -> str:
        return redactor.redact_output(text, caller.principals).text

    return redact

