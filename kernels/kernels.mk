# SPDX-License-Identifier: MIT
#
# kernels/: paged-attention and KV-quantisation kernels.
#   $(B)/lib/libkvkern.a              CPU ops (scalar reference + AVX2/AVX-512/AMX
#                                     chosen at run time), the CUDA driver
#                                     loader and the CUDA launch glue (-fPIC;
#                                     link with -lpthread -ldl -lm).  Needs no
#                                     CUDA toolkit: include/kvpool_cuda.h
#                                     declares the driver ABI.
#   $(B)/lib/kvpool_kernels.fatbin    CUDA kernels, sm_80 + sm_90 + PTX
#                                     (only when nvcc exists)
#   $(B)/lib/kvpool_kernels.compat.ptx  the kernels as compute_80 PTX of ISA
#                                     7.8, for drivers older than the toolkit
#                                     (checked with ptxas at that ISA)
#   $(B)/obj/kernels/kvpool_kernels.usage  ptxas' resource report of the
#                                     fatbin (tests/kernels/test-ptxas-spills)
#   $(B)/bin/kvpool-bench-kernels     CPU decode benchmark (make bench-kernels)

KVK_CUDA_INC ?= /usr/local/cuda/include
# e.g. KVK_NVCC_EXTRA="--threads 0" to compile the architectures in parallel
KVK_NVCC_EXTRA ?=
KVK_HAVE_CUDA_H := $(shell test -f $(KVK_CUDA_INC)/cuda.h && echo 1)
KVK_OBJ := $(B)/obj/kernels
KVK_HDRS := $(wildcard kernels/*.h) include/kvpool_cuda.h
KVK_CPU_SRCS := kvkern.c kvkern_cpu.c kvkern_amx.c kvkern_avx512bf16.c \
		kvkern_avx512.c kvkern_avx2.c \
		kvkern_generic.c \
		kvkern_edit.c
KVK_CUDA_SRCS := cuda_drv.c kvkern_cuda.c kvkern_cuda_edit.c
KVK_SRCS := $(KVK_CPU_SRCS) $(KVK_CUDA_SRCS)
KVK_OBJS := $(patsubst %.c,$(KVK_OBJ)/%.o,$(KVK_SRCS))
KVK_CFLAGS := $(CPPFLAGS_BASE) -Ikernels
KVK_LIBS := -lpthread -ldl -lm
KVK_AVX512 := -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma
KVK_AVX512BF16 := $(KVK_AVX512) -mavx512bf16 -mavx512vbmi -mavx512vnni
KVK_AMX := $(KVK_AVX512BF16) -mamx-tile -mamx-bf16
KVK_AVX2 := -O3 -mavx2 -mfma
KVK_LIB := $(B)/lib/libkvkern.a
KVK_FATBIN := $(B)/lib/kvpool_kernels.fatbin
KVK_COMPAT_PTX := $(B)/lib/kvpool_kernels.compat.ptx
KVK_USAGE := $(KVK_OBJ)/kvpool_kernels.usage
KVK_PTX80 := $(KVK_OBJ)/kvpool_kernels.sm80.ptx
KVK_CU_SRCS := kernels/cuda/kvkern_kernels.cu kernels/cuda/kvkern_formats.cuh \
	       kernels/kvkern_cuda_abi.h \
	       kernels/cuda/kvkern_edit.cu kernels/kvkern_cuda_edit_abi.h

$(KVK_OBJ)/kvkern_amx.o: KVK_ARCH := $(KVK_AMX)
$(KVK_OBJ)/kvkern_avx512bf16.o: KVK_ARCH := $(KVK_AVX512BF16)
$(KVK_OBJ)/kvkern_avx512.o: KVK_ARCH := $(KVK_AVX512)
$(KVK_OBJ)/kvkern_avx2.o: KVK_ARCH := $(KVK_AVX2)
# the edit ops: rotation products rounded one by one, like the CUDA twins
KVK_EDIT_FLAGS := -O3 -ffp-contract=off -fno-trapping-math
$(KVK_OBJ)/kvkern_edit.o: KVK_ARCH := $(KVK_EDIT_FLAGS)

# Where the glue looks for the fatbin: only the files that use it depend
# on the installation paths.
KVK_PATH_OBJS := $(patsubst kernels/%.c,$(KVK_OBJ)/%.o,$(shell grep -l KVK_FATBIN_DIR \
	$(addprefix kernels/,$(KVK_SRCS))))
$(KVK_PATH_OBJS): KVK_PATHS := -DKVK_FATBIN_DIR='"$(PREFIX)/lib/kvpool"'
$(KVK_PATH_OBJS): $(B)/paths

$(KVK_OBJ)/%.o: kernels/%.c $(KVK_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVK_CFLAGS) $(KVK_PATHS) $(CFLAGS_BASE) $(KVK_ARCH) -c $< -o $@

$(KVK_LIB): $(KVK_OBJS)
	@mkdir -p $(@D)
	rm -f $@
	ar rcs $@ $^

ALL += $(KVK_LIB)

ifeq ($(HAVE_NVCC),1)
KVK_PTXAS := $(dir $(NVCC))ptxas
KVK_NVCC_FLAGS := -O3 -std=c++17 -Ikernels $(KVK_NVCC_EXTRA)
KVK_GENCODE := -gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
# The fatbin and ptxas' report of every kernel (registers, shared memory,
# stack frame, spills) for sm_80 and sm_90.
$(KVK_FATBIN) $(KVK_USAGE) &: $(KVK_CU_SRCS)
	@mkdir -p $(dir $(KVK_FATBIN)) $(KVK_OBJ)
	$(NVCC) $(KVK_NVCC_FLAGS) $(KVK_GENCODE) --resource-usage -fatbin \
		-o $(KVK_FATBIN) $< > $(KVK_USAGE).tmp 2>&1 || \
		{ cat $(KVK_USAGE).tmp; rm -f $(KVK_FATBIN); exit 1; }
	mv $(KVK_USAGE).tmp $(KVK_USAGE)

$(KVK_PTX80): $(KVK_CU_SRCS)
	@mkdir -p $(@D)
	$(NVCC) $(KVK_NVCC_FLAGS) -arch=compute_80 -ptx -o $@ $<

# PTX ISA 7.8 (CUDA 11.8) has every instruction the kernels use; ptxas
# refuses an instruction the declared ISA lacks, so this checks the claim.
# The used_bytes_mask pragmas are load hints newer than that ISA.
$(KVK_COMPAT_PTX): $(KVK_PTX80)
	@mkdir -p $(@D)
	sed 's/^\.version [0-9.]*/.version 7.8/; /\.pragma "used_bytes_mask/d' \
		$< > $@.tmp
	$(KVK_PTXAS) -arch=sm_80 $@.tmp -o /dev/null || { rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

ALL += $(KVK_FATBIN) $(KVK_COMPAT_PTX)
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

# editing benchmark: splice, re-prefill estimate, compression (make
# bench-edits; --gpu with a GPU)
ifeq ($(KVK_HAVE_CUDA_H),1)
KVK_BENCH_EDITS_FLAGS := -DKVK_BENCH_CUDA
endif
$(B)/bin/kvpool-bench-edits: kernels/bench-edits.c $(KVK_LIB) $(KVK_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVK_CFLAGS) $(CFLAGS_BASE) $(KVK_BENCH_EDITS_FLAGS) $< -o $@ \
		$(KVK_LIB) $(KVK_LIBS)

ALL += $(B)/bin/kvpool-bench-edits

.PHONY: bench-edits
bench-edits: $(B)/bin/kvpool-bench-edits
	$(B)/bin/kvpool-bench-edits

BENCH += bench-edits

.PHONY: install-kernels
install-kernels: $(KVK_LIB)
	install -d $(DESTDIR)$(PREFIX)/lib/kvpool $(DESTDIR)$(PREFIX)/include/kvpool
	install -m 644 $(KVK_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 kernels/kvkern.h $(DESTDIR)$(PREFIX)/include/kvpool/
	for f in $(KVK_FATBIN) $(KVK_COMPAT_PTX); do \
		if [ -f $$f ]; then install -m 644 $$f \
			$(DESTDIR)$(PREFIX)/lib/kvpool/; fi; done

INSTALL_TGTS += install-kernels
