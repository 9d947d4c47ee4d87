# SPDX-License-Identifier: MIT
#
# daemon/: kvpoold, the pool owner and data-plane server.
#   $(B)/bin/kvpoold   links the ledger core (kmod/kvpool_ledger.c, compiled
#                      here), $(B)/lib/libkvkern.a, libxxhash (prefix-cache
#                      keys), libcap, liburing (when its headers are
#                      installed; pread/pwrite otherwise), libpthread, libdl

KVD_CUDA_INC := /usr/local/cuda/include
KVD_HAVE_CUDA := $(shell test -f $(KVD_CUDA_INC)/cuda.h && grep -qs "^int kvk_cuda_init" kernels/kvkern_cuda.c && echo 1)
KVD_OBJ := $(B)/obj/daemon
KVD_SRCS := kvpoold.c server.c ledger.c backend_cpu.c backend_cuda.c \
	    prefix.c prefix_index.c tier.c tier_dram.c tier_nvme.c swap.c
KVD_OBJS := $(patsubst %.c,$(KVD_OBJ)/%.o,$(KVD_SRCS)) $(KVD_OBJ)/kvpool_ledger.o
KVD_HDRS := daemon/kvpoold.h daemon/inproc.h daemon/prefix.h \
	    daemon/prefix_index.h daemon/swap.h include/kvpool_proto.h \
	    kernels/kvkern.h kmod/kvpool_ledger.h kmod/kvpool_ledger_user.h \
	    kmod/include/uapi/linux/kvpool.h
ifeq ($(KVD_HAVE_CUDA),1)
KVD_CPPFLAGS := $(CPPFLAGS_BASE) -Idaemon -I$(KVD_CUDA_INC)
else
KVD_CPPFLAGS := $(CPPFLAGS_BASE) -Idaemon -DKVD_NO_CUDA
endif
KVD_HAVE_URING := $(shell pkg-config --exists liburing 2>/dev/null && echo 1)
ifeq ($(KVD_HAVE_URING),1)
KVD_URING_LIBS := $(shell pkg-config --libs liburing)
else
KVD_CPPFLAGS += -DKVD_NO_URING
KVD_URING_LIBS :=
endif
KVD_LIBS := $(B)/lib/libkvkern.a -lxxhash -lcap $(KVD_URING_LIBS) -lpthread \
	    -ldl -lm

$(KVD_OBJ)/backend_cuda.o: $(wildcard kernels/kvkern_cuda.c kernels/kvkern_cuda.h)

$(KVD_OBJ)/%.o: daemon/%.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) -c $< -o $@

$(KVD_OBJ)/kvpool_ledger.o: kmod/kvpool_ledger.c kmod/kvpool_ledger.h kmod/kvpool_ledger_user.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) -c $< -o $@

$(B)/bin/kvpoold: $(KVD_OBJS) $(B)/lib/libkvkern.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) -o $@ $(KVD_OBJS) $(KVD_LIBS)

ALL += $(B)/bin/kvpoold

.PHONY: install-daemon
install-daemon: $(B)/bin/kvpoold
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/lib/systemd/system \
		$(DESTDIR)$(PREFIX)/lib/udev/rules.d $(DESTDIR)$(PREFIX)/share/man/man8
	install -m 755 $(B)/bin/kvpoold $(DESTDIR)$(PREFIX)/sbin/
	install -m 644 daemon/kvpoold.service $(DESTDIR)$(PREFIX)/lib/systemd/system/
	install -m 644 daemon/60-kvpool.rules $(DESTDIR)$(PREFIX)/lib/udev/rules.d/
	install -m 644 Documentation/man/kvpoold.8 $(DESTDIR)$(PREFIX)/share/man/man8/

INSTALL_TGTS += install-daemon

# The prefix cache's index alone (cmocka), normal and sanitizer builds.
$(B)/tests/unit/test_prefix_index: tests/unit/test_prefix_index.c \
		daemon/prefix_index.c daemon/prefix_index.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(CFLAGS_BASE) $< daemon/prefix_index.c \
		-lcmocka -lxxhash -o $@

$(B)/asan/tests/unit/test_prefix_index: tests/unit/test_prefix_index.c \
		daemon/prefix_index.c daemon/prefix_index.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(CFLAGS_BASE) $(SAN_FLAGS) $< \
		daemon/prefix_index.c -lcmocka -lxxhash -o $@

CHECK_PROGS += $(B)/tests/unit/test_prefix_index \
	       $(B)/asan/tests/unit/test_prefix_index.sh

# make bench-prefix: the prefix cache under 8 replicas of one tenant, cache
# off and on in one run (tests/bench/bench_prefix.c starts its own kvpoold).
KVPOOL_BENCH_PREFIX := $(B)/bin/kvpool-bench-prefix
$(KVPOOL_BENCH_PREFIX): tests/bench/bench_prefix.c daemon/prefix_index.c \
		daemon/prefix_index.h libkvlease/kvlease.h $(KVL_A)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ilibkvlease -Idaemon $(CFLAGS_BASE) $< \
		daemon/prefix_index.c -o $@ $(KVL_A) $(KVL_EXTRA_LIBS) \
		-lxxhash -lpthread -lm

ALL += $(KVPOOL_BENCH_PREFIX)

.PHONY: bench-prefix
bench-prefix: $(KVPOOL_BENCH_PREFIX) $(B)/bin/kvpoold
	$(KVPOOL_BENCH_PREFIX) -d $(B)/bin/kvpoold

BENCH += bench-prefix
