# SPDX-License-Identifier: MIT
#
# daemon/: kvpoold, the pool owner and data-plane server.
#   $(B)/bin/kvpoold   links the ledger core (kmod/kvpool_ledger.c, compiled
#                      here), the metrics series (include/kvpool_metrics.c),
#                      $(B)/lib/libkvkern.a, libpthread, libdl and, when
#                      their headers exist, libxxhash (prefix-cache keys;
#                      without it daemon/hash128.h stands in), libcap
#                      (without it --user, the privilege drop, is
#                      refused), liburing (pread/pwrite otherwise), libinih
#                      (without it no kvpoold.conf), libmicrohttpd (without
#                      it no /metrics), libnl-genl-3 (without it no
#                      tenants in the module's pools) and libhiredis (the
#                      cluster tier's client; without it a configured
#                      cluster tier is refused), libsystemd (the service
#                      manager's fd store: without it the in-process
#                      ledger keeps nothing across a restart).  The build
#                      says what it left out; `make deps` installs them
#                      all.
#   $(B)/daemon/kvpoold.service   the unit with this build's paths
# The cuda backend needs no CUDA toolkit (the driver is loaded at run time).

KVD_OBJ := $(B)/obj/daemon
KVD_SRCS := core.c main.c server.c conn.c ops.c ledger.c backend_cpu.c backend_cuda.c \
	    cuda_chunks.c devbuf.c prefix.c prefix_index.c tier.c tier_spec.c \
	    tier_dram.c tier_nvme.c swap.c config.c tenants.c reload.c metrics.c \
	    scrub.c cluster.c cluster_conf.c cluster_value.c prefix_tier.c \
	    keep.c restart.c hostmem.c prefix_keep.c ledger_keep.c
KVD_OBJS = $(patsubst %.c,$(KVD_OBJ)/%.o,$(KVD_SRCS)) \
	    $(KVD_OBJ)/kvpool_ledger.o $(KVD_OBJ)/kvpool_metrics.o
KVD_HDRS := $(B)/features daemon/core.h daemon/kvpoold.h daemon/inproc.h daemon/cuda_chunks.h \
	    daemon/ledger.h daemon/tier.h daemon/tier_spec.h daemon/tenants.h \
	    daemon/reload.h daemon/metrics.h daemon/server.h daemon/conn.h \
	    daemon/ops.h daemon/devbuf.h \
	    daemon/prefix.h daemon/prefix_index.h daemon/hash128.h \
	    daemon/swap.h daemon/config.h daemon/scrub.h daemon/keep.h daemon/restart.h daemon/ledger_keep.h daemon/hostmem.h include/kvpool_proto.h \
	    daemon/cluster.h daemon/cluster_conf.h daemon/cluster_value.h \
	    daemon/prefix_tier.h daemon/prefix_keep.h \
	    daemon/rcluster.h \
	    include/kvpool_metrics.h include/kvpool_cuda.h \
	    kernels/kvkern.h kernels/kvkern_cuda.h kernels/cuda_drv.h \
	    kmod/kvpool_ledger.h kmod/kvpool_ledger_user.h \
	    kmod/include/uapi/linux/kvpool.h
# Optional libraries: KVD_FEAT_CPPFLAGS and KVD_FEAT_LIBS say which this
# build has (the sanitizer, -O0 and fuzz builds of the daemon use them too).
KVD_HAVE_LIBCAP := $(shell test -f /usr/include/sys/capability.h && echo 1)
KVD_HAVE_XXHASH := $(shell test -f /usr/include/xxhash.h && echo 1)
KVD_HAVE_INIH := $(shell test -f /usr/include/ini.h && echo 1)
KVD_HAVE_MHD := $(shell test -f /usr/include/microhttpd.h && echo 1)
KVD_HAVE_LIBNL := $(shell test -f /usr/include/libnl3/netlink/genl/genl.h && echo 1)
KVD_HAVE_URING := $(shell pkg-config --exists liburing 2>/dev/null && echo 1)
KVD_HAVE_HIREDIS := $(shell test -f /usr/include/hiredis/hiredis.h && echo 1)
KVD_HAVE_SYSTEMD := $(shell pkg-config --exists libsystemd 2>/dev/null && echo 1)
KVD_FEAT_CPPFLAGS :=
KVD_FEAT_LIBS :=
ifeq ($(KVD_HAVE_XXHASH),1)
KVD_XXH_CPPFLAGS := -DKVD_HAVE_XXHASH
KVD_XXH_LIBS := -lxxhash
KVD_FEAT_CPPFLAGS += $(KVD_XXH_CPPFLAGS)
KVD_FEAT_LIBS += $(KVD_XXH_LIBS)
endif
ifeq ($(KVD_HAVE_LIBCAP),1)
KVD_FEAT_CPPFLAGS += -DKVD_HAVE_LIBCAP
KVD_FEAT_LIBS += -lcap
endif
ifeq ($(KVD_HAVE_URING),1)
KVD_FEAT_LIBS += $(shell pkg-config --libs liburing)
else
KVD_FEAT_CPPFLAGS += -DKVD_NO_URING
endif
ifeq ($(KVD_HAVE_SYSTEMD),1)
KVD_FEAT_CPPFLAGS += -DKVD_HAVE_SYSTEMD
KVD_SD_LIBS := $(shell pkg-config --libs libsystemd)
KVD_FEAT_LIBS += $(KVD_SD_LIBS)
endif
ifeq ($(KVD_HAVE_INIH),1)
KVD_FEAT_CPPFLAGS += -DKVD_HAVE_INIH
KVD_FEAT_LIBS += -linih
endif
ifeq ($(KVD_HAVE_MHD),1)
KVD_FEAT_CPPFLAGS += -DKVD_HAVE_MHD
KVD_FEAT_LIBS += -lmicrohttpd
endif
ifeq ($(KVD_HAVE_HIREDIS),1)
KVD_SRCS += rcluster.c
KVD_FEAT_CPPFLAGS += -DKVD_HAVE_HIREDIS
KVD_FEAT_LIBS += -lhiredis
endif
ifeq ($(KVD_HAVE_LIBNL),1)
KVD_FEAT_CPPFLAGS += -DKVD_HAVE_LIBNL $(shell pkg-config --cflags libnl-genl-3.0 2>/dev/null || echo -I/usr/include/libnl3)
KVD_FEAT_LIBS += $(shell pkg-config --libs libnl-genl-3.0 2>/dev/null || echo -lnl-genl-3 -lnl-3)
endif
KVD_CPPFLAGS := $(CPPFLAGS_BASE) -Idaemon $(KVD_FEAT_CPPFLAGS) \
		-DKVD_CONF_DEFAULT='"$(SYSCONFDIR)/kvpool/kvpoold.conf"'
KVD_LIBS := $(B)/lib/libkvkern.a $(KVD_FEAT_LIBS) -lpthread -ldl -lm
# the chunk code alone, for tests/gpu/bench-kvk-gpu
KVD_CHUNKS_OBJ := $(KVD_OBJ)/cuda_chunks.o

$(KVD_OBJ)/%.o: daemon/%.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) -c $< -o $@

# The files that use the configuration's path depend on the installation
# paths (the Makefile's $(B)/paths).
$(patsubst daemon/%.c,$(KVD_OBJ)/%.o,$(shell grep -l KVD_CONF_DEFAULT \
	$(addprefix daemon/,$(KVD_SRCS)))): $(B)/paths

$(KVD_OBJ)/kvpool_ledger.o: kmod/kvpool_ledger.c kmod/kvpool_ledger.h kmod/kvpool_ledger_user.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) -c $< -o $@

$(KVD_OBJ)/kvpool_metrics.o: include/kvpool_metrics.c include/kvpool_metrics.h \
		include/kvpool_proto.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) -c $< -o $@

$(B)/bin/kvpoold: $(KVD_OBJS) $(B)/lib/libkvkern.a
	@mkdir -p $(@D)
ifneq ($(KVD_HAVE_LIBCAP),1)
	@echo "daemon: no <sys/capability.h> (libcap): kvpoold is built without --user (privilege drop)"
endif
ifneq ($(KVD_HAVE_XXHASH),1)
	@echo "daemon: no <xxhash.h> (libxxhash): prefix-cache keys use the built-in 128-bit hash (daemon/hash128.h)"
endif
ifneq ($(KVD_HAVE_URING),1)
	@echo "daemon: no liburing (pkg-config): the nvme tier uses pread/pwrite"
endif
ifneq ($(KVD_HAVE_INIH),1)
	@echo "daemon: no <ini.h> (libinih): kvpoold reads no configuration file"
endif
ifneq ($(KVD_HAVE_SYSTEMD),1)
	@echo "daemon: no libsystemd (pkg-config): in-process, nothing outlives kvpoold (no fd store)"
endif
ifneq ($(KVD_HAVE_MHD),1)
	@echo "daemon: no <microhttpd.h> (libmicrohttpd): kvpoold serves no /metrics"
endif
ifneq ($(KVD_HAVE_LIBNL),1)
	@echo "daemon: no libnl-genl-3 headers: kvpoold manages no tenants in the module's pools"
endif
ifneq ($(KVD_HAVE_HIREDIS),1)
	@echo "daemon: no <hiredis/hiredis.h> (libhiredis-dev): kvpoold refuses a cluster tier"
endif
	$(CC) $(CFLAGS_BASE) $(LDFLAGS) -o $@ $(KVD_OBJS) $(KVD_LIBS)

ALL += $(B)/bin/kvpoold

# The unit and the configuration with this build's paths.
$(B)/daemon/kvpoold.service: daemon/kvpoold.service.in $(B)/paths
	@mkdir -p $(@D)
	sed -e 's|@SBINDIR@|$(PREFIX)/sbin|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' $< >$@

ALL += $(B)/daemon/kvpoold.service

# The configuration is installed only where none exists (never replaced).
.PHONY: install-daemon
install-daemon: $(B)/bin/kvpoold $(B)/daemon/kvpoold.service
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(UDEVDIR) $(DESTDIR)$(PREFIX)/share/man/man8 \
		$(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(SYSCONFDIR)/kvpool
	install -m 755 $(B)/bin/kvpoold $(DESTDIR)$(PREFIX)/sbin/
	install -m 644 $(B)/daemon/kvpoold.service $(DESTDIR)$(UNITDIR)/
	install -m 644 daemon/60-kvpool.rules $(DESTDIR)$(UDEVDIR)/
	install -m 644 Documentation/man/kvpoold.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 644 Documentation/man/kvpoold.conf.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	[ -e $(DESTDIR)$(SYSCONFDIR)/kvpool/kvpoold.conf ] || \
		install -m 644 daemon/kvpoold.conf $(DESTDIR)$(SYSCONFDIR)/kvpool/

INSTALL_TGTS += install-daemon

# The daemon's floors (Documentation/daemon.rst, "Floors"): no file of
# daemon/ includes a header of a higher floor, nor calls into its object.
CHECK_PROGS += $(B)/tests/unit/daemon-floors.sh
$(B)/tests/unit/daemon-floors.sh: tests/unit/test-daemon-floors.sh $(KVD_OBJS)
	@mkdir -p $(@D)
	@printf '#!/bin/sh\n# generated by daemon/daemon.mk\nexec %s -c %s\n' \
		"$(abspath tests/unit/test-daemon-floors.sh)" "$(abspath $(KVD_OBJ))" >$@
	@chmod +x $@

# The prefix cache's index alone (cmocka), normal and sanitizer builds.
$(B)/tests/unit/test_prefix_index: tests/unit/test_prefix_index.c \
		daemon/prefix_index.c daemon/prefix_index.h daemon/hash128.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(KVD_XXH_CPPFLAGS) $(CFLAGS_BASE) $< \
		daemon/prefix_index.c -lcmocka $(KVD_XXH_LIBS) -o $@

$(B)/asan/tests/unit/test_prefix_index: tests/unit/test_prefix_index.c \
		daemon/prefix_index.c daemon/prefix_index.h daemon/hash128.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(KVD_XXH_CPPFLAGS) $(CFLAGS_BASE) \
		$(SAN_FLAGS) $< daemon/prefix_index.c -lcmocka $(KVD_XXH_LIBS) -o $@

# and with daemon/hash128.h, what a build without libxxhash headers uses
$(B)/tests/unit/test_prefix_index_h128: tests/unit/test_prefix_index.c \
		daemon/prefix_index.c daemon/prefix_index.h daemon/hash128.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(CFLAGS_BASE) $(SAN_FLAGS) $< \
		daemon/prefix_index.c -lcmocka -o $@

CHECK_PROGS += $(B)/tests/unit/test_prefix_index \
	       $(B)/asan/tests/unit/test_prefix_index.sh \
	       $(B)/tests/unit/test_prefix_index_h128

# The block tags that decide what is zeroed between tenants (cmocka),
# normal and sanitizer builds.
$(B)/tests/unit/test_scrub: tests/unit/test_scrub.c daemon/scrub.c daemon/keep.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) $< daemon/scrub.c daemon/keep.c -lcmocka \
		$(KVD_SD_LIBS) -lpthread -o $@

$(B)/asan/tests/unit/test_scrub: tests/unit/test_scrub.c daemon/scrub.c daemon/keep.c \
		$(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) $< daemon/scrub.c daemon/keep.c \
		-lcmocka $(KVD_SD_LIBS) -lpthread -o $@

CHECK_PROGS += $(B)/tests/unit/test_scrub $(B)/asan/tests/unit/test_scrub.sh

# The cuda backend's lock, taken in turn (cmocka), normal and sanitizer
# builds.
$(B)/tests/unit/test_turn_lock: tests/unit/test_turn_lock.c daemon/turn_lock.h
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) $< -lcmocka -lpthread -o $@

$(B)/asan/tests/unit/test_turn_lock: tests/unit/test_turn_lock.c daemon/turn_lock.h
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) $< -lcmocka -lpthread -o $@

CHECK_PROGS += $(B)/tests/unit/test_turn_lock $(B)/asan/tests/unit/test_turn_lock.sh

# The region that keeps the prefix index across a restart (cmocka), normal
# and sanitizer builds.
$(B)/tests/unit/test_prefix_keep: tests/unit/test_prefix_keep.c daemon/prefix_keep.c \
		$(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) $< daemon/prefix_keep.c -lcmocka -o $@

$(B)/asan/tests/unit/test_prefix_keep: tests/unit/test_prefix_keep.c \
		daemon/prefix_keep.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) $< daemon/prefix_keep.c \
		-lcmocka -o $@

CHECK_PROGS += $(B)/tests/unit/test_prefix_keep \
	       $(B)/asan/tests/unit/test_prefix_keep.sh

# The cluster tier's routing (against scripted cluster nodes on loopback
# sockets) and its values, normal and sanitizer builds.
RCL_TEST_DEPS := tests/unit/test_rcluster.c daemon/rcluster.c daemon/rcluster.h
CVAL_TEST_DEPS := tests/unit/test_cluster_value.c daemon/cluster_value.c \
		  daemon/cluster_value.h daemon/prefix_index.h daemon/hash128.h
$(B)/tests/unit/test_cluster_value: $(CVAL_TEST_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(KVD_XXH_CPPFLAGS) $(CFLAGS_BASE) $< \
		daemon/cluster_value.c -lcmocka $(KVD_XXH_LIBS) -o $@
$(B)/asan/tests/unit/test_cluster_value: $(CVAL_TEST_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(KVD_XXH_CPPFLAGS) $(CFLAGS_BASE) \
		$(SAN_FLAGS) $< daemon/cluster_value.c -lcmocka $(KVD_XXH_LIBS) -o $@
CHECK_PROGS += $(B)/tests/unit/test_cluster_value \
	       $(B)/asan/tests/unit/test_cluster_value.sh
ifeq ($(KVD_HAVE_HIREDIS),1)
$(B)/tests/unit/test_rcluster: $(RCL_TEST_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(CFLAGS_BASE) $< daemon/rcluster.c \
		-lcmocka -lhiredis -lpthread -o $@
$(B)/asan/tests/unit/test_rcluster: $(RCL_TEST_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(CFLAGS_BASE) $(SAN_FLAGS) $< \
		daemon/rcluster.c -lcmocka -lhiredis -lpthread -o $@
CHECK_PROGS += $(B)/tests/unit/test_rcluster \
	       $(B)/asan/tests/unit/test_rcluster.sh
endif

# make bench-prefix: the prefix cache under 8 replicas of one tenant, cache
# off and on in one run (tests/bench/bench_prefix.c starts its own kvpoold).
KVPOOL_BENCH_PREFIX := $(B)/bin/kvpool-bench-prefix
$(KVPOOL_BENCH_PREFIX): tests/bench/bench_prefix.c daemon/prefix_index.c \
		daemon/prefix_index.h libkvlease/kvlease.h $(KVL_A)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ilibkvlease -Idaemon $(KVD_XXH_CPPFLAGS) \
		$(CFLAGS_BASE) $< daemon/prefix_index.c -o $@ $(KVL_A) \
		$(KVL_EXTRA_LIBS) $(KVD_XXH_LIBS) -lpthread -lm

ALL += $(KVPOOL_BENCH_PREFIX)

.PHONY: bench-prefix
bench-prefix: $(KVPOOL_BENCH_PREFIX) $(B)/bin/kvpoold
	$(KVPOOL_BENCH_PREFIX) -d $(B)/bin/kvpoold

BENCH += bench-prefix

# make bench-scrub: zeroing freed blocks between tenants, per pool, against
# memset in the same run (tests/bench/bench_scrub.c starts its own kvpoold).
KVPOOL_BENCH_SCRUB := $(B)/bin/kvpool-bench-scrub
$(KVPOOL_BENCH_SCRUB): tests/bench/bench_scrub.c libkvlease/kvlease.h \
		$(KVL_A) $(B)/lib/libkvkern.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ilibkvlease $(CFLAGS_BASE) $< -o $@ $(KVL_A) \
		$(B)/lib/libkvkern.a $(KVL_EXTRA_LIBS) -lpthread -ldl -lm

ALL += $(KVPOOL_BENCH_SCRUB)

.PHONY: bench-scrub
bench-scrub: $(KVPOOL_BENCH_SCRUB) $(B)/bin/kvpoold
	$(KVPOOL_BENCH_SCRUB) -d $(B)/bin/kvpoold

BENCH += bench-scrub

# make bench-cluster: prefix blocks between two nodes through a Redis
# Cluster started for the run (tests/bench/bench-cluster.sh drives
# kvpool-bench-cluster, tests/bench/bench_cluster.c).
ifeq ($(KVD_HAVE_HIREDIS),1)
KVPOOL_BENCH_CLUSTER := $(B)/bin/kvpool-bench-cluster
$(KVPOOL_BENCH_CLUSTER): tests/bench/bench_cluster.c daemon/rcluster.c \
		daemon/rcluster.h daemon/cluster_value.c daemon/cluster_value.h \
		libkvlease/kvlease.h $(KVL_A)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ilibkvlease -Idaemon $(KVD_XXH_CPPFLAGS) \
		$(CFLAGS_BASE) $< daemon/rcluster.c daemon/cluster_value.c \
		-o $@ $(KVL_A) $(KVL_EXTRA_LIBS) -lhiredis $(KVD_XXH_LIBS) \
		-lpthread -lm

ALL += $(KVPOOL_BENCH_CLUSTER)

.PHONY: bench-cluster
bench-cluster: $(KVPOOL_BENCH_CLUSTER) $(B)/bin/kvpoold $(B)/tests/e2e/e2e-cluster \
		$(B)/tests/e2e/e2e-util $(B)/tests/e2e/e2e-tenant
	tests/bench/bench-cluster.sh

BENCH += bench-cluster
endif

# The daemon as a build whose kept metadata region has another version:
# a restart onto it is an upgrade that must refuse the region
# (tests/vm/guest.d/restart-module.sh).
$(KVD_OBJ)/restart-metav2.o: daemon/restart.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) -DKVD_META_VERSION=2 $(CFLAGS_BASE) -c $< -o $@

KVD_METAV2_OBJS = $(filter-out $(KVD_OBJ)/restart.o,$(KVD_OBJS)) \
		  $(KVD_OBJ)/restart-metav2.o
$(B)/tests/bin/kvpoold-metav2: $(KVD_METAV2_OBJS) $(B)/lib/libkvkern.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) $(LDFLAGS) -o $@ $(KVD_METAV2_OBJS) $(KVD_LIBS)

ALL += $(B)/tests/bin/kvpoold-metav2
VM_EXTRA_PROGS += $(B)/tests/bin/kvpoold-metav2

# make bench-restart: a kill -9 of kvpoold under four decoding tenants,
# with the pool memory kept and without it, rounds interleaved
# (tests/bench/bench_restart.c).  With the module where /dev/kvpool
# exists and this runs as root; in-process otherwise, under the keeper.
KVPOOL_BENCH_RESTART := $(B)/bin/kvpool-bench-restart
$(KVPOOL_BENCH_RESTART): tests/bench/bench_restart.c libkvlease/kvlease.h \
		$(KVL_A)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ilibkvlease $(CFLAGS_BASE) $< -o $@ $(KVL_A) \
		$(KVL_EXTRA_LIBS) -lpthread -lm

ALL += $(KVPOOL_BENCH_RESTART)
VM_EXTRA_PROGS += $(KVPOOL_BENCH_RESTART)

.PHONY: bench-restart
bench-restart: $(KVPOOL_BENCH_RESTART) $(B)/bin/kvpoold $(B)/tests/e2e/e2e-tenant
	@if [ -c /dev/kvpool ] && [ "$$(id -u)" = 0 ]; then \
		$(KVPOOL_BENCH_RESTART) --daemon $(B)/bin/kvpoold \
			--tenant $(B)/tests/e2e/e2e-tenant --ledger module; \
	else \
		$(KVPOOL_BENCH_RESTART) --daemon $(B)/bin/kvpoold \
			--tenant $(B)/tests/e2e/e2e-tenant --ledger inproc \
			$(if $(KVPOOL_KEEPER),--keeper $(KVPOOL_KEEPER)); \
	fi

BENCH += bench-restart
