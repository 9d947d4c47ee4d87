#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch's own attention as the peer of bench-kvk-gpu, in the same run.

torch.nn.functional.scaled_dot_product_attention on dense BF16 tensors of
the benchmark's decode shapes (batch x context, 32 query heads, 8 KV heads,
head_dim 128, one query token; and its GQA 8 row, 64 query heads at 32K x
16), timed with CUDA events, KV bytes read per
second counted as bench-kvk-gpu counts them (positions x 2 x 8 x 128 x 2
bytes), and the device's copy bandwidth measured with torch in this run.
Grouped-query attention uses enable_gqa when this torch has it (2.5 and
later); otherwise K and V are expanded to the query heads beforehand
(not timed) and the figure counts the KV bytes of 8 heads all the same,
which favours torch.  Prints a table and one JSON line; exit 77 without torch or a GPU.
"""
import json
import sys

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # torch absent or broken
    print("no torch: %s" % e)
    sys.exit(77)

if not torch.cuda.is_available():
    print("torch sees no CUDA device")
    sys.exit(77)

QH, KVH, D = 32, 8, 128
CTXS = (1024, 8192, 32768, 131072)
BATCHES = (1, 16, 64)
quick = len(sys.argv) > 1 and sys.argv[1] == "-q"
dev = torch.device("cuda")


def timed(fn, min_ms=50.0):
    fn()
    torch.cuda.synchronize()
    n = 1
    while True:
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        b.synchronize()
        ms = a.elapsed_time(b)
        if ms >= min_ms or n >= 1 << 14:
            return ms / n
        n = max(n * 2, int(n * min_ms / max(ms, 1e-3)) + 1)


def copy_gbps():
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src))
    del src, dst
    return 2.0 * n / (ms * 1e-3) / 1e9


def torch_at_least(major, minor):
    try:
        v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return v >= (major, minor)


gqa = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "") or \
    torch_at_least(2, 5)
name = torch.cuda.get_device_name(0)
cbw = copy_gbps()
print("sdpa-peer: %s, torch %s, %s, copy %.1f GB/s read+write" %
      (name, torch.__version__, "enable_gqa" if gqa else "K/V expanded to the query heads",
       cbw))
print("%-5s %7s %5s %3s %10s %10s %9s" % ("dtype", "ctx", "batch", "GQA",
                                          "KV MiB", "KV GB/s", "us/call"))
results = []
shapes = [(ctx, b, QH) for ctx in CTXS for b in BATCHES
          if not quick or ctx in (1024, 32768)]
shapes.append((32768, 16, 64))       # the GQA 8 row (Llama-3.1-70B)
for ctx, b, qh in shapes:
    kv_bytes = ctx * b * 2 * KVH * D * 2
    free, _ = torch.cuda.mem_get_info()
    need = kv_bytes * (1 if gqa else qh // KVH) + (1 << 30)
    if need > free:
        print("%-5s %7d %5d %3d  skipped: needs %.1f GiB" %
              ("bf16", ctx, b, qh // KVH, need / 2**30))
        continue
    q = torch.randn(b, qh, 1, D, dtype=torch.bfloat16, device=dev)
    k = torch.randn(b, KVH, ctx, D, dtype=torch.bfloat16, device=dev)
    v = torch.randn(b, KVH, ctx, D, dtype=torch.bfloat16, device=dev)
    if gqa:
        fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    else:
        k = k.repeat_interleave(qh // KVH, dim=1)
        v = v.repeat_interleave(qh // KVH, dim=1)
        fn = lambda: F.scaled_dot_product_attention(q, k, v)
    try:
        us = timed(fn) * 1e3
    except Exception as e:
        print("%-5s %7d %5d %3d  failed: %s" % ("bf16", ctx, b,
                                               qh // KVH, e))
        continue
    gbps = kv_bytes / (us * 1e-6) / 1e9
    results.append({"dtype": "bf16", "ctx": ctx, "batch": b,
                    "gqa": qh // KVH, "gbps": round(gbps, 1),
                    "us": round(us, 2)})
    print("%-5s %7d %5d %3d %10.1f %10.1f %9.1f" %
          ("bf16", ctx, b, qh // KVH, kv_bytes / 2**20, gbps, us))
    del q, k, v
    torch.cuda.empty_cache()
print(json.dumps({"device": name, "torch": torch.__version__,
                  "enable_gqa": gqa, "copy_gbps": round(cbw, 1),
                  "results": results}))
