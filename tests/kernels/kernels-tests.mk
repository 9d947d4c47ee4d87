# SPDX-License-Identifier: MIT
#
# tests/kernels/: the kernels' tests (CPU), run by `make check`.
# Each test is one program; a second copy of the unit tests is built with
# $(SAN_FLAGS) (ASan + UBSan) into $(B)/asan/kernels/.

KVKT_DIR := $(B)/tests/kernels
KVKT_ASAN := $(B)/asan/kernels
KVKT_HDRS := $(wildcard tests/kernels/*.h) $(KVK_HDRS)
KVKT_CFLAGS := $(CPPFLAGS_BASE) -Ikernels -Itests/kernels -I$(KVK_CUDA_INC)

KVKT_PROGS := $(KVKT_DIR)/test-kvk-layout $(KVKT_DIR)/test-kvk-quant \
	      $(KVKT_DIR)/test-kvk-decode $(KVKT_DIR)/test-kvk-prefill \
	      $(KVKT_DIR)/test-kvk-needle $(KVKT_DIR)/test-kvk-nan \
	      $(KVKT_DIR)/test-kvk-rope $(KVKT_DIR)/test-kvk-splice \
	      $(KVKT_DIR)/test-kvk-compact
ifeq ($(KVK_HAVE_CUDA_H),1)
KVKT_PROGS += $(KVKT_DIR)/test-kvk-cuda-stub $(KVKT_DIR)/test-kvk-cuemu-edit
endif
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

# the CUDA edit kernels compiled for the host (tests/kernels/cuemu.h) under
# the real launch glue and a driver double
$(KVKT_DIR)/cuemu_edit.o: tests/kernels/cuemu_edit.cpp tests/kernels/cuemu.h \
		kernels/cuda/kvkern_edit.cu kernels/kvkern_cuda_edit_abi.h
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -O2 -g -ffp-contract=off -Wall -Wextra -Werror \
		-Wno-unused-parameter -Wno-unknown-pragmas -Ikernels -c $< -o $@

$(KVKT_DIR)/test-kvk-cuemu-edit: tests/kernels/test-kvk-cuemu-edit.c \
		$(KVKT_DIR)/cuemu_edit.o tests/gpu/kvk_gpu_edit_cases.h \
		$(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) -Itests/gpu $(CFLAGS_BASE) $< \
		$(KVKT_DIR)/cuemu_edit.o -o $@ $(KVK_LIB) -lstdc++ $(KVK_LIBS)

# the angle reference is binary128 (libquadmath, part of GCC)
$(KVKT_DIR)/test-kvk-rope: tests/kernels/test-kvk-rope.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) -lquadmath $(KVK_LIBS)

$(KVKT_DIR)/%: tests/kernels/%.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKT_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) $(KVK_LIBS)

# sanitizer build: library sources compiled in (generic attention core
# only, to keep the compile short), small grid
KVKT_ASAN_OBJ := $(B)/asan/obj/kernels
KVKT_ASAN_OBJS := $(patsubst %.c,$(KVKT_ASAN_OBJ)/%.o,$(KVK_CPU_SRCS))
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

CHECK_PROGS += $(KVKT_PROGS) $(KVKT_ASAN_PROGS)

.PHONY: check-kernels
check-kernels: $(KVKT_PROGS) $(KVKT_ASAN_PROGS)
	@tests/run-tests.sh $(KVKT_PROGS) $(KVKT_ASAN_PROGS)
