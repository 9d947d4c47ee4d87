#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kvlease-example in Python (libkvlease/example.c, call for call): open a
context, declare a KV layout, grow a sequence, write K/V for every token
and run one decode step.  Needs a running kvpoold ($KVPOOL_SOCKET or
--socket).  Exit 0 on success."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir))
import kvpool  # noqa: E402

LAYERS, KVH, HD, QH, NTOK = 2, 2, 64, 4, 100


def main(argv):
    socket = argv[2] if len(argv) == 3 and argv[1] == "--socket" else None
    try:
        ctx = kvpool.Context(socket)
    except kvpool.KvpoolError as e:
        print(f"kvl_open: {e.strerror}", file=sys.stderr)
        return 1
    with ctx:
        try:
            lay = ctx.declare_layout(LAYERS, KVH, HD, "bf16", 10000.0)
            seq = lay.sequence()
            seq.append(NTOK)
            i = np.arange(NTOK * KVH * HD, dtype=np.float32)
            k = np.sin(i * np.float32(0.01)).reshape(NTOK, KVH, HD)
            v = np.cos(i * np.float32(0.02)).reshape(NTOK, KVH, HD)
            q = np.sin(np.arange(QH * HD, dtype=np.float32)
                       * np.float32(0.03)).reshape(QH, HD)
            for layer in range(LAYERS):
                seq.write_kv(layer, 0, k, v)
            out = seq.decode(1, q)
        except kvpool.KvpoolError as e:
            print(f"{e.function or 'kvpool'}: {e.strerror}", file=sys.stderr)
            return 1
        st = ctx.status()
        print(f"pool {st.pool} ({st.backend} backend): "
              f"{lay.tokens_per_block} tokens/block, holding {st.held} "
              f"blocks, out[0] = {out[0, 0]:.5f}")
        seq.free()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
