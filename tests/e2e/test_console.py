"""The people's commands against a running stack (real processes): ingest a folder with
progress and a summary (and again, sending nothing twice), ask with timelines in every
time mode, sql, changes --follow, graph, --json, and bad input as one line and an exit
code. Terminal output is read through a real pseudo-terminal as well as a pipe."""

from __future__ import annotations

import datetime as dt
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import clone_database
from tests.support import REPO, gateway_stack

FILES = int(os.environ.get("TESTAMENT_CLI_FILES", "500"))
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
TIME_PAGE = {
    "kickoff.md": ("# Kickoff notes\n\nRavi has been on the billing migration since yesterday.\n",
                   "2026-01-15T10:00:00"),
    "retro.md": ("# Retro notes\n\nRavi moved from the billing migration to the search team on 1 June.\n",
                 "2026-06-12T14:00:00"),
    "oncall.md": ("# On-call\n\nRavi is the on-call engineer for billing incidents.\n", "2026-09-01T08:00:00"),
}


@pytest.fixture(scope="module")
def base(pg, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gateway_stack(clone_database(pg), tmp_path_factory.mktemp("console"),
                       ("ingest", "pipeline", "retrieval", "queryspace")) as (url, _, _):
        yield url


def cli(base: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_")}
    env["TESTAMENT_API_URL"] = base
    return subprocess.run([sys.executable, "-m", "services.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _dated(path: Path, text: str, when: str) -> None:
    path.write_text(text)
    stamp = dt.datetime.fromisoformat(when).replace(tzinfo=dt.UTC).timestamp()
    os.utime(path, (stamp, stamp))


@pytest.fixture(scope="module")
def time_page(base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("time-page")
    for name, (text, when) in TIME_PAGE.items():
        _dated(folder / name, text, when)
    done = cli(base, "ingest", str(folder), "--wait", "--json")
    assert done.returncode == 0, done.stderr
    assert {o["outcome"] for o in json.loads(done.stdout)} == {"ready"}
    return folder


@pytest.mark.parametrize("mode, shown, hidden", [
    ("history", ["2026-01-14 → 2026-06-01", "2026-06-01 → (open)"], []),
    ("current", ["2026-06-01 → (open)"], ["2026-01-14 → 2026-06-01"]),
    ("at=2026-03-01T00:00:00Z", ["2026-01-14 → 2026-06-01"], ["2026-06-01 → (open)"]),
    ("overlap=2026-05-01T00:00:00Z,2026-07-01T00:00:00Z", ["2026-01-14 → 2026-06-01", "2026-06-01 → (open)"], []),
])
def test_ask_draws_the_time_page_in_every_mode(base: str, time_page: Path, mode: str, shown: list[str],
                                               hidden: list[str]) -> None:
    ravi = json.loads(cli(base, "resolve", "Ravi", "--json").stdout)["entities"][0]["entity_id"]
    answer = cli(base, "ask", "Which team is Ravi on?", "--entity", ravi, "--time", mode)
    assert answer.returncode == 0, answer.stderr
    for window in shown:
        assert window in answer.stdout, answer.stdout
    for window in hidden:
        assert window not in answer.stdout, answer.stdout
    assert "━" in answer.stdout and "Evidence" in answer.stdout
    data = json.loads(cli(base, "ask", "Which team is Ravi on?", "--entity", ravi, "--time", mode, "--json").stdout)
    assert data["facts"]


def test_ask_as_believed_at_an_instant(base: str, time_page: Path) -> None:
    ravi = json.loads(cli(base, "resolve", "Ravi", "--json").stdout)["entities"][0]["entity_id"]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    believed = json.loads(cli(base, "ask", "Ravi", "--entity", ravi, "--as-of-belief", now, "--time",
                              "at=2026-03-01T00:00:00Z", "--json").stdout)
    assert any(f["label"] == "Ravi works on billing migration" for f in believed["facts"]), believed
    before = cli(base, "ask", "Ravi", "--entity", ravi, "--as-of-belief", "2020-01-01T00:00:00Z")
    assert before.returncode == 0 and "memory held no fact" in before.stdout
    usage = cli(base, "ask", "Ravi", "--as-of-belief", now)
    assert usage.returncode == 2 and "needs --entity" in usage.stderr


def test_sql_graph_claims_and_documents(base: str, time_page: Path) -> None:
    rows = json.loads(cli(base, "sql", "SELECT fact_label FROM facts_current WHERE fact_label ILIKE $1",
                          "--params", '["%search team%"]', "--json").stdout)
    assert rows["termination_reason"] == "completed" and rows["rows"]
    table = cli(base, "sql", "SELECT fact_label FROM facts_current ORDER BY 1 LIMIT 3")
    assert table.returncode == 0 and "row(s)" in table.stdout
    refused = cli(base, "sql", "DELETE FROM facts_current")
    assert refused.returncode == 1 and "statement_not_allowed" in refused.stdout
    tree = cli(base, "graph", "Ravi", "--hops", "1")
    assert tree.returncode == 0 and "Ravi" in tree.stdout and "search team" in tree.stdout, tree.stdout
    claims = cli(base, "ask", "billing migration", "--claims")
    assert claims.returncode == 0 and "What the sources said" in claims.stdout
    listed = json.loads(cli(base, "documents", "list", "--json").stdout)
    doc = listed["documents"][0]["doc_id"]
    assert json.loads(cli(base, "documents", "show", doc, "--json").stdout)["doc_id"] == doc


def test_changes_follow_shows_a_new_document_within_seconds(base: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_")}
    env["TESTAMENT_API_URL"] = base
    follower = subprocess.Popen([sys.executable, "-m", "services.cli", "changes", "--follow", "--max", "1",
                                 "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    time.sleep(2.5)
    note = tmp_path / "fresh.md"
    note.write_text("# Fresh\n\nLena Park owns the search index.\n")
    assert cli(base, "ingest", str(note)).returncode == 0
    out, err = follower.communicate(timeout=90)
    assert follower.returncode == 0, err
    event = json.loads(out.splitlines()[0])
    assert event["kind"] in ("claim", "relation", "observation") and event["cursor"]


def test_output_on_a_real_terminal_has_no_traceback_and_fits(base: str, time_page: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_")}
    env.update(TESTAMENT_API_URL=base, COLUMNS="80", LINES="40", TERM="xterm-256color")
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command on the pseudo-terminal
        os.chdir(REPO)
        os.execvpe(sys.executable, [sys.executable, "-m", "services.cli", "ask", "Which team is Ravi on?",
                                    "--time", "history"], env)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    _, status = os.waitpid(pid, 0)
    screen = b"".join(chunks).decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, screen
    assert "Traceback" not in screen and ANSI.search(screen)  # colours on a terminal
    plain = ANSI.sub("", screen)
    assert max(len(line) for line in plain.splitlines()) <= 80, plain
    assert "2026-01-14 → 2026-06-01" in plain


@pytest.mark.parametrize("args, code, says", [
    (["ingest", "/no/such/file.md"], 2, "no such file or directory"),
    (["ask", "x", "--time", "at=yesterday"], 2, "is not an ISO 8601 date-time"),
    (["ask", "x", "--time", "at=2026-01-01T00:00:00"], 2, "needs a zone"),
    (["sql", "SELECT 1", "--params", "{}"], 2, "must be a JSON array"),
    (["ask", "   "], 2, "the question is empty"),
    (["documents", "show"], 2, "needs a DOC_ID"),
    (["ask", "x", "--api-url", "http://127.0.0.1:9"], 1, "cannot reach Testament"),
    (["documents", "delete", "00000000-0000-4000-8000-000000000000"], 1, "404 document_not_found"),
])
def test_bad_input_is_one_clear_line_and_an_exit_code(base: str, args: list[str], code: int, says: str) -> None:
    result = cli(base, *args)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert says in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


# Last in the module: its 500 notes keep the shared stack's pipeline busy for minutes, and
# nothing after it should have to queue behind them.
def test_a_folder_goes_in_with_every_outcome_reported_and_a_rerun_sends_nothing_twice(base: str,
                                                                                    tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    (folder / "deep").mkdir(parents=True)
    for i in range(FILES):
        where = folder / "deep" if i % 3 == 0 else folder
        (where / f"note-{i:03}.md").write_text(f"# Note {i}\n\nPerson{i} owns the module {i}.\n")
    (folder / "skip.tmp").write_text("not sent")
    (folder / "photo.heic").write_bytes(b"\x00\x01binary")

    # interrupted part-way ...
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESTAMENT_")}
    env["TESTAMENT_API_URL"] = base
    first = subprocess.Popen([sys.executable, "-m", "services.cli", "ingest", str(folder), "--exclude", "*.tmp",
                              "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(4)
    first.send_signal(signal.SIGINT)
    # read both pipes while waiting: with ~75 KB of outcomes a bare wait() deadlocks on a full pipe
    first.communicate(timeout=60)
    # ... and run again: what already went in is unchanged, the rest is created, nothing twice
    again = cli(base, "ingest", str(folder), "--exclude", "*.tmp", "--json")
    assert again.returncode == 0, again.stderr
    outcomes = json.loads(again.stdout)
    assert len(outcomes) == FILES + 1
    assert {o["outcome"] for o in outcomes} <= {"created", "unchanged", "parked"}
    assert next(o for o in outcomes if o["source_ref"].endswith("photo.heic"))["outcome"] == "parked"
    assert "notes/deep/note-000.md" in {o["source_ref"] for o in outcomes}
    third = json.loads(cli(base, "ingest", str(folder), "--exclude", "*.tmp", "--json").stdout)
    assert {o["outcome"] for o in third if not o["source_ref"].endswith(".heic")} == {"unchanged"}

    human = cli(base, "ingest", str(folder), "--include", "note-00*.md")
    assert human.returncode == 0 and "unchanged" in human.stdout and "Traceback" not in human.stderr
    assert not ANSI.search(human.stdout)  # no colours into a pipe
