# SPDX-License-Identifier: MIT
#
# The Debian packages.
#   make deb    dpkg-buildpackage -us -uc -b on a copy of the tree in
#               $(B)/deb/kvpool-VERSION (the tree stays clean), packages in
#               $(B)/deb: kvpool-dkms, kvpoold, libkvlease1, libkvlease-dev,
#               kvpool-tools, python3-kvpool; then lintian, which must report no error
#               ($(B)/deb/lintian.log).  Rebuilt when a file that goes
#               into a package (or its build) changes; the tests do not.
#   $(B)/deb-test  the same packages for the package test (tests/pkg/pkg.mk
#               installs them into a Debian 12 root in `make check`), made
#               from this tree's build instead of a second one: the copy's
#               build/ gets $(B)/obj, the static libraries and the fatbin
#               with their times, and debian/rules (KVPOOL_PREBUILT=1)
#               reuses them: make rebuilds what depends on the
#               installation paths ($(B)/paths: a few objects, the unit,
#               the .pc) and links the programs and the shared library
#               with dpkg-buildflags' LDFLAGS.  The objects keep the tree's
#               CFLAGS (`make deb` compiles with dpkg-buildflags'); no
#               dbgsym packages.  Lintian checks them the same way.

DEB_VERSION := $(shell dpkg-parsechangelog -l debian/changelog -S Version 2>/dev/null)
DEB_ARCH := $(shell dpkg --print-architecture 2>/dev/null)
DEB_OUT := $(B)/deb
DEB_SRC := $(DEB_OUT)/kvpool-$(DEB_VERSION)
DEB_CHANGES := $(DEB_OUT)/kvpool_$(DEB_VERSION)_$(DEB_ARCH).changes
DEB_NAMES := kvpool-dkms_$(DEB_VERSION)_all kvpoold_$(DEB_VERSION)_$(DEB_ARCH) \
	     libkvlease1_$(DEB_VERSION)_$(DEB_ARCH) \
	     libkvlease-dev_$(DEB_VERSION)_$(DEB_ARCH) \
	     kvpool-tools_$(DEB_VERSION)_$(DEB_ARCH) \
	     python3-kvpool_$(DEB_VERSION)_all
DEB_FILES := $(patsubst %,$(DEB_OUT)/%.deb,$(DEB_NAMES))
# The tree as git sees it (tracked and new files, not the ignored ones),
# and the part of it the packages are made of.
DEB_TREE := $(filter-out $(B)/%,$(wildcard $(shell git ls-files --cached \
	--others --exclude-standard 2>/dev/null)))
DEB_INPUTS := $(filter Makefile debian/% daemon/% libkvlease/% kernels/% \
	kmod/% tools/% include/% Documentation/man/% LICENSES/% \
	python/python.mk python/kvpool/%,$(DEB_TREE))

# Copy the tree (DEB_TREE) into $(1) with cp $(2): the list goes through a
# file, as it is longer than one command line may be when make runs every
# recipe line through a shell (make check's timing does).
define deb_copy_tree
	$(file >$(B)/deb-tree.list,$(DEB_TREE))
	@xargs cp $(2) --parents -t $(1) <$(B)/deb-tree.list
	@rm -f $(B)/deb-tree.list
endef

.PHONY: deb
deb: $(DEB_CHANGES)

$(DEB_CHANGES): $(DEB_INPUTS)
	@test -n "$(firstword $(DEB_TREE))" || { echo "deb: needs a git checkout" >&2; exit 1; }
	@command -v dpkg-buildpackage >/dev/null || { echo "deb: no dpkg-buildpackage (make deps)" >&2; exit 1; }
	rm -rf $(DEB_SRC) $(DEB_OUT)/*.deb $(DEB_OUT)/*.changes $(DEB_OUT)/*.buildinfo
	mkdir -p $(DEB_SRC)
	@echo "deb: copying the tree to $(DEB_SRC)"
	$(call deb_copy_tree,$(DEB_SRC))
	cd $(DEB_SRC) && dpkg-buildpackage -us -uc -b >../build.log 2>&1 || \
		{ tail -n 60 ../build.log; echo "deb: dpkg-buildpackage failed: $(DEB_OUT)/build.log" >&2; exit 1; }
	rm -rf $(DEB_SRC)
	lintian --fail-on error --tag-display-limit 0 $@ >$(DEB_OUT)/lintian.log 2>&1 || \
		{ cat $(DEB_OUT)/lintian.log; rm -f $@; echo "deb: lintian reports errors" >&2; exit 1; }
	@cat $(DEB_OUT)/lintian.log
	@echo "deb: $(notdir $(DEB_FILES)) in $(DEB_OUT)"

$(DEB_FILES): $(DEB_CHANGES)

DEB_TEST_OUT := $(B)/deb-test
DEB_TEST_SRC := $(DEB_TEST_OUT)/kvpool-$(DEB_VERSION)
DEB_TEST_CHANGES := $(DEB_TEST_OUT)/kvpool_$(DEB_VERSION)_$(DEB_ARCH).changes
# What the packages hold, built here (and what it is made of).
DEB_PREBUILT := $(B)/bin/kvpoold $(KVPOOLCTL) $(KVPOOL_BENCH) $(KVL_SO) \
	$(KVL_A) $(KVK_LIB) $(if $(filter 1,$(HAVE_NVCC)),$(KVK_FATBIN))

$(DEB_TEST_CHANGES): $(DEB_INPUTS) $(DEB_PREBUILT)
	@test -n "$(firstword $(DEB_TREE))" || { echo "deb: needs a git checkout" >&2; exit 1; }
	@command -v dpkg-buildpackage >/dev/null || { echo "deb: no dpkg-buildpackage (make deps)" >&2; exit 1; }
	rm -rf $(DEB_TEST_OUT)
	mkdir -p $(DEB_TEST_SRC)/build/lib
	@echo "deb: copying the tree and its build to $(DEB_TEST_SRC)"
	$(call deb_copy_tree,$(DEB_TEST_SRC),-p)
	@cp -a $(B)/obj $(DEB_TEST_SRC)/build/
	@cp -a $(KVK_LIB) $(KVL_A) $(filter $(KVK_FATBIN),$(DEB_PREBUILT)) $(DEB_TEST_SRC)/build/lib/
	cd $(DEB_TEST_SRC) && KVPOOL_PREBUILT=1 DEB_BUILD_OPTIONS=noddebs \
		dpkg-buildpackage -us -uc -b -nc >../build.log 2>&1 || \
		{ tail -n 60 ../build.log; echo "deb: dpkg-buildpackage failed: $(DEB_TEST_OUT)/build.log" >&2; exit 1; }
	rm -rf $(DEB_TEST_SRC)
	lintian --fail-on error --tag-display-limit 0 $@ >$(DEB_TEST_OUT)/lintian.log 2>&1 || \
		{ cat $(DEB_TEST_OUT)/lintian.log; rm -f $@; echo "deb: lintian reports errors" >&2; exit 1; }
	@cat $(DEB_TEST_OUT)/lintian.log
	@echo "deb: the packages of the package test in $(DEB_TEST_OUT)"
