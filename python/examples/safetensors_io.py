# SPDX-License-Identifier: MIT
"""Reading and writing safetensors files with the standard library and
numpy (no extra package).

The format (https://github.com/huggingface/safetensors, "Format"): an
unsigned little-endian 64-bit header size N, N bytes of UTF-8 JSON, then
the data.  The JSON maps each tensor name to ``{"dtype", "shape",
"data_offsets": [begin, end]}`` (offsets relative to the end of the
header, tensors packed in order, row-major, little-endian), plus an
optional ``"__metadata__"`` of string to string.

load() maps the file and returns torch tensors that view it (read-only
memory: copy before writing into them), or numpy arrays with
``as_numpy=True``; BF16 and FP8 data come back as torch tensors of those
types (numpy has neither: with as_numpy they are raw uint16/uint8).  A
torch without FP8 types (before 2.1) gets FP8 data as FP32 tensors of
the same values (fp8_to_f32: every FP8 value is exact in FP32).
"""
from __future__ import annotations

import json
import mmap
import struct

import numpy as np

# safetensors dtype -> (numpy dtype of the stored bits, torch dtype name)
DTYPES = {
    "F64": ("<f8", "float64"), "F32": ("<f4", "float32"),
    "F16": ("<f2", "float16"), "BF16": ("<u2", "bfloat16"),
    "I64": ("<i8", "int64"), "I32": ("<i4", "int32"),
    "I16": ("<i2", "int16"), "I8": ("i1", "int8"), "U8": ("u1", "uint8"),
    "BOOL": ("?", "bool"), "F8_E4M3": ("u1", "float8_e4m3fn"),
    "F8_E5M2": ("u1", "float8_e5m2"),
}

MAX_HEADER = 100 << 20


def _fp8_table(exp_bits: int, bias: int, ieee: bool) -> np.ndarray:
    """The FP32 value of each of the 256 FP8 codes (OCP 8-bit floating
    point: E4M3 without infinities, S.1111.111 the only NaN; E5M2 with
    IEEE 754's infinities and NaNs); subnormals where the exponent field
    is 0."""
    man_bits = 7 - exp_bits
    top = (1 << exp_bits) - 1
    out = np.empty(256, dtype=np.float32)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> man_bits) & top, b & ((1 << man_bits) - 1)
        if ieee and e == top:
            v = float("inf") if m == 0 else float("nan")
        elif not ieee and e == top and m == (1 << man_bits) - 1:
            v = float("nan")
        elif e == 0:
            v = m / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            v = (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
        out[b] = sign * v
    return out


FP8_TABLES = {"F8_E4M3": _fp8_table(4, 7, False),
              "F8_E5M2": _fp8_table(5, 15, True)}


def fp8_to_f32(bits: np.ndarray, dtype: str) -> np.ndarray:
    """FP8 codes (uint8, any shape) of dtype F8_E4M3 or F8_E5M2 as FP32."""
    return FP8_TABLES[dtype][bits]


class SafetensorsError(ValueError):
    pass


def read_header(buf) -> tuple[dict, dict, int]:
    """(tensors, metadata, data_start) of the file contents buf."""
    if len(buf) < 8:
        raise SafetensorsError("file shorter than its 8-byte header size")
    (n,) = struct.unpack_from("<Q", buf, 0)
    if n > MAX_HEADER or 8 + n > len(buf):
        raise SafetensorsError(f"header size {n} beyond the file "
                               f"({len(buf)} bytes)")
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError("header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    start = 8 + n
    size = len(buf) - start
    spans = []
    for name, t in header.items():
        try:
            dtype, shape = t["dtype"], t["shape"]
            begin, end = t["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise SafetensorsError(f"{name}: needs dtype, shape and "
                                   "data_offsets") from None
        if dtype not in DTYPES:
            raise SafetensorsError(f"{name}: unknown dtype {dtype}")
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise SafetensorsError(f"{name}: bad shape {shape}")
        want = int(np.prod(shape, dtype=np.int64)) * \
            np.dtype(DTYPES[dtype][0]).itemsize
        if not (0 <= begin <= end <= size) or end - begin != want:
            raise SafetensorsError(f"{name}: data_offsets {begin}..{end} "
                                   f"do not hold {shape} {dtype} within "
                                   f"{size} bytes of data")
        spans.append((begin, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise SafetensorsError(f"{n0} and {n1} overlap")
    return header, meta, start


def load(path: str, as_numpy: bool = False) -> tuple[dict, dict]:
    """(tensors by name, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:              # empty file
            buf = b""
    header, meta, start = read_header(buf)
    out = {}
    for name, t in header.items():
        np_dtype, torch_name = DTYPES[t["dtype"]]
        begin, end = t["data_offsets"]
        arr = np.frombuffer(buf, dtype=np_dtype, count=(end - begin) //
                            np.dtype(np_dtype).itemsize,
                            offset=start + begin).reshape(t["shape"])
        out[name] = arr if as_numpy else _to_torch(arr, torch_name,
                                                   t["dtype"])
    return out, meta


def _to_torch(arr: np.ndarray, torch_name: str, dtype: str):
    import torch
    import warnings
    with warnings.catch_warnings():     # read-only mmap: torch warns
        warnings.simplefilter("ignore", UserWarning)
        if torch_name == "bfloat16":
            return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        if torch_name.startswith("float8"):
            if not hasattr(torch, torch_name):
                return torch.from_numpy(fp8_to_f32(arr, dtype))
            return torch.from_numpy(arr.view(np.int8)).view(
                getattr(torch, torch_name))
        return torch.from_numpy(arr)


def save(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Write tensors (torch tensors or numpy arrays) by name; metadata:
    str -> str."""
    import torch
    blobs, header, off = [], {}, 0
    rev = {v[1]: k for k, v in DTYPES.items()}
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu().contiguous()
            kind = str(t.dtype).replace("torch.", "")
            if kind not in rev:
                raise SafetensorsError(f"{name}: dtype {kind} not "
                                       "supported")
            if kind == "bfloat16":
                data = t.view(torch.int16).numpy().tobytes()
            elif kind.startswith("float8"):     # numpy has no FP8
                data = t.view(torch.uint8).numpy().tobytes()
            else:
                data = t.numpy().astype(DTYPES[rev[kind]][0]).tobytes()
            shape = list(t.shape)
        else:
            a = np.ascontiguousarray(t)
            kind = a.dtype.name
            if kind not in rev:
                raise SafetensorsError(f"{name}: dtype {kind} not "
                                       "supported")
            data = a.astype(DTYPES[rev[kind]][0]).tobytes()
            shape = list(a.shape)
        header[name] = {"dtype": rev[kind], "shape": shape,
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in
                                  metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)         # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
