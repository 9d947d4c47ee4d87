# SPDX-License-Identifier: MIT
"""The binding against a real kvpoold (CPU backend, in-process ledger):
contexts, leases, layouts, sequences, the data plane with numpy arrays
passed without copies, errors with their errno, and lifetimes."""
import errno
import os
import threading

import numpy as np
import pytest

import kvpool
from kvpool.testing import wait_until

RNG = np.random.default_rng(1)


def randn(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


def bf16(x):
    """float32 -> bf16 -> float32, round to nearest even (finite x)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = u.astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).reshape(np.shape(x))


def ref_attention(q, k, v, ctx_len, n_new=0, scale=None):
    """FP64 attention of one sequence.  q [nq][qh][hd] (nq = max(n_new,
    1)); k, v [ctx_len][kvh][hd]; query i at position ctx_len - nq + i."""
    q = q.astype(np.float64)
    k = k.astype(np.float64)
    v = v.astype(np.float64)
    nq, qh, hd = q.shape
    g = qh // k.shape[1]
    scale = scale or 1.0 / np.sqrt(hd)
    out = np.zeros_like(q)
    for i in range(nq):
        pos = ctx_len - nq + i
        for h in range(qh):
            s = k[:pos + 1, h // g] @ q[i, h] * scale
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ v[:pos + 1, h // g]
    return out


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ---- contexts ------------------------------------------------------------

def test_open_status_close(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        st = ctx.status()
        assert st.pool == "host" and st.tenant == "chat"
        assert st.mode == "daemon" and st.backend == "cpu"
        assert st.block_bytes == 65536 and st.held == 0
        assert st.tenant_max is None        # unlimited
        assert ctx.epoch == st.epoch != 0
    assert ctx.closed
    with pytest.raises(kvpool.InvalidArgument) as e:
        ctx.status()
    assert e.value.errno == errno.EBADF
    ctx.close()                             # twice is fine


def test_env_socket(sock, monkeypatch):
    monkeypatch.setenv("KVPOOL_SOCKET", sock)
    with kvpool.Context(tenant="chat") as ctx:
        assert ctx.status().tenant == "chat"


def test_open_errors_carry_errno(sock, tmp_path):
    with pytest.raises(kvpool.KvpoolError) as e:
        kvpool.Context(str(tmp_path / "none.sock"))
    assert e.value.errno == errno.ENOENT and e.value.function == "kvl_open"
    with pytest.raises(kvpool.KvpoolError) as e:
        kvpool.Context(sock, tenant="no-such-tenant")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(kvpool.InvalidArgument) as e:
        kvpool.Context(sock, tenant="x" * 40)
    assert e.value.errno == errno.EINVAL
    assert isinstance(e.value, ValueError) and isinstance(e.value, OSError)


def test_log_callback(tmp_path):
    got = []
    with pytest.raises(kvpool.KvpoolError):
        kvpool.Context(str(tmp_path / "none.sock"),
                       log=lambda level, msg: got.append((level, msg)))
    assert got and got[0][0] == 3 and "cannot reach kvpoold" in got[0][1]


# ---- leases --------------------------------------------------------------

def test_lease_quota_release(sock):
    with kvpool.Context(sock, tenant="small") as ctx:
        with pytest.raises(kvpool.QuotaExceeded) as e:
            ctx.lease(9)
        assert e.value.errno == errno.EDQUOT
        assert e.value.function == "kvl_lease"
        with ctx.lease(6) as a:
            assert len(a) == 6 and a.blocks.dtype == np.uint32
            assert ctx.status().held == 6
            b = ctx.lease(5, partial=True)
            assert len(b) == 2                  # what the quota allows
            with pytest.raises(kvpool.QuotaExceeded):
                ctx.lease(1, nonblock=True)
            assert a.release(a.blocks[:2]) == 2
            assert len(a) == 4 and ctx.status().held == 6
            with pytest.raises(kvpool.InvalidArgument):
                a.release(b.blocks)             # not this lease's
            b.release()
        assert ctx.status().held == 0
        # raw release of a block not held: libkvlease says EINVAL
        with pytest.raises(kvpool.InvalidArgument) as e:
            ctx.release([2047])
        assert e.value.function == "kvl_release"
        with pytest.raises(kvpool.InvalidArgument):
            ctx.lease(0)


def test_release_all_empties_everything(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        lay = ctx.declare_layout(1, 1, 64)
        lease = ctx.lease(3)
        seq = lay.sequence()
        seq.append(200)
        assert ctx.status().held >= 3 + len(seq.block_table)
        assert ctx.release_all() >= 3
        assert len(lease) == 0 and len(seq) == 0
        assert ctx.status().held == 0


def test_reclaim_fd_and_target(sock):
    import select
    with kvpool.Context(sock, tenant="chat") as ctx:
        fd, events = ctx.reclaim_fd()
        assert fd >= 0 and events == select.POLLIN
        assert ctx.reclaim_target() == 0


# ---- layouts -------------------------------------------------------------

@pytest.mark.parametrize("dtype,row,meta", [("bf16", 128, 0),
                                            ("fp8", 64, 4), ("int8", 64, 4),
                                            ("int4", 32, 0)])
def test_layout_sizes(sock, dtype, row, meta):
    with kvpool.Context(sock, tenant="chat") as ctx:
        lay = ctx.declare_layout(3, 2, 64, dtype, 10000.0)
        planes = 3 * 2 * 2
        per_tok = planes * row + (planes * 64 // 32 * 2 if dtype == "int4"
                                  else 0)
        assert lay.bytes_per_token == per_tok
        assert lay.tokens_per_block == (65536 - planes * meta) // per_tok
        assert lay.dtype == dtype and lay in ctx.layouts


def test_layout_errors(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        with pytest.raises(kvpool.InvalidArgument) as e:
            ctx.declare_layout(2, 2, 48)        # head_dim not 32k
        assert e.value.function == "kvl_layout_declare"
        with pytest.raises(kvpool.InvalidArgument):
            ctx.declare_layout(2, 2, 64, "fp16")
        for _ in range(8):
            ctx.declare_layout(1, 1, 32)
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.declare_layout(1, 1, 32)
        assert e.value.errno == errno.ENOSPC


# ---- sequences and attention ---------------------------------------------

def test_sequence_write_read_decode(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        lay = ctx.declare_layout(2, 2, 64, "bf16", 10000.0)
        tpb = lay.tokens_per_block
        with lay.sequence() as seq:
            assert seq.append(tpb + 5) == tpb + 5 == len(seq)
            assert len(seq.block_table) == 2
            k, v = randn(tpb + 5, 2, 64), randn(tpb + 5, 2, 64)
            for layer in range(2):
                seq.write_kv(layer, 0, 2 * k + layer, v)
            rk, rv = seq.read_kv(1, 0, tpb + 5)
            assert np.array_equal(rk, bf16(2 * k + 1))   # stored as bf16
            assert np.array_equal(rv, bf16(v))
            q = randn(4, 64)
            out = seq.decode(1, q)
            ref = ref_attention(q[None], rk, rv, tpb + 5)[0]
            assert out.shape == (4, 64) and rel(out, ref) < 1e-4
            # one more position, written at its place
            seq.append(1)
            seq.write_kv(1, tpb + 5, k[:1], v[:1])
            _, rv2 = seq.read_kv(1, tpb + 5, 1, keys=False)
            assert np.array_equal(rv2, bf16(v[:1]))
        assert seq.ctx.status().held == ctx.status().cached


def test_batched_decode_and_prefill(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        lay = ctx.declare_layout(1, 2, 64, "bf16")
        seqs, kv = [], []
        for n in (30, 70, 100):
            s = lay.sequence()
            s.append(n)
            k, v = randn(n, 2, 64), randn(n, 2, 64)
            s.write_kv(0, 0, k, v)
            seqs.append(s)
            kv.append((bf16(k), bf16(v), n))
        q = randn(3, 8, 64)
        out = kvpool.decode(seqs, 0, q, scale=0.1)
        for i, (k, v, n) in enumerate(kv):
            assert rel(out[i], ref_attention(q[i:i + 1], k, v, n,
                                             scale=0.1)[0]) < 1e-4
        # causal attention for the last 5 positions of each
        q = randn(3, 5, 8, 64)
        out = kvpool.attention(seqs, 0, q)
        assert out.shape == q.shape
        for i, (k, v, n) in enumerate(kv):
            assert rel(out[i], ref_attention(q[i], k, v, n, n_new=5)) < 1e-4
        # mixing layouts is refused
        other = ctx.declare_layout(1, 2, 64, "fp8").sequence()
        other.append(1)
        with pytest.raises(kvpool.InvalidArgument):
            kvpool.decode([seqs[0], other], 0, randn(2, 8, 64))


def test_fork_copy_on_write_truncate(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        lay = ctx.declare_layout(1, 1, 64, "bf16")
        tpb = lay.tokens_per_block
        parent = lay.sequence()
        parent.append(2 * tpb + 3)
        k, v = randn(2 * tpb + 3, 1, 64), randn(2 * tpb + 3, 1, 64)
        parent.write_kv(0, 0, k, v)
        child = parent.fork()
        pt, ct = parent.block_table, child.block_table
        assert list(pt[:2]) == list(ct[:2]) and pt[2] != ct[2]
        assert np.array_equal(child.read_kv(0, 0, len(child))[1],
                              bf16(v))
        child.write_kv(0, 0, -k[:1], -v[:1])          # copy-on-write
        assert child.block_table[0] != pt[0]
        assert np.array_equal(parent.read_kv(0, 0, 1)[0], bf16(k[:1]))
        assert np.array_equal(child.read_kv(0, 0, 1)[0], bf16(-k[:1]))
        child.truncate(tpb)
        assert len(child) == tpb and len(child.block_table) == 1
        with pytest.raises(kvpool.InvalidArgument):
            child.truncate(tpb + 1)
        child.free()
        child.free()
        with pytest.raises(kvpool.InvalidArgument) as e:
            len(child)
        assert e.value.errno == errno.EBADF


def test_quantised_round_trip(sock):
    # error per dtype within Documentation/kernels.rst's element bounds
    bounds = {"fp8": 2 ** -4, "int8": 1 / 127, "int4": 1 / 7}
    with kvpool.Context(sock, tenant="chat") as ctx:
        for dtype, b in bounds.items():
            lay = ctx.declare_layout(1, 2, 64, dtype)
            with lay.sequence() as s:
                s.append(40)
                k = randn(40, 2, 64)
                s.write_kv(0, 0, k, k)
                rk, _ = s.read_kv(0, 0, 40)
                err = np.abs(rk - k).max() / np.abs(k).max()
                assert 0 < err <= b, (dtype, err)


# ---- arrays: no copies, clear refusals ------------------------------------

def test_arrays_without_copies(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        lay = ctx.declare_layout(1, 2, 64, "bf16")
        seq = lay.sequence()
        seq.append(10)
        k = randn(10, 2, 64)
        seq.write_kv(0, 0, memoryview(k), memoryview(k))  # buffer protocol
        out = np.full((1, 4, 64), np.nan, np.float32)
        got = kvpool.decode([seq], 0, randn(1, 4, 64), out=out)
        assert got is out and np.isfinite(out).all()      # written in place
        kout = np.zeros((10, 2, 64), np.float32)
        rk, rv = seq.read_kv(0, 0, 10, k_out=kout)
        assert rk is kout and np.array_equal(kout, bf16(k))
        # a view into a larger buffer: written there, nothing else touched
        big = np.zeros((3, 10, 2, 64), np.float32)
        seq.read_kv(0, 0, 10, v_out=big[1], keys=False)
        assert np.array_equal(big[1], bf16(k)) and not big[0].any() \
            and not big[2].any()


@pytest.mark.parametrize("bad,why", [
    (np.zeros((10, 2, 64)), "dtype float64"),
    (np.zeros((10, 2, 128), np.float32)[:, :, ::2], "not C-contiguous"),
    (np.zeros((10, 2, 32), np.float32), "shape"),
    (np.zeros((10, 2, 64), np.float32).tolist(), "not list"),
    (np.zeros((10, 2, 64), ">f4"), "native order"),
])
def test_arrays_refused(sock, bad, why):
    with kvpool.Context(sock, tenant="chat") as ctx:
        seq = ctx.declare_layout(1, 2, 64).sequence()
        seq.append(10)
        good = np.zeros((10, 2, 64), np.float32)
        with pytest.raises(kvpool.InvalidArgument) as e:
            seq.write_kv(0, 0, bad, good)
        assert why in str(e.value) and e.value.errno == errno.EINVAL
        ro = np.zeros((1, 4, 64), np.float32)
        ro.flags.writeable = False
        with pytest.raises(kvpool.InvalidArgument, match="read-only"):
            kvpool.decode([seq], 0, np.zeros((1, 4, 64), np.float32),
                          out=ro)


def test_daemon_checks_reach_python(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        seq = ctx.declare_layout(1, 2, 64).sequence()
        seq.append(4)
        z = np.zeros((4, 2, 64), np.float32)
        with pytest.raises(kvpool.InvalidArgument) as e:
            seq.write_kv(1, 0, z, z)              # layer 1 of 1
        assert e.value.function == "kvl_seq_write_kv"
        with pytest.raises(kvpool.InvalidArgument):
            seq.write_kv(0, 2, z, z)              # beyond the length
        with pytest.raises(kvpool.InvalidArgument):  # 3 q heads, 2 kv heads
            kvpool.decode([seq], 0, np.zeros((1, 3, 64), np.float32))


# ---- raw blocks ----------------------------------------------------------

def test_raw_blocks_match_sequences(sock):
    with kvpool.Context(sock, tenant="chat") as ctx, \
            kvpool.Context(sock, tenant="other") as other:
        lay = ctx.declare_layout(1, 2, 64, "bf16")
        tpb = lay.tokens_per_block
        n = tpb + 9
        lease = ctx.lease(2)
        pos = np.arange(n)
        blocks = lease.blocks[pos // tpb]
        slots = pos % tpb
        k, v = randn(n, 2, 64), randn(n, 2, 64)
        lay.write_kv(0, blocks, slots, k, v)
        rk, rv = lay.read_kv(0, blocks, slots)
        assert np.array_equal(rk, bf16(k)) and np.array_equal(rv, bf16(v))
        q = randn(1, 8, 64)
        out = lay.attention(0, q, lease.blocks[None], [n])
        assert rel(out[0], ref_attention(q, rk, rv, n)[0]) < 1e-4
        q4 = randn(1, 3, 8, 64)
        out4 = lay.attention(0, q4, lease.blocks[None], [n])
        assert rel(out4[0], ref_attention(q4[0], rk, rv, n, n_new=3)) < 1e-4
        # copy block 0 onto block 1: slot 0 of block 1 reads like block 0's
        ctx.copy_blocks(lease.blocks[:1], lease.blocks[1:])
        rk1, _ = lay.read_kv(0, lease.blocks[1:], [0])
        assert np.array_equal(rk1[0], bf16(k[0]))
        # another client's blocks are refused by kvpoold
        olay = other.declare_layout(1, 2, 64, "bf16")
        with pytest.raises(kvpool.KvpoolError) as e:
            olay.write_kv(0, lease.blocks[:1], [0], k[:1], v[:1])
        assert e.value.errno == errno.EPERM
        with pytest.raises(kvpool.InvalidArgument):
            lay.write_kv(0, [-1], [0], k[:1], v[:1])


# ---- lifetimes -----------------------------------------------------------

def test_close_frees_sequences(sock, daemon):
    ctx = kvpool.Context(sock, tenant="victim")
    seq = ctx.declare_layout(1, 2, 64).sequence()
    seq.append(500)
    with daemon.admin() as adm:
        assert adm.tenant("victim").current > 0
        ctx.close()
        # the daemon releases when it sees the hang-up
        assert wait_until(lambda: adm.tenant("victim").current == 0)
    with pytest.raises(kvpool.InvalidArgument):
        seq.append(1)
    seq.free()                                    # harmless once closed


def test_garbage_collection_releases(sock, daemon):
    import gc
    ctx = kvpool.Context(sock, tenant="victim")
    ctx.declare_layout(1, 2, 64).sequence().append(300)
    ctx.lease(5)
    with daemon.admin() as adm:
        assert adm.tenant("victim").current > 0
        del ctx
        gc.collect()
        assert wait_until(lambda: adm.tenant("victim").current == 0)


def test_forked_child_refuses(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        seq = ctx.declare_layout(1, 1, 64).sequence()
        seq.append(3)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                # child
            code = 1
            try:
                seq.append(1)
            except kvpool.InvalidArgument as e:
                code = 0 if e.errno == errno.EBADF else 2
            ctx.close()                             # forgets, sends nothing
            os.write(w, bytes([code]))
            os._exit(0)
        os.close(w)
        assert os.read(r, 1) == b"\0"
        os.waitpid(pid, 0)
        assert len(seq) == 3 and seq.append(1) == 4


def test_threads_share_a_context(sock):
    with kvpool.Context(sock, tenant="chat") as ctx:
        lay = ctx.declare_layout(1, 2, 64)
        seq = lay.sequence()
        seq.append(64)
        k = randn(64, 2, 64)
        seq.write_kv(0, 0, k, k)
        q = randn(1, 4, 64)
        want = kvpool.decode([seq], 0, q)
        bad = []

        def run():
            for _ in range(50):
                if not np.array_equal(kvpool.decode([seq], 0, q), want):
                    bad.append(1)
        th = [threading.Thread(target=run) for _ in range(4)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        assert not bad


def test_daemon_restart_raises_stale(fresh_daemon):
    with kvpool.Context(fresh_daemon.socket, tenant="chat",
                        timeout=10) as ctx:
        seq = ctx.declare_layout(1, 2, 64).sequence()
        seq.append(20)
        z = np.ones((20, 2, 64), np.float32)
        seq.write_kv(0, 0, z, z)
        raw = ctx.lease(4)
        old = ctx.epoch
        fresh_daemon.kill9_and_restart()
        with pytest.raises(kvpool.StaleEpoch) as e:
            seq.write_kv(0, 0, z, z)
        assert e.value.errno == errno.ESTALE
        assert len(seq) == 0 and ctx.epoch != old
        assert len(raw) == 0        # the in-process ledger's lease died
        seq.append(20)                  # leased afresh, same layout id
        seq.write_kv(0, 0, z, z)
        assert np.array_equal(seq.read_kv(0, 0, 20)[0], z)


# ---- admin ---------------------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="tenant changes need root")
def test_admin_tenants(sock):
    with kvpool.Admin(sock) as adm:
        adm.tenant_add("py-admin", max=40, min=4)
        try:
            t = adm.tenant("py-admin")
            assert (t.max, t.min, t.current, t.uid) == (40, 4, 0, None)
            adm.tenant_set("py-admin", max=None)
            assert adm.tenant("py-admin").max is None
            assert adm.tenant("py-admin").min == 4
            with pytest.raises(kvpool.KvpoolError) as e:
                adm.tenant_add("py-admin")
            assert e.value.errno == errno.EEXIST
            with kvpool.Context(sock, tenant="py-admin") as ctx:
                ctx.lease(3)
                assert adm.tenant("py-admin").current == 3
                me = [c for c in adm.clients() if c.pid == os.getpid()
                      and c.tenant == "py-admin"]
                assert me and me[0].blocks == 3 and me[0].connected
            p = adm.pool_status()
            assert p.name == "host" and p.backend == "cpu"
            assert p.mode == "daemon" and p.capacity == 2048
        finally:
            adm.tenant_del("py-admin")
        with pytest.raises(kvpool.KvpoolError) as e:
            adm.tenant("py-admin")
        assert e.value.errno == errno.ENOENT
