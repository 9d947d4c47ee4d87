# SPDX-License-Identifier: MIT
"""The admin API (kvl_admin_*): tenants, the pool's figures and the list
of clients, over generic netlink with the module and over kvpoold's socket
otherwise.  Changing tenants needs root (or kvpoold's admin group)."""
from __future__ import annotations

import errno
import os
from ctypes import byref, c_void_p
from dataclasses import dataclass

from . import _lib
from ._lib import check, cstr, fn, pystr
from .client import _limit, _mode
from .errors import InvalidArgument, KvpoolError

#: Leave a field unchanged in Admin.tenant_set().
KEEP = object()


def _none_id(v: int) -> int | None:
    return None if v == 0xFFFFFFFF else v


@dataclass(frozen=True)
class PoolInfo:
    name: str
    block_bytes: int
    capacity: int
    backed: int
    used: int
    state: int
    epoch: int
    leases: int
    chunk_blocks: int
    tenants: int
    mode: str
    backend: str


@dataclass(frozen=True)
class TenantInfo:
    name: str
    max: int | None            #: None: unlimited
    min: int
    current: int
    peak: int
    ev_max: int
    ev_stall: int
    ev_reclaim: int
    ev_fail: int
    uid: int | None            #: allowed uid, None: none
    gid: int | None
    leases: int


@dataclass(frozen=True)
class ClientInfo:
    lease_id: int
    pid: int
    uid: int
    tenant: str
    blocks: int
    connected: bool


@dataclass(frozen=True)
class PrefixInfo:
    """A tenant's prefix cache (kvl_prefix_info)."""
    tenant: str
    ns: str                    #: shared namespace, "" for its own
    hot_lease: int
    cold_lease: int
    cached: int                #: cached blocks charged to the tenant
    referenced: int            #: of which in use by some sequence
    hits: int
    misses: int
    hit_tokens: int
    evictions: int
    published: int


@dataclass(frozen=True)
class TierStats:
    """A tier of the daemon with its swap figures (kvl_tier_stats)."""
    pool: PoolInfo
    tier: int
    kind: str                  #: "top", "dram" or "nvme"
    flags: int                 #: TIER_F_* (O_DIRECT, io_uring, pinned)
    swaps: int
    blocks_in: int
    blocks_out: int
    bytes_in: int
    bytes_out: int
    copy_in_ns: int
    copy_out_ns: int
    errors: int
    lat_us: tuple[int, ...]    #: copies of [2^i, 2^(i+1)) us
    mapped_bytes: int
    prefix_blocks: int
    prefix_in: int
    prefix_out: int


@dataclass(frozen=True)
class ClientTiers:
    """One connected client's blocks per tier (kvl_client_tiers)."""
    lease_id: int
    pid: int
    uid: int
    tenant: str
    blocks: tuple[int, ...]     #: held per tier
    joined: tuple[bool, ...]
    seq_resident: int
    seq_dropped: int
    seq_swapped: tuple[int, ...]
    swaps: int
    bytes_out: int
    bytes_in: int


def _u(v: int | None, name: str, none: int) -> int:
    if v is None:
        return none
    if not isinstance(v, int) or v < 0 or v >= 0xFFFFFFFE:
        raise InvalidArgument(errno.EINVAL, f"{name}: {v!r}")
    return v


class Admin:
    """An admin handle (kvl_admin_open); socket None: $KVPOOL_SOCKET or
    the default.  A context manager."""

    def __init__(self, socket: str | os.PathLike[str] | None = None):
        self._h = None
        h = c_void_p()
        check(fn("kvl_admin_open")(None if socket is None else
                                   os.fsencode(socket), byref(h)),
              "kvl_admin_open")
        self._h = h.value

    def _handle(self) -> int:
        if self._h is None:
            raise InvalidArgument(errno.EBADF, "the admin handle is closed")
        return self._h

    def close(self) -> None:
        if self._h is not None:
            h, self._h = self._h, None
            fn("kvl_admin_close")(h)

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def tenant_add(self, name: str, *, pool: str | None = None,
                   max: int | None = None, min: int = 0,
                   uid: int | None = None, gid: int | None = None) -> None:
        """Create a tenant (max None: unlimited; uid/gid None: only root
        may attach)."""
        check(fn("kvl_admin_tenant_add")(
            self._handle(), cstr(pool), cstr(name),
            _u(max, "max", _lib.UNLIMITED), _u(min, "min", 0),
            _u(uid, "uid", 0xFFFFFFFF), _u(gid, "gid", 0xFFFFFFFF)),
            "kvl_admin_tenant_add")

    def tenant_del(self, name: str, *, pool: str | None = None) -> None:
        check(fn("kvl_admin_tenant_del")(self._handle(), cstr(pool),
                                         cstr(name)), "kvl_admin_tenant_del")

    def tenant_set(self, name: str, *, pool: str | None = None,
                   max: int | None | object = KEEP,
                   min: int | object = KEEP,
                   uid: int | None | object = KEEP,
                   gid: int | None | object = KEEP) -> None:
        """Change a tenant's limits; fields left at KEEP stay as they are
        (max None: unlimited)."""
        def arg(v: object, n: str, none: int) -> int:
            if v is KEEP:
                return _lib.ADMIN_KEEP
            if v is not None and not isinstance(v, int):
                raise InvalidArgument(errno.EINVAL, f"{n}: {v!r}")
            return _u(v, n, none)
        check(fn("kvl_admin_tenant_set")(
            self._handle(), cstr(pool), cstr(name),
            arg(max, "max", _lib.UNLIMITED), arg(min, "min", 0),
            arg(uid, "uid", 0xFFFFFFFF), arg(gid, "gid", 0xFFFFFFFF)),
            "kvl_admin_tenant_set")

    def tenants(self, pool: str | None = None) -> list[TenantInfo]:
        """Every tenant of the pool."""
        cap = 16
        while True:
            buf = (_lib.KvlTenantInfo * cap)()
            n = check(fn("kvl_admin_tenant_list")(self._handle(), cstr(pool),
                                                  buf, cap),
                      "kvl_admin_tenant_list")
            if n <= cap:
                break
            cap = n
        return [TenantInfo(
            name=pystr(t.name), max=_limit(t.max), min=t.min,
            current=t.current, peak=t.peak, ev_max=t.ev_max,
            ev_stall=t.ev_stall, ev_reclaim=t.ev_reclaim, ev_fail=t.ev_fail,
            uid=_none_id(t.uid), gid=_none_id(t.gid), leases=t.leases)
            for t in buf[:n]]

    def tenant(self, name: str, pool: str | None = None) -> TenantInfo:
        """One tenant by name (ENOENT if there is none)."""
        for t in self.tenants(pool):
            if t.name == name:
                return t
        raise KvpoolError(errno.ENOENT, f"no tenant {name!r}")

    def pool_status(self) -> PoolInfo:
        p = _lib.KvlPoolInfo()
        check(fn("kvl_admin_pool_status")(self._handle(), byref(p)),
              "kvl_admin_pool_status")
        return _pool_info(p)

    def clients(self, pool: str | None = None) -> list[ClientInfo]:
        """Every lease of the pool (from kvpoold)."""
        cap = 16
        while True:
            buf = (_lib.KvlClientInfo * cap)()
            n = check(fn("kvl_admin_client_list")(self._handle(), cstr(pool),
                                                  buf, cap),
                      "kvl_admin_client_list")
            if n <= cap:
                break
            cap = n
        return [ClientInfo(lease_id=c.lease_id, pid=c.pid, uid=c.uid,
                           tenant=pystr(c.tenant), blocks=c.blocks,
                           connected=bool(c.connected)) for c in buf[:n]]

    # -- prefix caches --

    def prefix_caches(self, pool: str | None = None) -> list[PrefixInfo]:
        """Every tenant's prefix cache (kvl_admin_prefix_list; kvpoold
        only: EOPNOTSUPP without it)."""
        cap = 16
        while True:
            buf = (_lib.KvlPrefixInfo * cap)()
            n = check(fn("kvl_admin_prefix_list")(self._handle(), cstr(pool),
                                                  buf, cap),
                      "kvl_admin_prefix_list")
            if n <= cap:
                break
            cap = n
        return [PrefixInfo(
            tenant=pystr(p.tenant), ns=pystr(p.ns), hot_lease=p.hot_lease,
            cold_lease=p.cold_lease, cached=p.cached,
            referenced=p.referenced, hits=p.hits, misses=p.misses,
            hit_tokens=p.hit_tokens, evictions=p.evictions,
            published=p.published) for p in buf[:n]]

    def prefix_cache(self, tenant: str,
                     pool: str | None = None) -> PrefixInfo:
        """One tenant's prefix cache (ENOENT when it has none)."""
        for p in self.prefix_caches(pool):
            if p.tenant == tenant:
                return p
        raise KvpoolError(errno.ENOENT, f"no prefix cache of {tenant!r}")

    def prefix_flush(self, tenant: str, *, pool: str | None = None) -> int:
        """Give back a tenant's unreferenced cached blocks
        (kvl_admin_prefix_flush); returns how many."""
        return check(fn("kvl_admin_prefix_flush")(self._handle(), cstr(pool),
                                                  cstr(tenant)),
                     "kvl_admin_prefix_flush")

    def prefix_share(self, tenant: str, ns: str | None, *,
                     pool: str | None = None) -> None:
        """The tenant joins the shared namespace ns (None: its own cache
        again) (kvl_admin_prefix_share); its cache is flushed."""
        check(fn("kvl_admin_prefix_share")(self._handle(), cstr(pool),
                                           cstr(tenant), cstr(ns)),
              "kvl_admin_prefix_share")

    # -- tiers --

    def tiers(self) -> list[TierStats]:
        """Every tier of the daemon with its swap figures
        (kvl_admin_tier_list)."""
        buf = (_lib.KvlTierStats * _lib.MAX_TIERS)()
        n = check(fn("kvl_admin_tier_list")(self._handle(), buf,
                                            _lib.MAX_TIERS),
                  "kvl_admin_tier_list")
        return [TierStats(
            pool=_pool_info(t.pool), tier=t.tier, kind=_kind(t.kind),
            flags=t.flags, swaps=t.swaps, blocks_in=t.blocks_in,
            blocks_out=t.blocks_out, bytes_in=t.bytes_in,
            bytes_out=t.bytes_out, copy_in_ns=t.copy_in_ns,
            copy_out_ns=t.copy_out_ns, errors=t.errors,
            lat_us=tuple(t.lat_us), mapped_bytes=t.mapped_bytes,
            prefix_blocks=t.prefix_blocks, prefix_in=t.prefix_in,
            prefix_out=t.prefix_out) for t in buf[:min(n, _lib.MAX_TIERS)]]

    def client_tiers(self) -> list[ClientTiers]:
        """Every connected client's blocks and sequences per tier
        (kvl_admin_client_tiers)."""
        cap = 16
        while True:
            buf = (_lib.KvlClientTiers * cap)()
            n = check(fn("kvl_admin_client_tiers")(self._handle(), buf, cap),
                      "kvl_admin_client_tiers")
            if n <= cap:
                break
            cap = n
        return [ClientTiers(
            lease_id=c.lease_id, pid=c.pid, uid=c.uid,
            tenant=pystr(c.tenant), blocks=tuple(c.blocks),
            joined=tuple(bool(j) for j in c.joined),
            seq_resident=c.seq_resident, seq_dropped=c.seq_dropped,
            seq_swapped=tuple(c.seq_swapped), swaps=c.swaps,
            bytes_out=c.bytes_out, bytes_in=c.bytes_in) for c in buf[:n]]


def _kind(k: int) -> str:
    return {_lib.TIER_TOP: "top", _lib.TIER_DRAM: "dram",
            _lib.TIER_NVME: "nvme"}.get(k, str(k))


def _pool_info(p: _lib.KvlPoolInfo) -> PoolInfo:
    return PoolInfo(
        name=pystr(p.name), block_bytes=p.block_bytes,
        capacity=p.capacity, backed=p.backed, used=p.used,
        state=p.state, epoch=p.epoch, leases=p.leases,
        chunk_blocks=p.chunk_blocks, tenants=p.tenants,
        mode=_mode(p.mode), backend=pystr(p.backend))
