"""The ``testament`` operator command.

    testament up [--data-dir DIR] [--gateway-port PORT] [--gateway-grpc-port PORT]   the whole stack
    testament migrate [--check [--wait SECONDS]]            apply pending migrations (--check: only wait for them)
    testament serve SERVICE                                 one service process
    testament health HOST:PORT [--service NAME]             grpc.health.v1 check (exit 0 when SERVING)
    testament keys create --scope read|ingest|write [--space S] [--principal P ...] [--trusted]
    testament keys list [--space S] | revoke CREDENTIAL_ID_OR_PREFIX
    testament spaces create SLUG [--name N] | list
    testament ops dead-letters | replay WORK_ID | resume-no-route | inspect | reextract VERSION_ID | reembed
    testament ops merges list [--status S] | apply PROPOSAL_ID | revert PROPOSAL_ID   (PipelineService, gRPC)
    testament mcp [--read-only] [--transport stdio|http] [--bind 127.0.0.1:8765] [--api-url URL]
    testament queries list | author NS NAME --sql SQL --author P | approve ID --approver P | disable ID

For people (over the gateway's HTTP API; --api-url, --key, --json on each):
    testament ingest PATH... [--include GLOB] [--exclude GLOB] [--living] [--acl P] [--wait]
    testament ask "QUESTION" [--claims | --combined] [--time current|history|at=ISO|overlap=FROM,TO]
    testament resolve NAME | graph NAME [--hops N] | documents list|show|delete [DOC_ID]
    testament sql "SELECT ..." [--params JSON] | changes [--follow] [--after CURSOR] | completion bash|zsh
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from services.platform.settings import SERVICE_NAMES, load_settings


def _cmd_up(args: argparse.Namespace) -> int:
    from services.launcher import up

    overrides: dict[str, object] = {}
    if args.data_dir is not None:
        overrides["data_dir"] = Path(args.data_dir)
    if args.gateway_port is not None:
        overrides["gateway_port"] = args.gateway_port
    if args.gateway_grpc_port is not None:
        overrides["gateway_grpc_port"] = args.gateway_grpc_port
    settings = load_settings(**overrides)
    return up(settings, data_dir=settings.data_dir, gateway_port=settings.gateway_port)


def _require_dsn() -> str:
    settings = load_settings()
    if not settings.database_url:
        print("testament: set TESTAMENT_DATABASE_URL (or DATABASE_URL)", file=sys.stderr)
        raise SystemExit(2)
    return settings.database_url


def _cmd_migrate(args: argparse.Namespace) -> int:
    from services.platform.migrations import MigrationError, migrate, wait_current

    try:
        if args.check:
            missing = asyncio.run(wait_current(_require_dsn(), args.wait))
            if missing:
                print(f"testament migrate --check: not applied: {', '.join(missing)}", file=sys.stderr)
                return 1
            print(json.dumps({"pending": []}))
            return 0
        report = asyncio.run(migrate(_require_dsn()))
    except MigrationError as exc:
        print(f"testament migrate: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"applied": report.applied, "already_applied": report.already}))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import importlib

    module = "services.gateway.main" if args.service == "gateway" else f"services.{args.service}.main"
    importlib.import_module(module).main()
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    """grpc.health.v1 Check against one process (the image has no grpc_health_probe)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(args.addr) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
        except grpc.RpcError as exc:
            print(f"testament health: {args.addr}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(status)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


def _cmd_keys_create(args: argparse.Namespace) -> int:
    from services.platform.auth import Scope
    from services.platform.credentials_pg import PgCredentials
    from services.platform.db import Database

    async def create() -> dict[str, object]:
        db = await Database.connect(_require_dsn(), min_size=1, max_size=1)
        try:
            key, caller = await PgCredentials(db).create_key(
                scope=Scope(args.scope),
                space_slug=args.space,
                principals=args.principal,
                trusted=args.trusted,
                label=args.label,
            )
        finally:
            await db.close()
        return {
            "key": key,
            "credential_id": str(caller.credential_id),
            "space_id": str(caller.space_id),
            "scope": args.scope,
            "principals": sorted(caller.principals) if caller.principals is not None else None,
        }

    print(json.dumps(asyncio.run(create())))
    return 0


def _credentials_command(action):  # type: ignore[no-untyped-def]
    """Run one PgCredentials call against TESTAMENT_DATABASE_URL and print its JSON."""
    from services.platform.credentials_pg import PgCredentials
    from services.platform.db import Database

    async def run() -> object:
        db = await Database.connect(_require_dsn(), min_size=1, max_size=1)
        try:
            return await action(PgCredentials(db))
        finally:
            await db.close()

    try:
        print(json.dumps(asyncio.run(run())))
    except ValueError as exc:
        print(f"testament: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_keys_list(args: argparse.Namespace) -> int:
    return _credentials_command(lambda c: c.list_keys(args.space))


def _cmd_keys_revoke(args: argparse.Namespace) -> int:
    async def revoke(c):  # type: ignore[no-untyped-def]
        revoked = await c.revoke(args.credential)
        if revoked is None:
            raise ValueError(f"no live key with id or unique prefix {args.credential!r}")
        return {"revoked": revoked}
    return _credentials_command(revoke)


def _cmd_spaces_create(args: argparse.Namespace) -> int:
    async def create(c):  # type: ignore[no-untyped-def]
        return {"space_id": str(await c.create_space(args.slug, args.name or args.slug)), "slug": args.slug}
    return _credentials_command(create)


def _cmd_spaces_list(args: argparse.Namespace) -> int:
    return _credentials_command(lambda c: c.list_spaces())


def _cmd_check_acl_exposure(args: argparse.Namespace) -> int:
    from services.platform.db import Database
    from services.retrieval.exposure import check

    async def run() -> dict[str, object]:
        db = await Database.connect(args.database_url or _require_dsn(), min_size=1, max_size=2,
                                    query_timeout_s=120)
        try:
            return await check(db, k=args.k, queries=args.queries)
        finally:
            await db.close()

    print(json.dumps(asyncio.run(run()), indent=2))
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    import os

    from services.mcp.server import LOOPBACK, Options, run

    key = args.api_key or os.environ.get("TESTAMENT_API_KEY") or None
    if args.transport == "http":
        if args.api_key:
            print("testament mcp: over HTTP the server holds no key; callers send their own Authorization header",
                  file=sys.stderr)
            return 2
        key = None
        host = args.bind.rpartition(":")[0].strip("[]")
        if host not in LOOPBACK:
            print(f"testament mcp: --bind must be a loopback address, not {host!r}", file=sys.stderr)
            return 2
    url = args.api_url or os.environ.get("TESTAMENT_API_URL") or "http://127.0.0.1:8000"
    run(Options(api_url=url, api_key=key, read_only=args.read_only), transport=args.transport, bind=args.bind)
    return 0


def _cmd_queries(args: argparse.Namespace) -> int:
    """Saved-query authoring and review, directly in PostgreSQL (no HTTP route does this)."""
    from services.platform.db import Database
    from services.queryspace import tooling

    options = {k: v for k, v in vars(args).items() if k not in ("func", "command", "queries_command")}
    if getattr(args, "file", None):
        options["sql"] = Path(args.file).read_text()

    async def run() -> tuple[int, object]:
        db = await Database.connect(_require_dsn(), min_size=1, max_size=2)
        try:
            return await tooling.run(db, args.queries_command, options)
        finally:
            await db.close()

    code, document = asyncio.run(run())
    print(json.dumps(document, default=str))
    return code


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="testament", description="Testament: run, operate and ask the memory")
    sub = parser.add_subparsers(dest="command", required=True)

    p_up = sub.add_parser("up", help="start the whole stack in the foreground")
    p_up.add_argument("--data-dir", help="PostgreSQL data and objects live here (default .data)")
    p_up.add_argument("--gateway-port", type=int, help="HTTP port of the gateway (default 8000)")
    p_up.add_argument("--gateway-grpc-port", type=int,
                      help="the gateway's gRPC port, the one address of every RPC (default: a free port)")
    p_up.set_defaults(func=_cmd_up)

    p_migrate = sub.add_parser("migrate", help="apply pending migrations")
    p_migrate.add_argument("--check", action="store_true",
                           help="apply nothing; exit 0 once the schema is current (an init container's wait)")
    p_migrate.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                           help="with --check: keep looking this long (database unreachable counts as pending)")
    p_migrate.set_defaults(func=_cmd_migrate)

    p_serve = sub.add_parser("serve", help="run one service process")
    p_serve.add_argument("service", choices=[*SERVICE_NAMES, "gateway"])
    p_serve.set_defaults(func=_cmd_serve)

    p_health = sub.add_parser("health", help="ask one process's grpc.health.v1 (exit 0 when SERVING)")
    p_health.add_argument("addr", help="host:port of its gRPC port")
    p_health.add_argument("--service", default="", help="a service name (default: the whole process)")
    p_health.add_argument("--timeout", type=float, default=3.0)
    p_health.set_defaults(func=_cmd_health)

    p_keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = p_keys.add_subparsers(dest="keys_command", required=True)
    p_create = keys_sub.add_parser("create", help="issue an API key (printed once)")
    p_create.add_argument("--scope", choices=["read", "ingest", "write"], required=True)
    p_create.add_argument("--space", default="default", help="space slug (default: default)")
    p_create.add_argument("--principal", action="append", default=[], help="repeatable")
    p_create.add_argument("--trusted", action="store_true", help="sees every document of the space")
    p_create.add_argument("--label", default="")
    p_create.set_defaults(func=_cmd_keys_create)
    p_klist = keys_sub.add_parser("list", help="every key's prefix, space, scope and state (never the key)")
    p_klist.add_argument("--space", default=None, help="only this space slug")
    p_klist.set_defaults(func=_cmd_keys_list)
    p_revoke = keys_sub.add_parser("revoke", help="revoke a key; refused from its next request on")
    p_revoke.add_argument("credential", help="credential id, or the key's unique prefix")
    p_revoke.set_defaults(func=_cmd_keys_revoke)

    p_spaces = sub.add_parser("spaces", help="tenant spaces")
    spaces_sub = p_spaces.add_subparsers(dest="spaces_command", required=True)
    p_screate = spaces_sub.add_parser("create", help="a new space (keys are bound to one)")
    p_screate.add_argument("slug", help="^[a-z][a-z0-9-]{0,62}$")
    p_screate.add_argument("--name", default=None)
    p_screate.set_defaults(func=_cmd_spaces_create)
    spaces_sub.add_parser("list", help="every space").set_defaults(func=_cmd_spaces_list)

    from services import ops

    ops.register(sub)

    p_exposure = sub.add_parser("check-acl-exposure",
                                help="measure the recall an ACL post-filter loses on this database (read-only)")
    p_exposure.add_argument("--database-url", default=None)
    p_exposure.add_argument("--k", type=int, default=10)
    p_exposure.add_argument("--queries", type=int, default=20)
    p_exposure.set_defaults(func=_cmd_check_acl_exposure)

    p_mcp = sub.add_parser("mcp", help="serve Testament's tools to agents over MCP (stdio or Streamable HTTP)")
    p_mcp.add_argument("--read-only", action="store_true", help="hide and refuse the tools that write")
    p_mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p_mcp.add_argument("--bind", default="127.0.0.1:8765", help="HTTP transport: loopback host:port")
    p_mcp.add_argument("--api-url", default=None, help="the gateway (default $TESTAMENT_API_URL or :8000)")
    p_mcp.add_argument("--api-key", default=None, help="stdio only (default $TESTAMENT_API_KEY)")
    p_mcp.set_defaults(func=_cmd_mcp)

    p_queries = sub.add_parser("queries", help="saved queries: list, author, approve, disable (PostgreSQL)")
    queries_sub = p_queries.add_subparsers(dest="queries_command", required=True)
    p_qlist = queries_sub.add_parser("list", help="saved-query versions (default: active)")
    p_qlist.add_argument("--namespace")
    p_qlist.add_argument("--status", choices=["draft", "pending_revalidation", "active", "deprecated", "disabled",
                                              "broken"])
    p_qauthor = queries_sub.add_parser("author", help="add a draft version (validated by the guard)")
    p_qauthor.add_argument("namespace")
    p_qauthor.add_argument("name")
    source = p_qauthor.add_mutually_exclusive_group(required=True)
    source.add_argument("--sql")
    source.add_argument("--file", help="read the SQL from this file")
    p_qauthor.add_argument("--author", required=True, help="the author's principal")
    p_qauthor.add_argument("--description")
    p_qauthor.add_argument("--max-rows", type=int, dest="max_rows")
    p_qapprove = queries_sub.add_parser("approve", help="activate a version (approver must not be its author)")
    p_qapprove.add_argument("query_id")
    p_qapprove.add_argument("--approver", required=True)
    for verb in ("disable", "deprecate"):
        queries_sub.add_parser(verb, help=f"{verb} one version").add_argument("query_id")
    for p in (p_qlist, p_qauthor, p_qapprove):
        p.add_argument("--space", default="default", help="space slug (default: default)")
    p_queries.set_defaults(func=_cmd_queries)

    from services.console.commands import register

    register(sub)

    args = parser.parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
