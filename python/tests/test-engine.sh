#!/bin/sh
# SPDX-License-Identifier: MIT
# The example engine (python/examples/: a Llama-architecture model in
# PyTorch whose KV cache lives in kvpool) against a private kvpoold:
# tokens equal to PyTorch's dense attention for a BF16 cache, logits
# within bounds for FP8/INT8/INT4; the safetensors loader; the serving
# example (prefix sharing across processes, the pressure policies).
. "$(dirname "$0")/lib.sh"
need_modules numpy pytest torch
# Tenant processes share the machine: one BLAS thread each.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
d=$(dirname "$0")
run_pytest -s "$d/test_safetensors.py" "$d/test_engine.py" \
	"$d/test_serve.py"
