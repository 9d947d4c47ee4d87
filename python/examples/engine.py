#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A small inference engine on kvpool: llama.Llama whose KV cache and
attention live in kvpoold (kvcache.KvpoolCache), prefill then greedy
decoding of several sequences at once, each tenant a process of its own.

  engine.py run [--tenants 3] [--seqs 2] [--new 32] [--dtype bf16]
                [--socket S] [--weights F.safetensors | --seed N] [--check]
      starts a private kvpoold (CPU backend) unless --socket is given,
      runs one worker process per tenant concurrently, prints each
      tenant's tokens/s; --check compares every generated token with the
      same model on PyTorch's dense attention (kvcache.DenseCache).
  engine.py worker --socket S --out FILE [--tenant T] [--attn kvpool|dense]
                   [--dtype D] [--prompts JSON] [--new N]
                   [--weights F | --seed N] [--logits F.npy]
      one tenant: generates for its prompts, writes tokens and timings
      (JSON) to FILE.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# One BLAS thread per process unless told otherwise: tenants are processes
# of their own and share the machine's cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(HERE, os.pardir))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import kvcache  # noqa: E402
import kvpool  # noqa: E402
import llama  # noqa: E402


def make_prompts(cfg, n: int, seed: int, min_len: int = 9,
                 max_len: int = 60) -> list[list[int]]:
    """n seeded random prompts of different lengths."""
    g = torch.Generator().manual_seed(1000 + seed)
    out = []
    for _ in range(n):
        ln = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        out.append(torch.randint(0, cfg.vocab_size, (ln,),
                                 generator=g).tolist())
    return out


def generate(model, cache, prompts, new: int, forced=None,
             keep_logits: bool = False, prefill_chunk: int = 0) -> dict:
    """Prefill every prompt (one forward pass each, or passes of
    prefill_chunk tokens), then new - 1 decode
    steps for all sequences at once; greedy (argmax) tokens.  forced
    [nseq][new]: feed these tokens instead of the argmax (teacher forcing,
    to compare logits along one token path).  Returns tokens [nseq][new],
    logits [new][nseq][vocab] when keep_logits, and timings."""
    nseq = len(prompts)
    tokens = [[] for _ in range(nseq)]
    logits_all = []
    t0 = time.perf_counter()
    step = torch.empty(nseq, model.cfg.vocab_size)
    chunk = prefill_chunk or max(len(p) for p in prompts)
    for i, p in enumerate(prompts):
        for c in range(0, len(p), chunk):
            part = p[c:c + chunk]
            pos = cache.begin_prefill(i, len(part))
            step[i] = model.forward(torch.tensor(part), pos, cache)[-1]
    t1 = time.perf_counter()
    pre = dict(cache.times)
    for s in range(new):
        if keep_logits:
            logits_all.append(step.clone())
        nxt = step.argmax(dim=-1)
        for i in range(nseq):
            tokens[i].append(int(nxt[i]))
        if s == new - 1:
            break
        if forced is not None:
            nxt = torch.tensor([f[s] for f in forced])
        pos = cache.begin_decode()
        step = model.forward(nxt, pos, cache)
    t2 = time.perf_counter()
    return {"tokens": tokens,
            "logits": torch.stack(logits_all) if keep_logits else None,
            "prefill_s": t1 - t0, "decode_s": t2 - t1,
            "decode_tokens": nseq * (new - 1),
            "prefill_tokens": sum(len(p) for p in prompts),
            "attend_prefill_s": pre,
            "attend_decode_s": {k: v - pre[k] for k, v in
                                cache.times.items()}}


def load_model(args):
    if args.weights:
        cfg, w = llama.load(args.weights)
    else:
        cfg = llama.LlamaConfig()
        w = llama.random_weights(cfg, args.seed)
    return llama.Llama(cfg, w)


def worker(args) -> int:
    torch.set_num_threads(args.threads)
    model = load_model(args)
    prompts = json.loads(args.prompts) if args.prompts else make_prompts(
        model.cfg, args.seqs, args.prompt_seed)
    if args.attn == "dense":
        maxlen = max(len(p) for p in prompts) + args.new
        cache = kvcache.DenseCache(model.cfg, len(prompts), maxlen,
                                   kv=args.dense_kv)
        res = generate(model, cache, prompts, args.new,
                       keep_logits=bool(args.logits))
    else:
        with kvpool.Context(args.socket, tenant=args.tenant) as ctx:
            cache = kvcache.KvpoolCache(ctx, model.cfg, len(prompts),
                                        args.dtype)
            res = generate(model, cache, prompts, args.new,
                           keep_logits=bool(args.logits))
            st = ctx.status()
            res["blocks_held"] = st.held
            res["tenant"] = st.tenant
            cache.close()
    logits = res.pop("logits")
    if args.logits:
        import numpy as np
        np.save(args.logits, logits.numpy())
    res["prompts"] = prompts
    res["pid"] = os.getpid()
    with open(args.out, "w") as f:
        json.dump(res, f)
    return 0


def worker_args(socket, out, tenant=None, dtype="bf16", new=32, seqs=2,
                prompt_seed=0, weights=None, seed=0, attn="kvpool",
                logits=None) -> list[str]:
    """The command line of a worker (``engine.py worker ...``)."""
    cmd = ["worker", "--out", out, "--dtype", dtype, "--new", str(new),
           "--seqs", str(seqs), "--prompt-seed", str(prompt_seed),
           "--attn", attn, "--seed", str(seed)]
    for opt, val in (("--socket", socket), ("--tenant", tenant),
                     ("--weights", weights), ("--logits", logits)):
        if val:
            cmd += [opt, val]
    return cmd


def _tenant_main(argv: list[str]) -> None:
    sys.exit(main(argv))


def start_tenants(argvs: list[list[str]]) -> list:
    """One process per worker command line, started concurrently.

    The processes are forked from a fork server (multiprocessing's
    "forkserver") that has imported torch, kvpool and the model code but
    run nothing, so a tenant starts in milliseconds instead of importing
    torch again (seconds), and no thread pool is forked.  Each is a
    process of its own: its own pid, its own kvpool.Context (opened after
    the fork), its own lease.  Returns multiprocessing.Process objects
    (join(), exitcode)."""
    import multiprocessing as mp
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "numpy", "kvpool", "llama",
                                "kvcache", "engine"])
    procs = [ctx.Process(target=_tenant_main, args=(a,)) for a in argvs]
    for p in procs:
        p.start()
    return procs


def run(args) -> int:
    import tempfile
    import kvpool.testing
    tmp = tempfile.mkdtemp(prefix="kvpool-engine.")
    names = [f"engine{i}" for i in range(args.tenants)]
    daemon = None
    if not args.socket:
        daemon = kvpool.testing.Daemon(tenants=names,
                                       capacity=args.capacity)
        args.socket = daemon.socket
    else:
        names = [None] * args.tenants
    try:
        t0 = time.perf_counter()
        procs = start_tenants([worker_args(
            args.socket, os.path.join(tmp, f"w{i}.json"), names[i],
            args.dtype, args.new, args.seqs, i, args.weights, args.seed)
            for i in range(args.tenants)])
        for p in procs:
            p.join()
        bad = [p.exitcode for p in procs]
        wall = time.perf_counter() - t0
        if any(bad):
            print(f"a worker failed: exit codes {bad}", file=sys.stderr)
            return 1
        results = []
        for i in range(args.tenants):
            with open(os.path.join(tmp, f"w{i}.json")) as f:
                results.append(json.load(f))
        total = 0
        for i, r in enumerate(results):
            tps = r["decode_tokens"] / r["decode_s"]
            total += r["decode_tokens"]
            print(f"tenant {r['tenant']} (pid {r['pid']}): "
                  f"{len(r['prompts'])} sequences, prompts "
                  f"{[len(p) for p in r['prompts']]}, prefill "
                  f"{r['prefill_s']:.3f} s, decode {tps:.1f} tokens/s, "
                  f"{r['blocks_held']} blocks")
        print(f"{args.tenants} tenants: {total} decode tokens, {wall:.2f} s "
              "wall in all (process start and model set-up included)")
        if args.check:
            model = load_model(args)
            ok = True
            for r in results:
                maxlen = max(len(p) for p in r["prompts"]) + args.new
                ref = generate(model, kvcache.DenseCache(
                    model.cfg, len(r["prompts"]), maxlen, "bf16"),
                    r["prompts"], args.new)
                same = ref["tokens"] == r["tokens"]
                ok &= same
                print(f"tenant {r['tenant']}: tokens "
                      f"{'equal' if same else 'DIFFER'} to dense attention")
            if not ok:
                return 1
    finally:
        if daemon:
            daemon.stop()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--socket")
        p.add_argument("--dtype", default="bf16",
                       choices=list(kvpool.DTYPES))
        p.add_argument("--new", type=int, default=32,
                       help="tokens generated per sequence")
        p.add_argument("--seqs", type=int, default=2,
                       help="sequences per tenant")
        p.add_argument("--weights", help="a safetensors file, a "
                       "sharded checkpoint's .index.json or its "
                       "directory")
        p.add_argument("--seed", type=int, default=0,
                       help="random weights' seed (without --weights)")
    r = sub.choices["run"]
    r.add_argument("--tenants", type=int, default=3)
    r.add_argument("--capacity", type=int, default=2048)
    r.add_argument("--check", action="store_true")
    w = sub.choices["worker"]
    w.add_argument("--out", required=True)
    w.add_argument("--tenant")
    w.add_argument("--attn", default="kvpool", choices=["kvpool", "dense"])
    w.add_argument("--dense-kv", default="bf16", choices=["bf16", "fp32"])
    w.add_argument("--prompts", help="JSON list of token id lists")
    w.add_argument("--prompt-seed", type=int, default=0)
    w.add_argument("--threads", type=int, default=1)
    w.add_argument("--logits", help="write the logits of every step "
                   "(.npy, [new][seqs][vocab])")
    args = ap.parse_args(argv)
    return worker(args) if args.cmd == "worker" else run(args)


if __name__ == "__main__":
    sys.exit(main())
