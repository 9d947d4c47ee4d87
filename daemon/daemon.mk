# SPDX-License-Identifier: MIT
#
# daemon/: kvpoold, the pool owner and data-plane server.
#   $(B)/bin/kvpoold   links the ledger core (kmod/kvpool_ledger.c, compiled
#                      here), $(B)/lib/libkvkern.a, libpthread, libdl and,
#                      when its headers exist, libcap (without it --user,
#                      the privilege drop, is refused: the build says so).
# The cuda backend needs no CUDA toolkit (the driver is loaded at run time).

KVD_OBJ := $(B)/obj/daemon
KVD_SRCS := kvpoold.c server.c ledger.c backend_cpu.c backend_cuda.c \
	    cuda_chunks.c devbuf.c
KVD_OBJS := $(patsubst %.c,$(KVD_OBJ)/%.o,$(KVD_SRCS)) $(KVD_OBJ)/kvpool_ledger.o
KVD_HDRS := daemon/kvpoold.h daemon/inproc.h daemon/cuda_chunks.h \
	    include/kvpool_proto.h include/kvpool_cuda.h \
	    kernels/kvkern.h kernels/kvkern_cuda.h kernels/cuda_drv.h \
	    kmod/kvpool_ledger.h kmod/kvpool_ledger_user.h \
	    kmod/include/uapi/linux/kvpool.h
KVD_HAVE_LIBCAP := $(shell test -f /usr/include/sys/capability.h && echo 1)
KVD_CPPFLAGS := $(CPPFLAGS_BASE) -Idaemon
KVD_LIBS := $(B)/lib/libkvkern.a -lpthread -ldl -lm
ifeq ($(KVD_HAVE_LIBCAP),1)
KVD_CPPFLAGS += -DKVD_HAVE_LIBCAP
KVD_LIBS += -lcap
endif
# the chunk code alone, for tests/gpu/bench-kvk-gpu
KVD_CHUNKS_OBJ := $(KVD_OBJ)/cuda_chunks.o

$(KVD_OBJ)/%.o: daemon/%.c $(KVD_HDRS)
	@mkdir -p $(@D)
	$(CC) $(KVD_CPPFLAGS) $(CFLAGS_BASE) -c $< -o $@

$(KVD_OBJ)/kvpool_ledger.o: kmod/kvpool_ledger.c kmod/kvpool_ledger.h kmod/kvpool_ledger_user.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_BASE) $(CFLAGS_BASE) -c $< -o $@

$(B)/bin/kvpoold: $(KVD_OBJS) $(B)/lib/libkvkern.a
	@mkdir -p $(@D)
ifneq ($(KVD_HAVE_LIBCAP),1)
	@echo "daemon: no <sys/capability.h> (libcap): kvpoold is built without --user (privilege drop)"
endif
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
