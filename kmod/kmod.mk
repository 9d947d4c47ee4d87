# SPDX-License-Identifier: MIT
#
# kvpool.ko, built with Kbuild against the kernels Debian 12 ships: 6.1
# (linux-image-amd64) and 6.12 (linux-image-6.12-amd64); what differs
# between the two is in kmod/compat.h.  The host's running kernel may
# differ: the VM suite boots each.  Kbuild writes next to its sources, so
# the sources are symlinked into a build directory and the tree stays
# clean.
#
#   make kmod        build $(B)/kmod/kvpool.ko for KVPOOL_KVER
#   make kmod-lint   build $(B)/kmod/<version>/kvpool.ko for every kernel
#                    of KVPOOL_KVERS with W=1 and sparse (C=2); any warning
#                    fails (the VM suite boots these: W=1 and C=2 change
#                    no code)
#
# KVPOOL_KSERIES (default "6.1 6.12") names the kernel series.  For each,
# the newest version that has both linux-headers and a /boot/vmlinuz image
# (not the cloud or rt flavours) goes into KVPOOL_KVERS, or the series
# into KVPOOL_KMISSING when there is none (make deps installs both).
# KVPOOL_KVER is the first (6.1) unless set; KDIR overrides its tree.

KVPOOL_KSERIES ?= 6.1 6.12
# The newest version of series $(1) with headers and an image.
kmod_newest = $(shell for d in $$(ls -d /usr/src/linux-headers-$(1).*-amd64 2>/dev/null | \
	grep -v -e '-cloud-amd64$$' -e '-rt-amd64$$' | sort -V -r); do \
	v=$$(basename $$d | sed 's/^linux-headers-//'); \
	[ -e /boot/vmlinuz-$$v ] && { echo $$v; break; }; done)
ifndef KVPOOL_KVERS
KVPOOL_KVERS := $(strip $(foreach s,$(KVPOOL_KSERIES),$(call kmod_newest,$(s))))
KVPOOL_KMISSING := $(strip $(foreach s,$(KVPOOL_KSERIES),$(if $(filter $(s).%,$(KVPOOL_KVERS)),,$(s))))
endif
ifndef KVPOOL_KVER
KVPOOL_KVER := $(firstword $(filter $(firstword $(KVPOOL_KSERIES)).%,$(KVPOOL_KVERS)))
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
	@test -d "$(KDIR)" || { echo "kmod: no kernel headers (KDIR=$(KDIR)); run make deps" >&2; exit 1; }
	$(call kmod_link,$(B)/kmod/obj)
	$(MAKE) -C $(KDIR) M=$(CURDIR)/$(B)/kmod/obj modules
	cp $(B)/kmod/obj/kvpool.ko $@

# The W=1 + sparse build of one kernel $(1), from scratch.
define kmod_lint_rule
$(B)/kmod/$(1)/kvpool.ko: $(KMOD_SRCS)
	@test -d /usr/src/linux-headers-$(1) || { echo "kmod-lint: no /usr/src/linux-headers-$(1)" >&2; exit 1; }
	$$(call kmod_link,$(B)/kmod/$(1)/obj)
	@rm -f $(B)/kmod/$(1)/obj/*.o $(B)/kmod/$(1)/obj/.*.cmd
	@$$(MAKE) -C /usr/src/linux-headers-$(1) M=$(CURDIR)/$(B)/kmod/$(1)/obj W=1 C=2 \
		modules >$(B)/kmod/$(1)/lint.log 2>&1 || { cat $(B)/kmod/$(1)/lint.log; exit 1; }
	@if grep -E 'warning:|error:' $(B)/kmod/$(1)/lint.log; then \
		echo "kmod-lint: FAILED (W=1, sparse, $(1)): see $(B)/kmod/$(1)/lint.log" >&2; exit 1; fi
	@cp $(B)/kmod/$(1)/obj/kvpool.ko $$@
	@echo "kmod-lint: clean (W=1 C=2, $(1))"
endef
$(foreach k,$(KVPOOL_KVERS),$(eval $(call kmod_lint_rule,$(k))))
KMOD_LINT_KOS := $(foreach k,$(KVPOOL_KVERS),$(B)/kmod/$(k)/kvpool.ko)

kmod-lint: $(KMOD_LINT_KOS)
	@if [ -n "$(KVPOOL_KMISSING)" ]; then \
		echo "kmod-lint: no kernel headers and image of $(KVPOOL_KMISSING) (make deps)" >&2; exit 1; fi

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
