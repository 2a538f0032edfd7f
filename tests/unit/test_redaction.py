"""PII redaction: detectors and their look-alikes, rules, actions, apply_at, exemptions, overlap merging,
offset mapping, policy validation and a pathological-input time bound."""

from __future__ import annotations

import hashlib
import hmac
import re
import time

import pytest

from services.platform.redaction import (
    DETECTORS,
    AppliedRedaction,
    RedactionPolicy,
    RedactionResult,
    RedactionRule,
    Redactor,
    detect,
    iban_valid,
    luhn_valid,
)

KEY = b"test-key"


def found(text: str, detector: str) -> list[str]:
    return [text[d.start:d.end] for d in detect(text, [detector])]


def redactor(*rules: RedactionRule, key: bytes | str | None = KEY) -> Redactor:
    return Redactor(RedactionPolicy(rules=rules), secret_key=key)


def all_detectors(action: str = "mask") -> Redactor:
    return redactor(*(RedactionRule(name=d, detector=d, action=action) for d in DETECTORS))  # type: ignore[arg-type]


# --- detectors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "bob@example.com", "bob.smith+tag@Example.co.uk", "a_b-c%d@mail-1.example.io", "X@Y.ORG",
])
def test_email_true_positives(value: str) -> None:
    assert found(f"write to {value}, thanks", "email") == [value]


@pytest.mark.parametrize("text", [
    "user@localhost", "@handle on social", "a@b", "foo@bar.c", "name@domain", "x@-bad.com", "x@bad-.com",
])
def test_email_look_alikes(text: str) -> None:
    assert found(text, "email") == []


def test_email_stops_at_sentence_dot() -> None:
    assert found("Mail bob@example.com.", "email") == ["bob@example.com"]


@pytest.mark.parametrize("value", [
    "(415) 555-0123", "415-555-0123", "415.555.0123", "1-415-555-0123", "+1 (415) 555-0123",
    "+14155550123", "+1 415 555 0123", "+44 20 7946 0958", "+49-30-1234-5678",
    "\u0664\u0661\u0665-\u0665\u0665\u0665-\u0660\u0661\u0662\u0663",  # Arabic-Indic digits
])
def test_phone_true_positives(value: str) -> None:
    assert found(f"call {value} today", "phone") == [value]


@pytest.mark.parametrize("text", [
    "415 555 0123", "415-555.0123", "4155550123", "+1.415.555.0123",       # the seed's non-matches
    "on 2024-01-15 at 10:30", "15.01.2024", "2024.01.15", "12-25-2023",    # dates
    "version 10.100.200.1234", "v2.415.555.0123", "release 1.2.3", "build 4.555.123.4567",  # versions
    "id 1415-555-0123", "415-555-01234", "415-555-0123-9", "x415-555-0123", "+1 415", "+1234567",
])
def test_phone_look_alikes(text: str) -> None:
    assert found(text, "phone") == []


def test_ssn() -> None:
    assert found("SSN 123-45-6789 and 123 45 6789.", "ssn") == ["123-45-6789", "123 45 6789"]
    for bad in ("000-12-3456", "666-12-3456", "912-34-5678", "123-00-4567", "123-45-0000",  # never issued
                "123-45 6789", "1123-45-6789", "123-45-67890", "2024-01-15", "v1.123-45-6789"):
        assert found(bad, "ssn") == [], bad


@pytest.mark.parametrize("value", [
    "4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111", "5500 0000 0000 0004",
    "3782 822463 10005", "378282246310005", "6011000990139424",
])
def test_credit_card_true_positives(value: str) -> None:
    assert found(f"card {value} on file", "credit_card") == [value]


def test_credit_card_rejects_luhn_failures_and_look_alikes() -> None:
    assert not luhn_valid("4111111111111112")
    for text in ("4111111111111112", "4111 1111 1111 1112", "order 1234567890123456", "4111 1111-1111 1111",
                 "41111111111111111111", "phone +1 415 555 0123", "2024-01-15 10:30:00"):
        assert found(text, "credit_card") == [], text


def test_credit_card_drops_a_trailing_expiry_group() -> None:
    assert found("4111 1111 1111 1111 12/25", "credit_card") == ["4111 1111 1111 1111"]


@pytest.mark.parametrize("value", [
    "DE89 3704 0044 0532 0130 00", "DE89370400440532013000", "GB82WEST12345698765432", "gb82 west 1234 5698 7654 32",
    "NL91ABNA0417164300", "MT84MALT011000012345MTLCAST001S", "FR1420041010050500013M02606",
])
def test_iban_true_positives(value: str) -> None:
    assert found(f"pay to {value} please", "iban") == [value]


def test_iban_rejects_checksum_and_length_failures() -> None:
    assert iban_valid("DE89370400440532013000")
    assert not iban_valid("DE89370400440532013001")
    for text in ("DE89 3704 0044 0532 0130 01", "DE88370400440532013000", "DE8937040044053201300",
                 "DE893704004405320130001", "ZZ89370400440532013000", "XDE89370400440532013000"):
        assert found(text, "iban") == [], text


@pytest.mark.parametrize("value", [
    "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7C",
    "sk-ant-api03-" + "aZ9" * 30,
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "pk_test_TYooMQauvdEDq54NiTphI7jx",
    "ghp_1A2b3C4d5E6f7G8h9I0jK1lM2nO3pQ4rS5tU",
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "glpat-xYz12AbC34dEf56GhI78",
    "tok_9fQ2xLm8ZpR4tW7vKb3NcY6hJ1sD",
])
def test_api_key_true_positives(value: str) -> None:
    assert found(f"key={value} ok", "api_key") == [value]


@pytest.mark.parametrize("text", [
    "my_getAccountBalanceForCustomer2",                  # a camelCase identifier behind a prefix
    "sha_" + "0123456789abcdef" * 3,                     # lower-case hex digest
    "550e8400-e29b-41d4-a716-446655440000",              # a UUID
    "sk-learn-is-nice", "AKIAiosfodnn7example", "ghp_short", "pk_test_tooShort",
    "a_" + "Ab1" * 20,                                   # prefix too short to be a prefix
    "tok_" + "aB1" * 8 + "x_y",                          # not one token
])
def test_api_key_look_alikes(text: str) -> None:
    assert found(text, "api_key") == []


def test_detect_rejects_unknown_detector() -> None:
    with pytest.raises(ValueError, match="unknown detector 'mail'"):
        detect("x", ["mail"])


# --- rules ---------------------------------------------------------------------------------------------


def test_value_group_redacts_only_that_group() -> None:
    r = redactor(RedactionRule(name="acct", pattern=r"Account:\s*(?P<value>\d+)"))
    assert r.redact_output("Account: 12345 closed", None).text == "Account: [ACCT] closed"


def test_pcre_named_group_is_normalised() -> None:
    rule = RedactionRule(name="acct", pattern=r"Account:\s*(?<value>\d+)")
    assert rule.pattern == r"Account:\s*(?P<value>\d+)"
    assert redactor(rule).redact_output("Account: 7", None).text == "Account: [ACCT]"


def test_pattern_without_value_group_redacts_the_whole_match() -> None:
    r = redactor(RedactionRule(name="order_id", pattern=r"\bORD-\d{6}\b"))
    assert r.redact_output("see ORD-123456.", None).text == "see [ORDER_ID]."


def test_value_group_that_did_not_participate_redacts_nothing() -> None:
    r = redactor(RedactionRule(name="acct", pattern=r"Account:(?:\s*(?P<value>\d+)|\s*n/a)"))
    result = r.redact_output("Account: n/a", None)
    assert (result.text, result.redactions) == ("Account: n/a", ())


@pytest.mark.parametrize(("pattern", "message"), [
    (r"Account:(?P<value>\d+", "rule 'acct': invalid regex"),
    (r"(?P<value>\d*)", "rule 'acct': regex .* matches the empty string"),
    ("", "rule 'acct': 'pattern' must be a non-empty string"),
])
def test_bad_patterns_are_refused_naming_the_rule(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RedactionRule(name="acct", pattern=pattern)


def test_rule_needs_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one of 'detector' or 'pattern'"):
        RedactionRule(name="x")
    with pytest.raises(ValueError, match="exactly one"):
        RedactionRule(name="x", detector="email", pattern="a")


# --- actions -------------------------------------------------------------------------------------------


def test_mask_uses_the_upper_cased_rule_name() -> None:
    r = redactor(RedactionRule(name="emails", detector="email"))
    result = r.redact_output("mail bob@example.com now", None)
    assert result.text == "mail [EMAILS] now"
    assert result.redactions == (AppliedRedaction("emails", "email", "mask", 5, 20, 5, 13, ("emails",)),)


def test_remove_deletes_the_span() -> None:
    r = redactor(RedactionRule(name="ssn", detector="ssn", action="remove"))
    result = r.redact_output("id 123-45-6789 end", None)
    assert result.text == "id  end"
    assert (result.redactions[0].new_start, result.redactions[0].new_end) == (3, 3)


def test_hash_token_is_keyed_truncated_hmac() -> None:
    r = redactor(RedactionRule(name="email", detector="email", action="hash"))
    text = r.redact_output("x bob@example.com", None).text
    expected = hmac.new(KEY, b"bob@example.com", hashlib.sha256).hexdigest()[:16]
    assert text == f"x [EMAIL:{expected}]"
    assert re.fullmatch(r"x \[EMAIL:[0-9a-f]{16}\]", text)


def test_hash_is_stable_normalised_and_key_dependent() -> None:
    rule = RedactionRule(name="email", detector="email", action="hash")
    a, b = redactor(rule), redactor(rule, key="another-key")
    t1 = a.redact_output("Bob@Example.com", None).text
    assert t1 == a.redact_output("bob@example.com", None).text
    assert t1 == redactor(rule).redact_output(" bob@example.com", None).text.strip()
    assert t1 != b.redact_output("bob@example.com", None).text
    assert t1 != a.redact_output("alice@example.com", None).text


def test_hash_normalises_phone_digits_and_country_code() -> None:
    r = redactor(RedactionRule(name="phone", detector="phone", action="hash"))
    forms = ["415-555-0123", "(415) 555-0123", "+1 415 555 0123", "+14155550123",
             "\u0664\u0661\u0665-\u0665\u0665\u0665-\u0660\u0661\u0662\u0663"]
    assert len({r.redact_output(f, None).text for f in forms}) == 1
    assert r.redact_output("415-555-0123", None).text == f"[PHONE:{r.hash_value('14155550123')}]"


def test_hash_of_api_key_and_patterns_is_case_sensitive_raw() -> None:
    r = redactor(RedactionRule(name="code", pattern=r"\bcode-[A-Za-z]+\b", action="hash"))
    assert r.redact_output("code-ABC", None).text != r.redact_output("code-abc", None).text


def test_hash_without_key_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="rule 'email' hashes but no redaction secret key"):
        redactor(RedactionRule(name="email", detector="email", action="hash"), key=None)
    with pytest.raises(ValueError, match="must not be empty"):
        redactor(RedactionRule(name="email", detector="email"), key="")


# --- apply_at and exemptions ---------------------------------------------------------------------------


def test_apply_at_filters_by_stage() -> None:
    r = redactor(
        RedactionRule(name="out", detector="email"),
        RedactionRule(name="in", detector="ssn", apply_at="ingest"),
        RedactionRule(name="both", detector="phone", apply_at="both"),
    )
    text = "a@b.io 123-45-6789 415-555-0123"
    assert r.redact_output(text, None).text == "[OUT] 123-45-6789 [BOTH]"
    assert r.redact_ingest(text).text == "a@b.io [IN] [BOTH]"
    assert r.active("ingest") and r.active("output")
    with pytest.raises(ValueError, match="stage 'store'"):
        r.redact(text, stage="store")  # type: ignore[arg-type]


def test_principal_exemption() -> None:
    r = redactor(RedactionRule(name="ssn", detector="ssn", unless=frozenset({"group:hr"})),
                 RedactionRule(name="email", detector="email"))
    text = "123-45-6789 a@b.io"
    assert r.redact_output(text, ["group:hr", "u:1"]).text == "123-45-6789 [EMAIL]"
    assert r.redact_output(text, ["group:eng"]).text == "[SSN] [EMAIL]"
    assert r.redact_output(text, []).text == "[SSN] [EMAIL]"
    assert r.redact_output(text, None).text == "[SSN] [EMAIL]"  # trusted callers are not exempt
    assert r.redact_ingest(text).text == text


def test_unless_only_on_output_rules() -> None:
    with pytest.raises(ValueError, match="rule 'ssn': 'unless' only applies to apply_at 'output'"):
        RedactionRule(name="ssn", detector="ssn", apply_at="both", unless=frozenset({"hr"}))


def test_policy_exemptions_fold_into_rules() -> None:
    policy = RedactionPolicy.from_dict({
        "rules": [{"name": "ssns", "detector": "ssn"}, {"name": "emails", "detector": "email"}],
        "exemptions": {"group:hr": ["ssn"], "group:support": ["emails", "ssn"]},
    })
    assert policy.rules[0].unless == frozenset({"group:hr", "group:support"})
    assert policy.rules[1].unless == frozenset({"group:support"})
    r = Redactor(policy)
    assert r.redact_output("123-45-6789 a@b.io", ["group:hr"]).text == "123-45-6789 [EMAILS]"
    assert not r.active("output", ["group:support"])


# --- merging and offsets -------------------------------------------------------------------------------


def test_overlapping_spans_merge_into_one_token() -> None:
    r = redactor(
        RedactionRule(name="contact", pattern=r"contact:\s*(?P<value>[\w@.]+ [\w\-]+)", action="hash"),
        RedactionRule(name="email", detector="email"),
    )
    result = r.redact_output("contact: bob@example.com 415-555-0123!", None)
    assert result.text == "contact: [EMAIL]!"  # mask beats hash over the union
    (applied,) = result.redactions
    assert (applied.rule, applied.start, applied.end, applied.rules) == ("email", 9, 37, ("contact", "email"))


def test_all_detectors_on_one_text_and_touching_spans_stay_separate() -> None:
    r = redactor(RedactionRule(name="a", pattern="ab"), RedactionRule(name="b", pattern="cd"))
    assert r.redact_output("abcd", None).text == "[A][B]"
    text = ("Mail bob@example.com, call (415) 555-0123, SSN 123-45-6789, card 4111 1111 1111 1111, "
            "IBAN DE89 3704 0044 0532 0130 00, key AKIAIOSFODNN7EXAMPLE.")
    assert all_detectors().redact_output(text, None).text == (
        "Mail [EMAIL], call [PHONE], SSN [SSN], card [CREDIT_CARD], IBAN [IBAN], key [API_KEY].")


def test_offset_mapping() -> None:
    r = redactor(RedactionRule(name="email", detector="email"), RedactionRule(name="ssn", detector="ssn",
                                                                              action="remove"))
    text = "Ravi (ravi@example.com) owns it; SSN 123-45-6789 ok"
    result = r.redact_output(text, None)
    assert result.text == "Ravi ([EMAIL]) owns it; SSN  ok"
    # before, between and after redactions: shifted exactly
    assert result.map_span(0, 4) == (0, 4)
    s, e = text.index("owns"), text.index("owns") + 4
    assert result.text[slice(*result.map_span(s, e))] == "owns"
    assert result.text[slice(*result.map_span(text.index("ok"), len(text)))] == "ok"
    # strictly inside a redaction: snaps outward to the whole token
    at = text.index("example")
    assert result.text[slice(*result.map_span(at, at + 7))] == "[EMAIL]"
    assert result.map_offset(at, side="start") == 6 and result.map_offset(at, side="end") == 13
    # straddling: covers the token; inside a removal: the empty span at the deletion point
    assert result.text[slice(*result.map_span(0, at))] == "Ravi ([EMAIL]"
    ssn = text.index("123")
    assert result.map_span(ssn + 1, ssn + 3) == (28, 28)
    assert [x.rule for x in result.overlapping(0, at)] == ["email"]
    with pytest.raises(ValueError):
        result.map_span(5, 4)


def test_unchanged_result_maps_identity() -> None:
    result = RedactionResult("plain")
    assert result.map_span(1, 3) == (1, 3) and not result.changed


def test_empty_policy_is_a_noop() -> None:
    r = Redactor(RedactionPolicy())
    assert r.is_noop and r.redact_output("bob@example.com", None) == RedactionResult("bob@example.com")


# --- policy from data ----------------------------------------------------------------------------------


def test_policy_from_json_round_trip() -> None:
    raw = ('{"rules": [{"name": "emails", "detector": "email", "unless": ["group:hr"]},'
           ' {"name": "acct", "pattern": "Account:\\\\s*(?P<value>\\\\d+)", "action": "hash", "apply_at": "both"}]}')
    policy = RedactionPolicy.from_json(raw)
    assert policy.needs_key
    assert RedactionPolicy.from_dict(policy.to_dict()) == policy
    assert RedactionPolicy.from_json("") == RedactionPolicy.from_json(None) == RedactionPolicy()


@pytest.mark.parametrize(("data", "message"), [
    ({"rule": []}, "unknown key 'rule'"),
    ({"rules": {}}, "'rules' must be a list"),
    ({"rules": ["email"]}, r"rules\[0\]: must be an object"),
    ({"rules": [{"detector": "email"}]}, r"rules\[0\]: missing key 'name'"),
    ({"rules": [{"name": "e", "detector": "email", "mode": "x"}]}, r"rules\[0\]: unknown key 'mode'"),
    ({"rules": [{"name": "e", "detector": "email", "action": "blur"}]}, r"rules\[0\]: .*action 'blur'"),
    ({"rules": [{"name": "e", "detector": "email", "apply_at": "never"}]}, r"rules\[0\]: .*apply_at 'never'"),
    ({"rules": [{"name": "e", "detector": 3}]}, r"rules\[0\]\.detector: must be a string"),
    ({"rules": [{"name": "e", "detector": "email", "unless": "hr"}]}, r"rules\[0\]\.unless"),
    ({"rules": [{"name": "bad name", "detector": "email"}]}, r"rules\[0\]: .*name must be"),
    ({"rules": [{"name": "e", "detector": "email"}, {"name": "e", "detector": "ssn"}]}, "duplicate rule name 'e'"),
    ({"rules": [{"name": "a", "pattern": "(?P<value>x"}]}, r"rules\[0\]: redaction rule 'a': invalid regex"),
    ({"rules": [{"name": "e", "detector": "email"}], "exemptions": {"hr": ["ssn"]}},
     r"exemptions\['hr'\]\[0\]: 'ssn' names no rule"),
    ({"rules": [{"name": "e", "detector": "email", "apply_at": "ingest"}], "exemptions": {"hr": ["e"]}},
     r"exemptions\['hr'\]\[0\]: rule 'e' applies at 'ingest'"),
    ({"exemptions": {"hr": "e"}}, r"exemptions\['hr'\]: must be a list"),
])
def test_policy_validation_names_the_bad_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RedactionPolicy.from_dict(data)


def test_bad_json_and_unknown_detector() -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        RedactionPolicy.from_json("{rules")
    policy = RedactionPolicy.from_dict({"rules": [{"name": "e", "detector": "emial"}]})
    with pytest.raises(ValueError, match="rule 'e': unknown detector 'emial'"):
        Redactor(policy)


def test_custom_detector() -> None:
    policy = RedactionPolicy.from_dict({"rules": [{"name": "person", "detector": "PERSON"}]})
    r = Redactor(policy, custom_detectors={"PERSON": lambda text: [(m.start(), m.end()) for m in
                                                                   re.finditer(r"\bRavi\b", text)]})
    assert r.redact_output("Ravi owns it", None).text == "[PERSON] owns it"
    bad = Redactor(policy, custom_detectors={"PERSON": lambda text: [(0, len(text) + 1)]})
    with pytest.raises(ValueError, match="detector 'PERSON' returned span"):
        bad.redact_output("Ravi", None)
    with pytest.raises(ValueError, match="shadows a built-in"):
        Redactor(policy, custom_detectors={"email": lambda text: []})


# --- performance ---------------------------------------------------------------------------------------


PATHOLOGICAL = [
    "1" * 10_000, "1 " * 5_000, "1-" * 5_000, "1." * 5_000, "+1 " * 3_333, "(415) " * 1_700,
    "a" * 5_000 + "@" + "a." * 2_500, "a@" * 5_000, "a." * 5_000, "x@" + "a-" * 5_000, "@" * 10_000,
    "A" * 10_000, "aB3" * 3_333, "DE89 " * 2_000, "DE12" + "1" * 9_996, "sk-" * 3_333, "tok_" + "A1b" * 3_300,
    "4111 " * 2_000, "4111-1111-" * 1_000, "gb82 " * 2_000, "_" * 10_000, "-a" * 5_000,
]


def test_pathological_inputs_finish_fast() -> None:
    r = all_detectors("hash")
    for text in PATHOLOGICAL:
        started = time.perf_counter()
        r.redact_output(text, None)
        assert time.perf_counter() - started < 0.25, text[:20]


def test_ten_kilobytes_of_prose_is_cheap() -> None:
    r = all_detectors()
    prose = ("Ravi has owned the invoice exporter since 2024-01-15; version 1.2.3 shipped on 15.01.2024 and "
             "the team met at 10:30. ") * 90
    text = prose[:9_900] + " bob@example.com 415-555-0123"
    assert len(r.redact_output(text, None).redactions) == 2
    rounds = 20
    started = time.perf_counter()
    for _ in range(rounds):
        r.redact_output(text, None)
    assert (time.perf_counter() - started) / rounds < 0.01  # ~0.5 ms typical; generous for loaded CI


def test_principals_must_not_be_a_bare_string() -> None:
    r = redactor(RedactionRule(name="ssn", detector="ssn", unless=frozenset({"h"})))
    with pytest.raises(ValueError, match="not one string"):
        r.redact_output("123-45-6789", "hr")
