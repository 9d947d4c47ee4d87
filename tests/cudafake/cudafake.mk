# SPDX-License-Identifier: MIT
#
# tests/cudafake/: the driver test double (see cudafake.c).
#   $(B)/tests/cudafake/libcuda.so.1   select it with
#                                      KVPOOL_LIBCUDA=$(B)/tests/cudafake/libcuda.so.1
# Built when nvcc exists: its kernel table comes from the fatbin's PTX and
# ptxas report (gen-kernel-table.sh), and it serves exactly that fatbin.
# With KVPOOL_FAKE_CUDA_EXEC=1 it runs the kernels on cuemu.cc, the host
# emulation of the CUDA execution model, from the same kvkern_kernels.cu.

CUDAFAKE_DIR := $(B)/tests/cudafake
CUDAFAKE_OBJ := $(B)/obj/tests/cudafake
CUDAFAKE := $(CUDAFAKE_DIR)/libcuda.so.1
CUDAFAKE_CFLAGS := $(CPPFLAGS_BASE) -Ikernels -Itests/cudafake \
	-fvisibility=hidden
# The double defines the driver's entry points, which no header declares
# as prototypes.
CUDAFAKE_WARN := $(filter-out -Wmissing-prototypes,$(WARN))
CUDAFAKE_CXXFLAGS := -std=c++17 -O2 -g -fPIC -fvisibility=hidden \
	-Wall -Wextra -Werror -Wno-unused-parameter -Wno-unused-function \
	-Wno-unknown-pragmas -ffp-contract=off -Iinclude -Ikernels -Itests/cudafake
CUDAFAKE_HDRS := tests/cudafake/cudafake.h tests/cudafake/cuemu.h \
	tests/cudafake/cuemu_launch.h include/kvpool_cuda.h \
	kernels/kvkern_cuda_abi.h

ifeq ($(HAVE_NVCC),1)
$(CUDAFAKE_OBJ)/kernels_table.c: tests/cudafake/gen-kernel-table.sh \
		$(KVK_PTX80) $(KVK_USAGE) $(KVK_FATBIN)
	@mkdir -p $(@D)
	tests/cudafake/gen-kernel-table.sh $(KVK_PTX80) $(KVK_USAGE) \
		$(KVK_FATBIN) > $@.tmp
	mv $@.tmp $@

$(CUDAFAKE_OBJ)/kernels_table.o: $(CUDAFAKE_OBJ)/kernels_table.c $(CUDAFAKE_HDRS)
	$(CC) $(CUDAFAKE_CFLAGS) -std=gnu11 -O2 -g -fPIC $(CUDAFAKE_WARN) -c $< -o $@

$(CUDAFAKE_OBJ)/cudafake.o: tests/cudafake/cudafake.c $(CUDAFAKE_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CUDAFAKE_CFLAGS) -std=gnu11 -O2 -g -fPIC $(CUDAFAKE_WARN) -c $< -o $@

$(CUDAFAKE_OBJ)/cuemu.o: tests/cudafake/cuemu.cc $(CUDAFAKE_HDRS) kernels/kvkern.h
	@mkdir -p $(@D)
	$(CXX) $(CUDAFAKE_CXXFLAGS) -c $< -o $@

$(CUDAFAKE_OBJ)/kernels_emu.o: tests/cudafake/kernels_emu.cc $(KVK_CU_SRCS) \
		$(CUDAFAKE_HDRS)
	@mkdir -p $(@D)
	$(CXX) $(CUDAFAKE_CXXFLAGS) -DKVK_CUEMU -c $< -o $@

$(CUDAFAKE): $(CUDAFAKE_OBJ)/cudafake.o $(CUDAFAKE_OBJ)/kernels_table.o \
		$(CUDAFAKE_OBJ)/cuemu.o $(CUDAFAKE_OBJ)/kernels_emu.o $(KVK_LIB)
	@mkdir -p $(@D)
	$(CXX) -shared -Wl,-soname,libcuda.so.1 -Wl,-z,defs -o $@ \
		$(filter %.o,$^) $(KVK_LIB) -lpthread -lm

ALL += $(CUDAFAKE)
endif

# The emulation's FP16 arithmetic and lop3 against independent references
# (needs no toolkit).
$(CUDAFAKE_DIR)/test-cuemu-f16: tests/cudafake/test-cuemu-f16.cc \
		tests/cudafake/cuemu.h $(KVK_LIB)
	@mkdir -p $(@D)
	$(CXX) $(CUDAFAKE_CXXFLAGS) $< -o $@ $(KVK_LIB) $(KVK_LIBS)

CHECK_PROGS += $(CUDAFAKE_DIR)/test-cuemu-f16
