# SPDX-License-Identifier: MIT
"""libkvlease through ctypes: finding the library, the C structs of
kvlease.h, and the prototypes of the functions the binding calls.

The structs mirror libkvlease/kvlease.h field for field (the header only
ever grows by adding, so these never change either; new fields come out
of ``reserved``).  ``python/tests/test_abi.py`` compares every offset with
the C compiler's.

A function is described once in ``PROTOS``; :func:`fn` returns it with its
prototype set, or raises :class:`kvpool.KvpoolError` (ENOSYS) when the
loaded library is older than the call.  Binding a new libkvlease call is
one line here and one method in ``client.py``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from typing import Any
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_float,
                    c_int, c_short, c_size_t, c_uint32, c_uint64, c_void_p)

from .errors import InvalidArgument, KvpoolError

NAME_LEN = 32

# kvl_opts.flags
OPEN_NO_DAEMON = 1 << 0
OPEN_NO_MODULE = 1 << 1
OPEN_NO_RECONNECT = 1 << 2

# lease flags
LEASE_PARTIAL = 1 << 0
LEASE_NONBLOCK = 1 << 1
LEASE_ORPHAN_FAIL = 1 << 2

# kvl_status.mode
MODE_MODULE = 1
MODE_DAEMON = 2

# element types
DTYPE_BF16 = 1
DTYPE_FP8 = 2
DTYPE_INT8 = 3
DTYPE_INT4 = 4

UNLIMITED = 0xFFFFFFFF
ADMIN_KEEP = 0xFFFFFFFE

# prefix cache: a model's identity, 1..63 bytes
MODEL_LEN = 64

# RoPE styles (kvl_rope.style)
ROPE_NONE = 0
ROPE_NEOX = 1
ROPE_GPTJ = 2

# kvl_seq_score flags
SCORE_MAX = 1 << 0
SCORE_CAUSAL = 1 << 1
SCORE_RESET = 1 << 2

# tiers
MAX_TIERS = 4
TIER_TOP = 1
TIER_DRAM = 2
TIER_NVME = 3
TIER_F_DIRECT = 1 << 0
TIER_F_URING = 1 << 1
TIER_F_PINNED = 1 << 2

# pressure policies
POLICY_DEFAULT = 0
POLICY_STALL = 1
POLICY_SWAP = 2
POLICY_RECOMPUTE = 3
POLICY_FAIL = 4

# kvl_seq_info.state
SEQ_RESIDENT = 1
SEQ_SWAPPED = 2
SEQ_DROPPED = 3

# device buffers
DEV_NONE = 0xFFFFFFFFFFFFFFFF
DEV_BF16 = 1 << 0

LOG_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)


class KvlOpts(Structure):
    _fields_ = [
        ("socket_path", c_char_p),
        ("device_path", c_char_p),
        ("pool", c_char_p),
        ("tenant", c_char_p),
        ("flags", c_uint32),
        ("lease_batch", c_uint32),
        ("region_bytes", c_uint64),
        ("timeout_ns", c_uint64),
        ("log", LOG_FN),
        ("log_arg", c_void_p),
        ("log_level", c_int),
        ("pad", c_int),
        ("policy", c_uint32),
        ("stall_ms", c_uint32),
        ("reserved", c_uint64 * 3),
    ]


class KvlStatus(Structure):
    _fields_ = [
        ("pool", c_char * NAME_LEN),
        ("tenant", c_char * NAME_LEN),
        ("lease_id", c_uint64),
        ("block_bytes", c_uint64),
        ("capacity", c_uint32),
        ("backed", c_uint32),
        ("used", c_uint32),
        ("held", c_uint32),
        ("tenant_max", c_uint32),
        ("tenant_min", c_uint32),
        ("tenant_current", c_uint32),
        ("tenant_peak", c_uint32),
        ("reclaim_target", c_uint32),
        ("state", c_uint32),
        ("epoch", c_uint64),
        ("mode", c_uint32),
        ("cached", c_uint32),
        ("region_bytes", c_uint64),
        ("backend", c_char * 16),
        ("reserved", c_uint64 * 4),
    ]


class KvlLayout(Structure):
    _fields_ = [
        ("layers", c_uint32),
        ("kv_heads", c_uint32),
        ("head_dim", c_uint32),
        ("dtype", c_uint32),
        ("rope_base", c_float),
        ("tokens_per_block", c_uint32),
        ("bytes_per_token", c_uint64),
        ("reserved", c_uint64 * 2),
    ]


class KvlAttnArgs(Structure):
    _fields_ = [
        ("layer", c_uint32),
        ("batch", c_uint32),
        ("q_heads", c_uint32),
        ("max_blocks_per_seq", c_uint32),
        ("n_new", c_uint32),
        ("scale", c_float),
        ("q", c_void_p),
        ("block_tables", c_void_p),
        ("ctx_lens", c_void_p),
        ("out", c_void_p),
        ("reserved", c_uint64 * 2),
    ]


class KvlPoolInfo(Structure):
    _fields_ = [
        ("name", c_char * NAME_LEN),
        ("block_bytes", c_uint64),
        ("capacity", c_uint32),
        ("backed", c_uint32),
        ("used", c_uint32),
        ("state", c_uint32),
        ("epoch", c_uint64),
        ("leases", c_uint32),
        ("chunk_blocks", c_uint32),
        ("tenants", c_uint32),
        ("mode", c_uint32),
        ("backend", c_char * 16),
        ("reserved", c_uint64 * 4),
    ]


class KvlTenantInfo(Structure):
    _fields_ = [
        ("name", c_char * NAME_LEN),
        ("max", c_uint32),
        ("min", c_uint32),
        ("current", c_uint32),
        ("peak", c_uint32),
        ("ev_max", c_uint64),
        ("ev_stall", c_uint64),
        ("ev_reclaim", c_uint64),
        ("ev_fail", c_uint64),
        ("uid", c_uint32),
        ("gid", c_uint32),
        ("leases", c_uint32),
        ("pad", c_uint32),
        ("reserved", c_uint64 * 2),
    ]


class KvlClientInfo(Structure):
    _fields_ = [
        ("lease_id", c_uint64),
        ("pid", c_uint32),
        ("uid", c_uint32),
        ("tenant", c_char * NAME_LEN),
        ("blocks", c_uint32),
        ("connected", c_uint32),
        ("reserved", c_uint64 * 2),
    ]


class KvlRope(Structure):
    _fields_ = [
        ("style", c_uint32),
        ("rotary_dims", c_uint32),
        ("base", c_float),
        ("nfreq", c_uint32),
        ("inv_freq", c_void_p),
        ("reserved", c_uint64 * 2),
    ]


class KvlCompressPolicy(Structure):
    _fields_ = [
        ("sinks", c_uint32),
        ("window", c_uint32),
        ("budget", c_uint32),
        ("max_tokens", c_uint32),
        ("reserved", c_uint64 * 2),
    ]


class KvlPrefixInfo(Structure):
    _fields_ = [
        ("tenant", c_char * NAME_LEN),
        ("ns", c_char * NAME_LEN),
        ("hot_lease", c_uint64),
        ("cold_lease", c_uint64),
        ("cached", c_uint32),
        ("referenced", c_uint32),
        ("hits", c_uint64),
        ("misses", c_uint64),
        ("hit_tokens", c_uint64),
        ("evictions", c_uint64),
        ("published", c_uint64),
        ("reserved", c_uint64 * 2),
    ]


class KvlTierInfo(Structure):
    _fields_ = [
        ("name", c_char * NAME_LEN),
        ("tier", c_uint32),
        ("kind", c_uint32),
        ("block_bytes", c_uint64),
        ("capacity", c_uint32),
        ("backed", c_uint32),
        ("used", c_uint32),
        ("joined", c_uint32),
        ("held", c_uint32),
        ("pad", c_uint32),
        ("reserved", c_uint64 * 4),
    ]


class KvlSeqInfo(Structure):
    _fields_ = [
        ("state", c_uint32),
        ("tier", c_uint32),
        ("len", c_uint32),
        ("dropped_len", c_uint32),
        ("nblocks", c_uint32),
        ("swapped_blocks", c_uint32),
        ("last_use", c_uint64),
        ("swaps_out", c_uint32),
        ("swaps_in", c_uint32),
        ("drops", c_uint32),
        ("pad", c_uint32),
        ("reserved", c_uint64 * 4),
    ]


class KvlPolicyStats(Structure):
    _fields_ = [(n, c_uint64) for n in (
        "swaps_out", "swaps_in", "blocks_out", "blocks_in", "bytes_out",
        "bytes_in", "swap_out_ns", "swap_in_ns", "copy_out_ns",
        "copy_in_ns", "drops", "dropped_tokens", "self_preempts",
        "no_room", "stalls", "compressions", "compressed_blocks")]


class KvlTierStats(Structure):
    _fields_ = [
        ("pool", KvlPoolInfo),
        ("tier", c_uint32),
        ("kind", c_uint32),
        ("flags", c_uint32),
        ("pad", c_uint32),
        ("swaps", c_uint64),
        ("blocks_in", c_uint64),
        ("blocks_out", c_uint64),
        ("bytes_in", c_uint64),
        ("bytes_out", c_uint64),
        ("copy_in_ns", c_uint64),
        ("copy_out_ns", c_uint64),
        ("errors", c_uint64),
        ("lat_us", c_uint64 * 16),
        ("mapped_bytes", c_uint64),
        ("prefix_blocks", c_uint64),
        ("prefix_in", c_uint64),
        ("prefix_out", c_uint64),
    ]


class KvlClientTiers(Structure):
    _fields_ = [
        ("lease_id", c_uint64),
        ("pid", c_uint32),
        ("uid", c_uint32),
        ("tenant", c_char * NAME_LEN),
        ("blocks", c_uint32 * MAX_TIERS),
        ("joined", c_uint32 * MAX_TIERS),
        ("seq_resident", c_uint32),
        ("seq_dropped", c_uint32),
        ("seq_swapped", c_uint32 * MAX_TIERS),
        ("swaps", c_uint64),
        ("bytes_out", c_uint64),
        ("bytes_in", c_uint64),
        ("reserved", c_uint64 * 2),
    ]


# Every struct the binding shares with C, by its C name (for the ABI test).
STRUCTS = {
    "kvl_opts": KvlOpts,
    "kvl_status": KvlStatus,
    "kvl_layout": KvlLayout,
    "kvl_attn_args": KvlAttnArgs,
    "kvl_pool_info": KvlPoolInfo,
    "kvl_tenant_info": KvlTenantInfo,
    "kvl_client_info": KvlClientInfo,
    "kvl_rope": KvlRope,
    "kvl_compress_policy": KvlCompressPolicy,
    "kvl_prefix_info": KvlPrefixInfo,
    "kvl_tier_info": KvlTierInfo,
    "kvl_seq_info": KvlSeqInfo,
    "kvl_policy_stats": KvlPolicyStats,
    "kvl_tier_stats": KvlTierStats,
    "kvl_client_tiers": KvlClientTiers,
}

_P = c_void_p          # opaque handles and data pointers
_U32P = c_void_p       # uint32_t arrays (numpy data pointers)

# name: (restype, argtypes).  Data arrays are passed as c_void_p (numpy
# data addresses), so no conversion or copy happens in ctypes.
PROTOS = {
    "kvl_open": (c_int, [POINTER(KvlOpts), POINTER(c_void_p)]),
    "kvl_close": (None, [_P]),
    "kvl_epoch": (c_uint64, [_P]),
    "kvl_attach_tenant": (c_int, [_P, c_char_p, c_char_p]),
    "kvl_lease": (c_int, [_P, c_uint32, c_uint32, c_uint64, _U32P]),
    "kvl_release": (c_int, [_P, _U32P, c_uint32]),
    "kvl_release_all": (c_int, [_P]),
    "kvl_reclaim_fd": (c_int, [_P, POINTER(c_short)]),
    "kvl_reclaim_target": (c_int, [_P, POINTER(c_uint32)]),
    "kvl_trim": (c_int, [_P]),
    "kvl_status": (c_int, [_P, POINTER(KvlStatus)]),
    "kvl_layout_declare": (c_int, [_P, POINTER(KvlLayout)]),
    "kvl_write_kv": (c_int, [_P, c_int, c_uint32, c_uint32, _U32P, _U32P,
                             _P, _P]),
    "kvl_read_kv": (c_int, [_P, c_int, c_uint32, c_uint32, _U32P, _U32P,
                            _P, _P]),
    "kvl_attention": (c_int, [_P, c_int, POINTER(KvlAttnArgs)]),
    "kvl_copy_blocks": (c_int, [_P, _U32P, _U32P, c_uint32]),
    "kvl_seq_create": (c_int, [_P, c_int, POINTER(c_void_p)]),
    "kvl_seq_free": (None, [_P]),
    "kvl_seq_append": (c_int, [_P, c_uint32]),
    "kvl_seq_write_kv": (c_int, [_P, c_uint32, c_uint32, c_uint32, _P, _P]),
    "kvl_seq_read_kv": (c_int, [_P, c_uint32, c_uint32, c_uint32, _P, _P]),
    "kvl_seq_decode": (c_int, [_P, c_uint32, c_uint32, c_uint32, _P,
                               c_float, _P]),
    "kvl_seq_attention": (c_int, [_P, c_uint32, c_uint32, c_uint32,
                                  c_uint32, _P, c_float, _P]),
    "kvl_seq_fork": (c_int, [_P, POINTER(c_void_p)]),
    "kvl_seq_truncate": (c_int, [_P, c_uint32]),
    "kvl_seq_len": (c_uint32, [_P]),
    "kvl_seq_block_table": (c_int, [_P, POINTER(POINTER(c_uint32)),
                                    POINTER(c_uint32)]),
    "kvl_admin_open": (c_int, [c_char_p, POINTER(c_void_p)]),
    "kvl_admin_close": (None, [_P]),
    "kvl_admin_tenant_add": (c_int, [_P, c_char_p, c_char_p, c_uint32,
                                     c_uint32, c_uint32, c_uint32]),
    "kvl_admin_tenant_del": (c_int, [_P, c_char_p, c_char_p]),
    "kvl_admin_tenant_set": (c_int, [_P, c_char_p, c_char_p, c_uint32,
                                     c_uint32, c_uint32, c_uint32]),
    "kvl_admin_tenant_list": (c_int, [_P, c_char_p, POINTER(KvlTenantInfo),
                                      c_size_t]),
    "kvl_admin_pool_status": (c_int, [_P, POINTER(KvlPoolInfo)]),
    "kvl_admin_client_list": (c_int, [_P, c_char_p, POINTER(KvlClientInfo),
                                      c_size_t]),
    # prefix cache
    "kvl_layout_declare_model": (c_int, [_P, POINTER(KvlLayout), c_char_p]),
    "kvl_seq_append_tokens": (c_int, [_P, _U32P, c_uint32]),
    "kvl_seq_tokens": (c_int, [_P, POINTER(POINTER(c_uint32)),
                               POINTER(c_uint32)]),
    "kvl_seq_match": (c_int, [_P, _U32P, c_uint32]),
    "kvl_seq_publish": (c_int, [_P]),
    "kvl_prefix_evict": (c_int, [_P, c_uint32]),
    "kvl_admin_prefix_list": (c_int, [_P, c_char_p, POINTER(KvlPrefixInfo),
                                      c_size_t]),
    "kvl_admin_prefix_flush": (c_int, [_P, c_char_p, c_char_p]),
    "kvl_admin_prefix_share": (c_int, [_P, c_char_p, c_char_p, c_char_p]),
    # tiers, swap, pressure policies
    "kvl_tiers": (c_int, [_P, POINTER(KvlTierInfo), c_uint32]),
    "kvl_tier_join": (c_int, [_P, c_uint32]),
    "kvl_tier_lease": (c_int, [_P, c_uint32, c_uint32, c_uint32, c_uint64,
                               _U32P]),
    "kvl_tier_release": (c_int, [_P, c_uint32, _U32P, c_uint32]),
    "kvl_swap": (c_int, [_P, c_uint32, _U32P, c_uint32, _U32P, c_uint32,
                         POINTER(c_uint64)]),
    "kvl_swap_wait": (c_int, [_P, c_uint64, c_uint64]),
    "kvl_swap_poll": (c_int, [_P, c_uint64, POINTER(c_int)]),
    "kvl_swap_fd": (c_int, [_P]),
    "kvl_block_sums": (c_int, [_P, c_uint32, _U32P, c_uint32, _P]),
    "kvl_set_policy": (c_int, [_P, c_uint32, c_uint32]),
    "kvl_policy_name": (c_char_p, [c_uint32]),
    "kvl_policy_from_name": (c_int, [c_char_p]),
    "kvl_seq_info": (c_int, [_P, POINTER(KvlSeqInfo)]),
    "kvl_seq_append_policy": (c_int, [_P, c_uint32, c_uint32]),
    "kvl_seq_swap_out": (c_int, [_P, c_int]),
    "kvl_seq_swap_in": (c_int, [_P, c_uint32]),
    "kvl_dropped": (c_int, [_P, _P, c_uint32]),
    "kvl_reclaim": (c_int, [_P, c_uint32]),
    "kvl_policy_stats": (c_int, [_P, POINTER(KvlPolicyStats)]),
    "kvl_admin_tier_list": (c_int, [_P, POINTER(KvlTierStats), c_size_t]),
    "kvl_admin_client_tiers": (c_int, [_P, POINTER(KvlClientTiers),
                                       c_size_t]),
    # edits
    "kvl_layout_set_rope": (c_int, [_P, c_int, POINTER(KvlRope)]),
    "kvl_seq_next_pos": (c_uint32, [_P]),
    "kvl_seq_positions": (c_int, [_P, c_uint32, c_uint32, _U32P]),
    "kvl_seq_splice": (c_int, [_P, c_uint32, c_uint32, c_uint32]),
    "kvl_seq_compact": (c_int, [_P, _U32P, c_uint32]),
    "kvl_seq_score": (c_int, [_P, c_uint32, c_uint32, c_uint32, _P, c_float,
                              c_uint32, _P]),
    "kvl_seq_compress": (c_int, [_P, c_uint32]),
    "kvl_seq_set_compress": (c_int, [_P, POINTER(KvlCompressPolicy)]),
    "kvl_compress_reclaim": (c_int, [_P, c_uint32]),
    # device buffers
    "kvl_dev_buf_create": (c_int, [_P, c_int, c_uint64, POINTER(c_void_p)]),
    "kvl_dev_buf_register": (c_int, [_P, c_int, c_uint64,
                                     POINTER(c_void_p)]),
    "kvl_dev_buf_free": (None, [_P]),
    "kvl_dev_buf_addr": (c_uint64, [_P]),
    "kvl_dev_buf_size": (c_uint64, [_P]),
    "kvl_write_kv_dev": (c_int, [_P, c_int, c_uint32, c_uint32, _U32P, _U32P,
                                 _P, c_uint64, c_uint64, c_uint32, _P]),
    "kvl_read_kv_dev": (c_int, [_P, c_int, c_uint32, c_uint32, _U32P, _U32P,
                                _P, c_uint64, c_uint64, _P]),
    "kvl_attention_dev": (c_int, [_P, c_int, POINTER(KvlAttnArgs), _P,
                                  c_uint64, c_uint64, _P]),
}

# Where the library is looked for, in order.
LIBRARY_ENV = "KVPOOL_LIBKVLEASE"
_SONAME = "libkvlease.so.1"


def _candidates() -> list[str]:
    out = []
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return [env]
    # In the source tree: python/kvpool/ -> build/lib/
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(here, os.pardir, os.pardir, "build", "lib", _SONAME)
    if os.path.exists(tree):
        out.append(os.path.normpath(tree))
    out.append(_SONAME)
    found = ctypes.util.find_library("kvlease")
    if found:
        out.append(found)
    return out


_lib: ctypes.CDLL | None = None
_fns: dict[str, Any] = {}


def library() -> ctypes.CDLL:
    """The loaded libkvlease (loaded on first use)."""
    global _lib
    if _lib is None:
        errors = []
        for path in _candidates():
            try:
                _lib = ctypes.CDLL(path)
                break
            except OSError as e:
                errors.append(f"{path}: {e}")
        else:
            raise KvpoolError(errno.ENOENT, "cannot load libkvlease (set $"
                              + LIBRARY_ENV + " to libkvlease.so.1): "
                              + "; ".join(errors))
    return _lib


def library_path() -> str:
    """The file the library was loaded from."""
    return str(library()._name)


def fn(name: str) -> Any:
    """The C function name with its prototype from PROTOS."""
    f = _fns.get(name)
    if f is None:
        restype, argtypes = PROTOS[name]
        try:
            f = getattr(library(), name)
        except AttributeError:
            raise KvpoolError(errno.ENOSYS, f"{name} is not in "
                              f"{library_path()} (an older libkvlease)",
                              name) from None
        f.restype = restype
        f.argtypes = argtypes
        _fns[name] = f
    return f


def check(r: int, name: str) -> int:
    """r from a libkvlease call: r if >= 0, else raise its -errno."""
    if r < 0:
        raise KvpoolError.from_errno(-r, name)
    return int(r)


def cstr(s: str | None) -> bytes | None:
    """A name for C: None stays NULL; too long names are refused here."""
    if s is None:
        return None
    b = s.encode()
    if len(b) >= NAME_LEN or b"\0" in b:
        raise InvalidArgument(errno.EINVAL, f"name {s!r}: at most "
                              f"{NAME_LEN - 1} bytes, no NUL")
    return b


def pystr(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode(errors="replace")
