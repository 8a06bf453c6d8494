# helper_meter_bench loads bpf/switch_floor.bpf.c through its skeleton.
$(O)/tests/bench/helper_meter_bench.o: | $(O)/bpf/switch_floor.skel.h
