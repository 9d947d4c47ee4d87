# SPDX-License-Identifier: MIT
"""Not a test to run: python/tests/test-types.sh has mypy --strict check
this file, which calls the binding's public API the way an engine does.
Under --strict a call of an untyped function, an argument of the wrong
type or a result used as the wrong type is an error, so this checks that
the public calls carry type hints that mean what they say."""
from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

import kvpool


def engine(sock: str) -> float:
    with kvpool.Context(sock, tenant="chat", policy="swap",
                        stall_ms=10) as ctx:
        st: kvpool.Status = ctx.status()
        lay: kvpool.Layout = ctx.declare_layout(2, 2, 64, "bf16", 1e4,
                                                model="m r1")
        lay.set_rope("neox")
        seq: kvpool.Sequence = lay.sequence()
        got: int = seq.match(np.arange(100, dtype=np.uint32))
        n: int = seq.append_tokens(np.arange(got, 100, dtype=np.uint32))
        k = np.zeros((n, 2, 64), np.float32)
        seq.write_kv(0, 0, k, k)
        q = np.zeros((1, 4, 64), np.float32)
        out: np.ndarray[Any, Any] = kvpool.decode([seq], 0, q)
        rk, rv = seq.read_kv(0, 0, n)
        added: int = seq.publish()
        info: kvpool.SeqInfo = seq.info()
        state: str = seq.state
        seq.swap_out(-1)
        seq.swap_in("stall")
        length: int = seq.splice(0, 1, 1) + seq.compact([0, 1, 2])
        sc = seq.score(0, np.zeros((1, 4, 64), np.float32), causal=True)
        seq.set_compress(4, 32, 64)
        length += seq.compress()
        tiers: list[kvpool.TierInfo] = ctx.tiers()
        ctx.tier_join(1)
        low = ctx.tier_lease(1, 2)
        lease: kvpool.Lease = ctx.lease(2)
        t: int = ctx.swap(0, lease.blocks, 1, low)
        ctx.swap_wait(t, timeout=1.0)
        done: bool = ctx.swap_poll(t)
        asyncio.run(ctx.swap_async(t))
        fd: int = ctx.swap_fd()
        sums: np.ndarray[Any, Any] = ctx.block_sums(1, low)
        ctx.set_policy("recompute")
        dropped: list[kvpool.Sequence] = ctx.dropped()
        ps: kvpool.PolicyStats = ctx.policy_stats()
        given: int = ctx.reclaim(1) + ctx.prefix_evict(1)
        with ctx.dev_buf(1 << 20) as buf:
            lay.write_kv_dev(0, [0], [0], buf, 0, 256)
            arr: kvpool.CudaArray = buf.cuda_array(0, (4, 64))
    with kvpool.Admin(sock) as adm:
        caches: list[kvpool.PrefixInfo] = adm.prefix_caches()
        flushed: int = adm.prefix_flush("chat")
        adm.prefix_share("chat", None)
        ts: list[kvpool.TierStats] = adm.tiers()
        ct: list[kvpool.ClientTiers] = adm.client_tiers()
        adm.tenant_set("chat", max=None)
    del st, out, rk, rv, added, info, state, sc, tiers, done, fd, sums
    del dropped, ps, given, arr, caches, flushed, ts, ct
    return float(length)
