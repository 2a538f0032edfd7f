"""The statement guard against a hostile corpus: every statement is refused with the code
the digest names, decided by PostgreSQL's own parse and an allowlist walk of the whole tree."""

from __future__ import annotations

import random
from typing import Any

import pytest

from services.queryspace.guard import Rejected, admit
from services.queryspace.manifest import VIEWS

V = "facts_current"

_FUNCTIONS = [
    "pg_sleep(1)", "dblink('host=x', 'select 1')", "lo_import('/etc/passwd')", "lo_export(1, '/tmp/x')",
    "set_config('statement_timeout', '0', false)", "current_setting('testament.qs_space')", "pg_read_file('pg_hba')",
    "pg_ls_dir('.')", "version()", "txid_current()", "pg_backend_pid()", "random()", "now()", "clock_timestamp()",
    "statement_timestamp()", "transaction_timestamp()", "timeofday()", "pg_terminate_backend(1)",
    "pg_cancel_backend(1)", "pg_advisory_lock(1)", "nextval('change_log_pos')", "setval('change_log_pos', 1)",
    "pg_stat_file('x')", "query_to_xml('select 1', true, true, '')", "md5('x')", "gen_random_uuid()",
    "pg_notify('testament_work', 'x')", "pg_reload_conf()", "inet_server_addr()",
    "has_table_privilege('documents', 'select')", "pg_get_userbyid(10)", "row_to_json(row(1))", "to_jsonb(1)",
    "pg_typeof(1)", "string_to_array('a,b', ',')", "regexp_matches('a', 'a')", "format('%s', 1)",
    "concat('a', 'b')", "pg_catalog.pg_sleep(1)", "public.refresh_fact_support('{}', true)",
    "memory_v1_internal.ctx_space()", "memory_v1.lower('x')", "pg_catalog.semantic_claims('x', 1)",
    "\"pg_sleep\"(1)", "U&\"\\0070g_sleep\"(1)", "to_char(1, '9')", "pg_size_pretty(1::bigint)",
    "pg_current_wal_lsn()", "pg_export_snapshot()", "pg_logical_emit_message(true, 'x', 'y')",
    "pg_create_restore_point('x')", "pg_switch_wal()", "xmlparse(document '<a/>')",
]
_SESSION = ["current_date", "current_time", "current_timestamp", "localtime", "localtimestamp", "current_user",
            "session_user", "user", "current_role", "current_catalog", "current_schema"]
_RELATIONS = ["pg_class", "pg_catalog.pg_roles", "information_schema.tables", "pg_stat_activity", "pg_shadow",
              "pg_authid", "memory_v1_internal.visible_docs", "public.documents", "documents", "claims",
              "credentials", "saved_queries", "facts", "mentions", "chunks", "\"pg_class\"", "\"PG_CATALOG\".pg_class",
              "pg_catalog.pg_proc", "pg_settings", "pg_file_settings", "pg_hba_file_rules", "pg_largeobject",
              "memory_v1.documents", "memory_v2.facts_current", "other_db.memory_v1.facts_current",
              "\"facts_current \"", "pg_temp.t", "spaces", "work_units", "change_log"]
_STATEMENTS = [
    "COPY documents TO '/tmp/x'", "COPY (SELECT 1) TO PROGRAM 'id'", "INSERT INTO documents VALUES (1)",
    "UPDATE facts SET label = 'x'", "DELETE FROM claims", "CREATE TABLE x (a int)", "DROP TABLE documents",
    "ALTER TABLE documents ADD COLUMN x int", "SET statement_timeout = 0", "RESET ALL", "SHOW search_path",
    "EXPLAIN SELECT 1", "EXPLAIN ANALYZE SELECT * FROM facts_current", "PREPARE p AS SELECT 1", "EXECUTE p",
    "DO $$ BEGIN PERFORM pg_sleep(1); END $$", "CALL p()", "LISTEN x", "NOTIFY x", "VACUUM", "ANALYZE",
    "BEGIN", "COMMIT", "ROLLBACK", "GRANT ALL ON documents TO public", "TRUNCATE documents",
    "LOCK TABLE documents", "DECLARE c CURSOR FOR SELECT 1", "LOAD 'plpgsql'", "DISCARD ALL", "CHECKPOINT",
    "REFRESH MATERIALIZED VIEW x", "COMMENT ON TABLE documents IS 'x'",
    "CREATE FUNCTION f() RETURNS int AS 'select 1' LANGUAGE sql",
    "MERGE INTO documents d USING claims c ON true WHEN MATCHED THEN DELETE", "SET ROLE postgres",
    "SET SESSION AUTHORIZATION postgres", "CREATE EXTENSION dblink", "ALTER SYSTEM SET work_mem = '1GB'",
    "SELECT * INTO t FROM facts_current", "SELECT * FROM facts_current FOR UPDATE",
    "SELECT * FROM facts_current FOR SHARE", "SELECT * FROM facts_current FOR NO KEY UPDATE",
    "SELECT * FROM facts_current FOR KEY SHARE SKIP LOCKED", "SELECT * FROM claims_live TABLESAMPLE SYSTEM (10)",
    "SELECT * FROM (SELECT * FROM facts_current FOR UPDATE) x", "CREATE TEMP TABLE t AS SELECT 1",
    "CREATE VIEW v AS SELECT 1", "SELECT 1 AS __rememberstack_x", "SELECT * FROM facts_current __rememberstack_t",
    "WITH __rememberstack_a AS (SELECT 1) SELECT * FROM __rememberstack_a",
    "IMPORT FOREIGN SCHEMA x FROM SERVER y INTO z",
    "SECURITY LABEL ON TABLE documents IS 'x'", "REINDEX TABLE documents", "CLUSTER documents",
]
_HIDDEN_WRITES = [
    "WITH x AS (INSERT INTO documents DEFAULT VALUES RETURNING *) SELECT * FROM x",
    "WITH x AS (UPDATE facts SET label = 'x' RETURNING *) SELECT 1",
    "WITH x AS (DELETE FROM claims RETURNING *) SELECT count(*) FROM x",
    "WITH a AS (SELECT 1), b AS (DELETE FROM mentions RETURNING 1) SELECT * FROM a",
    "SELECT * FROM facts_current WHERE EXISTS (WITH d AS (DELETE FROM claims RETURNING 1) SELECT 1 FROM d)",
    "WITH x AS (MERGE INTO documents d USING claims c ON true WHEN MATCHED THEN DELETE RETURNING 1) SELECT 1",
]
_CASTS = ["'pg_class'::regclass", "CAST('documents' AS regclass)", "'pg_class'::regclass::oid", "1::oid",
          "'<a/>'::xml", "'{}'::json", "'x'::bytea", "'int4'::regtype", "'public'::regnamespace", "'1'::money",
          "'1.1.1.1'::inet", "'0/0'::pg_lsn", "'a'::tsvector", "'(1,1)'::point", "'a'::\"char\"", "'a'::name",
          "'pg_sleep'::regproc", "fact_id::regclass", "$1::regclass", "'x'::text::regclass",
          "ARRAY['a']::regclass[]", "'1'::pg_catalog.oid", "'1'::int4range", "'x'::cstring"]
_OPERATORS = ["fact_id IS DISTINCT FROM fact_id", "fact_label SIMILAR TO 'a%'", "1 = ALL(ARRAY[1])",
              "1 OPERATOR(pg_catalog.=) 1", "'a'::text <-> 'b'::text", "'a'::text @@ 'a'", "1 # 2", "1 | 2",
              "1 & 2", "1 << 2", "1 >> 2", "2 ^ 2", "@ -1", "~ 1", "|/ 4", "||/ 8",
              "fact_id IS NOT DISTINCT FROM fact_id", "fact_label NOT SIMILAR TO 'a'", "1 < ALL(SELECT 1)",
              "fact_label ~>~ 'a'", "1 <> ALL(ARRAY[2])", "fact_id = SOME(ARRAY[fact_id]) AND 1 < ANY(ARRAY[2])"]
_PLACEMENT = [
    "SELECT * FROM facts_current WHERE fact_label IN (SELECT claim_text FROM lexical_claims('a', 5))",
    "SELECT (SELECT count(*) FROM lexical_claims('a', 5))",
    "SELECT lexical_claims('a', 5)", "SELECT * FROM facts_current WHERE lexical_claims('a', 5) IS NULL",
    "SELECT * FROM (SELECT * FROM lexical_claims('a', 5)) x",
    "SELECT claim_id FROM lexical_claims('a', 5) UNION SELECT claim_id FROM claims_live",
    "SELECT * FROM claims_live c, LATERAL lexical_claims(c.claim_text, 5) l",
    "SELECT * FROM claims_live c WHERE EXISTS (SELECT 1 FROM semantic_claims('a', 5))",
    "SELECT * FROM lexical_claims(lower('a'), 5)", "SELECT * FROM lexical_claims('a', 2 + 3)",
    "SELECT * FROM ROWS FROM (lexical_claims('a', 5), semantic_claims('a', 5))",
    "SELECT * FROM lexical_claims('a', 5) WITH ORDINALITY",
    "WITH x AS (SELECT claim_id FROM lexical_claims('a', 5) UNION ALL SELECT claim_id FROM claims_live) SELECT 1",
    "SELECT * FROM facts_current f JOIN LATERAL graph_neighborhood($1, f.subject_entity_id) g ON true",
    "SELECT * FROM (WITH x AS (SELECT * FROM lexical_claims('a', 5)) SELECT * FROM x) y",
    "SELECT * FROM canonical_bounds(now(), now(), 'day')",
    "SELECT * FROM claims_live c, canonical_bounds(c.claim_valid_from, c.claim_valid_until, 'day') b",
    "SELECT * FROM facts_as_of((SELECT max(ingested_at) FROM facts_current), '2026-01-01'::timestamptz)",
    "SELECT * FROM fetch_chunk_bodies(ARRAY[(SELECT chunk_id FROM chunks_live LIMIT 1)])",
    "SELECT facts_as_of('2026-01-01', '2026-01-01')",
    "SELECT * FROM lexical_claims('a', 5) l(a int)",
]
_QUOTA = [
    "SELECT * FROM lexical_claims('a', 1), lexical_claims('b', 1), semantic_claims('c', 1), lexical_chunks('d', 1)",
    "SELECT * FROM canonical_bounds(NULL, NULL, 'day') a, canonical_bounds(NULL, NULL, 'day') b, "
    "canonical_bounds(NULL, NULL, 'day') c, canonical_bounds(NULL, NULL, 'day') d",
]
_RECURSION = [
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r) SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth < 100) SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth < 3 OR true) "
    "SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth < 3) "
    "CYCLE depth SET c USING p SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth < 3) "
    "SEARCH DEPTH FIRST BY depth SET o SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 1 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth < 3) SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS x UNION ALL SELECT x + 1 FROM r WHERE x < 3) SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 2 FROM r WHERE depth < 3) SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r, r r2 WHERE depth < 3) "
    "SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM (SELECT * FROM r) q WHERE depth < 3) "
    "SELECT * FROM r",
    "WITH RECURSIVE a AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM a WHERE depth < 3), "
    "b AS (SELECT 1) SELECT * FROM a",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE NOT depth >= 3) "
    "SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth INTERSECT SELECT depth + 1 FROM r WHERE depth < 3) SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth < 3) "
    "SELECT * FROM r, (WITH RECURSIVE s AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM s WHERE depth < 2) "
    "SELECT * FROM s) t",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth < 7) SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth <= 6) SELECT * FROM r",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r GROUP BY depth HAVING depth < 3) "
    "SELECT * FROM r",
]
_PARSE = ["SELEC 1", "SELECT (", "SELECT 'unterminated", "", "   ", "SELECT 1 +", "SELECT * FROM", ")",
          "SELECT '\x00'", "SELECT 1\x00; DELETE FROM claims", "SELECT \"unterminated", "SELECT $$x", "/*",
          "SELECT 1 FROM facts_current WHERE", "WITH SELECT 1"]
_MULTIPLE = ["SELECT 1; SELECT 2", "SELECT 1; DELETE FROM claims", "SELECT * FROM facts_current; DROP TABLE x",
             "SELECT 1 --\n; DELETE FROM claims", "SELECT 1 /* x */; SELECT pg_sleep(10)",
             "SELECT $$;$$; SELECT 2", "VALUES (1); VALUES (2)", "SELECT 1;;SELECT 2"]
_SYNTAX_FUNCS = ["SELECT * FROM XMLTABLE('/a' PASSING '<a/>' COLUMNS x int)",
                 "SELECT * FROM JSON_TABLE('[1]', '$[*]' COLUMNS (x int PATH '$'))",
                 "SELECT xmlelement(name a)", "SELECT json_object('a': 1)", "SELECT json_array(1, 2)",
                 "SELECT JSON_VALUE('{}', '$.a')", "SELECT xmlserialize(content '<a/>' AS text)",
                 "SELECT * FROM generate_series(1, 10)", "SELECT * FROM unnest(ARRAY[1])",
                 "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY 1)", "SELECT COLLATION FOR ('a')",
                 "SELECT overlay('abc' placing 'x' from 1)", "SELECT position('a' in 'abc')",
                 "SELECT trim(leading 'a' from 'aab')", "SELECT '{}'::jsonb IS JSON"]


def hostile_corpus() -> list[tuple[str, list[Any], str]]:
    corpus: list[tuple[str, list[Any], str]] = []
    for f in _FUNCTIONS:
        corpus.append((f"SELECT {f}", [], "function_not_allowed"))
        corpus.append((f"SELECT fact_id FROM {V} WHERE fact_label = ({f})::text", [], "function_not_allowed"))
    for s in _SESSION:
        corpus.append((f"SELECT {s}", [], "function_not_allowed"))
    for r in _RELATIONS:
        corpus.append((f"SELECT * FROM {r}", [], "relation_not_allowed"))
        corpus.append((f"SELECT * FROM {V} WHERE EXISTS (SELECT 1 FROM {r})", [], "relation_not_allowed"))
        corpus.append((f"WITH x AS (SELECT * FROM {r}) SELECT * FROM x", [], "relation_not_allowed"))
        corpus.append((f"SELECT 1 UNION ALL SELECT 1 FROM {r}", [], "relation_not_allowed"))
    corpus += [(s, [], "statement_not_allowed") for s in _STATEMENTS + _HIDDEN_WRITES]
    corpus += [(f"SELECT {c} FROM {V}", [1] if "$1" in c else [], "operator_not_allowed") for c in _CASTS]
    corpus += [(f"SELECT * FROM {V} WHERE {o}", [], "operator_not_allowed") for o in _OPERATORS]
    corpus.append((f"SELECT * FROM {V} ORDER BY fact_id USING <", [], "operator_not_allowed"))
    corpus += [(s, [str(p) for p in range(1, s.count("$1") + 1)] if "$1" in s else [],
                "function_placement_not_allowed") for s in _PLACEMENT]
    corpus += [(s, [], "quota_exceeded") for s in _QUOTA]
    corpus += [(s, [], "unbounded_recursion") for s in _RECURSION]
    corpus += [(s, [], "parse_error") for s in _PARSE]
    corpus += [(s, [], "multiple_statements") for s in _MULTIPLE]
    corpus += [(s, [], "function_not_allowed") for s in _SYNTAX_FUNCS[:7]]
    corpus += [(s, [], "function_not_allowed") for s in _SYNTAX_FUNCS[7:]]
    # huge texts, parameters and placeholders
    corpus.append(("SELECT '" + "x" * 70_000 + "'", [], "invalid_parameter"))
    corpus.append(("SELECT 1 /*" + " " * 66_000 + "*/", [], "invalid_parameter"))
    corpus.append(("SELECT $2", ["a", "b"], "invalid_parameter"))
    corpus.append(("SELECT $1", [], "invalid_parameter"))
    corpus.append(("SELECT $1, $3", ["a", "b", "c"], "invalid_parameter"))
    corpus.append(("SELECT 1", ["unused"], "invalid_parameter"))
    corpus.append(("SELECT " + ", ".join(f"${i}" for i in range(1, 66)), list(range(65)), "invalid_parameter"))
    corpus.append(("SELECT $1", ["x" * 300_000], "invalid_parameter"))
    return corpus


CORPUS = hostile_corpus()


def test_the_corpus_is_large_and_varied() -> None:
    assert len(CORPUS) >= 200
    assert len({code for _, _, code in CORPUS}) >= 10


@pytest.mark.parametrize(("sql", "params", "code"), CORPUS, ids=[f"{c}-{i}" for i, (_, _, c) in enumerate(CORPUS)])
def test_hostile_statements_are_refused_with_the_right_code(sql: str, params: list[Any], code: str) -> None:
    with pytest.raises(Rejected) as refused:
        admit(sql, params)
    assert refused.value.code == code, (sql[:200], refused.value.message)


def test_the_order_of_checks_decides_the_code() -> None:
    # statement beats relation; relation beats function; function beats operator; cast is operator
    cases = [
        ("SELECT * FROM documents FOR UPDATE", "statement_not_allowed"),
        ("SELECT pg_sleep(1) FROM documents", "relation_not_allowed"),
        ("SELECT now()::regclass", "function_not_allowed"),
        (f"SELECT 1::regclass FROM {V} WHERE fact_id IS DISTINCT FROM NULL", "operator_not_allowed"),
        ("WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r) "
         "SELECT * FROM r, lexical_claims(lower('x'), 1)", "unbounded_recursion"),
    ]
    for sql, code in cases:
        with pytest.raises(Rejected) as refused:
            admit(sql, [])
        assert refused.value.code == code, sql


def test_errors_echo_only_the_requested_name() -> None:
    with pytest.raises(Rejected) as refused:
        admit("SELECT * FROM secret_payroll_2026", [])
    assert "secret_payroll_2026" in refused.value.message
    assert "documents" not in refused.value.message


ADMISSIBLE = [
    "SELECT 1", "VALUES (1, 'a')", f"TABLE {V}", f"SELECT * FROM memory_v1.{V}",
    "SELECT fact_kind, count(*) FROM facts_current GROUP BY ROLLUP (fact_kind) HAVING count(*) > 0",
    "SELECT c.claim_text FROM claims_live c JOIN fact_claim_evidence_live e USING (claim_id) "
    "WHERE e.stance = 'supports' AND c.claim_text ILIKE '%ravi%' ORDER BY c.asserted_at DESC NULLS LAST LIMIT 5",
    "WITH RECURSIVE r AS (SELECT 0 AS depth UNION ALL SELECT depth + 1 FROM r WHERE depth < 6) SELECT * FROM r",
    "WITH RECURSIVE walk(node, depth) AS (SELECT subject_entity_id, 0 FROM graph_edges_current "
    "UNION SELECT e.object_entity_id, w.depth + 1 FROM walk w JOIN graph_edges_current e "
    "ON e.subject_entity_id = w.node WHERE w.depth < 3 AND e.predicate <> 'x') SELECT * FROM walk",
    "SELECT * FROM lexical_claims($1, 10) l JOIN claims_live c ON c.claim_id = l.claim_id",
    "SELECT * FROM facts_as_of($1::timestamptz, $2::timestamptz, 50)",
    "SELECT * FROM canonical_bounds('2026-01-01'::timestamptz, NULL, 'day')",
    "SELECT row_number() OVER (PARTITION BY fact_kind ORDER BY ingested_at) FROM facts_current",
    "SELECT CASE WHEN evidence_count > 1 THEN 'many' ELSE 'one' END, coalesce(predicate, 'obs'), "
    "greatest(1, 2), nullif(1, 2) FROM facts_current",
    "SELECT fact_id FROM facts_current WHERE fact_id = ANY($1::uuid[]) AND valid_from BETWEEN $2 AND $3",
    "SELECT 'a' COLLATE \"C\", (ARRAY[1, 2])[1], (ARRAY[1, 2])[1:1], ROW(1, 2), interval '1 day'",
    "SELECT jsonb_build_object('a', 1) -> 'a', '{\"a\":1}'::jsonb ->> 'a', date_trunc('day', ingested_at) "
    "FROM facts_current",
    "SELECT extract(year FROM ingested_at), substring(fact_label FROM 1 FOR 3), trim(fact_label) FROM facts_current",
    "SELECT 1 /* DROP TABLE documents */", "SELECT $$;DELETE FROM claims$$", "SELECT 1; -- DELETE FROM claims",
    "SELECT * FROM graph_neighborhood($1::uuid, $2::uuid, 2)",
    "SELECT count(*) FILTER (WHERE stance = 'supports') FROM fact_claim_evidence_live",
    "SELECT x.a FROM (VALUES (1), (2)) AS x(a) WHERE x.a IN (1, 2) AND NOT x.a IS NULL AND (x.a > 0) IS TRUE",
]


@pytest.mark.parametrize("sql", ADMISSIBLE)
def test_admissible_statements_pass(sql: str) -> None:
    admitted = admit(sql, [None] * sql.count("$") if "$$" not in sql else [])
    assert admitted.query_hash([None] * admitted.parameter_count)


def test_query_hash_ignores_values_and_layout_but_not_types() -> None:
    a = admit("SELECT * FROM facts_current WHERE fact_label = $1", ["x"])
    b = admit("select *\n  from facts_current   where fact_label = $1 -- note", ["y"])
    assert a.query_hash(["x"]) == b.query_hash(["y"])
    assert a.query_hash(["x"]) != a.query_hash([1])


# --- the grammar generator (also used by the property test against the database) -----------

_OPS = {"uuid": ["=", "<>"], "text": ["=", "<>", "~~", "~~*", "~", "!~~"],
        "timestamp with time zone": ["<", "<=", ">", ">=", "="], "bigint": ["=", "<", ">", "<>"],
        "integer": ["=", "<", ">", "<>"], "boolean": ["="], "real": ["<", ">"]}
_LITERAL = {"uuid": "'00000000-0000-0000-0000-000000000000'::uuid", "text": "'%a%'",
            "timestamp with time zone": "'2026-06-01T00:00:00Z'::timestamptz", "bigint": "1", "integer": "1",
            "boolean": "true", "real": "0.5"}


def generate(rng: random.Random) -> str:
    view = VIEWS[rng.choice(sorted(VIEWS))]
    usable = [c for c in view.columns if c.type in _OPS]
    picked = rng.sample(usable, k=min(len(usable), rng.randint(1, 4)))
    shape = rng.random()
    where = []
    for c in rng.sample(usable, k=min(len(usable), rng.randint(0, 3))):
        op = rng.choice(_OPS[c.type])
        where.append(rng.choice([f"v.{c.name} {op} {_LITERAL[c.type]}", f"v.{c.name} IS NULL",
                                 f"v.{c.name} IS NOT NULL"]))
    clause = (" WHERE " + rng.choice([" AND ", " OR "]).join(where)) if where else ""
    if shape < 0.3:
        key = picked[0].name
        return (f"SELECT v.{key}, count(*) AS n FROM {view.name} v{clause} GROUP BY v.{key} "
                f"ORDER BY n DESC LIMIT {rng.randint(0, 50)}")
    if shape < 0.5:
        other = VIEWS[rng.choice(sorted(VIEWS))]
        return (f"SELECT {', '.join('v.' + c.name for c in picked)} FROM {view.name} v{clause} "
                f"AND EXISTS (SELECT 1 FROM {other.name} o WHERE o.deployment_id = v.deployment_id)"
                if clause else f"SELECT v.deployment_id FROM {view.name} v WHERE v.deployment_id IN "
                f"(SELECT o.deployment_id FROM {other.name} o)")
    if shape < 0.7:
        return (f"WITH base AS (SELECT {', '.join('v.' + c.name for c in picked)} FROM {view.name} v{clause}) "
                f"SELECT * FROM base")
    return f"SELECT {', '.join('v.' + c.name for c in picked)} FROM {view.name} v{clause} ORDER BY 1 LIMIT 20"


def test_generated_statements_are_admitted() -> None:
    rng = random.Random(5)
    for _ in range(300):
        sql = generate(rng)
        admit(sql, [])


_SOUP = ["SELECT", "FROM", "WHERE", "WITH", "RECURSIVE", "AS", "UNION", "ALL", "JOIN", "ON", "LATERAL", "(", ")",
         ",", "*", "=", "<", "::", "uuid", "regclass", "$1", "$2", "1", "'x'", "NULL", "AND", "OR", "NOT", "IN",
         "EXISTS", "ORDER", "BY", "LIMIT", "GROUP", "HAVING", "count", "(*)", "lower", "now", "pg_sleep",
         "facts_current", "claims_live", "documents", "pg_class", "lexical_claims", "graph_path", "depth", "+",
         "CASE", "WHEN", "THEN", "ELSE", "END", "ARRAY", "[", "]", "->", "||", "DELETE", "INSERT", "INTO", ";",
         "FOR", "UPDATE", "VALUES", "OVER", "PARTITION", "ROW", "COLLATE", "\"C\"", "IS", "DISTINCT", "TABLE",
         "FILTER", "WITHIN", "xmlelement", "json_object", "CURRENT_USER", "TABLESAMPLE", "ONLY", "USING"]


def test_random_token_soup_is_admitted_or_refused_never_crashes() -> None:
    rng = random.Random(23)
    for _ in range(3000):
        text = " ".join(rng.choice(_SOUP) for _ in range(rng.randint(1, 25)))
        try:
            admit(text, rng.choice([[], ["a"], ["a", "b"]]))
        except Rejected:
            pass


def test_mutated_statements_are_admitted_or_refused_never_crash() -> None:
    rng = random.Random(29)
    seeds = ADMISSIBLE + [sql for sql, _, _ in CORPUS if 0 < len(sql.split()) and len(sql) < 2000]
    admitted = 0
    for _ in range(4000):
        tokens = rng.choice(seeds).split()
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(tokens))
            move = rng.random()
            if move < 0.3 and len(tokens) > 1:
                del tokens[i]
            elif move < 0.6:
                tokens.insert(i, rng.choice(_SOUP))
            else:
                j = rng.randrange(len(tokens))
                tokens[i], tokens[j] = tokens[j], tokens[i]
        text = " ".join(tokens)
        try:
            admit(text, [None] * text.count("$"))
            admitted += 1
        except Rejected:
            pass
    assert admitted > 100  # the mutations reach admissible statements too, not only parse errors
