"""No query of the services joins rows of two spaces (deploy/SCALING.md).

Every SQL statement written as a string (or an f-string, each {…} read as a constant) in
services/ that parses on its own is parsed with PostgreSQL's own
parser (pglast), and each JOIN between two tenant tables must equate the sides' `space_id`
(in ON or USING), whatever else it joins by. A join by a name, a hash or a label could
pair rows of different tenants; a join by an id alone is safe only as long as ids never
repeat across spaces, which no key declares any more (keys are (id, space_id), tests/e2e/
test_schema_distribution.py). And on a distributed PostgreSQL sharded by space_id, the
space_id equality is what makes every join a co-located, single-node one.
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator

import asyncpg
import pytest
from pglast import ast as pg
from pglast import parse_sql
from pglast.visitors import Visitor

from tests.support import REPO

GLOBAL_TABLES = {"schema_migrations", "change_log_horizon", "spaces"}


def sql_literals() -> Iterator[tuple[str, str]]:
    """(where, sql) for every plain string constant in services/ that parses as SQL."""
    for path in sorted((REPO / "services").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value.strip()
            elif isinstance(node, ast.JoinedStr):  # an f-string: each {…} read as a constant
                text = "".join(v.value if isinstance(v, ast.Constant) else "1" for v in node.values).strip()
            else:
                continue
            if text.split(None, 1)[:1] and text.split(None, 1)[0].upper() in ("SELECT", "WITH", "UPDATE",
                                                                                "DELETE", "INSERT"):
                try:
                    parse_sql(text)
                except Exception:  # noqa: BLE001, S112 - a fragment joined to others at run time
                    continue
                yield f"{path.relative_to(REPO)}:{node.lineno}", text


class Joins(Visitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.joins: list[pg.JoinExpr] = []

    def visit_RangeVar(self, ancestors, node: pg.RangeVar) -> None:  # type: ignore[no-untyped-def]
        self.aliases[node.alias.aliasname if node.alias else node.relname] = node.relname

    def visit_JoinExpr(self, ancestors, node: pg.JoinExpr) -> None:  # type: ignore[no-untyped-def]
        self.joins.append(node)


def tables_of(node: object, aliases: dict[str, str]) -> set[str]:
    found: set[str] = set()

    class Collect(Visitor):
        def visit_RangeVar(self, ancestors, rv: pg.RangeVar) -> None:  # type: ignore[no-untyped-def]
            found.add(rv.relname)

    Collect()(node)
    return found


def column_pairs(quals: object) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    pairs = []

    class Equalities(Visitor):
        def visit_A_Expr(self, ancestors, expr: pg.A_Expr) -> None:  # type: ignore[no-untyped-def]
            if [n.sval for n in expr.name or ()] == ["="] and isinstance(expr.lexpr, pg.ColumnRef) and isinstance(
                    expr.rexpr, pg.ColumnRef):
                pairs.append((tuple(f.sval for f in expr.lexpr.fields if isinstance(f, pg.String)),
                              tuple(f.sval for f in expr.rexpr.fields if isinstance(f, pg.String))))

    Equalities()(quals)
    return pairs


@pytest.fixture(scope="module")
def tenant(dsn: str) -> set[str]:
    async def read() -> set[str]:
        conn = await asyncpg.connect(dsn)
        try:
            return {r[0] for r in await conn.fetch(
                "SELECT table_name FROM information_schema.columns WHERE column_name = 'space_id' "
                "AND table_schema = 'public'")} - GLOBAL_TABLES
        finally:
            await conn.close()
    return asyncio.run(read())


def crossing_joins(statements: Iterator[tuple[str, str]], tenant: set[str]) -> tuple[int, list[str]]:
    """How many joins between tenant tables were read, and those that do not equate space_id."""
    checked, crossing = 0, []
    for where, sql in statements:
        for raw in parse_sql(sql):
            visitor = Joins()
            visitor(raw.stmt)
            for join in visitor.joins:
                left = tables_of(join.larg, visitor.aliases) & tenant
                right = tables_of(join.rarg, visitor.aliases) & tenant
                if not left or not right:
                    continue
                checked += 1
                if join.usingClause:
                    safe = "space_id" in [c.sval for c in join.usingClause]
                elif join.quals is not None and column_pairs(join.quals):
                    safe = any(a[-1] == b[-1] == "space_id" for a, b in column_pairs(join.quals))
                else:
                    safe = True  # ON true, a lateral or computed join: no column pair to judge
                if not safe:
                    crossing.append(f"{where}: {sorted(left)} JOIN {sorted(right)}")
    return checked, crossing


def test_every_join_between_tenant_tables_stays_in_one_space(tenant: set[str]) -> None:
    checked, crossing = crossing_joins(sql_literals(), tenant)
    assert checked > 40, "the scan found almost no joins: is it reading the services' SQL?"
    assert crossing == []


def test_the_scan_flags_joins_that_could_pair_two_tenants(tenant: set[str]) -> None:
    bad = [("name", "SELECT 1 FROM entities a JOIN entities b ON a.canonical_name = b.canonical_name"),
           ("hash", "SELECT 1 FROM document_versions v JOIN content_objects o USING (content_hash)"),
           ("id alone", "SELECT 1 FROM claims c JOIN chunks k ON k.chunk_id = c.chunk_id")]
    good = [("fk", "SELECT 1 FROM claims c JOIN chunks k ON k.chunk_id = c.chunk_id AND k.space_id = c.space_id"),
            ("using", "SELECT 1 FROM claims c JOIN chunks k USING (version_id, space_id)"),
            ("space", "SELECT 1 FROM entities a JOIN entities b ON a.canonical_name = b.canonical_name "
                      "AND a.space_id = b.space_id")]
    assert crossing_joins(iter(bad), tenant) == (3, ["name: ['entities'] JOIN ['entities']",
                                                     "hash: ['document_versions'] JOIN ['content_objects']",
                                                     "id alone: ['claims'] JOIN ['chunks']"])
    assert crossing_joins(iter(good), tenant) == (3, [])
