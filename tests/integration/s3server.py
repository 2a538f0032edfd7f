"""Run a real S3-protocol server (moto's standalone server) for integration tests.

``run_moto_server()`` starts ``python -m moto.server`` as a *subprocess* on a
free loopback port, waits until it answers HTTP, yields its endpoint URL and
terminates it (SIGTERM, then SIGKILL) on exit.  Nothing is mocked in-process:
clients talk to the server over TCP exactly as they would to S3/MinIO.

The server's output goes to a temporary log file (not a pipe, which could fill
up and stall the server); the tail of that log is included in the error if the
server fails to start.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = ["MotoServerError", "free_loopback_port", "run_moto_server"]

_HOST = "127.0.0.1"


class MotoServerError(RuntimeError):
    """The moto server could not be started."""


def free_loopback_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (nothing listens on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/moto-api/", timeout=1.0) as resp:
            resp.read()
        return True
    except urllib.error.HTTPError:
        return True  # any HTTP answer means the server is up
    except (OSError, urllib.error.URLError):
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _log_tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return "<no log>"


@contextlib.contextmanager
def run_moto_server(*, startup_timeout: float = 30.0, attempts: int = 3) -> Iterator[str]:
    """Start moto's S3-compatible server as a subprocess; yield ``http://127.0.0.1:PORT``."""
    with tempfile.TemporaryDirectory(prefix="moto-server-") as tmp:
        log_path = Path(tmp) / "moto.log"
        last_error = "moto server did not start"
        for _ in range(attempts):  # retry only covers the (rare) free-port race
            port = free_loopback_port()
            url = f"http://{_HOST}:{port}"
            env = dict(os.environ)
            env["MOTO_PORT"] = str(port)
            with log_path.open("ab") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", _HOST, "-p", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            try:
                deadline = time.monotonic() + startup_timeout
                while proc.poll() is None and time.monotonic() < deadline:
                    if _answers(url):
                        break
                    time.sleep(0.1)
                else:
                    rc = proc.poll()
                    state = f"exited with {rc}" if rc is not None else "timed out"
                    last_error = (
                        f"moto server on port {port} {state}; log tail:\n{_log_tail(log_path)}"
                    )
                    continue
                yield url
                return
            finally:
                _stop(proc)
        raise MotoServerError(last_error)
