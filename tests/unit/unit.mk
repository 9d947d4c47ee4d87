# SPDX-License-Identifier: MIT
#
# The ledger core in user space: libkvledger.a, its cmocka unit tests, the
# randomized model test (normal and ASan/UBSan builds) and the benchmarks:
# kvpool-bench-ledger (the core) and kvpool-bench-lease (a lease through
# libkvlease, daemon socket or /dev/kvpool), both run by make bench-ledger.
# the cmocka test of kvpoold's configuration parser (daemon/config.c, with
# libinih), normal and ASan/UBSan.

LEDGER_SRC := kmod/kvpool_ledger.c
LEDGER_HDR := kmod/kvpool_ledger.h kmod/kvpool_ledger_user.h \
	      kmod/include/uapi/linux/kvpool.h
LEDGER_TESTS := test_ledger test_ledger_model test_ledger_move test_ledger_keep

# The daemon's object of the core (daemon/daemon.mk; the same flags).
$(KVD_OBJ)/kvpool_ledger.o: $(LEDGER_HDR)

$(B)/lib/libkvledger.a: $(KVD_OBJ)/kvpool_ledger.o
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(B)/asan/obj/kvpool_ledger.o: $(LEDGER_SRC) $(LEDGER_HDR)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) $(SAN_FLAGS) -c $< -o $@

$(B)/tests/unit/%: tests/unit/%.c tests/unit/ledger_test.h $(B)/lib/libkvledger.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) $< $(B)/lib/libkvledger.a \
		-lcmocka -o $@

$(B)/asan/tests/unit/%: tests/unit/%.c tests/unit/ledger_test.h $(B)/asan/obj/kvpool_ledger.o
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) $(SAN_FLAGS) $< \
		$(B)/asan/obj/kvpool_ledger.o -lcmocka -o $@

# The sanitizer builds run through a wrapper that sets ASAN/UBSAN options.
$(B)/asan/tests/unit/%.sh: $(B)/asan/tests/unit/%
	@printf '#!/bin/sh\nexec env $(ASAN_ENV) %s "$$@"\n' "$(abspath $<)" > $@
	@chmod +x $@

$(B)/bin/kvpool-bench-ledger: tests/bench/bench_ledger.c $(B)/lib/libkvledger.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) $< $(B)/lib/libkvledger.a \
		-lpthread -o $@

# kvpoold's configuration parser.
CONFIG_TEST_DEPS := tests/unit/test_config.c daemon/config.c daemon/config.h \
		    daemon/cluster_conf.c daemon/cluster_conf.h \
		    daemon/tier_spec.c $(KVD_HDRS) $(LEDGER_HDR)
CONFIG_TEST_CPPFLAGS := $(CPPFLAGS_BASE) -Idaemon -DKVD_HAVE_INIH

$(B)/tests/unit/test_config: $(CONFIG_TEST_DEPS) $(B)/lib/libkvledger.a
	@mkdir -p $(@D)
	$(CC) $(CONFIG_TEST_CPPFLAGS) $(CFLAGS_BASE) tests/unit/test_config.c \
		daemon/config.c daemon/tier_spec.c daemon/cluster_conf.c \
		$(B)/lib/libkvledger.a \
		-linih -lcmocka -o $@

$(B)/asan/tests/unit/test_config: $(CONFIG_TEST_DEPS) $(B)/asan/obj/kvpool_ledger.o
	@mkdir -p $(@D)
	$(CC) $(CONFIG_TEST_CPPFLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) \
		tests/unit/test_config.c daemon/config.c daemon/tier_spec.c \
		daemon/cluster_conf.c $(B)/asan/obj/kvpool_ledger.o -linih -lcmocka -o $@

LEDGER_TESTS += test_config

# Linked with the static libkvlease so that the VM can run it from /bin.
$(B)/bin/kvpool-bench-lease: tests/bench/bench_lease.c libkvlease/kvlease.h \
		$(KVL_A) $(B)/lib/libkvkern.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ilibkvlease $(CFLAGS_BASE) $< -o $@ $(KVL_A) \
		$(B)/lib/libkvkern.a $(KVL_EXTRA_LIBS) -lpthread -ldl -lm

ALL += $(B)/lib/libkvledger.a $(B)/bin/kvpool-bench-ledger \
       $(B)/bin/kvpool-bench-lease
VM_EXTRA_PROGS += $(B)/bin/kvpool-bench-lease
CHECK_PROGS += $(addprefix $(B)/tests/unit/,$(LEDGER_TESTS)) \
	       $(addsuffix .sh,$(addprefix $(B)/asan/tests/unit/,$(LEDGER_TESTS)))

.PHONY: bench-ledger check-ledger
bench-ledger: $(B)/bin/kvpool-bench-ledger $(B)/bin/kvpool-bench-lease \
		$(B)/bin/kvpoold
	B=$(B) tests/bench/bench-ledger.sh

check-ledger: $(addprefix $(B)/tests/unit/,$(LEDGER_TESTS)) \
	      $(addsuffix .sh,$(addprefix $(B)/asan/tests/unit/,$(LEDGER_TESTS)))
	@tests/run-tests.sh $^

BENCH += bench-ledger
