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
from ctypes import (POINTER, byref, c_int, c_short, c_uint32, c_uint64,
                    c_void_p)
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, cast

import numpy as np

from . import _lib
from ._lib import check, cstr, fn, pystr
from .errors import InvalidArgument, KvpoolError

DTYPES = {"bf16": _lib.DTYPE_BF16, "fp8": _lib.DTYPE_FP8,
          "int8": _lib.DTYPE_INT8, "int4": _lib.DTYPE_INT4}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

#: Pressure policies by name (KVL_POLICY_*); see Context.set_policy().
POLICIES = {"stall": _lib.POLICY_STALL, "swap": _lib.POLICY_SWAP,
            "recompute": _lib.POLICY_RECOMPUTE, "fail": _lib.POLICY_FAIL}
_POLICY_NAMES = {v: k for k, v in POLICIES.items()}
_SEQ_STATES = {_lib.SEQ_RESIDENT: "resident", _lib.SEQ_SWAPPED: "swapped",
               _lib.SEQ_DROPPED: "dropped"}
_TIER_KINDS = {_lib.TIER_TOP: "top", _lib.TIER_DRAM: "dram",
               _lib.TIER_NVME: "nvme"}
#: RoPE styles for Layout.set_rope() (KVL_ROPE_*).
ROPE_STYLES = {"none": _lib.ROPE_NONE, "neox": _lib.ROPE_NEOX,
               "gptj": _lib.ROPE_GPTJ}


def _policy(p: "str | int | None", default: int) -> int:
    """A policy name or KVL_POLICY_* value as its number (None: default)."""
    if p is None:
        return default
    if isinstance(p, str):
        if p not in POLICIES:
            raise InvalidArgument(errno.EINVAL, f"policy {p!r}: one of "
                                  f"{', '.join(POLICIES)}")
        return POLICIES[p]
    if isinstance(p, bool) or not isinstance(p, int) or \
            not 0 <= p <= _lib.POLICY_FAIL:
        raise InvalidArgument(errno.EINVAL, f"policy {p!r}")
    return p


def _u32arg(v: int, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or \
            not 0 <= int(v) <= 0xFFFFFFFF:
        raise InvalidArgument(errno.EINVAL, f"{name}: {v!r}, needs an "
                              "integer in 0..2^32-1")
    return int(v)

LogFn = Callable[[int, str], None]
#: numpy arrays of any shape and dtype
NDArray = np.ndarray[Any, Any]
Shape = tuple[Optional[int], ...]
#: (k, v) read back; None for the one not asked for
KvPair = tuple[Optional[NDArray], Optional[NDArray]]


# ---- arrays ---------------------------------------------------------------

def _view(a: Any, name: str) -> NDArray:
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


def f32(a: Any, shape: Shape, name: str, writable: bool = False) -> NDArray:
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


def u32(a: Any, name: str, shape: Shape | None = None) -> NDArray:
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


def _ptr(arr: NDArray | None) -> int | None:
    return None if arr is None else arr.__array_interface__["data"][0]


def _u64arg(v: int, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or \
            not 0 < int(v) < 1 << 64:
        raise InvalidArgument(errno.EINVAL, f"{name}: {v!r}")
    return int(v)


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


@dataclass(frozen=True)
class TierInfo:
    """kvl_tiers(): one tier of the daemon as this context sees it."""
    name: str                  #: its pool
    tier: int                  #: 0: the top pool
    kind: str                  #: "top", "dram" or "nvme"
    block_bytes: int
    capacity: int
    backed: int
    used: int
    joined: bool               #: this context holds a lease there
    held: int                  #: blocks this context holds there


@dataclass(frozen=True)
class SeqInfo:
    """kvl_seq_info(): where a sequence's blocks are."""
    state: str                 #: "resident", "swapped" or "dropped"
    tier: int                  #: swapped: the tier holding it
    len: int
    dropped_len: int           #: dropped: the length it had
    nblocks: int
    swapped_blocks: int
    last_use: int
    swaps_out: int
    swaps_in: int
    drops: int


@dataclass(frozen=True)
class PolicyStats:
    """kvl_policy_stats(): what the pressure policies did (times in ns)."""
    swaps_out: int
    swaps_in: int
    blocks_out: int
    blocks_in: int
    bytes_out: int
    bytes_in: int
    swap_out_ns: int
    swap_in_ns: int
    copy_out_ns: int
    copy_in_ns: int
    drops: int
    dropped_tokens: int
    self_preempts: int
    no_room: int
    stalls: int
    compressions: int
    compressed_blocks: int


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
    levels; None: errors to stderr), ``log_level``, and the pressure
    policy ``policy`` ("stall", the default, "swap", "recompute" or
    "fail") with its ``stall_ms`` (see set_policy()).

    Raises :class:`KvpoolError` (e.g. ENOENT or ECONNREFUSED when kvpoold
    is not there, ENOENT for an unknown tenant).
    """

    def __init__(self, socket: str | os.PathLike[str] | None = None, *,
                 device: str | os.PathLike[str] | None = None,
                 pool: str | None = None, tenant: str | None = None,
                 ledger_only: bool = False, no_module: bool = False,
                 reconnect: bool = True, lease_batch: int = 0,
                 region_bytes: int = 0, timeout: float | None = None,
                 log: LogFn | None = None, log_level: int = 0,
                 policy: str | int | None = None, stall_ms: int = 0):
        self._h: int | None = None
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._seqs: weakref.WeakSet[Sequence] = weakref.WeakSet()
        self._leases: weakref.WeakSet[Lease] = weakref.WeakSet()
        self._layouts: list[Layout] = []
        self._bufs: weakref.WeakSet[DevBuf] = weakref.WeakSet()
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
        o.policy = _policy(policy, 0)
        o.stall_ms = _u32arg(stall_ms, "stall_ms")
        if log is not None:
            user_log: LogFn = log

            def trampoline(arg: Any, level: int, msg: bytes) -> None:
                try:
                    user_log(level, msg.decode(errors="replace"))
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

    def _call(self, name: str, *args: Any) -> int:
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
        return int(r)

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
            for b in list(self._bufs):
                b._h = None
            for lease in list(self._leases):
                lease._forget()
            if os.getpid() == self._pid:
                fn("kvl_close")(h)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
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

    def release(self, blocks: Any) -> int:
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
            return int(fn("kvl_epoch")(self._handle()))

    # -- layouts and blocks --

    def declare_layout(self, layers: int, kv_heads: int, head_dim: int,
                       dtype: str | int = "bf16",
                       rope_base: float = 0.0, *,
                       model: str | None = None) -> "Layout":
        """Declare a model's KV layout (kvl_layout_declare): dtype "bf16",
        "fp8", "int8" or "int4"; head_dim a multiple of 32 in 32..256.
        Up to 8 per context (ENOSPC beyond).  model: the model's identity
        (name and revision, 1..63 bytes; kvl_layout_declare_model), which
        names this layout's blocks in the tenant's prefix cache: without
        it Sequence.match() raises ENOKEY."""
        mname = None
        if model is not None:
            mname = model.encode()
            if not 0 < len(mname) < _lib.MODEL_LEN or b"\0" in mname:
                raise InvalidArgument(errno.EINVAL, f"model {model!r}: "
                                      f"1..{_lib.MODEL_LEN - 1} bytes, no "
                                      "NUL")
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
            if mname is None:
                lid = self._call("kvl_layout_declare", self._handle(),
                                 byref(lay))
            else:
                lid = self._call("kvl_layout_declare_model", self._handle(),
                                 byref(lay), mname)
            layout = Layout(self, lid, layers, kv_heads, head_dim,
                            _DTYPE_NAMES.get(code, str(code)), rope_base,
                            lay.tokens_per_block, lay.bytes_per_token,
                            model)
            self._layouts.append(layout)
        return layout

    # -- prefix cache --

    def prefix_evict(self, count: int) -> int:
        """Give back up to count unreferenced blocks of this tenant's
        prefix cache, least recently used first (kvl_prefix_evict);
        returns how many."""
        with self._lock:
            return self._call("kvl_prefix_evict", self._handle(),
                              _u32arg(count, "count"))

    # -- tiers and swap --

    def tiers(self) -> list[TierInfo]:
        """The daemon's tiers, top first (kvl_tiers)."""
        buf = (_lib.KvlTierInfo * _lib.MAX_TIERS)()
        with self._lock:
            n = self._call("kvl_tiers", self._handle(), buf, _lib.MAX_TIERS)
        return [TierInfo(name=pystr(t.name), tier=t.tier,
                         kind=_TIER_KINDS.get(t.kind, str(t.kind)),
                         block_bytes=t.block_bytes, capacity=t.capacity,
                         backed=t.backed, used=t.used,
                         joined=bool(t.joined), held=t.held)
                for t in buf[:min(n, _lib.MAX_TIERS)]]

    def tier_join(self, tier: int) -> None:
        """Take a lease in a lower tier, charged to this tenant
        (kvl_tier_join; nothing if joined already).  ENOENT: no such
        tier; EACCES/ENOENT from the ledger's attach."""
        with self._lock:
            self._call("kvl_tier_join", self._handle(), _u32arg(tier, "tier"))

    def tier_lease(self, tier: int, count: int, *, partial: bool = False,
                   nonblock: bool = False,
                   timeout: float | None = None) -> NDArray:
        """Lease count blocks of a tier (kvl_tier_lease); returns their
        numbers (uint32, that tier's pool indices).  For tier 0 prefer
        lease(), whose Lease tracks the blocks."""
        if count <= 0:
            raise InvalidArgument(errno.EINVAL, "count must be >= 1")
        flags = ((_lib.LEASE_PARTIAL if partial else 0) |
                 (_lib.LEASE_NONBLOCK if nonblock else 0))
        buf = np.zeros(count, dtype=np.uint32)
        with self._lock:
            n = self._call("kvl_tier_lease", self._handle(),
                           _u32arg(tier, "tier"), count, flags, _ns(timeout),
                           _ptr(buf))
        return buf[:n].copy()

    def tier_release(self, tier: int, blocks: Any) -> int:
        """Release blocks of a tier (kvl_tier_release); the number
        released."""
        b = u32(blocks, "blocks", (None,))
        if not b.size:
            return 0
        with self._lock:
            n = self._call("kvl_tier_release", self._handle(),
                           _u32arg(tier, "tier"), _ptr(b), b.size)
            if tier == 0:
                gone = set(b.tolist())
                for lease in list(self._leases):
                    lease._drop(gone)
        return n

    def swap(self, src_tier: int, src: Any, dst_tier: int,
             dst: Any) -> int:
        """Start copying whole blocks src (held in src_tier) to dst (held
        in dst_tier) (kvl_swap); leases do not change.  Returns the
        copy's ticket for swap_wait(), swap_poll() and swap_async().
        ENOENT no such tier, EUNATCH tier not joined, EPERM a block not
        held, EINVAL bad counts or a destination twice, EBUSY 64 copies
        in flight."""
        s_ = u32(src, "src", (None,))
        d = u32(dst, "dst", (s_.size,))
        t = c_uint64()
        with self._lock:
            self._call("kvl_swap", self._handle(), _u32arg(src_tier, "tier"),
                       _ptr(s_), _u32arg(dst_tier, "tier"), _ptr(d), s_.size,
                       byref(t))
        return t.value

    def swap_wait(self, ticket: int, timeout: float | None = None) -> None:
        """Wait for a copy (kvl_swap_wait; timeout None: no limit).  Raises
        the copy's own error (EIO when the file tier's I/O failed),
        LeaseTimeout (ETIMEDOUT), or ENOENT for an unknown ticket."""
        with self._lock:
            self._call("kvl_swap_wait", self._handle(), ticket, _ns(timeout))

    def swap_poll(self, ticket: int) -> bool:
        """True when the copy is done, False while it runs; never blocks
        (kvl_swap_poll).  A copy that failed raises its error."""
        st = c_int()
        with self._lock:
            done = self._call("kvl_swap_poll", self._handle(), ticket,
                              byref(st))
        if done and st.value < 0:
            raise KvpoolError.from_errno(-st.value, "kvl_swap_poll")
        return bool(done)

    def swap_fd(self) -> int:
        """The descriptor that becomes readable when copies complete
        (kvl_swap_fd; the daemon connection, so it changes after a
        daemon restart): register it with selectors or an asyncio loop,
        then call swap_poll().  Never read it yourself."""
        with self._lock:
            return self._call("kvl_swap_fd", self._handle())

    async def swap_async(self, ticket: int) -> None:
        """Wait for a copy in an asyncio loop: swap_fd() is watched with
        loop.add_reader() and swap_poll() asked each time it is readable;
        other tasks run meanwhile."""
        import asyncio
        loop = asyncio.get_running_loop()
        while not self.swap_poll(ticket):
            fd = self.swap_fd()
            ready: asyncio.Future[None] = loop.create_future()

            def wake(f: "asyncio.Future[None]" = ready) -> None:
                if not f.done():
                    f.set_result(None)
            loop.add_reader(fd, wake)
            try:
                if self.swap_poll(ticket):      # done before the reader
                    return
                await ready
            finally:
                loop.remove_reader(fd)

    def block_sums(self, tier: int, blocks: Any) -> NDArray:
        """FNV-1a 64 of each block's bytes in a tier (kvl_block_sums), to
        verify copies; uint64, one per block."""
        b = u32(blocks, "blocks", (None,))
        out = np.zeros(b.size, dtype=np.uint64)
        with self._lock:
            self._call("kvl_block_sums", self._handle(),
                       _u32arg(tier, "tier"), _ptr(b), b.size, _ptr(out))
        return out

    # -- pressure policies --

    def set_policy(self, policy: str | int | None = "stall",
                   stall_ms: int = 0) -> None:
        """What a call does when the lease cannot grow (kvl_set_policy):
        "stall" waits up to stall_ms (0: the context's timeout) and then
        raises LeaseTimeout; "swap" frees unused and prefix-cache blocks,
        then swaps the least recently used other sequence to a lower
        tier (dropped when no tier has room); "recompute" drops it (its
        state becomes "dropped", see dropped()); "fail" raises the
        ledger's error at once."""
        with self._lock:
            self._call("kvl_set_policy", self._handle(),
                       _policy(policy, _lib.POLICY_STALL),
                       _u32arg(stall_ms, "stall_ms"))

    def dropped(self) -> list["Sequence"]:
        """Sequences dropped (by the recompute policy, or swap with no
        room below) since the last call (kvl_dropped): re-fill them."""
        out: list[Sequence] = []
        with self._lock:
            h = self._handle()
            mine = {s._h: s for s in list(self._seqs) if s._h is not None}
            while True:
                buf = (c_void_p * 64)()
                n = self._call("kvl_dropped", h, buf, 64)
                out += [mine[p] for p in buf[:n] if p in mine]
                if n < 64:
                    return out

    def reclaim(self, target: int) -> int:
        """Give target blocks back to the ledger, cheapest first (unused
        leased blocks, then as the policy allows swap, then drop)
        (kvl_reclaim); returns the number given back."""
        with self._lock:
            return self._call("kvl_reclaim", self._handle(),
                              _u32arg(target, "target"))

    def compress_reclaim(self, blocks: int = 0) -> int:
        """The relief list's compression step alone
        (kvl_compress_reclaim): compress sequences that have a policy
        with a budget until blocks blocks (0: as many as they give) are
        back in the library's cache; returns that number."""
        with self._lock:
            return self._call("kvl_compress_reclaim", self._handle(),
                              _u32arg(blocks, "blocks"))

    def policy_stats(self) -> PolicyStats:
        """kvl_policy_stats(): swaps, drops, stalls and compressions."""
        st = _lib.KvlPolicyStats()
        with self._lock:
            self._call("kvl_policy_stats", self._handle(), byref(st))
        return PolicyStats(**{n: getattr(st, n) for n, _ in st._fields_})

    # -- device buffers --

    def dev_buf(self, nbytes: int, device: int = 0) -> "DevBuf":
        """A device buffer of at least nbytes on CUDA device `device` of
        the daemon's GPU (kvl_dev_buf_create).  EOPNOTSUPP when the
        daemon's backend has no device memory (cpu), ENODEV without a
        CUDA driver."""
        h = c_void_p()
        with self._lock:
            self._call("kvl_dev_buf_create", self._handle(), device,
                       _u64arg(nbytes, "nbytes"), byref(h))
            buf = DevBuf(self, h.value)
            self._bufs.add(buf)
        return buf

    def dev_buf_register(self, fd: int, nbytes: int) -> "DevBuf":
        """Register an allocation exported as a POSIX file descriptor
        (cuMemExportToShareableHandle) (kvl_dev_buf_register); fd stays
        the caller's.  EBADF: not an exported allocation."""
        h = c_void_p()
        with self._lock:
            self._call("kvl_dev_buf_register", self._handle(), fd,
                       _u64arg(nbytes, "nbytes"), byref(h))
            buf = DevBuf(self, h.value)
            self._bufs.add(buf)
        return buf

    @property
    def layouts(self) -> list["Layout"]:
        return list(self._layouts)

    def copy_blocks(self, src: Any, dst: Any) -> None:
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

    def __init__(self, ctx: Context, blocks: NDArray):
        self._ctx = ctx
        blocks.flags.writeable = False
        self._blocks = blocks

    @property
    def blocks(self) -> NDArray:
        return self._blocks

    def __len__(self) -> int:
        return int(self._blocks.size)

    def __iter__(self) -> Iterator[int]:
        return iter(self._blocks.tolist())

    def __array__(self, dtype: Any = None) -> NDArray:
        return self._blocks if dtype is None else self._blocks.astype(dtype)

    def _forget(self) -> None:
        self._blocks = np.zeros(0, dtype=np.uint32)
        self._blocks.flags.writeable = False

    def _drop(self, gone: set[int]) -> None:
        keep = np.array([b for b in self._blocks.tolist() if b not in gone],
                        dtype=np.uint32)
        keep.flags.writeable = False
        self._blocks = keep

    def release(self, blocks: Any = None) -> int:
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

    def __exit__(self, *exc: object) -> None:
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
                 tokens_per_block: int, bytes_per_token: int,
                 model: str | None = None):
        self.ctx = ctx
        self.model = model
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

    def _kv_shape(self, ntok: int) -> tuple[int, int, int]:
        return (ntok, self.kv_heads, self.head_dim)

    def write_kv(self, layer: int, blocks: Any, slots: Any, k: Any,
                 v: Any) -> None:
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

    def read_kv(self, layer: int, blocks: Any, slots: Any, *,
                k_out: Any = None, v_out: Any = None, keys: bool = True,
                values: bool = True) -> KvPair:
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

    def attention(self, layer: int, q: Any, block_tables: Any,
                  ctx_lens: Any, *, scale: float = 0.0,
                  out: Any = None) -> NDArray:
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
        return cast(NDArray, out)

    def set_rope(self, style: str | int = "neox", *, rotary_dims: int = 0,
                 base: float | None = None,
                 inv_freq: Any = None) -> None:
        """How this layout's keys were rotated (kvl_layout_set_rope), for
        the edits that turn keys (Sequence.splice): style "neox" (pair i
        is (i, i + rotary_dims/2)), "gptj" ((2i, 2i+1)) or "none" (clears);
        rotary_dims 0: head_dim; base None: the layout's rope_base;
        inv_freq: rotary_dims/2 float32 frequencies (scaled RoPE) instead
        of base^(-2i/rotary_dims)."""
        code = ROPE_STYLES.get(style) if isinstance(style, str) else style
        if code is None:
            raise InvalidArgument(errno.EINVAL, f"style {style!r}: one of "
                                  f"{', '.join(ROPE_STYLES)}")
        freq = None if inv_freq is None else f32(inv_freq, (None,),
                                                  "inv_freq")
        r = _lib.KvlRope(style=code, rotary_dims=rotary_dims,
                         base=self.rope_base if base is None else base,
                         nfreq=0 if freq is None else freq.size,
                         inv_freq=_ptr(freq))
        ctx = self.ctx
        with ctx._lock:
            ctx._call("kvl_layout_set_rope", ctx._handle(), self.id,
                      byref(r))

    # device buffers: bulk arrays at byte offsets into a DevBuf

    def write_kv_dev(self, layer: int, blocks: Any, slots: Any,
                     buf: "DevBuf", off_k: int, off_v: int, *,
                     bf16: bool = False, stream: int | None = None) -> None:
        """write_kv() with k and v [ntok][kv_heads][head_dim] (FP32, or
        BF16 with bf16=True) at byte offsets into a device buffer
        (kvl_write_kv_dev); stream: a CUstream (None: the default)."""
        b = u32(blocks, "blocks", (None,))
        s = u32(slots, "slots", (b.size,))
        ctx = self.ctx
        with ctx._lock:
            ctx._call("kvl_write_kv_dev", ctx._handle(), self.id, layer,
                      b.size, _ptr(b), _ptr(s), buf._handle(), off_k, off_v,
                      _lib.DEV_BF16 if bf16 else 0, stream)

    def read_kv_dev(self, layer: int, blocks: Any, slots: Any,
                    buf: "DevBuf", off_k: int | None, off_v: int | None, *,
                    stream: int | None = None) -> None:
        """read_kv() into a device buffer at byte offsets (None: not that
        one) (kvl_read_kv_dev)."""
        b = u32(blocks, "blocks", (None,))
        s = u32(slots, "slots", (b.size,))
        ctx = self.ctx
        with ctx._lock:
            ctx._call("kvl_read_kv_dev", ctx._handle(), self.id, layer,
                      b.size, _ptr(b), _ptr(s), buf._handle(),
                      _lib.DEV_NONE if off_k is None else off_k,
                      _lib.DEV_NONE if off_v is None else off_v, stream)

    def attention_dev(self, layer: int, buf: "DevBuf", off_q: int,
                      off_out: int, block_tables: Any, ctx_lens: Any, *,
                      q_heads: int, n_new: int = 0, scale: float = 0.0,
                      stream: int | None = None) -> None:
        """attention() with q and out ([batch][max(n_new,1)][q_heads]
        [head_dim] FP32) at byte offsets into a device buffer
        (kvl_attention_dev); block_tables [batch][max_blocks_per_seq]
        and ctx_lens [batch] are host arrays."""
        t = u32(block_tables, "block_tables", (None, None))
        c = u32(ctx_lens, "ctx_lens", (t.shape[0],))
        a = _lib.KvlAttnArgs(layer=layer, batch=t.shape[0], q_heads=q_heads,
                             max_blocks_per_seq=t.shape[1], n_new=n_new,
                             scale=scale, block_tables=_ptr(t),
                             ctx_lens=_ptr(c))
        ctx = self.ctx
        with ctx._lock:
            ctx._call("kvl_attention_dev", ctx._handle(), self.id, byref(a),
                      buf._handle(), off_q, off_out, stream)


# ---- device buffers ------------------------------------------------------

class DevBuf:
    """A device buffer (``struct kvl_dev_buf``): CUDA memory on the
    daemon's GPU that kvpoold maps too, for the *_dev calls of Layout.
    ``addr`` is its CUdeviceptr in this process (0 for a registered
    buffer), ``size`` its bytes.  cuda_array() describes a part of it
    with ``__cuda_array_interface__``, which ``torch.as_tensor(x,
    device="cuda")`` (and CuPy, Numba) wrap without a copy.  free() (or
    the context's close) unregisters it."""

    def __init__(self, ctx: Context, h: int | None):
        self.ctx = ctx
        self._h: int | None = h

    def _handle(self) -> int:
        self.ctx._handle()
        if self._h is None:
            raise InvalidArgument(errno.EBADF, "the device buffer is freed")
        return self._h

    @property
    def addr(self) -> int:
        with self.ctx._lock:
            return int(fn("kvl_dev_buf_addr")(self._handle()))

    @property
    def size(self) -> int:
        with self.ctx._lock:
            return int(fn("kvl_dev_buf_size")(self._handle()))

    def cuda_array(self, offset: int, shape: tuple[int, ...],
                   dtype: str = "float32") -> "CudaArray":
        """An object with ``__cuda_array_interface__`` for the C-order
        array of shape and dtype ("float32" or "bfloat16" as raw
        "uint16") at byte offset; refused outside the buffer."""
        item = np.dtype({"bfloat16": "uint16"}.get(dtype, dtype))
        n = int(np.prod(shape)) * item.itemsize
        addr = self.addr
        if not addr:
            raise InvalidArgument(errno.EINVAL, "a registered buffer has no "
                                  "address in this process")
        if offset < 0 or offset + n > self.size:
            raise InvalidArgument(errno.EFAULT, f"{n} bytes at {offset}: "
                                  f"outside the buffer of {self.size}")
        return CudaArray(self, addr + offset, tuple(shape), item.str)

    def free(self) -> None:
        """Unregister (and free a created buffer) (kvl_dev_buf_free)."""
        ctx = self.ctx
        with ctx._lock:
            if self._h is None or ctx.closed or os.getpid() != ctx._pid:
                self._h = None
                return
            h, self._h = self._h, None
            ctx._bufs.discard(self)
            fn("kvl_dev_buf_free")(h)

    def __enter__(self) -> "DevBuf":
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


class CudaArray:
    """A view of part of a DevBuf for CUDA array consumers; keeps the
    buffer alive."""

    def __init__(self, buf: DevBuf, ptr: int, shape: tuple[int, ...],
                 typestr: str):
        self.buf = buf
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (ptr, False),
            "version": 2, "strides": None}


def _kv_outs(shape: tuple[int, ...], k_out: Any, v_out: Any, keys: bool,
             values: bool) -> KvPair:
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


def _q_check(q: Any, head_dim: int) -> NDArray:
    arr = _view(q, "q")
    if arr.ndim not in (3, 4):
        raise InvalidArgument(errno.EINVAL, f"q: shape {arr.shape}, needs "
                              "[batch][q_heads][head_dim] (decode) or "
                              "[batch][n_new][q_heads][head_dim]")
    return f32(arr, arr.shape[:-1] + (head_dim,), "q")


def _out_like(q: NDArray, out: Any) -> NDArray:
    if out is None:
        return np.empty(q.shape, np.float32)
    return f32(out, q.shape, "out", writable=True)


# ---- sequences -----------------------------------------------------------

class Sequence:
    """A list of positions with a block table kept by libkvlease
    (``struct kvl_seq``).  Position p is slot p % tokens_per_block of
    block block_table[p // tokens_per_block].  free() (or the end of a
    ``with`` block, or the context's close) gives its blocks back."""

    def __init__(self, layout: Layout, h: int | None):
        self.layout = layout
        self.ctx = layout.ctx
        self._h: int | None = h

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

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:
            pass

    def __len__(self) -> int:
        with self.ctx._lock:
            return int(fn("kvl_seq_len")(self._handle()))

    def __repr__(self) -> str:
        if self._h is None or self.ctx.closed:
            return "<kvpool.Sequence freed>"
        return f"<kvpool.Sequence len={len(self)} layout={self.layout.id}>"

    @property
    def block_table(self) -> NDArray:
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

    def write_kv(self, layer: int, pos: int, k: Any, v: Any) -> None:
        """K/V of positions pos..pos+ntok-1 (< len) of one layer; k, v
        float32 [ntok][kv_heads][head_dim].  Shared blocks are copied
        first."""
        lay = self.layout
        k = f32(k, (None, lay.kv_heads, lay.head_dim), "k")
        v = f32(v, k.shape, "v")
        with self.ctx._lock:
            self.ctx._call("kvl_seq_write_kv", self._handle(), layer, pos,
                           k.shape[0], _ptr(k), _ptr(v))

    def read_kv(self, layer: int, pos: int, ntok: int, *,
                k_out: Any = None, v_out: Any = None, keys: bool = True,
                values: bool = True) -> KvPair:
        """Read positions pos..pos+ntok-1 back (dequantised); returns
        (k, v) float32 [ntok][kv_heads][head_dim]."""
        lay = self.layout
        k, v = _kv_outs((ntok, lay.kv_heads, lay.head_dim), k_out, v_out,
                        keys, values)
        with self.ctx._lock:
            self.ctx._call("kvl_seq_read_kv", self._handle(), layer, pos, ntok,
                           _ptr(k), _ptr(v))
        return k, v

    def decode(self, layer: int, q: Any, *, scale: float = 0.0,
               out: Any = None) -> NDArray:
        """Decode for this sequence alone: q float32 [q_heads][head_dim];
        returns out [q_heads][head_dim]."""
        lay = self.layout
        q = f32(q, (None, lay.head_dim), "q")
        out = _out_like(q, out)
        decode([self], layer, q[None], scale=scale, out=out[None])
        return cast(NDArray, out)

    # -- prefix cache --

    def append_tokens(self, tokens: Any) -> int:
        """append() of len(tokens) positions carrying their token ids
        (kvl_seq_append_tokens), so that publish() can name the blocks;
        returns the new length."""
        t = u32(tokens, "tokens", (None,))
        with self.ctx._lock:
            return self.ctx._call("kvl_seq_append_tokens", self._handle(),
                                  _ptr(t), t.size)

    @property
    def tokens(self) -> NDArray:
        """The token ids known from position 0 (a copy, uint32)
        (kvl_seq_tokens)."""
        tab = POINTER(c_uint32)()
        n = c_uint32()
        with self.ctx._lock:
            self.ctx._call("kvl_seq_tokens", self._handle(), byref(tab),
                           byref(n))
            if not n.value:
                return np.zeros(0, dtype=np.uint32)
            return np.ctypeslib.as_array(tab, shape=(n.value,)).copy()

    def match(self, tokens: Any) -> int:
        """On a new (empty) sequence: attach the longest cached prefix of
        full blocks of tokens (kvl_seq_match); returns the tokens matched
        (a multiple of tokens_per_block, maybe 0).  Pass tokens[:-1] to
        keep the last token to compute.  ENOKEY: the layout has no model
        (declare_layout(model=...))."""
        t = u32(tokens, "tokens", (None,))
        with self.ctx._lock:
            return self.ctx._call("kvl_seq_match", self._handle(), _ptr(t),
                                  t.size)

    def publish(self) -> int:
        """Offer the full blocks with known token ids to the tenant's
        cache (kvl_seq_publish); returns the blocks added (0: all cached
        already).  EBUSY: a swap of this context is still copying."""
        with self.ctx._lock:
            return self.ctx._call("kvl_seq_publish", self._handle())

    # -- tiers and policies --

    def append_policy(self, ntok: int, policy: str | int | None) -> int:
        """append() with a pressure policy for this call
        (kvl_seq_append_policy; None: the context's)."""
        with self.ctx._lock:
            return self.ctx._call("kvl_seq_append_policy", self._handle(),
                                  _u32arg(ntok, "ntok"),
                                  _policy(policy, _lib.POLICY_DEFAULT))

    def info(self) -> SeqInfo:
        """kvl_seq_info(): resident, swapped (to which tier) or dropped."""
        i = _lib.KvlSeqInfo()
        with self.ctx._lock:
            self.ctx._call("kvl_seq_info", self._handle(), byref(i))
        return SeqInfo(state=_SEQ_STATES.get(i.state, str(i.state)),
                       tier=i.tier, len=i.len, dropped_len=i.dropped_len,
                       nblocks=i.nblocks, swapped_blocks=i.swapped_blocks,
                       last_use=i.last_use, swaps_out=i.swaps_out,
                       swaps_in=i.swaps_in, drops=i.drops)

    @property
    def state(self) -> str:
        """"resident", "swapped" or "dropped"."""
        return self.info().state

    def swap_out(self, tier: int = -1) -> None:
        """Move the blocks to a lower tier (-1: the first with room)
        (kvl_seq_swap_out).  QuotaExceeded/WouldBlock/ENOMEM: no room."""
        if not isinstance(tier, int) or tier < -1 or tier >= _lib.MAX_TIERS:
            raise InvalidArgument(errno.EINVAL, f"tier {tier!r}")
        with self.ctx._lock:
            self.ctx._call("kvl_seq_swap_out", self._handle(), tier)

    def swap_in(self, policy: str | int | None = None) -> None:
        """Bring a swapped sequence back to the top pool
        (kvl_seq_swap_in; policy: how to find the blocks, None: the
        context's).  Calls that need the sequence do it by themselves."""
        with self.ctx._lock:
            self.ctx._call("kvl_seq_swap_in", self._handle(),
                           _policy(policy, _lib.POLICY_DEFAULT))

    # -- edits --

    @property
    def next_pos(self) -> int:
        """The RoPE position of the next appended token
        (kvl_seq_next_pos)."""
        with self.ctx._lock:
            return int(fn("kvl_seq_next_pos")(self._handle()))

    def positions(self, slot: int = 0, n: int | None = None) -> NDArray:
        """The positions of slots slot..slot+n-1 (n None: to the end)
        (kvl_seq_positions); ERANGE past the end."""
        with self.ctx._lock:
            if n is None:
                n = max(0, len(self) - slot)
            out = np.zeros(_u32arg(n, "n"), dtype=np.uint32)
            self.ctx._call("kvl_seq_positions", self._handle(),
                           _u32arg(slot, "slot"), n, _ptr(out))
        return out

    def splice(self, at: int, ndel: int, nins: int) -> int:
        """Delete slots at..at+ndel-1, make nins zeroed slots at `at` (write
        their K/V, rotated at positions()) and move the tail, its keys
        turned by kvpoold (kvl_seq_splice).  Returns the new length.
        ERANGE span beyond the length, ENODATA the layout has no RoPE
        data (Layout.set_rope), EOVERFLOW positions past 2^31-1, EBUSY
        swapped (swap_in() first).  On error nothing changed."""
        with self.ctx._lock:
            return self.ctx._call("kvl_seq_splice", self._handle(),
                                  _u32arg(at, "at"), _u32arg(ndel, "ndel"),
                                  _u32arg(nins, "nins"))

    def compact(self, keep: Any) -> int:
        """Keep only the slots keep (strictly increasing, else EINVAL), in
        order, in the fewest blocks (kvl_seq_compact); returns the new
        length."""
        k = u32(keep, "keep", (None,))
        with self.ctx._lock:
            return self.ctx._call("kvl_seq_compact", self._handle(), _ptr(k),
                                  k.size)

    def score(self, layer: int, q: Any, *, scale: float = 0.0,
              use_max: bool = False, causal: bool = False,
              reset: bool = False, scores: bool = True,
              out: Any = None) -> NDArray | None:
        """Score one layer's slots with recent queries q float32 [n_q]
        [q_heads][head_dim] (kvl_seq_score): per slot the sum (use_max:
        the maximum) over queries and heads of the softmax weight;
        causal: the queries are the last n_q slots; reset: start the
        sequence's importance afresh.  The scores also accumulate into
        the importance compress() ranks by.  Returns float32 [len] (None
        with scores=False)."""
        lay = self.layout
        qa = f32(q, (None, None, lay.head_dim), "q")
        flags = ((_lib.SCORE_MAX if use_max else 0) |
                 (_lib.SCORE_CAUSAL if causal else 0) |
                 (_lib.SCORE_RESET if reset else 0))
        with self.ctx._lock:
            n = len(self)
            res = None
            if scores or out is not None:
                res = (np.empty(n, np.float32) if out is None
                       else f32(out, (n,), "out", writable=True))
            self.ctx._call("kvl_seq_score", self._handle(), layer,
                           qa.shape[1], qa.shape[0], _ptr(qa), scale, flags,
                           _ptr(res))
        return res

    def compress(self, budget: int = 0) -> int:
        """Keep the first sinks slots, the last window slots and the
        highest-scoring others up to budget slots (0: the policy's), and
        compact (kvl_seq_compress).  Returns the new length; EINVAL when
        sinks + window exceed the budget."""
        with self.ctx._lock:
            return self.ctx._call("kvl_seq_compress", self._handle(),
                                  _u32arg(budget, "budget"))

    def set_compress(self, sinks: int | None = 4, window: int = 32,
                     budget: int = 0, max_tokens: int = 0) -> None:
        """The sequence's compression policy (kvl_seq_set_compress);
        sinks None removes it.  max_tokens: append() compresses first
        when the length would pass it."""
        with self.ctx._lock:
            if sinks is None:
                self.ctx._call("kvl_seq_set_compress", self._handle(), None)
                return
            p = _lib.KvlCompressPolicy(
                sinks=_u32arg(sinks, "sinks"),
                window=_u32arg(window, "window"),
                budget=_u32arg(budget, "budget"),
                max_tokens=_u32arg(max_tokens, "max_tokens"))
            self.ctx._call("kvl_seq_set_compress", self._handle(), byref(p))


def _seq_args(seqs: Iterable[Sequence]
              ) -> tuple[Context, Layout, list[Sequence]]:
    sl = list(seqs)
    if not sl:
        raise InvalidArgument(errno.EINVAL, "no sequence")
    ctx, layout = sl[0].ctx, sl[0].layout
    for s in sl:
        if s.ctx is not ctx or s.layout is not layout:
            raise InvalidArgument(errno.EINVAL, "sequences of one context "
                                  "and one layout only")
    return ctx, layout, sl


def decode(seqs: Iterable[Sequence], layer: int, q: Any, *,
           scale: float = 0.0, out: Any = None) -> NDArray:
    """Decode attention for nseq sequences of one layout
    (kvl_seq_decode): q float32 [nseq][q_heads][head_dim]; each sequence
    attends to its whole length.  scale 0: 1/sqrt(head_dim).  Returns out
    (like q, allocated when None)."""
    ctx, layout, sl = _seq_args(seqs)
    q = f32(q, (len(sl), None, layout.head_dim), "q")
    out = _out_like(q, out)
    with ctx._lock:
        hs = (c_void_p * len(sl))(*[s._handle() for s in sl])
        ctx._call("kvl_seq_decode", hs, len(sl), layer, q.shape[1],
                  _ptr(q), scale, _ptr(out))
    return cast(NDArray, out)


def attention(seqs: Iterable[Sequence], layer: int, q: Any, *,
              scale: float = 0.0, out: Any = None) -> NDArray:
    """Causal attention for the last n_new positions of each sequence
    (kvl_seq_attention; their K/V written first): q float32
    [nseq][n_new][q_heads][head_dim].  Returns out (like q)."""
    ctx, layout, sl = _seq_args(seqs)
    q = f32(q, (len(sl), None, None, layout.head_dim), "q")
    out = _out_like(q, out)
    with ctx._lock:
        hs = (c_void_p * len(sl))(*[s._handle() for s in sl])
        ctx._call("kvl_seq_attention", hs, len(sl), layer, q.shape[2],
                  q.shape[1], _ptr(q), scale,
                  _ptr(out))
    return cast(NDArray, out)


__all__ = ["Context", "Lease", "Layout", "Sequence", "Status", "decode",
           "attention", "DTYPES", "POLICIES", "ROPE_STYLES", "TierInfo",
           "SeqInfo", "PolicyStats", "DevBuf", "CudaArray"]
