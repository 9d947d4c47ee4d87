# SPDX-License-Identifier: MIT
"""examples/example.py runs and prints what libkvlease/example.c prints."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, os.pardir, "examples", "example.py")
C_EXAMPLE = os.environ.get("KVLEASE_EXAMPLE") or os.path.join(
    HERE, os.pardir, os.pardir, "build", "bin", "kvlease-example")


def test_example_matches_c(sock):
    py = subprocess.run([sys.executable, EXAMPLE, "--socket", sock],
                        capture_output=True, text=True, timeout=60)
    assert py.returncode == 0, py.stderr
    assert py.stdout.startswith("pool host (cpu backend): ")
    c = subprocess.run([C_EXAMPLE, "--socket", sock], capture_output=True,
                       text=True, timeout=60)
    assert c.returncode == 0, c.stderr
    assert py.stdout == c.stdout


def test_example_fails_cleanly_without_daemon(tmp_path):
    env = dict(os.environ, KVPOOL_SOCKET=str(tmp_path / "none.sock"))
    py = subprocess.run([sys.executable, EXAMPLE], capture_output=True,
                        text=True, env=env, timeout=60)
    assert py.returncode == 1
    assert "kvl_open: No such file or directory" in py.stderr
