# SPDX-License-Identifier: MIT
"""The serving example (python/examples/serve.py) at small sizes: engine
processes of one tenant sharing a system prompt through the prefix cache
give the same tokens and first logits as without it, having matched the
system prompt's blocks; under each pressure policy, with a pool smaller
than the requests need, the outputs equal the unpressured run's and the
policy did act (swaps, drops, waits)."""
import argparse

import serve


def test_prefix_sharing_across_processes():
    a = argparse.Namespace(procs=2, rounds=2, system=128, user=8, new=4,
                           seed=0, socket=None, cpus=serve.parse_cpus(None))
    r = serve.run_prefix(a)
    rows = r["rows"]
    assert len(rows) == 4 and len({x["pid"] for x in rows}) == 2
    assert r["published_blocks"] == 4          # 128 tokens, 32 a block
    for x in rows:
        assert x["matched"] == 128
        assert x["same_tokens"] and x["same_logits"]
        assert x["ttft_shared"] > 0 and x["ttft_full"] > 0
    assert r["hits"] >= 4 * len(rows)
    serve.show_prefix(r)


def test_pressure_policies_equal_outputs():
    a = argparse.Namespace(requests=3, prompt=40, new=8, pool_blocks=5,
                           policies=["swap", "recompute", "stall"],
                           stall_ms=2, rounds=1, seed=0,
                           cpus=serve.parse_cpus(None))
    r = serve.run_pressure(a)
    serve.show_pressure(r)
    assert r["equal"] == {"none": True, "swap": True, "recompute": True,
                          "stall": True}
    runs = {s: x[0] for s, x in r["runs"].items()}
    assert runs["none"]["swaps_out"] == runs["none"]["drops"] == 0
    assert runs["none"]["waits"] == 0
    assert runs["swap"]["swaps_out"] > 0 and runs["swap"]["drops"] == 0
    assert runs["recompute"]["drops"] > 0
    assert runs["recompute"]["replays"] > 0
    assert runs["recompute"]["swaps_out"] == 0
    assert runs["stall"]["waits"] > 0 and runs["stall"]["stalls"] > 0
