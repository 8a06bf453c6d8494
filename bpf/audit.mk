# bpf/audit.bpf.c: bounded loops and atomics, as meter.bpf.c.
$(O)/bpf/audit.bpf.o: BPF_CFLAGS += -mcpu=v3
