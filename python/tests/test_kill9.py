# SPDX-License-Identifier: MIT
"""kill -9 of a Python tenant process: the ledger returns its blocks at
once (the connection is the lease), the daemon and other clients carry
on, nothing stays leased."""
import os
import signal
import subprocess
import sys
import time

import numpy as np

import kvpool
from kvpool.testing import wait_until

CHILD = r"""
import sys, time, numpy as np
sys.path.insert(0, sys.argv[2])
import kvpool
ctx = kvpool.Context(sys.argv[1], tenant="victim")
lay = ctx.declare_layout(2, 2, 64, "int8")
seqs = [lay.sequence() for _ in range(3)]
for s in seqs:
    s.append(700)
    k = np.ones((700, 2, 64), np.float32)
    s.write_kv(0, 0, k, k)
raw = ctx.lease(10)
print(ctx.status().held, sum(len(s.block_table) for s in seqs) + 10,
      flush=True)
time.sleep(60)
"""


def test_kill9_releases_blocks(daemon, sock):
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with kvpool.Admin(sock) as adm, \
            kvpool.Context(sock, tenant="chat") as survivor:
        seq = survivor.declare_layout(1, 2, 64).sequence()
        seq.append(50)
        z = np.ones((50, 2, 64), np.float32)
        seq.write_kv(0, 0, z, z)
        # earlier tests' clients are gone: the survivor holds all
        held_by_survivor = survivor.status().held
        assert wait_until(lambda: adm.pool_status().used == held_by_survivor)
        before = held_by_survivor
        child = subprocess.Popen([sys.executable, "-c", CHILD, sock, pkg],
                                 stdout=subprocess.PIPE, text=True)
        try:
            held, in_use = map(int, child.stdout.readline().split())
            assert held >= in_use > 10
            t = adm.tenant("victim")
            assert t.current == held
            assert any(c.pid == child.pid for c in adm.clients())
            assert adm.pool_status().used == before + held
            t0 = time.monotonic()
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            assert child.returncode == -signal.SIGKILL
            assert wait_until(lambda: adm.tenant("victim").current == 0)
            print(f"blocks back {1000 * (time.monotonic() - t0):.1f} ms "
                  "after kill -9")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert adm.pool_status().used == before
        assert not any(c.pid == child.pid for c in adm.clients())
        # the survivor is untouched
        assert np.array_equal(seq.read_kv(0, 0, 50)[0], z)
    assert daemon.alive()
