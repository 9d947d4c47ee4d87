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

    def rewind(self, length: int) -> None:
        """Every sequence back to its first length positions."""
        for s in self.seqs:
            s.truncate(length)

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
    length.

    store="bf16" keeps K and V as torch.bfloat16 tensors instead (the
    bytes kvpool's BF16 cache holds, half of FP32's) and computes as
    PyTorch engines do in BF16 (Hugging Face's eager Llama attention):
    q cast to BF16, the scores and the product with V as BF16 matmuls,
    the softmax in FP32 and its weights cast back to BF16 (the K slice is
    copied to a contiguous tensor first, which keeps the BF16 matmul on
    its fast path); the output is returned as FP32.  Its results differ from the FP32 path by BF16
    rounding of q, the scores and the weights (a reference for speed, not
    for the tests' exact comparisons)."""

    def __init__(self, cfg, nseq: int, max_len: int, kv: str = "bf16",
                 store: str = "fp32"):
        if store not in ("fp32", "bf16"):
            raise ValueError(f"dense cache store {store!r}: fp32 or bf16")
        if store == "bf16" and kv != "bf16":
            raise ValueError("a BF16 store holds BF16-rounded K/V only")
        self.cfg = cfg
        self.kv = kv
        self.store = store
        dt = torch.bfloat16 if store == "bf16" else torch.float32
        self.dt = dt
        shape = (nseq, cfg.num_key_value_heads, max_len, cfg.head_dim)
        self.K = [torch.zeros(shape, dtype=dt)
                  for _ in range(cfg.num_hidden_layers)]
        self.V = [torch.zeros(shape, dtype=dt)
                  for _ in range(cfg.num_hidden_layers)]
        self.len = [0] * nseq
        self.max_len = max_len
        self.scale = cfg.scale
        self.group = cfg.num_attention_heads // cfg.num_key_value_heads
        self.times = {"write_kv": 0.0, "attention": 0.0}
        self.calls = 0
        self._mode = None

    def close(self) -> None:
        pass

    def rewind(self, length: int) -> None:
        """Every sequence back to its first length positions."""
        self.len = [min(n, length) for n in self.len]

    def _kv(self, x: torch.Tensor) -> torch.Tensor:
        """x as this cache stores it."""
        if self.store == "bf16":
            return x.to(torch.bfloat16)
        return round_kv(x, self.kv)

    def _attend(self, qg, Kc, Vc, mask) -> torch.Tensor:
        """softmax(scale * qg . Kc^T, masked) . Vc, in the store's way."""
        if self.store == "bf16":
            # contiguous first: PyTorch's BF16 matmul over a transposed
            # slice of the cache takes a generic path, 10-20x slower
            s = torch.matmul(qg.to(torch.bfloat16),
                             Kc.contiguous().transpose(-1, -2))
            s = s * self.scale
            s = s.masked_fill(mask, -torch.inf)
            p = torch.softmax(s, dim=-1, dtype=torch.float32)
            return torch.matmul(p.to(torch.bfloat16), Vc).float()
        s = torch.matmul(qg, Kc.transpose(-1, -2))
        s = s * self.scale
        s = s.masked_fill(mask, -torch.inf)
        return torch.matmul(torch.softmax(s, dim=-1), Vc)

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
            K[i, :, start:end] = self._kv(k).transpose(0, 1)
            V[i, :, start:end] = self._kv(v).transpose(0, 1)
            t1 = time.perf_counter()
            qg = q.view(n, kvh, g, hd).permute(1, 2, 0, 3)  # [kvh][g][n][hd]
            qpos = torch.arange(start, end)[:, None]         # scores:
            mask = torch.arange(end)[None, :] > qpos         # [kvh][g][n][t]
            o = self._attend(qg, K[i, :, None, :end], V[i, :, None, :end],
                             mask)
            out = o.permute(2, 0, 1, 3).reshape(n, kvh * g, hd)
        else:
            _, pos = self._mode
            b = torch.arange(len(pos))
            K[b, :, pos] = self._kv(k)
            V[b, :, pos] = self._kv(v)
            t1 = time.perf_counter()
            end = int(pos.max()) + 1
            nb = len(pos)
            qg = q.view(nb, kvh, g, hd)                      # scores:
            mask = torch.arange(end)[None, :] > pos[:, None]  # [b][kvh][g][t]
            o = self._attend(qg, K[:, :, :end], V[:, :, :end],
                             mask[:, None, None, :])
            out = o.reshape(nb, kvh * g, hd)
        t2 = time.perf_counter()
        self.times["write_kv"] += t1 - t0
        self.times["attention"] += t2 - t1
        self.calls += 2
        return out
