"""The code raises only ErrorInfo reasons the contract declares, and each RPC names its own.

The reasons live in proto/testament/common/v1/errors.proto (ErrorReason); each RPC's
comment ends with a ``Reasons:`` line. This test reads the services' source (AST) and
the protos' text, so a new reason fails here until it is declared and documented.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from services.platform import contract

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
PROTOS = ROOT / "proto" / "testament"

# Reasons any RPC may return (errors.proto's header) and each error class's default.
COMMON = {"CREDENTIAL_REQUIRED", "AUTHENTICATION_FAILED", "SCOPE_TOO_NARROW", "VALIDATION_FAILED",
          "DEADLINE_EXCEEDED", "DB_UNAVAILABLE", "TRANSACTION_CONFLICT", "ALREADY_EXISTS",
          "INVALID_VALUE", "INTERNAL", "NOT_BUILT"}
# Where a service's own reasons are raised: its package, or (deployment) one platform module.
OWNER = {"ingest": "IngestService", "pipeline": "PipelineService", "retrieval": "RetrievalService",
         "graph": "GraphService", "queryspace": "QuerySpaceService",
         "platform/deployment.py": "DeploymentService", "platform/credentials_pg.py": "DeploymentService"}
# The only places a reason is not a literal: forwarding one already raised.
FORWARDED = {("platform/interceptors.py", "exc.reason"), ("queryspace/app.py", "reason")}


def _error_classes(trees: dict[str, ast.Module]) -> set[str]:
    names = {"TestamentError", "ErrorInfo"}
    while True:
        more = {node.name for tree in trees.values() for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef)
                and any(isinstance(b, ast.Name | ast.Attribute) and ast.unparse(b).split(".")[-1] in names
                        for b in node.bases)}
        if more <= names:
            return names
        names |= more


def _raised() -> tuple[dict[str, set[str]], list[str]]:
    """reason -> files raising it (relative to services/), and the non-literal reasons."""
    trees = {str(p.relative_to(SERVICES)): ast.parse(p.read_text()) for p in SERVICES.rglob("*.py")}
    errors = _error_classes(trees)
    found: dict[str, set[str]] = defaultdict(set)
    dynamic = []
    for rel, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in errors:
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and [ast.unparse(t) for t in stmt.targets] == ["reason"]
                            and isinstance(stmt.value, ast.Constant)):
                        found[stmt.value.value].add(rel)
            if not isinstance(node, ast.Call):
                continue
            callee = ast.unparse(node.func).split(".")[-1]
            for keyword in node.keywords:
                if keyword.arg != "reason" or (callee not in errors and not callee.startswith("_")):
                    continue
                if isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
                    found[keyword.value.value].add(rel)
                elif (rel, ast.unparse(keyword.value)) not in FORWARDED and callee in errors:
                    dynamic.append(f"{rel}:{node.lineno} {ast.unparse(keyword.value)}")
    return found, dynamic


def _documented() -> dict[str, dict[str, list[str]]]:
    """service -> rpc -> the reasons its comment's ``Reasons:`` line names."""
    services: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PROTOS.rglob("*.proto")):
        service = None
        comment: list[str] = []
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if match := re.match(r"service (\w+) \{", stripped):
                service = match.group(1)
                services[service] = {}
            if stripped.startswith("//"):
                comment.append(stripped[2:].strip())
                continue
            if (match := re.match(r"rpc (\w+)\(", stripped)) and service:
                text = " ".join(comment)
                listed = text.partition("Reasons:")[2]
                assert listed, f"{service}.{match.group(1)} has no `Reasons:` line in {path.name}"
                names = [] if listed.startswith(" only the common") else re.findall(r"[A-Z][A-Z0-9_]+", listed)
                services[service][match.group(1)] = names
            comment = []
    return services


def test_the_code_raises_only_declared_reasons() -> None:
    found, dynamic = _raised()
    assert dynamic == [], "reasons must be literal strings so they can be checked"
    undeclared = {r: sorted(f) for r, f in found.items() if r not in contract.error_reasons()}
    assert undeclared == {}


def test_every_declared_reason_is_raised_somewhere() -> None:
    found, _ = _raised()
    assert sorted(contract.error_reasons() - set(found)) == []


def test_every_rpc_names_only_declared_reasons() -> None:
    documented = _documented()
    assert set(documented) == {name.rpartition(".")[2] for name in contract.SERVICE_FULL_NAMES.values()}
    for service, rpcs in documented.items():
        for rpc, names in rpcs.items():
            assert set(names) <= contract.error_reasons() - COMMON, (service, rpc, names)


def test_each_service_documents_the_reasons_its_code_raises() -> None:
    documented = {s: {r for names in rpcs.values() for r in names} for s, rpcs in _documented().items()}
    generic = {"INVALID_ARGUMENT", "BAD_REQUEST", "NOT_FOUND", "CONFLICT", "ABORTED", "PERMISSION_DENIED",
               "UNAUTHENTICATED", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "UNIMPLEMENTED"}
    found, _ = _raised()
    missing = []
    for reason, files in found.items():
        for rel in files:
            owner = next((s for prefix, s in OWNER.items() if rel.startswith(prefix)), None)
            if owner and reason not in documented[owner] | COMMON | generic:
                missing.append(f"{owner}: {reason} ({rel})")
    assert sorted(missing) == []
