"""The people's commands of `testament`: ingest, ask, resolve, documents, sql, changes,
graph and completion. Human output by default, ``--json`` for scripts; exit 0, 1 when
the request failed, 2 for a usage error; one line per problem, never a traceback."""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import mimetypes
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table

from services.console import render
from services.console.remote import USAGE, CommandError, Remote

WATCH_READINESS = "testament.ingest.v1.IngestService/WatchReadiness"
WATCH_CHANGES = "testament.retrieval.v1.RetrievalService/WatchChanges"
WAIT_S = 1800.0  # how long `ingest --wait` waits for processing in all
EXAMPLES = {
    "ingest": "testament ingest notes/ --include '*.md' --wait",
    "ask": 'testament ask "Who owns the invoice exporter?" --time history',
    "resolve": "testament resolve Ravi",
    "documents": "testament documents list --limit 20",
    "sql": "testament sql 'SELECT fact_label FROM facts_current LIMIT 5'",
    "changes": "testament changes --follow",
    "graph": "testament graph 'Ravi Shanker' --hops 2",
}


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--api-url", default=None, help="the gateway (default $TESTAMENT_API_URL or :8000)")
    parser.add_argument("--key", default=None, help="API key (default $TESTAMENT_API_KEY)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def register(sub: Any) -> None:
    def add(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        parser = sub.add_parser(name, help=help_text, description=f"{help_text}\n\nexample: {EXAMPLES[name]}",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        _common(parser)
        parser.set_defaults(func=lambda args: _run(func, args))
        return parser

    p = add("ingest", "send files and folders to memory, with progress and a summary", _ingest)
    p.add_argument("paths", nargs="+", help="files or directories (walked recursively)")
    p.add_argument("--include", action="append", default=[], help="glob of files to send (repeatable)")
    p.add_argument("--exclude", action="append", default=[], help="glob of files to skip (repeatable)")
    p.add_argument("--living", action="store_true", help="later versions replace earlier claims (living mode)")
    p.add_argument("--acl", action="append", default=[], help="principal allowed to see the documents")
    p.add_argument("--wait", action="store_true", help="wait until every new version is processed")

    p = add("ask", "ask memory a question: facts with their windows, or what the sources said", _ask)
    p.add_argument("question")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--claims", action="store_true", help="claims and sources instead of facts")
    mode.add_argument("--combined", action="store_true", help="facts and claims side by side")
    p.add_argument("--time", default="current", help="current | history | at=ISO | overlap=FROM,TO")
    p.add_argument("--entity", action="append", default=[], help="anchor on this entity id (repeatable)")
    p.add_argument("--as-of-belief", default=None, metavar="ISO",
                   help="what memory believed at that instant (needs --entity; read through facts_as_of)")

    p = add("resolve", "which entities a name may mean", _resolve)
    p.add_argument("name")

    p = add("documents", "list, show or delete documents", _documents)
    p.add_argument("action", choices=["list", "show", "delete"])
    p.add_argument("doc_id", nargs="?")
    p.add_argument("--limit", type=int, default=50)

    p = add("sql", "read-only SQL over the memory_v1 views", _sql)
    p.add_argument("statement")
    p.add_argument("--params", default="[]", help="JSON array bound to $1..$n")
    p.add_argument("--max-rows", type=int, default=None)

    p = add("changes", "what memory learned, in commit order", _changes)
    p.add_argument("--follow", action="store_true", help="keep listening until interrupted")
    p.add_argument("--after", default=None, help="resume after this cursor")
    p.add_argument("--max", type=int, default=None, help="stop after this many changes")
    p.add_argument("--wait-s", type=float, default=2.0, help="without --follow: how long to listen")

    p = add("graph", "the neighbourhood of an entity as a tree", _graph)
    p.add_argument("name")
    p.add_argument("--hops", type=int, default=2)

    p_completion = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
    p_completion.add_argument("shell", choices=["bash", "zsh"])
    p_completion.set_defaults(func=_completion)


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return func(args)
    except CommandError as exc:
        print(f"testament {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"testament {args.command}: interrupted", file=sys.stderr)
        return 1


def _remote(args: argparse.Namespace) -> Remote:
    return Remote.from_args(args.api_url, args.key)


def _out(args: argparse.Namespace, document: Any, human: Callable[[Console], None]) -> int:
    if args.json:
        print(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        human(Console())
    return 0


# --- ingest ---------------------------------------------------------------------------------


def _files(paths: list[str], include: list[str], exclude: list[str]) -> Iterator[tuple[Path, str]]:
    """(file, source_ref) for every file to send; source_ref is the path as given (files)
    or below the given directory, with / separators."""
    for raw in paths:
        root = Path(raw)
        if not root.exists():
            raise CommandError(f"{raw}: no such file or directory", USAGE)
        if root.is_file():
            candidates = [(root, root.as_posix())]
        else:
            try:
                candidates = [(p, p.relative_to(root.parent).as_posix()) for p in sorted(root.rglob("*"))
                              if p.is_file()]
            except PermissionError as exc:
                raise CommandError(f"{raw}: cannot read the directory ({exc.strerror})") from None
        for path, ref in candidates:
            if include and not any(fnmatch.fnmatch(path.name, g) or fnmatch.fnmatch(ref, g) for g in include):
                continue
            if any(fnmatch.fnmatch(path.name, g) or fnmatch.fnmatch(ref, g) for g in exclude):
                continue
            yield path, ref


def _ingest(args: argparse.Namespace) -> int:
    remote = _remote(args)
    files = list(_files(args.paths, args.include, args.exclude))
    if not files:
        raise CommandError("no file matched", USAGE)
    outcomes: list[dict[str, Any]] = []
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), console=console,
                  disable=args.json or not console.is_terminal) as progress:
        task = progress.add_task("sending", total=sum(p.stat().st_size for p, _ in files))
        for path, ref in files:
            progress.update(task, description=f"sending {ref}")
            outcomes.append(_send(remote, path, ref, args))
            progress.advance(task, path.stat().st_size)
    if args.wait:
        _wait(remote, outcomes, console, quiet=args.json)
    failed = [o for o in outcomes if o["outcome"] == "failed"]

    def human(out: Console) -> None:
        table = Table(title=f"{len(outcomes)} file(s)")
        for column in ("file", "outcome", "version", "detail"):
            table.add_column(column)
        for o in outcomes:
            table.add_row(o["source_ref"], o["outcome"], (o.get("version_id") or "")[:8], o.get("detail") or "")
        out.print(table)
        counts: dict[str, int] = {}
        for o in outcomes:
            counts[o["outcome"]] = counts.get(o["outcome"], 0) + 1
        out.print(", ".join(f"{n} {k}" for k, n in sorted(counts.items())))

    _out(args, outcomes, human)
    return 1 if failed else 0


def _send(remote: Remote, path: Path, ref: str, args: argparse.Namespace) -> dict[str, Any]:
    mime = mimetypes.guess_type(path.name)[0] or ("text/markdown" if path.suffix.lower() in (".md", ".markdown")
                                                  else "application/octet-stream")
    # The file's modification time is when it said what it says (relative dates resolve against it).
    said = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    params: list[tuple[str, str]] = [("filename", path.name), ("mime", mime), ("source_kind", "file"),
                                     ("source_ref", ref), ("source_modified_at", said)]
    if args.living:
        params.append(("versioning_mode", "living"))
    params.extend(("acl", a) for a in args.acl)
    try:
        body = path.read_bytes()
    except OSError as exc:
        return {"source_ref": ref, "outcome": "failed", "detail": f"cannot read: {exc.strerror}"}
    try:
        reply = remote.call("POST", "/ingest", params=params, content=body,
                            headers={"content-type": "application/octet-stream"})
    except CommandError as exc:
        if "cannot reach" in str(exc):
            raise
        return {"source_ref": ref, "outcome": "failed", "detail": str(exc).split(": ", 1)[-1]}
    outcome = "parked" if reply.get("parked") else "created" if reply.get("created") else "unchanged"
    return {"source_ref": ref, "outcome": outcome, "doc_id": reply.get("doc_id"),
            "version_id": reply.get("version_id"),
            "detail": "no converter for this type yet (parked)" if outcome == "parked" else None}


def _wait(remote: Remote, outcomes: list[dict[str, Any]], console: Console, *, quiet: bool) -> None:
    """Processing, through the readiness watch stream, for the versions just created."""
    waiting = {o["version_id"]: o for o in outcomes if o["outcome"] == "created"}
    if not waiting:
        return
    deadline = time.monotonic() + WAIT_S
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  console=console, disable=quiet or not console.is_terminal) as progress:
        task = progress.add_task("processing", total=len(waiting))
        done_before = 0
        for start in range(0, len(waiting), 1000):
            ids = list(waiting)[start:start + 1000]
            def advance(n: int, d: int = done_before) -> None:
                progress.update(task, completed=d + n)

            last = _watch(remote, ids, deadline, advance)
            done_before += len(ids)
            _settle(waiting, last)


def _watch(remote: Remote, ids: list[str], deadline: float, on_ready: Callable[[int], None]) -> dict[str, Any]:
    """Readiness reports for ``ids`` until all are ready, one is dead-lettered, or time is up;
    the gateway caps one stream at its deadline, so the watch is opened again as needed."""
    request = {"versionIds": ids, "require": {"pipeline": True, "p1": True, "liveGraph": False, "p3": False}}
    last: dict[str, Any] = {}
    while time.monotonic() < deadline and not last.get("ready"):
        for message in remote.stream(WATCH_READINESS, request, timeout_s=deadline - time.monotonic()):
            last = message.get("report", {})
            on_ready(sum(1 for v in last.get("versions", []) if v.get("ready")))
        if any(s.get("status") == "STAGE_STATUS_DEAD_LETTER" for v in last.get("versions", [])
               for s in v.get("stages", [])):
            break
    return last


def _settle(waiting: dict[str, dict[str, Any]], last: dict[str, Any]) -> None:
    """Each waited-for file's outcome from the last report: ready, or failed naming the stage."""
    for version in last.get("versions", []):
        stages = version.get("stages", [])
        dead = [s.get("stage") for s in stages if s.get("status") == "STAGE_STATUS_DEAD_LETTER"]
        entry = waiting.get(version.get("versionId"))
        if entry is None:
            continue
        if dead:
            entry["outcome"], entry["detail"] = "failed", f"stage {dead[0]} dead-lettered"
        elif version.get("ready"):
            entry["outcome"] = "ready"


# --- ask, resolve, graph ---------------------------------------------------------------------


def parse_time(raw: str) -> dict[str, str]:
    """`current`, `history`, `at=ISO`, `overlap=FROM,TO` → the operations' time object."""
    def instant(text: str) -> str:
        try:
            value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise CommandError(f"--time: {text!r} is not an ISO 8601 date-time", USAGE) from None
        if value.tzinfo is None:
            raise CommandError(f"--time: {text!r} needs a zone (e.g. Z or +02:00)", USAGE)
        return value.isoformat()

    if raw in ("current", "history"):
        return {"mode": raw}
    kind, _, rest = raw.partition("=")
    if kind == "at" and rest:
        return {"mode": "at", "at": instant(rest)}
    if kind == "overlap" and "," in rest:
        start, end = rest.split(",", 1)
        return {"mode": "overlap", "from": instant(start), "to": instant(end)}
    raise CommandError("--time is current, history, at=ISO or overlap=FROM,TO", USAGE)


def _ask(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if not args.question.strip():
        raise CommandError("the question is empty", USAGE)
    body: dict[str, Any] = {"query": args.question}
    if args.entity:
        body["entity_ids"] = args.entity
    if args.claims:
        envelope = remote.call("POST", "/operations/claims_and_sources_context", json_body=body)
        return _out(args, envelope, lambda out: out.print(render.claims_view(envelope)))
    body["time"] = parse_time(args.time)
    if args.as_of_belief is not None:
        return _ask_as_believed(args, remote, body["time"])
    if args.combined:
        bundle = remote.call("POST", "/operations/combined_context", json_body=body)

        def both(out: Console) -> None:
            out.print(render.facts_view(bundle.get("facts", {})))
            out.print(render.claims_view(bundle.get("claims_and_sources", {})))

        return _out(args, bundle, both)
    envelope = remote.call("POST", "/operations/facts_context", json_body=body)
    return _out(args, envelope, lambda out: out.print(render.facts_view(envelope)))


BELIEVED = """SELECT fact_id, fact_kind, fact_label, valid_from, valid_until, valid_precision, ingested_at,
                      invalidated_at, temporal_match
                 FROM facts_as_of($1::timestamptz, $2::timestamptz, 1000)
                WHERE subject_entity_id = ANY($3::uuid[]) OR object_entity_id = ANY($3::uuid[])
                ORDER BY valid_from NULLS FIRST, fact_label"""


def _ask_as_believed(args: argparse.Namespace, remote: Remote, time_object: dict[str, str]) -> int:
    """Belief-time travel: the operations always answer as believed now, so this reads the
    query space's facts_as_of for the anchored entities."""
    if not args.entity:
        raise CommandError("--as-of-belief needs --entity (ids from `testament resolve`)", USAGE)
    believed = parse_time(f"at={args.as_of_belief}")["at"]
    if time_object["mode"] not in ("current", "at"):
        raise CommandError("--as-of-belief reads one world instant: --time current or at=ISO", USAGE)
    valid = time_object.get("at") or dt.datetime.now(dt.UTC).isoformat()
    result = remote.call("POST", "/query/sql", json_body={"sql": BELIEVED, "parameters": [valid, believed,
                                                                                          args.entity]})
    if result.get("termination_reason") != "completed":
        raise CommandError(f"{result.get('error_code')}: {result.get('error_message')}")
    names = [c["name"] for c in result["columns"]]
    facts = []
    for row in result["rows"]:
        cell = dict(zip(names, row, strict=True))
        facts.append({"fact_id": cell["fact_id"], "kind": cell["fact_kind"], "label": cell["fact_label"],
                      "temporal_match": cell["temporal_match"], "evidence_count": "",
                      "validity": {k: cell[k] for k in ("valid_from", "valid_until", "valid_precision",
                                                        "ingested_at", "invalidated_at")}})
    envelope = {"facts": facts, "negative": None if facts else {
        "kind": "known_empty", "explanation": f"memory held no fact about these entities as believed at {believed}"}}
    return _out(args, envelope, lambda out: out.print(render.facts_view(envelope)))


def _resolve(args: argparse.Namespace) -> int:
    envelope = _remote(args).call("POST", "/operations/resolve_entity", json_body={"name": args.name})
    return _out(args, envelope, lambda out: out.print(render.entities_view(envelope)))


def _graph(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if not 1 <= args.hops <= 4:
        raise CommandError("--hops is 1 to 4", USAGE)
    found = remote.call("POST", "/operations/resolve_entity", json_body={"name": args.name})
    entities = found.get("entities", [])
    if not entities:
        return _out(args, found, lambda out: out.print(render.negative_view(found)))
    root = entities[0]
    envelope = remote.call("POST", "/graph/neighborhood", json_body={"entity_id": root["entity_id"],
                                                                     "hops": args.hops, "include_paths": True})
    return _out(args, envelope, lambda out: out.print(render.graph_view(root["canonical_name"], envelope)))


# --- documents, sql, changes -----------------------------------------------------------------


def _documents(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if args.action == "list":
        page = remote.call("GET", "/documents", params={"limit": args.limit})

        def human(out: Console) -> None:
            table = Table(title="Documents, newest first")
            for column in ("doc_id", "title", "source", "latest", "status"):
                table.add_column(column)
            for d in page.get("documents", []):
                latest = d.get("latest") or {}
                table.add_row(d["doc_id"], d.get("title") or "", d.get("source_uri") or d.get("source_kind", ""),
                              f"v{latest.get('version_no', '?')}", latest.get("status", ""))
            out.print(table)

        return _out(args, page, human)
    if not args.doc_id:
        raise CommandError(f"documents {args.action} needs a DOC_ID", USAGE)
    if args.action == "delete":
        deleted = remote.call("DELETE", f"/documents/{args.doc_id}")
        return _out(args, deleted, lambda out: out.print(
            f"deleted {deleted.get('doc_id')}: {deleted.get('claims_retired', 0)} claim(s) retired"))
    cursor: str | None = None
    for _ in range(100):  # the listing is the only way to a document's summary
        page = remote.call("GET", "/documents", params={"limit": 200, **({"cursor": cursor} if cursor else {})})
        for d in page.get("documents", []):
            if d["doc_id"] == args.doc_id:
                def show(out: Console, shown: str = json.dumps(d)) -> None:
                    out.print_json(shown)

                return _out(args, d, show)
        cursor = page.get("cursor")
        if not cursor:
            break
    raise CommandError(f"no document {args.doc_id} (unknown, deleted, or not visible to this key)")


def _sql(args: argparse.Namespace) -> int:
    try:
        parameters = json.loads(args.params)
    except ValueError:
        raise CommandError("--params must be a JSON array", USAGE) from None
    if not isinstance(parameters, list):
        raise CommandError("--params must be a JSON array", USAGE)
    body: dict[str, Any] = {"sql": args.statement, "parameters": parameters}
    if args.max_rows is not None:
        body["max_rows"] = args.max_rows
    result = _remote(args).call("POST", "/query/sql", json_body=body)
    _out(args, result, lambda out: out.print(render.sql_view(result)))
    return 0 if result.get("termination_reason") == "completed" else 1


def _changes(args: argparse.Namespace) -> int:
    remote = _remote(args)
    cursor = args.after
    seen = 0
    console = Console()
    until = time.monotonic() + args.wait_s
    while args.follow or time.monotonic() < until:
        request = {"cursor": cursor} if cursor else {}
        for message in remote.stream(WATCH_CHANGES, request, timeout_s=None if args.follow else args.wait_s):
            seen += 1
            cursor = _show_change(args, console, message) or cursor
            if args.max is not None and seen >= args.max:
                return 0
        if not args.follow:
            break
        # the gateway ended this stream at its deadline: resume after the last change
    return 0


def _show_change(args: argparse.Namespace, console: Console, message: dict[str, Any]) -> str | None:
    """Print one change; returns its cursor."""
    if "overrun" in message:
        raise CommandError("the cursor is older than the feed keeps; re-read state and start without --after")
    change = message.get("change", {})
    event = {"cursor": change.get("cursor"), "at": change.get("at"), "id": change.get("id"),
             "kind": _wire(change.get("kind"), "CHANGE_FEED_KIND_"),
             "change": _wire(change.get("change"), "CHANGE_FEED_CHANGE_"), "label": change.get("label")}
    if args.json:
        print(json.dumps(event), flush=True)
    else:
        console.print(f"{(event['at'] or '')[:19]}  {event['change'] or '':<11} {event['kind'] or '':<11} "
                      f"{event['label'] or event['id']}", highlight=False, markup=False)
    return event["cursor"]


def _wire(value: str | None, prefix: str) -> str | None:
    """A Connect enum name as the HTTP API spells it (``CHANGE_FEED_KIND_RELATION`` → relation)."""
    return value[len(prefix):].lower() if isinstance(value, str) and value.startswith(prefix) else value


def _completion(args: argparse.Namespace) -> int:
    words = "up migrate serve keys spaces ops mcp queries ingest ask resolve documents sql changes graph completion"
    if args.shell == "bash":
        print(f'complete -W "{words}" testament')
    else:
        print(f"#compdef testament\n_arguments '1: :({words})'")
    return 0
