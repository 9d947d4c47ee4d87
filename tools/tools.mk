# SPDX-License-Identifier: MIT
#
# tools/: kvpoolctl (the operator's tool) and kvpool-bench (the multi-tenant
# workload driver).
#   $(B)/bin/kvpoolctl     links tools/ctl_*.c, libkvlease/kvl_admin.c
#                          (its own copy of the object: it needs only the
#                          admin API) and include/kvpool_metrics.c (the
#                          series, shared with kvpoold) with libnl-genl-3
#   $(B)/bin/kvpool-bench  links libkvlease and libkvkern
#   make demo              builds what the demo needs and runs kvpool-bench

TOOLS_OBJ := $(B)/obj/tools
TOOLS_NL_CFLAGS := -DKVL_HAVE_LIBNL $(shell pkg-config --cflags libnl-genl-3.0 2>/dev/null || echo -I/usr/include/libnl3)
TOOLS_NL_LIBS := $(shell pkg-config --libs libnl-genl-3.0 2>/dev/null || echo -lnl-genl-3 -lnl-3)
TOOLS_CFLAGS = $(CPPFLAGS_BASE) -Itools -Ilibkvlease -Ikernels \
		$(TOOLS_NL_CFLAGS) $(CFLAGS_BASE)
TOOLS_HDRS := $(wildcard tools/*.h) libkvlease/kvlease.h include/kvpool_metrics.h \
	      $(B)/features \
	      include/kvpool_proto.h kmod/include/uapi/linux/kvpool.h

KVPOOLCTL := $(B)/bin/kvpoolctl
KVPOOLCTL_SRCS := kvpoolctl.c ctl_util.c ctl_plan.c ctl_status.c \
		  ctl_tenant.c ctl_monitor.c ctl_prefix.c ctl_cluster.c \
		  ctl_restart.c
KVPOOLCTL_OBJS := $(patsubst %.c,$(TOOLS_OBJ)/%.o,$(KVPOOLCTL_SRCS)) \
		  $(TOOLS_OBJ)/kvl_admin.o $(TOOLS_OBJ)/kvpool_metrics.o
KVPOOLCTL_LIBS :=

# libkvroute: the cluster view and routing (include/kvroute.h), over the
# cluster tier's own routing, keys and values (daemon/rcluster.c,
# daemon/cluster_value.c, daemon/prefix_index.c); with hiredis only.
ifeq ($(KVD_HAVE_HIREDIS),1)
KVR_OBJ := $(B)/obj/kvroute
KVR_SRCS := tools/kvroute.c daemon/rcluster.c daemon/cluster_value.c \
	    daemon/prefix_index.c
KVR_OBJS := $(patsubst %.c,$(KVR_OBJ)/%.o,$(notdir $(KVR_SRCS)))
KVR_HDRS := include/kvroute.h daemon/rcluster.h daemon/cluster_value.h \
	    daemon/prefix_index.h daemon/hash128.h
KVR_A := $(B)/lib/libkvroute.a
KVR_SO := $(B)/lib/libkvroute.so.1
KVR_LIBS := -lhiredis $(KVD_XXH_LIBS)
$(KVR_OBJ)/%.o: tools/%.c $(KVR_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(KVD_XXH_CPPFLAGS) $(CFLAGS_BASE) -c $< -o $@
$(KVR_OBJ)/%.o: daemon/%.c $(KVR_HDRS)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Idaemon $(KVD_XXH_CPPFLAGS) $(CFLAGS_BASE) -c $< -o $@
$(KVR_A): $(KVR_OBJS)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^
$(KVR_SO): $(KVR_OBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_BASE) $(LDFLAGS) -shared -Wl,-soname,libkvroute.so.1 \
		-o $@ $^ $(KVR_LIBS)
ALL += $(KVR_A) $(KVR_SO)
TOOLS_CFLAGS += -DKVL_HAVE_HIREDIS
KVPOOLCTL_OBJS += $(KVR_A)
KVPOOLCTL_LIBS += $(KVR_LIBS)
endif

$(TOOLS_OBJ)/%.o: tools/%.c $(TOOLS_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(TOOLS_OBJ)/kvl_admin.o: libkvlease/kvl_admin.c $(TOOLS_HDRS)
	@mkdir -p $(@D)
	$(CC) $(TOOLS_CFLAGS) -c $< -o $@

# The metrics series, shared with kvpoold's /metrics endpoint.
$(TOOLS_OBJ)/kvpool_metrics.o: include/kvpool_metrics.c include/kvpool_metrics.h \
		include/kvpool_proto.h
	@mkdir -p $(@D)
	$(CC) $(TOOLS_CFLAGS) -c $< -o $@

$(KVPOOLCTL): $(KVPOOLCTL_OBJS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(TOOLS_NL_LIBS) $(KVPOOLCTL_LIBS) -lm

ALL += $(KVPOOLCTL)

# kvpool-bench needs the client library (libkvlease/libkvlease.mk, included
# before this fragment); linked statically so it runs from the tree.
KVPOOL_BENCH := $(B)/bin/kvpool-bench
KVPOOL_BENCH_SRCS := kvpool-bench.c bench_worker.c bench_report.c \
		     bench_pressure.c ctl_util.c
KVPOOL_BENCH_OBJS := $(patsubst %.c,$(TOOLS_OBJ)/%.o,$(KVPOOL_BENCH_SRCS))
ifdef KVL_A
$(KVPOOL_BENCH): $(KVPOOL_BENCH_OBJS) $(KVL_A)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(KVPOOL_BENCH_OBJS) $(KVL_A) $(TOOLS_NL_LIBS) \
		-lpthread -lm

ALL += $(KVPOOL_BENCH)
endif

# The README's main command: build what the demo needs and run it.
DEMO_ARGS ?=
demo: $(KVPOOLCTL) $(KVPOOL_BENCH) $(B)/bin/kvpoold
	$(KVPOOL_BENCH) --out $(B)/demo $(DEMO_ARGS)

# The pressure benchmark: one reasoning trace per pressure policy on a top
# pool of half its peak demand (see kvpool-bench(1), tiers.rst).
PRESSURE_ARGS ?=
.PHONY: bench-pressure
bench-pressure: $(KVPOOL_BENCH) $(B)/bin/kvpoold
	$(KVPOOL_BENCH) pressure --out $(B)/bench-pressure $(PRESSURE_ARGS)

BENCH += bench-pressure

.PHONY: tools install-tools
tools: $(KVPOOLCTL) $(KVPOOL_BENCH)

install-tools: $(KVPOOLCTL) $(KVPOOL_BENCH)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man8
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0755 $(KVPOOLCTL) $(DESTDIR)$(PREFIX)/bin/
	if [ -x $(KVPOOL_BENCH) ]; then \
		install -m 0755 $(KVPOOL_BENCH) $(DESTDIR)$(PREFIX)/bin/; fi
	for f in Documentation/man/kvpoolctl*.8; do \
		[ -e "$$f" ] && install -m 0644 "$$f" $(DESTDIR)$(PREFIX)/share/man/man8/; \
	done; true
	for f in Documentation/man/kvpool-bench.1; do \
		[ -e "$$f" ] && install -m 0644 "$$f" $(DESTDIR)$(PREFIX)/share/man/man1/; \
	done; true

INSTALL_TGTS += install-tools
