# bpf/meter.bpf.c uses BPF atomics (fetch-add with result, xchg, cmpxchg): needs -mcpu=v3.
$(O)/bpf/meter.bpf.o: BPF_CFLAGS += -mcpu=v3
