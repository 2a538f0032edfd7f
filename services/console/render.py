"""What a person sees: facts as a table with each window drawn as a timeline, evidence
quoted with its document, contradictions side by side, and why an answer is empty.

Pure: takes the gateway's JSON, returns rich renderables; colour only on a terminal
(rich decides from the stream), so piped output is plain text.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

TIMELINE_WIDTH = 20


def _day(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def window_text(validity: Mapping[str, Any]) -> str:
    """`2026-01-14 → 2026-06-01`, `2026-06-01 → (open)`, or `(unknown)`."""
    start, end = _day(validity.get("valid_from")), _day(validity.get("valid_until"))
    precision = validity.get("valid_precision") or "unknown"
    if start is None and end is None:
        return "(unknown)" if precision != "open" else "(always)"
    left = start.date().isoformat() if start else "?"
    right = end.date().isoformat() if end else "(open)"
    return f"{left} → {right}"


def timeline(facts: Sequence[Mapping[str, Any]], width: int = TIMELINE_WIDTH) -> list[str]:
    """One bar per fact on a shared axis: the span of every known bound, now marked."""
    now = dt.datetime.now(dt.UTC)
    bounds = [d for f in facts for d in (_day(f.get("validity", {}).get("valid_from")),
                                         _day(f.get("validity", {}).get("valid_until"))) if d]
    if not bounds:
        return ["" for _ in facts]
    lo, hi = min([*bounds, now]), max([*bounds, now])
    span = max((hi - lo).total_seconds(), 1.0)

    def col(at: dt.datetime) -> int:
        return min(width - 1, max(0, round((at - lo).total_seconds() / span * (width - 1))))

    bars = []
    for fact in facts:
        validity = fact.get("validity", {})
        start, end = _day(validity.get("valid_from")), _day(validity.get("valid_until"))
        cells = [" "] * width
        if start is None and end is None:
            bars.append("·" * width if validity.get("valid_precision") == "open" else "")
            continue
        a = col(start) if start else 0
        b = col(end) if end else width - 1
        for i in range(a, b + 1):
            cells[i] = "━"
        if start is None:
            cells[a] = "…"
        if end is None:
            cells[b] = "▶"
        cells[col(now)] = "┆" if cells[col(now)] == " " else cells[col(now)]
        bars.append("".join(cells))
    return bars


def facts_view(envelope: Mapping[str, Any]) -> RenderableType:
    facts = envelope.get("facts", [])
    if not facts:
        return negative_view(envelope)
    evidence = {e["claim_id"]: e for e in envelope.get("evidence", [])}
    sources = {s["doc_id"]: s for s in envelope.get("sources", [])}
    table = Table(title="Facts (world time; ┆ marks now)", show_lines=False, expand=False)
    table.add_column("fact", ratio=1)
    table.add_column("window", no_wrap=True)
    table.add_column("timeline", no_wrap=True)
    table.add_column("match")
    table.add_column("support", justify="right")
    for fact, bar in zip(facts, timeline(facts), strict=True):
        label = Text(fact.get("label", ""))
        if fact.get("contradiction_group"):
            label.append("  ⚠ contradicted", style="yellow")
        if (fact.get("validity") or {}).get("invalidated_at"):
            label.append("  (no longer believed)", style="dim")
        table.add_row(label, window_text(fact.get("validity") or {}), bar, fact.get("temporal_match") or "",
                      str(fact.get("evidence_count", 0)))
    parts: list[RenderableType] = [table]
    quotes = _quotes(envelope, evidence, sources)
    if quotes is not None:
        parts.append(quotes)
    contradictions = _contradictions(facts)
    if contradictions is not None:
        parts.append(contradictions)
    return Group(*parts)


def _quotes(envelope: Mapping[str, Any], evidence: Mapping[str, Any], sources: Mapping[str, Any]) -> Tree | None:
    links = envelope.get("fact_evidence", [])
    if not links:
        return None
    labels = {f["fact_id"]: f.get("label", "") for f in envelope.get("facts", [])}
    tree = Tree("Evidence")
    branches: dict[str, Tree] = {}
    for link in links:
        claim = evidence.get(link.get("claim_id"))
        if claim is None:
            continue
        branch = branches.get(link["fact_id"])
        if branch is None:
            branch = branches[link["fact_id"]] = tree.add(labels.get(link["fact_id"], link["fact_id"]))
        source = sources.get(claim.get("doc_id"), {})
        where = source.get("title") or claim.get("doc_id", "")[:8]
        said = (claim.get("asserted_at") or "")[:10]
        stance = "✗ " if link.get("stance") == "contradicts" else ""
        branch.add(Text(f"{stance}“{claim.get('source_span') or claim.get('claim_text')}” — {where}"
                        f"{', said ' + said if said else ''} [{claim.get('char_start')}:{claim.get('char_end')}]"))
    return tree


def _contradictions(facts: Sequence[Mapping[str, Any]]) -> Table | None:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for fact in facts:
        group = fact.get("contradiction_group")
        if group:
            groups.setdefault(group, []).append(fact)
    if not groups:
        return None
    table = Table(title="Contradictions, side by side")
    table.add_column("one source says")
    table.add_column("another says")
    for members in groups.values():
        others = [m.get("label", "") for m in (members[0].get("contradiction") or {}).get("co_members", [])]
        table.add_row(members[0].get("label", ""), "\n".join(others) or "\n".join(m.get("label", "")
                                                                            for m in members[1:]))
    return table


def negative_view(envelope: Mapping[str, Any]) -> RenderableType:
    negative = envelope.get("negative") or {}
    kind = negative.get("kind") or "known_empty"
    text = Text(f"No answer ({kind}): ", style="bold")
    text.append(negative.get("explanation") or "nothing in memory matches.")
    if negative.get("workaround"):
        text.append(f"\nTry: {negative['workaround']}", style="dim")
    return text


def claims_view(envelope: Mapping[str, Any]) -> RenderableType:
    evidence = envelope.get("evidence", [])
    if not evidence:
        return negative_view(envelope)
    sources = {s["doc_id"]: s for s in envelope.get("sources", [])}
    table = Table(title="What the sources said")
    table.add_column("claim")
    table.add_column("source")
    table.add_column("said on")
    for claim in evidence:
        source = sources.get(claim.get("doc_id"), {})
        table.add_row(claim.get("claim_text", ""), source.get("title") or claim.get("doc_id", "")[:8],
                      (claim.get("asserted_at") or "")[:10])
    return table


def entities_view(envelope: Mapping[str, Any]) -> RenderableType:
    entities = envelope.get("entities", [])
    if not entities:
        return negative_view(envelope)
    table = Table(title="Entities, best first")
    table.add_column("name")
    table.add_column("id")
    table.add_column("found by")
    for e in entities:
        table.add_row(e.get("canonical_name", ""), e.get("entity_id", ""), e.get("tier") or "")
    return table


def graph_view(root: str, envelope: Mapping[str, Any]) -> RenderableType:
    """The neighbourhood as a tree: each path from the root, edge labels on the way."""
    tree = Tree(Text(root, style="bold"))
    seen: set[tuple[str, ...]] = set()
    for path in envelope.get("paths", []):
        nodes = [n.get("name", "") for n in path.get("nodes", [])][1:]
        edges = [e.get("fact") or e.get("predicate", "") for e in path.get("edges", [])]
        branch = tree
        for depth, (node, edge) in enumerate(zip(nodes, edges, strict=False)):
            key = tuple(nodes[:depth + 1])
            if key in seen:
                branch = next((c for c in branch.children if getattr(c, "_key", None) == key), branch)
                continue
            seen.add(key)
            child = branch.add(Text(f"{node}  ", style="bold").append(f"({edge})", style="dim"))
            child._key = key  # type: ignore[attr-defined]
            branch = child
    if not envelope.get("paths"):
        for node in envelope.get("nodes", []):
            if node.get("hops", 0) > 0:
                tree.add(f"{node.get('name')}  ({node.get('hops')} hop{'s' if node.get('hops') != 1 else ''})")
    return tree


def sql_view(result: Mapping[str, Any]) -> RenderableType:
    if result.get("termination_reason") != "completed":
        return Text(f"{result.get('error_code')}: {result.get('error_message')}", style="bold red")
    cut = f" (truncated: {result.get('truncation_reason')})" if result.get("truncated") else ""
    table = Table(caption=f"{result.get('returned_row_count')} row(s){cut}")
    for column in result.get("columns", []):
        table.add_column(column["name"])
    for row in result.get("rows", []):
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    return table
