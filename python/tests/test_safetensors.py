# SPDX-License-Identifier: MIT
"""safetensors_io (stdlib + numpy) and llama.load: round trips, every
dtype, Hugging Face checkpoints (config.json beside the file, tied
embeddings), and clear errors for malformed files."""
import json
import struct

import numpy as np
import pytest
import torch

import engine
import kvcache
import llama
import safetensors_io as st


def test_round_trip_dtypes(tmp_path):
    g = torch.Generator().manual_seed(0)
    t = {"f32": torch.randn(3, 5, generator=g),
         "bf16": torch.randn(4, 2, generator=g).to(torch.bfloat16),
         "f16": torch.randn(7, generator=g).to(torch.float16),
         "i64": torch.arange(-3, 3),
         "u8": torch.arange(0, 200, 7, dtype=torch.uint8),
         "empty": torch.zeros(0, 4)}
    p = str(tmp_path / "t.safetensors")
    st.save(p, t, {"who": "test"})
    got, meta = st.load(p)
    assert meta == {"who": "test"} and set(got) == set(t)
    for k, v in t.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
    raw, _ = st.load(p, as_numpy=True)
    assert raw["bf16"].dtype == np.uint16
    # data begins 8-byte aligned, header says where each tensor is
    with open(p, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    assert (8 + n) % 8 == 0
    assert header["f32"] == {"dtype": "F32", "shape": [3, 5],
                             "data_offsets": header["f32"]["data_offsets"]}


def write_raw(path, header: dict, data: bytes):
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


@pytest.mark.parametrize("header,data,msg", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}},
     b"\0" * 8, "do not hold"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
     b"\0" * 4, "do not hold"),
    ({"a": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}},
     b"\0" * 8, "unknown dtype"),
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}},
     b"\0" * 8, "overlap"),
    ({"a": {"shape": [1]}}, b"", "needs dtype"),
])
def test_malformed(tmp_path, header, data, msg):
    p = str(tmp_path / "bad.safetensors")
    write_raw(p, header, data)
    with pytest.raises(st.SafetensorsError, match=msg):
        st.load(p)


def test_truncated_and_not_json(tmp_path):
    p = tmp_path / "x.safetensors"
    p.write_bytes(b"\x05\0\0")
    with pytest.raises(st.SafetensorsError, match="shorter"):
        st.load(str(p))
    p.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(st.SafetensorsError, match="beyond the file"):
        st.load(str(p))
    p.write_bytes(struct.pack("<Q", 3) + b"{x}")
    with pytest.raises(st.SafetensorsError, match="not JSON"):
        st.load(str(p))


def small_cfg(**kw):
    return llama.LlamaConfig(vocab_size=96, hidden_size=128,
                             num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=32,
                             intermediate_size=192, **kw)


def test_model_file_generates_like_seed(tmp_path):
    cfg = small_cfg()
    w = llama.random_weights(cfg, 3)
    p = str(tmp_path / "m.safetensors")
    llama.save(p, cfg, w)
    cfg2, w2 = llama.load(p)
    assert cfg2 == cfg and all(torch.equal(w[k], w2[k]) for k in w)
    prompts = engine.make_prompts(cfg, 2, 0, max_len=20)
    a = engine.generate(llama.Llama(cfg, w), kvcache.DenseCache(
        cfg, 2, 40), prompts, 6)
    b = engine.generate(llama.Llama(cfg2, w2), kvcache.DenseCache(
        cfg2, 2, 40), prompts, 6)
    assert a["tokens"] == b["tokens"]


def test_hf_checkpoint_with_config_json(tmp_path):
    cfg = small_cfg(tie_word_embeddings=True)
    w = llama.random_weights(cfg, 4)
    assert "lm_head.weight" not in w
    st.save(str(tmp_path / "model.safetensors"),
            {k: v.to(torch.bfloat16) for k, v in w.items()})
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 96,
        "hidden_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 192, "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": True}))
    cfg2, w2 = llama.load(str(tmp_path / "model.safetensors"))
    assert cfg2 == cfg
    for k in w:
        assert torch.equal(w2[k], w[k].to(torch.bfloat16).float()), k
    # a missing tensor or a wrong shape is named
    del w["model.norm.weight"]
    st.save(str(tmp_path / "model.safetensors"), w)
    with pytest.raises(ValueError, match="model.norm.weight"):
        llama.load(str(tmp_path / "model.safetensors"))
