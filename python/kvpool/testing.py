# SPDX-License-Identifier: MIT
"""A private kvpoold for tests, examples and benchmarks: its own socket
in a temporary directory (never the system's), the CPU backend and the
in-process ledger by default, stopped (only that process) on exit.

    with kvpool.testing.Daemon(tenants=["chat:512"]) as d:
        ctx = kvpool.Context(d.socket, tenant="chat")

The program is ``$KVPOOLD``, else the source tree's ``build/bin/kvpoold``,
else ``kvpoold`` on ``$PATH``.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Callable, Mapping, Sequence

from .admin import Admin
from .errors import KvpoolError


def kvpoold_path() -> str:
    env = os.environ.get("KVPOOLD")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.normpath(os.path.join(here, os.pardir, os.pardir,
                                         "build", "bin", "kvpoold"))
    if os.access(tree, os.X_OK):
        return tree
    found = shutil.which("kvpoold")
    if not found:
        raise FileNotFoundError("kvpoold not found (set $KVPOOLD or run "
                                "make)")
    return found


class Daemon:
    """kvpoold in the foreground on ``self.socket``; its log in
    ``self.log_path``.  tenants: kvpoold --tenant specs
    (NAME[:MAX[:MIN[:UID[:GID]]]]).  Options beyond these go in extra."""

    def __init__(self, *, backend: str = "cpu", ledger: str = "inproc",
                 block_bytes: int = 65536, capacity: int = 2048,
                 chunk_blocks: int = 32, shrink_delay_ms: int = 300,
                 tenants: Sequence[str] = (), extra: Sequence[str] = (),
                 env: Mapping[str, str] | None = None):
        self.tmp = tempfile.mkdtemp(prefix="kvpool-py.")
        self.socket = os.path.join(self.tmp, "kvpool.sock")
        self.log_path = os.path.join(self.tmp, "daemon.log")
        # a private daemon: not the system's kvpoold.conf
        args = [kvpoold_path(), "--foreground", "--config", "",
                "--socket", self.socket,
                "--ledger", ledger, "--backend", backend,
                "--block-bytes", str(block_bytes), "--capacity",
                str(capacity), "--chunk-blocks", str(chunk_blocks),
                "--shrink-delay-ms", str(shrink_delay_ms), "-v"]
        for t in tenants:
            args += ["--tenant", t]
        args += list(extra)
        self._args = args
        self._env = env
        self._log = open(self.log_path, "ab")
        self.proc: subprocess.Popen[bytes] | None = None
        self._start()

    def _start(self) -> None:
        self.proc = subprocess.Popen(self._args, stdout=self._log,
                                     stderr=subprocess.STDOUT,
                                     env=self._env)
        self._wait_ready(self.proc)

    def kill9_and_restart(self) -> None:
        """kill -9 kvpoold, then start it again on the same socket (a new
        data epoch; with the in-process ledger every lease is gone)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self._start()

    def _wait_ready(self, proc: "subprocess.Popen[bytes]",
                    timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                text = self.log()
                self.stop()
                raise RuntimeError("kvpoold exited at start:\n" + text)
            if os.path.exists(self.socket):
                try:
                    with Admin(self.socket) as a:
                        a.pool_status()
                    return
                except KvpoolError:
                    pass
            time.sleep(0.05)
        text = self.log()
        self.stop()
        raise RuntimeError("kvpoold did not answer within "
                           f"{timeout:.0f} s:\n" + text)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def admin(self) -> Admin:
        return Admin(self.socket)

    @property
    def pid(self) -> int:
        """kvpoold's process id (to pin it, to watch its CPU time)."""
        if self.proc is None:
            raise RuntimeError("kvpoold is not running")
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s; removes the directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(cond: Callable[[], object], timeout: float = 5.0,
               step: float = 0.01) -> bool:
    """Poll cond() until it is true or timeout seconds passed; returns its
    last value.  For effects that kvpoold applies asynchronously (blocks
    of a closed or killed client come back when it sees the hang-up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())
