# SPDX-License-Identifier: MIT
#
# kvpool.ko, built with Kbuild against Debian's 6.1 headers (the host's
# running kernel may differ: the VM suite boots the matching 6.1 image).
# Kbuild writes next to its sources, so the sources are symlinked into
# $(B)/kmod/obj and the tree stays clean.
#
#   make kmod        build $(B)/kmod/kvpool.ko
#   make kmod-lint   rebuild everything with W=1 and sparse (C=2); any
#                    warning fails
#
# KVPOOL_KVER picks the kernel (default: the newest 6.1 version that has
# both linux-headers and a /boot/vmlinuz image); KDIR overrides the tree.

ifndef KVPOOL_KVER
KVPOOL_KVER := $(shell for d in $$(ls -d /usr/src/linux-headers-6.1.*-amd64 2>/dev/null | sort -V -r); do \
	v=$$(basename $$d | sed 's/^linux-headers-//'); \
	[ -e /boot/vmlinuz-$$v ] && { echo $$v; break; }; done)
endif
KDIR ?= /usr/src/linux-headers-$(KVPOOL_KVER)
KMOD_SRCS := $(wildcard kmod/*.c kmod/*.h) kmod/Kbuild \
	     kmod/include/uapi/linux/kvpool.h
KMOD_KO := $(B)/kmod/kvpool.ko

# Link the sources into a build directory $(1) for Kbuild.
define kmod_link
	@mkdir -p $(1)
	@for f in $(KMOD_SRCS) kmod/include; do \
		ln -sfn $(CURDIR)/$$f $(1)/$$(basename $$f); done
endef

.PHONY: kmod kmod-lint

ifneq ($(KVPOOL_KVER),)
ALL += $(KMOD_KO)
endif

kmod: $(KMOD_KO)

$(KMOD_KO): $(KMOD_SRCS)
	@test -d "$(KDIR)" || { echo "kmod: no 6.1 kernel headers (KDIR=$(KDIR)); run make deps" >&2; exit 1; }
	$(call kmod_link,$(B)/kmod/obj)
	$(MAKE) -C $(KDIR) M=$(CURDIR)/$(B)/kmod/obj modules
	cp $(B)/kmod/obj/kvpool.ko $@

kmod-lint: $(KMOD_SRCS)
	@test -d "$(KDIR)" || { echo "kmod-lint: no 6.1 kernel headers (KDIR=$(KDIR))" >&2; exit 1; }
	$(call kmod_link,$(B)/kmod/lint)
	@rm -f $(B)/kmod/lint/*.o $(B)/kmod/lint/.*.cmd
	@$(MAKE) -C $(KDIR) M=$(CURDIR)/$(B)/kmod/lint W=1 C=2 modules \
		>$(B)/kmod/lint.log 2>&1 || { cat $(B)/kmod/lint.log; exit 1; }
	@if grep -E 'warning:|error:' $(B)/kmod/lint.log; then \
		echo "kmod-lint: FAILED (W=1, sparse): see $(B)/kmod/lint.log" >&2; exit 1; fi
	@echo "kmod-lint: clean (W=1 C=2, $(KVPOOL_KVER))"

# Install the module under /lib/modules/<version>/extra (run depmod on the
# target afterwards) and the UAPI header for programs that use the ioctls.
.PHONY: install-kmod
install-kmod:
	install -D -m 0644 kmod/include/uapi/linux/kvpool.h \
		$(DESTDIR)$(PREFIX)/include/linux/kvpool.h
	@if [ -f $(KMOD_KO) ]; then \
		install -D -m 0644 $(KMOD_KO) \
			$(DESTDIR)/lib/modules/$(KVPOOL_KVER)/extra/kvpool.ko; \
	else echo "install-kmod: $(KMOD_KO) not built: module not installed"; fi
INSTALL_TGTS += install-kmod
