# SPDX-License-Identifier: MIT
"""Tiers, swap and the pressure policies through the binding, against a
real kvpoold with a dram and an nvme tier: raw copies between tiers
(waited for, polled, through selectors and asyncio), sequences swapped
out and back with their K/V intact, the policies per context and per
call when the tenant's quota is full, reclaim, the admin figures, the
documented errors, and a tenant killed while it swaps."""
import asyncio
import errno
import os
import selectors
import signal
import subprocess
import sys

import numpy as np
import pytest

import kvpool
import kvpool.testing
from kvpool.testing import wait_until

RNG = np.random.default_rng(3)


def randn(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


def filled(lay, n, value=None):
    s = lay.sequence()
    s.append(n)
    kv = []
    for layer in range(lay.layers):
        k = randn(n, lay.kv_heads, lay.head_dim) if value is None else \
            np.full((n, lay.kv_heads, lay.head_dim), value, np.float32)
        s.write_kv(layer, 0, k, -k)
        kv.append(s.read_kv(layer, 0, n))
    return s, kv


def same_kv(s, kv):
    return all(np.array_equal(s.read_kv(layer, 0, len(s))[0], k) and
               np.array_equal(s.read_kv(layer, 0, len(s))[1], v)
               for layer, (k, v) in enumerate(kv))


def idle(adm, tenant):
    """Nothing of tenant's left in any pool (closed clients' blocks come
    back when kvpoold sees the hang-up)."""
    names = [t.pool.name for t in adm.tiers()]
    return wait_until(lambda: all(adm.tenant(tenant, p).current == 0
                                  for p in names))


def test_tiers_listed(tsock):
    with kvpool.Context(tsock, tenant="swapper") as ctx:
        t = ctx.tiers()
        assert [x.kind for x in t] == ["top", "dram", "nvme"]
        assert [x.tier for x in t] == [0, 1, 2]
        assert t[0].joined and not t[1].joined
        assert t[1].capacity == 512
        assert t[2].capacity * t[2].block_bytes == 32 << 20
        ctx.tier_join(1)
        ctx.tier_join(1)                        # joined already: nothing
        assert ctx.tiers()[1].joined
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.tier_join(3)
        assert e.value.errno == errno.ENOENT
        assert e.value.function == "kvl_tier_join"
    with kvpool.Admin(tsock) as adm:
        st = adm.tiers()
        assert [x.kind for x in st] == ["top", "dram", "nvme"]
        assert st[1].pool.capacity == 512


def test_raw_swap_wait_poll_selectors_asyncio(tsock):
    with kvpool.Context(tsock, tenant="swapper") as ctx:
        lay = ctx.declare_layout(1, 2, 64, "bf16")
        tpb = lay.tokens_per_block
        top = ctx.lease(4)
        k = randn(4 * tpb, 2, 64)
        pos = np.arange(4 * tpb)
        lay.write_kv(0, top.blocks[pos // tpb], pos % tpb, k, k)
        sums = ctx.block_sums(0, top.blocks)
        assert sums.dtype == np.uint64 and len(set(sums.tolist())) == 4
        for tier in (1, 2):
            ctx.tier_join(tier)
            low = ctx.tier_lease(tier, 4)
            assert len(low) == 4 and ctx.tiers()[tier].held == 4
            # out: wait for it
            t = ctx.swap(0, top.blocks, tier, low)
            assert t > 0
            ctx.swap_wait(t, timeout=10)
            assert ctx.swap_poll(t)
            assert np.array_equal(ctx.block_sums(tier, low), sums)
            # back over blocks zeroed meanwhile, through a selector
            z = np.zeros_like(k)
            lay.write_kv(0, top.blocks[pos // tpb], pos % tpb, z, z)
            t = ctx.swap(tier, low, 0, top.blocks)
            with selectors.DefaultSelector() as sel:
                sel.register(ctx.swap_fd(), selectors.EVENT_READ)
                while not ctx.swap_poll(t):
                    assert sel.select(timeout=10), "no completion"
            assert np.array_equal(ctx.block_sums(0, top.blocks), sums)
            # and through an asyncio loop, another task running meanwhile
            t = ctx.swap(0, top.blocks, tier, low)
            ticks = []

            async def both():
                async def tick():
                    ticks.append(1)
                await asyncio.gather(ctx.swap_async(t), tick())
            asyncio.run(both())
            assert ticks and ctx.swap_poll(t)
            assert np.array_equal(ctx.block_sums(tier, low), sums)
            assert ctx.tier_release(tier, low) == 4
        rk, _ = lay.read_kv(0, top.blocks[pos // tpb], pos % tpb)
        assert np.array_equal(rk, lay.read_kv(0, top.blocks[pos // tpb],
                                              pos % tpb)[0])
        with kvpool.Admin(tsock) as adm:
            st = adm.tiers()
            assert st[1].swaps >= 3 and st[2].swaps >= 3
            assert st[1].blocks_in >= 8 and st[1].blocks_out >= 4
            me = [c for c in adm.client_tiers() if c.pid == os.getpid()
                  and c.tenant == "swapper"]
            assert me and me[0].joined[:3] == (True, True, True)
            assert me[0].blocks[0] == 4 and me[0].swaps >= 6


def test_swap_errors(tsock):
    with kvpool.Context(tsock, tenant="swapper") as ctx, \
            kvpool.Context(tsock, tenant="swapper") as other:
        a = ctx.lease(4).blocks
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.swap(0, a, 1, a)                    # tier 1 not joined
        assert e.value.errno == errno.EUNATCH
        assert e.value.function == "kvl_swap"
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.tier_lease(1, 4)                    # and for a lease
        assert e.value.errno == errno.EUNATCH
        ctx.tier_join(1)
        b = ctx.tier_lease(1, 4)
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.swap(0, a, 7, b)
        assert e.value.errno == errno.ENOENT
        with pytest.raises(kvpool.InvalidArgument):
            ctx.swap(1, b, 1, b)                    # onto itself
        with pytest.raises(kvpool.InvalidArgument):
            ctx.swap(0, a, 1, [b[0], b[0], b[1], b[2]])   # twice
        with pytest.raises(kvpool.InvalidArgument):
            ctx.swap(0, a, 1, b[:2])                # counts differ
        theirs = other.lease(4).blocks
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.swap(0, theirs, 1, b)               # not held
        assert e.value.errno == errno.EPERM
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.swap_poll(0)
        assert e.value.errno == errno.ENOENT
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.tier_release(1, [511 - x for x in range(3)] + [b[0]])
        assert e.value.errno in (errno.EINVAL, errno.EPERM)
        assert ctx.tiers()[1].held == 4             # validated first


def test_sequence_swap_out_in(tsock):
    with kvpool.Context(tsock, tenant="swapper") as ctx:
        lay = ctx.declare_layout(2, 2, 64, "int8")
        tpb = lay.tokens_per_block
        s, kv = filled(lay, 3 * tpb + 7)
        info = s.info()
        assert info.state == "resident" and info.nblocks == 4
        for tier in (1, 2, -1):
            s.swap_out(tier)
            i = s.info()
            assert i.state == "swapped" and s.state == "swapped"
            assert i.tier == (1 if tier == -1 else tier)
            assert i.swapped_blocks == 4
            s.swap_in()
            assert s.state == "resident" and same_kv(s, kv)
        # a call that needs the sequence brings it back by itself
        s.swap_out(2)
        q = randn(1, 4, 64)
        out = kvpool.decode([s], 1, q)
        assert s.state == "resident"
        assert np.array_equal(out, kvpool.decode([s], 1, q))
        assert same_kv(s, kv)
        i = s.info()
        assert i.swaps_out == 4 and i.swaps_in == 4
        st = ctx.policy_stats()
        assert st.swaps_out == 4 and st.swaps_in == 4
        assert st.blocks_out == 16 and st.bytes_out == 16 * 65536
        assert st.copy_out_ns > 0 and st.swap_in_ns >= st.copy_in_ns
        with pytest.raises(kvpool.InvalidArgument):
            s.swap_out(-2)
        with pytest.raises(kvpool.KvpoolError) as e:
            s.swap_out(3)
        assert e.value.errno in (errno.ENOENT, errno.EINVAL)


def pressure_ctx(tsock, policy=None, stall_ms=0):
    ctx = kvpool.Context(tsock, tenant="tight", lease_batch=1,
                         policy=policy, stall_ms=stall_ms, timeout=5)
    lay = ctx.declare_layout(2, 2, 64, "bf16")
    return ctx, lay


def test_policy_swap(tsock):
    with kvpool.Admin(tsock) as adm:
        assert idle(adm, "tight")
    ctx, lay = pressure_ctx(tsock, "swap")
    with ctx:
        tpb = lay.tokens_per_block
        seqs = [filled(lay, 2 * tpb) for _ in range(3)]   # the 6 blocks
        assert ctx.status().held == 6
        s4, kv4 = filled(lay, 2 * tpb)       # s1, the oldest, goes down
        assert seqs[0][0].state == "swapped"
        assert [s.state for s, _ in seqs[1:]] == ["resident"] * 2
        # reading s1 brings it back and sends the next oldest (s2) down
        assert same_kv(*seqs[0])
        assert seqs[0][0].state == "resident"
        assert seqs[1][0].state == "swapped"
        assert same_kv(*seqs[1]) and same_kv(s4, kv4)
        st = ctx.policy_stats()
        assert st.swaps_out >= 3 and st.swaps_in >= 2 and st.drops == 0
        assert ctx.status().held <= 6
        # per call: FAIL for this append although the context swaps
        with pytest.raises(kvpool.QuotaExceeded) as e:
            s4.append_policy(tpb, "fail")
        assert e.value.function == "kvl_seq_append_policy"
        assert len(s4) == 2 * tpb
        assert s4.append_policy(tpb, None) == 3 * tpb     # the context's
        # reclaim: what the ledger asks back, by swapping
        held = ctx.status().held
        given = ctx.reclaim(2)
        assert given >= 2 and ctx.status().held == held - given


def test_policy_recompute_and_dropped(tsock):
    with kvpool.Admin(tsock) as adm:
        assert idle(adm, "tight")
    ctx, lay = pressure_ctx(tsock, "recompute")
    with ctx:
        tpb = lay.tokens_per_block
        seqs = [filled(lay, 2 * tpb)[0] for _ in range(3)]
        assert ctx.dropped() == []
        filled(lay, 2 * tpb)
        i = seqs[0].info()
        assert i.state == "dropped" and i.dropped_len == 2 * tpb
        assert len(seqs[0]) == 0
        assert ctx.dropped() == [seqs[0]]
        assert ctx.dropped() == []                  # listed once
        with pytest.raises(kvpool.KvpoolError) as e:
            seqs[0].splice(0, 0, 1)
        assert e.value.errno == errno.ENODATA       # edits: re-fill first
        st = ctx.policy_stats()
        assert st.drops == 1 and st.dropped_tokens == 2 * tpb
        assert st.swaps_out == 0


def test_policy_fail_and_stall(tsock):
    with kvpool.Admin(tsock) as adm:
        assert idle(adm, "tight")
    ctx, lay = pressure_ctx(tsock, "fail")
    with ctx:
        tpb = lay.tokens_per_block
        seqs = [filled(lay, 2 * tpb)[0] for _ in range(3)]
        s = lay.sequence()
        with pytest.raises(kvpool.QuotaExceeded):
            s.append(1)
        # STALL waits for the pool's free blocks, not past the tenant's
        # max: at its max it fails at once
        ctx.set_policy("stall", stall_ms=50)
        with pytest.raises(kvpool.QuotaExceeded):
            s.append(1)
        assert [x.state for x in seqs] == ["resident"] * 3
        # per call, SWAP although the context stalls
        assert s.append_policy(1, "swap") == 1
        assert seqs[0].state == "swapped"
        for bad in ("lru", 9, -1, True):
            with pytest.raises(kvpool.InvalidArgument):
                ctx.set_policy(bad)
        with pytest.raises(kvpool.InvalidArgument):
            kvpool.Context(tsock, tenant="tight", policy="sometimes")


def test_policy_stall_waits_for_the_pool():
    """A pool of 64 blocks that another tenant holds whole: STALL waits
    stall_ms, then LeaseTimeout; blocks coming free in the wait are
    taken."""
    import threading
    with kvpool.testing.Daemon(capacity=64, chunk_blocks=64,
                               tenants=["hog", "waiter"]) as d, \
            kvpool.Context(d.socket, tenant="hog") as hog, \
            kvpool.Context(d.socket, tenant="waiter", policy="stall",
                           stall_ms=100, lease_batch=1) as ctx:
        held = hog.lease(64)
        s = ctx.declare_layout(1, 2, 64).sequence()
        with pytest.raises(kvpool.LeaseTimeout) as e:
            s.append(1)
        assert e.value.function == "kvl_seq_append"
        assert ctx.policy_stats().stalls == 1
        ctx.set_policy("stall", stall_ms=10000)
        th = threading.Timer(0.2, lambda: held.release(held.blocks[:1]))
        th.start()
        try:
            assert s.append(1) == 1
        finally:
            th.join()


CHILD = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
import kvpool
ctx = kvpool.Context(sys.argv[1], tenant="swapper")
lay = ctx.declare_layout(2, 2, 64, "bf16")
seqs = []
for _ in range(4):
    s = lay.sequence()
    s.append(20 * lay.tokens_per_block)
    k = np.ones((len(s), 2, 64), np.float32)
    s.write_kv(0, 0, k, k)
    seqs.append(s)
ctx.tier_join(2)
raw = ctx.tier_lease(2, 8)
print("ready", flush=True)
n = 0
while True:                 # swapping out and in until killed
    for s in seqs:
        s.swap_out(1 + n % 2)
    for s in seqs:
        s.swap_in()
    n += 1
"""


def test_tenant_killed_while_swapping(tsock, tier_daemon):
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with kvpool.Admin(tsock) as adm, \
            kvpool.Context(tsock, tenant="edit") as survivor:
        lay = survivor.declare_layout(1, 2, 64)
        s, kv = filled(lay, 300)
        s.swap_out(1)
        child = subprocess.Popen([sys.executable, "-c", CHILD, tsock, pkg],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            # kill it in the middle of its copies
            assert wait_until(lambda: any(
                c.pid == child.pid and c.swaps >= 8
                for c in adm.client_tiers()), timeout=30)
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert idle(adm, "swapper")
        assert not any(c.pid == child.pid for c in adm.client_tiers())
        # the daemon and the other tenant carry on, its swap included
        s.swap_in()
        assert same_kv(s, kv)
        s.swap_out(2)
        assert same_kv(s, kv)
    assert tier_daemon.alive()
