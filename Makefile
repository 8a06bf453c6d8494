# Corral build. Outputs go to $(O) (default .output/); override with O=dir.
# `make V=1` shows commands. See README for targets.
.DELETE_ON_ERROR:
.SUFFIXES:
.DEFAULT_GOAL := all

O ?= .output
PREFIX ?= /usr/local
DESTDIR ?=
CC ?= gcc
CLANG ?= clang
BPFTOOL ?= bpftool
ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
SAN ?=
FUZZ ?=

ifeq ($(V),1)
Q :=
msg =
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

PKGS := libseccomp jansson yajl inih libsystemd libcurl libmicrohttpd gnutls sqlite3 libpq libzstd \
	libnl-3.0 libnl-genl-3.0 libbpf libcgroup
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wmissing-prototypes -Wstrict-prototypes \
	-Wno-unused-parameter -Wno-missing-field-initializers -Wvla -Wpointer-arith \
	-Wundef -Wimplicit-fallthrough
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=gnu11 $(WARN) -D_GNU_SOURCE -fno-strict-aliasing -MMD -MP \
	-I. -I$(O) -I$(O)/bpf $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS ?=
ALL_LDLIBS := -Wl,--as-needed $(PKG_LIBS) -lcrypto -lm -ldl

ifeq ($(SAN),1)
ALL_CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(FUZZ),1)
ALL_CFLAGS += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -DCORRAL_FUZZ=1
LDFLAGS += -fsanitize=address,undefined
endif

# ---- sources --------------------------------------------------------------------------------
# Every *.c in a module home is library code, except *_main.c (program entry points) and
# *.bpf.c (kernel side). Programs link libcorral.a.
MODULES := common isolation accounting bpf collector agent
LIB_SRCS := $(filter-out %_main.c %.bpf.c,$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
LIB_OBJS := $(patsubst %.c,$(O)/%.o,$(LIB_SRCS))
BPF_SRCS := $(wildcard bpf/*.bpf.c)
BPF_SKELS := $(patsubst bpf/%.bpf.c,$(O)/bpf/%.skel.h,$(BPF_SRCS))
LIB := $(O)/libcorral.a

PROGRAMS := $(O)/corrald $(O)/corralctl $(O)/corral-collector $(O)/corral-spawn
corrald_SRC := agent/corrald_main.c
corralctl_SRC := agent/corralctl_main.c
corral-collector_SRC := collector/collector_main.c
corral-spawn_SRC := agent/spawn_main.c

UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_TESTS := $(patsubst tests/unit/%.c,$(O)/tests/unit/%,$(UNIT_SRCS))
# Test helper programs (integration/bench): tests/*/helper_*.c, linked with libcorral.a.
HELPER_SRCS := $(wildcard tests/integration/helper_*.c tests/bench/helper_*.c tests/vm/helper_*.c)
HELPERS := $(patsubst %.c,$(O)/%,$(HELPER_SRCS))
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS := $(patsubst tests/fuzz/%.c,$(O)/tests/fuzz/%,$(FUZZ_SRCS))

# Fragments (<dir>/<name>.mk) may add to TEST_LDFLAGS_<test>, LIB_OBJS, EXTRA_TARGETS and rules.
-include $(wildcard */*.mk tests/*/*.mk)

# ---- BPF ------------------------------------------------------------------------------------
# vmlinux.h policy: generated from the running kernel's BTF into a temp file and replaced only
# when it changed (cmp -s || mv), removed on failure. Override with VMLINUX_H=path.
VMLINUX_BTF ?= /sys/kernel/btf/vmlinux
ifdef VMLINUX_H
$(O)/vmlinux.h: $(VMLINUX_H) | $(O)
	$(Q)cp $< $@
else
$(O)/vmlinux.h: | $(O)
	$(call msg,GEN,$@)
	$(Q)$(BPFTOOL) btf dump file $(VMLINUX_BTF) format c > $@.tmp || { rm -f $@.tmp; exit 1; }
	$(Q)cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
endif

BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -I$(O) -I. -Wall -Werror \
	-Wno-unused-function
$(O)/bpf/%.bpf.o: bpf/%.bpf.c $(O)/vmlinux.h $(wildcard bpf/*.h) | $(O)/bpf
	$(call msg,BPF,$@)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@.tmp.o
	$(Q)$(BPFTOOL) gen object $@ $@.tmp.o && rm -f $@.tmp.o

$(O)/bpf/%.skel.h: $(O)/bpf/%.bpf.o
	$(call msg,SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< > $@

# ---- version --------------------------------------------------------------------------------
# The programs' --version and the corral_build_info metric: VERSION, followed by what git
# describes when the tree is a checkout (a tarball gives VERSION alone). Override with
# CORRAL_VERSION=. The header is replaced only when the text changed (cmp -s || mv).
VERSION := 0.1.0
GIT_DESCRIBE := $(shell git describe --always --dirty 2>/dev/null)
CORRAL_VERSION ?= $(VERSION)$(if $(GIT_DESCRIBE),+g$(GIT_DESCRIBE))
$(O)/corral_version.h: FORCE | $(O)
	$(Q)printf '#define CORRAL_VERSION "%s"\n' '$(CORRAL_VERSION)' > $@.tmp
	$(Q)cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
.PHONY: FORCE
FORCE:
VERSION_USERS := $(O)/agent/corrald_main.o $(O)/agent/corralctl_main.o \
	$(O)/collector/collector_main.o $(O)/agent/hooks.o $(O)/agent/control.o \
	$(O)/collector/metrics.o
$(VERSION_USERS): $(O)/corral_version.h

# ---- C --------------------------------------------------------------------------------------
$(O) $(O)/bpf:
	$(Q)mkdir -p $@

# Objects built through pattern rules (test programs) are kept, not deleted as intermediates:
# otherwise every later make would compile them again.
.SECONDARY:

$(O)/%.o: %.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

# Sources that include a generated skeleton wait for the skeletons.
SKEL_USERS := $(patsubst %.c,$(O)/%.o,$(shell grep -l 'skel\.h' $(LIB_SRCS) 2>/dev/null))
$(SKEL_USERS): | $(BPF_SKELS)
# the spool dictionary is linked in with .incbin (accounting/zframe.h)
$(O)/accounting/zframe.o: accounting/spool_dict_v1.ndjson

$(LIB): $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

define program_rule
$(O)/$(1): $(O)/$(patsubst %.c,%.o,$($(1)_SRC)) $(LIB)
	$$(call msg,LD,$$@)
	$$(Q)$$(CC) $$(LDFLAGS) -o $$@ $$^ $$(ALL_LDLIBS)
endef
$(foreach p,corrald corralctl corral-collector,$(eval $(call program_rule,$(p))))

# corral-spawn is linked statically (static-pie: its code is still placed at random): every
# launch forks a copy of it and the copy's exit tears it down, at a cost that grows with its
# mappings (docs/design.md, "Process layout"). Sanitizer and fuzzer builds cannot link
# statically and take the shared libraries.
ifeq ($(SAN)$(FUZZ),)
SPAWN_LDLIBS := -static-pie -lseccomp -ljansson -lm
else
SPAWN_LDLIBS := $(ALL_LDLIBS)
endif
$(O)/corral-spawn: $(O)/agent/spawn_main.o $(LIB)
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(SPAWN_LDLIBS)

$(O)/tests/unit/%: $(O)/tests/unit/%.o $(LIB)
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS) $(TEST_LDFLAGS_$*) -o $@ $^ $(ALL_LDLIBS) -lcmocka


$(O)/tests/%: $(O)/tests/%.o $(LIB)
	$(call msg,LD,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(ALL_LDLIBS) -lpthread

$(O)/tests/fuzz/%: tests/fuzz/%.c $(LIB)
	$(call msg,FUZZ,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer,address,undefined -o $@ $< $(LIB) $(ALL_LDLIBS)

# ---- targets --------------------------------------------------------------------------------
.PHONY: all programs unit-build helpers unit unit-asan integration integration-asan vm fuzz fuzz-build check clang-build \
	bench demo deps install clean format format-check layout-check man-check

all: $(PROGRAMS) $(HELPERS) $(UNIT_TESTS) $(EXTRA_TARGETS)
programs: $(PROGRAMS)
unit-build: $(UNIT_TESTS)
helpers: $(HELPERS)

unit: $(UNIT_TESTS)
	$(Q)tests/run-suite unit $(UNIT_TESTS)

unit-asan:
	$(Q)$(MAKE) --no-print-directory O=$(O)/asan SAN=1 unit

integration: all
	$(Q)tests/run-suite integration $(filter-out tests/integration/lib.sh tests/integration/collector_lib.sh tests/integration/slurm_lib.sh tests/integration/rapl_lib.sh,$(wildcard tests/integration/*.sh))

# The programs and helpers built with ASan+UBSan through the integration tests; a sanitizer
# report (a leak at a daemon's exit included) fails the suite. Left out: the tests whose tasks
# would run LeakSanitizer's tracer under a seccomp profile that denies ptrace (audit_syscall,
# agent_gpu) or that count a task's forks, which that tracer adds to (metering_accuracy).
ASAN_INTEGRATION = agent_launch agent_audit agent_metering audit_events cgroup_v1 \
	collector_audit collector_ingest collector_report collector_tls collector_listen \
	pipeline_faults seccomp_workloads metering_fallback gpu_limits hostile_clients sandbox \
	report_escape compact_records run_wait operator_cli metrics_lint report_energy_html \
	energy_restart gpu_energy
integration-asan:
	$(Q)$(MAKE) --no-print-directory O=$(O)/asan SAN=1 all
	$(Q)tests/run-asan-integration $(O)/asan \
		$(patsubst %,tests/integration/%.sh,$(ASAN_INTEGRATION))

vm: all
	$(Q)tests/vm/run

fuzz-build:
	$(Q)$(MAKE) --no-print-directory O=$(O)/fuzz CC=$(CLANG) FUZZ=1 $(patsubst $(O)/%,$(O)/fuzz/%,$(FUZZERS))

# Each fuzzer runs FUZZ_SECONDS on its seed corpus (tests/fuzz/corpus/<name>/).
FUZZ_SECONDS ?= 20
fuzz: fuzz-build
	$(Q)tests/fuzz/run $(O)/fuzz/tests/fuzz $(FUZZ_SECONDS)

# Warnings-clean under clang too (the default build is gcc).
clang-build:
	$(Q)$(MAKE) --no-print-directory O=$(O)/clang CC=$(CLANG) all

# The layers of agent/: no include or call cycle, nothing uses a higher layer.
layout-check: all
	$(Q)tests/include_graph.py --objects $(O)
	$(Q)python3 tests/funclen.py

# The man pages against the programs' --help, getopt tables, configuration keys and commands,
# and mandoc -T lint (tests/man_check.py).
man-check: programs
	$(Q)tests/man_check.py $(O)

check: deps format-check all layout-check man-check unit unit-asan clang-build fuzz integration integration-asan vm

bench: all
	$(Q)tests/bench/run

# The demo installs and builds only what it runs (tests/deps.sh demo: no test-only package).
demo:
	$(Q)tests/deps.sh demo
	$(Q)$(MAKE) --no-print-directory programs
	$(Q)tests/demo.sh

# Everything make check needs (the demo's packages too).
deps:
	$(Q)tests/deps.sh test

install: $(PROGRAMS)
	$(Q)systemd/install.sh "$(DESTDIR)" "$(PREFIX)" "$(O)"

clean:
	rm -rf $(O)

FORMAT_SRCS := $(shell find common isolation accounting bpf collector agent tests -name '*.[ch]' 2>/dev/null)
format:
	clang-format -i $(FORMAT_SRCS)
format-check:
	$(Q)clang-format --dry-run --Werror $(FORMAT_SRCS)

-include $(shell find $(O) -name '*.d' 2>/dev/null)
export CORRAL_O := $(abspath $(O))
