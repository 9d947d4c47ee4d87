#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Serving on kvpool: what a pool shared by processes gives an engine.

  serve.py prefix [--procs 3] [--rounds 3] [--system 512] [--user 16]
                  [--new 8] [--socket S] [--json]
      Several engine processes of one tenant answer requests that start
      with the same system prompt.  One process publishes the system
      prompt's blocks to the tenant's prefix cache once; then every
      process, concurrently, times requests with the cache (match the
      cached blocks, prefill only the rest) and without (prefill it all),
      alternating which goes first, in the same run.  Prints the time to
      first token (TTFT) of both, median and spread over rounds and
      processes, and their ratio per process and round; checks that both
      give the same tokens and logits.
  serve.py pressure [--requests 4] [--prompt 64] [--new 24]
                    [--pool-blocks 8] [--policies swap,recompute,stall]
                    [--rounds 3] [--json]
      One engine with more requests than its pool holds: the pool is
      smaller than the demand, and the pressure policy decides (swap:
      victims go to a dram tier and come back; recompute: victims are
      dropped and the engine replays them; stall: a request waits for
      blocks that finished requests free, and when no request can go on
      the newest is preempted and restarted).  Every policy's tokens are
      compared with the unpressured run's (a pool that holds everything);
      goodput (generated tokens per second) per policy, median and spread
      over the rounds, the policies interleaved round by round.

Both commands start private kvpoold's (CPU backend, one kernel thread)
and pin themselves, their engine processes and the daemons to the same
CPUs (--cpus, default the first of this process's affinity mask), one
PyTorch thread each: both sides of every comparison on the same cores.
Prefill runs in chunks of a block's tokens, so that the K/V of a block
does not depend on how long the prompt it came from was: with or
without the cache, and replayed after a drop, the engine computes
exactly the same numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(HERE, os.pardir))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kvpool  # noqa: E402
import kvpool.testing  # noqa: E402
import llama  # noqa: E402

MODEL_ID = "example-llama random-weights"


class SeqCache:
    """The cache protocol of llama.Llama (see kvcache.py) over one
    kvpool.Sequence: one request at a time.  New positions carry their
    token ids (append_tokens), so that full blocks can be published."""

    def __init__(self, seq: kvpool.Sequence, scale: float):
        self.seq = seq
        self.scale = scale
        self._new = 0

    def begin(self, tokens: list[int]) -> torch.Tensor:
        start = len(self.seq)
        self.seq.append_tokens(np.asarray(tokens, np.uint32))
        self._new = len(tokens)
        return torch.arange(start, start + len(tokens))

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        s = self.seq
        start = len(s) - self._new
        s.write_kv(layer, start, k.numpy(), v.numpy())
        out = torch.empty_like(q)
        if self._new == 1:
            s.decode(layer, q.numpy()[0], scale=self.scale,
                     out=out.numpy()[0])
        else:
            kvpool.attention([s], layer, q.numpy()[None], scale=self.scale,
                             out=out.numpy()[None])
        return out


def feed(model: llama.Llama, cache: SeqCache, tokens: list[int],
         chunk: int) -> torch.Tensor:
    """Run tokens through the model in chunks that end on block
    boundaries (positions from the sequence's length); the last logits."""
    pos0 = len(cache.seq)
    last = None
    i = 0
    while i < len(tokens):
        n = min(chunk - (pos0 + i) % chunk, len(tokens) - i)
        part = tokens[i:i + n]
        pos = cache.begin(part)
        last = model.forward(torch.tensor(part), pos, cache)[-1]
        i += n
    assert last is not None
    return last


def answer(model: llama.Llama, layout: kvpool.Layout, prompt: list[int],
           new: int, share: bool) -> tuple[float, list[int], Any, int]:
    """One request: (TTFT seconds, tokens, first logits, tokens matched)."""
    tpb = layout.tokens_per_block
    t0 = time.perf_counter()
    seq = layout.sequence()
    try:
        cache = SeqCache(seq, model.cfg.scale)
        matched = seq.match(prompt[:-1]) if share else 0
        logits = feed(model, cache, prompt[matched:], tpb)
        first = int(logits.argmax())
        ttft = time.perf_counter() - t0
        toks = [first]
        for _ in range(new - 1):
            logits_n = feed(model, cache, [toks[-1]], tpb)
            toks.append(int(logits_n.argmax()))
        return ttft, toks, logits.numpy().copy(), matched
    finally:
        seq.free()


def model_of(seed: int) -> llama.Llama:
    cfg = llama.LlamaConfig()
    return llama.Llama(cfg, llama.random_weights(cfg, seed))


def declare(ctx: kvpool.Context, cfg: Any) -> kvpool.Layout:
    return ctx.declare_layout(cfg.num_hidden_layers,
                              cfg.num_key_value_heads, cfg.head_dim,
                              "bf16", cfg.rope_theta, model=MODEL_ID)


def pin(cpus: list[int]) -> None:
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(1)


class Pinned:
    """pin() for a with block; the affinity and threads restored after."""

    def __init__(self, cpus: list[int]):
        self.cpus = cpus

    def __enter__(self) -> None:
        self.saved = (os.sched_getaffinity(0), torch.get_num_threads())
        pin(self.cpus)

    def __exit__(self, *exc: object) -> None:
        os.sched_setaffinity(0, self.saved[0])
        torch.set_num_threads(self.saved[1])


# ---- prefix sharing across processes --------------------------------------

def prefix_publisher(sock: str, tenant: str, system: list[int], seed: int,
                     cpus: list[int], out: str) -> None:
    pin(cpus)
    model = model_of(seed)
    with kvpool.Context(sock, tenant=tenant) as ctx:
        lay = declare(ctx, model.cfg)
        seq = lay.sequence()
        feed(model, SeqCache(seq, model.cfg.scale), system,
             lay.tokens_per_block)
        with open(out, "w") as f:
            json.dump(seq.publish(), f)


def prefix_worker(sock: str, tenant: str, idx: int, system: list[int],
                  user: int, new: int, rounds: int, seed: int,
                  cpus: list[int], out: str) -> None:
    pin(cpus)
    model = model_of(seed)
    g = np.random.default_rng(100 + idx)
    rows = []
    with kvpool.Context(sock, tenant=tenant) as ctx:
        lay = declare(ctx, model.cfg)
        for r in range(rounds):
            prompt = system + g.integers(
                0, model.cfg.vocab_size, user).tolist()
            res = {}
            order = (True, False) if (r + idx) % 2 == 0 else (False, True)
            for share in order:
                res[share] = answer(model, lay, prompt, new, share)
            rows.append({
                "round": r, "proc": idx, "pid": os.getpid(),
                "ttft_shared": res[True][0], "ttft_full": res[False][0],
                "matched": res[True][3], "prompt": len(prompt),
                "same_tokens": res[True][1] == res[False][1],
                "same_logits": bool(np.array_equal(res[True][2],
                                                   res[False][2]))})
    with open(out, "w") as f:
        json.dump(rows, f)


def run_prefix(a: argparse.Namespace) -> dict[str, Any]:
    import multiprocessing as mp
    import tempfile
    cpus = a.cpus
    daemon = None
    sock = a.socket
    if not sock:
        daemon = kvpool.testing.Daemon(tenants=["app"], extra=[
            "--kernel-threads", "1"])
        os.sched_setaffinity(daemon.pid, cpus)
        sock = daemon.socket
    tmp = tempfile.mkdtemp(prefix="kvpool-serve.")
    try:
        model = model_of(a.seed)
        g = np.random.default_rng(7)
        system = g.integers(0, model.cfg.vocab_size, a.system).tolist()
        pctx = mp.get_context("forkserver")
        pctx.set_forkserver_preload(["torch", "numpy", "kvpool", "llama",
                                     "serve"])
        # the system prompt published once, by an engine process of the
        # tenant (all of them compute alike: the same program, threads
        # and CPUs)
        pub_out = os.path.join(tmp, "publish.json")
        p = pctx.Process(target=prefix_publisher, args=(
            sock, "app", system, a.seed, cpus, pub_out))
        p.start()
        p.join()
        if p.exitcode:
            raise RuntimeError("the publishing process failed")
        with open(pub_out) as f:
            published = json.load(f)
        outs = [os.path.join(tmp, f"p{i}.json") for i in range(a.procs)]
        procs = [pctx.Process(target=prefix_worker, args=(
            sock, "app", i, system, a.user, a.new, a.rounds, a.seed, cpus,
            outs[i])) for i in range(a.procs)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise RuntimeError(f"an engine process failed: "
                               f"{[p.exitcode for p in procs]}")
        rows = []
        for o in outs:
            with open(o) as f:
                rows += json.load(f)
        with kvpool.Admin(sock) as adm:
            cache = adm.prefix_cache("app")
    finally:
        if daemon:
            daemon.stop()
    return {"published_blocks": published, "rows": rows,
            "hits": cache.hits, "hit_tokens": cache.hit_tokens,
            "system": a.system, "procs": a.procs, "rounds": a.rounds}


def spread(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def show_prefix(r: dict[str, Any]) -> None:
    rows = r["rows"]
    sh = spread([x["ttft_shared"] * 1e3 for x in rows])
    fu = spread([x["ttft_full"] * 1e3 for x in rows])
    ra = spread([x["ttft_full"] / x["ttft_shared"] for x in rows])
    print(f"{r['procs']} engine processes of one tenant, {r['rounds']} "
          f"rounds each, system prompt {r['system']} tokens "
          f"({r['published_blocks']} blocks published once), prompts "
          f"{rows[0]['prompt']} tokens")
    print(f"  TTFT with the prefix cache  {sh[0]:8.1f} ms "
          f"[{sh[1]:.1f}-{sh[2]:.1f}]  ({rows[0]['matched']} tokens "
          "matched per request)")
    print(f"  TTFT without                {fu[0]:8.1f} ms "
          f"[{fu[1]:.1f}-{fu[2]:.1f}]")
    print(f"  without / with, per process and round: {ra[0]:.2f}x "
          f"[{ra[1]:.2f}-{ra[2]:.2f}]")
    same = all(x["same_tokens"] and x["same_logits"] for x in rows)
    print(f"  tokens and first logits {'equal' if same else 'DIFFER'} "
          f"with and without; cache hits {r['hits']} blocks")


# ---- pressure policies --------------------------------------------------

PRESSURE = (kvpool.QuotaExceeded, kvpool.WouldBlock, kvpool.LeaseTimeout)


class Request:
    def __init__(self, rid: int, prompt: list[int]):
        self.rid = rid
        self.prompt = prompt
        self.out: list[int] = []
        self.seq: kvpool.Sequence | None = None
        self.cache: SeqCache | None = None


def serve(ctx: kvpool.Context, model: llama.Llama, prompts: list[list[int]],
          new: int, policy: str) -> dict[str, Any]:
    """Every request admitted at once, one step each in turn (a prefill,
    then one token per turn).  A step that finds no blocks (the library's
    policy failed too) leaves the request waiting for a later turn; a
    dropped request is replayed (prefill, then its tokens so far, the
    same computation as the first time); when no request could go on in
    a whole turn, the newest one is preempted: freed and started again."""
    lay = declare(ctx, model.cfg)
    tpb = lay.tokens_per_block
    reqs = [Request(i, p) for i, p in enumerate(prompts)]
    stats = {"waits": 0, "replays": 0, "preempted": 0}
    t0 = time.perf_counter()

    def step(q: Request) -> None:
        if q.seq is None:
            q.seq = lay.sequence()
            q.cache = SeqCache(q.seq, model.cfg.scale)
        assert q.cache is not None
        if q.seq.state == "dropped":
            stats["replays"] += 1
            q.seq.free()
            q.seq = lay.sequence()
            q.cache = SeqCache(q.seq, model.cfg.scale)
        if len(q.seq) == 0:                  # prefill (or its replay)
            logits = feed(model, q.cache, q.prompt, tpb)
            for t in q.out[:-1]:
                logits = feed(model, q.cache, [t], tpb)
            if not q.out:
                q.out.append(int(logits.argmax()))
                return
        # the next token (after a replay too: each turn moves it on)
        logits = feed(model, q.cache, [q.out[-1]], tpb)
        q.out.append(int(logits.argmax()))

    while True:
        live = [q for q in reqs if len(q.out) < new]
        if not live:
            break
        moved = False
        for q in live:
            before = (len(q.out), q.seq is not None and len(q.seq))
            try:
                step(q)
                moved = True
            except PRESSURE:
                stats["waits"] += 1
                if q.seq is not None and q.seq.state != "dropped" and \
                        (len(q.out), len(q.seq)) != before:
                    # a step half done (a chunk of the prompt in): start
                    # the request over rather than keep a partial state
                    q.seq.free()
                    q.seq = None
            if len(q.out) == new and q.seq is not None:
                q.seq.free()                 # done: its blocks go back
                q.seq = None
        if not moved:
            newest = max((q for q in live if q.seq is not None),
                         key=lambda q: q.rid, default=None)
            if newest is None:
                raise RuntimeError("no request can start: the pool is "
                                   "smaller than one request")
            assert newest.seq is not None
            newest.seq.free()
            newest.seq = None
            stats["preempted"] += 1
    wall = time.perf_counter() - t0
    ps = ctx.policy_stats()
    return {"policy": policy, "tokens": [q.out for q in reqs],
            "wall_s": wall, "goodput": len(reqs) * new / wall,
            "swaps_out": ps.swaps_out, "swaps_in": ps.swaps_in,
            "drops": ps.drops, "stalls": ps.stalls, **stats}


def run_pressure(a: argparse.Namespace) -> dict[str, Any]:
    with Pinned(a.cpus):
        return _run_pressure(a, a.cpus)


def _run_pressure(a: argparse.Namespace, cpus: list[int]) -> dict[str, Any]:
    model = model_of(a.seed)
    g = np.random.default_rng(3)
    prompts = [g.integers(0, model.cfg.vocab_size,
                          a.prompt + 7 * i).tolist()
               for i in range(a.requests)]
    # one daemon per setting: "none" has a pool that holds all requests
    settings = ["none"] + a.policies
    daemons = {}
    try:
        for s in settings:
            cap = 4 * a.pool_blocks * a.requests if s == "none" \
                else a.pool_blocks
            extra = ["--kernel-threads", "1"]
            if s == "swap":
                extra += ["--tier", f"dram:{4 * cap * a.requests}"]
            d = kvpool.testing.Daemon(capacity=cap, chunk_blocks=cap,
                                      shrink_delay_ms=60000,
                                      tenants=["serve"], extra=extra)
            os.sched_setaffinity(d.pid, cpus)
            daemons[s] = d
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in settings}
        for r in range(a.rounds):
            k = r % len(settings)
            for s in settings[k:] + settings[:k]:
                pol = "swap" if s == "none" else s
                with kvpool.Context(daemons[s].socket, tenant="serve",
                                    policy=pol, stall_ms=a.stall_ms,
                                    lease_batch=1) as ctx:
                    runs[s].append(serve(ctx, model, prompts, a.new, pol))
    finally:
        for d in daemons.values():
            d.stop()
    ref = runs["none"][0]["tokens"]
    return {"requests": a.requests, "new": a.new, "prompt": a.prompt,
            "pool_blocks": a.pool_blocks, "rounds": a.rounds,
            "equal": {s: all(x["tokens"] == ref for x in runs[s])
                      for s in settings},
            "runs": {s: [{k: v for k, v in x.items() if k != "tokens"}
                         for x in runs[s]] for s in settings}}


def show_pressure(r: dict[str, Any]) -> None:
    print(f"{r['requests']} requests (prompts of {r['prompt']}+ tokens, "
          f"{r['new']} generated each), pool of {r['pool_blocks']} blocks "
          f"against the unpressured run's; {r['rounds']} rounds")
    base = [x["goodput"] for x in r["runs"]["none"]]
    print(f"  {'policy':10} {'goodput tok/s [min-max]':>26} "
          f"{'vs unpressured':>20}  swaps out/in  drops  stalls  waits"
          "  preempted  outputs")
    for s, xs in r["runs"].items():
        gp = spread([x["goodput"] for x in xs])
        ra = spread([x["goodput"] / b for x, b in zip(xs, base)])
        last = xs[-1]
        name = "unpressured" if s == "none" else s
        print(f"  {name:10} {gp[0]:10.1f} [{gp[1]:.1f}-{gp[2]:.1f}]"
              f"{'':>4} {ra[0]:.2f} [{ra[1]:.2f}-{ra[2]:.2f}]"
              f"  {last['swaps_out']:5}/{last['swaps_in']:<5}"
              f"  {last['drops']:5}  {last['stalls']:6}  {last['waits']:5}"
              f"  {last['preempted']:9}  "
              f"{'equal' if r['equal'][s] else 'DIFFER'}")


def parse_cpus(text: str | None) -> list[int]:
    if not text:
        return sorted(os.sched_getaffinity(0))[:1]
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out += range(int(lo), int(hi) + 1)
        elif part:
            out.append(int(part))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prefix")
    p.add_argument("--procs", type=int, default=3)
    p.add_argument("--system", type=int, default=512)
    p.add_argument("--user", type=int, default=16)
    p.add_argument("--new", type=int, default=8)
    p.add_argument("--socket")
    q = sub.add_parser("pressure")
    q.add_argument("--requests", type=int, default=4)
    q.add_argument("--prompt", type=int, default=64)
    q.add_argument("--new", type=int, default=24)
    q.add_argument("--pool-blocks", type=int, default=8)
    q.add_argument("--policies", default="swap,recompute,stall")
    q.add_argument("--stall-ms", type=int, default=2)
    for x in (p, q):
        x.add_argument("--rounds", type=int, default=3)
        x.add_argument("--seed", type=int, default=0)
        x.add_argument("--cpus", help="CPUs for every process, e.g. 0")
        x.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    a.cpus = parse_cpus(a.cpus)
    if a.cmd == "prefix":
        r = run_prefix(a)
        show_prefix(r)
        ok = all(x["same_tokens"] and x["same_logits"] for x in r["rows"])
    else:
        a.policies = [s for s in a.policies.split(",") if s]
        r = run_pressure(a)
        show_pressure(r)
        ok = all(r["equal"].values())
    if a.json:
        print(json.dumps(r))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
