# SPDX-License-Identifier: MIT
#
# tests/gpu/: GPU-only tests.  test-kvk-gpu is in CHECK_PROGS and exits 77
# without libcuda, a device or the fatbin.  tests/gpu/run.sh is the whole
# GPU check (build, tests, benchmark) for a machine with a GPU.

KVKG_DIR := $(B)/tests/gpu
KVKG_CFLAGS := $(CPPFLAGS_BASE) -Ikernels -Itests/kernels -I$(KVK_CUDA_INC)

ifeq ($(KVK_HAVE_CUDA_H),1)
$(KVKG_DIR)/test-kvk-gpu-edit: tests/gpu/kvk_gpu_edit_cases.h
$(KVKG_DIR)/%: tests/gpu/%.c $(KVK_LIB) $(KVKT_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVKG_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVK_LIB) $(KVK_LIBS)

KVKG_PROGS := $(KVKG_DIR)/test-kvk-gpu $(KVKG_DIR)/bench-kvk-gpu \
	      $(KVKG_DIR)/test-kvk-gpu-edit
ALL += $(KVKG_PROGS)
CHECK_PROGS += $(KVKG_DIR)/test-kvk-gpu $(KVKG_DIR)/test-kvk-gpu-edit

.PHONY: check-gpu
check-gpu: $(KVKG_PROGS)
	tests/gpu/run.sh
endif
