# SPDX-License-Identifier: MIT
"""Contexts, leases, layouts and sequences: libkvlease's client calls.

Arrays.  K, V, queries and outputs are float32 arrays in C order, passed
to libkvlease by their data address: the binding never copies them.
Anything with the buffer protocol or ``__array__`` that numpy can view
without a copy works (numpy arrays, ``memoryview``, CPU ``torch`` tensors).
An array of another dtype, memory order or shape is refused with
:class:`InvalidArgument` rather than converted behind the caller's back.
(libkvlease itself moves the data through its shared region with kvpoold:
one ``memcpy`` each way, the same as for a C caller.)  Index arrays (block
numbers, slots, block tables, lengths) are small and are converted to
``uint32`` when they are not already.

Lifetimes.  A :class:`Context` owns what it creates: closing it (or
leaving its ``with`` block) frees its sequences and returns every block.
Sequences and leases are context managers too.  A context is tied to the
process that opened it: in a forked child it refuses every call (the
child's copy of the connection must not talk for the parent).  Calls on
one context are serialised by a lock, so threads may share it.
"""
from __future__ import annotations

import errno
import os
import threading
import weakref
from ctypes import POINTER, byref, c_short, c_uint32, c_void_p
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence as _Seq

import numpy as np

from . import _lib
from ._lib import check, cstr, fn, pystr
from .errors import InvalidArgument, KvpoolError

DTYPES = {"bf16": _lib.DTYPE_BF16, "fp8": _lib.DTYPE_FP8,
          "int8": _lib.DTYPE_INT8, "int4": _lib.DTYPE_INT4}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

LogFn = Callable[[int, str], None]


# ---- arrays ---------------------------------------------------------------

def _view(a, name: str) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    if isinstance(a, (list, tuple, int, float, complex, str, bytes)):
        raise InvalidArgument(errno.EINVAL, f"{name}: needs a float32 "
                              f"array, not {type(a).__name__} (no copy is "
                              "made for the caller)")
    try:
        return np.asarray(a)
    except Exception as e:
        raise InvalidArgument(errno.EINVAL, f"{name}: cannot be viewed as "
                              f"an array without a copy: {e}") from None


def f32(a, shape: tuple, name: str, writable: bool = False) -> np.ndarray:
    """a as a float32 C-contiguous array of shape (None: any extent),
    without a copy; InvalidArgument otherwise."""
    arr = _view(a, name)
    if arr.dtype != np.float32 or not arr.dtype.isnative:
        raise InvalidArgument(errno.EINVAL, f"{name}: dtype {arr.dtype}, "
                              "needs float32 (native order); convert it "
                              "first, e.g. .astype(numpy.float32)")
    if not arr.flags.c_contiguous or not arr.flags.aligned:
        raise InvalidArgument(errno.EINVAL, f"{name}: not C-contiguous; "
                              "use numpy.ascontiguousarray() (a copy)")
    if writable and not arr.flags.writeable:
        raise InvalidArgument(errno.EINVAL, f"{name}: read-only")
    if arr.ndim != len(shape) or any(
            want is not None and got != want
            for got, want in zip(arr.shape, shape)):
        want = tuple("*" if s is None else s for s in shape)
        raise InvalidArgument(errno.EINVAL, f"{name}: shape {arr.shape}, "
                              f"needs {want}")
    return arr


def u32(a, name: str, shape: tuple | None = None) -> np.ndarray:
    """Index array a as C-contiguous uint32 (converted when needed: these
    are small)."""
    arr = np.asarray(a)
    if arr.dtype != np.uint32:
        if arr.dtype.kind not in "iub" and arr.size:
            raise InvalidArgument(errno.EINVAL, f"{name}: needs integers, "
                                  f"not {arr.dtype}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) > 0xFFFFFFFF):
            raise InvalidArgument(errno.EINVAL, f"{name}: values outside "
                                  "0..2^32-1")
        arr = arr.astype(np.uint32)
    arr = np.ascontiguousarray(arr)
    if shape is not None and (arr.ndim != len(shape) or any(
            want is not None and got != want
            for got, want in zip(arr.shape, shape))):
        want = tuple("*" if s is None else s for s in shape)
        raise InvalidArgument(errno.EINVAL, f"{name}: shape {arr.shape}, "
                              f"needs {want}")
    return arr


def _ptr(arr: np.ndarray | None) -> int | None:
    return None if arr is None else arr.__array_interface__["data"][0]


def _ns(seconds: float | None) -> int:
    if seconds is None:
        return 0
    if seconds < 0:
        raise InvalidArgument(errno.EINVAL, "timeout must be >= 0")
    return max(1, int(seconds * 1e9)) if seconds else 0


# ---- status --------------------------------------------------------------

def _limit(v: int) -> int | None:
    return None if v == _lib.UNLIMITED else v


def _mode(v: int) -> str:
    return {_lib.MODE_MODULE: "module", _lib.MODE_DAEMON: "daemon"}.get(
        v, str(v))


@dataclass(frozen=True)
class Status:
    """kvl_status(): the pool, the tenant and this client's lease."""
    pool: str
    tenant: str
    lease_id: int
    block_bytes: int
    capacity: int
    backed: int
    used: int
    held: int                  #: blocks held by this context
    tenant_max: int | None     #: None: unlimited
    tenant_min: int
    tenant_current: int
    tenant_peak: int
    reclaim_target: int
    state: int                 #: KVPOOL_STATE_* (1 live, 2 orphaned)
    epoch: int                 #: changes when kvpoold restarts
    mode: str                  #: "module" (/dev/kvpool) or "daemon"
    cached: int                #: leased blocks kept unused by the library
    region_bytes: int
    backend: str               #: "cpu", "cuda" or "" (no daemon)


# ---- context -------------------------------------------------------------

class Context:
    """One client of one pool (``struct kvl_ctx``): a lease charged to one
    tenant, a connection to kvpoold and a shared region.

    Arguments mirror ``struct kvl_opts``: ``socket`` (default
    ``$KVPOOL_SOCKET``, then ``/run/kvpool/kvpool.sock``), ``device``
    (``$KVPOOL_DEVICE``, ``/dev/kvpool``), ``pool`` and ``tenant`` (None:
    the first pool, the per-uid tenant), ``ledger_only`` (no daemon:
    leases only, needs the module), ``no_module`` (use the daemon's
    ledger even when /dev/kvpool exists), ``reconnect`` (False: calls fail
    with ECONNRESET after a daemon restart), ``lease_batch``,
    ``region_bytes``, ``timeout`` (seconds; lease waits of sequences and
    reconnects; None: 10 s), ``log`` (``log(level, message)``, syslog
    levels; None: errors to stderr) and ``log_level``.

    Raises :class:`KvpoolError` (e.g. ENOENT or ECONNREFUSED when kvpoold
    is not there, ENOENT for an unknown tenant).
    """

    def __init__(self, socket: str | os.PathLike | None = None, *,
                 device: str | os.PathLike | None = None,
                 pool: str | None = None, tenant: str | None = None,
                 ledger_only: bool = False, no_module: bool = False,
                 reconnect: bool = True, lease_batch: int = 0,
                 region_bytes: int = 0, timeout: float | None = None,
                 log: LogFn | None = None, log_level: int = 0):
        self._h = None
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._seqs: weakref.WeakSet = weakref.WeakSet()
        self._leases: weakref.WeakSet = weakref.WeakSet()
        self._layouts: list[Layout] = []
        o = _lib.KvlOpts()
        keep = []
        if socket is not None:
            o.socket_path = os.fsencode(socket)
        if device is not None:
            o.device_path = os.fsencode(device)
        o.pool = cstr(pool)
        o.tenant = cstr(tenant)
        o.flags = ((_lib.OPEN_NO_DAEMON if ledger_only else 0) |
                   (_lib.OPEN_NO_MODULE if no_module else 0) |
                   (0 if reconnect else _lib.OPEN_NO_RECONNECT))
        o.lease_batch = lease_batch
        o.region_bytes = region_bytes
        o.timeout_ns = _ns(timeout)
        o.log_level = log_level
        if log is not None:
            def trampoline(arg, level, msg, log=log):
                try:
                    log(level, msg.decode(errors="replace"))
                except Exception:       # never unwind into C
                    pass
            cb = _lib.LOG_FN(trampoline)
            o.log = cb
            keep.append(cb)
        self._keep = keep       # the callback lives as long as the context
        h = c_void_p()
        check(fn("kvl_open")(byref(o), byref(h)), "kvl_open")
        self._h = h.value

    # -- lifetime --

    def _handle(self) -> int:
        if self._h is None:
            raise InvalidArgument(errno.EBADF, "the context is closed")
        if os.getpid() != self._pid:
            raise InvalidArgument(errno.EBADF, "the context belongs to "
                                  f"process {self._pid} (opened before "
                                  "fork): open a new one in this process")
        return self._h

    def _call(self, name: str, *args) -> int:
        """libkvlease call name(*args): its result, or its -errno raised.
        After ESTALE with the daemon's ledger the lease died with the old
        kvpoold: the Lease objects are emptied (their blocks are void)."""
        r = fn(name)(*args)
        if r < 0:
            if r == -errno.ESTALE:
                st = _lib.KvlStatus()
                if (fn("kvl_status")(self._h, byref(st)) < 0 or
                        st.mode == _lib.MODE_DAEMON):
                    for lease in list(self._leases):
                        lease._forget()
            raise KvpoolError.from_errno(-r, name)
        return r

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self) -> None:
        """Free every sequence and return every block (kvl_close).  Safe to
        call twice.  In a forked child it only forgets the context."""
        with self._lock:
            if self._h is None:
                return
            h, self._h = self._h, None
            for s in list(self._seqs):
                s._h = None
            for lease in list(self._leases):
                lease._forget()
            if os.getpid() == self._pid:
                fn("kvl_close")(h)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"<kvpool.Context {'closed' if self._h is None else 'open'}"
                f" pid={self._pid}>")

    # -- leases --

    def attach_tenant(self, pool: str | None = None,
                      tenant: str | None = None) -> None:
        """Move this (empty) lease to another pool/tenant (EBUSY while
        holding blocks)."""
        with self._lock:
            self._call("kvl_attach_tenant", self._handle(), cstr(pool),
                       cstr(tenant))

    def lease(self, count: int, *, partial: bool = False,
              nonblock: bool = False, orphan_fail: bool = False,
              timeout: float | None = None) -> "Lease":
        """Lease count blocks (kvl_lease): lowest free first, all or
        nothing unless partial.  timeout in seconds, None: no limit.
        Raises QuotaExceeded (EDQUOT), WouldBlock (EAGAIN, nonblock),
        LeaseTimeout (ETIMEDOUT), KvpoolError (ENOMEM, ENXIO, ENOSPC)."""
        if count <= 0:
            raise InvalidArgument(errno.EINVAL, "count must be >= 1")
        flags = ((_lib.LEASE_PARTIAL if partial else 0) |
                 (_lib.LEASE_NONBLOCK if nonblock else 0) |
                 (_lib.LEASE_ORPHAN_FAIL if orphan_fail else 0))
        buf = np.zeros(count, dtype=np.uint32)
        with self._lock:
            n = self._call("kvl_lease", self._handle(), count, flags,
                           _ns(timeout), _ptr(buf))
            lease = Lease(self, buf[:n].copy())
            self._leases.add(lease)
        return lease

    def release(self, blocks) -> int:
        """Release raw blocks (all validated first: EINVAL if one is not
        held).  Returns the number released.  Prefer Lease.release()."""
        b = u32(blocks, "blocks", (None,))
        if not b.size:
            return 0
        with self._lock:
            n = self._call("kvl_release", self._handle(), _ptr(b), b.size)
            gone = set(b.tolist())
            for lease in list(self._leases):
                lease._drop(gone)
        return n

    def release_all(self) -> int:
        """Release every block of this context, sequences' included (they
        keep existing with length 0).  Returns the number released."""
        with self._lock:
            n = self._call("kvl_release_all", self._handle())
            for lease in list(self._leases):
                lease._forget()
        return n

    def trim(self) -> int:
        """Give the library's cached (leased, unused) blocks back."""
        with self._lock:
            return self._call("kvl_trim", self._handle())

    def reclaim_fd(self) -> tuple[int, int]:
        """(fd, events): poll fd for events (select.POLLPRI on
        /dev/kvpool, POLLIN on the daemon socket), then call
        reclaim_target().  The fd stays the context's."""
        ev = c_short()
        with self._lock:
            fd = self._call("kvl_reclaim_fd", self._handle(), byref(ev))
        return fd, ev.value

    def reclaim_target(self) -> int:
        """Blocks the ledger asks this client to give back (0: none)."""
        t = c_uint32()
        with self._lock:
            self._call("kvl_reclaim_target", self._handle(), byref(t))
        return t.value

    def status(self) -> Status:
        """kvl_status(): pool, tenant and lease figures."""
        st = _lib.KvlStatus()
        with self._lock:
            self._call("kvl_status", self._handle(), byref(st))
        return Status(
            pool=pystr(st.pool), tenant=pystr(st.tenant),
            lease_id=st.lease_id, block_bytes=st.block_bytes,
            capacity=st.capacity, backed=st.backed, used=st.used,
            held=st.held, tenant_max=_limit(st.tenant_max),
            tenant_min=st.tenant_min, tenant_current=st.tenant_current,
            tenant_peak=st.tenant_peak, reclaim_target=st.reclaim_target,
            state=st.state, epoch=st.epoch, mode=_mode(st.mode),
            cached=st.cached, region_bytes=st.region_bytes,
            backend=pystr(st.backend))

    @property
    def epoch(self) -> int:
        """The data epoch (0 before the first daemon call); changes when
        kvpoold restarts (a call then raises StaleEpoch once)."""
        with self._lock:
            return fn("kvl_epoch")(self._handle())

    # -- layouts and blocks --

    def declare_layout(self, layers: int, kv_heads: int, head_dim: int,
                       dtype: str | int = "bf16",
                       rope_base: float = 0.0) -> "Layout":
        """Declare a model's KV layout (kvl_layout_declare): dtype "bf16",
        "fp8", "int8" or "int4"; head_dim a multiple of 32 in 32..256.
        Up to 8 per context (ENOSPC beyond)."""
        if isinstance(dtype, str):
            if dtype not in DTYPES:
                raise InvalidArgument(errno.EINVAL, f"dtype {dtype!r}: one "
                                      f"of {', '.join(DTYPES)}")
            code = DTYPES[dtype]
        else:
            code = int(dtype)
        lay = _lib.KvlLayout(layers=layers, kv_heads=kv_heads,
                             head_dim=head_dim, dtype=code,
                             rope_base=rope_base)
        with self._lock:
            lid = self._call("kvl_layout_declare", self._handle(), byref(lay))
            layout = Layout(self, lid, layers, kv_heads, head_dim,
                            _DTYPE_NAMES.get(code, str(code)), rope_base,
                            lay.tokens_per_block, lay.bytes_per_token)
            self._layouts.append(layout)
        return layout

    @property
    def layouts(self) -> list["Layout"]:
        return list(self._layouts)

    def copy_blocks(self, src, dst) -> None:
        """Copy whole blocks: dst[i] = src[i], in order."""
        s = u32(src, "src", (None,))
        d = u32(dst, "dst", (s.size,))
        with self._lock:
            self._call("kvl_copy_blocks", self._handle(), _ptr(s), _ptr(d),
                       s.size)


# ---- leases --------------------------------------------------------------

class Lease:
    """Blocks granted by one Context.lease() call.  ``blocks`` are pool
    block numbers (uint32, read-only).  release() gives them (or some)
    back; leaving a ``with`` block releases what is left."""

    def __init__(self, ctx: Context, blocks: np.ndarray):
        self._ctx = ctx
        blocks.flags.writeable = False
        self._blocks = blocks

    @property
    def blocks(self) -> np.ndarray:
        return self._blocks

    def __len__(self) -> int:
        return int(self._blocks.size)

    def __iter__(self):
        return iter(self._blocks.tolist())

    def __array__(self, dtype=None):
        return self._blocks if dtype is None else self._blocks.astype(dtype)

    def _forget(self) -> None:
        self._blocks = np.zeros(0, dtype=np.uint32)
        self._blocks.flags.writeable = False

    def _drop(self, gone: set) -> None:
        keep = np.array([b for b in self._blocks.tolist() if b not in gone],
                        dtype=np.uint32)
        keep.flags.writeable = False
        self._blocks = keep

    def release(self, blocks=None) -> int:
        """Release blocks of this lease (None: all of them left)."""
        if self._ctx.closed:
            self._forget()
            return 0
        b = self._blocks if blocks is None else u32(blocks, "blocks", (None,))
        if not b.size:
            return 0
        mine = set(self._blocks.tolist())
        if any(x not in mine for x in b.tolist()):
            raise InvalidArgument(errno.EINVAL, "a block is not in this "
                                  "lease")
        return self._ctx.release(b)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<kvpool.Lease {len(self)} blocks>"


# ---- layouts -------------------------------------------------------------

class Layout:
    """A declared KV layout of a context: ``tokens_per_block`` and
    ``bytes_per_token`` come from the pool's block size.  The raw data
    plane (engines with their own block tables) is here; sequences are
    made with sequence()."""

    def __init__(self, ctx: Context, lid: int, layers: int, kv_heads: int,
                 head_dim: int, dtype: str, rope_base: float,
                 tokens_per_block: int, bytes_per_token: int):
        self.ctx = ctx
        self.id = lid
        self.layers = layers
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.rope_base = rope_base
        self.tokens_per_block = tokens_per_block
        self.bytes_per_token = bytes_per_token

    def __repr__(self) -> str:
        return (f"<kvpool.Layout {self.id}: {self.layers} layers, "
                f"{self.kv_heads} kv heads x {self.head_dim}, {self.dtype}, "
                f"{self.tokens_per_block} tokens/block>")

    def sequence(self) -> "Sequence":
        """A new, empty sequence of this layout (kvl_seq_create)."""
        ctx = self.ctx
        h = c_void_p()
        with ctx._lock:
            ctx._call("kvl_seq_create", ctx._handle(), self.id, byref(h))
            seq = Sequence(self, h.value)
            ctx._seqs.add(seq)
        return seq

    def _kv_shape(self, ntok) -> tuple:
        return (ntok, self.kv_heads, self.head_dim)

    def write_kv(self, layer: int, blocks, slots, k, v) -> None:
        """K and V of ntok tokens of one layer: token t to slot slots[t]
        of block blocks[t]; k, v float32 [ntok][kv_heads][head_dim]."""
        b = u32(blocks, "blocks", (None,))
        s = u32(slots, "slots", (b.size,))
        k = f32(k, self._kv_shape(b.size), "k")
        v = f32(v, self._kv_shape(b.size), "v")
        ctx = self.ctx
        with ctx._lock:
            ctx._call("kvl_write_kv", ctx._handle(), self.id, layer, b.size,
                      _ptr(b), _ptr(s), _ptr(k), _ptr(v))

    def read_kv(self, layer: int, blocks, slots, *, k_out=None, v_out=None,
                keys: bool = True, values: bool = True):
        """Read back (dequantised) as float32 [ntok][kv_heads][head_dim];
        returns (k, v), None for the ones not asked for."""
        b = u32(blocks, "blocks", (None,))
        s = u32(slots, "slots", (b.size,))
        k, v = _kv_outs(self._kv_shape(b.size), k_out, v_out, keys, values)
        ctx = self.ctx
        with ctx._lock:
            ctx._call("kvl_read_kv", ctx._handle(), self.id, layer, b.size,
                      _ptr(b), _ptr(s), _ptr(k), _ptr(v))
        return k, v

    def attention(self, layer: int, q, block_tables, ctx_lens, *,
                  scale: float = 0.0, out=None) -> np.ndarray:
        """Attention on raw block tables (kvl_attention).  q float32
        [batch][q_heads][head_dim] is decode (one query per sequence at
        its last position); [batch][n_new][q_heads][head_dim] is causal
        attention for each sequence's last n_new positions.  block_tables
        [batch][max_blocks_per_seq], ctx_lens [batch].  scale 0:
        1/sqrt(head_dim).  Returns out (like q)."""
        q = _q_check(q, self.head_dim)
        batch = q.shape[0]
        n_new = q.shape[1] if q.ndim == 4 else 0
        q_heads = q.shape[-2]
        t = u32(block_tables, "block_tables", (batch, None))
        c = u32(ctx_lens, "ctx_lens", (batch,))
        out = _out_like(q, out)
        a = _lib.KvlAttnArgs(layer=layer, batch=batch, q_heads=q_heads,
                             max_blocks_per_seq=t.shape[1], n_new=n_new,
                             scale=scale, q=_ptr(q), block_tables=_ptr(t),
                             ctx_lens=_ptr(c), out=_ptr(out))
        ctx = self.ctx
        with ctx._lock:
            ctx._call("kvl_attention", ctx._handle(), self.id, byref(a))
        return out


def _kv_outs(shape, k_out, v_out, keys, values):
    k = v = None
    if keys or k_out is not None:
        k = (np.empty(shape, np.float32) if k_out is None
             else f32(k_out, shape, "k_out", writable=True))
    if values or v_out is not None:
        v = (np.empty(shape, np.float32) if v_out is None
             else f32(v_out, shape, "v_out", writable=True))
    if k is None and v is None:
        raise InvalidArgument(errno.EINVAL, "nothing to read")
    return k, v


def _q_check(q, head_dim):
    arr = _view(q, "q")
    if arr.ndim not in (3, 4):
        raise InvalidArgument(errno.EINVAL, f"q: shape {arr.shape}, needs "
                              "[batch][q_heads][head_dim] (decode) or "
                              "[batch][n_new][q_heads][head_dim]")
    return f32(arr, arr.shape[:-1] + (head_dim,), "q")


def _out_like(q, out):
    if out is None:
        return np.empty(q.shape, np.float32)
    return f32(out, q.shape, "out", writable=True)


# ---- sequences -----------------------------------------------------------

class Sequence:
    """A list of positions with a block table kept by libkvlease
    (``struct kvl_seq``).  Position p is slot p % tokens_per_block of
    block block_table[p // tokens_per_block].  free() (or the end of a
    ``with`` block, or the context's close) gives its blocks back."""

    def __init__(self, layout: Layout, h: int):
        self.layout = layout
        self.ctx = layout.ctx
        self._h = h

    def _handle(self) -> int:
        self.ctx._handle()
        if self._h is None:
            raise InvalidArgument(errno.EBADF, "the sequence is freed")
        return self._h

    def free(self) -> None:
        """Free the sequence (kvl_seq_free); safe to call twice."""
        ctx = self.ctx
        with ctx._lock:
            if self._h is None or ctx.closed:
                self._h = None
                return
            if os.getpid() != ctx._pid:
                return
            h, self._h = self._h, None
            ctx._seqs.discard(self)
            fn("kvl_seq_free")(h)

    close = free

    def __enter__(self) -> "Sequence":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    def __len__(self) -> int:
        with self.ctx._lock:
            return fn("kvl_seq_len")(self._handle())

    def __repr__(self) -> str:
        if self._h is None or self.ctx.closed:
            return "<kvpool.Sequence freed>"
        return f"<kvpool.Sequence len={len(self)} layout={self.layout.id}>"

    @property
    def block_table(self) -> np.ndarray:
        """A copy of the block table (uint32, one entry per block)."""
        tab = POINTER(c_uint32)()
        n = c_uint32()
        with self.ctx._lock:
            self.ctx._call("kvl_seq_block_table", self._handle(), byref(tab),
                           byref(n))
            if not n.value:
                return np.zeros(0, dtype=np.uint32)
            return np.ctypeslib.as_array(tab, shape=(n.value,)).copy()

    def append(self, ntok: int) -> int:
        """Grow by ntok positions, leasing blocks as needed; returns the new
        length.  QuotaExceeded, LeaseTimeout... from the ledger."""
        if ntok < 0:
            raise InvalidArgument(errno.EINVAL, "ntok must be >= 0")
        with self.ctx._lock:
            return self.ctx._call("kvl_seq_append", self._handle(), ntok)

    def truncate(self, length: int) -> None:
        """Keep the first length positions (emptied blocks are freed)."""
        if length < 0:
            raise InvalidArgument(errno.EINVAL, "length must be >= 0")
        with self.ctx._lock:
            self.ctx._call("kvl_seq_truncate", self._handle(), length)

    def fork(self) -> "Sequence":
        """A child sharing every full block (copy-on-write) with a copy of
        the partial last block."""
        h = c_void_p()
        with self.ctx._lock:
            self.ctx._call("kvl_seq_fork", self._handle(), byref(h))
            child = Sequence(self.layout, h.value)
            self.ctx._seqs.add(child)
        return child

    def write_kv(self, layer: int, pos: int, k, v) -> None:
        """K/V of positions pos..pos+ntok-1 (< len) of one layer; k, v
        float32 [ntok][kv_heads][head_dim].  Shared blocks are copied
        first."""
        lay = self.layout
        k = f32(k, (None, lay.kv_heads, lay.head_dim), "k")
        v = f32(v, k.shape, "v")
        with self.ctx._lock:
            self.ctx._call("kvl_seq_write_kv", self._handle(), layer, pos,
                           k.shape[0], _ptr(k), _ptr(v))

    def read_kv(self, layer: int, pos: int, ntok: int, *, k_out=None,
                v_out=None, keys: bool = True, values: bool = True):
        """Read positions pos..pos+ntok-1 back (dequantised); returns
        (k, v) float32 [ntok][kv_heads][head_dim]."""
        lay = self.layout
        k, v = _kv_outs((ntok, lay.kv_heads, lay.head_dim), k_out, v_out,
                        keys, values)
        with self.ctx._lock:
            self.ctx._call("kvl_seq_read_kv", self._handle(), layer, pos, ntok,
                           _ptr(k), _ptr(v))
        return k, v

    def decode(self, layer: int, q, *, scale: float = 0.0,
               out=None) -> np.ndarray:
        """Decode for this sequence alone: q float32 [q_heads][head_dim];
        returns out [q_heads][head_dim]."""
        lay = self.layout
        q = f32(q, (None, lay.head_dim), "q")
        out = _out_like(q, out)
        decode([self], layer, q[None], scale=scale, out=out[None])
        return out


def _seq_args(seqs: _Seq[Sequence]):
    seqs = list(seqs)
    if not seqs:
        raise InvalidArgument(errno.EINVAL, "no sequence")
    ctx, layout = seqs[0].ctx, seqs[0].layout
    for s in seqs:
        if s.ctx is not ctx or s.layout is not layout:
            raise InvalidArgument(errno.EINVAL, "sequences of one context "
                                  "and one layout only")
    return ctx, layout, seqs


def decode(seqs: Iterable[Sequence], layer: int, q, *, scale: float = 0.0,
           out=None) -> np.ndarray:
    """Decode attention for nseq sequences of one layout
    (kvl_seq_decode): q float32 [nseq][q_heads][head_dim]; each sequence
    attends to its whole length.  scale 0: 1/sqrt(head_dim).  Returns out
    (like q, allocated when None)."""
    ctx, layout, seqs = _seq_args(seqs)
    q = f32(q, (len(seqs), None, layout.head_dim), "q")
    out = _out_like(q, out)
    with ctx._lock:
        hs = (c_void_p * len(seqs))(*[s._handle() for s in seqs])
        ctx._call("kvl_seq_decode", hs, len(seqs), layer, q.shape[1],
                  _ptr(q), scale, _ptr(out))
    return out


def attention(seqs: Iterable[Sequence], layer: int, q, *,
              scale: float = 0.0, out=None) -> np.ndarray:
    """Causal attention for the last n_new positions of each sequence
    (kvl_seq_attention; their K/V written first): q float32
    [nseq][n_new][q_heads][head_dim].  Returns out (like q)."""
    ctx, layout, seqs = _seq_args(seqs)
    q = f32(q, (len(seqs), None, None, layout.head_dim), "q")
    out = _out_like(q, out)
    with ctx._lock:
        hs = (c_void_p * len(seqs))(*[s._handle() for s in seqs])
        ctx._call("kvl_seq_attention", hs, len(seqs), layer, q.shape[2],
                  q.shape[1], _ptr(q), scale,
                  _ptr(out))
    return out


__all__ = ["Context", "Lease", "Layout", "Sequence", "Status", "decode",
           "attention", "DTYPES"]
