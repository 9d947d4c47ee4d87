# SPDX-License-Identifier: MIT
#
# tests/e2e/: kvpoold + libkvlease end to end (CPU backend, in-process
# ledger here; the same programs run in the VM with the module through
# tests/vm/guest.d/e2e-module.sh).
#   $(B)/tests/e2e/e2e-tenant   a tenant: sequences, K/V, attention vs ref
#   $(B)/tests/e2e/e2e-util     status/hold/quota/bad-request helpers
#   $(B)/tests/e2e/e2e-tiers    lower tiers and swaps: round trips, quotas,
#                               bad input, I/O errors, kill helpers
#   $(B)/tests/e2e/e2e-prefix   the prefix cache, one concern per command

E2E_OUT := $(B)/tests/e2e
E2E_CFLAGS := $(CPPFLAGS_BASE) -Ilibkvlease -Ikernels
E2E_PROGS := $(E2E_OUT)/e2e-tenant $(E2E_OUT)/e2e-util $(E2E_OUT)/e2e-tiers \
	     $(E2E_OUT)/e2e-prefix

# Linked with the static libkvlease so that the VM can run them from /bin
# (the example program and kvpool-bench use the shared one).
$(E2E_OUT)/%: tests/e2e/%.c libkvlease/kvlease.h include/kvpool_proto.h \
		libkvlease/kvl_internal.h $(KVL_A) $(B)/lib/libkvkern.a
	@mkdir -p $(@D)
	$(CC) $(E2E_CFLAGS) $(CFLAGS_BASE) $< -o $@ $(KVL_A) \
		$(B)/lib/libkvkern.a $(E2E_XLIBS) -lpthread -ldl -lm

# e2e-prefix and e2e-tiers read the daemon's counters through the admin
# API.
$(E2E_OUT)/e2e-prefix: E2E_XLIBS := $(KVL_EXTRA_LIBS)
$(E2E_OUT)/e2e-tiers: E2E_XLIBS := $(KVL_EXTRA_LIBS)

ALL += $(E2E_PROGS)

E2E_TESTS := test-multi-tenant test-kill-tenant test-kill-daemon test-quota \
	     test-bad-not-held test-bad-outside-region test-bad-truncated \
	     test-bad-oversized test-bad-unknown-op test-lazy-backing \
	     test-example test-grow-fail test-reclaim test-privdrop \
	     test-sequences test-prefix-share test-prefix-cow \
	     test-prefix-collide test-prefix-tenants test-prefix-quota \
	     test-prefix-reclaim test-prefix-bad test-swap-roundtrip \
	     test-tier-quota test-swap-bad test-kill-swap
CHECK_PROGS += $(foreach t,$(E2E_TESTS),tests/e2e/$(t).sh)

# The same end-to-end run inside the VM, ledger in /dev/kvpool.
VM_EXTRA_PROGS += $(B)/bin/kvpoold $(E2E_PROGS)

.PHONY: e2e-check
e2e-check: $(B)/bin/kvpoold $(E2E_PROGS) $(B)/bin/kvlease-example
	@tests/run-tests.sh $(foreach t,$(E2E_TESTS),tests/e2e/$(t).sh)
CHECK_PROGS += tests/gpu/daemon-gpu.sh
