"""``testament ops``: the operator's commands, each one PipelineService RPC over gRPC.

    testament ops dead-letters [--limit N] [--stage S] [--version-id V] [--cursor C]
    testament ops replay WORK_ID [--attempts N] [--not-before ISO]
    testament ops resume-no-route [--mime M] | inspect [--stage S ...]
    testament ops reextract VERSION_ID | reembed [--timeout SECONDS]
    testament ops merges list [--status S] [--limit N] | apply PROPOSAL_ID | revert PROPOSAL_ID

They reach the gateway's gRPC port (``--grpc-addr``, default ``$TESTAMENT_GRPC_ADDR`` or
``127.0.0.1:8001``, the port ``make run`` opens) with an API key (``--key``, default
``$TESTAMENT_API_KEY``); the key's space is the one operated on. Reads need a ``read``
key, changes a ``write`` key. This module holds no SQL and no database access: limits,
refusals and space confinement are the service's. Each command prints the reply as JSON
(proto field names) and exits 0; a refusal prints ``{"code", "reason", "message"}`` to
stdout and exits 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from testament import Client, RPCError
from testament.pipeline.v1 import pipeline_pb2

DEFAULT_GRPC_ADDR = "127.0.0.1:8001"
REEMBED_TIMEOUT_S = 3600.0

Call = Callable[[Client, argparse.Namespace], Message]


def _dead_letters(client: Client, args: argparse.Namespace) -> Message:
    request = pipeline_pb2.ListDeadLettersRequest()
    for name in ("limit", "cursor", "stage", "version_id"):
        if getattr(args, name) is not None:
            setattr(request, name, getattr(args, name))
    return client.pipeline.ListDeadLetters(request)


def _replay(client: Client, args: argparse.Namespace) -> Message:
    request = pipeline_pb2.ReplayDeadLetterRequest(work_unit_id=args.work_id)
    if args.attempts is not None:
        request.attempts = args.attempts
    if args.not_before is not None:
        try:
            when = dt.datetime.fromisoformat(args.not_before)
        except ValueError:
            raise SystemExit(f"testament ops replay: --not-before {args.not_before!r} is not an ISO 8601 "
                             "instant") from None
        if when.tzinfo is None:
            raise SystemExit("testament ops replay: --not-before needs a UTC offset (e.g. 2026-01-01T00:00:00Z)")
        request.not_before.FromDatetime(when.astimezone(dt.UTC))
    return client.pipeline.ReplayDeadLetter(request)


def _resume_no_route(client: Client, args: argparse.Namespace) -> Message:
    request = pipeline_pb2.ResumeNoRouteRequest()
    if args.mime is not None:
        request.mime = args.mime
    return client.pipeline.ResumeNoRoute(request)


def _inspect(client: Client, args: argparse.Namespace) -> Message:
    return client.pipeline.InspectQueue(pipeline_pb2.InspectQueueRequest(stages=args.stage))


def _reextract(client: Client, args: argparse.Namespace) -> Message:
    return client.pipeline.ReextractVersion(pipeline_pb2.ReextractVersionRequest(version_id=args.version_id))


def _reembed(client: Client, args: argparse.Namespace) -> Message:
    return client.pipeline.ReembedSpace(pipeline_pb2.ReembedSpaceRequest(), timeout_s=args.timeout)


def _merges_list(client: Client, args: argparse.Namespace) -> Message:
    request = pipeline_pb2.ListMergeProposalsRequest()
    if args.status is not None:
        request.status = pipeline_pb2.MergeStatus.Value(f"MERGE_STATUS_{args.status.upper()}")
    if args.limit is not None:
        request.limit = args.limit
    return client.pipeline.ListMergeProposals(request)


def _merges_apply(client: Client, args: argparse.Namespace) -> Message:
    return client.pipeline.ApplyMerge(pipeline_pb2.ApplyMergeRequest(proposal_id=args.proposal_id))


def _merges_revert(client: Client, args: argparse.Namespace) -> Message:
    return client.pipeline.RevertMerge(pipeline_pb2.RevertMergeRequest(proposal_id=args.proposal_id))


def _run(call: Call) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        target = args.grpc_addr or os.environ.get("TESTAMENT_GRPC_ADDR") or DEFAULT_GRPC_ADDR
        key = args.key or os.environ.get("TESTAMENT_API_KEY") or None
        try:
            with Client(target, api_key=key) as client:
                reply = call(client, args)
        except RPCError as exc:
            refusal: dict[str, Any] = {"code": exc.code.name, "reason": exc.reason, "message": exc.message}
            if exc.violations:
                refusal["violations"] = exc.violations
            print(json.dumps(refusal))
            if exc.code == grpc.StatusCode.UNAVAILABLE and exc.reason is None:
                print(f"testament ops: cannot reach Testament's gRPC port at {target}; is it running? "
                      "(set --grpc-addr or TESTAMENT_GRPC_ADDR)", file=sys.stderr)
            return 1
        print(json.dumps(json_format.MessageToDict(reply, preserving_proto_field_name=True)))
        return 0

    return command


def register(sub: Any) -> None:
    """Adds ``ops`` and its subcommands to the ``testament`` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--grpc-addr", default=None,
                        help=f"the gateway's gRPC port (default $TESTAMENT_GRPC_ADDR or {DEFAULT_GRPC_ADDR})")
    common.add_argument("--key", default=None, help="API key (default $TESTAMENT_API_KEY); its space is operated on")

    p_ops = sub.add_parser("ops", help="operate the pipeline (PipelineService over gRPC)")
    ops = p_ops.add_subparsers(dest="ops_command", required=True)

    def add(name: str, call: Call, help_text: str, parent: Any = ops) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(name, help=help_text, parents=[common])
        parser.set_defaults(func=_run(call))
        return parser

    p = add("dead-letters", _dead_letters, "list dead-lettered work, newest first")
    p.add_argument("--limit", type=int, default=None, help="page size (the contract's default and bounds)")
    p.add_argument("--cursor", default=None, help="the previous page's cursor")
    p.add_argument("--stage", default=None)
    p.add_argument("--version-id", dest="version_id", default=None)
    p = add("replay", _replay, "replay one dead-lettered unit")
    p.add_argument("work_id")
    p.add_argument("--attempts", type=int, default=None)
    p.add_argument("--not-before", default=None, help="ISO 8601 instant with a UTC offset")
    p = add("resume-no-route", _resume_no_route, "release parked work whose MIME type now has a route")
    p.add_argument("--mime", default=None, help="only work parked under this MIME type")
    p = add("inspect", _inspect, "queue counts by stage, status and defer reason")
    p.add_argument("--stage", action="append", default=[], help="only this stage (repeatable)")
    p = add("reextract", _reextract, "read a version again with the configured extractor")
    p.add_argument("version_id")
    p = add("reembed", _reembed, "re-embed the key's space with the configured embedding model "
            "(all vectors switch in one transaction)")
    p.add_argument("--timeout", type=float, default=REEMBED_TIMEOUT_S, help="seconds the service may take")

    p_merges = ops.add_parser("merges", help="entity merge proposals: list, apply, revert")
    merges = p_merges.add_subparsers(dest="merges_command", required=True)
    p = add("list", _merges_list, "list merge proposals, newest first", merges)
    p.add_argument("--status", choices=["proposed", "applied", "reverted", "rejected"], default=None)
    p.add_argument("--limit", type=int, default=None)
    add("apply", _merges_apply, "apply one proposal (a redirect with a snapshot)", merges).add_argument("proposal_id")
    add("revert", _merges_revert, "revert an applied proposal from its snapshot", merges).add_argument("proposal_id")
