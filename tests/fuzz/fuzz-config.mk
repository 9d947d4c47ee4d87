# SPDX-License-Identifier: MIT
#
# tests/fuzz/: kvpoold's configuration parser (daemon/config.c) under
# libFuzzer.
#   make fuzz-config     build $(B)/tests/fuzz/fuzz-config (clang, libFuzzer,
#                        ASan/UBSan) and fuzz for FUZZ_SECONDS (default 60)
#                        from tests/fuzz/corpus/config (new inputs go to
#                        $(B)/tests/fuzz/corpus-config; copy the useful ones
#                        into the source corpus)
#   make check           replays the corpus with the gcc ASan/UBSan build
#                        ($(B)/tests/fuzz/replay-config)

FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_OUT := $(B)/tests/fuzz
FUZZ_CONFIG_SRCS := tests/fuzz/fuzz_config.c daemon/config.c \
		    daemon/tier_spec.c kmod/kvpool_ledger.c
FUZZ_CONFIG_DEPS := $(FUZZ_CONFIG_SRCS) daemon/config.h daemon/kvpoold.h \
		    $(LEDGER_HDR)
FUZZ_CPPFLAGS := $(CPPFLAGS_BASE) -Idaemon -DKVD_HAVE_INIH

$(FUZZ_OUT)/fuzz-config: $(FUZZ_CONFIG_DEPS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CPPFLAGS) -std=gnu11 -g -O1 \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		$(FUZZ_CONFIG_SRCS) -linih -o $@

$(FUZZ_OUT)/replay-config: $(FUZZ_CONFIG_DEPS) tests/fuzz/replay_main.c
	@mkdir -p $(@D)
	$(CC) $(FUZZ_CPPFLAGS) $(CFLAGS_BASE) $(SAN_FLAGS) \
		tests/fuzz/replay_main.c $(FUZZ_CONFIG_SRCS) -linih -o $@

$(FUZZ_OUT)/replay-config.sh: $(FUZZ_OUT)/replay-config
	@printf '#!/bin/sh\nexec env $(ASAN_ENV) %s %s\n' "$(abspath $<)" \
		"$(CURDIR)/tests/fuzz/corpus/config" >$@
	@chmod +x $@

CHECK_PROGS += $(FUZZ_OUT)/replay-config.sh

.PHONY: fuzz-config
fuzz-config: $(FUZZ_OUT)/fuzz-config
	@mkdir -p $(FUZZ_OUT)/corpus-config
	$(FUZZ_OUT)/fuzz-config -max_total_time=$(FUZZ_SECONDS) \
		-dict=tests/fuzz/config.dict -max_len=4096 \
		$(FUZZ_OUT)/corpus-config tests/fuzz/corpus/config
