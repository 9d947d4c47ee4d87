#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Decode tokens/s of the example engine with its KV cache in kvpool
(kvcache.KvpoolCache) against the same engine on PyTorch's dense
attention (kvcache.DenseCache, BF16-rounded K/V in FP32 tensors), and
where the time goes.

  bench_engine.py [--socket S] [--batch 4] [--contexts 256,1024,4096]
                  [--steps 16] [--dtypes bf16,fp8] [--threads 1]
                  [--profile] [--json]

For every context length: batch sequences of that many prompt tokens are
prefilled (in chunks of 256, not timed) into every cache, then ``steps``
decode steps of the whole batch are timed, the caches taking turns step
by step (so that all see the same machine); tokens/s = batch / the median
step time.
The time of a step is split into the model's own work (projections, MLP,
norms, RoPE, LM head: everything outside the cache), the cache's K/V
write and its attention; for kvpool the attention and write figures
include the round trips to kvpoold, estimated from the median of round
trips that do no work (kvl_status) times the number of calls.  Without
--socket a private kvpoold is started (CPU backend, 256 KiB blocks).
--profile adds cProfile's top functions of one kvpool run.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(HERE, os.pardir))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import engine  # noqa: E402
import kvcache  # noqa: E402
import kvpool  # noqa: E402
import kvpool.testing  # noqa: E402
import llama  # noqa: E402


def rtt(ctx, n=300) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        ctx.status()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def read_gbps(mib: int = 256) -> float:
    """Single-thread memory read bandwidth: numpy sum over mib MiB, best
    of 3 (a yardstick for the machine's state during this run)."""
    import numpy as np
    a = np.ones(mib << 18, np.float32)
    best = min(_timed(a.sum) for _ in range(3))
    return a.nbytes / best / 1e9


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def prefill(model, cache, prompts) -> torch.Tensor:
    """Prefill (chunks of 256 tokens); returns the first tokens."""
    r = engine.generate(model, cache, prompts, 1, prefill_chunk=256)
    return torch.tensor([t[0] for t in r["tokens"]])


def decode_step(model, cache, nxt) -> tuple:
    """One decode step of the batch: (next tokens, seconds by part)."""
    before = dict(cache.times)
    t0 = time.perf_counter()
    pos = cache.begin_decode()
    nxt = model.forward(nxt, pos, cache).argmax(-1)
    total = time.perf_counter() - t0
    w = cache.times["write_kv"] - before["write_kv"]
    a = cache.times["attention"] - before["attention"]
    return nxt, (total, total - w - a, w, a)


def profile_decode(model, cache, prompts, steps) -> str:
    """cProfile's top functions (own time) over steps decode steps."""
    engine.generate(model, cache, prompts, 1, prefill_chunk=256)
    prof = cProfile.Profile()
    nxt = torch.zeros(len(prompts), dtype=torch.int64)
    prof.enable()
    for _ in range(steps):
        pos = cache.begin_decode()
        nxt = model.forward(nxt, pos, cache).argmax(-1)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
    return s.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--contexts", default="256,1024,4096")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the engine (both modes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weights", help="a safetensors file")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.weights:
        cfg, w = llama.load(a.weights)
    else:
        cfg = llama.LlamaConfig()
        w = llama.random_weights(cfg, a.seed)
    model = llama.Llama(cfg, w)
    contexts = [int(x) for x in a.contexts.split(",")]
    dtypes = a.dtypes.split(",")
    cap = a.batch * (max(contexts) + a.steps + 256) * len(dtypes)
    daemon = None
    if not a.socket:
        daemon = kvpool.testing.Daemon(block_bytes=262144,
                                       capacity=max(256, cap // 64 + 64),
                                       chunk_blocks=64)
        a.socket = daemon.socket
    rows = []
    try:
        with kvpool.Context(a.socket) as ctx:
            st = ctx.status()
            r0 = rtt(ctx)
            bw0 = read_gbps()
            print(f"model: {cfg.num_hidden_layers} layers, hidden "
                  f"{cfg.hidden_size}, {cfg.num_attention_heads} q heads / "
                  f"{cfg.num_key_value_heads} kv heads x {cfg.head_dim}, "
                  f"vocab {cfg.vocab_size}; batch {a.batch}, {a.steps} "
                  f"decode steps; torch threads {torch.get_num_threads()}; "
                  f"kvpoold backend {st.backend}, block {st.block_bytes} B; "
                  f"round trip to kvpoold (median) {r0 * 1e6:.0f} us; "
                  f"memory read {bw0:.1f} GB/s (numpy, one thread)")
            hdr = (f"{'context':>7} {'cache':>12} {'tokens/s':>9} "
                   f"{'vs dense':>8} {'ms/step':>8} {'model':>6} "
                   f"{'write':>6} {'attn':>6} {'rtt':>5} {'KV GB/s':>7}")
            print(hdr)
            for L in contexts:
                g = torch.Generator().manual_seed(L)
                prompts = [torch.randint(0, cfg.vocab_size, (L,),
                                         generator=g).tolist()
                           for _ in range(a.batch)]
                caches = [("dense", kvcache.DenseCache(
                    cfg, a.batch, L + a.steps + 2, "bf16"))]
                for dt in dtypes:
                    caches.append((f"kvpool {dt}", kvcache.KvpoolCache(
                        ctx, cfg, a.batch, dt)))
                nxt = {n: prefill(model, c, prompts) for n, c in caches}
                # steps of the caches alternate, so that every cache sees
                # the same machine (other load comes and goes)
                steps = {n: [] for n, _ in caches}
                for _ in range(a.steps):
                    for n, c in caches:
                        nxt[n], t = decode_step(model, c, nxt[n])
                        steps[n].append(t)
                med = {n: [statistics.median(x[k] for x in steps[n])
                           for k in range(4)] for n in steps}
                base = a.batch / med["dense"][0]
                for n, c in caches:
                    tot, mod, wr, at = med[n]
                    tps = a.batch / tot
                    rt = (2 * cfg.num_hidden_layers * r0 * 1e3
                          if n != "dense" else 0.0)
                    # KV bytes the attention reads per step, as stored
                    # (the dense cache holds FP32)
                    per_tok = (c.layout.bytes_per_token if n != "dense"
                               else 2 * cfg.num_hidden_layers *
                               cfg.num_key_value_heads * cfg.head_dim * 4)
                    gbps = a.batch * (L + a.steps // 2) * per_tok / at / 1e9
                    print(f"{L:>7} {n:>12} {tps:>9.1f} {tps / base:>8.2f} "
                          f"{tot * 1e3:>8.2f} {mod * 1e3:>6.2f} "
                          f"{wr * 1e3:>6.2f} {at * 1e3:>6.2f} {rt:>5.2f} "
                          f"{gbps:>7.2f}")
                    rows.append({"context": L, "cache": n, "tokens_s": tps,
                                 "ratio": tps / base, "ms_step": tot * 1e3,
                                 "model_ms": mod * 1e3, "write_ms": wr * 1e3,
                                 "attn_ms": at * 1e3, "rtt_ms": rt,
                                 "kv_gbps": gbps})
                    c.close()
                ctx.trim()
            print(f"memory read at the end {read_gbps():.1f} GB/s")
            print("(median over the steps of ms per decode step of the "
                  "whole batch; tokens/s = batch / that; model: the "
                  "engine's own torch work; write/attn: the cache's calls, "
                  "for kvpool including the round trips, rtt: their part "
                  "at the median round trip; KV GB/s: KV bytes read by the "
                  "attention / attn)")
            if a.profile:
                L = contexts[-1]
                g = torch.Generator().manual_seed(L)
                prompts = [torch.randint(0, cfg.vocab_size, (L,),
                                         generator=g).tolist()
                           for _ in range(a.batch)]
                c = kvcache.KvpoolCache(ctx, cfg, a.batch, dtypes[0])
                text = profile_decode(model, c, prompts, a.steps)
                c.close()
                print(f"cProfile, kvpool {dtypes[0]}, context {L}, "
                      f"{a.steps} steps (by own time):")
                print(text)
            if a.json:
                print(json.dumps({"rtt_us": r0 * 1e6, "read_gbps": bw0,
                                  "rows": rows}))
    finally:
        if daemon:
            daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
