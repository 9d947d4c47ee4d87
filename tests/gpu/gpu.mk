# SPDX-License-Identifier: MIT
#
# tests/gpu/: the kernels and the daemon on a GPU.
#   test-kvk-gpu      every op on the GPU against the CPU (exit 77 without
#                     libcuda or a device); in make check it also runs
#                     against the driver test double: every launch of the
#                     whole grid checked against the driver's
#                     preconditions, results not compared
#                     (test-kvk-gpu-launches.sh, sm_80 and sm_90 models)
#                     and, on a smaller grid, with the kernels run by the
#                     host emulation and compared (test-kvk-gpu-emu.sh)
#   test-kvk-gpu-edit the edit ops (splice, compact, score) on the GPU
#                     against the CPU (exit 77 without a GPU)
#   test-kvd-chunks-fini.sh  daemon/cuda_chunks.c's teardown after a
#                     failed unmap, against the driver test double
#   test-cuda-keep    the cuda backend's kept chunks (daemon/keep.h) across
#                     processes, with keep_store.c in place of keep.c: on
#                     a GPU (tests/gpu/run.sh) and, in make check, against
#                     the driver test double (test-cuda-keep.sh)
#   bench-kvk-gpu     decode KV GB/s against the read bandwidth, grow and
#                     shrink latency of a chunk
# tests/gpu/run.sh is the whole GPU check (build, tests, benchmark) for a
# machine with a GPU.

KVKG_DIR := $(B)/tests/gpu
KVKG_CFLAGS := $(CPPFLAGS_BASE) -Ikernels -Itests/kernels -Idaemon

$(KVKG_DIR)/test-kvk-gpu: tests/gpu/test-kvk-gpu.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKG_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) $(KVK_LIBS)

$(KVKG_DIR)/bench-kvk-gpu: tests/gpu/bench-kvk-gpu.c $(KVK_LIB) $(KVKT_HDRS) \
		$(KVD_CHUNKS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(KVKG_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVD_CHUNKS_OBJ) \
		$(KVK_LIB) $(KVK_LIBS)

$(KVKG_DIR)/test-kvk-gpu-edit: tests/gpu/test-kvk-gpu-edit.c \
		tests/gpu/kvk_gpu_edit_cases.h $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKG_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) $(KVK_LIBS)

$(KVKG_DIR)/test-kvd-chunks-fini: tests/gpu/test-kvd-chunks-fini.c \
		$(KVK_LIB) $(KVD_CHUNKS_OBJ)
	@mkdir -p $(@D)
	$(CC) $(KVKG_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVD_CHUNKS_OBJ) \
		$(KVK_LIB) $(KVK_LIBS)

# the backend's objects with the test store of keep.h
KVKG_KEEP_OBJS := $(KVD_OBJ)/backend_cuda.o $(KVD_CHUNKS_OBJ) $(KVD_OBJ)/core.o
$(KVKG_DIR)/test-cuda-keep: tests/gpu/test-cuda-keep.c tests/gpu/keep_store.c \
		tests/gpu/keep_store.h daemon/keep.h $(KVKG_KEEP_OBJS) $(KVK_LIB)
	@mkdir -p $(@D)
	$(CC) $(KVKG_CFLAGS) -Itests/gpu $(CFLAGS_BASE) $< tests/gpu/keep_store.c \
		-o $@ $(KVKG_KEEP_OBJS) $(KVK_LIB) $(KVK_LIBS)

KVKG_PROGS := $(KVKG_DIR)/test-kvk-gpu $(KVKG_DIR)/bench-kvk-gpu \
	      $(KVKG_DIR)/test-kvk-gpu-edit \
	      $(KVKG_DIR)/test-kvd-chunks-fini $(KVKG_DIR)/test-cuda-keep
ALL += $(KVKG_PROGS)
CHECK_PROGS += $(KVKG_DIR)/test-kvk-gpu $(KVKG_DIR)/test-kvk-gpu-edit \
	       tests/gpu/test-kvk-gpu-launches.sh \
	       tests/gpu/test-kvk-gpu-emu.sh \
	       tests/gpu/test-kvd-chunks-fini.sh \
	       tests/gpu/test-cuda-keep.sh
CHECK_FIRST += tests/gpu/test-kvk-gpu-fake.sh

.PHONY: check-gpu
check-gpu: $(KVKG_PROGS)
	tests/gpu/run.sh
