# libFuzzer builds of every fuzz/fuzz_*.c, run from the top-level Makefile:
#   make fuzz [FUZZ_SECONDS=60] [FUZZERS="frame allowlist"]
# The library sources are compiled again with clang and the fuzzer, address
# and undefined-behaviour sanitizers into build/fuzz-clang/. Each fuzzer runs
# for FUZZ_SECONDS from its committed seeds (fuzz/corpus/NAME/, read only)
# plus the inputs it found before (build/fuzz-clang/corpus/NAME/, where new
# ones go, so the committed seeds stay a small, meaningful set) and writes
# crashing inputs to fuzz/crashes/NAME/, which the replays in `make check`
# then run for ever after. The closing line counts fuzzers with new crashes.

FUZZ_SECONDS ?= 60
FCC      := clang
FBUILD   := build/fuzz-clang
MULTIARCH := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null)
PKG_CONFIG := env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=$(if $(MULTIARCH),/usr/lib/$(MULTIARCH)/pkgconfig:)/usr/share/pkgconfig:/usr/lib/pkgconfig /usr/bin/pkg-config
PKGS     := libseccomp jansson libcurl python3-embed
DEP_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null | sed 's/-I/-isystem /g')
DEP_LIBS   := $(shell $(PKG_CONFIG) --libs libseccomp jansson 2>/dev/null)
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
            -fno-omit-frame-pointer
FCFLAGS  := -O1 -g -std=c11 -D_GNU_SOURCE -Iinclude -Isrc/lib -Isrc/common -Isrc/cli -Isrc/mcp $(DEP_CFLAGS) $(SANFLAGS)

# The guest module (guest.c, its table and the runtime, linked with
# libpython) is the gcc build's, included as bytes by guest_blob.c: no
# fuzzer starts a template.
GUEST_OWN_SRC := src/lib/template/guest.c src/lib/template/guest_module.c \
                 src/lib/template/guest_heap.c
GUEST_SO := build/guest/airlock-guest.so
LIB_SRC  := $(filter-out $(GUEST_OWN_SRC),$(sort $(wildcard src/lib/*/*.c))) src/cli/options.c \
            src/mcp/tenants.c src/mcp/sha256.c src/mcp/tenant_gen.c src/common/base.c \
            src/common/jsonrpc.c src/common/trace.c src/common/curl_dl.c
# EXTRA_OBJ: objects from the gcc build linked in uninstrumented, for a source
# clang cannot compile at the moment (drop it from LIB_SRC on the command line).
EXTRA_OBJ ?=
LIB_OBJ  := $(LIB_SRC:%.c=$(FBUILD)/%.o) $(EXTRA_OBJ)
FUZZERS  ?= $(patsubst fuzz/fuzz_%.c,%,$(sort $(wildcard fuzz/fuzz_*.c)))
FUZZ_BIN := $(FUZZERS:%=$(FBUILD)/fuzz_%)

.PHONY: fuzz fuzz-build
# Keep the clang objects between runs (they are intermediates of a chain).
.SECONDARY:
fuzz: fuzz-build
	@new=0; for n in $(FUZZERS); do \
	    mkdir -p fuzz/corpus/$$n fuzz/crashes/$$n $(FBUILD)/corpus/$$n; \
	    before=$$(ls fuzz/crashes/$$n | wc -l); \
	    echo "== fuzz_$$n for $(FUZZ_SECONDS) s"; \
	    $(FBUILD)/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	        -print_final_stats=0 -artifact_prefix=fuzz/crashes/$$n/ $(FBUILD)/corpus/$$n fuzz/corpus/$$n \
	        >$(FBUILD)/fuzz_$$n.log 2>&1; \
	    rc=$$?; \
	    after=$$(ls fuzz/crashes/$$n | wc -l); \
	    echo "fuzz_$$n: $$(grep -E '^Done [0-9]+ runs' $(FBUILD)/fuzz_$$n.log | tail -n 1)"; \
	    if [ $$after -gt $$before ] || [ $$rc -ne 0 ]; then \
	        new=$$((new + 1)); \
	        echo "fuzz_$$n: NEW CRASH (rc $$rc), see $(FBUILD)/fuzz_$$n.log and fuzz/crashes/$$n/"; \
	        grep -E 'ERROR: |SUMMARY: ' $(FBUILD)/fuzz_$$n.log | head -5; \
	    fi; \
	done; \
	echo "fuzz: $(words $(FUZZERS)) fuzzers, $$new with new crashes"; \
	[ $$new -eq 0 ]

fuzz-build: $(FUZZ_BIN)

$(FBUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CLANG   $<"
	@$(FCC) $(FCFLAGS) -c $< -o $@

$(GUEST_SO): FORCE
	@$(MAKE) --no-print-directory -f Makefile $@
$(FBUILD)/src/lib/template/guest_blob.o: $(GUEST_SO)
$(FBUILD)/src/lib/template/guest_blob.o: FCFLAGS += -DGUEST_MODULE_PATH='"$(GUEST_SO)"'
.PHONY: FORCE
FORCE:

$(FBUILD)/fuzz_%: fuzz/fuzz_%.c $(LIB_OBJ)
	@echo "  FUZZER  $@"
	@$(FCC) $(FCFLAGS) -fsanitize=fuzzer -o $@ $< $(LIB_OBJ) $(DEP_LIBS) -lpthread
