"""The ``testament`` operator command.

    testament up [--data-dir DIR] [--gateway-port PORT]   the whole stack, foreground
    testament migrate                                       apply pending migrations
    testament serve SERVICE                                 one service process
    testament keys create --scope read|ingest|write [--principal P ...] [--trusted]
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
    settings = load_settings(**overrides)
    return up(settings, data_dir=settings.data_dir, gateway_port=settings.gateway_port)


def _require_dsn() -> str:
    settings = load_settings()
    if not settings.database_url:
        print("testament: set TESTAMENT_DATABASE_URL (or DATABASE_URL)", file=sys.stderr)
        raise SystemExit(2)
    return settings.database_url


def _cmd_migrate(args: argparse.Namespace) -> int:
    from services.platform.migrations import MigrationError, migrate

    try:
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="testament", description="Testament operator command")
    sub = parser.add_subparsers(dest="command", required=True)

    p_up = sub.add_parser("up", help="start the whole stack in the foreground")
    p_up.add_argument("--data-dir", help="PostgreSQL data and objects live here (default .data)")
    p_up.add_argument("--gateway-port", type=int, help="HTTP port of the gateway (default 8000)")
    p_up.set_defaults(func=_cmd_up)

    sub.add_parser("migrate", help="apply pending migrations").set_defaults(func=_cmd_migrate)

    p_serve = sub.add_parser("serve", help="run one service process")
    p_serve.add_argument("service", choices=[*SERVICE_NAMES, "gateway"])
    p_serve.set_defaults(func=_cmd_serve)

    p_keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = p_keys.add_subparsers(dest="keys_command", required=True)
    p_create = keys_sub.add_parser("create", help="issue an API key (printed once)")
    p_create.add_argument("--scope", choices=["read", "ingest", "write"], required=True)
    p_create.add_argument("--space", default="default", help="space slug (default: default)")
    p_create.add_argument("--principal", action="append", default=[], help="repeatable")
    p_create.add_argument("--trusted", action="store_true", help="sees every document of the space")
    p_create.add_argument("--label", default="")
    p_create.set_defaults(func=_cmd_keys_create)

    args = parser.parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
