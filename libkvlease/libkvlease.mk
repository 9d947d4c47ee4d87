# SPDX-License-Identifier: MIT
#
# libkvlease/: the client library.
#   $(B)/lib/libkvlease.so.1 (+ libkvlease.so link)  exported symbols per
#                                                    libkvlease/kvlease.map
#   $(B)/lib/libkvlease.a
#   $(B)/lib/pkgconfig/kvlease.pc
#   $(B)/bin/kvlease-example                         the example program
# libkvlease/kvl_admin.c (the admin API: netlink or the daemon socket) is
# compiled in when it exists; its netlink transport when libnl-genl-3's
# headers exist (without them, admin ops always go to kvpoold's socket:
# the build says so).  kvl_dev.c (device buffers for GPU tenants) loads
# the CUDA driver with dlopen(): no link-time dependency.

KVL_OBJ := $(B)/obj/libkvlease
KVL_SRCS := kvl.c kvl_seq.c kvl_dev.c kvl_prefix.c kvl_tier.c kvl_policy.c kvl_edit.c \
	    $(notdir $(wildcard libkvlease/kvl_admin.c))
KVL_OBJS := $(patsubst %.c,$(KVL_OBJ)/%.o,$(KVL_SRCS))
KVL_HDRS := $(B)/features libkvlease/kvlease.h libkvlease/kvl_internal.h \
	    include/kvpool_proto.h include/kvpool_cuda.h \
	    kmod/include/uapi/linux/kvpool.h
KVL_CPPFLAGS := $(CPPFLAGS_BASE) -Ilibkvlease
KVL_HAVE_LIBNL := $(shell (pkg-config --exists libnl-genl-3.0 2>/dev/null || \
	test -f /usr/include/libnl3/netlink/genl/genl.h) && echo 1)
ifneq ($(wildcard libkvlease/kvl_admin.c),)
ifeq ($(KVL_HAVE_LIBNL),1)
KVL_CPPFLAGS += -DKVL_HAVE_LIBNL $(shell pkg-config --cflags libnl-genl-3.0 2>/dev/null || echo -I/usr/include/libnl3)
KVL_EXTRA_LIBS := $(shell pkg-config --libs libnl-genl-3.0 2>/dev/null || echo -lnl-genl-3 -lnl-3)
endif
endif
KVL_SO := $(B)/lib/libkvlease.so.1
KVL_A := $(B)/lib/libkvlease.a
KVL_PC := $(B)/lib/pkgconfig/kvlease.pc
# Programs linking the shared library find it next to them in the tree.
KVL_LINK = -L$(B)/lib -lkvlease -Wl,-rpath,'$$ORIGIN/../lib:$$ORIGIN/../../lib'

$(KVL_OBJ)/%.o: libkvlease/%.c $(KVL_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVL_CPPFLAGS) $(CFLAGS_BASE) -c $< -o $@

$(KVL_SO): $(KVL_OBJS) libkvlease/kvlease.map
	@mkdir -p $(@D)
ifneq ($(KVL_HAVE_LIBNL),1)
	@echo "libkvlease: no libnl-genl-3 headers: built without the netlink admin transport"
endif
	$(CC) $(CFLAGS_BASE) $(LDFLAGS) -shared -Wl,-soname,libkvlease.so.1 \
		-Wl,--version-script=libkvlease/kvlease.map -Wl,-z,defs \
		-o $@ $(KVL_OBJS) $(KVL_EXTRA_LIBS) -ldl -lm
	ln -sf libkvlease.so.1 $(B)/lib/libkvlease.so

$(KVL_A): $(KVL_OBJS)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

$(KVL_PC): libkvlease/kvlease.pc.in $(B)/paths
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' $< > $@

$(B)/bin/kvlease-example: libkvlease/example.c libkvlease/kvlease.h $(KVL_SO)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) -Ilibkvlease $(CFLAGS_BASE) $< -o $@ $(KVL_LINK) -lm

ALL += $(KVL_SO) $(KVL_A) $(KVL_PC) $(B)/bin/kvlease-example

.PHONY: install-libkvlease
install-libkvlease: $(KVL_SO) $(KVL_A) $(KVL_PC)
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/kvpool $(DESTDIR)$(PREFIX)/share/man/man3
	install -m 644 $(KVL_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf libkvlease.so.1 $(DESTDIR)$(LIBDIR)/libkvlease.so
	install -m 644 $(KVL_A) $(DESTDIR)$(LIBDIR)/
	install -m 644 $(KVL_PC) $(DESTDIR)$(LIBDIR)/pkgconfig/
	install -m 644 libkvlease/kvlease.h $(DESTDIR)$(PREFIX)/include/kvpool/
	for f in Documentation/man/kvl_*.3; do \
		[ -e "$$f" ] && install -m 644 "$$f" $(DESTDIR)$(PREFIX)/share/man/man3/; \
	done; true

INSTALL_TGTS += install-libkvlease
