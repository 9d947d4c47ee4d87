# SPDX-License-Identifier: MIT
"""The ctypes structs match kvlease.h: every field's offset and size and
every struct's size, as the C compiler lays them out (kvlease-abi)."""
import ctypes
import os
import subprocess

import pytest

from kvpool import _lib


def c_layout():
    prog = os.environ.get("KVLEASE_ABI")
    if not prog:
        here = os.path.dirname(os.path.abspath(__file__))
        prog = os.path.join(here, os.pardir, os.pardir, "build", "tests",
                            "python", "kvlease-abi")
    if not os.access(prog, os.X_OK):
        pytest.fail(f"{prog} missing (run make)")
    out = {}
    for line in subprocess.run([prog], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        name, *nums = line.split()
        out[name] = tuple(int(n) for n in nums)
    return out


def test_structs_match_c():
    c = c_layout()
    seen = 0
    for cname, cls in _lib.STRUCTS.items():
        assert c[cname] == (ctypes.sizeof(cls),), cname
        for fname, _ in cls._fields_:
            f = getattr(cls, fname)
            assert c[f"{cname}.{fname}"] == (f.offset, f.size), \
                f"{cname}.{fname}"
            seen += 1
    assert seen == len(c) - len(_lib.STRUCTS)


def test_every_prototype_is_exported():
    for name in _lib.PROTOS:
        assert _lib.fn(name) is not None
