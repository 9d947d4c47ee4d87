# SPDX-License-Identifier: MIT
"""KV caches for llama.Llama: the one an engine hands to kvpool, and
PyTorch's own dense attention as the reference.

Both have the same three calls, made by the engine (engine.py) and the
model (llama.py):

``begin_prefill(i, ntok) -> positions``
    the next forward pass is ntok new tokens of sequence i (its prompt);
``begin_decode() -> positions``
    the next forward pass is one new token for every sequence;
``attend(layer, q, k, v) -> out``
    store this layer's k, v [n][kv_heads][head_dim] at the new positions
    and return causal attention of q [n][q_heads][head_dim] over each
    sequence's cache (FP32 tensors, RoPE already applied to q and k).

Both also count the time spent in attend() (``times``: seconds by part).
"""
from __future__ import annotations

import time

import numpy as np
import torch

import kvpool


class KvpoolCache:
    """K/V in a kvpool pool: one kvpool.Sequence per engine sequence,
    K/V written and attention run by kvpoold on the pool's blocks.

    Prefill of sequence i: Sequence.append(ntok), then per layer
    Sequence.write_kv (the new tokens' K/V) and kvpool.attention (causal,
    the new tokens' queries).  Decode: every sequence grows by one; per
    layer one Layout.write_kv for the whole batch (block and slot of each
    sequence's new position from its block table) and one kvpool.decode.
    Tensors go to the binding as numpy views (torch.Tensor.numpy()): no
    copy on the Python side.
    """

    def __init__(self, ctx: kvpool.Context, cfg, nseq: int,
                 dtype: str = "bf16"):
        self.ctx = ctx
        self.cfg = cfg
        self.layout = ctx.declare_layout(cfg.num_hidden_layers,
                                         cfg.num_key_value_heads,
                                         cfg.head_dim, dtype, cfg.rope_theta)
        self.seqs = [self.layout.sequence() for _ in range(nseq)]
        self.scale = cfg.scale
        self.times = {"write_kv": 0.0, "attention": 0.0}
        self.calls = 0
        self._mode = None

    def close(self) -> None:
        for s in self.seqs:
            s.free()

    def lengths(self) -> list[int]:
        return [len(s) for s in self.seqs]

    def begin_prefill(self, i: int, ntok: int) -> torch.Tensor:
        s = self.seqs[i]
        start = len(s)
        s.append(ntok)
        self._mode = ("prefill", s, start)
        return torch.arange(start, start + ntok)

    def begin_decode(self) -> torch.Tensor:
        tpb = self.layout.tokens_per_block
        pos = np.empty(len(self.seqs), np.int64)
        blocks = np.empty(len(self.seqs), np.uint32)
        for j, s in enumerate(self.seqs):
            p = len(s)
            s.append(1)
            pos[j] = p
            blocks[j] = s.block_table[p // tpb]
        self._mode = ("decode", blocks, (pos % tpb).astype(np.uint32))
        return torch.from_numpy(pos)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(q)
        qn, kn, vn, on = q.numpy(), k.numpy(), v.numpy(), out.numpy()
        t0 = time.perf_counter()
        if self._mode[0] == "prefill":
            _, s, start = self._mode
            s.write_kv(layer, start, kn, vn)
            t1 = time.perf_counter()
            kvpool.attention([s], layer, qn[None], scale=self.scale,
                             out=on[None])
        else:
            _, blocks, slots = self._mode
            self.layout.write_kv(layer, blocks, slots, kn, vn)
            t1 = time.perf_counter()
            kvpool.decode(self.seqs, layer, qn, scale=self.scale, out=on)
        t2 = time.perf_counter()
        self.times["write_kv"] += t1 - t0
        self.times["attention"] += t2 - t1
        self.calls += 2
        return out


def round_kv(x: torch.Tensor, kv: str) -> torch.Tensor:
    """What the dense reference stores: "bf16" rounds each element to the
    nearest BF16 (ties to even, as kvpool's BF16 cache does), "fp32"
    keeps it."""
    if kv == "bf16":
        return x.to(torch.bfloat16).to(torch.float32)
    if kv == "fp32":
        return x
    raise ValueError(f"dense cache kv {kv!r}: bf16 or fp32")


class DenseCache:
    """PyTorch's own attention over a preallocated cache per layer, K and
    V [nseq][kv_heads][max_len][head_dim] FP32 (holding BF16-rounded
    values when kv="bf16").  Attention: scores = (q . K^T) * scale,
    masked causally, softmax and the product with V, all FP32
    (torch.matmul, torch.softmax); GQA by viewing the q heads of a kv
    head as one group ([kv_heads][q_heads/kv_heads]).  Decode batches all
    sequences in one matmul, masking positions beyond each sequence's
    length."""

    def __init__(self, cfg, nseq: int, max_len: int, kv: str = "bf16"):
        self.cfg = cfg
        self.kv = kv
        shape = (nseq, cfg.num_key_value_heads, max_len, cfg.head_dim)
        self.K = [torch.zeros(shape) for _ in range(cfg.num_hidden_layers)]
        self.V = [torch.zeros(shape) for _ in range(cfg.num_hidden_layers)]
        self.len = [0] * nseq
        self.max_len = max_len
        self.scale = cfg.scale
        self.group = cfg.num_attention_heads // cfg.num_key_value_heads
        self.times = {"write_kv": 0.0, "attention": 0.0}
        self.calls = 0
        self._mode = None

    def close(self) -> None:
        pass

    def lengths(self) -> list[int]:
        return list(self.len)

    def begin_prefill(self, i: int, ntok: int) -> torch.Tensor:
        start = self.len[i]
        if start + ntok > self.max_len:
            raise ValueError("dense cache full")
        self.len[i] += ntok
        self._mode = ("prefill", i, start, ntok)
        return torch.arange(start, start + ntok)

    def begin_decode(self) -> torch.Tensor:
        pos = torch.tensor(self.len, dtype=torch.int64)
        if int(pos.max()) + 1 > self.max_len:
            raise ValueError("dense cache full")
        self.len = [n + 1 for n in self.len]
        self._mode = ("decode", pos)
        return pos

    @torch.inference_mode()
    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        kvh, g, hd = c.num_key_value_heads, self.group, c.head_dim
        K, V = self.K[layer], self.V[layer]
        t0 = time.perf_counter()
        if self._mode[0] == "prefill":
            _, i, start, n = self._mode
            end = start + n
            K[i, :, start:end] = round_kv(k, self.kv).transpose(0, 1)
            V[i, :, start:end] = round_kv(v, self.kv).transpose(0, 1)
            t1 = time.perf_counter()
            qg = q.view(n, kvh, g, hd).permute(1, 2, 0, 3)  # [kvh][g][n][hd]
            s = torch.matmul(qg, K[i, :, None, :end].transpose(-1, -2))
            s = s * self.scale                               # [kvh][g][n][t]
            qpos = torch.arange(start, end)[:, None]
            s = s.masked_fill(torch.arange(end)[None, :] > qpos, -torch.inf)
            o = torch.matmul(torch.softmax(s, dim=-1), V[i, :, None, :end])
            out = o.permute(2, 0, 1, 3).reshape(n, kvh * g, hd)
        else:
            _, pos = self._mode
            b = torch.arange(len(pos))
            K[b, :, pos] = round_kv(k, self.kv)
            V[b, :, pos] = round_kv(v, self.kv)
            t1 = time.perf_counter()
            end = int(pos.max()) + 1
            nb = len(pos)
            qg = q.view(nb, kvh, g, hd)
            s = torch.matmul(qg, K[:, :, :end].transpose(-1, -2))
            s = s * self.scale                               # [b][kvh][g][t]
            mask = torch.arange(end)[None, :] > pos[:, None]
            s = s.masked_fill(mask[:, None, None, :], -torch.inf)
            o = torch.matmul(torch.softmax(s, dim=-1), V[:, :, :end])
            out = o.reshape(nb, kvh * g, hd)
        t2 = time.perf_counter()
        self.times["write_kv"] += t1 - t0
        self.times["attention"] += t2 - t1
        self.calls += 2
        return out
