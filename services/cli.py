"""The ``testament`` operator command.

    testament up [--data-dir DIR] [--gateway-port PORT]   the whole stack, foreground
    testament migrate                                       apply pending migrations
    testament serve SERVICE                                 one service process
    testament keys create --scope read|ingest|write [--principal P ...] [--trusted]
    testament ops dead-letters | replay WORK_ID | resume-no-route | inspect | reembed [--space-id ID]
    testament ops merges list [--status S] | apply PROPOSAL_ID | revert PROPOSAL_ID
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


def _cmd_ops(args: argparse.Namespace) -> int:
    """Operator commands read and change the queue directly in PostgreSQL (like `remember ops`)."""
    import datetime as dt
    import uuid

    from services.pipeline.adapters.queue import PgQueue
    from services.platform.db import Database

    async def run() -> dict[str, object]:
        db = await Database.connect(_require_dsn(), min_size=1, max_size=2)
        settings = load_settings()
        queue = PgQueue(db, owner="testament-ops", lease_s=settings.worker_lease_s,
                        backoff_base_s=settings.work_retry_backoff_base_s,
                        backoff_max_s=settings.work_retry_backoff_max_s, max_attempts=settings.work_max_attempts)
        try:
            if args.ops_command == "dead-letters":
                rows = await db.fetch(
                    """SELECT w.work_id, v.doc_id, w.version_id, w.stage, w.unit_key, w.attempts, w.error_class,
                              w.last_error, w.updated_at
                         FROM work_units w JOIN document_versions v USING (version_id)
                        WHERE w.status = 'dead_letter' ORDER BY w.updated_at DESC LIMIT $1""", args.limit)
                total = await db.fetchval("SELECT count(*) FROM work_units WHERE status = 'dead_letter'")
                return {"total": total, "items": [{k: (str(v) if isinstance(v, uuid.UUID | dt.datetime) else v)
                                                   for k, v in dict(r).items()} for r in rows]}
            if args.ops_command == "replay":
                not_before = dt.datetime.fromisoformat(args.not_before) if args.not_before else None
                row = await queue.replay(uuid.UUID(args.work_id), attempts=args.attempts, not_before=not_before,
                                         space_id=None)
                if row is None:
                    raise SystemExit(f"testament ops replay: no dead-lettered work unit {args.work_id}")
                return {"work_id": str(row["work_id"]), "stage": row["stage"], "max_attempts": row["max_attempts"],
                        "not_before": row["not_before"].isoformat()}
            if args.ops_command == "reextract":
                generation = await queue.reextract(uuid.UUID(args.version_id), None)
                if generation is None:
                    raise SystemExit(f"testament ops reextract: version {args.version_id} has no finished "
                                     "extraction to redo (unknown, deleted or still processing)")
                return {"version_id": args.version_id, "generation": generation}
            if args.ops_command == "resume-no-route":
                released = await queue.resume_no_route(set(settings.conversion_routes), None)
                return {"released": [str(v) for v in released]}
            rows = await db.fetch(
                """SELECT stage, status, coalesce(defer_reason, '') AS defer_reason, count(*) AS n
                     FROM work_units GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""")
            return {"routes": [dict(r) for r in rows]}
        finally:
            await db.close()

    print(json.dumps(asyncio.run(run())))
    return 0


def _cmd_ops_reembed(args: argparse.Namespace) -> int:
    """Recompute every vector of a space with the configured embedder, switching in one transaction."""
    import uuid

    from services.pipeline.adapters.reembed import ReembedRefused, reembed_space
    from services.platform.db import Database
    from services.platform.embeddings import EmbeddingUnavailable, provider_from_settings, warm_up

    settings = load_settings()

    async def run() -> dict[str, object]:
        try:
            provider = provider_from_settings(settings)
            await warm_up(provider)
        except (ValueError, EmbeddingUnavailable) as exc:
            raise SystemExit(f"testament ops reembed: TESTAMENT_EMBEDDING_PROVIDER: {exc}") from None
        db = await Database.connect(_require_dsn(), min_size=1, max_size=1)
        try:
            async with db.acquire() as conn:
                space = (uuid.UUID(args.space_id) if args.space_id else
                         await conn.fetchval("SELECT space_id FROM spaces WHERE is_default"))
                if space is None or not await conn.fetchval("SELECT 1 FROM spaces WHERE space_id = $1", space):
                    raise SystemExit(f"testament ops reembed: no space {args.space_id}")

                def progress(table: str, done: int) -> None:
                    print(f"  {table}: {done}", file=sys.stderr, flush=True)
                try:
                    return await reembed_space(conn, space, provider.embed, provider.model,
                                               batch=settings.embed_batch_size, progress=progress)
                except ReembedRefused as exc:
                    raise SystemExit(f"testament ops reembed: {exc}") from None
        finally:
            await db.close()

    print(json.dumps(asyncio.run(run())))
    return 0


def _cmd_ops_merges(args: argparse.Namespace) -> int:
    """Merge proposals, read and changed directly in PostgreSQL. Applying is a reversible redirect."""
    import uuid

    from services.pipeline.adapters import merges
    from services.platform.db import Database

    async def run() -> tuple[int, dict[str, object]]:
        db = await Database.connect(_require_dsn(), min_size=1, max_size=1)
        try:
            if args.merges_command == "list":
                items = await merges.list_proposals(db, status=args.status, limit=args.limit)
                return 0, {"total": len(items), "items": items}
            proposal_id = uuid.UUID(args.proposal_id)
            change = merges.apply if args.merges_command == "apply" else merges.revert
            try:
                async with db.transaction() as conn:
                    return 0, await change(conn, proposal_id)
            except merges.MergeRefused as exc:
                return 1, {"proposal_id": str(proposal_id), "refused": exc.reason, "detail": exc.detail}
        finally:
            await db.close()

    code, document = asyncio.run(run())
    print(json.dumps(document))
    return code


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

    p_ops = sub.add_parser("ops", help="operate the work queue (reads PostgreSQL directly)")
    ops_sub = p_ops.add_subparsers(dest="ops_command", required=True)
    p_dead = ops_sub.add_parser("dead-letters", help="list dead-lettered work")
    p_dead.add_argument("--limit", type=int, default=20)
    p_replay = ops_sub.add_parser("replay", help="replay one dead-lettered unit")
    p_replay.add_argument("work_id")
    p_replay.add_argument("--attempts", type=int, default=None)
    p_replay.add_argument("--not-before", default=None, help="ISO 8601 instant")
    ops_sub.add_parser("resume-no-route", help="release parked work whose MIME type now has a route")
    p_reextract = ops_sub.add_parser("reextract", help="read a version again with the configured extractor")
    p_reextract.add_argument("version_id")
    ops_sub.add_parser("inspect", help="queue counts by stage, status and defer reason")
    p_reembed = ops_sub.add_parser("reembed", help="re-embed a space with the configured embedding model "
                                   "(all vectors switch in one transaction)")
    p_reembed.add_argument("--space-id", help="the space (default: the default space)")
    p_reembed.set_defaults(func=_cmd_ops_reembed)
    p_ops.set_defaults(func=_cmd_ops)
    p_merges = ops_sub.add_parser("merges", help="entity merge proposals: list, apply, revert")
    merges_sub = p_merges.add_subparsers(dest="merges_command", required=True)
    p_mlist = merges_sub.add_parser("list", help="list merge proposals")
    p_mlist.add_argument("--status", choices=["proposed", "applied", "reverted", "rejected"], default=None)
    p_mlist.add_argument("--limit", type=int, default=100)
    merges_sub.add_parser("apply", help="apply one proposal (a redirect with a snapshot)").add_argument("proposal_id")
    merges_sub.add_parser("revert", help="revert an applied proposal from its snapshot").add_argument("proposal_id")
    p_merges.set_defaults(func=_cmd_ops_merges)

    p_exposure = sub.add_parser("check-acl-exposure",
                                help="measure the recall an ACL post-filter loses on this database (read-only)")
    p_exposure.add_argument("--database-url", default=None)
    p_exposure.add_argument("--k", type=int, default=10)
    p_exposure.add_argument("--queries", type=int, default=20)
    p_exposure.set_defaults(func=_cmd_check_acl_exposure)

    args = parser.parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
