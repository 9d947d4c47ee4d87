#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Decode tokens/s of the example engine with its KV cache in kvpool
(kvcache.KvpoolCache) against the same engine on PyTorch's dense
attention (kvcache.DenseCache), on the same CPUs and threads, and where
the time goes.

  bench_engine.py [--socket S] [--batch 4] [--contexts 256,1024,4096]
                  [--steps 16] [--rounds 3] [--dtypes bf16,fp8]
                  [--threads N] [--cpus LIST] [--quick] [--profile]
                  [--json]

Both sides get the same cores: --threads N (default 1; 0: every CPU
this process may run on) sets PyTorch's threads and OpenBLAS's for the
engine and ``kvpoold --kernel-threads N`` for the private kvpoold, and
this process and that kvpoold (its child) are pinned to the same N CPUs
(--cpus, default the first N of this process's affinity mask).  One
thread is the default because on a machine whose cores other work
shares, PyTorch's OpenMP regions wait for their slowest thread and
collapse (tens of times slower than one thread); on a quiet machine
--threads 0 gives both sides every core.  With
--socket the daemon is someone else's: its threads and CPUs are its own,
and the header says so.

Caches, per context length: "dense fp32" (BF16-rounded K/V held in FP32
tensors, FP32 matmuls), "dense bf16" (K/V held as BF16, the bytes
kvpool's BF16 cache holds, BF16 matmuls with an FP32 softmax, as PyTorch
engines run in BF16), and "kvpool DT" for every --dtypes entry.  Batch
sequences of that many prompt tokens are prefilled (in chunks of 256,
not timed) into every cache once; then ``rounds`` rounds of ``steps``
decode steps of the whole batch are timed, the caches taking turns step
by step in an order rotated every round (so that all see the same
machine); between rounds every cache is rewound to the prompt, so every
round decodes the same positions.  Per round and cache: tokens/s = batch
/ the median step time; the table gives the median over the rounds and
the spread (min-max), and the ratios against both dense caches are
formed per round (same round, same machine) and given as median and
spread.  The model column is the same work for every cache: its spread
across caches is the noise of the machine.
The time of a step is split into the model's own work (projections, MLP,
norms, RoPE, LM head: everything outside the cache), the cache's K/V
write and its attention; for kvpool the attention and write figures
include the round trips to kvpoold, estimated from the median of round
trips that do no work (kvl_status) times the number of calls.  Without
--socket a private kvpoold is started (CPU backend, 256 KiB blocks), and
every step's CPU time (this process's and that kvpoold's threads, from
schedstat) is measured too: on a machine other work shares, the wall
time of a step includes the time others run on these CPUs, which the
scheduler spreads unevenly over a process that computes without pause
(dense) and one that sleeps on every call (kvpool); the CPU time leaves
it out.
--quick: contexts 64,256, 4 steps, 2 rounds (a smoke test).
--profile adds cProfile's top functions of one kvpool run.
--json: the last line is one JSON object (rounds, threads, cpus, rows).
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
sys.path.insert(0, os.path.join(HERE, os.pardir))
sys.path.insert(0, HERE)

# numpy (through kvpool), torch, engine, kvcache and llama are imported
# in main(), once the threads are known: OpenBLAS reads its thread count
# when it is loaded.
torch = engine = kvcache = llama = kvpool = None


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


def prefill(model, cache, prompts):
    """Prefill (chunks of 256 tokens); returns the first tokens."""
    r = engine.generate(model, cache, prompts, 1, prefill_chunk=256)
    return torch.tensor([t[0] for t in r["tokens"]])


def task_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of process pid (schedstat, ns)."""
    tot = 0
    base = f"/proc/{pid}/task"
    for t in os.listdir(base):
        try:
            with open(f"{base}/{t}/schedstat") as f:
                tot += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return tot / 1e9


def decode_step(model, cache, nxt, dpid) -> tuple:
    """One decode step of the batch: (next tokens, seconds by part, CPU
    seconds of this process and of kvpoold pid dpid (NaN without))."""
    before = dict(cache.times)
    c0 = time.process_time() + (task_cpu_s(dpid) if dpid else 0)
    t0 = time.perf_counter()
    pos = cache.begin_decode()
    nxt = model.forward(nxt, pos, cache).argmax(-1)
    total = time.perf_counter() - t0
    cpu = (time.process_time() + task_cpu_s(dpid) - c0 if dpid
           else float("nan"))
    w = cache.times["write_kv"] - before["write_kv"]
    a = cache.times["attention"] - before["attention"]
    return nxt, (total, total - w - a, w, a, cpu)


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


def spread(xs) -> tuple:
    """(median, min, max)"""
    return statistics.median(xs), min(xs), max(xs)


def fmt(m, lo, hi, w=4, p=2) -> str:
    """median [min-max]"""
    return f"{m:.{p}f} [{lo:.{p}f}-{hi:.{p}f}]".rjust(w)


def parse_cpus(text: str) -> list:
    """"0,2-3" -> [0, 2, 3]"""
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += range(int(a), int(b) + 1)
        elif part:
            out.append(int(part))
    return out


def measure(model, cfg, caches, prompts, a, dpid) -> dict:
    """rounds x steps decode steps, caches interleaved step by step in a
    rotated order; per cache a list (one per round) of the medians of
    (total, model, write, attention, CPU) seconds."""
    L = len(prompts[0])
    first = {n: prefill(model, c, prompts) for n, c in caches}
    per_round = {n: [] for n, _ in caches}
    for r in range(a.rounds):
        k = r % len(caches)
        order = caches[k:] + caches[:k]
        nxt = dict(first)
        steps = {n: [] for n, _ in caches}
        for _ in range(a.steps):
            for n, c in order:
                nxt[n], t = decode_step(model, c, nxt[n], dpid)
                steps[n].append(t)
        for n, c in caches:
            per_round[n].append([statistics.median(x[i] for x in steps[n])
                                 for i in range(5)])
            c.rewind(L)
    return per_round


def main(argv=None) -> int:
    global torch, engine, kvcache, llama, kvpool
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--socket")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--contexts", default="256,1024,4096")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtypes", default="bf16,fp8")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads of both sides: torch and OpenBLAS in the "
                    "engine, kernel threads of the private kvpoold "
                    "(default 1; 0: every CPU this process may run on)")
    ap.add_argument("--cpus", help="CPUs both sides run on, e.g. 0-1 "
                    "(default: the first --threads of this process's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weights", help="a safetensors file")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.quick:
        a.contexts, a.steps, a.rounds = "64,256", 4, 2
    if a.rounds < 1 or a.steps < 1:
        ap.error("--rounds and --steps: at least 1")
    mine = sorted(os.sched_getaffinity(0))
    cpus = parse_cpus(a.cpus) if a.cpus else None
    if a.threads <= 0:
        a.threads = len(cpus) if cpus else len(mine)
    if cpus is None:
        cpus = mine[:a.threads]
    if len(cpus) < a.threads:
        ap.error(f"--threads {a.threads} on {len(cpus)} CPUs {cpus}")
    os.sched_setaffinity(0, cpus)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    import torch as _torch
    import kvpool as _kvpool
    import kvpool.testing  # noqa: F401
    import engine as _engine
    import kvcache as _kvcache
    import llama as _llama
    torch, kvpool = _torch, _kvpool
    engine, kvcache, llama = _engine, _kvcache, _llama
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
        # a child of this process: it runs on the same CPUs
        daemon = kvpool.testing.Daemon(
            block_bytes=262144, capacity=max(256, cap // 64 + 64),
            chunk_blocks=64, extra=["--kernel-threads", str(a.threads)])
        a.socket = daemon.socket
    dpid = daemon.proc.pid if daemon else 0
    rows = []
    try:
        with kvpool.Context(a.socket) as ctx:
            st = ctx.status()
            r0 = rtt(ctx)
            bw0 = read_gbps()
            if daemon:
                kt = [ln.split("cpu kernels: ")[1] for ln in
                      daemon.log().splitlines() if "cpu kernels: " in ln]
                dinfo = (f"private kvpoold on the same CPUs (its log: "
                         f"cpu kernels: {kt[-1] if kt else '?'})")
            else:
                dinfo = (f"kvpoold at {a.socket}: its own threads and "
                         f"CPUs, not set by this run")
            print(f"model: {cfg.num_hidden_layers} layers, hidden "
                  f"{cfg.hidden_size}, {cfg.num_attention_heads} q heads / "
                  f"{cfg.num_key_value_heads} kv heads x {cfg.head_dim}, "
                  f"vocab {cfg.vocab_size}; batch {a.batch}, {a.rounds} "
                  f"rounds x {a.steps} decode steps")
            print(f"CPUs {','.join(map(str, cpus))}: torch threads "
                  f"{torch.get_num_threads()}, OpenBLAS threads "
                  f"{os.environ['OPENBLAS_NUM_THREADS']}; {dinfo}; "
                  f"backend {st.backend}, block {st.block_bytes} B; "
                  f"round trip to kvpoold (median) {r0 * 1e6:.0f} us; "
                  f"memory read {bw0:.1f} GB/s (numpy, one thread); "
                  f"load average {os.getloadavg()[0]:.1f}")
            hdr = (f"{'context':>7} {'cache':>12} {'tokens/s [min-max]':>22} "
                   f"{'vs dense bf16':>17} {'vs dense fp32':>17} "
                   f"{'ms/step':>8} {'model':>6} {'write':>6} {'attn':>6} "
                   f"{'rtt':>5} {'KV GB/s':>7} {'cpu ms':>7} "
                   f"{'cpu vs bf16':>17}")
            print(hdr)
            for L in contexts:
                g = torch.Generator().manual_seed(L)
                prompts = [torch.randint(0, cfg.vocab_size, (L,),
                                         generator=g).tolist()
                           for _ in range(a.batch)]
                n_max = L + a.steps + 2
                caches = [
                    ("dense fp32", kvcache.DenseCache(cfg, a.batch, n_max,
                                                      "bf16", "fp32")),
                    ("dense bf16", kvcache.DenseCache(cfg, a.batch, n_max,
                                                      "bf16", "bf16"))]
                for dt in dtypes:
                    caches.append((f"kvpool {dt}", kvcache.KvpoolCache(
                        ctx, cfg, a.batch, dt)))
                pr = measure(model, cfg, caches, prompts, a, dpid)
                tps = {n: [a.batch / x[0] for x in pr[n]] for n in pr}
                for n, c in caches:
                    vs = {b: spread([t / tb for t, tb in
                                     zip(tps[n], tps[b])])
                          for b in ("dense bf16", "dense fp32")}
                    # CPU seconds per step, dense bf16's over this one's
                    vc = spread([xb[4] / x[4] for x, xb in
                                 zip(pr[n], pr["dense bf16"])])
                    med = [statistics.median(x[i] for x in pr[n])
                           for i in range(5)]
                    tot, mod, wr, at, cpu = med
                    rt = (2 * cfg.num_hidden_layers * r0 * 1e3
                          if n.startswith("kvpool") else 0.0)
                    # KV bytes the attention reads per step, as stored
                    if n.startswith("kvpool"):
                        per_tok = c.layout.bytes_per_token
                    else:
                        per_tok = (2 * cfg.num_hidden_layers *
                                   cfg.num_key_value_heads * cfg.head_dim *
                                   (2 if n == "dense bf16" else 4))
                    gbps = a.batch * (L + a.steps // 2) * per_tok / at / 1e9
                    t = spread(tps[n])
                    print(f"{L:>7} {n:>12} {fmt(*t, 22, 1)} "
                          f"{fmt(*vs['dense bf16'], 17)} "
                          f"{fmt(*vs['dense fp32'], 17)} "
                          f"{tot * 1e3:>8.2f} {mod * 1e3:>6.2f} "
                          f"{wr * 1e3:>6.2f} {at * 1e3:>6.2f} {rt:>5.2f} "
                          f"{gbps:>7.2f} {cpu * 1e3:>7.2f} "
                          f"{fmt(*vc, 17)}")
                    rows.append({
                        "context": L, "cache": n, "rounds": a.rounds,
                        "tokens_s": t[0], "tokens_s_min": t[1],
                        "tokens_s_max": t[2],
                        "vs_dense_bf16": vs["dense bf16"][0],
                        "vs_dense_bf16_min": vs["dense bf16"][1],
                        "vs_dense_bf16_max": vs["dense bf16"][2],
                        "vs_dense_fp32": vs["dense fp32"][0],
                        "vs_dense_fp32_min": vs["dense fp32"][1],
                        "vs_dense_fp32_max": vs["dense fp32"][2],
                        "ms_step": tot * 1e3, "model_ms": mod * 1e3,
                        "write_ms": wr * 1e3, "attn_ms": at * 1e3,
                        "rtt_ms": rt, "kv_gbps": gbps,
                        "cpu_ms_step": cpu * 1e3, "cpu_vs_dense_bf16": vc[0],
                        "cpu_vs_dense_bf16_min": vc[1],
                        "cpu_vs_dense_bf16_max": vc[2]})
                    c.close()
                ctx.trim()
            print(f"memory read at the end {read_gbps():.1f} GB/s; load "
                  f"average {os.getloadavg()[0]:.1f}")
            print(f"(tokens/s: median over {a.rounds} rounds of batch / "
                  f"the round's median step time, [min-max] over the "
                  f"rounds; vs: the same ratio per round, median "
                  f"[min-max]; ms/step and its parts: median over the "
                  f"rounds; model: the engine's own torch work, the same "
                  f"for every cache; write/attn: the cache's calls, for "
                  f"kvpool including the round trips, rtt: their part at "
                  f"the median round trip; KV GB/s: KV bytes read by the "
                  f"attention, as stored, / attn; cpu ms: CPU time of a "
                  f"step, this process's and the private kvpoold's "
                  f"threads together, median; cpu vs bf16: dense bf16's "
                  f"CPU time per step over this cache's, per round, "
                  f"median [min-max]: the same comparison with the time "
                  f"other processes take from these CPUs left out)")
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
                print(json.dumps({"rounds": a.rounds, "steps": a.steps,
                                  "threads": a.threads, "cpus": cpus,
                                  "private_daemon": daemon is not None,
                                  "rtt_us": r0 * 1e6, "read_gbps": bw0,
                                  "rows": rows}))
    finally:
        if daemon:
            daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
