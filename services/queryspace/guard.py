"""The statement guard: PostgreSQL's own parser (pglast) and an allowlist walk of the whole tree.

Nothing here is a keyword filter. The text is parsed by libpg_query (the server's grammar),
every node of the tree is visited, and a node is admitted only when its class, and what it
names, is on a list. The first failing check decides the code, in the digest's order:
statement → relations → built-ins → operators → casts → syntax → recursion → placement,
then the per-category quota. The walk collects every violation with its rank and reports
the lowest, so the order does not depend on where in the text a problem sits.

The guard is pure (no I/O): it returns an :class:`Admitted` statement that the executor
runs as the restricted role, or raises :class:`Rejected` with one of the public codes.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pglast
from pglast import ast, enums
from pglast.stream import RawStream

from services.queryspace.manifest import (
    BUILTINS,
    CAST_TYPES,
    FUNCTIONS,
    OPERATORS,
    RECURSION_DEPTH_MAX,
    SRF_MAX_PER_CATEGORY,
    VIEWS,
)

SQL_MAX_BYTES = 65_536
RESERVED_PREFIX = "__rememberstack_"

# Ranks: the digest's order of checks (lower wins).
_STATEMENT, _RELATION, _BUILTIN, _OPERATOR, _CAST, _SYNTAX, _RECURSION, _PLACEMENT, _QUOTA = range(9)
_CODE = {_STATEMENT: "statement_not_allowed", _RELATION: "relation_not_allowed", _BUILTIN: "function_not_allowed",
         _OPERATOR: "operator_not_allowed", _CAST: "operator_not_allowed", _SYNTAX: "statement_not_allowed",
         _RECURSION: "unbounded_recursion", _PLACEMENT: "function_placement_not_allowed", _QUOTA: "quota_exceeded"}

_BUILTIN_SET = frozenset(BUILTINS)
_OPERATOR_SET = frozenset(OPERATORS)
_CAST_SET = frozenset(CAST_TYPES) | {"float8", "float4", "bool", "int4", "int8", "int2", "varchar", "bpchar",
                                     "timestamptz", "timestamp"}

# Pure data/expression nodes whose children are walked generically.
_PLAIN = frozenset({
    "ResTarget", "ColumnRef", "A_Star", "A_Const", "BoolExpr", "NullTest", "BooleanTest", "CaseExpr", "CaseWhen",
    "CoalesceExpr", "MinMaxExpr", "WindowDef", "A_ArrayExpr", "A_Indirection", "A_Indices", "RowExpr",
    "CollateClause", "NamedArgExpr", "GroupingSet", "Integer", "Float", "Boolean", "String", "BitString", "Alias",
    "JoinExpr", "SortBy", "TypeName", "RangeSubselect",
})
# Refused as function_not_allowed wherever they appear (clocks, session keywords, XML/JSON builders).
_FUNCTION_LIKE = frozenset({
    "SQLValueFunction", "XmlExpr", "XmlSerialize", "RangeTableFunc", "RangeTableFuncCol", "JsonTable",
    "JsonFuncExpr", "JsonObjectConstructor", "JsonArrayConstructor", "JsonArrayQueryConstructor",
    "JsonObjectAgg", "JsonArrayAgg", "JsonParseExpr", "JsonScalarExpr", "JsonSerializeExpr", "JsonIsPredicate",
})
_SUBLINK_OK = {enums.SubLinkType.EXISTS_SUBLINK, enums.SubLinkType.ANY_SUBLINK, enums.SubLinkType.EXPR_SUBLINK,
               enums.SubLinkType.ARRAY_SUBLINK}
_AEXPR_OK = {enums.A_Expr_Kind.AEXPR_OP, enums.A_Expr_Kind.AEXPR_LIKE, enums.A_Expr_Kind.AEXPR_ILIKE,
             enums.A_Expr_Kind.AEXPR_IN, enums.A_Expr_Kind.AEXPR_BETWEEN, enums.A_Expr_Kind.AEXPR_NOT_BETWEEN,
             enums.A_Expr_Kind.AEXPR_BETWEEN_SYM, enums.A_Expr_Kind.AEXPR_NOT_BETWEEN_SYM,
             enums.A_Expr_Kind.AEXPR_NULLIF}


class Rejected(Exception):
    """A statement the guard refuses: ``code`` is one of the public error codes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Argument:
    """A public-function argument: a literal (``value``) or a placeholder (``param``), maybe cast."""

    value: Any = None
    param: int | None = None
    cast: str | None = None
    name: str | None = None


@dataclass
class PublicCall:
    """One public set-returning function used as a FROM item."""

    ordinal: int
    name: str
    category: str
    arguments: list[Argument]
    alias: ast.Alias | None
    replace: Callable[[ast.Node], None]


@dataclass
class Admitted:
    sql: str
    tree: ast.RawStmt
    views: list[str]
    functions: list[str]
    calls: list[PublicCall]
    parameter_count: int
    ordered: bool
    normalized: str
    ctes: list[str] = field(default_factory=list)

    @property
    def needs_rewrite(self) -> bool:
        return any(FUNCTIONS[c.name].service_evaluated for c in self.calls)

    def query_hash(self, parameters: Sequence[Any]) -> str:
        return query_hash(self.normalized, parameters)

    def render(self) -> str:
        """The (possibly rewritten) tree as SQL text."""
        return str(RawStream()(self.tree))


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def query_hash(normalized: str, parameters: Sequence[Any]) -> str:
    """Normalized SQL plus parameter TYPES, never values."""
    types = ",".join(json_type(p) for p in parameters)
    return hashlib.sha256(f"{normalized}\x00{types}".encode()).hexdigest()


def check_parameters(parameters: Sequence[Any], *, max_count: int, max_bytes: int) -> None:
    if len(parameters) > max_count:
        raise Rejected("invalid_parameter", f"at most {max_count} parameters are allowed ({len(parameters)} given)")
    size = len(json.dumps(list(parameters), separators=(",", ":"), default=str).encode())
    if size > max_bytes:
        raise Rejected("invalid_parameter", f"parameters exceed {max_bytes} encoded bytes ({size})")


def _name(strings: Sequence[Any] | None) -> list[str]:
    return [s.sval for s in strings or () if isinstance(s, ast.String)]


def _type_name(type_name: ast.TypeName) -> str:
    names = _name(type_name.names)
    if len(names) == 2 and names[0] == "pg_catalog":
        names = names[1:]
    return ".".join(names)


class _Walker:
    def __init__(self, parameter_count: int) -> None:
        self.violations: list[tuple[int, str]] = []
        self.views: list[str] = []
        self.functions: list[str] = []
        self.calls: list[PublicCall] = []
        self.params: set[int] = set()
        self.ctes: list[str] = []
        self.recursive_ctes = 0
        self.parameter_count = parameter_count

    def refuse(self, rank: int, message: str) -> None:
        self.violations.append((rank, message))

    def _ident(self, name: str | None) -> None:
        if name and name.lower().startswith(RESERVED_PREFIX):
            self.refuse(_STATEMENT, f"names starting with {RESERVED_PREFIX!r} are reserved")

    # -- statements --------------------------------------------------------------------

    def select(self, node: ast.SelectStmt, scope: frozenset[str], *, top: bool) -> None:
        """``top``: public functions may be FROM items of this SELECT (top level or top-level CTE body)."""
        if node.intoClause is not None:
            self.refuse(_STATEMENT, "SELECT INTO is not allowed")
        if node.lockingClause:
            self.refuse(_STATEMENT, "row-locking clauses (FOR UPDATE/SHARE) are not allowed")
        if node.withClause is not None:
            scope = self.with_clause(node.withClause, scope, top=top)
        if node.op != enums.SetOperation.SETOP_NONE:
            for arm in (node.larg, node.rarg):
                self.select(arm, scope, top=False)
        for i, item in enumerate(node.fromClause or ()):
            self.from_item(item, scope, top=top, replace=functools.partial(_set_from, node, i))
        for name in ("targetList", "distinctClause", "groupClause", "windowClause", "sortClause"):
            for child in getattr(node, name) or ():
                if isinstance(child, ast.Node):
                    self.expr(child, scope)
        for row in node.valuesLists or ():
            for child in row:
                self.expr(child, scope)
        for name in ("whereClause", "havingClause", "limitCount", "limitOffset"):
            child = getattr(node, name)
            if child is not None:
                self.expr(child, scope)

    def with_clause(self, clause: ast.WithClause, scope: frozenset[str], *, top: bool) -> frozenset[str]:
        ctes = list(clause.ctes or ())
        names = [c.ctename for c in ctes]
        for name in names:
            self._ident(name)
        self.ctes.extend(names)
        if clause.recursive:
            self.recursive_ctes += 1
            if self.recursive_ctes > 1 or len(ctes) != 1:
                self.refuse(_RECURSION, "at most one recursive CTE, alone in its WITH RECURSIVE")
            inner = scope | set(names)
            for cte in ctes:
                self.check_recursive(cte)
                if isinstance(cte.ctequery, ast.SelectStmt):
                    self.select(cte.ctequery, inner, top=False)
                else:
                    self.refuse(_STATEMENT, "a CTE must be a SELECT")
            return inner
        visible = set(scope)
        for cte in ctes:
            if cte.search_clause is not None or cte.cycle_clause is not None:
                self.refuse(_STATEMENT, "SEARCH/CYCLE clauses are not allowed")
            if isinstance(cte.ctequery, ast.SelectStmt):
                body_top = top and cte.ctequery.op == enums.SetOperation.SETOP_NONE
                self.select(cte.ctequery, frozenset(visible), top=body_top)
            else:
                self.refuse(_STATEMENT, "a CTE must be a SELECT (data-modifying CTEs are not allowed)")
            visible.add(cte.ctename)
        return frozenset(visible)

    # -- FROM --------------------------------------------------------------------------

    def from_item(self, item: ast.Node, scope: frozenset[str], *, top: bool,
                  replace: Callable[[ast.Node], None] | None = None) -> None:
        kind = type(item).__name__
        if isinstance(item, ast.RangeVar):
            self.relation(item, scope)
        elif isinstance(item, ast.JoinExpr):
            for side in ("larg", "rarg"):
                self.from_item(getattr(item, side), scope, top=top,
                               replace=lambda new, side=side, item=item: setattr(item, side, new))
            if item.quals is not None:
                self.expr(item.quals, scope)
            if item.alias is not None:
                self._ident(item.alias.aliasname)
        elif isinstance(item, ast.RangeSubselect):
            if item.alias is not None:
                self._ident(item.alias.aliasname)
            if isinstance(item.subquery, ast.SelectStmt):
                self.select(item.subquery, scope, top=False)
            else:
                self.refuse(_SYNTAX, "unsupported subquery")
        elif isinstance(item, ast.RangeFunction):
            self.range_function(item, scope, top=top, replace=replace)
        elif kind in _FUNCTION_LIKE:
            self.refuse(_BUILTIN, "table functions (XMLTABLE, JSON_TABLE) are not allowed")
        elif isinstance(item, ast.RangeTableSample):
            self.refuse(_STATEMENT, "TABLESAMPLE is not allowed")
        else:
            self.refuse(_SYNTAX, f"{kind} is not allowed in FROM")

    def relation(self, node: ast.RangeVar, scope: frozenset[str]) -> None:
        self._ident(node.relname)
        if node.alias is not None:
            self._ident(node.alias.aliasname)
        if node.catalogname is None and node.schemaname is None and node.relname in scope:
            return
        if node.catalogname is None and node.schemaname in (None, "memory_v1") and node.relname in VIEWS:
            if node.relname not in self.views:
                self.views.append(node.relname)
            return
        self.refuse(_RELATION, f"relation {_qualified(node)!r} is not in the query space")

    def range_function(self, node: ast.RangeFunction, scope: frozenset[str], *, top: bool,
                       replace: Callable[[ast.Node], None] | None) -> None:
        functions = list(node.functions or ())
        calls = [f[0] for f in functions if f and isinstance(f[0], ast.FuncCall)]
        if len(calls) != len(functions) or not calls:
            self.refuse(_SYNTAX, "unsupported FROM function")
            return
        names = [self.function_name(call) for call in calls]
        public = [n for n in names if n in FUNCTIONS]
        if len(public) != len(names):
            for call, name in zip(calls, names, strict=True):
                if name not in FUNCTIONS:
                    self.builtin(call, name, scope, from_item=True)
            return
        if node.alias is not None:
            self._ident(node.alias.aliasname)
        placement = None
        if len(calls) > 1 or node.is_rowsfrom:
            placement = "one function per FROM item (no ROWS FROM)"
        elif node.lateral:
            placement = "public functions may not be LATERAL"
        elif node.ordinality:
            placement = "public functions do not take WITH ORDINALITY"
        elif not top:
            placement = ("public functions may only be FROM items of the top-level statement or of a top-level "
                         "CTE body")
        elif any(f[1] for f in functions) or node.coldeflist:
            placement = "public functions take no column definition list"
        if placement is not None:
            self.refuse(_PLACEMENT, f"{names[0]}: {placement}")
            return
        call = calls[0]
        arguments = []
        for arg in call.args or ():
            argument = self.argument(arg)
            if argument is None:
                self.refuse(_PLACEMENT, f"{names[0]}: arguments must be literals or $n parameters")
                return
            arguments.append(argument)
        if call.agg_order or call.agg_filter or call.over or call.agg_star or call.agg_distinct or call.func_variadic:
            self.refuse(_PLACEMENT, f"{names[0]}: not a plain call")
            return
        if names[0] not in self.functions:
            self.functions.append(names[0])
        if replace is None:  # pragma: no cover - every FROM position passes one
            self.refuse(_SYNTAX, "unsupported FROM position")
            return
        self.calls.append(PublicCall(len(self.calls), names[0], FUNCTIONS[names[0]].category, arguments,
                                     node.alias, replace))

    def argument(self, node: ast.Node, cast: str | None = None, name: str | None = None) -> Argument | None:
        if isinstance(node, ast.NamedArgExpr):
            return self.argument(node.arg, cast, node.name)
        if isinstance(node, ast.TypeCast):
            type_name = _type_name(node.typeName)
            if node.typeName.arrayBounds:
                type_name += "[]"
            self.cast(node.typeName)
            return self.argument(node.arg, cast or type_name, name)
        if isinstance(node, ast.ParamRef):
            self.param(node)
            return Argument(param=node.number, cast=cast, name=name)
        if isinstance(node, ast.A_Const):
            return Argument(value=None if node.isnull else _const(node.val), cast=cast, name=name)
        if isinstance(node, ast.A_Expr) and node.kind == enums.A_Expr_Kind.AEXPR_OP and node.lexpr is None \
                and _name(node.name) == ["-"] and isinstance(node.rexpr, ast.A_Const):
            value = _const(node.rexpr.val)
            if isinstance(value, int | float):
                return Argument(value=-value, cast=cast, name=name)
        return None

    # -- expressions -------------------------------------------------------------------

    def function_name(self, call: ast.FuncCall) -> str:
        names = _name(call.funcname)
        for n in names:
            self._ident(n)
        if len(names) == 1:
            return names[0]
        if len(names) == 2 and names[0] == "pg_catalog" and names[1] not in FUNCTIONS:
            return names[1]
        if len(names) == 2 and names[0] == "memory_v1" and names[1] in FUNCTIONS:
            return names[1]
        return ".".join(names)

    def builtin(self, call: ast.FuncCall, name: str, scope: frozenset[str], *, from_item: bool = False) -> None:
        if name in FUNCTIONS:
            self.refuse(_PLACEMENT, f"{name} may only be called as a FROM item")
            return
        if name not in _BUILTIN_SET:
            self.refuse(_BUILTIN, f"function {name!r} is not allowed")
            return
        if from_item:
            self.refuse(_SYNTAX, f"built-in {name!r} may not be used as a FROM item")
            return
        if call.agg_within_group:
            self.refuse(_STATEMENT, "WITHIN GROUP is not allowed")
        if call.func_variadic:
            self.refuse(_SYNTAX, "VARIADIC calls are not allowed")
        if name not in self.functions:
            self.functions.append(name)
        for child in (*(call.args or ()), *(call.agg_order or ())):
            self.expr(child, scope)
        if call.agg_filter is not None:
            self.expr(call.agg_filter, scope)
        if call.over is not None:
            self.expr(call.over, scope)

    def cast(self, type_name: ast.TypeName) -> None:
        name = _type_name(type_name)
        if type_name.setof or type_name.pct_type or name not in _CAST_SET:
            self.refuse(_CAST, f"cast to {name!r} is not allowed")

    def param(self, node: ast.ParamRef) -> None:
        self.params.add(node.number)

    def expr(self, node: Any, scope: frozenset[str]) -> None:  # noqa: C901 - one dispatch over node classes
        if node is None:
            return
        if isinstance(node, tuple | list):
            for child in node:
                self.expr(child, scope)
            return
        if not isinstance(node, ast.Node):
            return
        kind = type(node).__name__
        if isinstance(node, ast.FuncCall):
            self.builtin(node, self.function_name(node), scope)
            return
        if isinstance(node, ast.A_Expr):
            ops = _name(node.name)
            op = ops[-1] if ops else ""
            if node.kind not in _AEXPR_OK and node.kind != enums.A_Expr_Kind.AEXPR_OP_ANY:
                self.refuse(_OPERATOR, f"{node.kind.name.removeprefix('AEXPR_')} expressions are not allowed")
                return
            elif len(ops) != 1 or (node.kind == enums.A_Expr_Kind.AEXPR_OP_ANY and op != "="):
                self.refuse(_OPERATOR, f"operator {'.'.join(ops)!r} is not allowed")
            elif node.kind == enums.A_Expr_Kind.AEXPR_OP and node.lexpr is None and op not in ("-", "+"):
                self.refuse(_OPERATOR, f"prefix operator {op!r} is not allowed")
            elif node.kind in (enums.A_Expr_Kind.AEXPR_OP, enums.A_Expr_Kind.AEXPR_OP_ANY) \
                    and op not in _OPERATOR_SET:
                self.refuse(_OPERATOR, f"operator {op!r} is not allowed")
            self.expr(node.lexpr, scope)
            self.expr(node.rexpr, scope)
            return
        if isinstance(node, ast.TypeCast):
            self.cast(node.typeName)
            self.expr(node.arg, scope)
            return
        if isinstance(node, ast.ParamRef):
            self.param(node)
            return
        if isinstance(node, ast.SubLink):
            if node.subLinkType not in _SUBLINK_OK:
                self.refuse(_OPERATOR if node.subLinkType == enums.SubLinkType.ALL_SUBLINK else _SYNTAX,
                            f"{node.subLinkType.name} subqueries are not allowed")
            if node.subLinkType == enums.SubLinkType.ANY_SUBLINK and node.operName \
                    and _name(node.operName) != ["="]:
                self.refuse(_OPERATOR, f"operator {'.'.join(_name(node.operName))!r} is not allowed with ANY")
            self.expr(node.testexpr, scope)
            if isinstance(node.subselect, ast.SelectStmt):
                self.select(node.subselect, scope, top=False)
            return
        if isinstance(node, ast.SortBy):
            if node.useOp:
                self.refuse(_OPERATOR, "ORDER BY ... USING is not allowed")
            self.expr(node.node, scope)
            return
        if isinstance(node, ast.ColumnRef):
            for f in node.fields or ():
                if isinstance(f, ast.String):
                    self._ident(f.sval)
            return
        if isinstance(node, ast.ResTarget):
            self._ident(node.name)
            self.expr(node.indirection, scope)
            self.expr(node.val, scope)
            return
        if isinstance(node, ast.SelectStmt):
            self.select(node, scope, top=False)
            return
        if isinstance(node, ast.CollateClause):
            self.expr(node.arg, scope)
            return
        if kind in _FUNCTION_LIKE:
            self.refuse(_BUILTIN, f"{_describe(kind)} is not allowed")
            return
        if kind not in _PLAIN:
            self.refuse(_SYNTAX, f"{kind} is not allowed")
            return
        for slot in type(node).__slots__:
            if slot in ("location", "alias"):
                continue
            value = getattr(node, slot, None)
            if isinstance(value, ast.Node | tuple | list):
                self.expr(value, scope)

    # -- recursion ---------------------------------------------------------------------

    def check_recursive(self, cte: ast.CommonTableExpr) -> None:
        reason = _recursion_problem(cte)
        if reason is not None:
            self.refuse(_RECURSION, reason)


def _set_from(node: ast.SelectStmt, index: int, new: ast.Node) -> None:
    items = list(node.fromClause)
    items[index] = new
    node.fromClause = tuple(items)


def _describe(kind: str) -> str:
    if kind == "SQLValueFunction":
        return "clock and session functions (CURRENT_TIMESTAMP, CURRENT_USER, ...)"
    if kind.startswith("Xml"):
        return "XML expressions"
    return "JSON constructors and JSON_TABLE"


def _qualified(node: ast.RangeVar) -> str:
    return ".".join(p for p in (node.catalogname, node.schemaname, node.relname) if p)


def _const(value: Any) -> Any:
    if isinstance(value, ast.Integer):
        return value.ival
    if isinstance(value, ast.Float):
        return float(value.fval)
    if isinstance(value, ast.Boolean):
        return bool(value.boolval)
    if isinstance(value, ast.String):
        return value.sval
    if isinstance(value, ast.BitString):
        return value.bsval
    return None


def _is_depth_ref(node: Any) -> bool:
    return isinstance(node, ast.ColumnRef) and bool(node.fields) and isinstance(node.fields[-1], ast.String) \
        and node.fields[-1].sval == "depth"


def _count_refs(node: Any, name: str) -> int:
    if isinstance(node, tuple | list):
        return sum(_count_refs(n, name) for n in node)
    if not isinstance(node, ast.Node):
        return 0
    if isinstance(node, ast.RangeVar):
        return int(node.schemaname is None and node.relname == name)
    return sum(_count_refs(getattr(node, s, None), name) for s in type(node).__slots__ if s != "location")


def _conjuncts(node: Any) -> list[Any]:
    if isinstance(node, ast.BoolExpr) and node.boolop == enums.BoolExprType.AND_EXPR:
        return [c for arg in node.args for c in _conjuncts(arg)]
    return [node]


def _recursion_problem(cte: ast.CommonTableExpr) -> str | None:  # noqa: C901 - the template, check by check
    name = cte.ctename
    body = cte.ctequery
    if cte.search_clause is not None or cte.cycle_clause is not None:
        return "SEARCH and CYCLE are not allowed"
    if not isinstance(body, ast.SelectStmt) or body.op != enums.SetOperation.SETOP_UNION:
        return "a recursive CTE must be `anchor UNION [ALL] term`"
    anchor, term = body.larg, body.rarg
    if anchor.op != enums.SetOperation.SETOP_NONE or term.op != enums.SetOperation.SETOP_NONE:
        return "a recursive CTE must be `anchor UNION [ALL] term`"
    if _count_refs(anchor, name):
        return "the anchor may not reference the CTE"
    columns = [c.sval for c in cte.aliascolnames or ()]
    targets = list(anchor.targetList or ())
    position = None
    for i, target in enumerate(targets):
        label = columns[i] if i < len(columns) else (target.name or (
            target.val.fields[-1].sval if isinstance(target.val, ast.ColumnRef)
            and isinstance(target.val.fields[-1], ast.String) else None))
        if label == "depth":
            position = i
            break
    if position is None:
        return "the anchor must set an integer `depth` column to 0"
    value = targets[position].val
    if not (isinstance(value, ast.A_Const) and isinstance(value.val, ast.Integer) and value.val.ival == 0):
        return "the anchor must set `depth` to the literal 0"
    if _count_refs(term, name) != 1:
        return "the recursive term must reference the CTE exactly once"
    for item in term.fromClause or ():
        if not _joins_only_relations(item):
            return "the recursive term may join only views and the CTE"
    if term.groupClause or term.havingClause or term.limitCount or term.distinctClause or term.windowClause:
        return "the recursive term may not aggregate, limit or deduplicate"
    term_targets = list(term.targetList or ())
    if position >= len(term_targets):
        return "the recursive term must emit `depth + 1`"
    step = term_targets[position].val
    if not (isinstance(step, ast.A_Expr) and _name(step.name) == ["+"] and (
            (_is_depth_ref(step.lexpr) and isinstance(step.rexpr, ast.A_Const) and _const(step.rexpr.val) == 1)
            or (_is_depth_ref(step.rexpr) and isinstance(step.lexpr, ast.A_Const) and _const(step.lexpr.val) == 1))):
        return "the recursive term must emit `depth + 1`"
    bound = None
    for conjunct in _conjuncts(term.whereClause):
        if isinstance(conjunct, ast.A_Expr) and conjunct.kind == enums.A_Expr_Kind.AEXPR_OP \
                and _is_depth_ref(conjunct.lexpr) and isinstance(conjunct.rexpr, ast.A_Const):
            limit = _const(conjunct.rexpr.val)
            op = _name(conjunct.name)
            if isinstance(limit, int) and op == ["<"]:
                bound = limit
            elif isinstance(limit, int) and op == ["<="]:
                bound = limit + 1
    if bound is None:
        return "the recursive term needs a top-level `depth < N` (not inside OR)"
    if bound > RECURSION_DEPTH_MAX:
        return f"recursion depth is bounded by {RECURSION_DEPTH_MAX} (`depth < {RECURSION_DEPTH_MAX}`)"
    return None


def _joins_only_relations(item: Any) -> bool:
    if isinstance(item, ast.RangeVar):
        return True
    if isinstance(item, ast.JoinExpr):
        return _joins_only_relations(item.larg) and _joins_only_relations(item.rarg)
    return False


def admit(sql: str, parameters: Sequence[Any], *, max_parameters: int = 64,
          max_parameter_bytes: int = 262_144) -> Admitted:
    """Parse and check one statement; raises :class:`Rejected` with the first failing code."""
    if len(sql.encode("utf-8", "surrogatepass")) > SQL_MAX_BYTES:
        raise Rejected("invalid_parameter", f"SQL text exceeds {SQL_MAX_BYTES} bytes")
    if "\x00" in sql:
        raise Rejected("parse_error", "the SQL text contains a NUL byte")
    check_parameters(parameters, max_count=max_parameters, max_bytes=max_parameter_bytes)
    try:
        statements = pglast.parse_sql(sql)
    except pglast.parser.ParseError as exc:
        raise Rejected("parse_error", f"syntax error: {exc.args[0] if exc.args else 'unparsable'}") from None
    except Exception:  # noqa: BLE001 - any parser failure is a parse error for the caller
        raise Rejected("parse_error", "the statement could not be parsed") from None
    if len(statements) > 1:
        raise Rejected("multiple_statements", "exactly one statement is allowed")
    if not statements:
        raise Rejected("parse_error", "empty statement")
    raw = statements[0]
    stmt = raw.stmt
    if not isinstance(stmt, ast.SelectStmt):
        raise Rejected("statement_not_allowed", f"only SELECT, VALUES or WITH ... SELECT may run, not "
                                                f"{type(stmt).__name__.removesuffix('Stmt').upper()}")
    walker = _Walker(len(parameters))
    walker.select(stmt, frozenset(), top=True)
    if walker.violations:
        rank, message = min(walker.violations, key=lambda v: v[0])
        raise Rejected(_CODE[rank], message)
    per_category: dict[str, int] = {}
    for call in walker.calls:
        per_category[call.category] = per_category.get(call.category, 0) + 1
        if per_category[call.category] > SRF_MAX_PER_CATEGORY:
            raise Rejected("quota_exceeded", f"at most {SRF_MAX_PER_CATEGORY} {call.category} function calls per "
                                             "statement")
    highest = max(walker.params, default=0)
    if walker.params != set(range(1, highest + 1)):
        raise Rejected("invalid_parameter", "placeholders must run contiguously from $1")
    if len(parameters) != highest:
        raise Rejected("invalid_parameter", f"the statement uses {highest} parameters but {len(parameters)} were "
                                            "given")
    normalized = str(RawStream()(raw))
    return Admitted(sql=sql, tree=raw, views=walker.views, functions=walker.functions, calls=walker.calls,
                    parameter_count=highest, ordered=bool(stmt.sortClause), normalized=normalized, ctes=walker.ctes)
