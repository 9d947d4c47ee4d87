# SPDX-License-Identifier: MIT
"""safetensors_io (stdlib + numpy) and llama.load: a file written byte by
byte from the format's specification, round trips, every dtype, Hugging
Face checkpoints (config.json beside the file, tied embeddings, sharded
checkpoints, Llama 3.1's rope_scaling), and clear errors for malformed
files."""
import json
import math
import struct

import numpy as np
import pytest
import torch

import engine
import kvcache
import llama
import safetensors_io as st


# A file spelled out from the specification (huggingface/safetensors,
# "Format"), not by save(): 8 bytes of little-endian header size, the JSON
# header (padded with spaces to 8 bytes), then each tensor's raw
# little-endian data at its data_offsets from the end of the header.
SPEC_HEADER = (b'{"__metadata__":{"format":"pt"},'
               b'"w.bf16":{"dtype":"BF16","shape":[2,3],'
               b'"data_offsets":[0,12]},'
               b'"w.fp8":{"dtype":"F8_E4M3","shape":[6],'
               b'"data_offsets":[12,18]}}   ')
SPEC_FILE = (
    b"\xa0\x00\x00\x00\x00\x00\x00\x00"      # header size 160
    + SPEC_HEADER +
    # w.bf16 [2][3]: sign, 8 exponent bits (bias 127), 7 mantissa bits
    b"\x80\x3f"        # 0x3f80  1.0
    b"\x00\xc0"        # 0xc000 -2.0
    b"\x00\x3f"        # 0x3f00  0.5
    b"\x49\x40"        # 0x4049  3.140625 (1.5703125 * 2)
    b"\xc0\xbf"        # 0xbfc0 -1.5
    b"\x80\x47"        # 0x4780  65536.0 (exponent 143 = 127 + 16)
    # w.fp8 [6], E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits
    b"\x38"            # 0 0111 000  1.0
    b"\xbc"            # 1 0111 100 -1.5
    b"\x7e"            # 0 1111 110  448.0, the largest (1.75 * 2^8)
    b"\x01"            # 0 0000 001  2^-9, the smallest subnormal
    b"\x30"            # 0 0110 000  0.5
    b"\x45")           # 0 1000 101  3.25 (1.625 * 2)
SPEC_BF16 = [[1.0, -2.0, 0.5], [3.140625, -1.5, 65536.0]]
SPEC_FP8 = [1.0, -1.5, 448.0, 2.0 ** -9, 0.5, 3.25]


def test_file_from_the_specification(tmp_path):
    assert len(SPEC_HEADER) == 160 and len(SPEC_FILE) == 8 + 160 + 18
    p = tmp_path / "spec.safetensors"
    p.write_bytes(SPEC_FILE)
    got, meta = st.load(str(p))
    assert meta == {"format": "pt"} and set(got) == {"w.bf16", "w.fp8"}
    assert got["w.bf16"].dtype == torch.bfloat16
    assert got["w.bf16"].float().tolist() == SPEC_BF16
    # FP8 as torch's float8_e4m3fn where torch has it, else FP32
    assert got["w.fp8"].shape == (6,)
    assert got["w.fp8"].float().tolist() == SPEC_FP8
    raw, _ = st.load(str(p), as_numpy=True)
    assert raw["w.bf16"].tolist() == [[0x3f80, 0xc000, 0x3f00],
                                      [0x4049, 0xbfc0, 0x4780]]
    assert raw["w.fp8"].tolist() == [0x38, 0xbc, 0x7e, 0x01, 0x30, 0x45]
    # and save() writes those same data bytes where its header says
    fp8 = getattr(torch, "float8_e4m3fn", None)
    q = str(tmp_path / "mine.safetensors")
    st.save(q, {"w.bf16": torch.tensor(SPEC_BF16, dtype=torch.bfloat16),
                "w.fp8": (torch.tensor(SPEC_FP8).to(fp8) if fp8 else
                          raw["w.fp8"])})
    data = SPEC_FILE[8 + 160:]
    with open(q, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        mine = f.read()
    b, e = header["w.bf16"]["data_offsets"]
    assert header["w.bf16"]["dtype"] == "BF16" and mine[b:e] == data[:12]
    b, e = header["w.fp8"]["data_offsets"]
    assert mine[b:e] == data[12:]


def test_fp8_codes():
    """Every E4M3 and E5M2 code against the OCP definitions' special
    values."""
    e4 = st.fp8_to_f32(np.arange(256, dtype=np.uint8), "F8_E4M3")
    assert e4[0x00] == 0 and e4[0x80] == 0 and math.copysign(1, e4[0x80]) < 0
    assert e4[0x07] == 7 * 2.0 ** -9 and e4[0x08] == 2.0 ** -6
    assert np.isnan(e4[0x7f]) and np.isnan(e4[0xff])
    assert np.isnan(e4).sum() == 2 and np.isfinite(e4).sum() == 254
    assert e4[0x7e] == 448 and e4[0xfe] == -448
    e5 = st.fp8_to_f32(np.arange(256, dtype=np.uint8), "F8_E5M2")
    assert e5[0x3c] == 1.0 and e5[0x7b] == 57344.0 and e5[0x01] == 2.0 ** -16
    assert e5[0x7c] == math.inf and e5[0xfc] == -math.inf
    assert np.isnan(e5[[0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff]]).all()
    assert np.isnan(e5).sum() == 6
    if hasattr(torch, "float8_e4m3fn"):
        codes = torch.arange(256, dtype=torch.uint8)
        for name, tab in (("float8_e4m3fn", e4), ("float8_e5m2", e5)):
            ref = codes.view(getattr(torch, name)).float().numpy()
            assert np.array_equal(ref, tab, equal_nan=True), name


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


def write_hf_config(d, **kw):
    c = {"architectures": ["LlamaForCausalLM"], "vocab_size": 96,
         "hidden_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 192, "rope_theta": 10000.0,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    c.update(kw)
    (d / "config.json").write_text(json.dumps(c))


def test_sharded_checkpoint(tmp_path):
    cfg = small_cfg()
    w = llama.random_weights(cfg, 5)
    names = sorted(w)
    first = [n for n in names if n.startswith("model.layers.0.")]
    shards = {"model-00001-of-00002.safetensors": first,
              "model-00002-of-00002.safetensors":
              [n for n in names if n not in first]}
    wmap = {}
    for f, ns in shards.items():
        st.save(str(tmp_path / f), {n: w[n] for n in ns})
        wmap.update({n: f for n in ns})
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0},
                                 "weight_map": wmap}))
    write_hf_config(tmp_path)
    for path in (index, tmp_path):
        cfg2, w2 = llama.load(str(path))
        assert cfg2 == cfg and set(w2) == set(w)
        assert all(torch.equal(w2[k], w[k]) for k in w)
    # one shard alone: the missing tensors are named, with the index
    with pytest.raises(ValueError, match="sharded checkpoint.*index.json"):
        llama.load(str(tmp_path / "model-00002-of-00002.safetensors"))
    # a weight_map that puts a tensor in the wrong shard, or in none
    bad = dict(wmap, **{"model.norm.weight": "model-00001-of-00002."
                        "safetensors"})
    index.write_text(json.dumps({"weight_map": bad}))
    with pytest.raises(ValueError, match="model.norm.weight is not in "
                       "model-00001"):
        llama.load(str(index))
    bad = dict(wmap, **{"model.norm.weight": "model-00003-of-00002."
                        "safetensors"})
    index.write_text(json.dumps({"weight_map": bad}))
    with pytest.raises(ValueError, match="no shard"):
        llama.load(str(index))
    bad = dict(wmap, **{"model.norm.weight": "../x.safetensors"})
    index.write_text(json.dumps({"weight_map": bad}))
    with pytest.raises(ValueError, match="beside the index"):
        llama.load(str(index))
    index.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(ValueError, match="weight_map"):
        llama.load(str(index))


LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}


def test_llama3_rope_scaling():
    """head_dim 8, theta 10^4: frequencies 1, 0.1, 0.01, 0.001, wavelengths
    2 pi / f = 6.28, 62.8, 628.3, 6283.  With original 1024, low 1 and
    high 4, wavelengths under 1024 / 4 = 256 keep their frequency, those
    over 1024 / 1 are divided by the factor 8, and 628.3 is in between:
    s = (1024 / 628.3185 - 1) / (4 - 1) = 0.2099155, f = (1 - s) 0.01 / 8
    + s 0.01 = 0.0030867610."""
    cfg = llama.LlamaConfig(vocab_size=8, hidden_size=16,
                            num_hidden_layers=1, num_attention_heads=2,
                            num_key_value_heads=1, head_dim=8,
                            intermediate_size=8, rope_scaling=LLAMA31)
    want = [1.0, 0.1, 0.0030867610, 0.000125]
    got = llama.rope_inv_freq(cfg)
    assert got.dtype == torch.float32
    assert torch.allclose(got, torch.tensor(want), rtol=1e-6, atol=0)
    plain = llama.rope_inv_freq(llama.LlamaConfig(
        vocab_size=8, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        intermediate_size=8))
    assert torch.allclose(plain, torch.tensor([1.0, 0.1, 0.01, 0.001]),
                          rtol=1e-6, atol=0)
    # the model rotates by these: position 3000, pair 2 and pair 3
    m = llama.Llama(cfg, llama.random_weights(cfg, 0))
    cos, sin = m.rope_tables(torch.tensor([3000]))
    for i, f in enumerate(want):
        for j in (i, i + 4):            # rotate-half: pairs (i, i + 4)
            assert abs(cos[0, 0, j].item() - math.cos(3000 * f)) < 1e-3
            assert abs(sin[0, 0, j].item() - math.sin(3000 * f)) < 1e-3


def test_rope_scaling_from_config_json(tmp_path):
    cfg = small_cfg(rope_scaling=LLAMA31)
    w = llama.random_weights(cfg, 6)
    st.save(str(tmp_path / "model.safetensors"), w)
    write_hf_config(tmp_path, rope_scaling=LLAMA31, rope_theta=10000.0)
    cfg2, _ = llama.load(str(tmp_path / "model.safetensors"))
    assert cfg2 == cfg and cfg2.rope_scaling == LLAMA31
    assert torch.equal(llama.Llama(cfg2, w).inv_freq,
                       llama.rope_inv_freq(cfg))
    # its own metadata keeps the scaling too
    llama.save(str(tmp_path / "own.safetensors"), cfg, w)
    assert llama.load(str(tmp_path / "own.safetensors"))[0] == cfg
    # "default" is no scaling; what is not implemented is refused
    write_hf_config(tmp_path, rope_scaling={"rope_type": "default"})
    assert llama.load(str(tmp_path / "model.safetensors"))[0] \
        .rope_scaling is None
    for rs, msg in (({"type": "linear", "factor": 2.0}, "'linear' is not"),
                    ({"rope_type": "yarn", "factor": 4.0}, "'yarn' is not"),
                    ({"rope_type": "llama3", "factor": 8.0},
                     "lacks low_freq_factor"),
                    (dict(LLAMA31, factor=0), "factor 0 is not"),
                    (dict(LLAMA31, high_freq_factor=1.0), "must exceed")):
        write_hf_config(tmp_path, rope_scaling=rs)
        with pytest.raises(ValueError, match=msg):
            llama.load(str(tmp_path / "model.safetensors"))
