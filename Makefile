# airlock: GNU make and pkg-config. `make` builds, `make check` runs every test,
# `make demo` runs the bundled example, `make bench` measures, `make fuzz`
# fuzzes. Missing Debian packages are installed by scripts/deps.sh.

BUILD     ?= build
SAN       ?=
CC        ?= cc
# Debian's pkg-config and Debian's .pc files, whatever else is first on PATH.
PKG_CONFIG := env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/share/pkgconfig:/usr/lib/pkgconfig /usr/bin/pkg-config
PKGS      := libseccomp jansson libcurl python3-embed
# libcurl is opened at run time (see src/lib/host/gateway.c): its headers only.
LINK_PKGS := libseccomp jansson python3-embed

WARN := -Wall -Wextra -Werror -Wformat=2 -Wshadow -Wpointer-arith -Wmissing-prototypes \
        -Wstrict-prototypes -Wundef -Wvla -Werror=implicit-function-declaration \
        -Werror=return-type -Werror=incompatible-pointer-types -Werror=int-conversion \
        -Wno-missing-field-initializers -Wno-unused-parameter
HARDEN := -fstack-protector-strong -fPIC -D_FORTIFY_SOURCE=2
ifeq ($(SAN),asan)
  BUILD := build/asan
  HARDEN := -fPIC -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDSAN := -fsanitize=address,undefined
endif

DEP_CFLAGS = $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null | sed 's/-I/-isystem /g')
DEP_LIBS   = $(shell $(PKG_CONFIG) --libs $(LINK_PKGS) 2>/dev/null)

CFLAGS  ?= -O2 -g
# The program's bytes are readable in the guest (it runs them): its debug
# information and __FILE__ name sources relative to the repository, never by
# the host path of the build folder.
CFLAGS  += -std=c11 -D_GNU_SOURCE -fvisibility=hidden -Iinclude -Isrc/common -Isrc/lib $(WARN) $(HARDEN) \
           $(DEP_CFLAGS) -MMD -MP -ffile-prefix-map=$(CURDIR)=.
LDFLAGS += -Wl,-z,relro,-z,now -Wl,-z,noexecstack $(LDSAN)
LIBS    = $(DEP_LIBS) -lpthread

LIB_SRC  := $(sort $(wildcard src/common/*.c src/lib/*/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/guest_runtime.o
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TEST_HELPERS := $(sort $(wildcard tests/helpers/*.c))
TEST_HELPER_BIN := $(TEST_HELPERS:tests/helpers/%.c=$(BUILD)/tests/%)

.PHONY: all deps check demo bench soak fuzz asan format format-check clean install-deps
all: $(BUILD)/airlock $(BUILD)/libairlock.so $(BUILD)/libairlock.a

# Dependencies: a stamp per profile, so the check runs once per build tree.
DEPS_STAMP := build/.deps-build
$(DEPS_STAMP): scripts/deps.sh
	@mkdir -p build
	@bash scripts/deps.sh build
	@touch $@
build/.deps-%: scripts/deps.sh
	@mkdir -p build
	@bash scripts/deps.sh $*
	@touch $@

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -c $< -o $@

# The command line is built on the public API alone: without -Isrc/lib, an
# include of the library's internals does not compile.
$(BUILD)/src/cli/%.o: src/cli/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(filter-out -Isrc/lib,$(CFLAGS)) -c $< -o $@

# The guest runtime is Python source compiled into the library as a byte
# array, after the protocol constants generated from the host's tables.
RUNTIME_SRC := src/guest/runtime.py src/guest/gen_wire.c src/lib/core/wire_table.h \
               scripts/embed_runtime.sh
$(BUILD)/gen/guest_runtime.c: $(RUNTIME_SRC)
	@echo "  GEN     $@"
	@sh scripts/embed_runtime.sh '$(CC)' $@
$(BUILD)/gen/guest_runtime.o: $(BUILD)/gen/guest_runtime.c
	$(CC) -c $< -o $@ -fPIC

$(BUILD)/libairlock.a: $(LIB_OBJ)
	@rm -f $@.tmp
	@ar rcs $@.tmp $^ && mv $@.tmp $@

$(BUILD)/libairlock.so: $(LIB_OBJ)
	@echo "  CCLD    $@"
	@$(CC) -shared -o $@ $^ $(LDFLAGS) $(LIBS)

$(BUILD)/airlock: $(CLI_OBJ) $(BUILD)/libairlock.a
	@echo "  CCLD    $@"
	@$(CC) -o $@ $(CLI_OBJ) $(BUILD)/libairlock.a $(LDFLAGS) $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libairlock.a build/.deps-check
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libairlock.a $(LDFLAGS) $(LIBS) -lcmocka

$(BUILD)/tests/%: tests/helpers/%.c $(BUILD)/libairlock.a build/.deps-check
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libairlock.a $(LDFLAGS) $(LIBS)

# Fuzz corpus replays: each fuzzer's entry point built as a plain program.
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_REPLAY_BIN := $(FUZZ_SRC:fuzz/fuzz_%.c=$(BUILD)/fuzz/replay_%)
FUZZ_CLI_OBJ := $(addprefix $(BUILD)/src/cli/,options.o mcp_parse.o)
$(BUILD)/fuzz/replay_%: fuzz/fuzz_%.c fuzz/replay_main.c $(FUZZ_CLI_OBJ) $(BUILD)/libairlock.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Isrc/cli -DFUZZ_NAME='"$*"' -DFUZZ_DIR='"$(CURDIR)/fuzz"' -o $@ \
		fuzz/fuzz_$*.c fuzz/replay_main.c $(FUZZ_CLI_OBJ) $(BUILD)/libairlock.a $(LDFLAGS) $(LIBS)

tests: all $(TEST_BIN) $(TEST_HELPER_BIN) $(FUZZ_REPLAY_BIN)

check: build/.deps-check
	@$(MAKE) --no-print-directory tests
	@$(MAKE) --no-print-directory SAN=asan tests
	@bash tests/run.sh $(BUILD)

asan:
	@$(MAKE) --no-print-directory SAN=asan tests

demo: build/.deps-demo all
	@bash examples/demo.sh $(BUILD)/airlock

bench: build/.deps-bench all
	@bash bench/run.sh $(BUILD) $(if $(QUICK),--quick)

soak: build/.deps-check
	@$(MAKE) --no-print-directory SAN=asan all build/asan/tests/soak
	@bash tests/soak.sh build/asan

fuzz: build/.deps-fuzz
	@$(MAKE) --no-print-directory -f fuzz/fuzz.mk fuzz FUZZ_SECONDS=$(or $(FUZZ_SECONDS),60)

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' 2>/dev/null || find include src tests fuzz bench -name '*.[ch]')
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
