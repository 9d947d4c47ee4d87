# SPDX-License-Identifier: MIT
"""The prefix cache through the binding, against a real kvpoold: a
model's identity on a layout, token appends, publish by one context and
match by another of the same tenant (bit-identical K/V, the blocks
shared), eviction, the admin list, flush and shared namespaces, and the
documented errors."""
import errno

import numpy as np
import pytest

import kvpool
from kvpool.testing import wait_until

RNG = np.random.default_rng(7)
MODEL = "py-llama-test rev1"


def randn(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


def fill(seq, tokens, kv):
    """Append tokens to seq and write kv[layer] = (k, v) for them."""
    start = len(seq)
    seq.append_tokens(tokens)
    for layer, (k, v) in enumerate(kv):
        seq.write_kv(layer, start, k[start:start + len(tokens)],
                     v[start:start + len(tokens)])


def prompt(tpb, nblocks, extra, seed):
    n = nblocks * tpb + extra
    toks = np.random.default_rng(seed).integers(0, 32000, n,
                                                dtype=np.uint32)
    kv = [(randn(n, 2, 64), randn(n, 2, 64)) for _ in range(2)]
    return toks, kv


def test_publish_then_match_in_another_context(tsock):
    with kvpool.Context(tsock, tenant="prefix") as a, \
            kvpool.Context(tsock, tenant="prefix") as b, \
            kvpool.Admin(tsock) as adm:
        la = a.declare_layout(2, 2, 64, "bf16", 10000.0, model=MODEL)
        assert la.model == MODEL
        tpb = la.tokens_per_block
        toks, kv = prompt(tpb, 3, 5, seed=1)
        pub = la.sequence()
        fill(pub, toks, kv)
        assert np.array_equal(pub.tokens, toks)
        assert pub.publish() == 3                 # the full blocks
        assert pub.publish() == 0                 # cached already
        info = adm.prefix_cache("prefix")
        assert info.cached >= 3 and info.published >= 3

        lb = b.declare_layout(2, 2, 64, "bf16", 10000.0, model=MODEL)
        rd = lb.sequence()
        assert rd.match(toks[:-1]) == 3 * tpb
        assert len(rd) == 3 * tpb
        # the same blocks, bit-identical K/V
        assert list(rd.block_table) == list(pub.block_table[:3])
        for layer in range(2):
            pk, pv = pub.read_kv(layer, 0, 3 * tpb)
            rk, rv = rd.read_kv(layer, 0, 3 * tpb)
            assert np.array_equal(pk, rk) and np.array_equal(pv, rv)
        assert np.array_equal(rd.tokens, toks[:3 * tpb])
        # the reader goes on with its own tokens: the cached blocks stay
        fill(rd, toks[3 * tpb:], kv)
        q = randn(1, 4, 64)
        assert np.array_equal(kvpool.decode([rd], 1, q),
                              kvpool.decode([pub], 1, q))
        after = adm.prefix_cache("prefix")
        assert after.hits >= info.hits + 3
        assert after.hit_tokens >= info.hit_tokens + 3 * tpb
        # a shorter prompt matches only its full blocks; another prompt
        # matches nothing
        s2 = lb.sequence()
        assert s2.match(toks[:tpb + 3]) == tpb
        other, _ = prompt(tpb, 2, 0, seed=99)
        s3 = lb.sequence()
        assert s3.match(other) == 0 and len(s3) == 0


def test_match_errors(tsock):
    with kvpool.Context(tsock, tenant="prefix") as ctx:
        plain = ctx.declare_layout(1, 2, 64)
        s = plain.sequence()
        with pytest.raises(kvpool.KvpoolError) as e:
            s.match([1, 2, 3])
        assert e.value.errno == errno.ENOKEY
        assert e.value.function == "kvl_seq_match"
        lay = ctx.declare_layout(1, 2, 64, model=MODEL + "-errors")
        s = lay.sequence()
        s.append_tokens([5, 6, 7])
        with pytest.raises(kvpool.KvpoolError) as e:
            s.match([5, 6, 7])               # only on an empty sequence
        assert e.value.errno == errno.EBUSY
        for bad in ("", "x" * 64):
            with pytest.raises(kvpool.InvalidArgument):
                ctx.declare_layout(1, 2, 64, model=bad)
        with pytest.raises(kvpool.InvalidArgument):
            s.append_tokens([-1])
        with pytest.raises(kvpool.InvalidArgument):
            s.append_tokens(np.zeros(2, np.float32) + 0.5)


def test_evict_and_admin_flush(tsock):
    with kvpool.Context(tsock, tenant="prefix2") as ctx, \
            kvpool.Admin(tsock) as adm:
        lay = ctx.declare_layout(2, 2, 64, model=MODEL + "-evict")
        tpb = lay.tokens_per_block
        for seed in (11, 12):
            toks, kv = prompt(tpb, 2, 0, seed)
            with lay.sequence() as s:
                fill(s, toks, kv)
                assert s.publish() == 2
        # freed: the four blocks are cached and unreferenced
        c = adm.prefix_cache("prefix2")
        assert c.cached == 4 and c.referenced == 0
        assert ctx.prefix_evict(1) == 1
        assert adm.prefix_cache("prefix2").cached == 3
        assert adm.prefix_cache("prefix2").evictions >= 1
        # a referenced block is not flushed at once: it goes when its
        # last reference does
        toks, _ = prompt(tpb, 2, 0, 12)
        keep = lay.sequence()
        assert keep.match(toks) == 2 * tpb
        assert adm.prefix_flush("prefix2") == 1
        assert adm.prefix_cache("prefix2").cached == 2
        assert np.array_equal(keep.tokens, toks)
        keep.free()
        c = adm.prefix_cache("prefix2")
        assert c.cached == 0 and c.evictions == 4
        assert adm.prefix_flush("prefix2") == 0
        assert ctx.prefix_evict(10) == 0
        with pytest.raises(kvpool.KvpoolError) as e:
            adm.prefix_flush("no-such-tenant")
        assert e.value.errno == errno.ENOENT
        assert e.value.function == "kvl_admin_prefix_flush"


def test_shared_namespace(tsock):
    with kvpool.Admin(tsock) as adm:
        adm.prefix_share("prefix", "py-ns")
        adm.prefix_share("prefix2", "py-ns")
        try:
            assert adm.prefix_cache("prefix").ns == "py-ns"
            with kvpool.Context(tsock, tenant="prefix") as a, \
                    kvpool.Context(tsock, tenant="prefix2") as b:
                la = a.declare_layout(2, 2, 64, model=MODEL + "-ns")
                tpb = la.tokens_per_block
                toks, kv = prompt(tpb, 2, 1, seed=21)
                with la.sequence() as s:
                    fill(s, toks, kv)
                    assert s.publish() == 2
                    k0 = s.read_kv(1, 0, 2 * tpb)[0]
                lb = b.declare_layout(2, 2, 64, model=MODEL + "-ns")
                with lb.sequence() as r:
                    assert r.match(toks) == 2 * tpb  # another tenant's
                    assert np.array_equal(r.read_kv(1, 0, 2 * tpb)[0], k0)
        finally:
            adm.prefix_share("prefix", None)
            adm.prefix_share("prefix2", None)
        assert adm.prefix_cache("prefix").ns == ""
        # its own cache again (flushed by the change): nothing to match
        with kvpool.Context(tsock, tenant="prefix2") as b:
            lb = b.declare_layout(2, 2, 64, model=MODEL + "-ns")
            assert lb.sequence().match(toks) == 0
        with pytest.raises(kvpool.KvpoolError) as e:
            adm.prefix_share("no-such-tenant", "py-ns")
        assert e.value.errno == errno.ENOENT
        with pytest.raises(kvpool.InvalidArgument):
            adm.prefix_share("prefix", "n" * 40)


def test_cache_outlives_a_killed_publisher(tsock, tier_daemon):
    """kill -9 of the process that published: the cache keeps the blocks
    (held by the daemon, charged to the tenant) and another process
    matches them."""
    import os
    import signal
    import subprocess
    import sys
    child = r"""
import sys, numpy as np
sys.path.insert(0, sys.argv[2])
import kvpool
ctx = kvpool.Context(sys.argv[1], tenant="prefix")
lay = ctx.declare_layout(1, 2, 64, model="py-killed-publisher")
tpb = lay.tokens_per_block
toks = np.arange(3 * tpb, dtype=np.uint32) + 1000
s = lay.sequence()
s.append_tokens(toks)
k = np.full((3 * tpb, 2, 64), 0.5, np.float32)
s.write_kv(0, 0, k, k)
print(s.publish(), flush=True)
while True:                       # publishing more, killed meanwhile
    t = lay.sequence()
    t.append_tokens(toks[:tpb] + 7)
    t.publish()
    t.free()
"""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.Popen([sys.executable, "-c", child, tsock, pkg],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "3"
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with kvpool.Admin(tsock) as adm:
        assert wait_until(lambda: not any(c.pid == p.pid
                                          for c in adm.clients()))
        assert adm.prefix_cache("prefix").cached >= 3
    with kvpool.Context(tsock, tenant="prefix") as ctx:
        lay = ctx.declare_layout(1, 2, 64, model="py-killed-publisher")
        tpb = lay.tokens_per_block
        s = lay.sequence()
        assert s.match(np.arange(3 * tpb, dtype=np.uint32) + 1000) == 3 * tpb
        assert np.all(s.read_kv(0, 0, 3 * tpb)[0] == 0.5)
    assert tier_daemon.alive()
