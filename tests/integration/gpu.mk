# GPU stand-ins (tests without a GPU): libnvidia-ml.so.1 fed from a fixture file and a
# malloc-backed libcuda.so.1 exporting the real driver API symbols. See docs/gpu.md.
GPU_STUB_CFLAGS := -std=gnu11 $(WARN) -D_GNU_SOURCE -O2 -g -fPIC -shared
GPU_STUBS := $(O)/tests/gpu/libnvidia-ml.so.1 $(O)/tests/gpu/libcuda.so.1

$(O)/tests/gpu/libnvidia-ml.so.1: tests/integration/gpu_stubs/fake_nvml.c
	$(call msg,SO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(GPU_STUB_CFLAGS) -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

$(O)/tests/gpu/libcuda.so.1: tests/integration/gpu_stubs/fake_cuda.c
	$(call msg,SO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(GPU_STUB_CFLAGS) -Wl,-soname,libcuda.so.1 -o $@ $<

EXTRA_TARGETS += $(GPU_STUBS)
# The unit test dlopens the stand-in NVML next to its own binary ($(O)/tests/gpu/).
$(O)/tests/unit/test_gpu: | $(GPU_STUBS)
# cuda.bpf.c uses atomic fetch-and-add (BPF ISA v3; clang 14 defaults to v1).
$(O)/bpf/cuda.bpf.o: BPF_CFLAGS += -mcpu=v3
