"""Reading a claim from its English parse: who did what to whom, with which change.

The offline normaliser's core. A claim's text is parsed (``nlp.parse``); each clause head
gives its subject(s) (conjuncts are one reading each), its verb lemma with particle
("take over", "step down"), objects, prepositional arguments ("from", "to", "as", "of"),
passive agents, negation and mood. The clause then maps onto the governed vocabulary:

- ``relation``: two entities and a predicate ("Priya leads Project Falcon"), with a change
  kind: ``succession`` (take over, join, move, become, hand over, ...), ``end`` (leave, step
  down, no longer), ``negation`` ("is not the owner") or ``correction`` ("actually ...");
- ``attribute``: a named value of one thing ("Q3 marketing budget: 90,000 EUR"), which
  supersedes the thing's previous value (cut, raise, rename, postpone, slip, ...);
- ``statement``: anything else that states something about a named thing;
- ``reported``: "X said that ..." (the holder's stance, not a fact);
- ``nonfact``: questions, hypotheticals and conditionals, opinions; ``plan``: intentions.

Pure and deterministic: the same text always reads the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from services.pipeline.domain import nlp, timeparse
from services.pipeline.domain.entities import ABBREVIATED_TITLES, HONORIFICS, role_before_title

__all__ = ["GRADED_HEADS", "Reading", "is_person_name", "is_pronoun", "name_at", "opens_with_a_noun", "read"]


@dataclass(frozen=True)
class Reading:
    kind: str  # relation | attribute | statement | reported | plan | nonfact | succession (a role not named)
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    attribute: str | None = None
    value: str | None = None
    change: str = "none"  # none | succession | end | negation | correction
    previous: str | None = None  # the previous object ("from A to B") or value
    previous_holder: str | None = None  # "took over X from A", "B replaced A"
    mood: str = "fact"  # fact | plan | question | hypothetical | opinion
    hedged: bool = False
    label: str = ""
    features: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------- vocabulary

_VERB_PREDICATES = {
    "lead": "other:leads", "head": "other:leads", "manage": "other:leads", "chair": "other:leads",
    "run": "other:leads", "captain": "other:leads", "coordinate": "other:leads", "direct": "other:leads",
    "own": "other:owns", "maintain": "other:owns", "oversee": "other:leads",
    "sponsor": "other:sponsors",
    "use": "uses", "found": "founded", "co-found": "founded", "cofound": "founded",
    "write": "authored", "author": "authored", "create": "created", "build": "created", "design": "created",
    "develop": "created", "know": "knows", "attend": "participated_in", "block": "blocks",
}
_PREP_VERB_PREDICATES = {
    ("work", "on"): "works_on", ("work", "for"): "works_for", ("work", "at"): "works_for",
    ("report", "to"): "reports_to", ("rely", "on"): "uses", ("depend", "on"): "depends_on",
    ("participate", "in"): "participated_in", ("belong", "to"): "member_of", ("sit", "on"): "member_of",
    ("work", "in"): "works_on", ("look", "after"): "other:owns",
}
# Passive verbs: "X is owned by Y" (agent is the subject of the relation) or "X is hosted in Y".
_PASSIVE_AGENT = {"own": "other:owns", "lead": "other:leads", "manage": "other:leads", "run": "other:leads",
                  "head": "other:leads", "maintain": "other:owns", "sponsor": "other:sponsors",
                  "build": "created", "create": "created", "write": "authored", "develop": "created",
                  "design": "created", "found": "founded", "use": "uses", "block": "blocks", "chair": "other:leads",
                  "oversee": "other:leads", "coordinate": "other:leads"}
_LOCATION_VERBS = frozenset("""host locate base headquarter run live deploy store keep house place sit reside
hold""".split())
# those of them that only ever put a thing somewhere physical
_PLACED_VERBS = frozenset("locate base headquarter live house place sit reside".split())
_ROLE_NOUNS = {
    "owner": "other:owns", "maintainer": "other:owns", "lead": "other:leads", "leader": "other:leads",
    "head": "other:leads", "manager": "other:leads", "director": "other:leads", "chair": "other:leads",
    "captain": "other:leads", "coordinator": "other:leads", "convenor": "other:leads", "convener": "other:leads",
    "sponsor": "other:sponsors", "member": "member_of",
    "part": "part_of", "author": "authored", "founder": "founded", "co-founder": "founded", "steward": "other:owns",
    "custodian": "other:owns", "point": "other:owns",
}
_GROUP_HEADS = frozenset("""guild committee board council club chapter community union panel forum circle
working group society association""".split())
_THING_HEADS = frozenset("""service system app application platform tool library product api database cluster
pipeline site portal engine server job repository repo dashboard bot model studio ci website intranet wiki blog
newsletter crm erp helpdesk spreadsheet sheet tracker backend frontend page""".split())
ORG_WORDS = frozenset("""labs lab inc ltd llc gmbh corp corporation company bank university institute agency
systems technologies partners consulting""".split())
_STATUS_WORDS = frozenset("""complete completed done live blocked paused cancelled canceled active ready delayed
finished shipped deprecated stalled underway launched closed open resolved pending archived frozen investigating
monitoring mitigated triaged reopened approved rejected""".split())

# What one holds when one takes something over: a team, project or rota is led; a system,
# document or asset is owned.
_LED_HEADS = frozenset("""team squad project rotation rota migration initiative program programme review council
committee effort workstream group guild department function process meeting sync practice chapter unit
division launch rollout desk matter case coordination fundraising recruitment procurement outreach
planning ward clinic kitchen depot bureau crew shift duty section maintenance collection collections
rounds dispatch catering cleaning coaching training""".split())
_LED_HEADS = _LED_HEADS | frozenset("""upgrade rewrite redesign overhaul refactor investigation response
audit workshop onboarding programme campaign engineering operations sales marketing support design security
experiment pilot trial study
finance platform research product infrastructure management
dock distribution taproom store site line office lab laboratory facility warehouse yard plant hub centre center bar
restaurant shop branch""".split())  # places and lines people run: "took over the Rotterdam cross-dock"
# verbs whose object may be an activity written as a gerund ("leads fundraising")
_GERUND_HOLDERS = frozenset("lead own run manage head handle coordinate oversee".split())
# verbs whose complement is the statement itself ("continues to work on the matter")
_ASPECTUAL = frozenset("continue keep".split())
_TAKE_OVER = frozenset({"take over", "take on", "assume", "inherit", "pick up", "take back"})
_HAND_OVER = frozenset({"hand over", "hand off", "pass", "hand", "pass on"})
_SUCCEED = frozenset({"succeed", "replace"})
_BECOME = frozenset({"become", "appoint", "name", "promote", "make", "elect", "hire", "assign"})
_JOIN = frozenset({"join", "start", "begin", "rejoin"})
_MOVE = frozenset({"move", "switch", "transfer", "migrate", "relocate", "shift", "port", "go"})
_END = frozenset({"leave", "step down", "quit", "resign", "step back", "roll off", "retire", "exit", "depart",
                  "step away", "drop out", "stop", "stand down", "step aside", "stand aside"})
_VALUE_CHANGE = frozenset("""cut raise increase reduce lower lift trim slash boost double halve set change adjust bump
revise update drop rise fall grow decrease climb jump shrink expand extend cap""".split()) | {"go up", "go down"}
_RESCHEDULE = frozenset({"postpone", "delay", "push", "push back", "push out", "slip", "reschedule", "defer",
                         "bring forward", "pull in", "move up", "bring", "advance", "pull forward", "slide"})
_SCHEDULE = frozenset({"plan", "schedule", "set", "due", "expect", "book", "slate", "target"})
_SAY = frozenset("""say tell report announce confirm mention note explain claim add argue warn promise insist reply
write state suggest""".split())
# verbs whose object is what was said even when the parser makes it a noun ("Ravi said the
# migration moves …" parsed with "moves" as the object); "tell finance" is not
_SPEECH_ONLY = frozenset("say claim".split())
_PARTICLES = frozenset("down over up off back out away forward on in".split())
# verbs whose complement the speaker takes as known ("noted that", "confirmed that")
_FACTIVE = frozenset("note confirm announce notice realise realize discover acknowledge report".split())
# verbs that put a figure on record: "reported reserves of 212,000 GBP"
_RECORD = frozenset("report post record announce log declare show".split())
_THINK = frozenset("think believe feel guess reckon suspect doubt fear hope worry".split())
_STANDING_PARTICIPLES = frozenset("report work lead manage head own run".split())
# what one holds as its owner ("holds the contract"), not a meeting or stock one holds
_HELD_THINGS = frozenset("contract licence license lease franchise concession tender patent permit account portfolio "
                         "budget title trademark copyright mandate".split())
_PLAN_VERBS = frozenset("plan intend aim hope want mean expect propose".split())
_HYPO_AUX = frozenset("would could might may should must ought".split())
_OPINION_ADJ = frozenset("""great good bad terrible awful awesome amazing excellent wonderful fantastic brilliant
horrible nice lovely ugly beautiful elegant clean messy better best worse worst risky dangerous useful useless
pointless important overrated underrated interesting boring exciting confusing easy easier hard harder difficult
simple complicated annoying frustrating impressive disappointing promising ridiculous stupid smart clever perfect
silly weird strange cool fun painful crazy solid sensible reasonable slow fast""".split())
_VERB_LEXICON = frozenset(
    {v for v in (*_VERB_PREDICATES, *(b for b, _ in _PREP_VERB_PREDICATES), *_PASSIVE_AGENT, *_LOCATION_VERBS,
                 *_VALUE_CHANGE, *_MOVE, *_RESCHEDULE, *_JOIN, *_END, *_SUCCEED) if " " not in v})
_FORMERLY = frozenset({"previously", "formerly"})
_CURRENCY_CODES = frozenset("""USD EUR GBP CHF JPY CNY AUD CAD SEK NOK DKK PLN CZK HUF INR BRL ZAR NZD SGD HKD MXN
KRW TRY AED SAR ILS RON BGN ISK""".split())
# processes done "with" a tool ("tracked with ORBCOMM"), not with a partner ("signed with Acme")
_TOOL_VERBS = frozenset("track monitor manage build make process record log store schedule plan book edit".split())
# clouds a system is hosted in when it moves there ("moved from Heroku to AWS")
_HOSTING_PROVIDERS = frozenset("""aws azure gcp heroku digitalocean hetzner ovh ovhcloud linode vercel netlify
cloudflare akamai fastly scaleway""".split())
_SITE_NOUNS = frozenset("site location building premises facility place home office".split())
# nouns that say what kind of thing a name that follows them is ("the internal tool Quasar")
_KIND_NOUNS = frozenset("tool project product codename initiative vendor supplier client customer".split())
# what a value is fixed at ("fixes the price at 128 EUR", "the spend is capped at 60,000 GBP")
_FIXED_AT = frozenset("fix set cap freeze lock peg keep hold approve agree confirm".split())
# what passes through a named service that it uses: "SMS went through Nexmo", "staff sign in through Okta"
_SIGN_IN_VERBS = frozenset("sign log authenticate connect sync".split())
_CHANNEL_VERBS = _SIGN_IN_VERBS | frozenset("go send route pass process flow pay".split())
# what is done in a system one uses: "tracked in AMOS", "processed in Xero"
_RECORDED = frozenset("""track log record process book schedule invoice bill ticket document manage handle plan
file submit approve""".split())
# a person's role said before their name ("deputy manager Dean Whitaker"): no part of the name
_ROLE_BEFORE_NAME = frozenset("""manager director lead engineer officer analyst solicitor clerk assistant supervisor
contact landlord tenant colleague trainee intern nurse doctor consultant technician administrator adviser advisor
specialist planner designer developer owner head chair coordinator""".split())
_ROLE_WORDS = _ROLE_BEFORE_NAME | frozenset(_ROLE_NOUNS)  # a role noun an apposition may name the person of
# what is held when "ownership of X" or "leadership of X" passes to someone
_HOLDING_NOUNS = {"ownership": "other:owns", "responsibility": "other:owns", "stewardship": "other:owns",
                  "custody": "other:owns", "leadership": "other:leads", "management": "other:leads"}
# nouns whose value is a grade ("the severity is high", "health moved from Green to Amber")
GRADED_HEADS = frozenset("severity priority impact risk urgency confidence health rating grade".split())
_HEDGES = frozenset("probably likely maybe perhaps possibly apparently presumably supposedly allegedly".split())
_CORRECTION_WORDS = re.compile(r"^\s*(?:correction\b|actually\b|in fact\b|to correct\b)|\bcontrary to\b"
                               r"|\bnot\s+\w+\s+but\b", re.IGNORECASE)
_DETERMINERS = frozenset("the a an this that these those our my your their his her its some any each every".split())
_PRONOUNS = frozenset("i me we us you he him she her they them it one someone everyone nobody".split())
_RELATIVE_WORDS = frozenset("who whom whose which that where when".split())
_TIME_NOUNS = frozenset("""today yesterday tomorrow week weeks month months year years quarter day days morning
evening afternoon night now then time moment end beginning start""".split())


# ------------------------------------------------------------------------- noun phrases

# a word with a number fused to it ("Lead0", "Person12") is a name even when the small model
# tags it DATE; quarters and fiscal years ("Q3", "FY2026") have no lowercase run
_NUMBERED_NAME = re.compile(r"^[A-Z][a-z]{2,}\d+$")
_FISCAL_YEAR = re.compile(r"^FY-?(?:20)?\d{2}$")  # the small model tags "FY2026" a name


def _is_time(token: Any) -> bool:
    if _NUMBERED_NAME.match(token.text):
        # "Lead0" is a name; "June2026" (a month run into its year) is a date whatever its tag
        return timeparse.month_number(token.text.rstrip("0123456789")) is not None
    if token.ent_type_ in ("DATE", "TIME") and token.pos_ == "PROPN" and not any(
            _dateish(t) for t in token.subtree if t.ent_type_ in ("DATE", "TIME")):
        return False  # "moved from Samsara to Webfleet": a name the small model tags a date
    return (token.ent_type_ in ("DATE", "TIME") or token.lemma_.lower() in _TIME_NOUNS
            or bool(_FISCAL_YEAR.match(token.text)))


_HOLIDAYS = frozenset("christmas easter xmas ramadan eid diwali thanksgiving hanukkah passover halloween".split())


def _dateish(token: Any) -> bool:
    """A word a date is written with: a number, a month or weekday, a time noun, a holiday."""
    text = token.text
    return (any(ch.isdigit() for ch in text) or timeparse.month_number(text) is not None
            or text in timeparse.WEEKDAY_NAMES or text.removesuffix("s") in timeparse.WEEKDAY_NAMES
            or token.lemma_.lower() in _TIME_NOUNS or text.lower() in _HOLIDAYS
            or text.lower() in ("new", "year", "eve", "day", "weekend", "spring", "summer", "autumn", "fall",
                                "winter", "h1", "h2", "fy"))


_NP_STOP_DEPS = frozenset({"relcl", "acl", "advcl", "punct", "cc", "conj", "appos", "prep", "ccomp", "xcomp",
                           "parataxis", "mark", "advmod", "neg", "aux", "auxpass", "nsubj", "nsubjpass", "dep",
                           "prt"})
_NP_KEEP_PREPS = frozenset({"of", "for", "on"})
# adverbs the parser hangs on a noun that are not its modifiers ("only the", "also the", "now")
_NOT_PREMODIFIERS = frozenset("only also just even still now then already almost nearly about around roughly "
                              "approximately some over under".split())
_ATTRIBUTE_PREPS = _NP_KEEP_PREPS | {"in", "at", "per", "among"}
# "on leave", "on call": a state of the person, not work on a thing
_NOT_WORK = frozenset("leave holiday vacation call duty site track time schedule board hold break sabbatical".split())
# what one is "on" as a customer of it: "they're on the Fleet Pro plan"
_TIER_HEADS = frozenset("plan tier edition subscription package licence license bundle".split())


def _np_tokens(token: Any, keep: frozenset[str] = _NP_KEEP_PREPS) -> list[Any]:
    """A noun phrase: the head with its modifiers and its "of"/"for" complements (not dates,
    clauses, conjuncts or other prepositional phrases)."""
    out = [token]
    following = token.i + 1
    while following < len(token.doc) and _glued(token.doc[following]) and token.doc[following].head.i == token.head.i:
        out.append(token.doc[following])  # "AWS eu-west-1" parsed as three objects of "to"
        following += 1
    before = token.doc[token.left_edge.i - 1] if token.left_edge.i > 0 else None
    if (before is not None and token.dep_ in ("nsubj", "nsubjpass") and token.pos_ == "PROPN"
            and before.head.i == token.head.i and before.dep_ in ("npadvmod", "dep", "nmod")
            and before.text[:1].isupper() and before.is_alpha and not _is_time(before)):
        out.append(before)  # "Anders Vik leaves …" parsed with "Anders" a plural noun on the verb
    if _ampersand(token):
        out.extend(t for c in token.children if c.dep_ in ("cc", "conj") and c.i > token.i for t in c.subtree)
    if token.dep_ in ("dobj", "nsubj", "nsubjpass") and not _set_aside(token):
        # "took over the weekend support rota", "the payments API is hosted …", "the Leipzig
        # pharma cross-dock": the parser's adjacent objects (or subjects) are one noun phrase
        left = token.left_edge.i
        for sibling in reversed([c for c in token.head.children if c.dep_ == token.dep_ and c.i < token.i]):
            if sibling.right_edge.i + 1 == left or (sibling.right_edge.i + 2 == left
                                                    and token.doc[left - 1].text in _JOINING_MARKS):
                out.extend(sibling.subtree)
                left = sibling.left_edge.i
        for sibling in token.head.children:
            # "owns the team offsite budget" parsed with "offsite" a conjunct of the verb: a
            # conjunct noun right after the object with no coordinator between continues it
            if sibling.dep_ == "conj" and sibling.pos_ in ("NOUN", "PROPN") and sibling.left_edge.i == \
                    token.right_edge.i + 1 and not any(c.dep_ == "cc" for c in token.head.children):
                out.extend(sibling.subtree)
    for child in token.children:
        if child.dep_ == "prep" and child.lower_ in keep and child.i > token.i and not (
                child.lower_ != "of" and (_is_person(token) or token.pos_ == "PROPN" and (_is_personish(token) or any(
                    c.dep_ == "compound" and c.pos_ == "PROPN" for c in token.children)))):
            # "reports to Marguerite Lyons on the arbitration": a name takes no complement but "of"
            objects = [c for c in child.children if c.dep_ == "pobj"]
            if child.lower_ == "of" and token.pos_ == "PROPN" and token.ent_type_ == "PERSON" \
                    and any(o.pos_ == "PROPN" or _is_group(o) for o in objects):
                continue  # "Harriet Osborne of Procurement Services": where she is from, not her name
            # "budget for Q4" names the attribute; "on 3 May" does not
            timed = any(_is_time(o) for o in objects) and child.lower_ != "for"
            if objects and not timed and not _is_person(objects[0]) or (objects and child.lower_ == "of"):
                out.append(child)
                out.extend(c for c in child.children if c.dep_ == "punct" and c.text in ("-", "/"))
                for obj in objects:
                    out.extend(_np_tokens(obj))
            continue
        if child.dep_ == "appos" and child.pos_ == "NUM" and child.ent_type_ == "DATE" and \
                child.left_edge.i == max(t.i for t in out) + 1 and token.doc[child.i - 1].ent_type_ == "DATE":
            out.append(child)  # "budget for Q4 2026": the year the parser hung on the noun ends the date
            continue
        if child.dep_ == "appos" and token.pos_ == "NOUN" and child.left_edge.i == token.i + 1 and child.pos_ in (
                "NOUN", "PROPN") and not any(t.is_punct for t in child.subtree):
            out.extend(child.subtree)  # "the payments API" with "API" taken for an apposition
            continue
        if child.dep_ in ("appos", "nummod") and child.pos_ == "NUM" and child.i == token.i + 1:
            # "the service 15": a number right after its noun is part of the name (the parser
            # makes it an apposition, or a date when it could be a day of the month)
            out.append(child)
            continue
        if child.dep_ in ("nsubj", "dep") and child.i == token.i - 1 and token.pos_ == "PROPN" \
                and child.text[:1].isupper() and child.is_alpha and not _is_time(child):
            out.append(child)  # "Ines Moreau chairs …" parsed with "Ines" the subject of "Moreau"
            continue
        if child.dep_ == "nsubj" and child.i == token.i - 1 and token.pos_ == child.pos_ == "NOUN" \
                and token.dep_ in ("nsubj", "nsubjpass"):
            out.extend(child.subtree)  # "our costs estimate was revised" parsed with "costs" the subject of "estimate"
            continue
        if child.dep_ in _NP_STOP_DEPS and not (child.dep_ == "punct" and child.text in ("-", "/", "&")):
            continue
        modifier = child.i < token.i and child.dep_ in ("compound", "amod", "nmod", "poss", "nummod")
        if child.ent_type_ == "DATE" and token.ent_type_ != "DATE" and not modifier:
            continue
        out.extend(t for t in child.subtree if not (t.ent_type_ == "DATE" and token.ent_type_ != "DATE"
                                                    and not modifier)
                   and t.dep_ not in ("relcl", "punct") or t.text in ("-", "'s", "’s", "/", "&"))
    # "the Oban–Craignure route", "the AI/ML team": a dash or slash between the phrase's words is in it
    kept = {t.i for t in out}
    out += [token.doc[i] for i in range(min(kept), max(kept)) if i not in kept
            and token.doc[i].text in _JOINING_MARKS and i - 1 in kept and i + 1 in kept]
    # "flu jab uptake" with "jab" tagged an adverb: a word between the head and a modifier kept
    # before it is a modifier too
    out += [token.doc[i] for i in range(min(kept), token.i) if i not in kept and not token.doc[i].is_punct
            and token.doc[i].head.i == token.i and token.doc[i].dep_ == "advmod" and token.doc[i].pos_ != "PART"
            and token.doc[i].lower_ not in _NOT_PREMODIFIERS]
    return sorted(set(out), key=lambda t: t.i)


def _glued(token: Any) -> bool:
    """An object the parser split off the one before it with no space between ("eu", "-", "west-1"),
    or a name's second word it made an object of its own ("reports to Dominik Vesely")."""
    previous = token.doc[token.i - 1] if token.i > 0 else None
    return (previous is not None and token.dep_ == previous.dep_ == "pobj" and previous.head.i == token.head.i
            and (previous.whitespace_ == "" or previous.pos_ == token.pos_ == "PROPN"))


def _np_text(token: Any, keep: frozenset[str] = _NP_KEEP_PREPS) -> str:
    if token.pos_ == "NOUN" and token.lemma_.lower() in _ROLE_WORDS:
        named = next((c for c in token.children if c.dep_ == "appos" and c.pos_ == "PROPN"
                      and c.ent_type_ not in ("ORG", "GPE", "DATE")), None)
        if named is not None:  # "the country director, Samuel Otieno": the person named
            return _np_text(named)
    for child in token.children:  # "a small studio called Pixelmoor": the name
        if child.dep_ == "acl" and child.lemma_.lower() in ("call", "name"):
            named = next((c for c in child.children if c.dep_ in ("oprd", "attr", "dobj", "xcomp")), None)
            if named is not None:
                return _np_text(named)
    # "Grace's got 600 followers": the "'s" is the verb's ("has"), not the name's
    tokens = [t for t in _np_tokens(token, keep) if not (t.head.i == token.i and _contracted(t))]
    while tokens and (tokens[0].lower_ in _DETERMINERS or tokens[0].dep_ in ("det", "predet")) and len(tokens) > 1 \
            and tokens[0].lower_ != "no":  # "no customer" is nobody, not "customer"
        tokens = tokens[1:]
    # "Landlord Ms Petra Novak", "Tenant Mr Olu Bankole": a role said before the title is no part of it
    if role_before_title([t.text for t in tokens]):
        tokens = tokens[1:]
    # "Mrs Helen Carter", "Dr. Alan Pike": a title before a name is no part of the person's name
    while len(tokens) > 2 and tokens[0].lower_.rstrip(".") in HONORIFICS:
        rest = tokens[2:] if tokens[1].text == "." else tokens[1:]  # "Capt. Nils Johansson"
        if len(rest) < 2 or not (rest[0].text[:1].isupper() and rest[0].is_alpha):
            break
        tokens = rest
    # "p95 latency of the search API": articles inside a name say nothing either
    tokens = [t for i, t in enumerate(tokens) if not (i and t.lower_ in ("the", "a", "an") and t.dep_ == "det")]
    # "the internal tool Quasar", "our CRM system Hubbl": a kind noun before a name is no part of it
    kind = next((i for i in range(len(tokens) - 1, 0, -1) if tokens[i - 1].pos_ == "NOUN"
                 and tokens[i - 1].text.islower() and (tokens[i - 1].lemma_.lower() in _THING_HEADS | _KIND_NOUNS or (
                     tokens[i - 1].lemma_.lower() in _ROLE_BEFORE_NAME and len(tokens) - i >= 2))
                 and all(t.pos_ == "PROPN" and t.text.istitle() for t in tokens[i:])), None)
    if kind is not None and tokens[kind - 1].i + 1 == tokens[kind].i:
        tokens = tokens[kind:]
    # a word left out between two kept ones ("Engineer, Payments" without its comma) leaves a space
    text = "".join(t.text_with_ws if i + 1 == len(tokens) or tokens[i + 1].i == t.i + 1 else t.text + " "
                   for i, t in enumerate(tokens)).strip()
    return re.sub(r"\s+", " ", text).strip(" ,.;:")


_JOINING_MARKS = frozenset({"-", "–", "—", "/", "+"})


def _adjacent(first: Any, second: Any) -> bool:
    """Two phrases the parser split out of one: next to each other, or joined by a dash or
    slash ("the Leith–Kirkwall crossing")."""
    gap = second.left_edge.i - first.right_edge.i
    return gap == 1 or (gap == 2 and first.doc[first.right_edge.i + 1].text in _JOINING_MARKS)


def _conjuncts(token: Any) -> list[Any]:
    if _ampersand(token):
        return [token]  # "Byrne & Kells", "Hollis & Daughters": one firm's name
    return [token, *[c for c in token.conjuncts if c.i > token.i and not _set_aside(c)]]


def _set_aside(token: Any) -> bool:
    """"have used Rosterline instead of HealthRoster", "uses Cliniko rather than Jane": the
    alternative the sentence replaces, which the parser hangs as a conjunct (or as the object
    of an "of" the "instead" leads)."""
    doc, start = token.doc, token.left_edge.i
    return start > 1 and (doc[start - 2].lower_, doc[start - 1].lower_) in (("instead", "of"), ("rather", "than"))


def _sets_aside(prep: Any) -> bool:
    """An "of" whose object the sentence sets aside ("uses Cliniko instead of Jane")."""
    return prep.lower_ == "of" and any(_set_aside(o) for o in prep.children)


def _set_aside_of(head: Any) -> list[Any]:
    """What the clause of ``head`` replaces: "instead of X" after its object (see :func:`_set_aside`)."""
    found = []
    for token in head.subtree:
        if token.dep_ in ("conj", "pobj", "dobj") and _set_aside(token):
            verb = token.head  # the clause's verb (through "for rostering", a gerund the phrase holds)
            while (verb.pos_ not in ("VERB", "AUX") or verb.dep_ == "pcomp") and verb.head.i != verb.i:
                verb = verb.head
            if verb.i == head.i:
                found.append(token)
    return found


def _ampersand(token: Any) -> bool:
    return any(c.dep_ == "cc" and c.text == "&" for c in token.children)


def _nobody(token: Any) -> bool:
    """A subject that names no one and nothing: "none of them", "nobody", "no customer"."""
    return token.lower_ in ("none", "nobody", "nothing", "neither") or any(
        d.dep_ == "det" and d.lower_ == "no" for d in token.children)


def _is_person(token: Any) -> bool:
    return token.ent_type_ == "PERSON" or token.lower_ in ("i", "we", "he", "she", "they")


def _is_personish(token: Any) -> bool:
    """A person, or a proper name that is not a place, date or organisation word (the small
    pipeline tags many first names ORG)."""
    if _is_person(token):
        return True
    if any(ch.isdigit() for ch in token.text) or any(c.dep_ == "nummod" and c.i > token.i for c in token.children):
        return False  # "KR3", "P-202", "OKR 2.1": codes, not people
    if token.text.isupper() and len(token.text) > 1 and token.i > 0 and token.doc[token.i - 1].pos_ == "NOUN" \
            and token.doc[token.i - 1].text.islower():
        return False  # "the image CDN", "the payments API": an acronym a common noun qualifies is a thing
    if any(c.dep_ == "poss" and c.pos_ == "NOUN" for c in token.children):
        return False  # "the kiosk's spare POS": a thing's own thing
    # A capitalised common noun is a name the tagger missed, unless the capital is the
    # sentence's and the noun a plural ("Rehearsals moved …") or the noun is somebody's ("the
    # robot's control PC").
    proper = token.pos_ == "PROPN" or (
        token.text[:1].isupper() and token.pos_ == "NOUN" and not (token.is_sent_start and token.tag_ == "NNS")
        and not any(c.dep_ in ("det", "poss") for c in token.children))
    return proper and token.ent_type_ not in ("GPE", "LOC", "FAC", "DATE") and not any(
        t.lower_ in ORG_WORDS for t in token.subtree)


def _is_person_named(token: Any) -> bool:
    """Personish, and no word of the name says it is a team, project, service or other thing
    ("Project Juniper", "the Atlas service" are things; "Priya" is a person)."""
    return _is_personish(token) and not any(
        t.lemma_.lower() in _LED_HEADS | _GROUP_HEADS | _THING_HEADS for t in token.subtree)


def _is_bare_name(token: Any) -> bool:
    """A proper name without article, team or project word ("Brightwave", not "the design team")."""
    return token.pos_ == "PROPN" and not any(c.dep_ == "det" for c in token.children) and not any(
        t.lemma_.lower() in _LED_HEADS | _GROUP_HEADS for t in token.subtree)


def _named(token: Any) -> bool:
    """A proper name, or a common noun a name qualifies ("the Google sheet")."""
    return token.pos_ == "PROPN" or any(c.dep_ == "compound" and c.pos_ == "PROPN" for c in token.children)


def _is_place(token: Any) -> bool:
    return token.ent_type_ in ("GPE", "LOC", "FAC")


_STREET_HEADS = frozenset("road street lane avenue".split())  # what a thing is "on" ("on Station Road")
# nouns that name where a thing is kept or stands ("the site cabin", "room B012", "Hall 4")
_PLACE_HEADS = frozenset("""room building floor hall warehouse office site depot yard basement campus wing lab
laboratory store storeroom stockroom cupboard cabinet shelf locker shed garage centre center datacenter region
zone plant factory bay dock annex annexe attic vault hangar terminal quay wharf pier farm mill barn station port
harbour airport park clinic hospital library museum school church chapel cathedral premises""".split()) \
    | _STREET_HEADS


def _names_a_system(token: Any) -> bool:
    """A phrase whose head or a modifier before it is a system word ("the council tax portal",
    "Lantern CI"); not its relative clauses ("Piotr, who moves to the pricing team")."""
    return any(t.lemma_.lower() in _THING_HEADS for t in (token, *token.lefts))


def _is_locative(token: Any) -> bool:
    """A place by its words: a place noun, or a name compounded with one or with a place name."""
    return _is_place(token) or token.lemma_.lower() in _PLACE_HEADS or any(
        c.dep_ == "compound" and (c.lemma_.lower() in _PLACE_HEADS or _is_place(c)) for c in token.children)


def _is_org(token: Any) -> bool:
    if token.ent_type_ == "ORG":
        return True
    return any(t.lower_ in ORG_WORDS for t in token.subtree)


def _is_amount(token: Any) -> bool:
    """A number or amount, not a date ("35 USD", "12 percent", "40")."""
    return _is_valueish(token) and not _is_time(token) and token.ent_type_ not in ("DATE", "TIME")


_CLOCK_TIME = re.compile(r"\d{1,2}[:.]\d{2}")  # "10:30": a figure, which the small model may tag a time


def _is_valueish(token: Any) -> bool:
    """A number, amount or date: the token or its own modifiers (not its prepositional phrases)."""
    words = [token, *[c for c in token.children if c.dep_ in ("nummod", "quantmod", "compound", "amod", "nmod")]]
    words += [g for c in words[1:] for g in c.children if c.dep_ in ("nummod", "quantmod", "compound")]
    return any(t.like_num or t.ent_type_ in ("MONEY", "PERCENT", "QUANTITY", "CARDINAL", "DATE")
               or t.text in ("$", "€", "£", "%") or _CLOCK_TIME.fullmatch(t.text) for t in words)



# ------------------------------------------------------------------------- clause parts

@dataclass
class _Clause:
    head: Any
    verb: str
    subjects: list[Any]
    objects: list[Any]
    preps: dict[str, list[Any]]
    agent: Any | None
    passive: bool
    negated: bool
    no_longer: bool
    modal: str | None
    attr: Any | None
    acomp: Any | None
    oprd: Any | None
    xcomp: Any | None
    ccomp: Any | None
    conditional: bool


def _contrasted(prep: Any) -> bool:
    """"led by Keiko, not by Paul", "moved to Dublin, not to Paris": the alternative set aside,
    ", not" (or "and not", "but not") right before it, wherever the parser hung the "not" (on the
    phrase before, or on that phrase's object); "is not in London" negates the verb instead."""
    doc = prep.doc
    return any(c.dep_ == "neg" and c.i < prep.i for c in prep.children) or (
        prep.i > 1 and doc[prep.i - 1].lower_ == "not" and doc[prep.i - 2].lower_ in (",", "and", "but"))


def _prep_args(head: Any, into: dict[str, list[Any]], depth: int = 0) -> None:
    for child in head.children:
        if _contrasted(child) or _sets_aside(child):
            continue
        if child.dep_ in ("prep", "agent", "dative") and child.pos_ in ("ADP", "SCONJ") or child.dep_ == "prep":
            objects = [c for c in child.children if c.dep_ in ("pobj", "pcomp") and not _glued(c)]
            key = child.lower_
            # "as of", "ahead of": the second preposition carries the object
            for inner in child.children:
                if inner.dep_ == "prep" and inner.i == child.i + 1:
                    key = f"{child.lower_} {inner.lower_}"
                    objects += [c for c in inner.children if c.dep_ in ("pobj", "pcomp")]
                elif inner.dep_ == "prep" and depth < 2:  # "from 40,000 EUR to 25,000 EUR" hung under "from"
                    _prep_args(child, into, depth + 1)
            for obj in objects:
                into.setdefault(key, []).extend(_conjuncts(obj))
                if depth < 2:
                    _prep_args(obj, into, depth + 1)  # a "from A to B" the parser hung under an object
        elif child.dep_ in ("dobj", "attr", "pobj") and depth < 2 and depth > 0:
            _prep_args(child, into, depth + 1)
        elif child.dep_ == "advmod" and child.i == head.i + 1 and (
                child.lower_ in ("back", "forward", "out") and head.lemma_.lower() in ("push", "bring", "pull")
                or child.lower_ in ("up", "down") and head.lemma_.lower() in ("go", "come")):
            _prep_args(child, into, depth)  # "pushed back to 14 August": the particle carries "to"


def _clause(head: Any, inherited: list[Any]) -> _Clause:
    subjects: list[Any] = []
    objects: list[Any] = []
    preps: dict[str, list[Any]] = {}
    agent = attr = acomp = oprd = xcomp = ccomp = None
    passive = negated = no_longer = conditional = False
    modal = None
    particle = None
    particle_token: Any = None
    for child in head.children:
        dep = child.dep_
        if dep in ("nsubj", "nsubjpass", "csubj"):
            if subjects and subjects[-1].dep_ == dep and _adjacent(subjects[-1], child):
                subjects.pop()  # "the payments API" parsed as two subjects: one noun phrase
            subjects.extend(_conjuncts(child))
            passive = passive or dep == "nsubjpass"
        elif dep == "auxpass":
            passive = True
        elif dep in ("dobj", "dative") and child.pos_ != "ADP" and not _set_aside(child) and not any(
                d.dep_ == "det" and d.lower_ == "no" for d in child.children):  # "uses no parcels": none of it
            if objects and objects[-1].dep_ == "dobj" and objects[-1].right_edge.i + 1 == child.left_edge.i:
                objects.pop()  # two adjacent objects: one noun phrase the parser split
            objects.extend(_conjuncts(child))
        elif dep == "prt" or (dep == "advmod" and child.i == head.i + 1 and child.lower_ in _PARTICLES):
            particle = child.lower_
        elif dep == "advmod" and child.lower_ in ("back", "over") and any(
                o.dep_ == "dobj" and o.right_edge.i + 1 == child.i for o in head.children):
            # "took the depot back from Gosia": a particle after the object, its "from" its own
            particle, particle_token = child.lower_, child
        elif dep == "neg":
            negated = True
        elif dep == "advmod" and child.lower_ == "never":
            negated = True
        elif dep == "advmod" and child.lower_ in ("longer", "more") and any(c.lower_ in ("no", "any")
                                                                           for c in child.children):
            no_longer = True
        elif dep == "advmod" and child.lower_ == "anymore" and child.i > head.i:
            # "doesn't lead the squad anymore"; a "not anymore, I report to Ines now" before
            # the verb answers what was asked, and ends nothing of its own clause
            no_longer = True
        elif dep == "aux" and child.lower_ in ("will", "shall", "'ll", "wo"):
            modal = modal or "will"
        elif dep == "aux" and child.lemma_.lower() in _HYPO_AUX:
            modal = "hypothetical"
        elif dep == "aux" and child.lower_ in ("'d",):
            modal = "hypothetical"
        elif dep == "attr" and not child.is_punct:  # the full stop the parser hangs as a second attr
            attr = child
        elif dep == "acomp":
            acomp = child
        elif dep == "oprd":
            oprd = child
        elif dep == "xcomp":
            xcomp = child
        elif dep == "ccomp":
            ccomp = child
        elif dep == "agent" and not _contrasted(child):
            agent = next((c for c in child.children if c.dep_ == "pobj"), None)
        elif dep == "advcl" and any(m.lower_ in ("if", "unless", "provided", "assuming") for m in child.children
                                    if m.dep_ == "mark"):
            conditional = True
    if not objects and xcomp is not None and xcomp.tag_ == "VBG" and (
            head.lemma_.lower() in _GERUND_HOLDERS or xcomp.text[:1].isupper()) \
            and not any(c.dep_ in ("dobj", "aux", "nsubj") for c in xcomp.children):
        # "Grace leads fundraising": an activity named by a gerund; "uses Benchling for notebooks":
        # a capitalised name the small parser reads as one
        objects, xcomp = [xcomp], None
    if particle is None:
        # "took the vaccine fridge log over from me" parsed with "log" a verb (or a noun)
        # holding the particle: it is the head verb's (its "from" is read with the object)
        hung = next((p for o in objects if o.i > head.i for p in o.children
                     if p.dep_ in ("prt", "advmod") and p.lower_ in ("over", "back") and p.i == o.i + 1), None)
        if hung is not None:
            particle, particle_token = hung.lower_, hung
    _prep_args(head, preps)
    if particle_token is not None:
        _prep_args(particle_token, preps)
    off = next((c for c in head.children if c.lower_ == "off" and c.dep_ in ("prep", "prt")
                and not any(g.dep_ == "pobj" for g in c.children)), None)
    if off is not None and head.lemma_.lower() in _MOVE:
        # "bookings moved off the Google sheet to Clustermarket": the parser makes the sheet the
        # object (or an adverb) of "moved"; it is where the move starts
        left = next((c for c in head.children if c.dep_ in ("dobj", "npadvmod") and c.left_edge.i == off.i + 1), None)
        if left is not None:
            objects = [o for o in objects if o.i != left.i]
            preps.setdefault("from", []).insert(0, left)
            _prep_args(left, preps, 1)
            particle = None if particle == "off" else particle
    for obj in objects:
        _prep_args(obj, preps, 1)
    preps.pop("by", None) if agent is not None else None
    verb = head.lemma_.lower()
    if particle:
        verb = f"{verb} {particle}"
    if not subjects:
        subjects = inherited
    return _Clause(head, verb, subjects, objects, preps, agent, passive, negated, no_longer, modal, attr, acomp,
                   oprd, xcomp, ccomp, conditional)


def _first(preps: dict[str, list[Any]], *keys: str) -> Any | None:
    for key in keys:
        if preps.get(key):
            return preps[key][0]
    return None


def _non_time(tokens: list[Any] | None) -> Any | None:
    for token in tokens or ():
        if not _is_time(token):
            return token
    return None


def _date_text(token: Any) -> str:
    span = [t for t in token.subtree if t.dep_ != "punct"]
    doc = token.doc
    # a comma left out leaves its space ("27 March 2026, not 20 March")
    text = "".join(t.text + " " if t.i + 1 < len(doc) and doc[t.i + 1].text in (",", ";") else t.text_with_ws
                   for t in span)
    return re.sub(r"\s+", " ", text).strip(" ,.;")


# ------------------------------------------------------------------------- reading


def _without_leading_time(text: str) -> str:
    """"On 6 April 2026 Priya replaced Tom …" → "Priya replaced Tom …": the claim carries
    the window already, and the small parser often hangs a leading date on the subject."""
    for expression in timeparse.find_time_expressions(text, None):
        if expression.start == 0 or (expression.start <= 12 and re.match(
                r"^(?:effective|starting|beginning|as of|from|since|until|as from|earlier|later)\s*$",
                text[:expression.start], re.IGNORECASE)):
            rest = text[expression.end:].lstrip(" ,")
            if len(rest.split()) >= 2:
                return rest[:1].upper() + rest[1:]
    return text


_TIME_PREPOSITION = re.compile(r"(?:on|in|at|during|for|since|from|as of|until|till|through|by)\s", re.IGNORECASE)


def _without_trailing_time(text: str) -> str:
    """"37 on 12 October 2026" → "37", "Covers booked on 1 December 2026" → "Covers booked": a
    time phrase closing a field's name or value is when it held (the claim's window), not
    part of what is measured. A bare date ("deadline: 21 April 2026") is the value itself."""
    for expression in reversed(timeparse.find_time_expressions(text, None)):
        rest = text[:expression.start].rstrip(" ,")
        if (text[expression.end:].strip(" .;,") or not rest
                or not (expression.deictic or _TIME_PREPOSITION.match(text, expression.start))):
            break
        text = rest
    return text


# ", because the surface car park is needed for …": why a sentence's state holds is no part of
# it, and the small parser often loses the main verb to a long reason clause
_REASON_TAIL = re.compile(r",\s+(?:because|due to|so that|in order to)\s[^;]*$",
                          re.IGNORECASE)


# "Capt. Nils Johansson": a title's full stop is not the end of the sentence
_TITLE_STOP = re.compile(rf"\b({'|'.join(t.capitalize() for t in sorted(ABBREVIATED_TITLES))})\.(?=\s+[A-Z])")


@lru_cache(maxsize=8192)
def prepared(text: str) -> str:
    """The text the parser reads for a claim (see :func:`read`)."""
    text = _TITLE_STOP.sub(r"\1", _without_leading_time(_without_prefix(text)[0]))
    reason = _REASON_TAIL.search(text)
    if reason is not None and len(text[:reason.start()].split()) >= 4:
        text = text[:reason.start()] + "."
    return text


_DISCOURSE_PREFIX = re.compile(r"^\s*(?:(?P<correction>correction|corrected|erratum)|update|note|fyi|reminder|context"
                               r"|heads[- ]up|psa|btw)"
                               r"(?:\s+(?:to|on|from|for)\s+[^:]{1,60})?\s*:\s+(?=\S)", re.IGNORECASE)


def _with_prefix_of(text: str, clause: str) -> str:
    """``clause`` under the correction frame ``text`` opens with, if any ("Correction: …")."""
    match = _DISCOURSE_PREFIX.match(text)
    return f"{match.group(0)}{clause}" if match is not None and match.group("correction") else clause


def _without_prefix(text: str) -> tuple[str, bool]:
    """"Correction to last week's notes: X" → ("X", True); "Update: X" → ("X", False)."""
    match = _DISCOURSE_PREFIX.match(text)
    if match is None:
        return text, False
    rest = text[match.end():]
    return rest[:1].upper() + rest[1:], bool(match.group("correction"))


_FIGURE_COMMENT = re.compile(r"^(\D{0,3}\d[\d.,]*(?:\s+[^,\s]+){0,3}?),\s+(?=[a-z]).*$")
_KEY_VALUE = re.compile(r"^\s*(?P<name>[A-Za-z][\w '’/&()-]{1,60}?)\s*:\s+(?P<value>[^:]*?\d[^:]*?)\s*[.;]?\s*$")


_STATED_START = re.compile(r"^\s*(?:starting|effective|beginning|as of|as from|from)\s+(?:on\s+)?"
                           rf"(?:{timeparse.WEEKDAY_WORD},?\s+)?"
                           r"(?:\d|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b|q[1-4]\b|next\b)",
                           re.IGNORECASE)


_CLAUSE_VERB = re.compile(r"\b(?:is|are|was|were|has|have|had|will|remains?|stays?|stands?)\b", re.IGNORECASE)


# Parts of speech that never begin a name: "But Grace wants …", "Then Aiko and Dev …",
# "So LockUp is …", "How's the …", "That's …" (a capitalised run the surface takes for a name).
_NOT_NAME_POS = frozenset("CCONJ SCONJ ADV INTJ PRON DET AUX PART ADP".split())


def _contracted(token: Any) -> bool:
    """An "'s" that stands for "is" or "has" ("Kemi's doing Thursdays", "Grace's got 600
    followers"), which the small model often tags a possessive."""
    if token.lower_ not in ("'s", "’s"):
        return False
    if token.pos_ == "AUX" or token.tag_ == "VBZ":
        return True
    following = token.doc[token.i + 1] if token.i + 1 < len(token.doc) else None
    return (following is not None and token.head.dep_ != "poss"
            and (following.tag_ in ("VBG", "VBN") or following.lower_ in ("got", "been", "gone")))


def name_at(text: str, start: int, end: int) -> str | None:
    """The name the parse of ``text`` reads in ``text[start:end]``, a capitalised run found by
    its surface: without the words before it that no name begins with ("But Grace", "Then
    Aiko"), and without an "'s" that makes it a possessor ("Grace's sister") or stands for
    "is"/"has" ("Grace's got"); a name that is itself possessive stays whole ("St Luke's has
    offered"). None when nothing of it is a name ("How's", "That's", a common noun that only
    begins a sentence)."""
    tokens = [t for t in nlp.parse(text) if start <= t.idx and t.idx + len(t.text) <= end]
    while tokens and tokens[0].pos_ in _NOT_NAME_POS:
        tokens = tokens[1:]
    if tokens and tokens[0].is_sent_start and not any(t.pos_ == "PROPN" for t in tokens):
        return None  # capitalised only as a sentence's first word: "Congratulations, …", "Cycle storage …"
    if len(tokens) > 1 and tokens[-1].lower_ in ("'s", "’s") and (
            _contracted(tokens[-1]) or tokens[-1].head.dep_ == "poss"):
        tokens = tokens[:-1]
    if not tokens:
        return None
    return text[tokens[0].idx:tokens[-1].idx + len(tokens[-1].text)]


def is_pronoun(text: str) -> bool:
    """Is ``text`` (a subject the parse read) a pronoun: "That", "it", "What"?"""
    tokens = [t for t in nlp.parse(text) if not t.is_punct]
    return len(tokens) == 1 and (tokens[0].pos_ == "PRON" or tokens[0].lower_ in _PRONOUNS | _RELATIVE_WORDS)


def is_person_name(text: str) -> bool:
    """Is ``text`` ("Petra Holub") a person's full name, as far as its words say: proper nouns
    that name no place, organisation, team or thing (the small model tags many names ORG)?"""
    doc = nlp.parse(text)
    return 2 <= len(doc) <= 4 and all(t.pos_ == "PROPN" and _is_person_named(t) for t in doc)


def opens_with_a_noun(text: str) -> bool:
    """Does ``text`` begin (after any determiner) with a word a noun phrase can begin with? Not
    "Already did.", "Bought the boots!", "Three days early.", "Above 50,000 messages, scale …"."""
    first = next((t for t in nlp.parse(text) if t.pos_ != "DET" and not t.is_punct), None)
    if first is not None and first.pos_ == "VERB":  # "Visiting hours: …": a verb that modifies a noun
        return first.dep_ in ("amod", "compound") and first.head.pos_ in ("NOUN", "PROPN")
    return first is not None and first.pos_ not in _NOT_NAME_POS | {"NUM"}


def is_key_value(text: str) -> bool:
    """"Authorisation rate: 94.1 percent": a named value written as a label and a number."""
    return _KEY_VALUE.match(text) is not None


_ASKING_TAGS = frozenset({"WP", "WRB", "WDT"})


def _asks(sentence: Any) -> bool:
    """A question written without its question mark, as chat often is: an auxiliary before its
    subject ("Does that mean Tom is fast now.", "Is that the one from the garden centre", "Can
    Lena take the rota") with a verb that can follow it ("Will Turner joined the board" is a
    name), or a question word before an auxiliary ("What will Tom be doing there.", "How's the
    knee."). Not "Should be fine by Friday." (no subject) nor "What we need is a van"."""
    words = [t for t in sentence if not t.is_punct]
    if len(words) < 2 or words[0].pos_ != "AUX" and words[0].tag_ not in _ASKING_TAGS:
        return False
    if words[0].tag_ in _ASKING_TAGS:
        return words[1].pos_ == "AUX"
    second = words[1]
    inverted = any(t.dep_ in ("nsubj", "nsubjpass", "expl") and t.left_edge.i == second.i for t in sentence)
    root = sentence.root
    return inverted and (root.i == words[0].i or root.tag_ in ("VB", "VBN", "VBG") or root.pos_ == "AUX")


def read(text: str) -> list[Reading]:
    """The readings of one claim text, in order."""
    key_value = _KEY_VALUE.match(text)
    if key_value is not None and _CLAUSE_VERB.search(key_value.group("value")) \
            and len(key_value.group("value").split()) >= 3 and _DISCOURSE_PREFIX.match(text) is None \
            and not _CORRECTION_WORDS.search(key_value.group("name")):
        # "Treasurer's report: unrestricted reserves are 86,000 GBP": a source's label before a
        # statement, not a field
        value = key_value.group("value").strip()
        return read(value[:1].upper() + value[1:])
    # "11 (7 civils, 4 sparkies)", "0.6 bar (normal 1.0-1.5 bar)": an aside after the value is no part of it
    value = re.sub(r"\s*\([^()]*\)", "", key_value.group("value")).strip() if key_value is not None else ""
    value = _FIGURE_COMMENT.sub(r"\1", value)  # "184, our best Saturday so far": the figure
    if key_value is not None and value and len(value.split()) <= 6 and re.search(r"\d", value):
        name = _without_trailing_time(key_value.group("name").strip())
        return [_attr(name[:1].upper() + name[1:], None, _without_trailing_time(value), "none", text, state=False)]
    parts = [c.strip() for c in re.split(r";\s+", text)]
    if len(parts) > 1 and all(len(c.split()) >= 3 for c in parts):
        # "March MRR was 178,500 USD, not 182,000 USD; the earlier figure double-counted an
        # invoice": clauses a semicolon joins are read apart (the parser hangs the second on
        # the first's value), the first keeping the prefix that frames them
        return [r for c in (parts[0], *(_with_prefix_of(text, c) for c in parts[1:])) for r in read(c)]
    corrected = _without_prefix(text)[1]
    # "Starting 1 June, Carmen will manage the desk": a state with a stated start, not a plan
    starts = bool(_STATED_START.match(_without_prefix(text)[0]))
    text = prepared(text)
    doc = nlp.parse(text)
    repaired = _verb_read_as_noun(text, doc)
    if repaired is not None:
        text, doc = repaired, nlp.parse(repaired)
    compound = _noun_read_as_verb(text, doc) if repaired is None else None
    if compound is not None:
        text, doc = compound[0], nlp.parse(compound[0])
    out: list[Reading] = []
    correction = corrected or bool(_CORRECTION_WORDS.search(text))
    for sentence in doc.sents:
        if sentence.text.rstrip(" \"'”)*_").endswith("?") or _asks(sentence):
            out.append(Reading("nonfact", mood="question", label=sentence.text.strip()))
            continue
        root = sentence.root
        garden = _garden_path_copula(sentence)
        if garden is not None:
            out.append(garden)
            continue
        heads = [root, *[c for c in root.children if c.dep_ == "conj" and c.pos_ in ("VERB", "AUX")]]
        # "joined the audit squad and reports to Idris": a second verb the parser hangs on the object
        heads += [c for o in root.children if o.dep_ in ("dobj", "attr") for c in o.children
                  if c.dep_ == "conj" and c.pos_ == "VERB" and c.tag_ in ("VBZ", "VBD", "VBP")
                  and not any(s.dep_.startswith("nsubj") for s in c.children)]
        # "…, having moved to the Anglia programme that day": a perfect participle says what the
        # subject did
        heads += [c for c in root.children if c.dep_ == "advcl" and c.tag_ == "VBN"
                  and any(a.dep_ == "aux" and a.lower_ == "having" for a in c.children)
                  and not any(s.dep_.startswith("nsubj") for s in c.children)]
        # "is on the netcode team now, reporting to Ayesha": a participle of a standing relation
        # after a comma says what the subject does too
        standing = [c for c in root.children if c.dep_ == "advcl" and c.tag_ == "VBG" and c.i > root.i
                    and c.lemma_.lower() in _STANDING_PARTICIPLES and c.left_edge.i > sentence.start
                    and c.doc[c.left_edge.i - 1].text == ","
                    and not any(s.dep_.startswith("nsubj") for s in c.children)]
        heads += standing
        # "Eva owns the budget, so she will check": a clause of its own, with its own subject
        heads += [c for c in root.children if c.dep_ == "advcl" and c.pos_ in ("VERB", "AUX")
                  and any(s.dep_ in ("nsubj", "nsubjpass") for s in c.children)
                  and not any(m.dep_ == "mark" and m.lower_ in ("if", "unless", "when", "once", "until", "before",
                                                                  "after", "because", "although", "though")
                              for m in c.children)]
        # "Eva owns the budget, so Eva will check": the small parser hangs the first clause under
        # the second as its complement; before a verb that does not report or think, it is a
        # clause of its own
        heads += [c for c in root.children if c.dep_ == "ccomp" and c.i < root.i and c.pos_ == "VERB"
                  and root.lemma_.lower() not in _SAY | _THINK
                  and any(s.dep_ in ("nsubj", "nsubjpass") for s in c.children)
                  and any(t.is_punct for t in sentence[c.right_edge.i - sentence.start + 1:root.i - sentence.start])]
        hedged_heads = _hedged_heads(sentence)
        inherited: list[Any] = []
        complement = next((c for c in root.children if c.dep_ == "xcomp" and c.pos_ == "VERB"), None) \
            if root.lemma_.lower() in _ASPECTUAL and not any(c.dep_ == "neg" for c in root.children) else None
        if complement is not None:
            # "Jonas Ek continues to work on the matter and reports to Helena": what continues holds
            heads = [complement, *[c for c in complement.children if c.dep_ == "conj" and c.pos_ in ("VERB", "AUX")],
                     *heads[1:]]
            inherited = _clause(root, []).subjects
        participle = next((c for c in root.children if c.dep_ == "acl" and c.i == root.i + 1 and (
                           c.tag_ == "VBD" and c.lemma_.lower() in _VERB_LEXICON
                           or c.tag_ == "VBN" and c.lemma_.lower() in _MOVE)
                           and not any(s.dep_.startswith("nsubj") for s in c.children)), None) \
            if root.pos_ in ("NOUN", "PROPN") and not any(t.pos_ == "AUX" for t in sentence) else None
        if participle is not None:
            # "Our Berlin warehouse relocated to Potsdam in August": a past verb of the
            # vocabulary the parser hung on the noun before it, leaving a sentence without a verb
            heads, inherited = [participle], [root]
        extra: list[Reading] = []
        formers: dict[tuple[str | None, str | None], str | None] = {}
        clauses = [c for c in sentence if c.dep_ == "relcl"]
        conjuncts = [_span(sentence, h) for h in heads if h.dep_ == "conj" and h.head.i == root.i]
        # where the sentence's dates start, read once for the clauses that may not own them
        dates = [e.start for e in timeparse.find_time_expressions(sentence.text, None)] \
            if clauses or conjuncts or any(h.dep_ == "advcl" for h in heads) else []
        relative = [_span(sentence, c) for c in clauses if c.left_edge.lower_ in _RELATIVE_WORDS]
        # "Kim, who joined in 2023, now leads X": a date only a relative clause has is that
        # clause's time, not the main clause's (and a date only the main clause has is not the
        # relative clause's); "is owned by Colm and was last revised in May 2026": a date only a
        # later conjunct has is that conjunct's (one of the first verb carries on to the later
        # ones: "approved the funding on 11 May, so Project Wren is active again")
        main_undated = _all_within(dates, relative)
        root_undated = _all_within(dates, conjuncts)
        for token in sentence:
            # "Nina Brandt, the owner of the invoicing job, …": an apposition names a role
            if token.dep_ == "appos" and _is_personish(token.head):
                role = _role(token)
                if role is not None and role[0] in ("part_of", "member_of"):
                    role = _member_role(token) or role
                if role is not None:
                    new = any(a.dep_ == "amod" and a.lower_ == "new" for a in token.children)
                    extra.append(Reading("relation", subject=_np_text(token.head), predicate=role[0],
                                         object=role[1], change="succession" if new else "none",
                                         label=sentence.text.strip()))
            # "moves to the investigations unit, where he reports to Carmen": a clause with its own subject
            if token.dep_ == "relcl" and token.pos_ in ("VERB", "AUX") and any(
                    c.dep_ == "advmod" and c.lower_ in ("where", "when") for c in token.children) and any(
                    c.dep_ in ("nsubj", "nsubjpass") and c.lower_ not in _RELATIVE_WORDS for c in token.children):
                extra.extend(r for r in _read_clause(_clause(token, []), sentence) if r.kind == "relation")
            # "Monika Weiss, who led sales since 2023, …": a relative clause about its noun
            if token.dep_ == "relcl" and token.pos_ in ("VERB", "AUX") and any(
                    c.dep_ in ("nsubj", "nsubjpass") and c.lower_ in ("who", "which", "that") for c in token.children):
                undated = bool(dates) and not _starts_in(dates, _span(sentence, token))
                relative_clause = _clause(token, [token.head])
                first = token.head
                while first.dep_ == "conj" and first.head.i != first.i:
                    first = first.head
                # "Piotr, who moves to …": Piotr moves; "welcome Aditi and Malik, who joined …": both did
                members = _conjuncts(first) if first is not token.head and token.head in _conjuncts(first) \
                    else [token.head]
                if relative_clause.subjects and all(s.lower_ in _RELATIVE_WORDS for s in relative_clause.subjects):
                    relative_clause.subjects = members
                if any(t.dep_ == "advmod" and t.lower_ in _FORMERLY for t in token.children):
                    # "the cluster, which was previously hosted in Virginia, was moved to …": what
                    # the main clause's change starts from
                    formers.update(((r.subject, r.predicate), r.object) for r in
                                   _read_clause(relative_clause, sentence, former=True) if r.kind == "relation")
                    continue
                for reading in _read_clause(relative_clause, sentence):
                    if reading.kind == "relation":
                        # "the team, which is led by Omar": in a passive clause the noun is the object
                        subject = reading.subject if relative_clause.passive or len(members) > 1 \
                            else _np_text(token.head)
                        features = {**reading.features, "relative": True, **({"undated": True} if undated else {})}
                        extra.append(_replace(reading, subject=subject, features=features))
            # "the Saltmarsh Quay site, which Declan Shea manages": the noun is the clause's object
            if token.dep_ == "relcl" and token.pos_ == "VERB" and any(
                    c.dep_ == "dobj" and c.lower_ in ("which", "that", "whom") for c in token.children) and any(
                    c.dep_ == "nsubj" and c.lower_ not in _RELATIVE_WORDS | _PRONOUNS for c in token.children):
                relative_clause = _clause(token, [])
                relative_clause.objects = [token.head]
                extra.extend(r for r in _read_clause(relative_clause, sentence) if r.kind == "relation")
        for head in heads:
            clause = _clause(head, inherited)
            inherited = clause.subjects
            if clause.modal == "will" and (starts and head is root or _starts_on(clause)):
                clause.modal = None  # "Yara will lead the group from 1 May": a state with a stated start
            main = _read_clause(clause, sentence)
            if starts and head is root:
                # "From 1 May the seat price is 14 EUR": a value with a stated start is a change then
                main = [_replace(r, change="succession") if r.kind == "attribute" and r.change == "none" else r
                        for r in main]
            replaced = _replaced_holder(head)
            if replaced is not None:
                # "has managed the inventory since 1 September, replacing Marco Bellini"
                main = [_replace(r, change="succession", previous_holder=replaced)
                        if r.kind == "relation" and r.previous_holder is None and r.change in ("none", "succession")
                        else r
                        for r in main]
            if main_undated or (head is root and root_undated) or (head.dep_ == "advcl" and head.tag_ == "VBN"
                                                                   and not _dated_within(sentence, head, dates)) \
                    or _another_subjects_undated_clause(sentence, root, head, dates):
                main = [_replace(r, features={**r.features, "undated": True}) for r in main]
            main = [_replace(r, hedged=True) for r in main] if head in hedged_heads else main
            if head in standing:  # "joined the data team in May, reporting to Li": from then on
                main = [_replace(r, change="succession") if r.kind == "relation" and r.change == "none" else r
                        for r in main]
            successor = _elliptical_holder(clause)
            if successor is not None:  # it may only name who holds what an end let go (facts.py)
                holder, of = successor
                main = [_replace(r, features={**r.features, "holder": holder, "holder_of": of}) for r in main]
            aside = _set_aside_of(head)
            if aside:
                # "since 16 November the wards have used Rosterline instead of HealthRoster": a
                # change from the alternative set aside, which is no fact of its own
                main = [_replace(r, change="succession", previous=_np_text(aside[0]))
                        if r.kind == "relation" and r.previous is None and r.change in ("none", "succession") else r
                        for r in main]
            for reading in [*main, *extra]:
                former = formers.get((reading.subject, reading.predicate))
                if former and reading.kind == "relation" and reading.previous is None \
                        and reading.change == "succession" and former != reading.object:
                    reading = _replace(reading, previous=former)
                if correction and reading.change == "none" and reading.kind in ("relation", "attribute"):
                    reading = _replace(reading, change="correction")
                out.append(reading)
            extra = []
    return out if compound is None else [_unhyphenated(r, compound[1], compound[2]) for r in out]


def _span(sentence: Any, head: Any) -> tuple[int, int]:
    """Where ``head``'s phrase lies in its sentence's text."""
    return head.left_edge.idx - sentence.start_char, head.right_edge.idx + len(head.right_edge) - sentence.start_char


def _starts_in(dates: list[int], span: tuple[int, int]) -> bool:
    return any(span[0] <= d < span[1] for d in dates)


def _all_within(dates: list[int], spans: list[tuple[int, int]]) -> bool:
    """Whether the sentence has dates and every one of them starts inside one of ``spans``."""
    return bool(dates) and bool(spans) and all(any(_starts_in([d], span) for span in spans) for d in dates)


def _another_subjects_undated_clause(sentence: Any, root: Any, head: Any, dates: list[int]) -> bool:
    """"X has managed the store since 2024, and Dean reports to her": a clause joined by "and"
    or "but" with a subject of its own and no date of its own does not take the first one's
    (one joined by "so" or "then" follows from it, at its time)."""
    if head is root or head.dep_ != "conj" or head.head.i != root.i or not dates:
        return False
    if _dated_within(sentence, head, dates):
        return False
    subject = next((c for c in head.children if c.dep_ in ("nsubj", "nsubjpass")), None)
    if subject is None or subject.lower_ in _RELATIVE_WORDS:
        return False
    between = sentence.doc[max(root.i, subject.left_edge.i - 3):subject.left_edge.i]
    return not any(t.lower_ in ("so", "then", "thus", "therefore", "hence", "consequently") for t in between)


def _dated_within(sentence: Any, head: Any, dates: list[int]) -> bool:
    """Whether a date is said inside ``head``'s own phrase ("having moved … that day"): a
    perfect participle's event comes before the main clause's, so it never takes that one's."""
    a, b = _span(sentence, head)
    if timeparse.SAME_DAY_RE.search(sentence.text[a:b]):
        return True  # "… that day": the main clause's date, said again
    return _starts_in(dates, (a, b))


def _elliptical_holder(c: _Clause) -> tuple[str, str | None] | None:
    """The name an elliptical clause gives as a holder, and of what when it says so: "it's
    Beatriz now", "that is Bo", "Bo does now" (of what: None), "the DNS config is Beatriz
    now" ("DNS config"). No object, no negation, no modal; the holder is a proper name."""
    if c.negated or c.objects or c.modal or len(c.subjects) != 1:
        return None
    subject = c.subjects[0]
    named = [t for t in (c.attr, subject) if t is not None]
    if any(t.ent_type_ in ("DATE", "TIME", "CARDINAL", "MONEY", "PERCENT", "QUANTITY") for t in named):
        return None  # "it is Monday now"
    lemma = c.head.lemma_.lower()
    pronoun = subject.lower_ in ("it", "that", "this")
    if lemma == "be" and c.attr is not None and c.attr.pos_ == "PROPN":
        if pronoun:
            return _np_text(c.attr), None
        if any(d.dep_ in ("det", "poss") for d in subject.children):  # "the DNS config is Beatriz now"
            return _np_text(c.attr), _np_text(subject)
        return None
    if lemma in ("do", "be", "have") and c.attr is None and c.acomp is None and subject.pos_ == "PROPN" \
            and not pronoun:
        return _np_text(subject), None
    return None


_CONTRAST = frozenset(("but", "though", "although", "however", "yet"))


def _hedged_heads(sentence: Any) -> set[Any]:
    """The verbs a hedge qualifies: "Maybe Victor leads the review" (maybe -> leads), "Ana
    seems to own it" (seems -> own). A hedge that answers what was said before ("maybe, but
    the scheduler is owned by data ops") qualifies nothing of its own sentence."""
    heads: set[Any] = set()
    for t in sentence:
        seems = t.lemma_.lower() in ("seem", "appear") and any(c.dep_ == "xcomp" for c in t.children)
        if t.lower_ not in _HEDGES and not seems:
            continue
        if seems:
            heads.add(t)
            heads.update(c for c in t.children if c.dep_ == "xcomp")
            continue
        governor = t.head
        while governor.pos_ not in ("VERB", "AUX") and governor.head.i != governor.i:
            governor = governor.head
        if t.i < governor.i and any(n.lower_ in _CONTRAST for n in t.doc[t.i + 1:governor.i]):
            continue  # "likely so, but Bo owns it": the hedge answers what was said before
        heads.add(governor)
        heads.update(c for c in governor.children if c.dep_ == "xcomp")
    return heads


def _starts_on(c: _Clause) -> bool:
    """The clause states when its state starts: "from 1 May 2026", "starting next Monday"."""
    return any(_is_time(o) and any(ch.like_num for ch in o.subtree)
               for key in ("from", "starting", "as of", "effective") for o in c.preps.get(key) or ())


def _garden_path_copula(sentence: Any) -> Reading | None:
    """"The minimum supported iOS version is 16": the small parser takes the participle for the
    main verb and hangs the copula under it without a subject. Then the copula is the main
    verb, everything before it its subject, and a value after it the attribute's value."""
    root = sentence.root
    if root.tag_ != "VBD" or any(c.dep_.startswith("nsubj") and c.i > root.i for c in root.children):
        return None
    copula = next((c for c in root.children if c.lemma_ == "be" and c.pos_ == "AUX" and c.dep_ in ("ccomp", "conj")
                   and c.i > root.i and not any(s.dep_.startswith("nsubj") for s in c.children)), None)
    value = next((c for c in copula.children if c.dep_ in ("attr", "acomp")), None) if copula is not None else None
    if copula is None or value is None or not _is_valueish(value):
        return None
    words = [t for t in sentence if t.i < copula.i and not t.is_punct]
    while words and words[0].lower_ in _DETERMINERS:
        words = words[1:]
    if not words or any(t.dep_ == "cc" or t.lower_ in _PRONOUNS for t in words):
        return None
    name = " ".join(t.text for t in words)
    return _attr(name, None, _value_of(value), "none", sentence.text.strip(), state=True)


def is_prepositional_verb(word: str, following: str) -> bool:
    """Whether a word and the one after it are one of the vocabulary's verbs with its
    preposition ("report to", "work on"), whatever the tagger made of the word."""
    return (word, following) in _PREP_VERB_PREDICATES


def _verb_read_as_noun(text: str, doc: Any) -> str | None:
    """The small pipeline tags a present-tense verb after a noun compound as a plural noun ("the
    search API runs in Frankfurt", "the price increases from …") and leaves the sentence without a
    verb. When a verbless sentence has such a word whose lemma is one of the vocabulary's verbs,
    the text is read again with the verb made unmistakable ("… does run in …"), same tense."""
    for sentence in doc.sents:
        root = sentence.root
        if root.tag_ == "VBZ" and not any(c.dep_.startswith("nsubj") for c in root.children) and any(
                c.dep_ == "compound" and c.i < root.i for c in root.children):
            # the same error tagged the other way: "runs" a verb whose subject became its compound
            return f"{text[:root.idx]}does {root.lemma_.lower()}{text[root.idx + len(root.text):]}"
        verb = next((c for c in root.children if c.dep_ == "dobj" and c.tag_ == "VBZ" and c.i == root.i + 1
                     and c.lemma_.lower() in _VERB_LEXICON and root.tag_ in ("VBP", "VB")), None)
        if verb is not None:  # "the metrics stack runs on …": "stack" taken for the verb, "runs" its object
            return f"{text[:verb.idx]}does {verb.lemma_.lower()}{text[verb.idx + len(verb.text):]}"
        for t in sentence:
            if (root.pos_ in ("VERB", "AUX") and t.tag_ == "NNS" and t.dep_ == "conj" and t.lemma_.lower() in
                    _VERB_LEXICON and doc[t.i - 1].lower_ in ("and", "but") and t.i + 1 < sentence.end
                    and doc[t.i + 1].pos_ in ("ADP", "DET") and t.head.dep_ in ("dobj", "pobj", "attr")):
                # "joined the combat team and reports to Viktor": a second verb read as a plural noun
                return f"{text[:t.idx]}does {t.lemma_.lower()}{text[t.idx + len(t.text):]}"
        if root.pos_ in ("VERB", "AUX") or any(t.pos_ == "AUX" for t in sentence):
            continue
        for t in sentence:
            if (t.tag_ == "NNS" and t.lemma_.lower() in _VERB_LEXICON and t.i > sentence.start
                    and doc[t.i - 1].pos_ in ("NOUN", "PROPN") and t.i + 1 < sentence.end
                    and doc[t.i + 1].pos_ in ("ADP", "DET", "NUM", "ADV", "PART", "PROPN")):
                return f"{text[:t.idx]}does {t.lemma_.lower()}{text[t.idx + len(t.text):]}"
            if (t.tag_ == "NN" and t.i > sentence.start and doc[t.i - 1].pos_ in ("NOUN", "PROPN")
                    and t.i + 1 < sentence.end and is_prepositional_verb(t.lower_, doc[t.i + 1].lower_)):
                # "ski school staff report to Heike": a plural's verb read as the compound's head
                return f"{text[:t.idx]}do {t.lower_}{text[t.idx + len(t.text):]}"
    return None


def _replaced_holder(head: Any) -> str | None:
    """The person a participle says the clause's subject replaced ("…, replacing Marco")."""
    for child in head.children:
        if child.dep_ == "advcl" and child.tag_ == "VBG" and child.lemma_.lower() in _SUCCEED:
            target = next((o for o in child.children if o.dep_ == "dobj"), None)
            if target is not None and _is_personish(target):
                return _np_text(target)
    return None


def _noun_read_as_verb(text: str, doc: Any) -> tuple[str, str, str] | None:
    """The other garden path: "the building permits service is run by …" read with "permits" a
    verb whose subject is "building" and object "service", before the sentence's own verb. The
    text is read again with the two nouns hyphenated (then one compound), and the readings
    get the words back as written: (repaired text, hyphenated, original)."""
    for sentence in doc.sents:
        for t in sentence:
            before = doc[t.i - 1] if t.i > sentence.start else None
            after = doc[t.i + 1] if t.i + 1 < sentence.end else None
            if (t.tag_ == "VBZ" and before is not None and after is not None and before.pos_ == "NOUN"
                    and before.dep_ == "nsubj" and before.head.i == t.i and after.pos_ == "NOUN"
                    and after.head.i == t.i and (before.i == sentence.start or doc[before.i - 1].pos_ == "DET")
                    and any(v.i > after.i and (v.pos_ == "AUX" or v.tag_ in ("VBZ", "VBD", "VBP", "MD"))
                            for v in sentence)):
                original = text[before.idx:t.idx + len(t.text)]
                hyphenated = f"{before.text}-{t.text}"
                return f"{text[:before.idx]}{hyphenated}{text[t.idx + len(t.text):]}", hyphenated, original
    return None


def _unhyphenated(reading: Reading, hyphenated: str, original: str) -> Reading:
    def back(value: str | None) -> str | None:
        return value.replace(hyphenated, original) if value else value

    return _replace(reading, subject=back(reading.subject), object=back(reading.object),
                    attribute=back(reading.attribute), value=back(reading.value), previous=back(reading.previous),
                    previous_holder=back(reading.previous_holder), label=back(reading.label) or "")


def _replace(reading: Reading, **changes: object) -> Reading:
    values = {**reading.__dict__, **changes}
    return Reading(**values)  # type: ignore[arg-type]


def _read_clause(c: _Clause, sentence: Any, *, former: bool = False) -> list[Reading]:
    """The readings of one clause; ``former``: a clause marked "previously" read as the state it
    says held before (its relations are the previous objects of the sentence's change)."""
    text = re.sub(r"\s+", " ", sentence.text).strip()
    verb = c.verb
    base = c.head.lemma_.lower()
    if c.conditional or c.modal == "hypothetical":
        return [Reading("nonfact", mood="hypothetical", label=text)]
    if not c.subjects and c.head.tag_ == "VB" and c.head.dep_ == "ROOT" and all(
            t.lower_ in ("please", "do", "don't", "not", "n't", "never", "always", "just") or t.is_punct
            for t in c.head.doc[c.head.sent.start:c.head.i]):
        return [Reading("nonfact", mood="advice", label=text)]  # "Please do not book conferences …"
    # "The Committee noted that the shop is run by …": a verb that takes its complement as
    # known states the complement (minutes and reports record facts this way)
    if c.subjects and base in _FACTIVE and c.ccomp is not None and not c.negated and c.modal is None \
            and any(t.dep_ in ("nsubj", "nsubjpass") for t in c.ccomp.children):
        return _read_clause(_clause(c.ccomp, []), sentence, former=former)
    # "X said (that) ...": the holder's stance
    if c.subjects and (base in _SAY and (c.ccomp is not None or c.xcomp is not None)
                       or base in _SPEECH_ONLY and c.objects):
        return [Reading("reported", subject=_np_text(c.subjects[0]), label=text)]
    if base in _THINK and c.ccomp is not None:
        return [Reading("nonfact", mood="opinion", label=text)]
    # plans and intentions: "will", "plans to", "is going to", and a resolution's deadline
    # ("that the archive be moved to the Old Deanery by 31 March 2027": to be done, not done)
    if c.modal == "will" or (base in _PLAN_VERBS and c.xcomp is not None) or (
            _subjunctive(c) and any(_is_time(t) for t in c.preps.get("by", []))) or (
            base == "go" and c.xcomp is not None and any(t.lower_ == "going" for t in [c.head])):
        rest = _predicate_text(c)
        return [Reading("plan", subject=_np_text(c.subjects[0]) if c.subjects else None, mood="plan", label=text,
                        features={"predicate_text": rest} if rest else {})]
    if c.acomp is not None and c.acomp.lemma_.lower() in _OPINION_ADJ and not _is_valueish(c.acomp):
        return [Reading("nonfact", mood="opinion", label=text)]
    earlier = not former and any(t.dep_ == "advmod" and t.lower_ in _FORMERLY | {"once", "before", "earlier"}
                                 for t in c.head.children)
    if earlier or any(_non_time(c.preps.get(p)) is not None for p in ("before", "prior to")) or (
            base == "use" and c.xcomp is not None):
        subject = _np_text(c.subjects[0]) if c.subjects else None
        return [Reading("statement", subject=subject, label=text, features={"past": True})]
    change = "negation" if c.negated else "none"
    if c.no_longer:
        change = "end"
    elif change == "none" and any(a.dep_ == "advmod" and a.lower_ == "now" for a in c.head.children):
        change = "succession"  # "the gateway now uses Envoy": a state that starts (when the claim is dated)

    readings = _transition(c, verb, change, text)
    if readings is None:
        readings = _relation(c, verb, change, text)
    if readings is None:
        readings = _attribute(c, verb, change, text)
    defines: dict[str, object] = {}
    if (base == "be" and c.attr is not None and c.subjects and (c.subjects[0].pos_ == "PROPN" or (
            c.subjects[0].text[:1].isupper() and not any(d.dep_ == "det" for d in c.subjects[0].children)))
            and c.attr.pos_ == "NOUN" and change == "none" and c.attr.lemma_.lower() not in _ROLE_NOUNS
            and any(d.dep_ == "det" and d.lower_ in ("the", "a", "an") for d in c.attr.children)):
        # "Kestrel is the team behind …", "Pixelmoor is a design studio": "the team", "the
        # studio" and "the design studio" are Kestrel and Pixelmoor (any noun: the kind is open)
        defines = {"defines": c.attr.lemma_.lower(), "defines_phrase": _np_text(c.attr).lower()}
        place = _non_time([o for p in c.attr.children if p.dep_ == "prep" and p.lower_ in ("in", "at")
                           for o in p.children if o.dep_ == "pobj"])
        if place is not None and _is_place(place) and readings is None:
            readings = [_replace(r, features=defines) for r in _rel(
                [_np_text(c.subjects[0])], "located_in", _np_text(place), change, text) or []]
    if readings is None:
        subject = _np_text(c.subjects[0]) if c.subjects else None
        features: dict[str, object] = dict(defines)
        rest = _predicate_text(c)
        if rest:
            features["predicate_text"] = rest
        readings = [Reading("statement", subject=subject, change=change, label=text, features=features)]
    return readings


_CLAUSE_DEPS = frozenset({"relcl", "advcl", "ccomp", "parataxis", "punct", "mark", "cc", "conj", "intj", "dep",
                          "nsubj", "nsubjpass", "csubj", "expl", "discourse", "meta"})


def _subjunctive(c: _Clause) -> bool:
    """"that Ms Onyango chair the committee", "that the archive be moved": a base-form verb
    with a subject and no auxiliary to carry tense (what a resolution or request asks for)."""
    aux = [a for a in c.head.children if a.dep_ in ("aux", "auxpass")]
    return bool(c.subjects) and c.modal is None and not any(s.lower_ in _PRONOUNS for s in c.subjects) and (
        (c.head.tag_ == "VB" and not aux) or (len(aux) == 1 and aux[0].lower_ == "be" and aux[0].dep_ == "auxpass"))


def _predicate_text(c: _Clause) -> str | None:
    """What a plain statement says of its subject, as a canonical phrase: the verb with its
    auxiliaries, negation and complements, without articles, punctuation, subordinate clauses
    or dated adjuncts ("Wen finished the export API on Friday." → "finished export API")."""
    if not c.subjects or c.head.pos_ not in ("VERB", "AUX"):
        return None
    keep: list[Any] = [c.head]
    for child in c.head.children:
        if child.dep_ in _CLAUSE_DEPS:
            continue
        if child.dep_ == "prep" and any(_is_time(o) for o in child.children if o.dep_ == "pobj"):
            continue
        if child.ent_type_ in ("DATE", "TIME") and child.dep_ not in ("dobj", "attr") and not (
                child.dep_ == "advmod" and child.lemma_.lower() not in _TIME_NOUNS):  # "run nightly" keeps it
            continue
        keep.extend(child.subtree)
    inner = {t.i for k in keep if k.dep_ == "relcl" and k is not c.head for t in k.subtree}
    words = [t for t in sorted(set(keep), key=lambda t: t.i)
             if not (t.is_punct and t.text not in ("-", "/", "&", "'", "’")) and t.i not in inner
             and not (t.dep_ == "det" and t.lower_ in ("the", "a", "an"))]
    # the words' own spacing where they are adjacent ("on-call", "isn't"), one space across a gap
    text = "".join(t.text_with_ws if i + 1 < len(words) and words[i + 1].i == t.i + 1 else t.text + " "
                   for i, t in enumerate(words))
    text = re.sub(r"\s+", " ", text).strip(" -/&")
    return text if text and len(text.split()) <= 12 else None


def _people(tokens: list[Any]) -> list[str]:
    return [_np_text(t) for t in tokens if t.lower_ not in _PRONOUNS or t.lower_ in ("we",)]


def _rel(subjects: list[str], predicate: str, obj: str | None, change: str, text: str, *,
         previous: str | None = None, previous_holder: str | None = None) -> list[Reading] | None:
    if not obj or not subjects:
        return None
    return [Reading("relation", subject=s, predicate=predicate, object=obj, change=change, previous=previous,
                    previous_holder=previous_holder, label=text) for s in subjects]


def _role(token: Any | None) -> tuple[str, str] | None:
    """"lead of X" / "the owner of X" / "head of X": (predicate, X)."""
    if token is None:
        return None
    predicate = _ROLE_NOUNS.get(token.lemma_.lower())
    if predicate is None:
        return None
    # "stood down as chair of the board, and Kemi was elected chair": a bare role is the one
    # the sentence names with its object
    for noun in (token, *[t for t in token.sent if t.lemma_ == token.lemma_ and t.i != token.i]):
        for child in noun.children:
            if child.dep_ == "prep" and child.lower_ in ("of", "for", "on"):
                obj = next((o for o in child.children if o.dep_ == "pobj"), None)
                if obj is not None and not _is_time(obj):
                    return predicate, _np_text(obj)
    return None


def _employer(title: Any | None) -> str | None:
    """"(the operations director | Head of Ops) at Halvorsen Freight": the organisation a job
    title is held at (a named one, not a place or a time)."""
    if title is None or title.pos_ not in ("NOUN", "PROPN"):
        return None
    for prep in title.subtree:
        if prep.dep_ == "prep" and prep.lower_ in ("at", "with"):
            org = next((o for o in prep.children if o.dep_ == "pobj"), None)
            if org is not None and org.pos_ == "PROPN" and org.ent_type_ not in ("GPE", "LOC", "DATE", "TIME") \
                    and not _is_place(org) and not _is_time(org):
                return _np_text(org)
    return None


def _member_role(token: Any) -> tuple[str, str] | None:
    """"(a member | part) of the search team" said of a person: the membership the group's
    kind makes (works on a team, member of a guild, works for a company)."""
    group = next((o for p in token.children if p.dep_ == "prep" and p.lower_ == "of" for o in p.children
                  if o.dep_ == "pobj" and not _is_time(o)), None)
    return (_membership(group), _np_text(group)) if group is not None else None


def _listed(token: Any) -> list[str]:
    """The names a list of holders gives ("Tom and Ana", "Ama, Kojo, Efua"), one each, however
    the parser hung the list's names on one another."""
    words = list(token.subtree)
    if any(w.text == "," for w in words):
        text = token.doc[words[0].i:words[-1].i + 1].text
        return [name for part in re.split(r",|\band\b|&", text) if (name := _clean_np(part))]
    return [_np_text(h) for h in [*_conjuncts(token), *[a for a in token.children if a.dep_ == "appos"]]]


def _clean_np(text: str) -> str:
    words = text.split()
    while words and words[0].lower() in _DETERMINERS:
        words = words[1:]
    return " ".join(words).strip(" .;:")


def _is_group(token: Any) -> bool:
    """A team, group or organisation: something that holds a role as a person does."""
    return _is_org(token) or token.lemma_.lower() in _LED_HEADS | _GROUP_HEADS | {"office"}


def _held_as(obj: Any) -> str:
    return "other:leads" if obj.lemma_.lower() in _LED_HEADS or obj.lower_ in _LED_HEADS else "other:owns"


def _simple_past(verb: Any) -> bool:
    """"was handled", "were run": an event told in the past, not a perfect or a present."""
    auxiliaries = {a.lower_ for a in verb.children if a.dep_ in ("aux", "auxpass")}
    return verb.tag_ == "VBD" or (bool(auxiliaries & {"was", "were"}) and not auxiliaries & {"has", "have", "had"})


def _membership(obj: Any) -> str:
    if obj.lemma_.lower() in _TIER_HEADS:
        return "uses"
    if _is_org(obj):
        return "works_for"
    if obj.lemma_.lower() in _GROUP_HEADS or any(t.lower_ in _GROUP_HEADS for t in obj.subtree):
        return "member_of"
    return "works_on"


def _transition(c: _Clause, verb: str, change: str, text: str) -> list[Reading] | None:
    base = c.head.lemma_.lower()
    subjects = _people(c.subjects)
    to = _non_time(c.preps.get("to") or c.preps.get("into"))
    source = _non_time(c.preps.get("from"))
    as_role = _role(_first(c.preps, "as"))
    succession = "succession" if change == "none" else change
    holding = (c.objects[0] if c.objects and not c.passive else c.subjects[0] if c.subjects else None)
    held = _HOLDING_NOUNS.get(holding.lemma_.lower()) if holding is not None else None
    if held is not None and holding is not None and to is not None and (base in _MOVE or verb in _HAND_OVER) and (
            _is_personish(to) or _is_group(to)):
        # "ownership of the billing API moves from the payments team to the platform team"
        of = next((o for p in holding.children if p.dep_ == "prep" and p.lower_ in ("of", "for")
                   for o in p.children if o.dep_ == "pobj"), None)
        if of is not None:
            return _rel([_np_text(to)], held, _np_text(of), succession, text,
                        previous_holder=_np_text(source) if source is not None else None)
    if verb in _TAKE_OVER or (base == "take" and c.objects and c.objects[0].lower_ == "over"):
        role = as_role
        if role is None and c.objects:
            role = (_held_as(c.objects[0]), _np_text(c.objects[0]))
        if role is None:
            return None
        holder = _np_text(source) if source is not None else None
        return _rel(subjects, role[0], role[1], succession, text, previous_holder=holder)
    if verb in _HAND_OVER and c.objects:
        target = to
        held_as = _held_as(c.objects[0])
        if target is None:
            return _rel(subjects, held_as, _np_text(c.objects[0]), "end", text)
        return _rel([_np_text(target)], held_as, _np_text(c.objects[0]), succession, text,
                    previous_holder=subjects[0] if subjects else None)
    if base in _SUCCEED and (c.objects and not c.passive or c.passive and c.agent is not None):
        successors, predecessor = (subjects, _np_text(c.objects[0])) if not c.passive else (
            [_np_text(c.agent)], subjects[0] if subjects else None)
        if as_role is not None:
            return _rel(successors, as_role[0], as_role[1], succession, text, previous_holder=predecessor)
        if not successors or not predecessor:
            return None
        # "He succeeds Paula Greco": the role is the one the successor holds (read by the normaliser)
        return [Reading("succession", subject=successors[0], change=succession, previous_holder=predecessor,
                        label=text)]
    if base in _BECOME:
        role = (_role(c.attr) or _role(c.oprd) or as_role or _role(to) or _role(c.xcomp)
                or _role(c.objects[0] if c.objects else None))
        duty = work = None
        if c.xcomp is not None and c.xcomp.pos_ == "VERB":
            duty = _VERB_PREDICATES.get(c.xcomp.lemma_.lower())
            work = next((o for o in c.xcomp.children if o.dep_ == "dobj"), None)
        if role is None and duty in ("other:leads", "other:owns") and work is not None:
            # "Ilona Marek be appointed to lead the orchestra", "was hired to run the kitchen"
            holders = subjects if c.passive else [_np_text(o) for o in c.objects] or subjects
            return _rel(holders, duty, _np_text(work), succession, text)
        if role is None:
            return None
        holders = subjects if (c.passive or base == "become") else [_np_text(o) for o in c.objects]
        return _rel(holders, role[0], role[1], succession, text)
    if base in _JOIN and not c.passive:
        target = c.objects[0] if c.objects and base != "start" else _non_time(c.preps.get("at") or c.preps.get(
            "with") or c.preps.get("on") or c.preps.get("in"))
        if target is None or _is_time(target):
            return None
        predicate = "works_on" if base == "start" and _first(c.preps, "on") is target else _membership(target)
        if predicate == "works_on" and _is_bare_name(target) and not _is_place(target):
            predicate = "works_for"  # "joined Brightwave": a name with no team or project word is an employer
        return _rel(subjects, predicate, _np_text(target), succession, text)
    if base in _MOVE or verb in _MOVE:
        destination = to or _non_time(c.preps.get("onto"))
        if destination is not None and destination.lemma_.lower() in _SITE_NOUNS:
            # "moved to a new site in Bradford": the place the site is in
            destination = next((o for p in destination.children if p.dep_ == "prep" and p.lower_ in ("in", "at")
                                for o in p.children if o.dep_ == "pobj" and _is_place(o)), destination)
        if destination is None or _is_amount(destination) and (
                destination.pos_ != "PROPN" or destination.text.upper() in _CURRENCY_CODES
                or destination.ent_type_ in ("MONEY", "PERCENT", "QUANTITY", "CARDINAL")):
            # "the price went from 30 USD to 35 USD": a value changes (an attribute); "to Mobil
            # DTE 25" is a name with a number in it
            return None
        mover = c.objects[0] if c.objects and not c.passive else (c.subjects[0] if c.subjects else None)
        if mover is None or mover.lemma_.lower() in GRADED_HEADS:
            return None  # "health moved from Green to Amber": a value changes (an attribute)
        if _is_person(destination) and not _is_personish(mover) and not (source is not None and _is_place(source)):
            # "his projects go to Beatrix": a hand-over of work, not a place
            rest = _predicate_text(c)
            return [Reading("statement", subject=_np_text(mover), change=change, label=text,
                            features={"predicate_text": rest} if rest else {})]
        if (not c.objects or c.passive) and _names_a_system(mover) \
                and destination.pos_ == "PROPN" and not _is_place(destination) and not _is_person(destination) \
                and not (source is not None and source.pos_ != "PROPN" and _is_locative(source)) \
                and not any(t.lower_ in _HOSTING_PROVIDERS for t in destination.subtree):
            # "Lantern CI moved from TeamCity to Buildkite": a system moves to another tool (a
            # cloud it moves to is where it is hosted)
            return _rel(subjects, "uses", _np_text(destination), succession, text,
                        previous=_np_text(source) if source is not None else None)
        if destination.lemma_.lower() in _TIER_HEADS:  # "moved Kestrel Optics onto the Lite plan"
            moved = c.objects if c.objects and not c.passive else c.subjects
            return _rel([_np_text(t) for t in moved], "uses", _np_text(destination), succession, text,
                        previous=_np_text(source) if source is not None else None)
        if _is_place(destination) or destination.lemma_.lower() in _PLACE_HEADS:
            predicate = "located_in"  # to Leeds, to the third floor, to the stock room
        elif _is_personish(mover) and not _names_a_system(mover):
            # ("the council tax portal", its head tagged a proper noun, is no person)
            predicate = "works_for" if destination.ent_type_ == "ORG" or any(
                t.lower_ in ORG_WORDS for t in destination.subtree) else "works_on"
        elif source is not None and all(_named(t) and not _is_locative(t) and not any(
                w.lower_ in _HOSTING_PROVIDERS for w in t.subtree) for t in (source, destination)) \
                and not _is_locative(mover) and destination.pos_ == "PROPN":
            # "art outsourcing moved from Kinetic Art to Lumen Studio": an activity changes
            # supplier (a depot or an office that moves between names moves between places)
            return _rel(subjects, "uses", _np_text(destination), succession, text, previous=_np_text(source))
        else:
            predicate = "located_in"
        product = (destination.pos_ == "PROPN" or destination.ent_type_ in ("ORG", "PRODUCT")) \
            and destination.lemma_.lower() not in _LED_HEADS | _GROUP_HEADS
        movers = [_np_text(t) for t in (c.objects if c.objects and not c.passive else c.subjects)]
        if base in ("switch", "change", "move") and c.objects and not c.passive and source is not None \
                and not (_is_place(destination) and _is_place(source)) and c.objects[0].pos_ == "NOUN" \
                and not _is_personish(destination) and all(t.lower_ in _PRONOUNS for t in c.subjects):
            # "we switched the translation vendor from Linguo to Wordsmith": the object names a slot
            # and the destination fills it, as "our translation vendor is Linguo" said
            thing = c.objects[0]
            return [_attr(_np_text(thing, _ATTRIBUTE_PREPS), None, _np_text(destination), succession, text,
                          previous=_np_text(source), state=True)]
        if base in ("switch", "migrate") and not c.passive and product and (
                predicate != "located_in" or base == "switch") and not _is_place(destination):
            # "the web team switched from Jenkins to GitHub Actions", "… switched the expense tool from
            # Spendly to Pleo": the subject uses a tool (the object, when there is one, names its slot)
            predicate = "uses"
            if c.objects and subjects and all(t.lower_ not in _PRONOUNS for t in c.subjects):
                movers = subjects
        return _rel(movers, predicate, _np_text(destination), succession, text,
                    previous=_np_text(source) if source is not None else None)
    if verb in _END or base in _END:
        role = as_role
        target = c.objects[0] if c.objects else _non_time(c.preps.get("from"))
        if role is None and target is None:
            return None
        if role is not None:
            return _rel(subjects, role[0], role[1], "end", text)
        assert target is not None
        predicate = _membership(target)
        if predicate == "works_on" and _is_bare_name(target) and not _is_place(target):
            predicate = "works_for"  # "leaves Polaris Freight": as joining it, an employer
        return _rel(subjects, predicate, _np_text(target), "end", text)
    return None


def _relation(c: _Clause, verb: str, change: str, text: str) -> list[Reading] | None:
    base = c.head.lemma_.lower()
    if c.subjects and _nobody(c.subjects[0]):
        return None  # "none of Marlow's users can log in via Okta", "no customer uses the v1 API"
    subjects = _people(c.subjects)
    if c.passive:
        if base in ("employ", "contract", "hire", "retain"):
            place = c.agent if c.agent is not None else _non_time(c.preps.get("at"))
            return _rel(subjects, "works_for", _np_text(place) if place is not None else None, change, text)
        stranded = next((p.lower_ for p in c.head.children if p.dep_ in ("prep", "prt")
                         and not any(o.dep_ in ("pobj", "pcomp") for o in p.children)), None)
        phrasal = _PREP_VERB_PREDICATES.get((base, stranded or ""))
        if c.agent is not None and phrasal is not None:  # "is looked after by Wanjiru", "is relied on by …"
            return _rel([_np_text(t) for t in _conjuncts(c.agent)], phrasal,
                        _np_text(c.subjects[0]) if c.subjects else None, change, text)
        if c.agent is not None and base == "handle" and c.subjects and not _simple_past(c.head):
            # "crew rostering has been handled by Amaka Eze": a duty held, led or owned by its
            # kind ("the incident was handled by Rosa" is one event, not a duty)
            return _rel([_np_text(t) for t in _conjuncts(c.agent)], _held_as(c.subjects[0]),
                        _np_text(c.subjects[0]), change, text)
        if c.agent is not None and base == "hold" and c.subjects and c.subjects[0].lemma_.lower() in _HELD_THINGS:
            # "the park-and-ride contract is held by Greenline Buses"
            return _rel([_np_text(t) for t in _conjuncts(c.agent)], "other:owns", _np_text(c.subjects[0]), change,
                        text)
        if base in ("award", "grant", "let") and c.subjects and c.subjects[0].lemma_.lower() in _HELD_THINGS:
            # "the LED retrofit contract has been awarded to Brightway Electrical": the holder owns it
            holder = _non_time(c.preps.get("to"))
            if holder is not None and (_is_org(holder) or _is_personish(holder)):
                return _rel([_np_text(t) for t in _conjuncts(holder)], "other:owns", _np_text(c.subjects[0]),
                            "succession" if change == "none" else change, text)
        if c.agent is not None and base in _PASSIVE_AGENT:
            return _rel([_np_text(t) for t in _conjuncts(c.agent)], _PASSIVE_AGENT[base],
                        _np_text(c.subjects[0]) if c.subjects else None, change, text)
        if base in ("assign", "reassign", "allocate", "give", "hand"):
            target = _non_time(c.preps.get("to"))
            succession = "succession" if base in ("reassign", "hand") and change == "none" else change
            source = _non_time(c.preps.get("from"))  # "reassigned from Lucia to Ken"
            return _rel(subjects, "assigned_to", _np_text(target) if target is not None else None, succession, text,
                        previous=_np_text(source) if source is not None and _is_personish(source) else None)
        if base in _LOCATION_VERBS:
            # "deployed in Frankfurt and Dublin": one relation per place
            places = [t for t in c.preps.get("in") or c.preps.get("at") or c.preps.get("on") or (
                c.preps.get("to") or c.preps.get("onto") if base in ("deploy", "move", "migrate", "ship") else None)
                or [] if not _is_time(t)]  # "is deployed to AWS eu-west-1"
            # "deployed to the notification service": a system is not a place (but what is
            # "located in the Saltmarsh Quay site" is on a site, not a website)
            places = [p for p in places if _is_place(p) or p.lemma_.lower() not in _THING_HEADS
                      or base in _PLACED_VERBS]
            readings = [r for p in places for r in _rel(subjects, "located_in", _np_text(p), change, text) or []]
            if readings:
                return readings
        if c.agent is None and c.subjects and not c.objects and not (
                _is_person(c.subjects[0]) or c.subjects[0].pos_ == "PROPN" and _is_person_named(c.subjects[0])):
            # "timesheets are submitted through Workday", "reefer trailers are tracked with ORBCOMM":
            # a process done in a named tool uses it
            for prep in ("through", "via", "using", "in", "with"):
                tool = _non_time(c.preps.get(prep))
                if tool is not None and tool.pos_ == "PROPN" and not _is_locative(tool) and not _is_person(tool) \
                        and not any(ch.isdigit() for ch in tool.text) and (prep != "with" or base in _TOOL_VERBS):
                    return _rel(subjects, "uses", _np_text(tool), change, text)
        return None
    if base == "be":
        role = _role(c.attr)
        employer = _employer(c.attr) if c.subjects and _is_person_named(c.subjects[0]) else None
        employed = (_rel(subjects, "works_for", employer, change, text) or []) if employer else []
        if role is not None:
            if role[0] in ("part_of", "member_of") and c.subjects and _is_person_named(c.subjects[0]):
                role = _member_role(c.attr) or role
            return [*(_rel(subjects, role[0], role[1], change, text) or []), *employed] or None
        if employed:  # "Jonas Eide is the operations director at Halvorsen Freight"
            return employed
        holder = c.attr if c.attr is not None and (_is_personish(c.attr) or _is_group(c.attr)) else None
        if holder is not None and c.subjects:
            # "The owner of the checklist is Hana", "Mark's manager is Hana Sato"
            role = _role(c.subjects[0])
            if role is not None:  # "The owners of the wiki are Tom and Ana": one relation each
                if role[0] in ("part_of", "member_of") and _is_personish(holder):
                    role = _member_role(c.subjects[0]) or role  # "the members of the Quokka team are …"
                return _rel(_listed(holder), role[0], role[1], change, text)
            head = c.subjects[0]
            owner = next((t for t in head.children if t.dep_ == "poss" and t.lower_ not in _PRONOUNS), None)
            if owner is not None:
                owned = _np_text(owner).removesuffix("'s").removesuffix("’s")
                if head.lemma_.lower() in ("manager", "boss", "supervisor", "lead") and (
                        _is_person(owner) or _is_person_named(owner) and owner.ent_type_ != "ORG"):
                    return _rel([owned], "reports_to", _np_text(holder), change, text)  # "Mark's manager is Hana"
                predicate = _ROLE_NOUNS.get(head.lemma_.lower())
                if predicate is not None:  # "Tundra's owner is the streaming team", "Nimbus's lead is Carla"
                    return _rel([_np_text(h) for h in _conjuncts(holder)], predicate, owned, change, text)
        if c.acomp is not None and c.acomp.lemma_.lower() in ("responsible", "accountable"):
            target = _non_time([o for p in c.acomp.children if p.dep_ == "prep" and p.lower_ == "for"
                                for o in p.children if o.dep_ == "pobj"])
            return _rel(subjects, "other:owns", _np_text(target) if target is not None else None, change, text)
        if c.attr is None and c.acomp is None:
            charge = _non_time(c.preps.get("in"))
            if charge is not None and charge.lower_ == "charge":
                of = _non_time(c.preps.get("of"))
                return _rel(subjects, "other:leads", _np_text(of) if of is not None else None, change, text)
            on = _non_time(c.preps.get("on"))
            if on is not None and on.lower_ in _NOT_WORK:
                return None
            if on is not None and subjects and on.lemma_.lower() in _TIER_HEADS:
                return _rel(subjects, "uses", _np_text(on), change, text)
            if on is not None and on.lemma_.lower() in _STREET_HEADS and _named(on):
                return _rel(subjects, "located_in", _np_text(on), change, text)  # "the skate park is on Station Road"
            if on is not None and subjects and c.subjects and _is_personish(c.subjects[0]):
                return _rel(subjects, "works_on", _np_text(on), change, text)
            places = [p for p in c.preps.get("in") or c.preps.get("at") or () if not _is_time(p)]
            if places and not _is_place(places[0]) and (
                    not _is_locative(places[0]) or c.subjects and _is_personish(c.subjects[0])):
                # "MV Skarv is in dry-dock in Gdańsk": the named place a state is in is where it is
                inner = [o for p in places[0].children if p.dep_ == "prep" and p.lower_ in ("in", "at")
                         for o in p.children if o.dep_ == "pobj"]
                places = [*(p for p in [*places[1:], *inner] if _is_place(p)), *places]
            place = places[0] if places else None
            if place is not None and (_is_place(place) or (_is_locative(place) and c.subjects
                                                          and not _is_personish(c.subjects[0]))):
                # "the spare drill bits are in the site cabin", "the spectrometer is in room B012"
                return _rel(subjects, "located_in", _np_text(place), change, text)
            if place is not None and _is_org(place) and c.subjects and _is_person(c.subjects[0]):
                return _rel(subjects, "works_for", _np_text(place), change, text)
        return None
    key = (base, next(iter(c.preps), ""))
    for prep in c.preps:
        predicate = _PREP_VERB_PREDICATES.get((base, prep))
        if predicate is not None:
            # "depends on the payments gateway and the fraud service": one relation per conjunct
            targets = [t for t in c.preps[prep] if not _is_time(t)]
            readings = [r for t in targets for r in _rel(subjects, predicate, _np_text(t), change, text) or []]
            if readings:
                return readings
    del key
    supplier = _non_time(c.preps.get("from"))
    if base in ("come", "source") and supplier is not None and c.subjects and supplier.pos_ == "PROPN" \
            and not _is_place(supplier) and not _is_person(supplier) and not _is_personish(c.subjects[0]) \
            and not c.negated and not _simple_past(c.head):
        # "the results feed comes from PA Media": a named supplier a thing keeps coming from is
        # used (not a place it comes from, not one delivery, not a person's past)
        return _rel(subjects, "uses", _np_text(supplier), change, text)
    holder = _non_time(c.preps.get("with"))
    if base in ("sit", "rest", "lie") and not c.objects and holder is not None and c.subjects \
            and (_is_personish(holder) or _is_group(holder)) and not _is_personish(c.subjects[0]):
        # "KR3 has sat with Dr Redcloud since February", "the decision rests with the board":
        # where a duty lies is who holds it
        return _rel([_np_text(t) for t in _conjuncts(holder)], _held_as(c.subjects[0]),
                    _np_text(c.subjects[0]), change, text)
    if base in ("stay", "remain") and not c.objects and not c.negated:
        # "the paper lab stays in the main building", "Ravi stays on the billing team": a state
        # that goes on
        place = _non_time(c.preps.get("in") or c.preps.get("at"))
        if place is not None and (_is_locative(place) or place.pos_ == "PROPN" and not _is_personish(place)):
            return _rel(subjects, "located_in", _np_text(place), change, text)
        group = _non_time(c.preps.get("on") or c.preps.get("with"))
        if group is not None and _is_group(group) and c.subjects \
                and _is_personish(c.subjects[0]):
            return _rel(subjects, _membership(group), _np_text(group), change, text)
        return None
    platform = _non_time(c.preps.get("on") or c.preps.get("through") or c.preps.get("via"))
    # "runs on" a name is a platform even when the small model tags the name a place
    if base == "run" and not c.objects and platform is not None and (_is_bare_name(platform) or (
            platform.ent_type_ in ("ORG", "PRODUCT") and platform.text[:1].isupper() and not _is_place(platform)
            and not any(t.dep_ in ("det", "poss") for t in platform.children))) \
            and c.subjects and not _is_person(c.subjects[0]):
        # "the tracing backend runs on ClickHouse", "Lanternfall does run on Unreal Engine 5.4": a
        # capitalised subject is as likely a product as a person, and people do not run on platforms
        return _rel(subjects, "uses", _np_text(platform), change, text)
    channel = _non_time(c.preps.get("through") or c.preps.get("via"))
    if base in _CHANNEL_VERBS and not c.objects and channel is not None and _named(channel) \
            and (base in _SIGN_IN_VERBS or not _is_place(channel) and not _is_person(channel)) and c.subjects \
            and not _is_person(c.subjects[0]) and not c.negated:
        # "SMS went through Nexmo", "push notifications are sent through Firebase Cloud Messaging":
        # the named service a thing passes through is what it uses (one signs in through a system,
        # never a place or a person, whatever the small model tags an unknown name)
        return _rel(subjects, "uses", _np_text(channel), change, text)
    if base == "take" and len(c.objects) == 1 and c.objects[0].lower_ == "place" and not c.passive \
            and not any(t.dep_ in ("det", "poss", "amod") for t in c.objects[0].children):
        # "rehearsals take place at the Corn Exchange": where the thing happens
        place = _non_time(c.preps.get("at") or c.preps.get("in"))
        return _rel(subjects, "located_in", _np_text(place), change, text) if place is not None else None
    if base in _LOCATION_VERBS and not c.objects:
        place = _non_time(c.preps.get("in") or c.preps.get("at") or c.preps.get("on"))
        thing = c.subjects[0] if c.subjects else None
        if place is not None and (_is_place(place) or base != "run"
                                  or (thing is not None and not _is_personish(thing))):
            return _rel(subjects, "located_in", _np_text(place), change, text)
    if base == "host" and c.objects and c.subjects and _is_place(c.subjects[0]):
        return _rel([_np_text(o) for o in c.objects], "located_in", _np_text(c.subjects[0]), change, text)
    if base in ("host", "deploy", "store", "keep", "house", "base", "locate") and c.objects and not c.passive:
        # "we're hosting the analytics DB in Paris now": the object is where the place says
        place = _non_time(c.preps.get("in") or c.preps.get("at"))
        if place is not None and _is_place(place):
            return _rel([_np_text(o) for o in c.objects], "located_in", _np_text(place), change, text)
    if base == "hold" and c.objects and not c.passive and c.objects[0].lemma_.lower() in _HELD_THINGS:
        # "FrioTrans holds the haulage contract", "Greenline holds the park-and-ride licence"
        return [r for obj in c.objects for r in (_rel(subjects, "other:owns", _np_text(obj), change, text) or [])] \
            or None
    if not c.passive and base in _RECORDED and c.objects and c.subjects and not c.negated:
        # "Reception books all appointments in EMIS Web", "finance tracks every budget in Anaplan":
        # whoever does the work in a named system uses it
        tools = [o for p in ("in", "on", "through", "via", "using") for o in c.preps.get(p) or ()]
        # the small parser often hangs the system on the object ("books all visits in Envoy")
        tools += [o for p in c.objects[0].children if p.dep_ == "prep" and p.lower_ in ("in", "on", "through", "via")
                  for o in p.children if o.dep_ == "pobj"]
        tool = _non_time(tools)
        if tool is not None and _named(tool) and not _is_locative(tool) and not _is_person(tool):
            return _rel(subjects, "uses", _np_text(tool), change, text)
    if c.passive and base in _RECORDED and c.subjects and not _is_personish(c.subjects[0]):
        # "all work packs are tracked in AMOS", "invoices are processed in Xero": the system used
        tool = _non_time(c.preps.get("in") or c.preps.get("on") or c.preps.get("through") or c.preps.get("via"))
        if tool is not None and tool.pos_ == "PROPN" and not _is_place(tool):
            return _rel(subjects, "uses", _np_text(tool), change, text)
    predicate = _VERB_PREDICATES.get(verb) or _VERB_PREDICATES.get(base)
    if predicate is not None and c.objects:
        if base == "run" and not c.subjects:
            return None
        runner = c.subjects[0] if base == "run" else None
        if runner is not None and runner.pos_ == "NOUN" and not _is_personish(runner) and (
                runner.lemma_.lower() in _PLACE_HEADS or runner.lemma_.lower() not in _GROUP_HEADS | _LED_HEADS):
            # "the roastery runs a Loring S35", "the Leeds site runs SAP": a machine or a system it uses
            named = [o for o in c.objects if o.pos_ == "PROPN" and o.lemma_.lower() not in _LED_HEADS | _GROUP_HEADS]
            if named:
                return [r for obj in named for r in (_rel(subjects, "uses", _np_text(obj), change, text) or [])] \
                    or None
        if predicate in ("authored", "created", "founded") and c.head.tag_ == "VBG":
            return None  # "is now writing up his thesis": a work in progress, not yet made
        return [r for obj in c.objects for r in (_rel(subjects, predicate, _np_text(obj), change, text) or [])] or None
    return None


_WEEKDAY_PREFIX = re.compile(rf"^(?:the\s+|{timeparse.WEEKDAY_WORD},?\s+(?=\S*\d))", re.IGNORECASE)


def _canonical_day(text: str) -> str:
    """A day written in full whatever its form ("28 Feb 2027", "24/03/2026" -> "28 February 2027",
    "24 March 2026"): a fact's value is the date, not its spelling. Anything else stays as written."""
    if not any(ch.isdigit() for ch in text):
        return text  # every value is read here: only one with a figure can be a day
    found = timeparse.find_time_expressions(text, None)
    if len(found) == 1 and (found[0].start, found[0].end) == (0, len(text)) and found[0].precision == "day" \
            and not found[0].relative and found[0].valid_from is not None:
        return timeparse.render_day(found[0].valid_from.date())
    return text


def _value_of(token: Any) -> str:
    """The value a token holds, as a fact states it: a figure and its unit, a name, a day in full."""
    return _canonical_day(_value_text(token))


def _value_text(token: Any) -> str:
    if token.ent_type_ in ("DATE", "TIME"):
        # "(in) the second half of 2026", "Thursday 5 February 2026": the date itself; "27 March,
        # not 20 March": the date corrected away is no part of it
        return _WEEKDAY_PREFIX.sub("", re.split(r",?\s+not\s+", _date_text(token), maxsplit=1)[0])
    if not _is_valueish(token):
        return _np_text(token)
    skip: set[int] = set()
    for child in token.children:
        if child.i > token.i and child.dep_ in ("appos", "conj", "npadvmod", "dep", "prep") and (any(
                t.lower_ in ("not", "n't") for t in token.doc[token.i + 1:child.i]) or _set_aside(child)
                or _sets_aside(child)
                or token.doc[child.left_edge.i - 1].text == "(" or any(  # "200 EUR (previously 150 EUR)"
                    t.dep_ == "advmod" and t.lower_ in _FORMERLY for t in child.subtree)):
            # "70,000 EUR, not 75,000 EUR", "70 EUR instead of 75 EUR": the value corrected
            # away is no part of the value
            skip.update(t.i for t in child.subtree)
            # from the comma or "not" on: "180 GBP a year, not 150 GBP" keeps "a year"
            skip.update(range(next((i for i in range(token.i + 1, child.i) if token.doc[i].is_punct
                                    or token.doc[i].dep_ == "cc"
                                    or token.doc[i].lower_ in ("not", "n't", "instead", "rather")), child.i),
                              child.i))
        if child.dep_ in ("prep", "relcl", "acl", "advcl") and child.i > token.i and (
                child.dep_ != "prep" or (child.lower_ not in ("per", "of", "each", "a") and any(
                    _is_time(o) for o in [*child.children, *(g for p in child.children if p.dep_ == "prep"
                                                             for g in p.children)] if o.dep_ == "pobj"))):
            # "63 percent as of 4 December": when it held is the claim's window
            skip.update(t.i for t in child.subtree)
    comma = next((t.i for t in token.subtree if t.i > token.i and t.text == ","), None)
    if comma is not None:
        # "212 GWh, 6 percent below plan", "184, our best Saturday so far": what follows the
        # figure's comma compares or comments on it
        skip.update(t.i for t in token.subtree if t.i > comma)
    words = [t for t in token.subtree if t.dep_ != "punct" and t.i not in skip]
    # words the value skips leave the space they stood in ("212 GWh", not "212 GWh6")
    parts = []
    for word, after in zip(words, [*words[1:], None], strict=True):
        gap = "" if after is None else token.doc.text[word.idx + len(word.text):after.idx]
        parts.append(word.text + (" " if any(ch.isspace() for ch in gap) else ""))
    value = re.sub(r"\s+", " ", "".join(parts)).strip()
    if words and words[-1].i == len(token.doc) - 1 and value.endswith("."):
        value = value[:-1]  # "6 min 30 s.": the sentence's full stop, read into its last word
    return value


def _attribute(c: _Clause, verb: str, change: str, text: str) -> list[Reading] | None:
    base = c.head.lemma_.lower()
    split = _object_read_as_clause(c)
    if split is not None:
        c, named = split
    thing = c.objects[0] if c.objects and not c.passive and base not in ("rise", "fall", "grow", "climb") else (
        c.subjects[0] if c.subjects else None)
    if thing is None or thing.lower_ in _PRONOUNS:
        return None
    name = _np_text(thing, _ATTRIBUTE_PREPS) if split is None else named  # "headcount in customer success"
    succession = "succession" if change == "none" else change
    to = _first(c.preps, "to", "until", "till", "into")
    source = _first(c.preps, "from")
    if source is not None and _is_time(source) and to is not None and not _is_time(to):
        source = None  # "cut to 262,000 GBP from 1 May": when it changed, not what it was
    status = _status_change(c)
    if status is not None:
        # "was cancelled", "went live": an event that changes the status; "is paused": a state
        event = c.head.tag_ == "VBD" or any(a.dep_ in ("aux", "auxpass") and a.tag_ == "VBD" for a in c.head.children)
        return [_attr(name, "status", status, succession if event else change, text, state=True)]
    if base == "rename" or verb == "rename":
        new = to or c.oprd or (c.objects[0] if c.passive and c.objects else None)
        if new is None:
            return None
        return [_attr(name, "name", _np_text(new), succession, text, previous=_np_text(source) if source else None)]
    if verb in _RESCHEDULE or base in _RESCHEDULE or (base in ("move", "shift") and to is not None
                                                       and _is_time(to)):
        if to is None:
            to = _first(c.preps, "for", "on", "in", "by")
        if to is None or not _is_time(to):
            return None
        return [_attr(name, None, _value_of(to), succession, text,
                      previous=_value_of(source) if source is not None else None, schedule=True)]
    if base in _FIXED_AT and c.passive and c.subjects and not _is_personish(c.subjects[0]):
        # "the marketing spend is capped at 60,000 GBP", "the deposit was set at 500 EUR"
        value = _first(c.preps, "at")
        if value is not None and _is_valueish(value) and not _is_time(value):
            return [_attr(name, None, _value_of(value), change, text, state=True)]
    # "went up to 420 EUR per night" parsed with "up to" on the amount, the amount on the verb
    climbed = next((a for a in c.head.children if a.dep_ == "npadvmod" and _is_amount(a)
                    and any(t.lower_ == "to" and t.dep_ == "quantmod" for t in a.subtree)), None)
    if base in _VALUE_CHANGE or verb in _VALUE_CHANGE or (base in ("move", "shift", "go") and (
            to is not None and (_is_amount(to) or thing.lemma_.lower() in GRADED_HEADS) or climbed is not None)):
        ranged = source if source is not None else next(
            (a for a in c.head.children if a.dep_ == "npadvmod" and _is_amount(a)), None)
        if to is None and ranged is not None and any(t.lower_ == "to" and t.dep_ == "quantmod"
                                                     for t in ranged.subtree):
            # "raised from 500 to 1,000 events", "cut by half to 0.05 percent": the parser makes
            # the range one amount (under "from", or on the verb)
            old, _, new = f" {_value_of(ranged)}".partition(" to ")
            old = "" if old.strip().lower() in ("", "up", "down") else old.strip()  # "went up to 180 EUR"
            if new and (old or ranged is not source):
                return [_attr(name, None, new, succession, text, previous=old if ranged is source else None,
                              state=True)]
        if to is None:
            return None
        return [_attr(name, None, _value_of(to), succession, text,
                      previous=_value_of(source) if source is not None else None, state=True)]
    if c.passive and base in _SCHEDULE:
        when = _first(c.preps, "for", "on", "in", "by", "at")
        if when is not None and _is_time(when):
            return [_attr(name, None, _value_of(when), change, text, schedule=True)]
    if base in ("happen", "occur", "land", "ship", "launch", "start", "begin", "end", "finish", "close", "open",
                "take") and not c.objects:
        when = _first(c.preps, "on", "in", "by", "at", "for")
        if when is not None and _is_time(when) and c.subjects and not _is_person(c.subjects[0]):
            return [_attr(name, None, _value_of(when), change, text, schedule=True)]
    if base in ("remain", "stay") and not _is_person(thing):
        # "the allotment rent remains 42 GBP per plot": a value that still holds
        held = c.attr or c.oprd or next((t for t in c.head.children if t.dep_ == "npadvmod"), None)
        if held is not None and _is_valueish(held) and not _is_time(held):
            return [_attr(name, None, _value_of(held), change, text, state=True)]
    if base == "be":
        value = c.attr or c.acomp
        if value is not None and (value.lemma_.lower() in _STATUS_WORDS or value.lower_ in _STATUS_WORDS):
            # "is active again", "is now live": the status changed
            again = any(a.dep_ == "advmod" and a.lower_ in ("again", "now") for a in [*c.head.children,
                                                                                       *value.children])
            return [_attr(name, "status", value.lower_, succession if again else change, text, state=True)]
        if value is not None and value.pos_ == "ADJ" and thing.lemma_.lower() in GRADED_HEADS:
            return [_attr(name, None, _np_text(value), change, text, state=True)]  # "the severity is high"
        if (value is not None and value.dep_ == "attr" and value.pos_ == "PROPN" and not _is_personish(thing)
                and thing.pos_ != "PROPN" and not _is_valueish(value)):
            return [_attr(name, None, _np_text(value), change, text, state=True)]  # "the plan is Business Plus"
        if value is not None and _is_valueish(value) and not _is_person(thing):
            if _is_time(value):  # "the deadline is 14 July": a date, not a state that starts
                return [_attr(name, None, _value_of(value), change, text, schedule=True)]
            return [_attr(name, None, _value_of(value), change, text, state=True)]
        when = _first(c.preps, "on", "for", "in", "at")
        if value is None and when is not None and _is_time(when) and not _is_person(thing):
            return [_attr(name, None, _value_of(when), change, text, schedule=True)]
        if c.acomp is not None and c.acomp.lemma_.lower() in ("due", "scheduled", "planned", "expected", "set",
                                                              "slated", "booked", "targeted"):
            # "the first milestone is due on 27 February"
            inner: dict[str, list[Any]] = {}
            _prep_args(c.acomp, inner)
            when = _first(inner, "on", "for", "in", "by", "at")
            if when is not None and _is_time(when) and not _is_person(thing):
                return [_attr(name, None, _value_of(when), change, text, schedule=True)]
        stands = _first(c.preps, "at")
        if value is None and stands is not None and _is_valueish(stands):
            return [_attr(name, None, _value_of(stands), change, text, state=True)]
    if base == "have" and c.objects and _is_valueish(c.objects[0]) and not _is_personish(thing) \
            and thing.pos_ != "PRON":
        # "the partner programme has 48 active partners"
        return [_attr(_np_text(c.subjects[0]) if c.subjects else name, None, _value_of(c.objects[0]), change, text,
                      state=True)]
    if base in _FIXED_AT and c.objects and not c.passive:
        # "the new contract fixes the electricity price at 128 EUR per MWh"
        value = _first(c.preps, "at")
        if value is not None and _is_valueish(value) and not _is_personish(c.objects[0]):
            return [_attr(_np_text(c.objects[0], _ATTRIBUTE_PREPS), None, _value_of(value), change, text, state=True)]
    if base in _RECORD and c.objects and not c.passive and not c.negated and not _is_personish(c.objects[0]):
        # "the Treasurer reported reserves of 212,000 GBP", "posted revenue of 3.1 million EUR":
        # the noun's "of" phrase is its value
        noun = c.objects[0]
        value = next((o for p in noun.children if p.dep_ == "prep" and p.lower_ == "of"
                      for o in p.children if o.dep_ == "pobj"), None)
        if value is not None and _is_valueish(value) and not _is_time(value):
            return [_attr(_np_text(noun, _ATTRIBUTE_PREPS - {"of"}), None, _value_of(value), change, text,
                          state=True)]
    arrives = base in ("come", "run", "settle", "level")  # verbs of a measure only with their "at"
    # ("came in at 8.1 tonnes" is a measure; "Marta came in at nine", a bare number, is an hour)
    at = _first(c.preps, "at")
    if (base in ("stand", "sit", "total", "reach", "cost", "hit", "stay", "remain", "hold", "hover", "average")
            or arrives and at is not None and _is_amount(at) and at.pos_ != "NUM") and not _is_person(thing):
        # "occupancy averaged 94 percent", "the yield came in at 8.1 tonnes", "inflation is running at 3 percent"
        value = at or (c.objects[0] if c.objects else None)
        if value is not None and _is_valueish(value):
            return [_attr(_np_text(c.subjects[0], _ATTRIBUTE_PREPS) if c.subjects else name, None, _value_of(value),
                          change, text, state=True)]
    return None


def _object_read_as_clause(c: _Clause) -> tuple[_Clause, str] | None:
    """"We cut the monthly cloud spend from 42,000 USD to 35,000 USD": the small parser takes the
    object's last noun ("spend", "cost", "budget") for a verb whose subject is the rest of the
    phrase, and leaves the value verb without an object. Then that noun ends the object and
    its from/to arguments are the verb's."""
    if c.objects or c.passive or c.head.lemma_.lower() not in _VALUE_CHANGE or c.ccomp is None:
        return None
    inner = c.ccomp
    subject = next((s for s in inner.children if s.dep_ == "nsubj" and s.right_edge.i + 1 == inner.i), None)
    if subject is None or inner.tag_ not in ("VBP", "VB", "NN") or subject.lower_ in _PRONOUNS:
        return None
    preps: dict[str, list[Any]] = {}
    _prep_args(inner, preps)
    if not any(_is_amount(t) for key in ("to", "from", "by") for t in preps.get(key) or ()):
        return None
    name = f"{_np_text(subject)} {inner.text}"
    return _Clause(inner, c.verb, c.subjects, [inner], preps, None, False, c.negated, c.no_longer, c.modal, None,
                   None, None, None, None, c.conditional), name


def _status_change(c: _Clause) -> str | None:
    """The status a clause puts its subject in: "went live", "was put on hold", "was
    cancelled", "is on hold" (a status that starts at the clause's time)."""
    subject = c.subjects[0] if c.subjects else None
    if subject is None or c.negated or subject.lower_ in _PRONOUNS or _is_person(subject) and _is_person_named(subject):
        return None
    base = c.head.lemma_.lower()
    state = c.acomp or next((a for a in c.head.children if a.dep_ == "advmod" and a.i == c.head.i + 1), None)
    if base == "go" and state is not None and state.lower_ in ("live", "dark", "offline", "online"):
        return state.lower_
    hold = _non_time(c.preps.get("on"))
    if base in ("put", "place", "be") and hold is not None and hold.lower_ == "hold" and not c.objects:
        return "on hold"
    if c.passive and not c.objects and c.agent is None and c.head.lower_ in _STATUS_WORDS:  # "is done"
        return c.head.lower_
    if c.head.tag_ == "VBG" and c.head.lower_ in _STATUS_WORDS and not c.objects and not c.preps and any(
            a.dep_ == "aux" and a.lemma_ == "be" for a in c.head.children) and not _is_person(subject):
        return c.head.lower_  # "Status: investigating" read as "the incident is investigating"
    return None


_AMOUNT = re.compile(r"^(?P<number>\D{0,3}?\d[\d.,]*)(?:\s+(?P<tail>.*))?$")


def _shared_unit(previous: str | None, value: str) -> str | None:
    """"from 900 EUR to 1,050 EUR per month", "from 19 to 24 EUR": the old value is in the new
    one's unit ("900 EUR per month", "19 EUR")."""
    old, new = _AMOUNT.match(previous or ""), _AMOUNT.match(value)
    if old is None or new is None or not new.group("tail"):
        return previous
    tail, old_tail = new.group("tail"), old.group("tail") or ""
    if tail != old_tail and (not old_tail or tail.startswith(old_tail + " ")):
        return f"{old.group('number')} {tail}"
    return previous


def _attr(name: str, facet: str | None, value: str, change: str, text: str, *, previous: str | None = None,
          schedule: bool = False, state: bool = False) -> Reading:
    if change == "negation":  # "is not planned this year": no value to hold
        return Reading("statement", subject=name, change="negation", label=text)
    attribute = f"{name} {facet}" if facet else name
    if state and not schedule:
        previous = _shared_unit(previous, value)
    if change == "negation":
        label = f"{attribute}: not {value}"
    else:
        label = f"{attribute}: {value}"
    # a date a thing is set for ("launch: 14 May"), not a duration the parser tags a date ("6.2 days")
    schedule = schedule and bool(timeparse.find_time_expressions(value, None))
    return Reading("attribute", subject=name, attribute=attribute, value=value, change=change, previous=previous,
                   label=label, features={"schedule": schedule, "state": state and not schedule})
