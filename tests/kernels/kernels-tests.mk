# SPDX-License-Identifier: MIT
#
# tests/kernels/: the kernels' tests (CPU), run by `make check`.
# Each test is one program; a second copy of the unit tests is built with
# $(SAN_FLAGS) (ASan + UBSan) into $(B)/asan/kernels/.

KVKT_DIR := $(B)/tests/kernels
KVKT_ASAN := $(B)/asan/kernels
KVKT_HDRS := $(wildcard tests/kernels/*.h) $(KVK_HDRS)
KVKT_CFLAGS := $(CPPFLAGS_BASE) -Ikernels -Itests/kernels

KVKT_PROGS := $(KVKT_DIR)/test-kvk-layout $(KVKT_DIR)/test-kvk-quant \
	      $(KVKT_DIR)/test-kvk-decode $(KVKT_DIR)/test-kvk-prefill \
	      $(KVKT_DIR)/test-kvk-needle $(KVKT_DIR)/test-kvk-nan \
	      $(KVKT_DIR)/test-kvk-rope $(KVKT_DIR)/test-kvk-splice \
	      $(KVKT_DIR)/test-kvk-compact $(KVKT_DIR)/test-kvk-cuda-stub \
	      $(KVKT_DIR)/test-kvk-amx-decode $(KVKT_DIR)/test-kvk-amx-prefill
KVKT_ASAN_PROGS := $(KVKT_ASAN)/test-kvk-layout $(KVKT_ASAN)/test-kvk-quant \
		   $(KVKT_ASAN)/test-kvk-decode $(KVKT_ASAN)/test-kvk-prefill \
		   $(KVKT_ASAN)/test-kvk-nan $(KVKT_ASAN)/test-kvk-splice \
		   $(KVKT_ASAN)/test-kvk-compact

$(KVKT_DIR)/test-kvk-decode: tests/kernels/test-kvk-attn.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) $(KVK_LIBS)

$(KVKT_DIR)/test-kvk-prefill: tests/kernels/test-kvk-attn.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) -DKT_PREFILL $< -o $@ $(KVK_LIB) $(KVK_LIBS)

# the angle reference is binary128 (libquadmath, part of GCC)
$(KVKT_DIR)/test-kvk-rope: tests/kernels/test-kvk-rope.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) -lquadmath $(KVK_LIBS)

$(KVKT_DIR)/test-kvk-amx-decode: tests/kernels/test-kvk-attn.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) -DKT_AMX $< -o $@ $(KVK_LIB) $(KVK_LIBS)

$(KVKT_DIR)/test-kvk-amx-prefill: tests/kernels/test-kvk-attn.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) -DKT_AMX -DKT_PREFILL $< -o $@ $(KVK_LIB) $(KVK_LIBS)

$(KVKT_DIR)/%: tests/kernels/%.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) $(KVK_LIBS)

# sanitizer build: library sources compiled in (generic attention core
# only, to keep the compile short), small grid
KVKT_ASAN_OBJ := $(B)/asan/obj/kernels
KVKT_ASAN_OBJS := $(patsubst %.c,$(KVKT_ASAN_OBJ)/%.o,$(KVK_CPU_SRCS))
$(KVKT_ASAN_OBJ)/kvkern_amx.o: KVK_ARCH := $(KVK_AMX)
$(KVKT_ASAN_OBJ)/kvkern_avx512bf16.o: KVK_ARCH := $(KVK_AVX512BF16)
$(KVKT_ASAN_OBJ)/kvkern_avx512.o: KVK_ARCH := $(KVK_AVX512)
$(KVKT_ASAN_OBJ)/kvkern_avx2.o: KVK_ARCH := $(KVK_AVX2)
$(KVKT_ASAN_OBJ)/kvkern_edit.o: KVK_ARCH := $(KVK_EDIT_FLAGS)
$(KVKT_ASAN_OBJ)/%.o: kernels/%.c $(KVK_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVK_CFLAGS) $(CFLAGS_BASE) $(KVK_ARCH) $(SAN_FLAGS) \
		-DKVK_NO_SPECIALISE -c $< -o $@

$(KVKT_ASAN)/test-kvk-decode: tests/kernels/test-kvk-attn.c $(KVKT_ASAN_OBJS) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) -DKT_SMALL $< -o $@ $(KVKT_ASAN_OBJS) $(KVK_LIBS)

$(KVKT_ASAN)/test-kvk-prefill: tests/kernels/test-kvk-attn.c $(KVKT_ASAN_OBJS) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) -DKT_SMALL -DKT_PREFILL $< -o $@ $(KVKT_ASAN_OBJS) $(KVK_LIBS)

$(KVKT_ASAN)/%: tests/kernels/%.c $(KVKT_ASAN_OBJS) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) -DKT_SMALL $< -o $@ $(KVKT_ASAN_OBJS) $(KVK_LIBS)

# the benchmark's short run and the invariants of its JSON
KVKT_SCRIPTS := tests/kernels/test-bench-kernels.sh

CHECK_PROGS += $(KVKT_PROGS) $(KVKT_ASAN_PROGS) $(KVKT_SCRIPTS)
# a benchmark: alone
CHECK_SERIAL += tests/kernels/test-bench-kernels.sh

# include/kvpool_cuda.h against the toolkit's <cuda.h> (when installed)
$(KVKT_DIR)/cuda-abi-dump: tests/kernels/cuda-abi-dump.c \
		tests/kernels/cuda-abi-names.h include/kvpool_cuda.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Itests/kernels $(CFLAGS_BASE) $< -o $@
ALL += $(KVKT_DIR)/cuda-abi-dump
ifeq ($(KVK_HAVE_CUDA_H),1)
$(KVKT_DIR)/cuda-abi-dump-cuda: tests/kernels/cuda-abi-dump.c \
		tests/kernels/cuda-abi-names.h
	@mkdir -p $(@D)
	$(CC) -DKVT_CUDA_H -I$(KVK_CUDA_INC) -Itests/kernels $(CFLAGS_BASE) \
		$< -o $@
ALL += $(KVKT_DIR)/cuda-abi-dump-cuda
endif
CHECK_PROGS += tests/kernels/test-cuda-abi.sh

# no attention kernel spills registers (ptxas' report of the fatbin)
ifeq ($(HAVE_NVCC),1)
CHECK_PROGS += tests/kernels/test-ptxas-spills.sh
endif

# the driver test double catches broken preconditions
# (without nvcc there is no double: it skips; with nvcc a missing one fails)
$(KVKT_DIR)/test-cudafake: tests/kernels/test-cudafake.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) -DKVT_HAVE_NVCC=$(if $(HAVE_NVCC),1,0) \
		$(CFLAGS_BASE) $< -o $@ $(KVK_LIB) $(KVK_LIBS)
ALL += $(KVKT_DIR)/test-cudafake
CHECK_PROGS += $(KVKT_DIR)/test-cudafake

.PHONY: check-kernels
check-kernels: $(KVKT_PROGS) $(KVKT_ASAN_PROGS) $(B)/bin/kvpool-bench-kernels
	@tests/run-tests.sh $(KVKT_PROGS) $(KVKT_ASAN_PROGS) $(KVKT_SCRIPTS)
