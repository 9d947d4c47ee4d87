# SPDX-License-Identifier: MIT
"""Editing sequences through the binding, against a real kvpoold: RoPE
data on a layout, splice (the tail's keys turned by kvpoold, compared
with keys rotated here at their new positions), compact, score (against
an FP64 softmax) and compress, the relief list's compression, and the
documented errors."""
import errno

import numpy as np
import pytest

import kvpool

RNG = np.random.default_rng(5)
BASE = 10000.0


def randn(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


def rope(x, pos, base=BASE):
    """NEOX rotation of x [n][heads][hd] at positions pos [n], FP64."""
    hd = x.shape[-1]
    half = hd // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2 / hd)
    ang = np.asarray(pos, np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x = x.astype(np.float64)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def rotated_seq(lay, n):
    raw_k, v = randn(n, 1, 64), randn(n, 1, 64)
    s = lay.sequence()
    s.append(n)
    s.write_kv(0, 0, rope(raw_k, np.arange(n)).astype(np.float32), v)
    return s, raw_k, s.read_kv(0, 0, n)[1]


def test_splice_turns_the_tail(tsock):
    with kvpool.Context(tsock, tenant="edit") as ctx:
        lay = ctx.declare_layout(1, 1, 64, "bf16", BASE)
        lay.set_rope("neox")
        s, raw_k, v = rotated_seq(lay, 20)
        assert s.next_pos == 20
        assert list(s.positions()) == list(range(20))
        # delete 3 slots at 5, make 1: the tail moves back by 2
        assert s.splice(5, 3, 1) == 18 == len(s)
        assert list(s.positions()) == list(range(18))
        assert s.next_pos == 18
        k2, v2 = s.read_kv(0, 0, 18)
        assert not k2[5].any() and not v2[5].any()      # the new slot
        assert np.array_equal(v2[6:], v[8:])            # values move as is
        assert np.array_equal(v2[:5], v[:5])
        want = rope(raw_k[8:], np.arange(6, 18))
        assert rel(k2[6:], want) < 1e-2                 # BF16 keys
        # the caller writes the new slot's K/V at its position
        kn = randn(1, 1, 64)
        s.write_kv(0, 5, rope(kn, s.positions(5, 1)).astype(np.float32),
                   kn)
        # inserting without deleting moves the tail forward
        assert s.splice(0, 0, 2) == 20
        assert list(s.positions(0, 3)) == [0, 1, 2]
        k3 = s.read_kv(0, 0, 20)[0]
        assert rel(k3[8:], rope(raw_k[8:], np.arange(8, 20))) < 1e-2


def test_splice_errors(tsock):
    with kvpool.Context(tsock, tenant="edit") as ctx:
        plain = ctx.declare_layout(1, 1, 64, "bf16")
        s = plain.sequence()
        s.append(10)
        with pytest.raises(kvpool.KvpoolError) as e:
            s.splice(2, 2, 0)                   # the tail must turn
        assert e.value.errno == errno.ENODATA
        assert e.value.function == "kvl_seq_splice"
        assert len(s) == 10                     # unchanged
        assert s.splice(2, 2, 2) == 10          # no shift: no RoPE needed
        lay = ctx.declare_layout(1, 1, 64, "bf16", BASE)
        lay.set_rope("neox")
        s = lay.sequence()
        s.append(10)
        with pytest.raises(kvpool.KvpoolError) as e:
            s.splice(8, 3, 0)
        assert e.value.errno == errno.ERANGE
        with pytest.raises(kvpool.KvpoolError) as e:
            s.positions(5, 6)
        assert e.value.errno == errno.ERANGE
        with pytest.raises(kvpool.InvalidArgument):
            s.splice(-1, 0, 0)
        # a swapped sequence refuses edits until it is back
        ctx.tier_join(1)
        s.swap_out(1)
        with pytest.raises(kvpool.KvpoolError) as e:
            s.splice(0, 1, 1)
        assert e.value.errno == errno.EBUSY
        s.swap_in()
        assert s.splice(0, 1, 1) == 10
        # RoPE data
        with pytest.raises(kvpool.InvalidArgument):
            lay.set_rope("yarn")
        with pytest.raises(kvpool.InvalidArgument) as e:
            lay.set_rope("neox", rotary_dims=33)
        assert e.value.function == "kvl_layout_set_rope"
        with pytest.raises(kvpool.InvalidArgument):
            lay.set_rope("gptj", inv_freq=np.ones(5, np.float32))
        lay.set_rope("gptj", inv_freq=np.ones(32, np.float32))
        lay.set_rope("none")
        s.append(1)
        with pytest.raises(kvpool.KvpoolError) as e:
            s.splice(0, 1, 0)
        assert e.value.errno == errno.ENODATA


def test_compact(tsock):
    with kvpool.Context(tsock, tenant="edit") as ctx:
        lay = ctx.declare_layout(1, 1, 64, "bf16", BASE)
        tpb = lay.tokens_per_block
        n = 3 * tpb
        s = lay.sequence()
        s.append(n)
        k = randn(n, 1, 64)
        s.write_kv(0, 0, k, k)
        stored = s.read_kv(0, 0, n)[0]
        keep = [0, 2, 5, tpb + 1, n - 1]
        assert s.compact(keep) == 5 == len(s)
        assert len(s.block_table) == 1                  # the fewest blocks
        assert list(s.positions()) == keep              # positions kept
        assert np.array_equal(s.read_kv(0, 0, 5)[0], stored[keep])
        for bad in ([3, 1], [1, 1], [0, 7]):
            with pytest.raises(kvpool.InvalidArgument) as e:
                s.compact(bad)
            assert e.value.function == "kvl_seq_compact"
        assert len(s) == 5


def test_score_and_compress(tsock):
    with kvpool.Context(tsock, tenant="edit") as ctx:
        lay = ctx.declare_layout(1, 1, 64, "bf16", BASE)
        n = 40
        s = lay.sequence()
        s.append(n)
        k = randn(n, 1, 64)
        s.write_kv(0, 0, k, k)
        stored = s.read_kv(0, 0, n)[0].astype(np.float64)
        q = randn(3, 2, 64)                     # 3 queries, 2 query heads
        sc = s.score(0, q, scale=0.125, reset=True)
        want = np.zeros(n)
        for i in range(3):
            for h in range(2):
                x = stored[:, 0] @ q[i, h].astype(np.float64) * 0.125
                p = np.exp(x - x.max())
                want += p / p.sum()
        assert sc.shape == (n,) and rel(sc, want) < 1e-4
        mx = s.score(0, q, scale=0.125, use_max=True, scores=True,
                     reset=True)
        assert np.all(mx <= sc + 1e-6) and mx.max() > 0
        assert s.score(0, q, scale=0.125, reset=True, scores=False) is None
        # causal: the last 3 slots are the queries
        cs = s.score(0, q, scale=0.125, causal=True, reset=True)
        assert cs[:n - 3].sum() > 0 and abs(cs.sum() - 6) < 1e-3
        # compress by the importance just scored
        s.set_compress(sinks=2, window=4, budget=10)
        imp = s.score(0, q, scale=0.125, reset=True)
        mid = np.argsort(-imp[2:n - 4])[:4] + 2
        expect = sorted(set([0, 1] + list(range(n - 4, n)) + list(mid)))
        assert s.compress() == 10 == len(s)
        assert list(s.positions()) == expect
        assert np.array_equal(s.read_kv(0, 0, 10)[0],
                              stored[expect].astype(np.float32))
        with pytest.raises(kvpool.InvalidArgument) as e:
            s.compress(5)                       # sinks + window > budget
        assert e.value.function == "kvl_seq_compress"
        s.set_compress(None)
        with pytest.raises(kvpool.InvalidArgument):
            s.score(0, np.zeros((3, 2, 32), np.float32))


def test_compress_reclaim(tsock):
    with kvpool.Context(tsock, tenant="edit") as ctx:
        lay = ctx.declare_layout(1, 1, 64, "bf16", BASE)
        tpb = lay.tokens_per_block
        big = lay.sequence()
        big.append(4 * tpb)
        big.set_compress(sinks=4, window=8, budget=tpb // 2)
        other = lay.sequence()
        other.append(2 * tpb)                   # no policy: left alone
        assert ctx.compress_reclaim(0) == 3
        assert len(big) == tpb // 2 and len(other) == 2 * tpb
        st = ctx.policy_stats()
        assert st.compressions == 1 and st.compressed_blocks == 3
        assert ctx.compress_reclaim(0) == 0
        # max_tokens: append compresses first
        big.set_compress(sinks=4, window=8, budget=16, max_tokens=tpb)
        assert big.append(tpb // 2) == tpb          # not past it
        assert big.append(10) == 16 + 10            # compressed first
        with pytest.raises(kvpool.InvalidArgument):
            big.append(tpb)                         # cannot fit
        with pytest.raises(kvpool.InvalidArgument):
            big.set_compress(sinks=-1)
