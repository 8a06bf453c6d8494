# bpf/meter.bpf.c uses BPF atomics (fetch-add with result, xchg, cmpxchg): needs -mcpu=v3.
$(O)/bpf/meter.bpf.o: BPF_CFLAGS += -mcpu=v3
# The map of dying threads (accounting at exit) holds task references: a __kptr field, whose
# BTF type tag clang emits from version 15 (Debian 12's default clang is 14). Without such a
# clang the object still builds; the kernel then refuses that mode and the loader falls back
# to accounting at every sched_switch.
METER_CLANG := $(firstword $(shell command -v clang-16 clang-15 2>/dev/null) $(CLANG))
$(O)/bpf/meter.bpf.o: CLANG := $(METER_CLANG)
