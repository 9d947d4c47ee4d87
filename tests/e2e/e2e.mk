# SPDX-License-Identifier: MIT
#
# tests/e2e/: kvpoold + libkvlease end to end (CPU backend, in-process
# ledger here, and the cuda backend against the driver test double; the
# same programs run in the VM with the module through
# tests/vm/guest.d/e2e-module.sh).
#   $(B)/tests/e2e/e2e-tenant   a tenant: sequences, K/V, attention vs ref
#   $(B)/tests/e2e/e2e-util     status/hold/quota/bad-request helpers
#   $(B)/tests/e2e/e2e-tiers    lower tiers and swaps: round trips, quotas,
#                               bad input, I/O errors, kill helpers
#   $(B)/tests/e2e/e2e-prefix   the prefix cache, one concern per command
#   $(B)/tests/e2e/e2e-devbuf   a GPU tenant: device buffers (zero-copy)
#   $(B)/tests/e2e/e2e-scrub    freed blocks read as zeros for another
#                               tenant, in every tier
#   $(B)/tests/e2e/e2e-gate     every op kind looped against a due unmap
#   $(B)/tests/e2e/e2e-iso      one tenant's attacks on another (swap jobs
#                               and publish, a lease moved to another
#                               tenant, descriptors that are not
#                               /dev/kvpool)
#   $(B)/tests/e2e/e2e-cluster  a tenant of one node of a cluster tier

E2E_OUT := $(B)/tests/e2e
E2E_CFLAGS := $(CPPFLAGS_BASE) -Ilibkvlease -Ikernels
E2E_PROGS := $(E2E_OUT)/e2e-tenant $(E2E_OUT)/e2e-util $(E2E_OUT)/e2e-tiers \
	     $(E2E_OUT)/e2e-prefix $(E2E_OUT)/e2e-edits $(E2E_OUT)/e2e-devbuf \
	     $(E2E_OUT)/e2e-scrub $(E2E_OUT)/e2e-gate $(E2E_OUT)/e2e-iso \
	     $(E2E_OUT)/e2e-cluster

# Linked with the static libkvlease so that the VM can run them from /bin
# (the example program and kvpool-bench use the shared one).
$(E2E_OUT)/%: tests/e2e/%.c libkvlease/kvlease.h include/kvpool_proto.h \
		libkvlease/kvl_internal.h $(KVL_A) $(B)/lib/libkvkern.a \
		kernels/cuda_drv.h
	@mkdir -p $(@D)
	$(CC) $(E2E_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVL_A) \
		$(B)/lib/libkvkern.a $(E2E_XLIBS) -lpthread -ldl -lm

# e2e-prefix and e2e-tiers read the daemon's counters through the admin
# API.
$(E2E_OUT)/e2e-prefix: E2E_XLIBS := $(KVL_EXTRA_LIBS)
$(E2E_OUT)/e2e-tiers: E2E_XLIBS := $(KVL_EXTRA_LIBS)
$(E2E_OUT)/e2e-iso: E2E_XLIBS := $(KVL_EXTRA_LIBS)
$(E2E_OUT)/e2e-cluster: E2E_XLIBS := $(KVL_EXTRA_LIBS)

ALL += $(E2E_PROGS)

E2E_TESTS := test-multi-tenant test-kill-tenant test-kill-daemon test-quota \
	     test-bad-not-held test-bad-outside-region test-bad-truncated \
	     test-bad-oversized test-bad-unknown-op test-lazy-backing \
	     test-example test-grow-fail test-reclaim test-privdrop \
	     test-sequences test-cuda-fake test-devbuf test-cuda-capacity \
	     test-prefix-share test-prefix-cow test-prefix-collide \
	     test-prefix-tenants test-prefix-quota test-prefix-reclaim \
	     test-prefix-bad test-swap-roundtrip test-tier-quota test-swap-bad \
	     test-kill-swap test-swap-cuda-fake test-edits test-compress \
	     test-bad-edits test-edit-tokens test-edit-tiers test-fd-leak \
	     test-fd-exhaust test-conn-limit test-bad-names test-lease-timeout \
	     test-tenant-set test-list-visibility test-socket-path \
	     test-attn-bounds test-owner-progress test-config-reload \
	     test-tiers-config test-metrics-http test-scrub test-scrub-cuda-fake \
	     test-owner-gate test-owner-gate-devbuf test-prefix-many \
	     test-prefix-delete test-prefix-lend test-iso-swap-publish \
	     test-iso-retenant test-kernel-threads \
	     test-cluster test-prefix-demote
CHECK_PROGS += $(foreach t,$(E2E_TESTS),tests/e2e/$(t).sh)
# latency bounds (a status call answered within 2 s, another tenant's call
# within 2 s of a due unmap, MATCH within the cluster's deadline): alone
CHECK_SERIAL += tests/e2e/test-owner-progress.sh tests/e2e/test-owner-gate.sh \
		tests/e2e/test-owner-gate-devbuf.sh tests/e2e/test-cluster.sh

# The same end-to-end run inside the VM, ledger in /dev/kvpool.
VM_EXTRA_PROGS += $(B)/bin/kvpoold $(E2E_PROGS)
# CUSE for e2e-iso fakefd in the VM (tests/vm/guest.d/iso-module.sh): a
# character device that answers the ledger's ioctl but is not it.
VM_EXTRA_PROGS += $(wildcard $(addprefix \
	/lib/modules/$(KVPOOL_KVER)/kernel/fs/fuse/,fuse.ko cuse.ko))

.PHONY: e2e-check
e2e-check: $(B)/bin/kvpoold $(E2E_PROGS) $(B)/bin/kvlease-example
	@tests/run-tests.sh $(foreach t,$(E2E_TESTS),tests/e2e/$(t).sh)
CHECK_PROGS += tests/gpu/daemon-gpu.sh

# The same daemon built with $(SAN_FLAGS) (ASan + UBSan), CPU kernels
# included (their sanitizer objects from tests/kernels/kernels-tests.mk),
# without the cuda backend, for the end-to-end tests below.  Its wrapper
# sets the sanitizer options.
E2E_SAN_DIR := $(B)/asan/daemon
# The daemon's flags and libraries without the cuda backend and without
# libkvkern.a (each build links its own kernels' objects).
E2E_KVD_FLAGS := -Idaemon $(KVD_FEAT_CPPFLAGS)
E2E_KVD_LIBS := $(KVD_FEAT_LIBS) -lpthread -ldl -lm
# (the ledger core: the unit tests' sanitizer object, same flags)
E2E_SAN_OBJS := $(patsubst %.c,$(E2E_SAN_DIR)/%.o,$(KVD_SRCS)) \
		$(B)/asan/obj/kvpool_ledger.o $(E2E_SAN_DIR)/kvpool_metrics.o \
		$(patsubst %.c,$(E2E_SAN_DIR)/k_%.o,$(KVK_CUDA_SRCS))
$(E2E_SAN_DIR)/%.o: daemon/%.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(E2E_KVD_FLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) -c $< -o $@
$(E2E_SAN_DIR)/kvpool_metrics.o: include/kvpool_metrics.c include/kvpool_metrics.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) $(SAN_FLAGS) -c $< -o $@
# the CUDA driver loader and launch glue (the cuda backend is linked in)
$(E2E_SAN_DIR)/k_%.o: kernels/%.c $(KVK_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ikernels $(CFLAGS_BASE) $(SAN_FLAGS) -c $< -o $@
$(B)/asan/bin/kvpoold-san: $(E2E_SAN_OBJS) $(KVKT_ASAN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) $(SAN_FLAGS) -o $@ $^ $(E2E_KVD_LIBS)
$(B)/asan/bin/kvpoold: $(B)/asan/bin/kvpoold-san
	@printf '#!/bin/sh\nexec env $(ASAN_ENV) %s "$$@"\n' "$(abspath $<)" >$@
	@chmod +x $@

# The end-to-end tests that run on the sanitizer build (the attention path
# of every dtype, malformed requests, descriptors, limits).
E2E_SAN_TESTS := test-multi-tenant test-sequences test-bad-not-held \
		 test-bad-outside-region test-bad-truncated test-fd-leak \
		 test-conn-limit test-tenant-set test-attn-bounds \
		 test-owner-progress test-bad-names test-scrub test-bad-edits
CHECK_PROGS += $(B)/asan/tests/e2e/san-e2e.sh
$(B)/asan/tests/e2e/san-e2e.sh: $(B)/asan/bin/kvpoold $(E2E_PROGS) tests/e2e/e2e.mk
	@mkdir -p $(@D)
	@printf '#!/bin/sh\n# generated by tests/e2e/e2e.mk\nexec env KVPOOLD=%s tests/e2e/run-build.sh %s\n' \
		"$(abspath $(B)/asan/bin/kvpoold)" "$(E2E_SAN_TESTS)" >$@
	@chmod +x $@

# An unoptimised (-O0) daemon with the specialised CPU kernels, whose
# frames are the deepest (hundreds of KiB on AVX-512 machines): the
# multi-tenant run must fit in the connection threads' stacks
# (stop_daemon in tests/e2e/lib.sh checks the depth logged at exit).
E2E_O0_DIR := $(B)/o0/obj
E2E_O0_FLAGS := $(CPPFLAGS_BASE) $(E2E_KVD_FLAGS) -Ikernels $(CFLAGS_BASE)
E2E_O0_OBJS := $(patsubst %.c,$(E2E_O0_DIR)/d_%.o,$(KVD_SRCS)) \
	       $(E2E_O0_DIR)/kvpool_ledger.o $(E2E_O0_DIR)/kvpool_metrics.o \
	       $(patsubst %.c,$(E2E_O0_DIR)/%.o,$(KVK_CPU_SRCS) $(KVK_CUDA_SRCS))
$(E2E_O0_DIR)/kvkern_avx512bf16.o: KVK_ARCH := $(KVK_AVX512BF16)
$(E2E_O0_DIR)/kvkern_avx512.o: KVK_ARCH := $(KVK_AVX512)
$(E2E_O0_DIR)/kvkern_avx2.o: KVK_ARCH := $(KVK_AVX2)
$(E2E_O0_DIR)/kvkern_amx.o: KVK_ARCH := $(KVK_AMX)
$(E2E_O0_DIR)/kvkern_edit.o: KVK_ARCH := $(KVK_EDIT_FLAGS)
$(E2E_O0_DIR)/d_%.o: daemon/%.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(E2E_O0_FLAGS) -O0 -c $< -o $@
$(E2E_O0_DIR)/kvpool_ledger.o: kmod/kvpool_ledger.c $(LEDGER_HDR)
	@mkdir -p $(@D)
	$(CC) $(E2E_O0_FLAGS) -O0 -c $< -o $@
$(E2E_O0_DIR)/kvpool_metrics.o: include/kvpool_metrics.c include/kvpool_metrics.h
	@mkdir -p $(@D)
	$(CC) $(E2E_O0_FLAGS) -O0 -c $< -o $@
$(E2E_O0_DIR)/%.o: kernels/%.c $(KVK_HDRS)
	@mkdir -p $(@D)
	$(CC) $(E2E_O0_FLAGS) $(KVK_ARCH) -O0 -c $< -o $@
$(B)/o0/bin/kvpoold: $(E2E_O0_OBJS)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(E2E_KVD_LIBS)
CHECK_PROGS += $(B)/o0/tests/e2e/o0-e2e.sh
$(B)/o0/tests/e2e/o0-e2e.sh: $(B)/o0/bin/kvpoold $(E2E_PROGS) tests/e2e/e2e.mk
	@mkdir -p $(@D)
	@printf '#!/bin/sh\n# generated by tests/e2e/e2e.mk\nexec env KVPOOLD=%s tests/e2e/run-build.sh test-multi-tenant\n' \
		"$(abspath $(B)/o0/bin/kvpoold)" >$@
	@chmod +x $@
