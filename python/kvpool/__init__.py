# SPDX-License-Identifier: MIT
"""kvpool: the Python binding of libkvlease, kvpool's client library.

    import numpy as np, kvpool

    with kvpool.Context(tenant="chat") as ctx:
        lay = ctx.declare_layout(layers=2, kv_heads=2, head_dim=64,
                                 dtype="bf16", rope_base=10000.0)
        with lay.sequence() as seq:
            seq.append(100)
            for layer in range(2):
                seq.write_kv(layer, 0, k, v)      # float32 [100][2][64]
            out = kvpool.decode([seq], 1, q)      # q float32 [1][4][64]

Arrays are passed to libkvlease without copies (float32, C order; others
are refused).  Errors are :class:`KvpoolError` (an ``OSError``) with the
errno libkvlease returned.  The library is ``$KVPOOL_LIBKVLEASE``, else the
source tree's ``build/lib/libkvlease.so.1``, else ``libkvlease.so.1`` from
the system.  Reference: Documentation/python.rst.
"""
from ._lib import (LIBRARY_ENV, MODE_DAEMON, MODE_MODULE, library_path)
from .admin import (KEEP, Admin, ClientInfo, ClientTiers, PoolInfo,
                    PrefixInfo, TenantInfo, TierStats)
from .client import (DTYPES, POLICIES, ROPE_STYLES, Context, CudaArray,
                     DevBuf, Layout, Lease, PolicyStats, SeqInfo, Sequence,
                     Status, TierInfo, attention, decode)
from .errors import (InvalidArgument, KvpoolError, LeaseTimeout,
                     QuotaExceeded, StaleEpoch, WouldBlock)

__all__ = [
    "Context", "Lease", "Layout", "Sequence", "Status", "decode",
    "attention", "DTYPES", "Admin", "PoolInfo", "TenantInfo", "ClientInfo",
    "KEEP", "KvpoolError", "InvalidArgument", "QuotaExceeded", "WouldBlock",
    "LeaseTimeout", "StaleEpoch", "library_path", "LIBRARY_ENV",
    "MODE_MODULE", "MODE_DAEMON", "POLICIES", "ROPE_STYLES", "TierInfo",
    "SeqInfo", "PolicyStats", "DevBuf", "CudaArray", "PrefixInfo",
    "TierStats", "ClientTiers",
]
