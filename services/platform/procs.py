"""Child processes that die with their parent, without ``preexec_fn``.

``preexec_fn`` runs Python between fork and exec, which can deadlock a process that has
other threads (gRPC, ONNX and thread pools all start some). Instead a tiny interpreter
runs first, asks the kernel to send it SIGTERM when its parent dies (PR_SET_PDEATHSIG,
kept across exec), checks the parent is still the one that started it, and execs the
real program.
"""

from __future__ import annotations

import os
import shutil
import sys

_SHIM = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL('libc.so.6').prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def die_with_parent(argv: list[str], *, other_user: bool = False) -> list[str]:
    """``argv`` wrapped so the program is terminated when this process dies. A program run as
    another user is started through the system interpreter, which that user can execute."""
    python = sys.executable
    if other_user:
        python = shutil.which("python3", path="/usr/bin:/bin") or ""
        if not python:
            return argv  # no interpreter the other user can run: the caller still stops it itself
    return [python, "-c", _SHIM, str(os.getpid()), *argv]
