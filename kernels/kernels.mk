# SPDX-License-Identifier: MIT
#
# kernels/: paged-attention and KV-quantisation kernels.
#   $(B)/lib/libkvkern.a            CPU ops (scalar reference + AVX2/AVX-512/
#                                   AMX chosen at run time), the CUDA driver
#                                   loader and the CUDA launch glue (-fPIC;
#                                   link with -lpthread -ldl -lm)
#   $(B)/lib/kvpool_kernels.fatbin  CUDA kernels, sm_80 + sm_90 + PTX
#                                   (only when nvcc exists)
#   $(B)/bin/kvpool-bench-kernels   CPU decode benchmark (make bench-kernels)

KVK_CUDA_INC ?= /usr/local/cuda/include
KVK_HAVE_CUDA_H := $(shell test -f $(KVK_CUDA_INC)/cuda.h && echo 1)
KVK_OBJ := $(B)/obj/kernels
KVK_HDRS := $(wildcard kernels/*.h)
KVK_CPU_SRCS := kvkern.c kvkern_cpu.c kvkern_amx.c kvkern_avx512bf16.c \
		kvkern_avx512.c kvkern_avx2.c \
		kvkern_generic.c
KVK_CUDA_SRCS := cuda_drv.c kvkern_cuda.c
ifeq ($(KVK_HAVE_CUDA_H),1)
KVK_SRCS := $(KVK_CPU_SRCS) $(KVK_CUDA_SRCS)
else
KVK_SRCS := $(KVK_CPU_SRCS)
endif
KVK_OBJS := $(patsubst %.c,$(KVK_OBJ)/%.o,$(KVK_SRCS))
KVK_CFLAGS := $(CPPFLAGS_BASE) -Ikernels -I$(KVK_CUDA_INC) \
	      -DKVK_FATBIN_DIR='"$(PREFIX)/lib/kvpool"'
KVK_LIBS := -lpthread -ldl -lm
KVK_AVX512 := -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma
KVK_AVX512BF16 := $(KVK_AVX512) -mavx512bf16 -mavx512vbmi
KVK_AMX := $(KVK_AVX512BF16) -mamx-tile -mamx-bf16
KVK_AVX2 := -O3 -mavx2 -mfma
KVK_LIB := $(B)/lib/libkvkern.a
KVK_FATBIN := $(B)/lib/kvpool_kernels.fatbin

$(KVK_OBJ)/kvkern_amx.o: KVK_ARCH := $(KVK_AMX)
$(KVK_OBJ)/kvkern_avx512bf16.o: KVK_ARCH := $(KVK_AVX512BF16)
$(KVK_OBJ)/kvkern_avx512.o: KVK_ARCH := $(KVK_AVX512)
$(KVK_OBJ)/kvkern_avx2.o: KVK_ARCH := $(KVK_AVX2)

$(KVK_OBJ)/%.o: kernels/%.c $(KVK_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVK_CFLAGS) $(CFLAGS_BASE) $(KVK_ARCH) -c $< -o $@

$(KVK_LIB): $(KVK_OBJS)
	@mkdir -p $(@D)
	rm -f $@
	ar rcs $@ $^

ALL += $(KVK_LIB)

ifeq ($(HAVE_NVCC),1)
KVK_NVCC_FLAGS := -O3 -std=c++17 -Ikernels \
	-gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
$(KVK_FATBIN): kernels/cuda/kvkern_kernels.cu kernels/kvkern_cuda_abi.h
	@mkdir -p $(@D)
	$(NVCC) $(KVK_NVCC_FLAGS) -fatbin -o $@ $<
ALL += $(KVK_FATBIN)
else
.PHONY: kvk-no-nvcc
kvk-no-nvcc:
	@echo "kernels: nvcc not found ($(NVCC)): not building $(KVK_FATBIN)"
ALL += kvk-no-nvcc
endif

# benchmark
$(B)/bin/kvpool-bench-kernels: kernels/bench-kernels.c $(KVK_LIB) $(KVK_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVK_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) $(KVK_LIBS)

ALL += $(B)/bin/kvpool-bench-kernels

.PHONY: bench-kernels
bench-kernels: $(B)/bin/kvpool-bench-kernels
	$(B)/bin/kvpool-bench-kernels

BENCH += bench-kernels

.PHONY: install-kernels
install-kernels: $(KVK_LIB)
	install -d $(DESTDIR)$(PREFIX)/lib/kvpool $(DESTDIR)$(PREFIX)/include/kvpool
	install -m 644 $(KVK_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 kernels/kvkern.h $(DESTDIR)$(PREFIX)/include/kvpool/
	if [ -f $(KVK_FATBIN) ]; then install -m 644 $(KVK_FATBIN) \
		$(DESTDIR)$(PREFIX)/lib/kvpool/; fi

INSTALL_TGTS += install-kernels
