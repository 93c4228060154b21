# airlock: GNU make and pkg-config. `make` builds, `make check` runs every test,
# `make check-unit` only the unit tests that need no sandbox, `make demo` runs
# the bundled example, `make bench` measures, `make fuzz` fuzzes, `make install`
# installs. Missing Debian packages are installed by scripts/deps.sh, and only
# by the targets that say so (deps, demo, check, check-unit, bench, soak,
# fuzz): plain `make` and the test binaries' rules only verify them, and stop
# with one line naming what is missing.

BUILD     ?= build
SAN       ?=
CC        ?= cc
# Debian's pkg-config and Debian's .pc files, whatever else is first on PATH.
# The multiarch folder is the machine's own (x86_64-linux-gnu, aarch64-linux-gnu...).
MULTIARCH := $(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || $(CC) -print-multiarch 2>/dev/null)
PKG_CONFIG := env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=$(if $(MULTIARCH),/usr/lib/$(MULTIARCH)/pkgconfig:)/usr/share/pkgconfig:/usr/lib/pkgconfig /usr/bin/pkg-config
PKGS      := libseccomp jansson libcurl python3-embed libmicrohttpd
# libcurl is opened at run time (see src/lib/host/gateway.c): its headers only.
# libpython is linked by the guest module alone (GUEST_LIBS, below).
LINK_PKGS := libseccomp jansson

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
# Only the command line serves HTTP (airlock serve): the library never links
# it, and the command line opens libmicrohttpd when `airlock serve` starts
# (src/mcp/http/mhd.c), so that no other command, and no sandbox's template (this
# program executed again), loads it and what it brings: its headers only.
CLI_LIBS =

# The shared library's name: its SONAME changes only when the ABI breaks.
VERSION := $(shell sed -n 's/^\#define AIRLOCK_VERSION "\(.*\)"/\1/p' include/airlock.h)
SOMAJOR := 0
SONAME  := libairlock.so.$(SOMAJOR)
SOFILE  := libairlock.so.$(VERSION)

# The guest module: the embedded interpreter (guest.c) and its table
# (guest_module.c), a shared object of its own linked with libpython, which
# the library embeds (guest_blob.c) and the template alone loads
# (src/lib/template/guest_load.c): no other process of the library's loads
# libpython. With it, the few helpers of the base and the channel it calls,
# and the guest runtime's code; --gc-sections drops the rest of them.
GUEST_OWN_SRC := src/lib/template/guest.c src/lib/template/guest_heap.c src/lib/template/guest_module.c
GUEST_SRC := $(GUEST_OWN_SRC) src/common/base.c src/lib/core/channel.c
GUEST_OBJ := $(GUEST_SRC:%.c=$(BUILD)/guest/%.o) $(BUILD)/gen/guest_runtime.o
GUEST_SO  := $(BUILD)/guest/airlock-guest.so
GUEST_LIBS = $(shell $(PKG_CONFIG) --libs python3-embed jansson 2>/dev/null)

LIB_SRC  := $(filter-out $(GUEST_OWN_SRC),$(sort $(wildcard src/common/*.c src/lib/*/*.c)))
# The command line (src/cli, a file per command) and the MCP server it runs
# (src/mcp: the JSON-RPC core, sessions, resources, stdio; src/mcp/http: HTTP).
# With the Jupyter kernel (src/kernel), which opens libzmq at run time as
# serve opens libmicrohttpd (src/kernel/kzmq.c): its headers only.
CLI_SRC  := $(sort $(wildcard src/cli/*.c src/mcp/*.c src/mcp/http/*.c src/kernel/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
# Test tiers by what they need: tests/unit/ runs anywhere (no namespaces, no
# root, no sandbox), tests/sandbox/ starts real sandboxes. Both build into
# $(BUILD)/tests/, one binary per file.
UNIT_TEST_SRC    := $(sort $(wildcard tests/unit/test_*.c))
SANDBOX_TEST_SRC := $(sort $(wildcard tests/sandbox/test_*.c))
UNIT_TEST_BIN    := $(UNIT_TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
SANDBOX_TEST_BIN := $(SANDBOX_TEST_SRC:tests/sandbox/%.c=$(BUILD)/tests/%)
TEST_BIN := $(UNIT_TEST_BIN) $(SANDBOX_TEST_BIN)
TEST_HELPERS := $(sort $(wildcard tests/helpers/*.c))
TEST_HELPER_BIN := $(TEST_HELPERS:tests/helpers/%.c=$(BUILD)/tests/%)

.PHONY: all deps check check-quick check-unit tests demo bench soak fuzz asan format format-check clean \
        install uninstall
all: $(BUILD)/airlock $(BUILD)/libairlock.so $(BUILD)/libairlock.a

# Dependencies. A stamp per profile records that its packages were present:
# the rules below only verify (scripts/deps.sh --verify never installs). The
# targets that install call `scripts/deps.sh PROFILE` in their own recipe,
# before anything that needs the stamp, so installing is never a side effect
# of building a file.
DEPS_STAMP := build/.deps-build
build/.deps-%: scripts/deps.sh
	@mkdir -p build
	@bash scripts/deps.sh --verify $*
	@touch $@
# A stamp is no intermediate file: make must not delete it after the build.
.PRECIOUS: build/.deps-%
INSTALL_DEPS = bash scripts/deps.sh
# `make deps` installs what `make check` needs (a superset of the build's and
# the demo's); DEPS=bench or DEPS=fuzz for those.
DEPS ?= check
deps:
	@$(INSTALL_DEPS) $(DEPS)

$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CFLAGS) -c $< -o $@

# The command line and the MCP server are built on the public API alone:
# without -Isrc/lib, an include of the library's internals does not compile.
CLI_CFLAGS = $(filter-out -Isrc/lib,$(CFLAGS)) -Isrc/cli -Isrc/mcp -Isrc/kernel
$(BUILD)/src/cli/%.o: src/cli/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CLI_CFLAGS) -c $< -o $@
$(BUILD)/src/mcp/%.o: src/mcp/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CLI_CFLAGS) -c $< -o $@
$(BUILD)/src/kernel/%.o: src/kernel/%.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(CLI_CFLAGS) -c $< -o $@
# The kernel's Python side, which the assembler includes (.incbin).
$(BUILD)/src/kernel/driver_blob.o: src/kernel/driver.py

# The guest runtime is Python source compiled into the library as a byte
# array, after the protocol constants generated from the host's tables.
RUNTIME_SRC := src/guest/runtime.py src/guest/gen_wire.c src/lib/core/wire_table.h \
               scripts/embed_runtime.sh
# With it, its bytecode, compiled by the Python of the embedded libpython's
# version (Debian's /usr/bin/python3), so that the template loads it rather
# than compiling it at every start; another version embeds none.
RUNTIME_PYTHON ?= /usr/bin/python3
PY_EMBED_VERSION = $(shell $(PKG_CONFIG) --modversion python3-embed 2>/dev/null)
$(BUILD)/gen/guest_runtime.c: $(RUNTIME_SRC)
	@echo "  GEN     $@"
	@sh scripts/embed_runtime.sh '$(CC)' $@ '$(RUNTIME_PYTHON)' '$(PY_EMBED_VERSION)'
$(BUILD)/gen/guest_runtime.o: $(BUILD)/gen/guest_runtime.c
	$(CC) -c $< -o $@ -fPIC

$(BUILD)/guest/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $< (guest module)"
	@$(CC) $(CFLAGS) -ffunction-sections -fdata-sections -c $< -o $@
# Every template writes the module into a memfd: the program carries it
# without its debug information (GUEST_SO); the linked module, with it, is
# $(GUEST_SO:.so=.debug.so), for gdb.
STRIP ?= strip
$(GUEST_SO:.so=.debug.so): $(GUEST_OBJ) src/lib/template/guest.map
	@echo "  CCLD    $@"
	@$(CC) -shared -o $@ $(GUEST_OBJ) -Wl,--gc-sections -Wl,--no-undefined \
		-Wl,--version-script=src/lib/template/guest.map $(LDFLAGS) $(GUEST_LIBS)
$(GUEST_SO): $(GUEST_SO:.so=.debug.so)
	@$(STRIP) --strip-debug -o $@.tmp $< && mv $@.tmp $@
# The library includes the module's bytes (guest_blob.c) by a path relative
# to the repository, so that no host path is in the program.
$(BUILD)/src/lib/template/guest_blob.o: $(GUEST_SO)
$(BUILD)/src/lib/template/guest_blob.o: CFLAGS += -DGUEST_MODULE_PATH='"$(GUEST_SO)"'

$(BUILD)/libairlock.a: $(LIB_OBJ)
	@rm -f $@.tmp
	@ar rcs $@.tmp $^ && mv $@.tmp $@

# The shared library exports the public API only: -fvisibility=hidden keeps
# everything not marked AIRLOCK_PUBLIC inside, and the version script
# (src/lib/libairlock.map) keeps out anything else a linked object exports,
# such as the generated guest runtime's bytes.
$(BUILD)/$(SOFILE): $(LIB_OBJ) src/lib/libairlock.map
	@echo "  CCLD    $@"
	@$(CC) -shared -o $@ $(LIB_OBJ) -Wl,-soname,$(SONAME) \
		-Wl,--version-script=src/lib/libairlock.map $(LDFLAGS) $(LIBS)
$(BUILD)/$(SONAME): $(BUILD)/$(SOFILE)
	@ln -sfn $(SOFILE) $@
$(BUILD)/libairlock.so: $(BUILD)/$(SONAME)
	@ln -sfn $(SONAME) $@

$(BUILD)/airlock: $(CLI_OBJ) $(BUILD)/libairlock.a
	@echo "  CCLD    $@"
	@$(CC) -o $@ $(CLI_OBJ) $(BUILD)/libairlock.a $(LDFLAGS) $(LIBS) $(CLI_LIBS)

# Test programs are compiled and linked in one step; -MMD writes their .d
# next to them (included at the end), so a header edit rebuilds them too.
# $(1): the extra libraries (cmocka for the tests, none for the helpers).
define link_test
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libairlock.a $(LDFLAGS) $(LIBS) $(1)
endef
# The MCP server's core driven without a process: the command line's
# objects but main().
CLI_CORE_OBJ := $(filter-out $(BUILD)/src/cli/main.o,$(CLI_OBJ))
$(BUILD)/tests/test_mcp_core: tests/sandbox/test_mcp_core.c $(CLI_CORE_OBJ) $(BUILD)/libairlock.a | build/.deps-check
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Itests -Isrc/cli -Isrc/mcp -DREPO_DIR='"$(CURDIR)"' -o $@ $< $(CLI_CORE_OBJ) $(BUILD)/libairlock.a $(LDFLAGS) \
		$(LIBS) $(CLI_LIBS) -lcmocka
# The growable structs' ABI (tests/unit/test_abi_grown.c): the two objects
# that read a caller's run options and tool definitions, built with
# AIRLOCK_ABI_GROWN (a field added to each after the first version) and linked
# ahead of the archive, whose own copies of them are then never pulled in.
# The test reaches the rest of the library only through pointers to fields
# the first version already had.
ABI_GROWN_OBJ := $(BUILD)/grown/src/lib/core/util.o $(BUILD)/grown/src/lib/config/config.o
$(BUILD)/grown/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $< (AIRLOCK_ABI_GROWN)"
	@$(CC) $(CFLAGS) -DAIRLOCK_ABI_GROWN -c $< -o $@
$(BUILD)/tests/test_abi_grown: tests/unit/test_abi_grown.c $(ABI_GROWN_OBJ) $(BUILD)/libairlock.a | build/.deps-check
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -DAIRLOCK_ABI_GROWN -Itests -o $@ $< $(ABI_GROWN_OBJ) $(BUILD)/libairlock.a \
		$(LDFLAGS) $(LIBS) -lcmocka
$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libairlock.a | build/.deps-check
	$(call link_test,-lcmocka)
$(BUILD)/tests/%: tests/sandbox/%.c $(BUILD)/libairlock.a | build/.deps-check
	$(call link_test,-lcmocka)
$(BUILD)/tests/%: tests/helpers/%.c $(BUILD)/libairlock.a | build/.deps-check
	$(call link_test,)

# Fuzz corpus replays: each fuzzer's entry point built as a plain program.
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_REPLAY_BIN := $(FUZZ_SRC:fuzz/fuzz_%.c=$(BUILD)/fuzz/replay_%)
FUZZ_CLI_OBJ := $(BUILD)/src/cli/options.o $(BUILD)/src/mcp/tenants.o $(BUILD)/src/mcp/sha256.o \
                $(BUILD)/src/mcp/tenant_gen.o
$(BUILD)/fuzz/replay_%: fuzz/fuzz_%.c fuzz/replay_main.c $(FUZZ_CLI_OBJ) $(BUILD)/libairlock.a
	@mkdir -p $(dir $@)
	@echo "  CCLD    $@"
	@$(CC) $(CFLAGS) -Isrc/cli -Isrc/mcp -DFUZZ_NAME='"$*"' -DFUZZ_DIR='"$(CURDIR)/fuzz"' -o $@ \
		fuzz/fuzz_$*.c fuzz/replay_main.c $(FUZZ_CLI_OBJ) $(BUILD)/libairlock.a $(LDFLAGS) $(LIBS)

tests: all $(TEST_BIN) $(TEST_HELPER_BIN) $(FUZZ_REPLAY_BIN)

# The targets that install what they need first. Each installs in its own
# recipe, then builds through a sub-make, so that with -j nothing is compiled
# before the packages are there.
# Test files run JOBS at a time (one per core by default; JOBS=1 runs them
# one after another).
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
check:
	@$(INSTALL_DEPS) check
	@$(MAKE) --no-print-directory tests
	@$(MAKE) --no-print-directory SAN=asan tests
	@$(MAKE) --no-print-directory python
	@bash tests/run.sh -j$(JOBS) $(BUILD)

# The quick loop: the build, the unit tests and the C tests that start real
# sandboxes; no sanitizer build, no black-box, package or client tiers.
check-quick:
	@$(INSTALL_DEPS) check
	@$(MAKE) --no-print-directory tests
	@bash tests/run.sh -j$(JOBS) $(BUILD) unit sandbox format

# The pure unit tests alone: no sandbox, no namespaces, no root; seconds.
check-unit:
	@$(INSTALL_DEPS) check
	@$(MAKE) --no-print-directory $(UNIT_TEST_BIN)
	@bash tests/run.sh $(BUILD) unit

asan:
	@$(MAKE) --no-print-directory SAN=asan tests

demo:
	@$(INSTALL_DEPS) demo
	@$(MAKE) --no-print-directory all
	@bash examples/demo.sh $(BUILD)/airlock

bench:
	@$(INSTALL_DEPS) bench
	@$(MAKE) --no-print-directory all python
	@bash bench/run.sh $(BUILD) $(if $(QUICK),--quick)

soak:
	@$(INSTALL_DEPS) check
	@$(MAKE) --no-print-directory SAN=asan all build/asan/tests/soak
	@bash tests/soak.sh build/asan
	@$(MAKE) --no-print-directory python
	@AIRLOCK_PY_LEAK_RUNS=$(or $(SOAK_RUNS),10000) $(PYTHON) -m pytest -q -s -p no:cacheprovider \
		tests/python/test_leak.py

fuzz:
	@$(INSTALL_DEPS) fuzz
	@$(MAKE) --no-print-directory -f fuzz/fuzz.mk fuzz FUZZ_SECONDS=$(or $(FUZZ_SECONDS),60)

# make install [PREFIX=/usr/local] [DESTDIR=...]: the shared library (with its
# SONAME link and the development link), the static library, airlock.h, the
# airlock program and airlock.pc. Nothing here needs root unless the folders
# do.
PREFIX     ?= /usr/local
prefix     ?= $(PREFIX)
exec_prefix ?= $(prefix)
bindir     ?= $(exec_prefix)/bin
libdir     ?= $(exec_prefix)/lib
includedir ?= $(prefix)/include
pkgconfigdir ?= $(libdir)/pkgconfig
datadir    ?= $(prefix)/share
man1dir    ?= $(datadir)/man/man1
bashcompdir ?= $(datadir)/bash-completion/completions

# A generated file depends on the values of the variables it contains, not
# only on the files that define them: each has a stamp holding those values,
# rewritten only when they change, so that `make install PREFIX=/usr/local`
# after airlock.pc was made with another prefix makes it again.
PC_VARS = prefix=$(prefix) exec_prefix=$(exec_prefix) libdir=$(libdir) \
          includedir=$(includedir) version=$(VERSION) libs_private=$(LIBS)
$(BUILD)/airlock.pc.vars: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(PC_VARS)' | cmp -s - $@ 2>/dev/null || printf '%s\n' '$(PC_VARS)' > $@
FORCE:

$(BUILD)/airlock.pc: Makefile include/airlock.h $(BUILD)/airlock.pc.vars
	@mkdir -p $(dir $@)
	@{ echo 'prefix=$(prefix)'; \
	   echo 'exec_prefix=$(if $(filter $(prefix),$(exec_prefix)),$${prefix},$(exec_prefix))'; \
	   echo 'libdir=$(if $(filter $(exec_prefix)/lib,$(libdir)),$${exec_prefix}/lib,$(libdir))'; \
	   echo 'includedir=$(if $(filter $(prefix)/include,$(includedir)),$${prefix}/include,$(includedir))'; \
	   echo; \
	   echo 'Name: airlock'; \
	   echo 'Description: run untrusted Python in a Linux sandbox, move files in and out safely'; \
	   echo 'Version: $(VERSION)'; \
	   echo 'Cflags: -I$${includedir}'; \
	   echo 'Libs: -L$${libdir} -lairlock'; \
	   echo 'Libs.private: $(strip $(LIBS))'; } > $@.tmp && mv $@.tmp $@

# The man page and the bash completion, written by the program from its
# option table; docs/options.md too (`make docs`, committed, checked by
# tests/blackbox/test_cli.py).
$(BUILD)/airlock.1: $(BUILD)/airlock
	@$(BUILD)/airlock help --man > $@.tmp && mv $@.tmp $@
$(BUILD)/airlock.bash: $(BUILD)/airlock
	@$(BUILD)/airlock help --bash > $@.tmp && mv $@.tmp $@
docs: $(BUILD)/airlock
	$(BUILD)/airlock help --markdown > docs/options.md
.PHONY: docs

install: all $(BUILD)/airlock.pc $(BUILD)/airlock.1 $(BUILD)/airlock.bash
	install -d $(DESTDIR)$(bindir) $(DESTDIR)$(libdir) $(DESTDIR)$(includedir) \
		$(DESTDIR)$(pkgconfigdir) $(DESTDIR)$(man1dir) $(DESTDIR)$(bashcompdir)
	install -m 0644 $(BUILD)/airlock.1 $(DESTDIR)$(man1dir)/airlock.1
	install -m 0644 $(BUILD)/airlock.bash $(DESTDIR)$(bashcompdir)/airlock
	install -m 0755 $(BUILD)/airlock $(DESTDIR)$(bindir)/airlock
	install -m 0755 $(BUILD)/$(SOFILE) $(DESTDIR)$(libdir)/$(SOFILE)
	ln -sfn $(SOFILE) $(DESTDIR)$(libdir)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(libdir)/libairlock.so
	install -m 0644 include/airlock.h include/airlock-jansson.h $(DESTDIR)$(includedir)/
	install -m 0644 $(BUILD)/libairlock.a $(DESTDIR)$(libdir)/libairlock.a
	install -m 0644 $(BUILD)/airlock.pc $(DESTDIR)$(pkgconfigdir)/airlock.pc
ifeq ($(DESTDIR),)
	@$(LDCONFIG_STEP)
endif

# After an install without DESTDIR (a packager's staging runs ldconfig in its
# own scripts): where the dynamic loader searches libdir by itself (its
# trusted folders and those of /etc/ld.so.conf), ldconfig refreshes its cache,
# without which a fresh /usr/local/lib/libairlock.so.0 is not found; elsewhere
# the line that adds it is printed. LD_LIBRARY_PATH is no way out: the
# sandbox's template is the program executed afresh with an empty environment.
LDCONFIG ?= ldconfig
LOADER_DIRS ?= /lib /usr/lib $(shell $(LDCONFIG) -v -N -X 2>/dev/null | sed -n 's,^\(/[^:]*\):.*,\1,p')
define LDCONFIG_STEP
if printf '%s\n' $(LOADER_DIRS) | grep -qxF '$(patsubst %/,%,$(libdir))'; then \
	echo '$(LDCONFIG)'; $(LDCONFIG) || echo 'airlock: run ldconfig as root, or programs will not find $(libdir)/$(SONAME)'; \
else \
	echo 'airlock: $(libdir) is not a folder the dynamic loader searches: programs linked with'; \
	echo '  libairlock find it only after (as root)'; \
	echo '    echo $(libdir) > /etc/ld.so.conf.d/airlock.conf && ldconfig'; \
	echo '  or when linked with -Wl,-rpath,$(libdir) (LD_LIBRARY_PATH does not reach the'; \
	echo '  sandbox template, which runs with an empty environment)'; \
fi
endef

# The ABI baseline that tests/build/test_abi.sh compares libairlock.so with:
# run it and commit abi/libairlock.abi when the ABI changes on purpose.
abi-baseline: $(BUILD)/libairlock.so
	@mkdir -p abi
	abidw --headers-dir include --drop-private-types --no-corpus-path \
		--out-file abi/libairlock.abi $(BUILD)/libairlock.so
.PHONY: abi-baseline

uninstall:
	rm -f $(DESTDIR)$(bindir)/airlock $(DESTDIR)$(libdir)/$(SOFILE) \
		$(DESTDIR)$(libdir)/$(SONAME) $(DESTDIR)$(libdir)/libairlock.so $(DESTDIR)$(libdir)/libairlock.a \
		$(DESTDIR)$(includedir)/airlock.h $(DESTDIR)$(includedir)/airlock-jansson.h \
		$(DESTDIR)$(pkgconfigdir)/airlock.pc $(DESTDIR)$(man1dir)/airlock.1 \
		$(DESTDIR)$(bashcompdir)/airlock

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' 2>/dev/null || find include src tests fuzz bench -name '*.[ch]')
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	@clang-format --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(ABI_GROWN_OBJ:.o=.d) $(GUEST_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_BIN:=.d) $(TEST_HELPER_BIN:=.d) \
         $(FUZZ_REPLAY_BIN:=.d)

# The Python package (python/, `import airlock`): the extension built in place
# against this tree's build/libairlock.so (its rpath), with Debian's
# python3 and setuptools, no network. PYTHONPATH=python then imports it;
# `pip install --no-build-isolation ./python` installs it (see python/README.md).
PYTHON ?= /usr/bin/python3
# setuptools compares the extension with its C source alone: a changed
# airlock.h (a struct that grew) or library would leave a stale module. The
# stamp depends on all of them, and the build is then forced.
python: $(BUILD)/python.stamp
	@ls python/airlock/_airlock*.so >/dev/null 2>&1 || \
		{ rm -f $(BUILD)/python.stamp && $(MAKE) --no-print-directory $(BUILD)/python.stamp; }
$(BUILD)/python.stamp: python/src/_airlock.c include/airlock.h python/setup.py $(BUILD)/libairlock.so
	@echo "  PYEXT   python/airlock/_airlock"
	@cd python && AIRLOCK_BUILD=$(CURDIR)/$(BUILD) $(PYTHON) -W ignore setup.py -q build_ext \
		--force --inplace --build-temp $(CURDIR)/$(BUILD)/python
	@touch $@
.PHONY: python
