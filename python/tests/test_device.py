# SPDX-License-Identifier: MIT
"""Device buffers and module mode through the binding.

Device buffers run against kvpoold's cuda backend on the CUDA driver's
test double (tests/cudafake, ``$KVPOOL_FAKE_LIBCUDA``, kernels executed on
the host emulation): K/V read into a buffer and written back from it,
attention with q and out in the buffer, equal to the host calls; the
refusals (no driver, the cpu backend, offsets, a freed buffer); a tenant
killed with a buffer registered.  Wrapping a buffer as a torch tensor
needs a real GPU (and torch with CUDA): that test skips without one.

Module mode needs /dev/kvpool (the kernel module, in the VM): a tenant's
lease from the module's ledger, with and without kvpoold."""
import errno
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import kvpool
import kvpool.testing
from kvpool.testing import wait_until

FAKE = os.environ.get("KVPOOL_FAKE_LIBCUDA", "")
RNG = np.random.default_rng(9)


def randn(*shape):
    return RNG.standard_normal(shape, dtype=np.float32)


@pytest.fixture(scope="module")
def cuda_daemon():
    if not FAKE:
        pytest.fail("$KVPOOL_FAKE_LIBCUDA is not set (test-device.sh sets "
                    "it)")
    env = dict(os.environ, KVPOOL_LIBCUDA=FAKE, KVPOOL_FAKE_CUDA_EXEC="1")
    d = kvpool.testing.Daemon(backend="cuda", tenants=["gpu"], env=env)
    yield d
    d.stop()


@pytest.fixture
def fake_driver(monkeypatch):
    monkeypatch.setenv("KVPOOL_LIBCUDA", FAKE)


def test_no_driver(sock, monkeypatch, tmp_path):
    monkeypatch.setenv("KVPOOL_LIBCUDA", str(tmp_path / "libcuda.so.1"))
    with kvpool.Context(sock, tenant="chat") as ctx:
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.dev_buf(1 << 20)
        assert e.value.errno == errno.ENODEV
        assert e.value.function == "kvl_dev_buf_create"


def test_cpu_backend_refuses(sock, fake_driver):
    with kvpool.Context(sock, tenant="chat") as ctx:
        assert ctx.status().backend == "cpu"
        with pytest.raises(kvpool.KvpoolError) as e:
            ctx.dev_buf(1 << 20)
        assert e.value.errno == errno.EOPNOTSUPP


def test_dev_buf_data_plane(cuda_daemon, fake_driver):
    with kvpool.Context(cuda_daemon.socket, tenant="gpu") as ctx:
        assert ctx.status().backend == "cuda"
        lay = ctx.declare_layout(1, 1, 64, "bf16")
        tpb = lay.tokens_per_block
        n = tpb + 3
        s = lay.sequence()
        s.append(n)
        k, v = randn(n, 1, 64), randn(n, 1, 64)
        s.write_kv(0, 0, k, v)
        hk, hv = s.read_kv(0, 0, n)
        tab = s.block_table
        pos = np.arange(n)
        blocks, slots = tab[pos // tpb], pos % tpb
        with ctx.dev_buf(1 << 20) as buf:
            assert buf.size >= 1 << 20 and buf.addr != 0
            kb = n * 64 * 4
            # K and V into the buffer, then from it onto a raw lease
            lay.read_kv_dev(0, blocks, slots, buf, 0, kb)
            lease = ctx.lease(2)
            lb = lease.blocks[pos // tpb]
            lay.write_kv_dev(0, lb, slots, buf, 0, kb)
            rk, rv = lay.read_kv(0, lb, slots)
            assert np.array_equal(rk, hk) and np.array_equal(rv, hv)
            # only V back, into another place
            lay.read_kv_dev(0, blocks[:4], slots[:4], buf, None, 2 * kb)
            # q for 1 sequence of 8 query heads: 8 stored keys' floats
            lay.read_kv_dev(0, blocks[:8], slots[:8], buf, 4 * kb, None)
            q = hk[:8].reshape(1, 8, 64)
            want = lay.attention(0, q, tab[None], [n])
            lay.attention_dev(0, buf, 4 * kb, 5 * kb, tab[None], [n],
                              q_heads=8)
            # out back to the host through a write and a read
            lay.write_kv_dev(0, lb[:8], slots[:8], buf, 5 * kb, 5 * kb)
            got = lay.read_kv(0, lb[:8], slots[:8])[0].reshape(1, 8, 64)
            assert np.abs(got - want).max() <= 2 ** -7 * np.abs(want).max()
            with pytest.raises(kvpool.InvalidArgument) as e:
                lay.write_kv_dev(0, lb, slots, buf, 1, kb)   # not 16-aligned
            assert e.value.function == "kvl_write_kv_dev"
            with pytest.raises(kvpool.KvpoolError) as e:
                lay.write_kv_dev(0, lb, slots, buf, buf.size, 0)
            assert e.value.errno == errno.EFAULT
            with pytest.raises(kvpool.InvalidArgument):
                buf.cuda_array(buf.size - 4, (2,))
            arr = buf.cuda_array(16, (8, 64))
            assert arr.__cuda_array_interface__["data"][0] == buf.addr + 16
            assert arr.__cuda_array_interface__["typestr"] == "<f4"
        with pytest.raises(kvpool.InvalidArgument) as e:
            buf.size
        assert e.value.errno == errno.EBADF
        with pytest.raises(kvpool.InvalidArgument):
            ctx.dev_buf(0)


CHILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
import kvpool
ctx = kvpool.Context(sys.argv[1], tenant="gpu")
buf = ctx.dev_buf(1 << 20)
ctx.lease(3)
print("held", flush=True)
sys.stdin.read()
"""


def test_killed_with_a_buffer(cuda_daemon, fake_driver):
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.Popen([sys.executable, "-c", CHILD, cuda_daemon.socket,
                          pkg], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    with cuda_daemon.admin() as adm:
        assert wait_until(lambda: adm.tenant("gpu").current == 0)
    assert cuda_daemon.alive()
    with kvpool.Context(cuda_daemon.socket, tenant="gpu") as ctx:
        with ctx.dev_buf(1 << 20) as buf:
            assert buf.size >= 1 << 20


def test_torch_wraps_a_buffer(cuda_daemon, fake_driver):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU: torch.as_tensor of a device buffer needs one")
    with kvpool.Context(cuda_daemon.socket, tenant="gpu") as ctx:
        with ctx.dev_buf(1 << 20) as buf:
            t = torch.as_tensor(buf.cuda_array(0, (4, 64)), device="cuda")
            assert t.data_ptr() == buf.addr and t.shape == (4, 64)


# ---- module mode ---------------------------------------------------------

DEVICE = os.environ.get("KVPOOL_DEVICE", "/dev/kvpool")


@pytest.fixture
def module():
    if not os.path.exists(DEVICE):
        pytest.skip(f"no {DEVICE} (the kernel module is loaded in the VM)")
    return DEVICE


def test_module_ledger_only(module):
    with kvpool.Context(device=module, ledger_only=True) as ctx:
        st = ctx.status()
        assert st.mode == "module" and st.backend == ""
        with ctx.lease(3) as lease:
            assert len(lease) == 3 and ctx.status().held == 3
        assert ctx.status().held == 0
        fd, events = ctx.reclaim_fd()
        import select
        assert fd >= 0 and events == select.POLLPRI


def test_module_with_daemon(module):
    d = kvpool.testing.Daemon(ledger="module", extra=["--device", module])
    try:
        with kvpool.Context(d.socket, device=module) as ctx:
            st = ctx.status()
            assert st.mode == "module" and st.backend == "cpu"
            lay = ctx.declare_layout(1, 2, 64)
            s = lay.sequence()
            s.append(40)
            k = randn(40, 2, 64)
            s.write_kv(0, 0, k, k)
            assert s.read_kv(0, 0, 40)[0].shape == (40, 2, 64)
        with kvpool.Context(d.socket, device=module, no_module=True) as ctx:
            assert ctx.status().mode == "daemon"
    finally:
        d.stop()
