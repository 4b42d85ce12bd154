# wsync — one Makefile, out-of-tree builds under $(BUILD).
#   make            build everything (installs missing Debian packages first)
#   make test       build and run the whole suite
#   make check      the suite under ASan+UBSan (build-asan/)
#   make demo       broker + trainer + collectors for ~10 s, then a summary
#   make install PREFIX=/usr/local    (make uninstall takes it out again)
#   make help       every target; V=1 shows the commands

PREFIX  ?= /usr/local
# Debian's interpreter (the python3 first on PATH may be another build
# without numpy): the Python tests, and where make install puts the package.
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
CC      ?= cc
SAN     ?=
V       ?= 0

ifeq ($(V),1)
Q :=
else
Q := @
endif

VERSION := 0.2.0
SOMAJOR := 0

# Debian packages the build, the tests and the demo need.
# libclang-rt-dev holds clang's sanitizer and libFuzzer runtimes (make check,
# check-tsan, fuzz); it is only a Recommends of clang.
DEB_PKGS := build-essential pkg-config liburing-dev libjemalloc-dev libcmocka-dev \
            libxxhash-dev libncurses-dev libjansson-dev libmicrohttpd-dev scdoc clang \
            libclang-rt-dev libsystemd-dev libzstd-dev
# `make deps` installs them; every compile waits for it (an order-only
# prerequisite: it never makes anything stale), so make -jN on a fresh
# machine has the headers before it compiles. NODEPS=1 leaves apt alone: a
# package build (debian/control names the build-dependencies) and the
# wheel's backend (python-lib, python-broker).
ifeq ($(NODEPS)$(filter python-lib python-broker,$(MAKECMDGOALS)),)
DEPS_FIRST := deps
endif

CPPFLAGS += -I. -Ilibclient -D_GNU_SOURCE
CFLAGS   ?= -O2 -g
CFLAGS   += -std=gnu11 -Wall -Wextra -Werror -fPIC -pthread \
            -fvisibility=hidden -Wshadow -Wstrict-prototypes -Wmissing-prototypes
LDFLAGS  += -pthread

comma := ,
# The library's fast paths clear of the JCC erratum of Skylake-derived Intel
# CPUs (a jump that touches a 32-byte boundary is not kept in the decoded-uop
# cache): acquire+release 20 -> 18 ns on an Intel Xeon (docs/BENCHMARKS.md).
# gcc passes it to the assembler, clang takes it itself; nothing elsewhere.
ifeq ($(shell uname -m),x86_64)
JCC_FLAG := $(firstword $(foreach f,-mbranches-within-32B-boundaries \
              -Wa$(comma)-mbranches-within-32B-boundaries,$(if $(shell $(CC) $(f) -x c \
              -c -o /dev/null /dev/null 2>/dev/null && echo y),$(f))))
endif

ifeq ($(SAN),asan)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(SAN),tsan)
CFLAGS  += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS += -fsanitize=thread
endif

CUDA_HOME ?= /usr/local/cuda
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
CPPFLAGS += -DWSYNC_HAVE_CUDA_H -I$(CUDA_HOME)/include
HAVE_CUDA_H := 1
endif

SHM_SRC    := $(sort $(wildcard shm/*.c))
CLIENT_SRC := $(sort $(wildcard libclient/*.c))
BROKER_SRC := $(sort $(wildcard broker/*.c))
TESTLIB_SRC:= $(sort $(wildcard tests/lib/*.c))
# The relay's codec (libwsync-delta, docs/MULTINODE.md): its own library, so
# that libzstd stays out of libwsync.
DELTA_SRC  := $(sort $(wildcard tools/relay/*.c))
UNIT_SRC   := $(sort $(wildcard tests/unit/*.c))
INTEG_SRC  := $(sort $(wildcard tests/integ/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

SHM_OBJ    := $(call obj,$(SHM_SRC))
CLIENT_OBJ := $(call obj,$(CLIENT_SRC))
BROKER_OBJ := $(call obj,$(BROKER_SRC))
TESTLIB_OBJ:= $(call obj,$(TESTLIB_SRC))
DELTA_OBJ  := $(call obj,$(DELTA_SRC))

LIB_A   := $(BUILD)/lib/libwsync.a
LIB_SO  := $(BUILD)/lib/libwsync.so.$(VERSION)
DELTA_SO := $(BUILD)/lib/libwsync-delta.so.$(VERSION)
WSYNCD  := $(BUILD)/bin/wsyncd
# The broker with fault injection compiled in (broker/fault.h), for tests only.
WSYNCD_FAULT := $(BUILD)/tests/wsyncd-fault
WSYNCD_FAULT_OBJ := $(filter-out $(BUILD)/obj/broker/fault.o,$(BROKER_OBJ)) \
                    $(BUILD)/obj-fault/broker/fault.o
DEMO    := $(BUILD)/bin/wsync-demo
BENCH   := $(BUILD)/bin/wsync-bench
# Each program has its folder: tools/ctl is wsyncctl, tools/X is wsync-X;
# tools/common holds what they share (the control-segment reader, the
# broker's health, the JSON and error contract of every tool).
TOOL_DIRS := ctl top bench demo
tool_bin   = $(BUILD)/bin/$(if $(filter ctl,$(1)),wsyncctl,wsync-$(1))
TOOLS     := $(foreach d,$(TOOL_DIRS),$(call tool_bin,$(d)))
TOOL_COMMON_OBJ := $(call obj,$(sort $(wildcard tools/common/*.c)))
UNIT_BIN  := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
INTEG_BIN := $(patsubst tests/integ/%.c,$(BUILD)/tests/integ/%,$(INTEG_SRC))

LIBS_CLIENT := -lxxhash -ldl -lrt
# libsystemd: sd_notify for Type=notify services (broker/service.c)
LIBS_BROKER := -luring -ljemalloc -lsystemd -lxxhash -ldl -lrt
# the relay's delta codec (tools/relay/): zstd stays out of libwsync
LIBS_DELTA  := -lzstd -lxxhash

# Man pages, written in scdoc (docs/man/*.scd), built into $(BUILD)/man.
MAN_SRC   := $(sort $(wildcard docs/man/*.scd))
MAN_PAGES := $(patsubst docs/man/%.scd,$(BUILD)/man/%,$(MAN_SRC))
# The service: systemd user units (wsyncd.service, wsyncd@.service), made at
# install time, since they name PREFIX/bin/wsyncd.
UNITS     := $(patsubst tools/service/%.in,%,$(wildcard tools/service/*.in))
COMPLETED := wsyncctl wsync-top wsyncd wsync-demo wsync-bench wsync-relay

.PHONY: all deps test test-python check demo bench bench-relay install uninstall clean help \
        tests tools man layering test-gpu bench-gpu
all: $(DEPS_FIRST) $(LIB_A) $(LIB_SO) $(DELTA_SO) $(WSYNCD) $(TOOLS) $(MAN_PAGES)
tools: $(TOOLS)
man: $(MAN_PAGES)

$(BUILD)/man/%: docs/man/%.scd | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  SCDOC   $@")
	$(Q)scdoc < $< > $@.tmp && mv $@.tmp $@

help:
	@echo "build:"
	@echo "  make              libwsync (.a, .so), wsyncd, the tools and the man pages"
	@echo "                    into $(BUILD)/ (installs missing Debian packages first)"
	@echo "  make tools        only wsyncctl, wsync-top, wsync-demo, wsync-bench"
	@echo "  make man          only the man pages (scdoc): wsyncd(8), wsyncctl(1), wsync-top(1),"
	@echo "                    wsync-demo(1), wsync-bench(1), wsync-relay(1), libwsync(3)"
	@echo "  make deps         install missing Debian packages"
	@echo "test:"
	@echo "  make test         the layering check, unit + integration tests, then test-python,"
	@echo "                    each whatever the others did; the last line sums them all"
	@echo "  make layering     no include cycle among the headers of LAYER_DIRS, no call cycle"
	@echo "                    among the files of each (tests/layering.sh), and its self-test"
	@echo "  make test-python  the Python package's and the tools' tests (part of make test;"
	@echo "                    PYTEST_ARGS=tests/python/test_cli.py for some of them)"
	@echo "  make check        the suite under ASan+UBSan (build-asan/)"
	@echo "  make check-tsan   the concurrency tests under ThreadSanitizer (build-tsan/)"
	@echo "  make fuzz         libFuzzer harnesses, each FUZZ_SECONDS (60) on its seed corpus (build-fuzz/)"
	@echo "  make fuzz-smoke   the same, each ~$(FUZZ_SMOKE_SECONDS) s (CI)"
	@echo "  make test-gpu     the device tests against the real CUDA driver (libcuda.so.1),"
	@echo "                    saying what was verified and what was skipped; exit 0 without a GPU"
	@echo "  make soak         crash soak: kill -9 broker/trainers/group ranks/collectors for SOAK_SECONDS (120)"
	@echo "run:"
	@echo "  make demo         broker, trainer and collectors for ~10 s, then a summary"
	@echo "  make bench        wsync-bench (BENCH_ARGS=--quick for a short run), then bench-relay"
	@echo "  make bench-relay  wsync-relay's deltas on shaped 1 and 10 Gbit/s links (docs/MULTINODE.md)"
	@echo "  make bench-gpu    the GPU rows (wsync-bench --only gpu, torch's zero-copy use of a"
	@echo "                    device view, the serving scenario's GPU ways) against the real"
	@echo "                    CUDA driver; skipped without a GPU (or, for torch, without CUDA)"
	@echo "install:"
	@echo "  make install      into PREFIX=$(PREFIX) (DESTDIR honoured): headers, libraries,"
	@echo "                    wsync.pc, programs, man pages, systemd user units, bash"
	@echo "                    completion, the Python package"
	@echo "  make uninstall    removes all of that again (same PREFIX and DESTDIR)"
	@echo "  make wheel        the Python package as a wheel with libwsync, libwsync-delta,"
	@echo "                    wsyncd, wsyncctl and wsync-top inside"
	@echo "  make deb          Debian packages (wsync, libwsync0, libwsync-dev, python3-wsync)"
	@echo "                    into $(BUILD)/deb/, checked by lintian (docs/PACKAGING.md)"
	@echo "  make clean        remove the build directories"
	@echo "options: V=1 (show commands), CC=clang, BUILD=dir, SAN=asan|tsan|fuzz, PREFIX, DESTDIR, PYTHON"

# Installs only what is missing; apt-get as root or through sudo.
deps:
	$(Q)sh .ci/deps.sh $(DEB_PKGS)

$(BUILD)/obj/libclient/%.o: CFLAGS += $(JCC_FLAG)
$(BUILD)/obj/%.o: %.c | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB_A): $(CLIENT_OBJ) $(SHM_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(CLIENT_OBJ) $(SHM_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,libwsync.so.$(SOMAJOR) -Wl,--version-script=libclient/libwsync.map \
		$(LDFLAGS) -o $@ $^ $(LIBS_CLIENT)
	$(Q)ln -sf libwsync.so.$(VERSION) $(BUILD)/lib/libwsync.so.$(SOMAJOR)
	$(Q)ln -sf libwsync.so.$(VERSION) $(BUILD)/lib/libwsync.so

$(DELTA_SO): $(DELTA_OBJ) tools/relay/libwsync-delta.map
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,libwsync-delta.so.$(SOMAJOR) \
		-Wl,--version-script=tools/relay/libwsync-delta.map $(LDFLAGS) -o $@ $(DELTA_OBJ) $(LIBS_DELTA)
	$(Q)ln -sf libwsync-delta.so.$(VERSION) $(BUILD)/lib/libwsync-delta.so.$(SOMAJOR)
	$(Q)ln -sf libwsync-delta.so.$(VERSION) $(BUILD)/lib/libwsync-delta.so

$(WSYNCD): $(BROKER_OBJ) $(SHM_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_BROKER)

$(BUILD)/obj-fault/%.o: %.c | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (fault injection)")
	$(Q)$(CC) $(CPPFLAGS) -DWSYNC_FAULT_INJECTION $(CFLAGS) -MMD -MP -c $< -o $@

$(WSYNCD_FAULT): $(WSYNCD_FAULT_OBJ) $(SHM_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS_BROKER)

# The tools read and write JSON with jansson, draw with ncurses and serve
# metrics with libmicrohttpd (tools only, never libwsync).
TOOL_LIBS := -ljansson -lncursesw -lmicrohttpd
define tool_rule
$(call tool_bin,$(1)): $(call obj,$(sort $(wildcard tools/$(1)/*.c))) $(TOOL_COMMON_OBJ) $(LIB_A)
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo "  LD      $$@")
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) $$(LIB_A) $$(LIBS_CLIENT) -ljemalloc -lm $$(TOOL_LIBS)
endef
$(foreach d,$(TOOL_DIRS),$(eval $(call tool_rule,$(d))))

# Unit tests link the pieces they test directly (shm/ and broker/ objects
# except the broker's main), plus cmocka.
BROKER_LIB_OBJ := $(filter-out $(BUILD)/obj/broker/main.o,$(BROKER_OBJ))
$(BUILD)/tests/unit/%: $(BUILD)/obj/tests/unit/%.o $(BROKER_LIB_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(BROKER_LIB_OBJ) $(LIB_A) -lcmocka -luring -lsystemd $(LIBS_CLIENT)

# The safetensors parser is wsyncctl's, with jansson.
$(BUILD)/tests/unit/test_safetensors: $(BUILD)/obj/tests/unit/test_safetensors.o \
		$(BUILD)/obj/tools/ctl/safetensors.o $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_A) -lcmocka -ljansson $(LIBS_CLIENT)

# The relay's codec on its own (threads, zstd, every malformed stream).
$(BUILD)/tests/unit/test_delta: $(BUILD)/obj/tests/unit/test_delta.o $(DELTA_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) -lcmocka $(LIBS_DELTA)

$(BUILD)/tests/integ/%: $(BUILD)/obj/tests/integ/%.o $(TESTLIB_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TESTLIB_OBJ) $(LIB_A) $(LIBS_CLIENT)

tests: all $(UNIT_BIN) $(INTEG_BIN) $(WSYNCD_FAULT) $(FAKECUDA)

# Folders that read from the bottom up (tests/layering.sh): no #include
# cycle among their headers, and in each no two files that call each other,
# directly or around a loop (read from the built objects with nm).
LAYER_DIRS := shm libclient broker
define layering_check
	$(Q)CC="$(CC)" sh tests/layering_test.sh
	$(Q)sh tests/layering.sh -o $(BUILD)/obj $(filter -I%,$(CPPFLAGS)) $(LAYER_DIRS)
endef
layering: all
	$(layering_check)

# The Python tests load libwsync into the interpreter, which a sanitizer
# build cannot do without preloading its runtime: they run in plain builds.
# tests/suite.sh runs each suite even when one before it failed, and closes
# with the count of all of them on its own line (CI reads it).
test: tests
	$(Q)$(if $(SAN),echo "test-python: skipped in a SAN=$(SAN) build")
	$(Q)BUILD=$(BUILD) sh tests/suite.sh \
		layering 'CC="$(CC)" sh tests/layering_test.sh && \
			sh tests/layering.sh -o $(BUILD)/obj $(filter -I%,$(CPPFLAGS)) $(LAYER_DIRS)' \
		unit+integ 'sh tests/run.sh $(UNIT_BIN) $(INTEG_BIN)' \
		$(if $(SAN),,python '$(MAKE) --no-print-directory test-python')

# The Python binding's tests, through Debian's interpreter (the python3
# first on PATH may be another build without numpy). python3-torch is
# installed too, so the torch tests never skip here.
PYTHON ?= /usr/bin/python3
# tmux: the wsync-top test drives the interactive screen in a real terminal.
# python3-venv, python3-pip: the wheel test builds the wheel and installs it
# into a fresh venv. iproute2: the relay's tests shape a link between two
# network namespaces. python3-prometheus-client: the metrics test parses the
# exposition with the Prometheus project's own parser too.
# python3-pytest-xdist: the suite runs on PYTEST_JOBS processes, a file's
# tests on one of them (most of its time is process starts and waits).
PY_PKGS := python3-numpy python3-pytest python3-torch tmux python3-venv python3-pip iproute2 \
	python3-prometheus-client python3-pytest-xdist
# PYTEST_ARGS: which tests (default all of them), e.g. tests/python/test_cli.py
PYTEST_ARGS ?= tests/python
# PYTEST_JOBS: pytest processes (default one per CPU, at most 4; 1 runs the
# suite in this process, as without xdist)
PYTEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)
test-python: all
	$(Q)sh .ci/deps.sh $(PY_PKGS)
	$(Q)par=; if [ "$(PYTEST_JOBS)" -gt 1 ] && $(PYTHON) -c 'import xdist' 2>/dev/null; then \
		par="-n $(PYTEST_JOBS) --dist loadfile"; fi; \
	BUILD=$(BUILD) PYTHONPATH=libclient/python WSYNC_LIBRARY=$(BUILD)/lib/libwsync.so WSYNC_WSYNCD=$(WSYNCD) \
		$(PYTHON) -m pytest -q -p no:cacheprovider $$par $(PYTEST_ARGS)

check: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan SAN=asan CC=clang test

demo: all
	$(Q)$(DEMO) --wsyncd $(WSYNCD)

# The peer comparison needs Debian's torch; only the bench installs it.
BENCH_PKGS := python3-torch python3-numpy iproute2
bench: all
	$(Q)sh .ci/deps.sh $(BENCH_PKGS)
	$(Q)$(BENCH) --wsyncd $(WSYNCD) $(BENCH_ARGS)
	$(Q)$(MAKE) --no-print-directory bench-relay

# wsync-relay's deltas against whole versions of a 64 MiB model (16 MiB with
# --quick) on links shaped to 1 and 10 Gbit/s between two network namespaces
# (as root; else only the codec's figures), Adam-trained and synthetic
# updates. The loopback comparison with a bare gloo broadcast:
# tools/bench/relay_bench.py --loopback.
bench-relay: all
	$(Q)sh .ci/deps.sh $(BENCH_PKGS)
	$(Q)PYTHONPATH=libclient/python WSYNC_LIBRARY=$(BUILD)/lib/libwsync.so $(PYTHON) \
		tools/bench/relay_bench.py --wsyncd $(WSYNCD) $(filter --quick,$(BENCH_ARGS))

# The Python package goes where $(PYTHON) looks under PREFIX (Debian:
# /usr/local/lib/python3.X/dist-packages); _paths.py tells it where the
# library is, so it needs neither PYTHONPATH (for /usr and /usr/local) nor
# WSYNC_LIBRARY.
PYVER   = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)
PYSITE ?= $(PREFIX)/lib/python$(PYVER)/dist-packages
PY_SRC  = $(filter-out %/_paths.py,$(wildcard libclient/python/wsync/*.py)) libclient/python/wsync/py.typed

# What the Python package's build backend (libclient/python/backend) runs:
# the library, the broker and the tools it bundles in the wheel (the
# relay's codec, wsyncctl, wsync-top), without deps' apt.
.PHONY: python-lib python-broker python-tools wheel deb
python-lib: $(LIB_SO)
python-broker: $(WSYNCD)
python-tools: $(DELTA_SO) $(call tool_bin,ctl) $(call tool_bin,top)

# A wheel of the Python package with libwsync and wsyncd inside, built with
# nothing but the standard library (no index, no network): $(BUILD)/wheel/.
wheel: all
	$(Q)sh .ci/deps.sh $(PY_PKGS)
	$(Q)WSYNC_BUILD=$(BUILD) $(PYTHON) -m pip wheel -q --no-deps --no-index \
		-w $(BUILD)/wheel libclient/python
	@ls $(BUILD)/wheel/*.whl

# Debian packages from debian/ (wsync, libwsync0, libwsync-dev,
# python3-wsync) into $(BUILD)/deb/: dpkg-buildpackage in a copy of the tree
# that carries this build (nothing compiles twice), then lintian, which
# fails on an error. docs/PACKAGING.md.
DEB_TOOLS := dpkg-dev debhelper dh-python fakeroot lintian
DEB_DIR   := $(BUILD)/deb
DEB_TREE  := $(DEB_DIR)/wsync-$(VERSION)
deb: all
	$(Q)sh .ci/deps.sh $(DEB_TOOLS)
	$(Q)rm -rf $(DEB_DIR) && mkdir -p $(DEB_TREE)/build
	$(Q)if [ -e .git ]; then git ls-files -co --exclude-standard -z; \
		else find . -path './build*' -prune -o -type f -print0; fi | \
		xargs -0 cp -a --parents -t $(DEB_TREE)
	$(Q)cp -a $(BUILD)/obj $(BUILD)/lib $(BUILD)/bin $(BUILD)/man $(DEB_TREE)/build/
	$(Q)cd $(DEB_TREE) && DEB_BUILD_OPTIONS="nocheck $(DEB_BUILD_OPTIONS)" \
		dpkg-buildpackage -b -nc -us -uc > ../build.log 2>&1 || \
		{ tail -40 ../build.log; exit 1; }
	$(Q)lintian --fail-on error $(DEB_DIR)/*.changes
	@ls $(DEB_DIR)/*.deb

install: all
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 0644 libclient/wsync.h $(DESTDIR)$(PREFIX)/include/wsync.h
	install -m 0644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/libwsync.a
	install -m 0755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libwsync.so.$(VERSION)
	ln -sf libwsync.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libwsync.so.$(SOMAJOR)
	ln -sf libwsync.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libwsync.so
	install -m 0755 $(WSYNCD) $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3 \
		$(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/lib/systemd/user \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/wsync \
		$(DESTDIR)$(PREFIX)/share/doc/wsync
	for m in $(MAN_PAGES); do \
		install -m 0644 $$m $(DESTDIR)$(PREFIX)/share/man/man$${m##*.}/; done
	for u in $(UNITS); do sed -e 's|@PREFIX@|$(PREFIX)|g' tools/service/$$u.in \
		> $(DESTDIR)$(PREFIX)/lib/systemd/user/$$u; done
	install -m 0644 tools/completion/wsync.bash \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/wsyncctl
	for c in $(filter-out wsyncctl,$(COMPLETED)); do \
		ln -sf wsyncctl $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$c; done
	install -m 0644 tools/bench/torch_peers.py tools/bench/python_bench.py tools/bench/serving_bench.py \
		$(DESTDIR)$(PREFIX)/share/wsync/
	install -m 0644 LICENSE README.md $(DESTDIR)$(PREFIX)/share/doc/wsync/
	install -m 0755 $(DELTA_SO) $(DESTDIR)$(PREFIX)/lib/libwsync-delta.so.$(VERSION)
	ln -sf libwsync-delta.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libwsync-delta.so.$(SOMAJOR)
	sed -e 's|@PYTHON@|$(PYTHON)|g' -e 's|@PYSITE@|$(PYSITE)|g' tools/relay/wsync-relay.in \
		> $(DESTDIR)$(PREFIX)/bin/wsync-relay
	chmod 0755 $(DESTDIR)$(PREFIX)/bin/wsync-relay
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' libclient/wsync.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/wsync.pc
	install -d $(DESTDIR)$(PYSITE)/wsync
	install -m 0644 $(PY_SRC) $(DESTDIR)$(PYSITE)/wsync/
	printf '"""Written by make install: the libwsync installed with this package."""\nLIBRARY = "%s"\nDELTA_LIBRARY = "%s"\n' \
		'$(PREFIX)/lib/libwsync.so.$(SOMAJOR)' '$(PREFIX)/lib/libwsync-delta.so.$(SOMAJOR)' \
		> $(DESTDIR)$(PYSITE)/wsync/_paths.py
	@echo "installed the Python package wsync in $(PYSITE)"

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/wsync.h $(DESTDIR)$(PREFIX)/lib/libwsync.* \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig/wsync.pc $(DESTDIR)$(PREFIX)/bin/wsyncd \
		$(DESTDIR)$(PREFIX)/lib/libwsync-delta.* $(DESTDIR)$(PREFIX)/bin/wsync-relay \
		$(patsubst $(BUILD)/bin/%,$(DESTDIR)$(PREFIX)/bin/%,$(TOOLS)) \
		$(foreach m,$(MAN_PAGES),$(DESTDIR)$(PREFIX)/share/man/man$(subst .,,$(suffix $(m)))/$(notdir $(m))) \
		$(patsubst %,$(DESTDIR)$(PREFIX)/lib/systemd/user/%,$(UNITS)) \
		$(patsubst %,$(DESTDIR)$(PREFIX)/share/bash-completion/completions/%,$(COMPLETED))
	rm -rf $(DESTDIR)$(PYSITE)/wsync $(DESTDIR)$(PREFIX)/share/wsync $(DESTDIR)$(PREFIX)/share/doc/wsync

clean:
	rm -rf build build-asan build-tsan build-clang build-fuzz

# ---- reliability: fuzzing, crash soak, TSan (docs/RELIABILITY.md) ----------
FUZZ_SECONDS       ?= 60
FUZZ_SMOKE_SECONDS ?= 15
SOAK_SECONDS       ?= 120
FUZZ_NAMES := $(patsubst tests/fuzz/%.c,%,$(sort $(wildcard tests/fuzz/fuzz_*.c)))
FUZZ_BIN   := $(patsubst %,$(BUILD)/fuzz/%,$(FUZZ_NAMES))
# The tests whose processes or threads race on shared memory and sockets.
TSAN_INTEG ?= pubsub_basic no_torn_reads wake_all wait_timeout shutdown_wakes busy \
              kill_collector kill_trainer broker_restart sub_fd fault_eintr fault_soak_short \
              hostile_waits hostile_bursts hostile_models group_promises deleted_model_race slab_copy \
              checksum_default move_off_loop move_queue checksum_pending home_records
TSAN_BIN   := $(UNIT_BIN) $(patsubst %,$(BUILD)/tests/integ/%,$(TSAN_INTEG))

ifeq ($(SAN),fuzz)
CFLAGS  += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
           -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif

.PHONY: fuzz fuzz-smoke fuzz-run soak check-tsan tsan-run
$(BUILD)/fuzz/%: $(BUILD)/obj/tests/fuzz/%.o $(BROKER_LIB_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $< $(BROKER_LIB_OBJ) $(LIB_A) -luring -lsystemd $(LIBS_CLIENT)

# The relay's decoder, with its own library's objects.
$(BUILD)/fuzz/fuzz_delta: $(BUILD)/obj/tests/fuzz/fuzz_delta.o $(DELTA_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $(filter %.o,$^) $(LIBS_DELTA)

fuzz: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-fuzz SAN=fuzz CC=clang \
		FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz-run

fuzz-smoke:
	$(Q)$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)

fuzz-run: $(FUZZ_BIN)
	$(Q)BUILD=$(BUILD) sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_BIN)

$(BUILD)/tests/soak/%: $(BUILD)/obj/tests/soak/%.o $(TESTLIB_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(TESTLIB_OBJ) $(LIB_A) $(LIBS_CLIENT)

soak: all $(BUILD)/tests/soak/soak
	$(Q)BUILD=$(BUILD) SOAK_SECONDS=$(SOAK_SECONDS) WSYNC_TEST_TIMEOUT=$$(($(SOAK_SECONDS) + 120)) \
		sh tests/run.sh $(BUILD)/tests/soak/soak

check-tsan: deps
	$(Q)$(MAKE) --no-print-directory BUILD=build-tsan SAN=tsan CC=clang tsan-run

# Only what those tests run: the tools are never started by them, and under
# TSan they were a third of the build.
tsan-run: $(WSYNCD) $(TSAN_BIN)
	$(Q)BUILD=$(BUILD) TSAN_OPTIONS="halt_on_error=1 exitcode=66 $(TSAN_OPTIONS)" \
		sh tests/run.sh $(TSAN_BIN)

# ---- GPU: the fake CUDA driver the tests load (tests/fakecuda, docs/GPU.md) --
# Built only with the toolkit's cuda.h (its signatures are checked against
# it); it exports exactly the cu*/fakecuda_* functions it defines.
ifdef HAVE_CUDA_H
FAKECUDA     := $(BUILD)/tests/fakecuda/libcuda.so.1
FAKECUDA_OBJ := $(call obj,$(sort $(wildcard tests/fakecuda/*.c)))
FAKECUDA_LINK:= -L$(BUILD)/tests/fakecuda -l:libcuda.so.1 -Wl,-rpath,'$$ORIGIN/../fakecuda'
endif
# Here, once FAKECUDA is defined (prerequisites expand when read):
# gpu_slabs and test_gpu.py load the fake through WSYNC_LIBCUDA.
tests test-python tsan-run: $(FAKECUDA)

$(BUILD)/obj/tests/fakecuda/%.o: tests/fakecuda/%.c | $(DEPS_FIRST)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -fvisibility=default -MMD -MP -c $< -o $@

$(FAKECUDA): $(FAKECUDA_OBJ) tests/fakecuda/fakecuda.map
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,libcuda.so.1 -Wl,--version-script=tests/fakecuda/fakecuda.map \
		$(LDFLAGS) -o $@ $(FAKECUDA_OBJ)

# The first real GPU: the device tests and the GPU bench rows against the
# real driver (WSYNC_LIBCUDA unset: libcuda.so.1), unchanged; without a GPU
# they say so and exit 0. make test keeps using the fake (docs/GPU.md).
test-gpu: tests
	$(Q)sh .ci/deps.sh $(PY_PKGS)
	$(Q)BUILD=$(BUILD) PYTHON=$(PYTHON) sh tests/gpu_suite.sh test

bench-gpu: all
	$(Q)sh .ci/deps.sh $(BENCH_PKGS)
	$(Q)BUILD=$(BUILD) PYTHON=$(PYTHON) BENCH_ARGS="$(BENCH_ARGS)" sh tests/gpu_suite.sh bench

# test_fakecuda calls the fake driver directly, linked like the real one.
$(BUILD)/tests/unit/test_fakecuda: $(BUILD)/obj/tests/unit/test_fakecuda.o $(FAKECUDA)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(FAKECUDA_LINK) -lcmocka -ldl

# Keep objects of tools and tests between builds (they are intermediates of
# pattern rules, which make would otherwise delete).
.SECONDARY:

-include $(shell find $(BUILD)/obj $(BUILD)/obj-fault -name '*.d' 2>/dev/null)
