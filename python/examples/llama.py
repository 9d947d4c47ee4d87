# SPDX-License-Identifier: MIT
"""A small Llama-architecture decoder in PyTorch: token embedding, then
per layer RMSNorm -> attention with rotary position embedding (RoPE) and
grouped-query attention (GQA) -> residual, RMSNorm -> SwiGLU MLP ->
residual; a final RMSNorm and the LM head.  Tensor names, shapes and the
RoPE convention (rotate-half, as Hugging Face's LlamaForCausalLM) are
those of Llama checkpoints, so a Llama safetensors file loads as is:
one file, or a sharded checkpoint (``model.safetensors.index.json`` and
its shards); Llama 3.1's ``rope_scaling`` (``rope_type: llama3``) is
applied to the rotary frequencies, and any other scaling is refused.

The model does not keep K/V itself: each layer hands its rotated q, k
and v to a cache object (kvcache.py), which stores K/V and returns the
attention output.  Everything is FP32; the cache decides how K/V are
stored (kvpool: BF16/FP8/INT8/INT4 in the pool).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Optional

import torch
import torch.nn.functional as F

import safetensors_io


@dataclass
class LlamaConfig:
    vocab_size: int = 512
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 512
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    # Hugging Face's rope_scaling: None, or {"rope_type": "llama3",
    # "factor", "low_freq_factor", "high_freq_factor",
    # "original_max_position_embeddings"} (Llama 3.1 and later)
    rope_scaling: Optional[dict] = None

    def __post_init__(self):
        self.rope_scaling = check_rope_scaling(self.rope_scaling)

    @classmethod
    def from_hf(cls, d: dict) -> "LlamaConfig":
        """From a Hugging Face config.json dict (LlamaConfig keys)."""
        heads = d["num_attention_heads"]
        return cls(
            vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
            num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            intermediate_size=d["intermediate_size"],
            rope_theta=float(d.get("rope_theta", 10000.0)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-5)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            rope_scaling=d.get("rope_scaling"))

    @property
    def scale(self) -> float:
        """Softmax scale 1/sqrt(head_dim) as an FP32 value (both caches
        use this same number)."""
        return float(torch.tensor(1.0 / math.sqrt(self.head_dim),
                                  dtype=torch.float32))


LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings")


def check_rope_scaling(rs) -> Optional[dict]:
    """rope_scaling of a config, normalised: None (no scaling, also for
    rope_type "default") or the llama3 dict with its four numbers.  Any
    other kind (linear, dynamic, yarn, longrope, ...) raises ValueError:
    computing positions without it would be silently wrong."""
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise ValueError(f"rope_scaling {rs!r} is not an object")
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise ValueError(f"rope_scaling of type {kind!r} is not "
                         "supported (only llama3)")
    missing = [k for k in LLAMA3_KEYS if k not in rs]
    if missing:
        raise ValueError(f"rope_scaling llama3 lacks {', '.join(missing)}")
    out = {"rope_type": "llama3"}
    for k in LLAMA3_KEYS:
        v = rs[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                not v > 0:
            raise ValueError(f"rope_scaling {k} {v!r} is not a positive "
                             "number")
        out[k] = v
    if not out["high_freq_factor"] > out["low_freq_factor"]:
        raise ValueError("rope_scaling high_freq_factor must exceed "
                         "low_freq_factor")
    return out


def rope_inv_freq(cfg: LlamaConfig) -> torch.Tensor:
    """The rotary inverse frequencies [head_dim / 2], FP32: theta^(-2i/d),
    then with llama3 scaling (Llama 3.1's apply_scaling): a frequency
    whose wavelength 2 pi / f is shorter than original_max_position_
    embeddings / high_freq_factor is kept, one longer than
    original_max_position_embeddings / low_freq_factor is divided by
    factor, and in between it is interpolated: with s = (original /
    wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor),
    (1 - s) f / factor + s f."""
    c = cfg
    inv = 1.0 / (c.rope_theta ** (
        torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
    rs = c.rope_scaling
    if rs is None:
        return inv
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], \
        rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / lo, inv / factor, inv)
    s = (old / wavelen - lo) / (hi - lo)
    smooth = (1 - s) * scaled / factor + s * scaled
    medium = (wavelen >= old / hi) & (wavelen <= old / lo)
    return torch.where(medium, smooth, scaled).to(torch.float32)


def weight_names(cfg: LlamaConfig) -> dict:
    """name -> shape of every tensor of the model."""
    h, qd = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim
    kvd, inter = cfg.num_key_value_heads * cfg.head_dim, cfg.intermediate_size
    out = {"model.embed_tokens.weight": (cfg.vocab_size, h),
           "model.norm.weight": (h,)}
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, h)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (qd, h),
            p + "self_attn.k_proj.weight": (kvd, h),
            p + "self_attn.v_proj.weight": (kvd, h),
            p + "self_attn.o_proj.weight": (h, qd),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (inter, h),
            p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        })
    return out


def random_weights(cfg: LlamaConfig, seed: int = 0) -> dict:
    """Seeded random weights: projections N(0, 1/fan_in), the two that
    write into the residual stream (o_proj, down_proj) scaled by
    1/sqrt(2 * layers) as in GPT-2's initialisation (without it the
    random network is chaotic: a 1e-6 change of one attention output
    grows to 1e-3 in the logits), norms around 1, embeddings N(0, 1) and
    an LM head giving logits of standard deviation about 4 (a peaked
    next-token distribution, as trained models have)."""
    resid = 1.0 / math.sqrt(2 * cfg.num_hidden_layers)
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in weight_names(cfg).items():
        if len(shape) == 1:
            w[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif name == "model.embed_tokens.weight":
            w[name] = torch.randn(shape, generator=g)
        elif name == "lm_head.weight":
            w[name] = torch.randn(shape, generator=g) * (4.0 /
                                                         math.sqrt(shape[1]))
        else:
            w[name] = torch.randn(shape, generator=g) / math.sqrt(shape[1])
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                w[name] *= resid
    return w


CONFIG_KEY = "llama_config"


def save(path: str, cfg: LlamaConfig, weights: dict,
         dtype: torch.dtype = torch.float32) -> None:
    """Weights to a safetensors file (config in its metadata, HF keys)."""
    safetensors_io.save(path, {k: v.to(dtype) for k, v in weights.items()},
                        {CONFIG_KEY: json.dumps(asdict(cfg))})


INDEX_SUFFIX = ".index.json"


def load_sharded(index: str) -> tuple[dict, dict]:
    """(tensors by name, metadata of the first shard) of a sharded
    checkpoint: the index's "weight_map" names the shard file (beside the
    index) of every tensor; each tensor must be in the shard it names."""
    try:
        with open(index) as f:
            wm = json.load(f)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{index}: not a checkpoint index with a "
                         f"weight_map ({e})") from None
    if not isinstance(wm, dict) or not wm:
        raise ValueError(f"{index}: empty weight_map")
    d = os.path.dirname(os.path.abspath(index))
    shards, tensors, meta = {}, {}, None
    for name, shard in wm.items():
        if not isinstance(shard, str) or os.path.basename(shard) != shard:
            raise ValueError(f"{index}: {name}: shard {shard!r} is not a "
                             "file name beside the index")
        if shard not in shards:
            p = os.path.join(d, shard)
            if not os.path.exists(p):
                raise ValueError(f"{index}: {name}: no shard {p}")
            shards[shard] = safetensors_io.load(p)
            if meta is None:
                meta = shards[shard][1]
        t = shards[shard][0]
        if name not in t:
            raise ValueError(f"{index}: {name} is not in {shard}, where "
                             "the weight_map puts it")
        tensors[name] = t[name]
    return tensors, meta or {}


def load(path: str) -> tuple[LlamaConfig, dict]:
    """(config, FP32 weights) of a checkpoint: a safetensors file, a
    sharded checkpoint's *.index.json, or a directory holding
    model.safetensors or model.safetensors.index.json.  The config is the
    file's own metadata when it has one, else config.json beside it (a
    Hugging Face checkpoint)."""
    if os.path.isdir(path):
        for n in ("model.safetensors", "model.safetensors" + INDEX_SUFFIX):
            if os.path.exists(os.path.join(path, n)):
                path = os.path.join(path, n)
                break
        else:
            raise ValueError(f"{path}: no model.safetensors or model."
                             f"safetensors{INDEX_SUFFIX} in the directory")
    if path.endswith(INDEX_SUFFIX):
        tensors, meta = load_sharded(path)
    else:
        tensors, meta = safetensors_io.load(path)
    if CONFIG_KEY in meta:
        cfg = LlamaConfig(**json.loads(meta[CONFIG_KEY]))
    else:
        cj = os.path.join(os.path.dirname(os.path.abspath(path)),
                          "config.json")
        if not os.path.exists(cj):
            raise ValueError(f"{path}: no {CONFIG_KEY} metadata and no "
                             f"{cj}")
        with open(cj) as f:
            cfg = LlamaConfig.from_hf(json.load(f))
        if "lm_head.weight" not in tensors:
            cfg.tie_word_embeddings = True
    want = weight_names(cfg)
    for name, shape in want.items():
        if name not in tensors:
            idx = [n for n in os.listdir(os.path.dirname(
                os.path.abspath(path))) if n.endswith(INDEX_SUFFIX)]
            hint = f" (one shard of a sharded checkpoint? load {idx[0]})" \
                if idx and not path.endswith(INDEX_SUFFIX) else ""
            raise ValueError(f"{path}: no tensor {name}{hint}")
        if tuple(tensors[name].shape) != shape:
            raise ValueError(f"{path}: {name} is {tuple(tensors[name].shape)}"
                             f", the config says {shape}")
    return cfg, {k: tensors[k].to(torch.float32) for k in want}


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """x [n][heads][head_dim] rotated by position: rotate-half style (pairs
    (i, i + head_dim/2)), cos/sin [n][1][head_dim]."""
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


class Llama:
    """The decoder.  forward(tokens, positions, cache) -> logits: tokens and
    positions [n] (rows of one sequence in prefill, or one row per
    sequence in decode); the cache knows which."""

    def __init__(self, cfg: LlamaConfig, weights: dict):
        self.cfg = cfg
        self.w = weights
        c = cfg
        self.inv_freq = rope_inv_freq(c)
        self.layers = []
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            self.layers.append({k: weights[p + n] for k, n in (
                ("attn_norm", "input_layernorm.weight"),
                ("wq", "self_attn.q_proj.weight"),
                ("wk", "self_attn.k_proj.weight"),
                ("wv", "self_attn.v_proj.weight"),
                ("wo", "self_attn.o_proj.weight"),
                ("mlp_norm", "post_attention_layernorm.weight"),
                ("wg", "mlp.gate_proj.weight"),
                ("wu", "mlp.up_proj.weight"),
                ("wd", "mlp.down_proj.weight"))})
        self.embed = weights["model.embed_tokens.weight"]
        self.norm = weights["model.norm.weight"]
        self.lm_head = weights.get("lm_head.weight", self.embed)

    def rope_tables(self, positions: torch.Tensor):
        f = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((f, f), dim=-1)[:, None, :]
        return emb.cos(), emb.sin()

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor,
                cache) -> torch.Tensor:
        c = self.cfg
        n = tokens.shape[0]
        cos, sin = self.rope_tables(positions)
        x = self.embed[tokens]
        for i, L in enumerate(self.layers):
            h = rms_norm(x, L["attn_norm"], c.rms_norm_eps)
            q = F.linear(h, L["wq"]).view(n, c.num_attention_heads,
                                          c.head_dim)
            k = F.linear(h, L["wk"]).view(n, c.num_key_value_heads,
                                          c.head_dim)
            v = F.linear(h, L["wv"]).view(n, c.num_key_value_heads,
                                          c.head_dim)
            q = rope(q, cos, sin)
            k = rope(k, cos, sin)
            a = cache.attend(i, q, k, v.contiguous())
            x = x + F.linear(a.reshape(n, -1), L["wo"])
            h = rms_norm(x, L["mlp_norm"], c.rms_norm_eps)
            x = x + F.linear(F.silu(F.linear(h, L["wg"])) *
                             F.linear(h, L["wu"]), L["wd"])
        return F.linear(rms_norm(x, self.norm, c.rms_norm_eps), self.lm_head)
