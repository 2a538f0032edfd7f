"""`testament ops` is a PipelineService client: no SQL in the command-line modules, and the
ops module does not load the database layer (directly or through anything it imports)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI_MODULES = (ROOT / "services" / "cli.py", ROOT / "services" / "ops.py")
SQL = re.compile(r"\b(SELECT\b.*\bFROM|INSERT\s+INTO|UPDATE\b.*\bSET|DELETE\s+FROM)\b", re.IGNORECASE | re.DOTALL)
DATABASE_LAYER = ("asyncpg", "services.platform.db", "services.pipeline.adapters", "services.platform.credentials_pg")


def _strings(path: Path) -> list[str]:
    """The module's string literals, docstrings left out (they show commands, not queries)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_the_cli_modules_hold_no_sql() -> None:
    for path in CLI_MODULES:
        found = [s for s in _strings(path) if SQL.search(s)]
        assert not found, f"{path.name} runs SQL of its own: {found}"


def test_the_ops_module_does_not_load_the_database_layer() -> None:
    probe = ("import sys, services.ops; "
             f"print([m for m in sys.modules if m.startswith({DATABASE_LAYER!r})])")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_every_ops_subcommand_calls_pipeline_service() -> None:
    source = (ROOT / "services" / "ops.py").read_text()
    calls = set(re.findall(r"client\.pipeline\.(\w+)\(", source))
    assert calls == {"ListDeadLetters", "ReplayDeadLetter", "ResumeNoRoute", "InspectQueue", "ReextractVersion",
                     "ReembedSpace", "ListMergeProposals", "ApplyMerge", "RevertMerge"}
    assert "client." not in source.replace("client.pipeline.", "")
