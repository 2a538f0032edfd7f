"""Deterministic resolution of English date expressions (world time on claims).

Finds date phrases in a piece of text and, given an anchor day (a speaker turn's
timestamp, a dated heading, or the document's said-on time), resolves the relative
ones ("yesterday", "last Friday", "next week", "in Q2", "since January", "from June
to October") into an absolute rendering for the claim text and a stated world-time
window: ``valid_from`` / ``valid_until`` (inclusive end, UTC midnight),
``precision`` (instant|day|month|quarter|year|open|unknown) and ``kind``
(event_time|effective_period|proposition_validity|measurement_period).

Rules (documented, never guessed):
- a month or quarter without a year takes the anchor's year ("on 1 June" said on
  2026-06-12 is 2026-06-01); a range whose end falls before its start rolls the end
  into the next year;
- "last <weekday>" is the latest such weekday strictly before the anchor; "this/next
  <weekday>" is that weekday in the anchor's Monday-Sunday week / the week after;
- weeks are Monday-Sunday windows of day precision;
- a bare weekday ("on Friday") is resolved only when the caller knows the tense of the
  verb it dates (``weekdays``: the parse-backed extractor reads it): a past verb means the
  latest such weekday before the anchor, a present or future one ("takes over from Monday",
  "I'm leaving on Friday") the next one after it; the anchor's own weekday stays unresolved
  (this one or the last?), and so does a bare weekday of unknown tense;
- "a few weeks ago", or any relative phrase without an anchor stays unresolved (but "since
  Tuesday" can only look back: the latest Tuesday before the anchor): precision
  ``unknown``, text unchanged; nothing is invented;
- "before X" / "after X" record no window (their bound would be a derived date).

Pure standard library; no locale data, no network.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta

__all__ = [
    "KINDS",
    "MONTH_NAMES",
    "PRECISIONS",
    "TimeExpression",
    "WEEKDAY_NAMES",
    "find_anchor_date",
    "find_time_expressions",
    "month_number",
    "render_day",
    "resolve",
]

PRECISIONS: tuple[str, ...] = ("unknown", "instant", "day", "month", "quarter", "year", "open")
KINDS: tuple[str, ...] = ("event_time", "effective_period", "proposition_validity", "measurement_period")

MONTH_NAMES: tuple[str, ...] = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)
WEEKDAY_NAMES: tuple[str, ...] = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

_MONTH_ABBREVIATIONS: dict[str, int] = {
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8,
    "sep": 9, "sept": 9, "oct": 10, "nov": 11, "dec": 12,
}
# the weekdays as chats and notes shorten them ("since mon", "by Weds", "last fri")
WEEKDAY_ABBREVIATIONS: dict[str, int] = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "weds": 2, "thu": 3, "thur": 3,
                                         "thurs": 3, "fri": 4, "sat": 5, "sun": 6}
_WEEKDAYS: dict[str, int] = {name.lower(): i for i, name in enumerate(WEEKDAY_NAMES)} | WEEKDAY_ABBREVIATIONS
_NUMBER_WORDS: dict[str, int] = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
    "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}
_ORDINAL_QUARTERS: dict[str, int] = {"first": 1, "second": 2, "third": 3, "fourth": 4}
_RANK: dict[str, int] = {"instant": 0, "day": 1, "week": 2, "month": 3, "quarter": 4, "year": 5}

_MONTH_FULL = "|".join(MONTH_NAMES)
_MONTH_ABBR = "Sept|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_MONTH = rf"(?P<month>(?:{_MONTH_FULL})(?![A-Za-z])|(?:{_MONTH_ABBR})(?![A-Za-z])\.?)"
_WEEKDAY = "Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"

_P_ISO = re.compile(r"(?<![\w-])(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})(?![\w-])")
_P_DMY = re.compile(rf"(?<![\w.])(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+(?P<y>\d{{4}})(?!\d))?")
_P_MDY = re.compile(
    rf"(?<![\w])(?:the\s+)?{_MONTH}\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?(?![\d:])(?:,?\s+(?P<y>\d{{4}})(?!\d))?"
)
# "24/03/2026", "14/05/26", "due 16/6": a day and month in figures, read only when one of the two
# cannot be a month ("03/04/2026" could be either and is left alone); without a year only after a
# word that introduces a date ("24/7 support" and "3/4 of the staff" are no dates)
_P_NUMERIC = re.compile(r"(?<![\w/.:-])(?P<a>\d{1,2})/(?P<b>\d{1,2})(?:/(?P<y>\d{4}|\d{2}))?(?![\w/:-]|\.\d)")
# the words after which a bare figure or a shortened weekday is a date ("due 16/6", "since mon")
SHORT_DATE_WORDS = frozenset("since from by on till until before after due".split())
_SHORT_DATE_AFTER = "|".join(sorted(SHORT_DATE_WORDS))
_NUMERIC_DATE_AFTER = re.compile(rf"\b(?:{_SHORT_DATE_AFTER}|for|to)\s+$", re.IGNORECASE)  # "from 16/6 to 18/11"
_P_MY = re.compile(
    r"(?<![\w])(?:(?P<mod>early|mid|late|the end of|end of|the beginning of|beginning of|the start of|start of)"
    rf"[\s-]+)?{_MONTH}(?:,?\s+(?P<y>\d{{4}})(?!\d))?"
)
_P_QUARTER = re.compile(r"(?<![\w])Q(?P<q>[1-4])(?:\s+(?P<y>\d{4})(?!\d))?(?![\w])")
_P_QUARTER_WORDS = re.compile(
    r"(?<![\w])(?:the\s+)?(?P<ord>first|second|third|fourth)\s+quarter(?:\s+of\s+(?P<y>\d{4})(?!\d))?(?![\w])",
    re.IGNORECASE,
)
# "H1 2027", "the second half of 2026": six months, at quarter precision (their bounds are quarters')
_P_HALF = re.compile(r"(?<![\w])(?:(?-i:H)(?P<h>[12])(?:\s+(?P<y>\d{4})(?!\d))?|(?:the\s+)?(?P<ord>first|second)\s+half"
                     r"\s+of\s+(?:(?P<y2>\d{4})(?!\d)|the\s+year|this\s+year))(?![\w-])", re.IGNORECASE)
# ISO week numbers: "2026-W22", "W22", "week 47" (the Monday-Sunday week of that number)
_P_WEEK_NUMBER = re.compile(r"(?<![\w-])(?:(?P<y>\d{4})-?W(?P<w>\d{1,2})|W(?P<w2>\d{1,2})|[Ww]eek\s+(?P<w3>\d{1,2})"
                            r"(?:,?\s+(?P<y3>\d{4}))?)(?![\w-])")
# "FY2026", "FY26", "fiscal year 2026", "Q3 FY2026": a fiscal year read as its calendar year
# (no fiscal calendar is known), a quarter of it as that quarter
_P_FISCAL = re.compile(r"(?<![\w])(?:Q(?P<q>[1-4])\s+)?(?:FY\s?-?|[Ff]iscal\s+(?:[Yy]ear\s+)?)(?P<y>20\d{2}|\d{2})"
                       r"(?:\s+Q(?P<q2>[1-4]))?(?![\w-])")
_P_YEAR = re.compile(r"(?<![\w.,-])(?P<y>(?:19|20)\d{2})(?![\w-])")
# "early 2026", "by the end of 2025": somewhere in that year (said no finer)
_P_YEAR_PART = re.compile(r"(?<![\w])(?:early|mid|late|the end of|end of|the beginning of|beginning of|the start of"
                          r"|start of)[\s-]+(?P<y>(?:19|20)\d{2})(?![\w-])", re.IGNORECASE)
_P_DEICTIC = re.compile(
    r"(?<![\w])(?P<w>yesterday|today|tomorrow|tonight|last night|this morning|this afternoon|this evening"
    r"|(?<=effective )immediately|with immediate effect)(?![\w])",
    re.IGNORECASE,
)
_P_REL_UNIT = re.compile(r"(?<![\w])(?P<rel>last|next|this|previous)\s+(?P<u>week|wk|month|year|yr|quarter|qtr)"
                         r"(?![\w])", re.IGNORECASE)
# the units as notes abbreviate them ("last wk", "this qtr")
_UNIT_ABBREVIATIONS = {"wk": "week", "yr": "year", "qtr": "quarter"}
# "by the end of the month", "at the start of the quarter": the anchor's month, quarter, ...
_P_PART_OF_PERIOD = re.compile(r"(?<![\w])(?:the\s+)?(?:end|beginning|start|middle)\s+of\s+(?P<rel>the)\s+"
                               r"(?P<u>week|month|quarter|year)(?![\w])", re.IGNORECASE)
_WEEKDAY_SHORT = "|".join(sorted(WEEKDAY_ABBREVIATIONS, key=len, reverse=True))
_P_REL_WEEKDAY = re.compile(rf"(?<![\w])(?P<rel>last|next|this)\s+(?P<wd>{_WEEKDAY}|{_WEEKDAY_SHORT})\.?(?![\w])",
                            re.IGNORECASE)
# a shortened weekday only after a word that introduces a date ("sat" and "wed" are verbs too)
SHORT_WEEKDAY_RE = re.compile(rf"(?<![\w])(?:{_SHORT_DATE_AFTER})\s+(?P<wd>{_WEEKDAY_SHORT})\.?(?![\w])",
                              re.IGNORECASE)
_P_AGO = re.compile(
    r"(?<![\w])(?P<n>\d{1,3}|one|two|three|four|five|six|seven|eight|nine|ten|a|an)\s+(?P<u>days?|months?|years?)"
    r"\s+ago(?![\w])",
    re.IGNORECASE,
)
_P_VAGUE = re.compile(
    r"(?<![\w])(?:a few|a couple of|a couple|several|some|many|\d{1,3}|one|two|three|four|five|six|seven|eight|nine|"
    r"ten|a|an)\s+(?:weeks?|days?|months?|years?)\s+ago(?![\w])",
    re.IGNORECASE,
)
_P_WEEKDAY = re.compile(rf"(?<![\w])(?P<wd>{_WEEKDAY})(?![\w])")
# "Monday 7 December 2026", "Sat, 1 Aug": a weekday that names the date after it is part of it
# a weekday, written out or abbreviated ("Monday", "Tues.", "Thu")
WEEKDAY_WORD = rf"(?:{_WEEKDAY}|Mon|Tues?|Wed|Thu(?:rs?)?|Fri|Sat|Sun)(?![A-Za-z])\.?"
_WEEKDAY_BEFORE = re.compile(rf"(?<![\w]){WEEKDAY_WORD},?\s+$")

_PREPOSITION_RE = re.compile(
    r"(?<![\w])(?P<p>as of|starting from|starting|effective from|effective|beginning|since|from|between|until|till"
    r"|through|during|before|after|by|on|in"
    r"|at|of|to|and)\s+(?:(?:the\s+)?(?:end|start|beginning)\s+of\s+)?$",  # "until the end of Q3"
    re.IGNORECASE,
)
# "on the same day", "that day": the day of the event just told, said again
SAME_DAY_RE = re.compile(r"\b(?:[Oo]n\s+)?(?:the\s+same|that(?:\s+same)?)\s+(?:day|date)\b")
# "since the reorg on …", "ever since our merger in …": a start told by the event that made it
_SINCE_EVENT_RE = re.compile(
    r"(?<![\w])since\s+(?:the|our|its|their|his|her|this|that)\s+[\w'’-]+(?:\s+[\w'’-]+){0,3}\s+$", re.IGNORECASE)
_RANGE_CONNECTOR_RE = re.compile(r"\s*(?:to|until|till|through|and|-|–|—)\s*", re.IGNORECASE)
_RESCHEDULE_RE = re.compile(
    r"(?<![\w])(?:mov\w*|shift\w*|push\w*|postpon\w*|delay\w*|reschedul\w*|slip\w*|slid\w*|bump\w*|chang\w*)"
    r"(?:\s+[\w'’-]+){0,4}\s*$",
    re.IGNORECASE,
)
_YEAR_PREPOSITIONS = frozenset({
    "in", "since", "from", "until", "till", "through", "by", "during", "of", "before", "after", "to", "and",
    "between", "as of", "starting", "starting from", "effective", "effective from", "beginning",
})
_MAY_PREPOSITIONS = _YEAR_PREPOSITIONS | {"early", "mid", "late", "on", "end of", "the end of"}


@dataclass(frozen=True)
class TimeExpression:
    """A date phrase found in text, with its resolution (if any).

    ``start``/``end`` cover the whole phrase including a leading preposition;
    ``edit_start``/``edit_end`` is the region ``replacement`` should overwrite (None:
    leave the text as written, because it is already absolute or unresolvable).
    """

    start: int
    end: int
    text: str
    edit_start: int
    edit_end: int
    replacement: str | None
    valid_from: datetime | None
    valid_until: datetime | None
    precision: str
    kind: str | None
    relative: bool
    deictic: bool

    @property
    def resolved(self) -> bool:
        return self.precision != "unknown"


@dataclass(frozen=True)
class _Core:
    start: int
    end: int
    first: date | None
    last: date | None
    precision: str  # day | week | month | quarter | year
    relative: bool  # the resolution needed the anchor
    deictic: bool  # meaningless without the anchor (yesterday, last week, ...)
    rendered: str | None  # absolute rendering of the core, without preposition
    yearless_month: str | None  # "June" / "early June": a month-precision core with no year written


def month_number(token: str) -> int | None:
    """1-12 for a month name or abbreviation (any case, optional trailing dot)."""
    word = token.rstrip(".").lower()
    for i, name in enumerate(MONTH_NAMES, start=1):
        if word == name.lower():
            return i
    return _MONTH_ABBREVIATIONS.get(word)


def render_day(day: date) -> str:
    return f"{day.day} {MONTH_NAMES[day.month - 1]} {day.year}"


def _month_last(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + (day.month - 1) + months
    return date(index // 12, index % 12 + 1, 1)


def _preposition_before(text: str, start: int) -> tuple[str | None, int]:
    window_start = max(0, start - 24)
    match = _PREPOSITION_RE.search(text[window_start:start])
    if match is None:
        return None, start
    return match.group("p").lower(), window_start + match.start()


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _core_day(match: re.Match[str], day: date | None, explicit_year: bool) -> _Core:
    if day is None:
        return _Core(match.start(), match.end(), None, None, "day", not explicit_year, False, None, None)
    return _Core(match.start(), match.end(), day, day, "day", not explicit_year, False, render_day(day), None)


def _handle_iso(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    day = _safe_date(int(match.group("y")), int(match.group("mo")), int(match.group("d")))
    if day is None:
        return None
    return _core_day(match, day, True)


def _handle_day_month(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    month = month_number(match.group("month"))
    if month is None:
        return None
    year_text = match.group("y")
    if year_text is None and anchor is None:
        return _core_day(match, None, False)
    year = int(year_text) if year_text else anchor.year  # type: ignore[union-attr]
    day = _safe_date(year, month, int(match.group("d")))
    if day is None:
        return None
    return _core_day(match, day, year_text is not None)


def _handle_numeric(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    first, second = int(match.group("a")), int(match.group("b"))
    if first > 12 >= second >= 1:
        day_number, month = first, second
    elif second > 12 >= first >= 1:
        day_number, month = second, first  # "9/24": the month first
    else:
        return None
    year_text = match.group("y")
    if year_text is not None:
        year = 2000 + int(year_text) if len(year_text) == 2 else int(year_text)
    elif not _NUMERIC_DATE_AFTER.search(text, max(0, match.start() - 8), match.start()):
        return None
    elif anchor is None:
        return _core_day(match, None, False)
    else:
        year = anchor.year
    day = _safe_date(year, month, day_number)
    return _core_day(match, day, year_text is not None) if day is not None else None


def _handle_month(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    token = match.group("month")
    month = month_number(token)
    if month is None:
        return None
    year_text = match.group("y")
    modifier = match.group("mod")
    full_name = token.rstrip(".") in MONTH_NAMES
    if not full_name and year_text is None:
        return None  # "Mar", "Dec" alone are too easily words
    if token == "May" and year_text is None and modifier is None:
        preposition, _ = _preposition_before(text, match.start())
        if preposition not in _MAY_PREPOSITIONS:
            return None  # "May" the modal
    label = f"{modifier} {MONTH_NAMES[month - 1]}" if modifier else MONTH_NAMES[month - 1]
    if modifier == "mid":
        label = f"mid-{MONTH_NAMES[month - 1]}"
    if year_text is None and anchor is None:
        return _Core(match.start(), match.end(), None, None, "month", True, False, None, label)
    year = int(year_text) if year_text else anchor.year  # type: ignore[union-attr]
    if year_text is None and anchor is not None and date(year, month, 1) > anchor \
            and _preposition_before(text, match.start())[0] == "since":
        year -= 1  # "since November", said in January, can only look back
    first = date(year, month, 1)
    return _Core(match.start(), match.end(), first, _month_last(year, month), "month", year_text is None, False,
                 f"{label} {year}", None if year_text else label)


def _quarter_core(match: re.Match[str], quarter: int, year_text: str | None, anchor: date | None,
                  relative: bool | None = None, deictic: bool = False) -> _Core:
    needs_anchor = year_text is None if relative is None else relative
    if year_text is None and anchor is None:
        return _Core(match.start(), match.end(), None, None, "quarter", True, deictic, None, None)
    year = int(year_text) if year_text else anchor.year  # type: ignore[union-attr]
    first = date(year, 3 * quarter - 2, 1)
    return _Core(match.start(), match.end(), first, _month_last(year, 3 * quarter), "quarter", needs_anchor, deictic,
                 f"Q{quarter} {year}", None)


def _handle_quarter(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    return _quarter_core(match, int(match.group("q")), match.group("y"), anchor)


def _handle_quarter_words(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    return _quarter_core(match, _ORDINAL_QUARTERS[match.group("ord").lower()], match.group("y"), anchor)


def _handle_half(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    half = int(match.group("h")) if match.group("h") else 1 if match.group("ord").lower() == "first" else 2
    year_text = match.group("y") or match.group("y2")
    if year_text is None and anchor is None:
        return _Core(match.start(), match.end(), None, None, "quarter", True, False, None, None)
    year = int(year_text) if year_text else anchor.year  # type: ignore[union-attr]
    first = date(year, 6 * half - 5, 1)
    return _Core(match.start(), match.end(), first, _month_last(year, 6 * half), "quarter", year_text is None, False,
                 f"H{half} {year}", None)


def _handle_week_number(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    week = int(match.group("w") or match.group("w2") or match.group("w3"))
    year_text = match.group("y") or match.group("y3")
    if not 1 <= week <= 53:
        return None
    if year_text is None and anchor is None:
        return _Core(match.start(), match.end(), None, None, "week", True, False, None, None)
    year = int(year_text) if year_text else anchor.year  # type: ignore[union-attr]
    try:
        monday = date.fromisocalendar(year, week, 1)
    except ValueError:
        return None
    return _Core(match.start(), match.end(), monday, monday + timedelta(days=6), "week", year_text is None, False,
                 f"the week of {render_day(monday)}", None)


def _handle_year(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    preposition, _ = _preposition_before(text, match.start())
    if preposition not in _YEAR_PREPOSITIONS:
        return None
    year = int(match.group("y"))
    return _Core(match.start(), match.end(), date(year, 1, 1), date(year, 12, 31), "year", False, False, str(year),
                 None)


def _handle_fiscal(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    year = int(match.group("y")) if len(match.group("y")) == 4 else 2000 + int(match.group("y"))
    quarter = match.group("q") or match.group("q2")
    if quarter is not None:
        return _quarter_core(match, int(quarter), str(year), anchor)
    return _Core(match.start(), match.end(), date(year, 1, 1), date(year, 12, 31), "year", False, False,
                 f"FY{year}", None)


def _handle_year_part(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    year = int(match.group("y"))
    return _Core(match.start(), match.end(), date(year, 1, 1), date(year, 12, 31), "year", False, False,
                 match.group(), None)


def _handle_deictic(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    word = match.group("w").lower()
    if anchor is None:
        return _Core(match.start(), match.end(), None, None, "day", True, True, None, None)
    offset = {"yesterday": -1, "last night": -1, "tomorrow": 1}.get(word, 0)
    day = anchor + timedelta(days=offset)
    return _Core(match.start(), match.end(), day, day, "day", True, True, render_day(day), None)


def _handle_relative_unit(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    rel = match.group("rel").lower()
    unit = _UNIT_ABBREVIATIONS.get(match.group("u").lower(), match.group("u").lower())
    step = {"last": -1, "previous": -1, "this": 0, "the": 0, "next": 1}[rel]
    precision = "week" if unit == "week" else unit
    if anchor is None:
        return _Core(match.start(), match.end(), None, None, precision, True, True, None, None)
    if rel == "this" and unit in ("month", "quarter", "year") and re.search(r"\blater\s+$", text[:match.start()],
                                                                           re.IGNORECASE):
        # "later this year": after the anchor, within its year (not the part already past)
        last = (_month_last(anchor.year, anchor.month) if unit == "month" else date(anchor.year, 12, 31)
                if unit == "year" else _month_last(anchor.year, 3 * ((anchor.month - 1) // 3) + 3))
        first = anchor + timedelta(days=1)
        rendered = (str(anchor.year) if unit == "year" else f"{MONTH_NAMES[anchor.month - 1]} {anchor.year}"
                    if unit == "month" else f"Q{(anchor.month - 1) // 3 + 1} {anchor.year}")
        return _Core(match.start(), match.end(), first, max(first, last), precision, True, True, rendered, None)
    if unit == "week":
        monday = anchor - timedelta(days=anchor.weekday()) + timedelta(weeks=step)
        return _Core(match.start(), match.end(), monday, monday + timedelta(days=6), "week", True, True,
                     f"the week of {render_day(monday)}", None)
    if unit == "month":
        first = _add_months(anchor, step)
        return _Core(match.start(), match.end(), first, _month_last(first.year, first.month), "month", True, True,
                     f"{MONTH_NAMES[first.month - 1]} {first.year}", None)
    if unit == "year":
        year = anchor.year + step
        return _Core(match.start(), match.end(), date(year, 1, 1), date(year, 12, 31), "year", True, True,
                     str(year), None)
    quarter_index = anchor.year * 4 + (anchor.month - 1) // 3 + step
    year, quarter = quarter_index // 4, quarter_index % 4 + 1
    return _quarter_core(match, quarter, str(year), anchor, relative=True, deictic=True)


def _handle_part_of_period(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    core = _handle_relative_unit(text, match, anchor)
    if core is None or core.rendered is None:
        return core
    prefix = match.group()[:match.start("rel") - match.start()]  # "the end of " March 2026
    return replace(core, rendered=prefix + core.rendered)


def _handle_relative_weekday(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    rel = match.group("rel").lower()
    weekday = _WEEKDAYS[match.group("wd").lower()]
    if anchor is None:
        return _Core(match.start(), match.end(), None, None, "day", True, True, None, None)
    if rel == "last":
        delta = (anchor.weekday() - weekday) % 7 or 7
        day = anchor - timedelta(days=delta)
    else:
        monday = anchor - timedelta(days=anchor.weekday()) + timedelta(weeks=1 if rel == "next" else 0)
        day = monday + timedelta(days=weekday)
    return _Core(match.start(), match.end(), day, day, "day", True, True, render_day(day), None)


def _handle_ago(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    amount_text = match.group("n").lower()
    amount = int(amount_text) if amount_text.isdigit() else _NUMBER_WORDS[amount_text]
    unit = match.group("u").lower().rstrip("s")
    if anchor is None:
        return _Core(match.start(), match.end(), None, None, unit, True, True, None, None)
    if unit == "day":
        day = anchor - timedelta(days=amount)
        return _Core(match.start(), match.end(), day, day, "day", True, True, render_day(day), None)
    if unit == "month":
        first = _add_months(anchor, -amount)
        return _Core(match.start(), match.end(), first, _month_last(first.year, first.month), "month", True, True,
                     f"{MONTH_NAMES[first.month - 1]} {first.year}", None)
    year = anchor.year - amount
    return _Core(match.start(), match.end(), date(year, 1, 1), date(year, 12, 31), "year", True, True, str(year),
                 None)


def _handle_unresolvable(text: str, match: re.Match[str], anchor: date | None) -> _Core | None:
    if match.re is _P_WEEKDAY and text[match.end():match.end() + 1] == "s":
        return None
    weekday = match.re in (_P_WEEKDAY, SHORT_WEEKDAY_RE)
    start = match.start("wd") if weekday else match.start()
    if weekday and anchor is not None and _preposition_before(text, start)[0] == "since":
        # "since Tuesday" can only look back: the latest Tuesday before the anchor
        day = anchor - timedelta(days=(anchor.weekday() - _WEEKDAYS[match.group("wd").lower()]) % 7 or 7)
        return _Core(start, match.end(), day, day, "day", True, True, render_day(day), None)
    return _Core(start, match.end(), None, None, "day", True, True, None, None)


_Handler = Callable[[str, re.Match[str], date | None], _Core | None]
_PATTERNS: tuple[tuple[re.Pattern[str], _Handler], ...] = (
    (_P_ISO, _handle_iso),
    (_P_DMY, _handle_day_month),
    (_P_MDY, _handle_day_month),
    (_P_NUMERIC, _handle_numeric),
    (_P_MY, _handle_month),
    (_P_QUARTER, _handle_quarter),
    (_P_QUARTER_WORDS, _handle_quarter_words),
    (_P_HALF, _handle_half),
    (_P_WEEK_NUMBER, _handle_week_number),
    (_P_FISCAL, _handle_fiscal),
    (_P_YEAR, _handle_year),
    (_P_YEAR_PART, _handle_year_part),
    (_P_DEICTIC, _handle_deictic),
    (_P_REL_UNIT, _handle_relative_unit),
    (_P_PART_OF_PERIOD, _handle_part_of_period),
    (_P_REL_WEEKDAY, _handle_relative_weekday),
    (_P_AGO, _handle_ago),
    (_P_VAGUE, _handle_unresolvable),
    (_P_WEEKDAY, _handle_unresolvable),
    (SHORT_WEEKDAY_RE, _handle_unresolvable),
)


def _bare_weekday(match: re.Match[str], anchor: date | None, direction: int | None) -> _Core | None:
    """A bare weekday whose verb's tense is known: the one just before (-1) or after (+1) the anchor."""
    if anchor is None or direction is None:
        return None
    gap = (_WEEKDAYS[match.group("wd").lower()] - anchor.weekday()) % 7
    if gap == 0:
        return None
    day = anchor + timedelta(days=gap if direction > 0 else gap - 7)
    # not deictic: its preposition ("on", "for", "from") is already written before it
    return _Core(match.start("wd"), match.end(), day, day, "day", True, False, render_day(day), None)


def _find_cores(text: str, anchor: date | None, weekdays: Mapping[int, int] | None = None) -> list[_Core]:
    candidates: list[tuple[int, int, int, _Core]] = []
    for priority, (pattern, handler) in enumerate(_PATTERNS):
        for match in pattern.finditer(text):
            core = None
            if pattern in (_P_WEEKDAY, SHORT_WEEKDAY_RE) and weekdays \
                    and _preposition_before(text, match.start("wd"))[0] != "since":
                core = _bare_weekday(match, anchor, weekdays.get(match.start("wd")))
            core = core or handler(text, match, anchor)
            if core is not None and pattern in (_P_DMY, _P_MDY, _P_ISO, _P_NUMERIC):
                weekday = _WEEKDAY_BEFORE.search(text, max(0, core.start - 12), core.start)
                core = replace(core, start=weekday.start()) if weekday is not None else core
            if core is not None:
                candidates.append((core.start, -(core.end - core.start), priority, core))
    candidates.sort(key=lambda item: (item[0], item[1], item[2]))
    chosen: list[_Core] = []
    taken_until = -1
    for start, _, _, core in candidates:
        if start >= taken_until:
            chosen.append(core)
            taken_until = core.end
    return chosen


def _output_precision(precision: str) -> str:
    return "day" if precision == "week" else precision


def _single(text: str, core: _Core, preposition: str | None, prep_start: int) -> TimeExpression:
    start = prep_start if preposition else core.start
    phrase = text[start:core.end]
    unresolved = TimeExpression(start, core.end, phrase, core.start, core.end, None, None, None, "unknown", None,
                                core.relative, core.deictic)
    if core.first is None or core.last is None or preposition in ("before", "after"):
        return unresolved
    precision = _output_precision(core.precision)
    valid_from: datetime | None = _midnight(core.first)
    valid_until: datetime | None = _midnight(core.last)
    kind = "event_time"
    if preposition in ("since", "from", "as of", "starting", "starting from", "effective", "effective from",
                       "beginning") or phrase.lower() == "with immediate effect":
        valid_until, precision, kind = None, "open", "effective_period"
    elif preposition in ("until", "till", "through"):
        valid_from, kind = None, "effective_period"
    elif preposition == "by":
        valid_from = None
    replacement: str | None = None
    if core.relative and core.rendered is not None:
        replacement = core.rendered
        if core.deictic and preposition is None:
            replacement = ("on " if core.precision == "day" else "in ") + replacement
    return TimeExpression(start, core.end, phrase, core.start, core.end, replacement, valid_from, valid_until,
                          precision, kind, core.relative, core.deictic)


def _range(text: str, first: _Core, second: _Core, prep_start: int) -> TimeExpression:
    phrase = text[prep_start:second.end]
    relative = first.relative or second.relative
    deictic = first.deictic or second.deictic
    if first.first is None or second.last is None or first.last is None or second.first is None:
        return TimeExpression(prep_start, second.end, phrase, first.start, second.end, None, None, None, "unknown",
                              None, relative, deictic)
    second_first, second_last, second_rendered = second.first, second.last, second.rendered
    if first.yearless_month and first.precision == "month" and not second.relative \
            and first.first.year != second.first.year:
        # "from March to June 2025": the start is in the year the end names (or the one before)
        year = second.first.year - (1 if first.first.month > second.first.month else 0)
        moved_first, moved_last = date(year, first.first.month, 1), _month_last(year, first.first.month)
        first = _Core(first.start, first.end, moved_first, moved_last, first.precision, False, first.deictic,
                      f"{first.yearless_month} {year}", None)
        relative = second.relative or first.relative
    assert first.first is not None  # narrowed above; the moved start is a date too
    cross_year_roll = False
    if second.relative and not second.deictic and second_last < first.first:
        # "from November to February": the end is in the following year.
        second_first = date(second_first.year + 1, second_first.month, second_first.day)
        second_last = (_month_last(second_first.year, second_first.month) if second.precision in ("month", "quarter")
                       else date(second_last.year + 1, second_last.month, second_last.day))
        second_rendered = (f"{second.yearless_month} {second_first.year}" if second.yearless_month
                           else render_day(second_first) if second.precision == "day" else second_rendered)
        cross_year_roll = True
    connector = text[first.end:second.start]
    reschedule = _RESCHEDULE_RE.search(text[max(0, prep_start - 48):prep_start]) is not None
    precision = max(first.precision, second.precision, key=lambda p: _RANK[p])
    if reschedule:
        # "moves from June to October": the event's (new) time is the second date.
        valid_from, valid_until = _midnight(second_first), _midnight(second_last)
        precision, kind = second.precision, "event_time"
    else:
        valid_from, valid_until, kind = _midnight(first.first), _midnight(second_last), "effective_period"
    replacement: str | None = None
    if relative:
        same_year = first.first.year == second_first.year
        if first.yearless_month and second.yearless_month and same_year:
            replacement = f"{first.yearless_month}{connector}{second_rendered}"
        elif reschedule and cross_year_roll:
            replacement = f"{text[first.start:first.end]}{connector}{second_rendered}"
        else:
            first_text = first.rendered if first.relative else text[first.start:first.end]
            second_text = second_rendered if second.relative else text[second.start:second.end]
            replacement = f"{first_text}{connector}{second_text}"
    return TimeExpression(prep_start, second.end, phrase, first.start, second.end, replacement, valid_from,
                          valid_until, _output_precision(precision), kind, relative, deictic)


def find_time_expressions(text: str, anchor: date | None,
                          weekdays: Mapping[int, int] | None = None) -> list[TimeExpression]:
    """Every date phrase in ``text``, left to right, resolved against ``anchor`` where needed.
    ``weekdays`` maps the offset of a bare weekday to the direction its verb's tense gives
    (-1 past, +1 present or future)."""
    cores = _find_cores(text, anchor, weekdays)
    expressions: list[TimeExpression] = []
    index = 0
    while index < len(cores):
        core = cores[index]
        preposition, prep_start = _preposition_before(text, core.start)
        if preposition in ("to", "and", "of"):
            preposition, prep_start = None, core.start
        if preposition in ("on", "in") and _SINCE_EVENT_RE.search(text[max(0, prep_start - 48):prep_start]):
            preposition = "since"  # "since the reorg on 1 September": from the event's day on
        if preposition in ("from", "between") and index + 1 < len(cores):
            following = cores[index + 1]
            connector = _RANGE_CONNECTOR_RE.fullmatch(text[core.end:following.start])
            if connector is not None:
                expressions.append(_range(text, core, following, prep_start))
                index += 2
                continue
        expressions.append(_single(text, core, preposition, prep_start))
        index += 1
    return expressions


def resolve(phrase: str, anchor: date | None) -> TimeExpression | None:
    """The first date expression in ``phrase`` (convenience for callers and tests)."""
    found = find_time_expressions(phrase, anchor)
    return found[0] if found else None


def find_anchor_date(text: str) -> date | None:
    """The first fully stated calendar day in ``text`` (a dated heading or header line)."""
    for expression in find_time_expressions(text, None):
        if (expression.precision == "day" and not expression.relative and expression.valid_from is not None
                and expression.valid_until == expression.valid_from):
            return expression.valid_from.date()
    return None
